"""The simulator's block scheduler (sandbox/devices/numba_scheduler.py): barriers the threads release
themselves, with the simulator's semantics: every running thread waits at each barrier, a thread that
returned no longer counts, the first exception aborts the block and is raised naming its thread."""
import numpy as np
import pytest

import sandbox  # noqa: F401  (the simulator, with the scheduler patched in)
from sandbox.devices.backends import numba_simulated

pytestmark = pytest.mark.skipif(not numba_simulated(), reason="the scheduler is the simulator's")

from numba import cuda  # noqa: E402

from sandbox.devices import numba_scheduler  # noqa: E402


@cuda.jit
def rotate_through_shared(x, out, rounds):
    """Each round every thread writes its slot, waits, reads its neighbour's, waits: wrong without barriers."""
    buf = cuda.shared.array(64, np.float32)
    i = cuda.threadIdx.x
    n = cuda.blockDim.x
    value = x[cuda.blockIdx.x, i]
    for _ in range(rounds):
        buf[i] = value
        cuda.syncthreads()
        value = buf[(i + 1) % n]
        cuda.syncthreads()
    out[cuda.blockIdx.x, i] = value


@cuda.jit
def early_return_then_barrier(out):
    i = cuda.threadIdx.x
    if i >= 16:
        return  # half the block ends: the other half's barriers must not wait for it
    cuda.syncthreads()
    out[i] = cuda.syncthreads_count(i % 2 == 0)


@cuda.jit
def one_thread_raises(out):
    i = cuda.threadIdx.x
    cuda.syncthreads()
    if i == 5:
        out[1000] = 1.0  # out of bounds: IndexError in thread 5
    cuda.syncthreads()
    out[i] = 1.0


def test_the_scheduler_is_in_place():
    from numba.cuda.simulator import kernel
    assert getattr(kernel.BlockManager, numba_scheduler._APPLIED, False)


def test_barriers_order_the_threads_of_every_block():
    x = np.arange(3 * 64, dtype=np.float32).reshape(3, 64)
    out = np.zeros_like(x)
    rotate_through_shared[3, 64](x, out, 5)
    np.testing.assert_array_equal(out, np.roll(x, -5, axis=1))


def test_a_thread_that_returned_does_not_hold_the_barrier():
    out = np.full(32, -1, np.int32)
    early_return_then_barrier[1, 32](out)
    np.testing.assert_array_equal(out[:16], 8)  # 8 of the 16 running threads passed an even index
    np.testing.assert_array_equal(out[16:], -1)


def test_the_first_exception_is_raised_naming_its_thread():
    out = np.zeros(64, np.float32)
    with pytest.raises(IndexError, match=r"tid=\[5, 0, 0\] ctaid=\[0, 0, 0\]"):
        one_thread_raises[1, 64](out)
    assert not out.any()  # the other threads were aborted at their next barrier


def test_a_barrier_releases_when_the_last_running_thread_arrives():
    barrier = numba_scheduler.BlockBarrier(3)
    barrier.arrived = 2            # two threads wait
    barrier.leave(object(), failed=False)  # the third ends instead of arriving
    assert barrier.generation == 1 and barrier.arrived == 0 and barrier.running == 2
