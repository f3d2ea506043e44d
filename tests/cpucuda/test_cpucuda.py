"""The CPU executor for CUDA C (sandbox.cpucuda) against NumPy, and the traps it must catch.

Compiled objects are cached on disk, so only a cold first run pays for g++.
"""
from __future__ import annotations


import numpy as np
import pytest

from sandbox.cpucuda import (CpuCompileError, CpuKernelError, CpuKernelMemoryError, CpuRawKernel,
                             CpuRawModule, last_poison, modes)

# ---------------------------------------------------------------- kernels

# Several small kernels in one module: one g++ run for all of them.
BASICS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
    return x;
}

// One sum per block: xor-shuffles inside warps, then shared memory across warps.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_sum(i < n ? x[i] : 0.0f);
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / warpSize) ? partial[lane] : 0.0f;
        for (int d = 16; d >= 1; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

// Shared-memory tiled transpose, 32x32 tiles, 32x8 threads, padded rows.
extern "C" __global__ void transpose(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[32][33];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8)
        if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

// Histogram: per-block counts in shared memory, then atomics into global memory.
extern "C" __global__ void histogram(const int* values, int n, int* counts, float* weight_sums,
                                     const float* weights, int nbins) {
    __shared__ int local[64];
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&local[values[i]], 1);
        atomicAdd(&weight_sums[values[i]], weights[i]);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) atomicAdd(&counts[b], local[b]);
}

// Dynamic shared memory: reverse each block's segment through `buf`.
extern "C" __global__ void reverse_segments(const float* in, float* out) {
    extern __shared__ float buf[];
    int base = blockIdx.x * blockDim.x;
    buf[threadIdx.x] = in[base + threadIdx.x];
    __syncthreads();
    out[base + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

// float <-> half round trips, element-wise.
extern "C" __global__ void half_round_trip(const float* in, __half* as_half, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half h = __float2half_rn(in[i]);
        as_half[i] = h;
        back[i] = __half2float(h);
    }
}

extern "C" __global__ void half2_ops(const __half* a, const __half* b, float* out) {
    int i = threadIdx.x;
    __half2 p = __halves2half2(a[2 * i], a[2 * i + 1]);
    __half2 q = __halves2half2(b[2 * i], b[2 * i + 1]);
    __half2 s = __hadd2(p, q);
    __half m = a[2 * i] * b[2 * i];
    out[4 * i + 0] = __low2float(s);
    out[4 * i + 1] = __high2float(s);
    out[4 * i + 2] = __half2float(m);
    out[4 * i + 3] = (float)(a[2 * i] > b[2 * i]);
}

extern "C" __global__ void bf16_round_trip(const float* in, unsigned short* bits, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __nv_bfloat16 b = __float2bfloat16(in[i]);
        bits[i] = __bfloat16_as_ushort(b);
        if (__bfloat162float(b) != __bfloat162float(b) && in[i] == in[i]) bits[i] = 1;  // never: nan only from nan
    }
}

// Scalars by value with their exact C types, and the built-in variables.
extern "C" __global__ void scalars(long long* out, long long big, double d, unsigned int u, short s,
                                   unsigned char c, bool flag, __half h) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = big;
        out[1] = (long long)(d * 4.0);
        out[2] = u;
        out[3] = s;
        out[4] = c;
        out[5] = flag;
        out[6] = (long long)(__half2float(h) * 8.0f);
    }
}

extern "C" __global__ void indices(int* out) {
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int nthreads = blockDim.x * blockDim.y * blockDim.z;
    out[b * nthreads + t] = b * 1000 + t;
}

// 16-byte vector loads through reinterpret_cast, as paged-attention kernels do.
extern "C" __global__ void vec_copy(const float* in, float* out) {
    const float4* src = reinterpret_cast<const float4*>(in);
    float4 v = src[threadIdx.x];
    float2 w = make_float2(v.x + v.y, v.z + v.w);
    int4 k = make_int4(1, 2, 3, 4);
    out[threadIdx.x] = w.x + w.y + (float)(k.x + k.w) - 5.0f + (float)(alignof(float4) + alignof(int4) - 32);
}

extern "C" __global__ void math_funcs(const float* x, float* out) {
    int i = threadIdx.x;
    float v = x[i];
    out[9 * i + 0] = expf(v);
    out[9 * i + 1] = __expf(v);
    out[9 * i + 2] = exp2f(v);
    out[9 * i + 3] = logf(fabsf(v) + 1.0f);
    out[9 * i + 4] = rsqrtf(fabsf(v) + 1.0f);
    out[9 * i + 5] = __fdividef(v, 3.0f);
    out[9 * i + 6] = fmaxf(v, 0.5f) + fminf(v, -0.5f);
    out[9 * i + 7] = __int_as_float(__float_as_int(v));
    out[9 * i + 8] = max(v, -INFINITY) + min(1, 2) + (FLT_MAX > 1e38f ? 0.0f : 1.0f);
}

// Warp votes and the other shuffles.
extern "C" __global__ void warp_ops(int* out) {
    int lane = threadIdx.x % 32;
    unsigned ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
    int up = __shfl_up_sync(0xffffffffu, lane, 1);
    int bcast = __shfl_sync(0xffffffffu, lane * 10, 5);
    int seg = __shfl_xor_sync(0xffffffffu, lane, 1, 8);
    int any = __any_sync(0xffffffffu, lane == 31);
    int all = __all_sync(0xffffffffu, lane < 31);
    __syncwarp();
    int cnt = __syncthreads_count(lane < 4);
    out[threadIdx.x * 7 + 0] = (int)ballot;
    out[threadIdx.x * 7 + 1] = up;
    out[threadIdx.x * 7 + 2] = bcast;
    out[threadIdx.x * 7 + 3] = seg;
    out[threadIdx.x * 7 + 4] = any;
    out[threadIdx.x * 7 + 5] = all;
    out[threadIdx.x * 7 + 6] = cnt;
}
"""

TEMPLATED = r"""
#include <cuda_fp16.h>

template <typename T> __device__ __forceinline__ float to_float(T x) { return (float)x; }

// A static __shared__ array inside a template device function.
template <int N>
__device__ float block_max(float v) {
    __shared__ float red[N];
    red[threadIdx.x] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int i = 0; i < N; ++i) m = fmaxf(m, red[i]);
    __syncthreads();
    return m;
}

template <int BLOCK, int SCALE, typename T>
__global__ void __launch_bounds__(BLOCK) scale_by_max(const T* __restrict__ x, float* __restrict__ out) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    float v = to_float(x[i]);
    out[i] = SCALE * v / block_max<BLOCK>(v);
}

namespace ops {
template <typename T>
__global__ void fill(T* out, T value) { out[blockIdx.x * blockDim.x + threadIdx.x] = value; }
}

// __shared__ at file scope, static and dynamic.
__shared__ float file_buf[32];
extern __shared__ int file_dyn[];

extern "C" __global__ void file_scope_shared(float* out, int write) {
    if (write) {
        file_buf[threadIdx.x] = (float)threadIdx.x;
        file_dyn[threadIdx.x] = 2 * (int)threadIdx.x;
    }
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = file_buf[31 - threadIdx.x] + (float)file_dyn[31 - threadIdx.x];
}
"""


@pytest.fixture(scope="module")
def basics():
    return CpuRawModule(code=BASICS, options=("-std=c++17", "-arch=sm_90", "--use_fast_math", "-lineinfo"))


def test_warp_shuffle_block_sum(basics):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.zeros(4, np.float32)
    basics.get_function("block_sum")((4,), (256,), (x, out, np.int32(x.size)))
    expected = np.add.reduceat(np.pad(x, (0, 24)).astype(np.float64), np.arange(0, 1024, 256))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_tiled_transpose(basics):
    a = np.arange(70 * 45, dtype=np.float32).reshape(70, 45)
    out = np.zeros((45, 70), np.float32)
    basics.get_function("transpose")(((45 + 31) // 32, (70 + 31) // 32), (32, 8), (a, out, 70, 45))
    np.testing.assert_array_equal(out, a.T)


def test_atomic_histogram(basics):
    rng = np.random.default_rng(1)
    values = rng.integers(0, 50, size=5000).astype(np.int32)
    weights = rng.random(5000).astype(np.float32)
    counts = np.zeros(50, np.int32)
    sums = np.zeros(50, np.float32)
    basics.get_function("histogram")(8, 128, (values, np.int32(values.size), counts, sums, weights, np.int32(50)))
    np.testing.assert_array_equal(counts, np.bincount(values, minlength=50))
    np.testing.assert_allclose(sums, np.bincount(values, weights, minlength=50), rtol=1e-4)


def test_dynamic_shared_memory(basics):
    x = np.arange(3 * 96, dtype=np.float32)
    out = np.zeros_like(x)
    basics.get_function("reverse_segments")((3,), (96,), (x, out), shared_mem=96 * 4)
    np.testing.assert_array_equal(out, x.reshape(3, 96)[:, ::-1].reshape(-1))


def test_dynamic_shared_overflow_is_caught_without_asan(basics):
    x = np.arange(64, dtype=np.float32)
    out = np.zeros_like(x)
    k = basics.get_function("reverse_segments")
    k.asan = False  # the canary is the normal mode's check (ASan has its own test)
    with pytest.raises(CpuKernelError, match="past the end of dynamic shared memory"):
        k(1, 64, (x, out), shared_mem=32 * 4)


def _half_inputs():
    rng = np.random.default_rng(2)
    specials = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 65519.0, 65520.0, 1e6, -1e6, np.inf, -np.inf, np.nan,
                         6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-9, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11,
                         2049.0, 2051.0], np.float32)
    # Exact ties between neighbouring halves: round-to-nearest-even decides.
    halves = rng.integers(0, 0x7bff, 2000, dtype=np.uint16).view(np.float16).astype(np.float32)
    nxt = (rng.integers(0, 0x7bff, 2000, dtype=np.uint16) + 1).view(np.float16).astype(np.float32)
    ties = ((halves.astype(np.float64) + np.nextafter(halves, np.inf).astype(np.float64)) / 2).astype(np.float32)
    random_bits = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([specials, halves, nxt, ties, random_bits]).astype(np.float32)


def test_half_round_trip_matches_numpy(basics):
    x = _half_inputs()
    as_half = np.zeros(x.size, np.float16)
    back = np.zeros(x.size, np.float32)
    basics.get_function("half_round_trip")(((x.size + 127) // 128,), (128,), (x, as_half, back, np.int32(x.size)))
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(as_half), nan)
    np.testing.assert_array_equal(as_half.view(np.uint16)[~nan], expected.view(np.uint16)[~nan])
    np.testing.assert_array_equal(back[~nan], expected[~nan].astype(np.float32))


def test_every_half_converts_to_float_exactly(basics):
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    h = bits.view(np.float16)
    x = h.astype(np.float32)
    as_half = np.zeros(x.size, np.float16)
    back = np.zeros(x.size, np.float32)
    basics.get_function("half_round_trip")((x.size // 256,), (256,), (x, as_half, back, np.int32(x.size)))
    ok = ~np.isnan(h)
    np.testing.assert_array_equal(as_half.view(np.uint16)[ok], bits[ok])
    assert np.isnan(back[~ok]).all()


def test_half2_and_half_operators(basics):
    a = np.array([1.5, -2.0, 3.25, 0.5], np.float16)
    b = np.array([0.25, 4.0, -3.25, 0.5], np.float16)
    out = np.zeros(8, np.float32)
    basics.get_function("half2_ops")(1, 2, (a, b, out))
    got = out.reshape(2, 4)
    np.testing.assert_array_equal(got[:, 0], (a[0::2] + b[0::2]).astype(np.float32))
    np.testing.assert_array_equal(got[:, 1], (a[1::2] + b[1::2]).astype(np.float32))
    np.testing.assert_array_equal(got[:, 2], (a[0::2] * b[0::2]).astype(np.float32))
    np.testing.assert_array_equal(got[:, 3], (a[0::2] > b[0::2]).astype(np.float32))


def test_bfloat16_rounds_to_nearest_even(basics):
    x = _half_inputs()
    bits = np.zeros(x.size, np.uint16)
    basics.get_function("bf16_round_trip")(((x.size + 127) // 128,), (128,), (x, bits, np.int32(x.size)))
    u = x.view(np.uint32).astype(np.uint64)
    expected = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    ok = ~np.isnan(x)
    np.testing.assert_array_equal(bits[ok], expected[ok])
    assert ((bits[~ok] & 0x7F80) == 0x7F80).all() and ((bits[~ok] & 0x7F) != 0).all()


def test_scalars_pass_with_their_exact_c_types(basics):
    out = np.zeros(7, np.int64)
    basics.get_function("scalars")(1, 1, (out, np.int64(2**40 + 3), np.float64(1.25), np.uint32(4_000_000_000),
                                         np.int16(-7), np.uint8(200), np.bool_(True), np.float16(0.75)))
    np.testing.assert_array_equal(out, [2**40 + 3, 5, 4_000_000_000, -7, 200, 1, 6])
    # Python ints fit integer parameters (CuPy passes them as int64; a GPU reads the low bytes).
    basics.get_function("scalars")(1, 1, (out, 5, 0.5, 3, -1, 255, False, np.float16(-1)))
    np.testing.assert_array_equal(out, [5, 2, 3, -1, 255, 0, -8])


def test_grid_and_block_in_three_dimensions(basics):
    grid, block = (3, 2, 2), (4, 2, 3)
    out = np.full(12 * 24, -1, np.int32)
    basics.get_function("indices")(grid, block, (out,))
    b, t = np.divmod(np.arange(out.size), 24)
    np.testing.assert_array_equal(out, b * 1000 + t)
    basics.get_function("indices")(5, 7, (out,))  # plain ints
    np.testing.assert_array_equal(out[:35], np.arange(35) // 7 * 1000 + np.arange(35) % 7)


def test_vector_types_load_16_bytes(basics):
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(8, np.float32)
    basics.get_function("vec_copy")(1, 8, (x, out))
    np.testing.assert_array_equal(out, x.reshape(8, 4).sum(axis=1))


def test_math_functions(basics):
    x = np.linspace(-3, 3, 16).astype(np.float32)
    out = np.zeros((16, 9), np.float32)
    basics.get_function("math_funcs")(1, 16, (x, out))
    ax = np.abs(x) + 1
    expected = np.stack([np.exp(x), np.exp(x), np.exp2(x), np.log(ax), 1 / np.sqrt(ax), x / 3,
                         np.maximum(x, 0.5) + np.minimum(x, -0.5), x, x + 1], axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_warp_votes_and_shuffles(basics):
    out = np.zeros((64, 7), np.int32)
    basics.get_function("warp_ops")(1, 64, (out,))
    lane = np.arange(64) % 32
    ballot = sum(1 << i for i in range(32) if i % 3 == 0)
    np.testing.assert_array_equal(out[:, 0].view(np.uint32), np.full(64, ballot, np.uint32))
    np.testing.assert_array_equal(out[:, 1], np.where(lane == 0, 0, lane - 1))
    np.testing.assert_array_equal(out[:, 2], np.full(64, 50))
    np.testing.assert_array_equal(out[:, 3], lane ^ 1)
    np.testing.assert_array_equal(out[:, 4], np.ones(64))
    np.testing.assert_array_equal(out[:, 5], np.zeros(64))
    np.testing.assert_array_equal(out[:, 6], np.full(64, 8))


# ---------------------------------------------------------------- templates, options, caching


@pytest.fixture(scope="module")
def templated():
    return CpuRawModule(code=TEMPLATED, name_expressions=["scale_by_max<64, 2, __half>", "scale_by_max<32, 3, float>",
                                                          "ops::fill<int>"])


def test_templated_kernel_by_name_expression(templated):
    rng = np.random.default_rng(3)
    x = rng.random(128).astype(np.float16) + np.float16(0.5)
    out = np.zeros(128, np.float32)
    templated.get_function("scale_by_max<64, 2, __half>")(2, 64, (x, out))
    xf = x.astype(np.float32).reshape(2, 64)
    np.testing.assert_allclose(out.reshape(2, 64), 2 * xf / xf.max(axis=1, keepdims=True), rtol=1e-6)

    y = rng.random(96).astype(np.float32)
    out = np.zeros(96, np.float32)
    templated.get_function("scale_by_max<32,3,float>")(3, 32, (y, out))  # spacing need not match
    np.testing.assert_allclose(out.reshape(3, 32), 3 * y.reshape(3, 32) / y.reshape(3, 32).max(axis=1, keepdims=True),
                               rtol=1e-6)

    ints = np.zeros(10, np.int32)
    templated.get_function("ops::fill<int>")(2, 5, (ints, np.int32(7)))
    np.testing.assert_array_equal(ints, 7)


def test_file_scope_shared_memory(templated):
    k = templated.get_function("file_scope_shared")
    out = np.zeros(64, np.float32)
    k(2, 32, (out, np.int32(1)), shared_mem=32 * 4)
    np.testing.assert_array_equal(out, np.tile(3.0 * np.arange(32)[::-1], 2))
    k(1, 32, (out, np.int32(0)), shared_mem=32 * 4)  # nothing written: both poisoned
    assert np.isnan(out[:32]).all()


def test_template_without_name_expression_is_a_clear_error(templated):
    with pytest.raises(ValueError, match="name_expressions"):
        templated.get_function("scale_by_max")


def test_unknown_kernel_name_is_a_clear_error():
    k = CpuRawKernel('extern "C" __global__ void k(int* out) { out[0] = 1; }', "no_such_kernel")
    with pytest.raises(CpuCompileError, match="no_such_kernel"):
        k(1, 1, ())


def test_options_define_include_and_gpu_only_flags(tmp_path):
    (tmp_path / "consts.cuh").write_text("#pragma once\n#define OFFSET 100\n")
    code = r"""
    #include "consts.cuh"
    extern "C" __global__ void k(int* out) { out[threadIdx.x] = VALUE + OFFSET + (int)threadIdx.x; }
    """
    out = np.zeros(4, np.int32)
    CpuRawKernel(code, "k", options=("-DVALUE=5", f"-I{tmp_path}", "-arch=sm_80", "--use_fast_math",
                                     "-lineinfo", "-std=c++17"))(1, 4, (out,))
    np.testing.assert_array_equal(out, [105, 106, 107, 108])
    # Header contents are part of the cache key (CuPy's cache would miss this edit).
    (tmp_path / "consts.cuh").write_text("#pragma once\n#define OFFSET 200\n")
    CpuRawKernel(code, "k", options=("-DVALUE=5", f"-I{tmp_path}"))(1, 4, (out,))
    np.testing.assert_array_equal(out, [205, 206, 207, 208])


def test_shared_declared_in_an_included_header(tmp_path):
    (tmp_path / "reduce.cuh").write_text(
        "#pragma once\n"
        "__device__ float block_total(float v) {\n"
        "    __shared__ float parts[64];\n"
        "    parts[threadIdx.x] = v;\n"
        "    __syncthreads();\n"
        "    float s = 0.f;\n"
        "    for (int i = 0; i < (int)blockDim.x; ++i) s += parts[i];\n"
        "    return s;\n"
        "}\n")
    code = '#include "reduce.cuh"\nextern "C" __global__ void k(float* out) { out[threadIdx.x] = block_total(1.0f); }\n'
    out = np.zeros(64, np.float32)
    CpuRawKernel(code, "k", options=(f"-I{tmp_path}",))(1, 64, (out,))
    np.testing.assert_array_equal(out, 64.0)


def test_cache_folder_override_and_reuse(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_CPUCUDA_CACHE", str(tmp_path))
    code = 'extern "C" __global__ void k(int* out) { out[0] = 42; }'
    out = np.zeros(1, np.int32)
    CpuRawKernel(code, "k", asan=False)(1, 1, (out,))
    objects = sorted(tmp_path.glob("*.so"))
    assert len(objects) == 1 and out[0] == 42
    mtime = objects[0].stat().st_mtime_ns
    CpuRawKernel(code, "k", asan=False)(1, 1, (out,))
    assert sorted(tmp_path.glob("*.so")) == objects and objects[0].stat().st_mtime_ns == mtime
    assert not list(tmp_path.glob("*.tmp"))


def test_compile_error_shows_gcc_message():
    with pytest.raises(CpuCompileError, match="undeclared|not declared"):
        CpuRawKernel('extern "C" __global__ void k(int* out) { out[0] = missing; }', "k").compile()


# ---------------------------------------------------------------- bad arguments


def test_wrong_argument_count(basics):
    with pytest.raises(TypeError, match="takes 3 argument"):
        basics.get_function("block_sum")(1, 32, (np.zeros(32, np.float32), np.zeros(1, np.float32)))


@pytest.mark.parametrize("bad, match", [
    (("not an array", np.zeros(1, np.float32), np.int32(1)), "expects a NumPy array"),
    ((np.zeros(32, np.float32), np.zeros(1, np.float32), np.float32(1)), "expects np.int32"),
    ((np.zeros(32, np.float32), np.zeros(1, np.float32), 1.0), "expects np.int32"),
    ((np.zeros(32, np.float32), np.zeros(1, np.float32), np.zeros(1, np.int32)), "passed by value"),
    ((np.zeros(32, np.float32), np.zeros(1, np.float32), "1"), "unsupported argument"),
])
def test_unsupported_argument_types(basics, bad, match):
    with pytest.raises(TypeError, match=match):
        basics.get_function("block_sum")(1, 32, bad)


def test_argument_values_and_layouts(basics):
    k = basics.get_function("block_sum")
    with pytest.raises(ValueError, match="does not fit"):
        k(1, 32, (np.zeros(32, np.float32), np.zeros(1, np.float32), 2**40))
    with pytest.raises(ValueError, match="C-contiguous"):
        k(1, 32, (np.zeros(64, np.float32)[::2], np.zeros(1, np.float32), np.int32(32)))
    readonly = np.zeros(1, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        k(1, 32, (np.zeros(32, np.float32), readonly, np.int32(32)))
    with pytest.raises(ValueError, match="1024 threads"):
        k(1, (64, 32), (np.zeros(32, np.float32), np.zeros(1, np.float32), np.int32(32)))
    with pytest.raises(ValueError, match="shared_mem"):
        k(1, 32, (np.zeros(32, np.float32), np.zeros(1, np.float32), np.int32(32)), shared_mem=64 * 1024)


def test_struct_parameter_is_refused_clearly():
    """A trivially copyable struct takes a Struct (tests/cpucuda/test_cpucuda_struct.py); anything else for it, or a class
    a GPU could not copy bytewise into its parameter space, is refused naming the parameter."""
    code = ('struct P { int a; float b; };\nextern "C" __global__ void k(P p, int* out) { out[0] = p.a; }\n'
            'struct Q { int a; Q(const Q& o) : a(o.a) {} };\nextern "C" __global__ void q(Q v, int* out) { out[0] = v.a; }')
    with pytest.raises(TypeError, match=r"argument 0 \(P\): a struct passed by value; expects sandbox.cpucuda.Struct"):
        CpuRawKernel(code, "k")(1, 1, (np.int32(1), np.zeros(1, np.int32)))
    with pytest.raises(TypeError, match="cannot pass parameters of type 'Q'"):
        CpuRawKernel(code, "q")(1, 1, (np.int32(1), np.zeros(1, np.int32)))


# ---------------------------------------------------------------- checks a GPU would not give

RACES = r"""
// Each thread writes its slot, then reads its right neighbour's, with or without a barrier.
extern "C" __global__ void neighbour(float* out, int use_barrier) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    if (use_barrier) __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

// Reads a shared slot no thread wrote in this block.
extern "C" __global__ void stale(float* out) {
    __shared__ float s[32];
    if (blockIdx.x == 0) s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x];
}

extern "C" __global__ void divergent(int* out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}

extern "C" __global__ void early_exit(const int* n, int* out) {
    if ((int)threadIdx.x >= n[0]) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

extern "C" __global__ void shuffle_after_exit(int* out) {
    if (threadIdx.x % 32 >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

extern "C" __global__ void null_write(int* out) { out[threadIdx.x] = 1; }

extern "C" __global__ void checked(const int* x) { assert(x[threadIdx.x] >= 0); }
"""


@pytest.fixture(scope="module")
def races():
    return CpuRawModule(code=RACES)


def test_missing_barrier_shows_in_reverse_order(races):
    k = races.get_function("neighbour")
    expected = (np.arange(64) + 1) % 64
    for order in ("forward", "reverse"):  # with the barrier: right in both orders
        out = np.zeros(64, np.float32)
        k(1, 64, (out, np.int32(1)), thread_order=order)
        np.testing.assert_array_equal(out, expected)
    # Without it, forward order reads the not-yet-written neighbour: the NaN poison shows.
    out = np.zeros(64, np.float32)
    k(1, 64, (out, np.int32(0)), thread_order="forward")
    assert np.isnan(out[:63]).all()
    # Reverse order hides it for all but the last thread: results that depend on the
    # order expose the race whichever way it goes (thread i reading slot i - 1 too).
    out = np.zeros(64, np.float32)
    k(1, 64, (out, np.int32(0)), thread_order="reverse")
    np.testing.assert_array_equal(out[:63], expected[:63])
    assert np.isnan(out[63])


def test_thread_order_from_kernel_attribute_and_environment(races, monkeypatch):
    k = races.get_function("neighbour")
    out = np.zeros(64, np.float32)
    monkeypatch.setenv("SANDBOX_CPUCUDA_ORDER", "reverse")
    k(1, 64, (out, np.int32(0)))
    assert np.isnan(out).nonzero()[0].tolist() == [63]  # the reverse-order signature
    monkeypatch.delenv("SANDBOX_CPUCUDA_ORDER")
    k2 = CpuRawModule(code=RACES, thread_order="reverse").get_function("neighbour")
    k2(1, 64, (out, np.int32(0)))
    assert np.isnan(out).nonzero()[0].tolist() == [63]
    with pytest.raises(ValueError, match="thread_order"):
        k(1, 64, (out, np.int32(0)), thread_order="sideways")


def test_shared_memory_is_poisoned_per_block(races):
    out = np.zeros(64, np.float32)
    races.get_function("stale")(2, 32, (out,))
    np.testing.assert_array_equal(out[:32], 1.0)
    assert np.isnan(out[32:]).all()  # block 1 must not see block 0's values


def test_divergent_barrier_names_kernel_and_lines(races):
    with pytest.raises(CpuKernelError, match=r"divergent barrier.*:\d+") as info:
        races.get_function("divergent")(1, 32, (np.zeros(32, np.int32),))
    msg = str(info.value)
    assert "'divergent'" in msg
    line_a = RACES.splitlines().index("        __syncthreads();") + 1
    assert f":{line_a}" in msg or f":{line_a + 2}" in msg


def test_deadlock_is_reported(races):
    with pytest.raises(CpuKernelError, match=r"'early_exit'.*deadlock.*__syncthreads at .*:\d+.*exited"):
        races.get_function("early_exit")(1, 64, (np.array([40], np.int32), np.zeros(64, np.int32)))
    out = np.zeros(64, np.int32)
    races.get_function("early_exit")(1, 64, (np.array([64], np.int32), out))  # no thread exits: fine
    assert (out == 1).all()


def test_warp_deadlock_is_reported(races):
    with pytest.raises(CpuKernelError, match=r"deadlock.*__shfl_xor_sync.*exited"):
        races.get_function("shuffle_after_exit")(1, 32, (np.zeros(32, np.int32),))


def test_segfault_becomes_an_exception(races):
    k = races.get_function("null_write")
    k.asan = False
    with pytest.raises(CpuKernelMemoryError, match=r"'null_write'.*invalid memory access.*thread \(0,0,0\).*python -m sandbox check NAME --asan"):
        k(1, 4, (None,), thread_order="forward")
    out = np.zeros(4, np.int32)  # the process and the executor still work
    k(1, 4, (out,))
    assert (out == 1).all()


def test_device_assert_becomes_an_exception(races):
    with pytest.raises(CpuKernelError, match=r"assertion `x\[threadIdx.x\] >= 0` failed .*thread \(2,0,0\)"):
        races.get_function("checked")(1, 4, (np.array([0, 1, -1, 2], np.int32),))


def test_ucontext_fallback_runs_barriers(monkeypatch):
    monkeypatch.setenv("SANDBOX_CPUCUDA_FIBERS", "ucontext")
    k = CpuRawModule(code=RACES).get_function("neighbour")
    out = np.zeros(64, np.float32)
    k(1, 64, (out, np.int32(1)))
    np.testing.assert_array_equal(out, (np.arange(64) + 1) % 64)


# ---------------------------------------------------------------- AddressSanitizer mode

ASAN_CODE = r"""
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" __global__ void off_by_one(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i] = x[i < n ? i : 0];
}

extern "C" __global__ void shared_overflow(float* y) {
    __shared__ float s[32];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x];
}
"""


@pytest.fixture(scope="module")
def asan_module():
    return CpuRawModule(code=ASAN_CODE, asan=True)


def test_asan_clean_launch_writes_back_in_place(asan_module):
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, np.float32)
    asan_module.get_function("scale")(4, 32, (x, y, np.int32(100)))
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(x, np.arange(100))


def test_asan_catches_out_of_bounds_write(asan_module):
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, np.float32)
    line = ASAN_CODE.splitlines().index("    if (i <= n) y[i] = x[i < n ? i : 0];") + 1
    with pytest.raises(CpuKernelMemoryError) as info:
        asan_module.get_function("off_by_one")(4, 32, (x, y, np.int32(100)))
    msg = str(info.value)
    assert "'off_by_one'" in msg and "heap-buffer-overflow" in msg and "write of 4 bytes" in msg
    assert f".cu:{line} in off_by_one" in msg
    assert "argument 1" in msg and "thread (4,0,0) of block (3,0,0)" in msg
    # The test process survived; the executor still works.
    asan_module.get_function("scale")(4, 32, (x, y, np.int32(100)))


def test_asan_catches_static_shared_overflow(asan_module):
    with pytest.raises(CpuKernelMemoryError, match=r"global-buffer-overflow.*__shared__ s"):
        asan_module.get_function("shared_overflow")(1, 33, (np.zeros(33, np.float32),))


def test_asan_catches_dynamic_shared_overflow():
    k = CpuRawModule(code=BASICS, sanitize="address").get_function("reverse_segments")
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(CpuKernelMemoryError, match=r"heap-buffer-overflow.*reverse_segments"):
        k(1, 64, (x, np.zeros_like(x)), shared_mem=63 * 4)


def test_asan_from_environment(monkeypatch):
    monkeypatch.setenv("SANDBOX_CPUCUDA_ASAN", "1")
    k = CpuRawModule(code=ASAN_CODE).get_function("off_by_one")
    with pytest.raises(CpuKernelMemoryError):
        k(1, 32, (np.zeros(31, np.float32), np.zeros(31, np.float32), np.int32(31)))


def test_asan_reports_barrier_errors_too(monkeypatch):
    monkeypatch.setenv("SANDBOX_CPUCUDA_ASAN", "1")
    with pytest.raises(CpuKernelError, match="divergent barrier"):
        CpuRawModule(code=RACES).get_function("divergent")(1, 32, (np.zeros(32, np.int32),))


# ---------------------------------------------------------------- the finite poison

POISON = r"""
// Row maximum with a classic bug: the last two slots of `vals` are never written, and fmaxf drops
// the NaN poison, so the result looks right under the default poison.
extern "C" __global__ void row_max(const float* x, float* out) {
    __shared__ float vals[32];
    if (threadIdx.x < 30) vals[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = -INFINITY;
        for (int i = 0; i < 32; ++i) m = fmaxf(m, vals[i]);
        out[0] = m;
    }
}

extern "C" __global__ void dump(float* f, __half* h, int* i) {
    __shared__ float sf[8];
    __shared__ __half sh[8];
    __shared__ int si[8];
    f[threadIdx.x] = sf[threadIdx.x];
    h[threadIdx.x] = sh[threadIdx.x];
    i[threadIdx.x] = si[threadIdx.x];
}

extern "C" __global__ void fails(int* x) { assert(x[0] == 1); }
"""


@pytest.fixture(scope="module")
def poison_module():
    return CpuRawModule(code=POISON)


def test_unwritten_slot_read_through_fmaxf_is_caught_only_by_the_finite_poison(poison_module):
    x = np.random.default_rng(8).standard_normal(32).astype(np.float32)
    k = poison_module.get_function("row_max")
    out = np.zeros(1, np.float32)
    k(1, 32, (x, out))  # NaN poison: fmaxf skips it, the bug hides
    assert out[0] == x[:30].max()
    for seed in range(8):  # two unwritten neighbours: one of them is large and positive, whatever the seed
        k(1, 32, (x, out), poison="finite", poison_seed=seed)
        assert out[0] > 1e30, seed


def test_finite_poison_values_and_seeds(poison_module, monkeypatch):
    f, h, i = np.zeros(8, np.float32), np.zeros(8, np.float16), np.zeros(8, np.int32)
    k = poison_module.get_function("dump")
    k(1, 8, (f, h, i), poison="finite", poison_seed=5)
    assert np.isfinite(f).all() and (np.abs(f) > 1e33).all() and (np.sign(f[:-1]) != np.sign(f[1:])).all()
    assert np.isfinite(h).all() and (np.abs(h.astype(np.float32)) >= 32768).all()
    assert (np.sign(h[0::2].astype(np.float32)) != np.sign(h[1::2].astype(np.float32))).all()  # one of each per word
    assert (np.abs(i.astype(np.int64)) > 2**25).all()
    again = np.zeros(8, np.float32)
    k(1, 8, (again, h, i), poison="finite", poison_seed=5)
    np.testing.assert_array_equal(again, f)  # same seed, same pattern
    k(1, 8, (again, h, i), poison="finite", poison_seed=6)
    assert not np.array_equal(again, f)
    # The environment switches it for the process; each launch draws a new seed, told by last_poison().
    monkeypatch.setenv("SANDBOX_CPUCUDA_POISON", "finite")
    k(1, 8, (again, h, i))
    first = last_poison()
    k(1, 8, (f, h, i))
    assert np.isfinite(again).all() and "finite, seed" in first and first != last_poison()
    monkeypatch.setenv("SANDBOX_CPUCUDA_POISON_SEED", "5")
    k(1, 8, (f, h, i))
    assert "seed 5;" in last_poison()
    monkeypatch.setenv("SANDBOX_CPUCUDA_POISON", "nan")
    k(1, 8, (f, h, i))
    assert np.isnan(f).all() and (i == -1).all()
    with pytest.raises(ValueError, match="poison"):
        k(1, 8, (f, h, i), poison="zeros")


def test_failure_messages_carry_the_poison_and_its_seed(poison_module):
    with pytest.raises(CpuKernelError, match=r"assertion(.|\n)*shared memory poison: finite, seed 1234; replay with "
                                             r"SANDBOX_CPUCUDA_POISON=finite SANDBOX_CPUCUDA_POISON_SEED=1234"):
        poison_module.get_function("fails")(1, 1, (np.zeros(1, np.int32),), poison="finite", poison_seed=1234)
    with pytest.raises(CpuKernelError, match=r"shared memory poison: nan"):
        poison_module.get_function("fails")(1, 1, (np.zeros(1, np.int32),))


def test_modes_context_manager_sets_and_restores_the_switches(poison_module):
    import os

    before = {k: os.environ.get(k) for k in ("SANDBOX_CPUCUDA_ORDER", "SANDBOX_CPUCUDA_POISON")}
    f, h, i = np.zeros(8, np.float32), np.zeros(8, np.float16), np.zeros(8, np.int32)
    with modes(order="reverse", poison="finite", poison_seed=9):
        assert os.environ["SANDBOX_CPUCUDA_ORDER"] == "reverse"
        poison_module.get_function("dump")(1, 8, (f, h, i))
        assert "seed 9;" in last_poison()
    assert {k: os.environ.get(k) for k in before} == before
    with pytest.raises(ValueError, match="order"):
        with modes(order="sideways"):
            pass
