"""Block-wide max and sum: every thread passes its value and gets the block's result back.

The one place that differs between a GPU and the simulator (which has no warp shuffles): on a GPU,
a warp reduces with `shfl_xor_sync` and warps combine through a small shared array; under the
simulator every thread writes its value to shared memory and reads them all back. `block_max` /
`block_sum` name the path this process uses (device.SIMULATED); both paths are defined everywhere
(tests run the shuffle path under the simulator with an emulated shfl_xor_sync).

Every thread of the block must call them (they contain barriers); `scratch` is a shared float32
array of at least REDUCE_SCRATCH elements, free for reuse once the call returns.
"""
from __future__ import annotations

from numba import cuda

from .device import MAX_BLOCK_THREADS, NEG_INF, SIMULATED, WARP, ZERO

# Floats of shared scratch a block reduction needs: one per warp on a GPU, one per thread simulated (any
# configured thread count up to CUDA's limit).
REDUCE_SCRATCH = MAX_BLOCK_THREADS if SIMULATED else WARP


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


# The shuffle path needs blockDim.x to be a multiple of 32 (launch.launch_threads guarantees it on a GPU).
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
