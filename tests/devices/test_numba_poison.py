"""The Numba CUDA simulator's shared memory is poisoned before every block (sandbox/devices/numba_poison.py).

Tests run under the simulator (no GPU here; sandbox.devices.backends chooses it), so kernels keep their threads few:
each barrier costs the simulator about 270 us per thread.
"""
from __future__ import annotations

import numpy as np
import pytest

from sandbox.devices import backends, numba_poison

pytestmark = pytest.mark.skipif(not backends.numba_simulated(), reason="needs the Numba CUDA simulator (no GPU)")

from numba import cuda  # noqa: E402  (a module global: the simulator swaps it inside kernels)


def test_patch_is_installed():
    from numba.cuda.simulator import kernelapi
    assert getattr(kernelapi.FakeCUDAShared, "_sandbox_poisoned", False)
    numba_poison.install()  # idempotent


def test_control_kernel_reading_an_unwritten_slot_is_caught():
    """Block 0 writes all 8 slots, block 1 only 7: without the poison block 1 reads block 0's stale
    value and the result looks right."""
    from numba import float32

    @cuda.jit
    def shifted(out):
        s = cuda.shared.array(8, float32)
        t = cuda.threadIdx.x
        if cuda.blockIdx.x == 0 or t < 7:
            s[t] = t
        cuda.syncthreads()
        out[cuda.blockIdx.x, t] = s[(t + 1) % 8]

    out = np.zeros((2, 8), np.float32)
    shifted[2, 8](out)
    np.testing.assert_array_equal(out[0], (np.arange(8) + 1) % 8)
    assert np.isnan(out[1, 6]) and not np.isnan(np.delete(out[1], 6)).any()


def test_integer_and_dynamic_shared_arrays_are_poisoned():
    from numba import float32, int32, uint16

    @cuda.jit
    def read_unwritten(out_i, out_u, out_dyn):
        si = cuda.shared.array(4, int32)
        su = cuda.shared.array(4, uint16)
        dyn = cuda.shared.array(0, dtype=float32)
        t = cuda.threadIdx.x
        out_i[t] = si[t]
        out_u[t] = su[t]
        out_dyn[t] = dyn[t]

    out_i, out_u, out_dyn = np.zeros(4, np.int32), np.zeros(4, np.uint16), np.zeros(4, np.float32)
    read_unwritten[1, 4, 0, 16](out_i, out_u, out_dyn)
    assert (out_i == np.iinfo(np.int32).min).all() and (out_u == np.iinfo(np.uint16).max).all()
    assert np.isnan(out_dyn).all()


def test_poison_helper():
    arrays = [np.zeros(3, np.float16), np.zeros(3, np.int8), np.zeros(3, np.uint32), np.zeros(3, np.bool_)]
    for a in arrays:
        numba_poison.poison(a)
    assert np.isnan(arrays[0]).all() and (arrays[1] == -128).all() and (arrays[2] == 2**32 - 1).all()
    assert arrays[3].all()
