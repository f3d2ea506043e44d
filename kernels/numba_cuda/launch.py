"""The host side of a launch: threads per block, CUDA's limits checked before any launch, uploads, Launch.

Bfloat16 and fp8 arrays travel as their bits (codecs.device_view) and come back through
codecs.host_view. A Launch compiles for its exact argument types in prepare (untimed), so the timed
launch never compiles; under the simulator it runs inside simulator.simulator_switching().
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from sandbox.devices.grid import check_grid
from sandbox.variant import Unsupported

from .codecs import BITS_VIEW, device_view, host_view
from .device import MAX_BLOCK_THREADS, MAX_HEAD_DIM, SIMULATED, WARP
from .simulator import simulator_switching

MAX_THREADS = 128  # per block on a GPU, when the launcher sizes the block ("auto")
# The simulator pays per thread and per thread per barrier (one Python thread each): "auto" launches few
# threads there (numba.block's check problem took 3.8 s at 16 threads, 11.3 s at 128, on 2 cores).
# Every loop in the kernels strides by blockDim, so any count is correct.
SIM_MAX_THREADS = 16
# The Numba variants' "threads" tunable (TUNABLES = {"threads": THREADS, ...}): "auto", the launcher's
# sizing above, or exactly that many threads per block, on a GPU and under the simulator alike. Whole
# warps only: the shuffle reductions need them on a GPU.
THREADS = ("auto", 32, 64, 128, 256)
AUTO = "auto"


def gpu_sized_simulation() -> bool:
    """Whether the simulator sizes "auto" blocks as a GPU does (raised to MAX_THREADS by the traffic capture's
    numba_sim.gpu_thread_counts(), so the counted warps are whole)."""
    return SIM_MAX_THREADS >= MAX_THREADS


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def launch_threads(work: int, simulated: bool | None = None, threads=AUTO) -> int:
    """Threads per block: `threads` itself when it is a count (block_threads checks it), else ("auto") for
    `work` parallel items a power of two, a whole number of warps on a GPU (the shuffle reductions need
    full warps), at most MAX_THREADS (SIM_MAX_THREADS simulated; read at each call, so a test may raise it)."""
    if threads != AUTO:
        return block_threads(threads)
    if SIMULATED if simulated is None else simulated:
        return min(SIM_MAX_THREADS, next_pow2(work))
    return min(MAX_THREADS, max(WARP, next_pow2(work)))


def block_threads(threads) -> int:
    """A configured thread count, launched as it is (simulated too): Unsupported unless it is a whole number
    of warps in WARP..MAX_BLOCK_THREADS."""
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads % WARP \
            or not WARP <= threads <= MAX_BLOCK_THREADS:
        raise Unsupported(f"threads={threads!r}: a Numba variant launches whole warps, {WARP}..{MAX_BLOCK_THREADS} "
                          f"threads per block (the shuffle reductions need full warps), or 'auto'")
    return int(threads)


def check_head_dim(name: str, head_dim: int) -> None:
    if head_dim > MAX_HEAD_DIM:
        raise Unsupported(f"{name} supports head_dim <= {MAX_HEAD_DIM}, got {head_dim}")


def check_launch(kernel_name: str, grid, threads) -> None:
    """sandbox.devices.grid.check_grid, refusing as Unsupported: a problem whose grid no GPU launches."""
    try:
        check_grid(kernel_name, grid, threads)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None


def upload(array):
    """A C-contiguous device copy (the simulator's fake device array under the simulator);
    bfloat16 and fp8 arrays travel as their bits (device_view)."""
    return cuda.to_device(np.ascontiguousarray(device_view(np.asarray(array))))


def output_array(problem):
    """The device output [num_query_tokens, num_heads, head_dim] in the query's device type."""
    return cuda.device_array(problem.query.shape, BITS_VIEW.get(problem.dtype.name, problem.dtype))


def lse_array(problem):
    """The device lse float32 [num_query_tokens, num_heads] when the problem returns it (return_lse), else a
    one-element stand-in that no kernel writes (a kernel writes lse only when built with OPT_LSE)."""
    shape = (problem.query.shape[0], problem.num_heads) if problem.options.return_lse else (1, 1)
    return cuda.device_array(shape, np.float32)


def tokens_read(problem) -> np.ndarray:
    """int64 [num_seqs]: tokens each sequence's query reads (context_len, or what the window keeps)."""
    return problem.context_lens.astype(np.int64) - problem.first_read_tokens()


class Launch:
    """A configured kernel and its device arguments: launch() only launches, result() downloads.

    The grid and block are checked against CUDA's limits first (Unsupported naming `name`). With `lse`
    (the device lse of a return_lse problem, or an MLA problem's), lse() downloads it.
    """

    def __init__(self, kernel, grid, threads, shared_bytes, args, outputs, name="numba kernel", out_dtype=None,
                 lse=None):
        check_launch(name, grid, threads)
        precompile(kernel, args)
        self.configured = kernel[grid, threads, 0, shared_bytes]
        self.grid, self.threads, self.shared_bytes = grid, threads, shared_bytes
        self.args = args
        self.outputs = outputs
        self.out_dtype = out_dtype
        self.lse_out = lse

    def launch(self) -> None:
        if SIMULATED:
            with simulator_switching():
                self.configured(*self.args)
        else:
            self.configured(*self.args)

    def result(self):
        out = self.outputs.copy_to_host()
        return out if self.out_dtype is None else host_view(out, self.out_dtype)

    def lse(self):
        """float32 [num_query_tokens, num_heads] (sandbox.variant.limits.Prepared)."""
        if self.lse_out is None:
            raise ValueError("this launch computes no log-sum-exp: prepare it for a problem with return_lse=True")
        return self.lse_out.copy_to_host()


def returned_lse(problem, lse):
    """`lse` when the problem returns it (Launch's lse argument), else None."""
    return lse if problem.options.return_lse else None



def precompile(kernel, args) -> None:
    """Compile for the exact argument types now (prepare), so the timed launch never compiles."""
    if not SIMULATED:
        from numba import typeof
        kernel.compile(tuple(typeof(a) for a in args))
