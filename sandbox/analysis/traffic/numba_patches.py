"""The patches numba_sim.capture() puts on the Numba CUDA simulator, and takes off after it.

BlockManager.run (each block goes through the launch's recorder), BlockThread.syncthreads (the
barrier epoch), FakeCUDAShared.array (traced shared arrays), FakeCUDALocal.array (local arrays noted)
and every FakeCUDAAtomic operation (recorded as op "atomic").
"""
from __future__ import annotations

import sys
import threading

import numpy as np

from .numba_traced import TracedArray

ATOMIC_OPS = ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin", "cas",
              "compare_and_swap")

ABSENT = object()  # the attribute was not in the owner's __dict__


def install(cap, patches: list) -> None:
    """Patch the simulator for `cap`, appending (owner, name, previous value) to `patches` as it goes."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support
    from numba.cuda.simulator import kernel, kernelapi

    try:  # kernels/numba_cuda/simulator.py serialises shared allocations when first imported: before our patch
        import kernels.numba_cuda.simulator  # noqa: F401
    except ImportError:
        pass

    def patch(owner, name, value):
        patches.append((owner, name, owner.__dict__.get(name, ABSENT)))
        setattr(owner, name, value)

    original_run = kernel.BlockManager.run
    original_sync = kernel.BlockThread.syncthreads
    original_local = kernelapi.FakeCUDALocal.array
    allocation_lock = threading.Lock()

    def run(manager, grid_point, *args):
        return cap.launch_for(manager).run_block(original_run, manager, grid_point, args)

    def syncthreads(thread):
        thread._traffic_epoch += 1
        launch = cap.current
        if launch is not None and cap.max_seconds is not None:
            launch.checkpoint()
        original_sync(thread)

    def shared_array(shared, shape, dtype, alignment=None):
        # The simulator's own allocation (static arrays keyed by the caller's file and line, dynamic
        # ones views of one buffer), made here because the key is the caller's frame: a wrapper
        # calling the original would key every array by the wrapper's line.
        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        dtype = np.dtype(dtype)
        frame = sys._getframe(1)
        if shape == 0:
            array = np.frombuffer(shared._dynshared.data, dtype=dtype, count=shared._dynshared_size // dtype.itemsize)
            root = shared._dynshared
        else:
            key = (frame.f_code.co_filename, frame.f_lineno)
            with allocation_lock:
                array = shared._allocations.get(key)
                if array is None:
                    array = shared._allocations[key] = np.empty(shape, dtype)
            root = array
        launch = cap.current
        return array if launch is None else launch.shared(array, root, frame)

    def local_array(local, shape, dtype, alignment=None):
        array = original_local(local, shape, dtype, alignment)
        launch = cap.current
        if launch is not None:
            launch.note_local(sys._getframe(1), array.nbytes)
        return array

    shared_array.serialised = True  # it takes a lock too: common.serialise_simulated_shared_arrays leaves it
    patch(kernel.BlockManager, "run", run)
    patch(kernel.BlockThread, "syncthreads", syncthreads)
    patch(kernel.BlockThread, "_traffic_epoch", 0)
    patch(kernelapi.FakeCUDAShared, "array", shared_array)
    patch(kernelapi.FakeCUDALocal, "array", local_array)
    for name in ATOMIC_OPS:
        patch(kernelapi.FakeCUDAAtomic, name, _traced_atomic(name, getattr(kernelapi.FakeCUDAAtomic, name)))


def _traced_atomic(name, original):
    """cuda.atomic.<name> that performs the operation on the raw array and records it as one access."""
    if name == "compare_and_swap":  # (array, old, val): the first element
        def atomic(self, array, old, val):
            if type(array) is not TracedArray:
                return original(self, array, old, val)
            result = original(self, array._ary, old, val)
            array._recorder.record(sys._getframe(1), array._atomic, array._view, (0,) * array.ndim)
            return result
    else:
        def atomic(self, array, index, *values):
            if type(array) is not TracedArray:
                return original(self, array, index, *values)
            result = original(self, array._ary, index, *values)
            array._recorder.record(sys._getframe(1), array._atomic, array._view, index)
            return result
    atomic.__name__ = name
    return atomic
