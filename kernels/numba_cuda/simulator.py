"""The Numba CUDA simulator made fit for the kernels: one shared array per launch, faster thread turns.

Importing this module under the simulator makes its static shared arrays thread-safe
(serialise_simulated_shared_arrays); simulator_switching() is the context a simulated launch runs in.
"""
from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np
from numba import types

from .device import SIMULATED

SIM_SWITCH_INTERVAL = 1e-4  # seconds; see simulator_switching()


# The simulator's static shared arrays. numba's FakeCUDAShared.array (0.68) allocates one lazily,
# keyed by the calling source line, with an unlocked get / np.empty / store: every thread of the
# launch's first block runs it at once, and a GIL switch between the get and the store (more likely
# under simulator_switching()'s short interval) hands two threads *different* arrays. One of them
# then writes where no other thread reads and reads np.empty garbage: a wrong or NaN result for
# that block only (4 in 10,000 launches of a 16-thread kernel on a loaded 2-core machine). A GPU
# has no such step. Dynamic shared memory (shape 0) is one buffer made before the threads start.
def serialise_simulated_shared_arrays() -> None:
    """Replace FakeCUDAShared.array with the same allocation (keyed by the caller's file and line),
    made under a lock, so every thread of a launch gets the same array. Idempotent."""
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    fake_shared = kernelapi.FakeCUDAShared
    if getattr(fake_shared.array, "serialised", False):
        return
    dynamic = fake_shared.array
    lock = threading.Lock()

    def array(self, shape, dtype):
        if shape == 0:
            return dynamic(self, shape, dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            res = self._allocations.get(key)
            if res is None:
                if isinstance(dtype, types.Type):
                    dtype = numpy_support.as_dtype(dtype)
                res = self._allocations[key] = np.empty(shape, dtype)
        return res

    array.serialised = True
    fake_shared.array = array


if SIMULATED:
    serialise_simulated_shared_arrays()



@contextlib.contextmanager
def simulator_switching():
    """Let the simulator's Python threads take turns faster during a launch.

    The simulator runs one Python thread per CUDA thread; at each barrier every one of them must get
    the GIL before the block moves on. Against the simulator's own polling scheduler, 0.1 ms instead
    of the default 5 ms made our simulated launches 3-10x faster (2 cores); with the barrier the
    threads release themselves (sandbox/devices/numba_scheduler.py) 0.1 ms is still the fastest:
    three variants' launches on a 113-token problem took 0.65 s at 0.1 ms, 0.75 s at 1 ms, 0.83 s
    at 5 ms (1.33 s with the polling scheduler at 0.1 ms).
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SIM_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)
