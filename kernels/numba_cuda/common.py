"""Shared pieces of the Numba CUDA variants: block reductions, launch sizing, uploads, compile reports.

The block reductions are the one place that differs between a GPU and the simulator (which has no
warp shuffles): on a GPU, a warp reduces with `shfl_xor_sync` and warps combine through a small
shared array; under the simulator every thread writes its value to shared memory and reads them
all back. `block_max` / `block_sum` are bound once, at import, from `numba.config.ENABLE_CUDASIM`.
Under the simulator, importing this module also makes its static shared arrays thread-safe (see
serialise_simulated_shared_arrays()).
"""
from __future__ import annotations

import contextlib
import functools
import math
import re
import sys
import threading

import numpy as np
from numba import config, cuda, float32, int32, types

SIMULATED = bool(config.ENABLE_CUDASIM)

WARP = 32
MAX_HEAD_DIM = 256  # per-thread accumulators and the staged query are sized by it
HEAD_DIMS = (32, 64, 80, 96, 112, 120, 128, 192, 256)  # what the variants declare (any <= MAX_HEAD_DIM works)
MAX_THREADS = 128  # per block on a GPU
# The simulator pays per thread and per thread per barrier (one Python thread each): few threads
# there. Every loop in the kernels strides by blockDim, so any count is correct.
SIM_MAX_THREADS = 16
SIM_SWITCH_INTERVAL = 1e-4  # seconds; see simulator_switching()
# Floats of shared scratch a block reduction needs: one per warp on a GPU, one per thread simulated.
REDUCE_SCRATCH = 128 if SIMULATED else WARP
NEG_INF = float32(-math.inf)
ZERO = float32(0.0)

# The configuration compile_report() sizes its dynamic shared memory and threads for: a Llama-3-8B
# like decode step (32 query heads on 8 KV heads, head dim from the caller) at 4096 tokens of context.
REPRESENTATIVE = dict(context_len=4096, num_heads=32, num_kv_heads=8)
COMPILE_PATH = "numba compile_ptx -> nvJitLink"


# ---------------------------------------------------------------------------------------------
# Block-wide reductions: every thread passes its value and gets the block's result back. Every
# thread of the block must call them (they contain barriers); `scratch` is a shared float32 array
# of at least REDUCE_SCRATCH elements, free for reuse once the call returns. Both paths are defined
# everywhere (tests run the shuffle path under the simulator with an emulated shfl_xor_sync);
# block_max / block_sum name the one this process uses.
@cuda.jit(device=True, inline="always")
def warp_max(value):
    offset = WARP // 2
    while offset > 0:
        value = max(value, cuda.shfl_xor_sync(0xFFFFFFFF, value, offset))
        offset //= 2
    return value


@cuda.jit(device=True, inline="always")
def warp_sum(value):
    offset = WARP // 2
    while offset > 0:
        value += cuda.shfl_xor_sync(0xFFFFFFFF, value, offset)
        offset //= 2
    return value


# The shuffle path needs blockDim.x to be a multiple of 32 (launch_threads guarantees it on a GPU).
@cuda.jit(device=True, inline="always")
def shuffle_block_max(value, scratch):
    lane = cuda.threadIdx.x % WARP
    warp = cuda.threadIdx.x // WARP
    value = warp_max(value)
    if lane == 0:
        scratch[warp] = value
    cuda.syncthreads()
    value = scratch[lane] if lane < cuda.blockDim.x // WARP else NEG_INF
    value = warp_max(value)
    cuda.syncthreads()
    return value


@cuda.jit(device=True, inline="always")
def shuffle_block_sum(value, scratch):
    lane = cuda.threadIdx.x % WARP
    warp = cuda.threadIdx.x // WARP
    value = warp_sum(value)
    if lane == 0:
        scratch[warp] = value
    cuda.syncthreads()
    value = scratch[lane] if lane < cuda.blockDim.x // WARP else ZERO
    value = warp_sum(value)
    cuda.syncthreads()
    return value


# The simulator path: one scratch slot per thread, every thread reads them all (two barriers).
@cuda.jit(device=True, inline="always")
def shared_block_max(value, scratch):
    scratch[cuda.threadIdx.x] = value
    cuda.syncthreads()
    result = scratch[0]
    for i in range(1, cuda.blockDim.x):
        result = max(result, scratch[i])
    cuda.syncthreads()
    return result


@cuda.jit(device=True, inline="always")
def shared_block_sum(value, scratch):
    scratch[cuda.threadIdx.x] = value
    cuda.syncthreads()
    result = scratch[0]
    for i in range(1, cuda.blockDim.x):
        result += scratch[i]
    cuda.syncthreads()
    return result


block_max = shared_block_max if SIMULATED else shuffle_block_max
block_sum = shared_block_sum if SIMULATED else shuffle_block_sum


# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# Launch sizing (host side).
def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def launch_threads(work: int, simulated: bool | None = None) -> int:
    """Threads per block for `work` parallel items: a power of two, a whole number of warps on a
    GPU (the shuffle reductions need full warps), at most MAX_THREADS (SIM_MAX_THREADS simulated;
    read at each call, so a test may raise it)."""
    if SIMULATED if simulated is None else simulated:
        return min(SIM_MAX_THREADS, next_pow2(work))
    return min(MAX_THREADS, max(WARP, next_pow2(work)))


def check_head_dim(name: str, head_dim: int) -> None:
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"{name} supports head_dim <= {MAX_HEAD_DIM}, got {head_dim}")


def upload(array):
    """A C-contiguous device copy (the simulator's fake device array under the simulator)."""
    return cuda.to_device(np.ascontiguousarray(array))


def decode_args(problem):
    """Device (query, key_cache, value_cache, block_tables, context_lens) and the float32 scale."""
    p = problem
    return (upload(p.query), upload(p.key_cache), upload(p.value_cache), upload(p.block_tables),
            upload(p.context_lens), np.float32(p.softmax_scale))


class Launch:
    """A configured kernel and its device arguments: launch() only launches, result() downloads."""

    def __init__(self, kernel, grid, threads, shared_bytes, args, outputs):
        precompile(kernel, args)
        self.configured = kernel[grid, threads, 0, shared_bytes]
        self.grid, self.threads, self.shared_bytes = grid, threads, shared_bytes
        self.args = args
        self.outputs = outputs

    def launch(self) -> None:
        if SIMULATED:
            with simulator_switching():
                self.configured(*self.args)
        else:
            self.configured(*self.args)

    def result(self):
        return self.outputs.copy_to_host()


@contextlib.contextmanager
def simulator_switching():
    """Let the simulator's Python threads take turns faster during a launch.

    The simulator runs one Python thread per CUDA thread while its scheduler polls them in a busy
    loop; with the default 5 ms GIL switch interval, threads wait at every barrier for the poller's
    slice to end. 0.1 ms made our simulated launches 3-10x faster (measured on 2 cores).
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SIM_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def precompile(kernel, args) -> None:
    """Compile for the exact argument types now (prepare), so the timed launch never compiles."""
    if not SIMULATED:
        from numba import typeof
        kernel.compile(tuple(typeof(a) for a in args))


# ---------------------------------------------------------------------------------------------
# Signatures for compile_ptx: the types numba infers for C-contiguous device arrays.
def element_type(dtype):
    return {"float32": types.float32, "float16": types.float16}[np.dtype(dtype).name]


def array(dtype, ndim):
    return types.Array(dtype, ndim, "C")


def decode_signature(dtype, *extra):
    """(query, key_cache, value_cache, block_tables, context_lens, scale, *extra)."""
    e = element_type(dtype)
    return (array(e, 3), array(e, 4), array(e, 4), array(int32, 2), array(int32, 1), float32) + tuple(extra)


def out_array(dtype, ndim=3):
    return array(element_type(dtype), ndim)


@functools.lru_cache(maxsize=None)
def kernel_resources(pyfunc, signature: tuple, arch: str) -> dict:
    """Registers, static shared, local bytes and spills of one kernel, via compile_ptx + nvJitLink.

    Needs numba.cuda in real mode (no GPU needed). The code does not depend on block size or head
    dim (both are runtime values), so one compile per (kernel, signature, arch) serves every row.
    """
    from sandbox.resources import link_ptx, parse_arch

    if SIMULATED:
        raise RuntimeError("compile_ptx is unavailable under the simulator: call through sandbox.resources")
    cc = parse_arch(arch)
    ptx, _ = cuda.compile_ptx(pyfunc, signature, cc=cc)
    info = link_ptx(ptx, arch)
    info["fp64_instructions"] = len(re.findall(r"\.f64\b", ptx))  # float64 math would be a typing slip
    info["shuffles"] = ptx.count("shfl.sync")  # > 0 where the GPU reduction path is compiled in
    return info


def report(kernels, threads_per_block: int, dynamic_shared_bytes: int, note: str = "") -> dict:
    """compile_report() dict for the main kernel, with `kernels` listing every kernel of the variant."""
    main = dict(kernels[0])
    out = {
        "registers": main["registers"],
        "static_shared_bytes": main["static_shared_bytes"],
        "dynamic_shared_bytes": int(dynamic_shared_bytes),
        "local_bytes": main["local_bytes"],
        "spill_stores": main["spill_stores"],
        "spill_loads": main["spill_loads"],
        "threads_per_block": int(threads_per_block),
        "path": COMPILE_PATH,
        "kernels": [dict(k) for k in kernels],
    }
    if note:
        out["note"] = note
    return out
