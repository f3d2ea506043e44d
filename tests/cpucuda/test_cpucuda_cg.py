"""Cooperative-groups tiles wider than a warp on the CPU executor: block_tile_memory and this_thread_block(scratch)
(CUDA 12's and cg::experimental's spelling), thread_block_tile<N> for N = 64 ... the block's size with sync,
thread_rank, meta_group_rank, meta_group_size, size / num_threads and cg::reduce, in the shape of CUDA samples'
multi-warp reduction; a missing tile sync is a race, a tile sync some threads skip a deadlock."""
from __future__ import annotations

import numpy as np
import pytest

from sandbox.cpucuda import CpuKernelError, CpuKernelRaceError, CpuRawModule

CODE = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// CUDA samples' multi_warp_cg_reduce, reshaped: each tile of TILE threads sums its part with cg::reduce,
// its first thread publishes the tile's sum, and thread 0 adds the tiles' sums.
template <unsigned BLOCK, unsigned TILE>
__global__ void tile_sums(const float* in, float* out, int n) {
    extern __shared__ float partial[];
    __shared__ cg::block_tile_memory<BLOCK> scratch;
    cg::thread_block cta = cg::this_thread_block(scratch);
    cg::thread_block_tile<TILE> tile = cg::tiled_partition<TILE>(cta);
    float v = 0.0f;
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += BLOCK * gridDim.x) v += in[i];
    v = cg::reduce(tile, v, cg::plus<float>());
    if (tile.thread_rank() == 0) partial[tile.meta_group_rank()] = v;
    cg::sync(cta);
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (unsigned t = 0; t < tile.meta_group_size(); ++t) s += partial[t];
        out[blockIdx.x] = s;
    }
}

// What each thread sees of its tile: rank, meta rank and size, sizes; then a shift through shared memory
// inside each tile, ordered by tile.sync() alone (the other tiles do not wait).
template <unsigned TILE>
__global__ void tile_shape(int* shape, int* shifted, int use_sync) {
    __shared__ int buf[1024];
    __shared__ cg::experimental::block_tile_memory<4, 1024> scratch;
    auto cta = cg::experimental::this_thread_block(scratch);
    auto tile = cg::experimental::tiled_partition<TILE>(cta);
    const int t = threadIdx.x;
    shape[4 * t + 0] = (int)tile.thread_rank();
    shape[4 * t + 1] = (int)tile.meta_group_rank();
    shape[4 * t + 2] = (int)tile.meta_group_size();
    shape[4 * t + 3] = (int)(tile.size() * 10000 + tile.num_threads());
    buf[t] = 1000 * (int)tile.meta_group_rank() + (int)tile.thread_rank();
    if (use_sync) tile.sync();
    const int first = t - (int)tile.thread_rank();
    shifted[t] = buf[first + ((int)tile.thread_rank() + 1) % (int)TILE];
}

// Half of a tile skips its sync: a deadlock on a GPU, reported here.
extern "C" __global__ void skipped_sync(int* out) {
    auto tile = cg::tiled_partition<64>(cg::this_thread_block());
    if (tile.thread_rank() < 32) tile.sync();
    out[threadIdx.x] = 1;
}
"""
NAMES = ["tile_sums<256, 64>", "tile_sums<256, 128>", "tile_sums<256, 256>", "tile_sums<64, 32>",
         "tile_shape<64>", "tile_shape<128>"]


@pytest.fixture(scope="module")
def module():
    return CpuRawModule(code=CODE, options=("-std=c++17",), name_expressions=NAMES)


@pytest.mark.parametrize("block, tile", [(256, 64), (256, 128), (256, 256), (64, 32)])
def test_tile_reduction_in_the_shape_of_cuda_samples(module, block, tile):
    rng = np.random.default_rng(block + tile)
    x = rng.integers(-50, 50, 5000).astype(np.float32)  # small integers: every order of summation is exact
    out = np.zeros(3, np.float32)
    module.get_function(f"tile_sums<{block}, {tile}>")(3, block, (x, out, np.int32(x.size)),
                                                       shared_mem=4 * (block // tile))
    expected = [x[np.arange(x.size) % (3 * block) // block == b].sum() for b in range(3)]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("tile", [64, 128])
def test_tile_ranks_sizes_and_sync(module, tile):
    block = 256
    shape, shifted = np.zeros((block, 4), np.int32), np.zeros(block, np.int32)
    module.get_function(f"tile_shape<{tile}>")(1, block, (shape, shifted, np.int32(1)), thread_order="reverse")
    t = np.arange(block)
    np.testing.assert_array_equal(shape[:, 0], t % tile)
    np.testing.assert_array_equal(shape[:, 1], t // tile)
    np.testing.assert_array_equal(shape[:, 2], block // tile)
    np.testing.assert_array_equal(shape[:, 3], tile * 10001)
    np.testing.assert_array_equal(shifted, 1000 * (t // tile) + (t % tile + 1) % tile)


def test_block_size_must_fit_the_tiles_and_the_scratch(module):
    with pytest.raises(CpuKernelError, match=r"tiled_partition<128> at .*: the parent group has 192 threads, not a "
                                             r"multiple of the tile size"):
        module.get_function("tile_shape<128>")(1, 192, (np.zeros(4 * 192, np.int32), np.zeros(192, np.int32),
                                                        np.int32(1)))
    with pytest.raises(CpuKernelError, match=r"this_thread_block\(scratch\) at .*: the block has 128 threads but its "
                                             r"block_tile_memory<64> holds tiles for at most 64"):
        module.get_function("tile_sums<64, 32>")(1, 128, (np.zeros(8, np.float32), np.zeros(1, np.float32),
                                                          np.int32(8)), shared_mem=8)


def test_a_tile_sync_half_the_tile_skips_is_a_deadlock(module):
    with pytest.raises(CpuKernelError, match=r"deadlock in block \(0,0,0\): 32 thread\(s\) of a thread_block_tile<64> "
                                             r"wait at thread_block_tile::sync at .*:\d+ for 32 that have exited"):
        module.get_function("skipped_sync")(1, 64, (np.zeros(64, np.int32),))


def test_racecheck_orders_a_tile_by_its_sync_only():
    k = CpuRawModule(code=CODE, options=("-std=c++17",), name_expressions=["tile_shape<128>"],
                     racecheck=True).get_function("tile_shape<128>")
    shape, shifted = np.zeros((256, 4), np.int32), np.zeros(256, np.int32)
    k(1, 256, (shape, shifted, np.int32(1)))  # ordered by tile.sync(): clean
    with pytest.raises(CpuKernelRaceError, match=r"data race \((read|write)-after-(read|write)\) on __shared__ buf "
                                                 r".*with no barrier between them \(__syncthreads, a tile's sync"):
        k(1, 256, (shape, shifted, np.int32(0)))
