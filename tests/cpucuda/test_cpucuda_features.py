"""CUDA that real kernels use, on the CPU executor: cooperative groups, CUB collectives, __constant__ with
get_global, the refusal of grid-wide sync, and user headers with __shared__ found through
nested -I folders. Each kernel is written in the style of the projects that use the feature and checked
against NumPy.
"""
from __future__ import annotations

import numpy as np
import pytest

from sandbox.cpucuda import CpuCompileError, CpuKernelError, CpuRawKernel, CpuRawModule

# ---------------------------------------------------------------- cooperative groups

CG = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// Block sum as in the CUDA samples' reductions: a 32-wide tile reduces by cg::reduce,
// tile leaders meet in shared memory, the first tile reduces their partials.
extern "C" __global__ void cg_block_sum(const float* x, float* out, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    __shared__ float partial[32];
    const int i = block.group_index().x * block.size() + block.thread_rank();
    float v = cg::reduce(warp, i < n ? x[i] : 0.0f, cg::plus<float>());
    if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = v;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        v = warp.thread_rank() < warp.meta_group_size() ? partial[warp.thread_rank()] : 0.0f;
        v = cg::reduce(warp, v, cg::plus<float>());
        if (warp.thread_rank() == 0) out[block.group_index().x] = v;
    }
}

// Tiles of 16 (template) and 8 (runtime): max/min per tile, the shuffles, votes and ranks.
extern "C" __global__ void cg_tiles(const int* x, int* out) {
    cg::thread_block block = cg::this_thread_block();
    auto t16 = cg::tiled_partition<16>(block);
    cg::thread_block_tile_base t8 = cg::tiled_partition(block, 8);
    const int v = x[block.thread_rank()];
    int* o = out + 12 * block.thread_rank();
    o[0] = cg::reduce(t16, v, cg::greater<int>());
    o[1] = cg::reduce(t8, v, cg::less<int>());
    o[2] = t16.shfl(v, 3);
    o[3] = t16.shfl_xor(v, 1);
    o[4] = t8.shfl_down(v, 2);
    o[5] = t8.shfl_up(v, 1);
    o[6] = (int)t8.ballot(v % 2 == 0);
    o[7] = t8.any(v > 90) * 10 + t8.all(v >= 0);
    o[8] = (int)t8.thread_rank();
    o[9] = (int)t8.meta_group_rank() * 100 + (int)t8.meta_group_size();
    o[10] = (int)t16.size() * 100 + (int)t8.size();
    t8.sync();
    o[11] = cg::reduce(t16, 1, cg::plus<int>());
}

// Warp-aggregated atomics (the pattern of NVIDIA's blog post on them): the lanes that pass the filter
// elect a leader, which reserves room for all of them with one atomicAdd.
extern "C" __global__ void cg_filter(const int* x, int n, int* out, int* count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] > 0) {
        cg::coalesced_group active = cg::coalesced_threads();
        int base = 0;
        if (active.thread_rank() == 0) base = atomicAdd(count, (int)active.size());
        base = active.shfl(base, 0);
        out[base + active.thread_rank()] = x[i];
    }
}

// labeled_partition: lanes with the same key sum their values.
extern "C" __global__ void cg_by_key(const int* key, const int* value, int* out) {
    cg::thread_block block = cg::this_thread_block();
    cg::coalesced_group warp = cg::tiled_partition<32>(block);
    cg::coalesced_group same = cg::labeled_partition(warp, key[block.thread_rank()]);
    out[block.thread_rank()] = cg::reduce(same, value[block.thread_rank()], cg::plus<int>()) * 100 + (int)same.size();
}
"""


@pytest.fixture(scope="module")
def cg_module():
    return CpuRawModule(code=CG, options=("-std=c++17",))


def test_cooperative_groups_block_sum(cg_module):
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    out = np.zeros(4, np.float32)
    cg_module.get_function("cg_block_sum")(4, 256, (x, out, np.int32(x.size)))
    np.testing.assert_allclose(out, np.add.reduceat(np.pad(x, (0, 24)), np.arange(0, 1024, 256)), rtol=1e-5, atol=1e-5)


def test_cooperative_groups_tiles(cg_module):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 100, 64).astype(np.int32)
    out = np.zeros((64, 12), np.int32)
    cg_module.get_function("cg_tiles")(1, 64, (x, out))
    r = np.arange(64)
    t16, t8 = x.reshape(4, 16), x.reshape(8, 8)
    np.testing.assert_array_equal(out[:, 0], np.repeat(t16.max(1), 16))
    np.testing.assert_array_equal(out[:, 1], np.repeat(t8.min(1), 8))
    np.testing.assert_array_equal(out[:, 2], np.repeat(t16[:, 3], 16))
    np.testing.assert_array_equal(out[:, 3], x[r ^ 1])
    down = np.where(r % 8 + 2 < 8, x[np.minimum(r + 2, 63)], x)
    np.testing.assert_array_equal(out[:, 4], down)
    np.testing.assert_array_equal(out[:, 5], np.where(r % 8 >= 1, x[r - 1], x))
    ballots = [(sum(1 << k for k in range(8) if t[k] % 2 == 0)) for t in t8]
    np.testing.assert_array_equal(out[:, 6], np.repeat(ballots, 8))
    np.testing.assert_array_equal(out[:, 7], np.repeat((t8 > 90).any(1) * 10 + (t8 >= 0).all(1), 8))
    np.testing.assert_array_equal(out[:, 8], r % 8)
    np.testing.assert_array_equal(out[:, 9], r // 8 * 100 + 8)
    np.testing.assert_array_equal(out[:, 10], 1608)
    np.testing.assert_array_equal(out[:, 11], 16)


def test_coalesced_threads_warp_aggregated_atomics(cg_module):
    x = np.random.default_rng(2).integers(-50, 50, 300).astype(np.int32)
    out = np.full(300, -999, np.int32)
    count = np.zeros(1, np.int32)
    cg_module.get_function("cg_filter")(3, 128, (x, np.int32(x.size), out, count))
    assert count[0] == (x > 0).sum()
    np.testing.assert_array_equal(np.sort(out[:count[0]]), np.sort(x[x > 0]))
    assert (out[count[0]:] == -999).all()


def test_labeled_partition(cg_module):
    rng = np.random.default_rng(3)
    key = rng.integers(0, 4, 64).astype(np.int32)
    value = rng.integers(0, 10, 64).astype(np.int32)
    out = np.zeros(64, np.int32)
    cg_module.get_function("cg_by_key")(1, 64, (key, value, out))
    for i in range(64):
        w = slice(i // 32 * 32, i // 32 * 32 + 32)
        same = key[w] == key[i]
        assert out[i] == value[w][same].sum() * 100 + same.sum(), i


def test_grid_sync_is_refused_at_compile_time():
    code = r"""
    #include <cooperative_groups.h>
    namespace cg = cooperative_groups;
    extern "C" __global__ void k(int* x) { x[0] = 1; cg::this_grid().sync(); x[1] = 2; }
    """
    with pytest.raises(CpuCompileError, match="grid_group::sync.*blocks run one after another"):
        CpuRawKernel(code, "k").compile()
    # Using the grid group without sync() compiles and works.
    ok = r"""
    #include <cooperative_groups.h>
    extern "C" __global__ void k(unsigned long long* x) {
        auto grid = cooperative_groups::this_grid();
        x[grid.thread_rank()] = grid.size();
    }
    """
    out = np.zeros(6, np.uint64)
    CpuRawKernel(ok, "k")(2, 3, (out,))
    np.testing.assert_array_equal(out, 6)


# ---------------------------------------------------------------- CUB

CUB = r"""
#include <cub/cub.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_reduce.cuh>

// Row statistics of a matrix, one block per row (the shape of a layernorm's first pass).
template <int THREADS>
__global__ void row_stats(const float* x, int cols, float* sums, float* maxima) {
    using Reduce = cub::BlockReduce<float, THREADS>;
    __shared__ typename Reduce::TempStorage temp;
    const float* row = x + (long long)blockIdx.x * cols;
    float s = 0.f, m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += THREADS) { s += row[c]; m = fmaxf(m, row[c]); }
    const float total = Reduce(temp).Sum(s);
    __syncthreads();  // temp is reused: CUB requires a barrier in between
    const float peak = Reduce(temp).Reduce(m, cub::Max());
    if (threadIdx.x == 0) { sums[blockIdx.x] = total; maxima[blockIdx.x] = peak; }
}

// Stream compaction offsets: exclusive and inclusive prefix sums of flags, and the block total.
extern "C" __global__ void scan_flags(const int* flags, int* exclusive, int* inclusive, int* total) {
    using Scan = cub::BlockScan<int, 96>;
    __shared__ typename Scan::TempStorage temp;
    int ex, in, aggregate;
    Scan(temp).ExclusiveSum(flags[threadIdx.x], ex, aggregate);
    __syncthreads();
    Scan(temp).InclusiveSum(flags[threadIdx.x], in);
    exclusive[threadIdx.x] = ex;
    inclusive[threadIdx.x] = in;
    if (threadIdx.x == 0) total[0] = aggregate;
}

// Per-warp and per-16-lane sums and minima.
extern "C" __global__ void warp_sums(const float* x, float* sums, float* minima, int* valid_sums) {
    __shared__ typename cub::WarpReduce<float>::TempStorage temp[4];
    __shared__ typename cub::WarpReduce<int, 16>::TempStorage half_temp[8];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float v = x[threadIdx.x];
    const float s = cub::WarpReduce<float>(temp[warp]).Sum(v);
    const float m = cub::WarpReduce<float>(temp[warp]).Reduce(v, cub::Min());
    const int h = cub::WarpReduce<int, 16>(half_temp[threadIdx.x / 16]).Sum(1, 5);
    if (lane == 0) { sums[warp] = s; minima[warp] = m; }
    if (threadIdx.x % 16 == 0) valid_sums[threadIdx.x / 16] = h;
}
"""


@pytest.fixture(scope="module")
def cub_module():
    return CpuRawModule(code=CUB, name_expressions=["row_stats<128>", "row_stats<64>"])


@pytest.mark.parametrize("threads", [128, 64])
def test_cub_block_reduce(cub_module, threads):
    x = np.random.default_rng(4).standard_normal((5, 300)).astype(np.float32)
    sums, maxima = np.zeros(5, np.float32), np.zeros(5, np.float32)
    cub_module.get_function(f"row_stats<{threads}>")(5, threads, (x, np.int32(300), sums, maxima))
    np.testing.assert_allclose(sums, x.sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(maxima, x.max(1))


def test_cub_block_scan(cub_module):
    flags = (np.random.default_rng(5).random(96) < 0.4).astype(np.int32)
    ex, inc, total = np.zeros(96, np.int32), np.zeros(96, np.int32), np.zeros(1, np.int32)
    cub_module.get_function("scan_flags")(1, 96, (flags, ex, inc, total))
    np.testing.assert_array_equal(inc, np.cumsum(flags))
    np.testing.assert_array_equal(ex, np.cumsum(flags) - flags)
    assert total[0] == flags.sum()


def test_cub_warp_reduce(cub_module):
    x = np.random.default_rng(6).standard_normal(128).astype(np.float32)
    sums, minima, valid = np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(8, np.int32)
    cub_module.get_function("warp_sums")(1, 128, (x, sums, minima, valid))
    np.testing.assert_allclose(sums, x.reshape(4, 32).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(minima, x.reshape(4, 32).min(1))
    np.testing.assert_array_equal(valid, 5)


def test_cub_temp_storage_reuse_without_barrier_is_a_race():
    """CUB's rule (a barrier before reusing TempStorage) is checked by racecheck."""
    from sandbox.cpucuda import CpuKernelRaceError

    bad = CUB.replace("    __syncthreads();  // temp is reused: CUB requires a barrier in between\n", "")
    k = CpuRawModule(code=bad, name_expressions=["row_stats<64>"], racecheck=True).get_function("row_stats<64>")
    x = np.ones((1, 64), np.float32)
    with pytest.raises(CpuKernelRaceError, match="row_stats"):
        k(1, 64, (x, np.int32(64), np.zeros(1, np.float32), np.zeros(1, np.float32)))


# ---------------------------------------------------------------- __constant__

CONSTANT = r"""
#define RADIUS 3
// A separable-convolution row pass in the style of the CUDA samples: the filter in constant memory,
// filled from the host before the launch.
__constant__ float c_filter[2 * RADIUS + 1];
__constant__ int c_offset = 7;
namespace params { __constant__ float c_scale[2] = {2.0f, 0.5f}; }

extern "C" __global__ void convolve_rows(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.f;
    for (int k = -RADIUS; k <= RADIUS; ++k) {
        const int j = min(max(i + k, 0), n - 1);
        acc += c_filter[RADIUS - k] * in[j];
    }
    out[i] = acc * params::c_scale[0] * params::c_scale[1] + (float)c_offset;
}
"""


def _convolve(x, taps, offset):
    n, r = x.size, len(taps) // 2
    padded = np.concatenate([np.full(r, x[0]), x, np.full(r, x[-1])])
    return np.array([sum(taps[r - k] * padded[i + r + k] for k in range(-r, r + 1)) for i in range(n)]) + offset


@pytest.mark.parametrize("mode", ["normal", "asan"])
def test_constant_memory_set_through_get_global(mode):
    mod = CpuRawModule(code=CONSTANT, asan=(mode == "asan"))
    taps = np.array([0.05, 0.1, 0.2, 0.3, 0.2, 0.1, 0.05], np.float32)
    view = mod.get_global("c_filter")
    assert view.dtype == np.uint8 and view.nbytes == 28 and view.flags.writeable
    view.view(np.float32)[:] = taps
    assert mod.get_global("c_offset").view(np.int32)[0] == 7  # the initial value
    mod.get_global("c_offset").view(np.int32)[0] = 1
    x = np.random.default_rng(7).standard_normal(100).astype(np.float32)
    out = np.zeros_like(x)
    mod.get_function("convolve_rows")(4, 32, (x, out, np.int32(x.size)))
    np.testing.assert_allclose(out, _convolve(x, taps, 1), rtol=1e-5, atol=1e-5)
    with pytest.raises(KeyError, match="no __constant__ variable 'missing'.*c_filter"):
        mod.get_global("missing")


# ---------------------------------------------------------------- refusals and headers

def test_shared_header_found_through_a_nested_include_folder(tmp_path):
    """-I csrc -I csrc/attention with #include "attention_kernels.cuh": the header's __shared__ is rewritten
    whichever folder g++ finds it through, and #pragma once still sees one file."""
    attention = tmp_path / "csrc" / "attention"
    attention.mkdir(parents=True)
    (attention / "attention_kernels.cuh").write_text(
        "#pragma once\n"
        '#include "attention_utils.cuh"\n'
        "__device__ float block_total(float v) {\n"
        "    __shared__ float parts[64];\n"
        "    parts[threadIdx.x] = scaled(v);\n"
        "    __syncthreads();\n"
        "    float s = 0.f;\n"
        "    for (int i = 0; i < (int)blockDim.x; ++i) s += parts[i];\n"
        "    return s;\n"
        "}\n")
    (attention / "attention_utils.cuh").write_text("#pragma once\n__device__ inline float scaled(float v) { return 2 * v; }\n")
    code = ('#include "attention_kernels.cuh"\n#include "attention/attention_kernels.cuh"\n'
            'extern "C" __global__ void k(float* out) { out[threadIdx.x] = block_total(1.0f); }\n')
    out = np.zeros(64, np.float32)
    CpuRawKernel(code, "k", options=(f"-I{tmp_path / 'csrc'}", f"-I{attention}"))(1, 64, (out,))
    np.testing.assert_array_equal(out, 128.0)
