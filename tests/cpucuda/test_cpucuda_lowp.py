"""Low-precision and complex types on the CPU executor (sandbox.cpucuda): <cuda_bf16.h>,
<cuda_fp8.h>, <cuComplex.h>, and how their NumPy arrays and scalars pass.

The conversions are checked bit for bit against ml_dtypes over every bfloat16 and fp8 bit
pattern, every rounding midpoint and its neighbours. NaN is the one documented difference:
the executor gives CUDA's canonical NaN patterns (bf16 0x7FFF, fp8 0x7F, half 0x7FFF), so
NaN positions are compared, not NaN bits. Compiled objects are cached: only a cold run pays g++.
"""
from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from sandbox.cpucuda import CpuCompileError, CpuRawKernel, CpuRawModule

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}

GRID = (8,)  # grid-stride loops: a few blocks cover any n
BLOCK = (256,)

CONVERSIONS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define FOR_EACH(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

extern "C" __global__ void bf16_to_float(const __nv_bfloat16* in, float* out, float* low, float* high, int n) {
    FOR_EACH(i, n) {
        out[i] = __bfloat162float(in[i]);
        if (i % 2 == 0) {  // the pair paths: __nv_bfloat162 loads and __bfloat1622float2
            __nv_bfloat162 p = *reinterpret_cast<const __nv_bfloat162*>(in + i);
            float2 f = __bfloat1622float2(p);
            low[i / 2] = f.x;
            high[i / 2] = __high2float(p);
        }
    }
}

extern "C" __global__ void float_to_bf16(const float* in, __nv_bfloat16* rn, __nv_bfloat16* ctor,
                                         __nv_bfloat16* pair, __nv_bfloat16* rz, __nv_bfloat16* rd,
                                         __nv_bfloat16* ru, int n) {
    FOR_EACH(i, n) {
        rn[i] = __float2bfloat16_rn(in[i]);
        ctor[i] = in[i];  // the converting constructor, as in `__nv_bfloat16 x = f;`
        pair[i] = __low2bfloat16(__floats2bfloat162_rn(in[i], 0.0f));
        rz[i] = __float2bfloat16_rz(in[i]);
        rd[i] = __float2bfloat16_rd(in[i]);
        ru[i] = __float2bfloat16_ru(in[i]);
    }
}

// fp8 -> float / half / bfloat16 for all 256 patterns of both formats.
extern "C" __global__ void fp8_widen(const __nv_fp8_e4m3* a, const __nv_fp8_e5m2* b, float* fa, float* fb,
                                     __half* ha, __half* hb, unsigned short* raw_a, unsigned short* raw_b,
                                     __nv_bfloat16* ba, __nv_bfloat16* bb, float* pair_a, float* pair_b, int n) {
    FOR_EACH(i, n) {
        fa[i] = float(a[i]);
        fb[i] = static_cast<float>(b[i]);
        ha[i] = __half(a[i]);
        hb[i] = (__half)b[i];
        raw_a[i] = __nv_cvt_fp8_to_halfraw(a[i].__x, __NV_E4M3).x;
        raw_b[i] = __nv_cvt_fp8_to_halfraw(b[i].__x, __NV_E5M2).x;
        ba[i] = __nv_bfloat16(a[i]);
        bb[i] = (__nv_bfloat16)b[i];
        if (i % 2 == 0) {
            float2 pa = float2(*reinterpret_cast<const __nv_fp8x2_e4m3*>(a + i));
            float2 pb = float2(*reinterpret_cast<const __nv_fp8x2_e5m2*>(b + i));
            __half2_raw h2 = __nv_cvt_fp8x2_to_halfraw2(*reinterpret_cast<const __nv_fp8x2_storage_t*>(b + i), __NV_E5M2);
            pair_a[i] = pa.x; pair_a[i + 1] = pa.y;
            pair_b[i] = pb.x; pair_b[i + 1] = __half2float(__half2(h2).y);
        }
    }
}

// float -> fp8 through every entry point. Outputs: [8][n] bytes.
extern "C" __global__ void fp8_narrow(const float* in, __nv_fp8_storage_t* out, __nv_fp8_e4m3* e4, __nv_fp8_e5m2* e5,
                                      int n) {
    FOR_EACH(i, n) {
        const float x = in[i];
        out[0 * n + i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
        out[1 * n + i] = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3);
        out[2 * n + i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
        out[3 * n + i] = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2);
        out[4 * n + i] = __nv_cvt_double_to_fp8((double)x, __NV_SATFINITE, __NV_E4M3);
        out[5 * n + i] = __nv_cvt_double_to_fp8((double)x, __NV_NOSAT, __NV_E5M2);
        __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(make_float2(x, -x), __NV_SATFINITE, __NV_E4M3);
        out[6 * n + i] = (__nv_fp8_storage_t)p;
        out[7 * n + i] = (__nv_fp8_storage_t)(p >> 8);  // -x
        e4[i] = __nv_fp8_e4m3(x);  // the constructors saturate (SATFINITE)
        e5[i] = __nv_fp8_e5m2(x);
    }
}

// half and bfloat16 -> fp8 (SATFINITE) for all 65536 patterns of each.
extern "C" __global__ void narrow16_to_fp8(const __half* h, const __nv_bfloat16* b, __nv_fp8_storage_t* out, int n) {
    FOR_EACH(i, n) {
        out[0 * n + i] = __nv_cvt_halfraw_to_fp8(__half_raw(h[i]), __NV_SATFINITE, __NV_E4M3);
        out[1 * n + i] = __nv_cvt_halfraw_to_fp8(__half_raw(h[i]), __NV_SATFINITE, __NV_E5M2);
        out[2 * n + i] = __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw(b[i]), __NV_SATFINITE, __NV_E4M3);
        out[3 * n + i] = __nv_fp8_e5m2(b[i]).__x;
    }
}

// fp8 vectors: x2 from half2/bfloat162/float2, x4 from float4 and two bfloat162, and back.
extern "C" __global__ void fp8_vectors(const float* in, __nv_fp8_storage_t* out, float* back, int n) {
    FOR_EACH(q, n / 4) {
        const int i = 4 * q;
        float4 f = make_float4(in[i], in[i + 1], in[i + 2], in[i + 3]);
        __nv_fp8x4_e4m3 v(f);
        *reinterpret_cast<__nv_fp8x4_e4m3*>(out + i) = v;
        __nv_fp8x4_e5m2 w(__floats2bfloat162_rn(f.x, f.y), __floats2bfloat162_rn(f.z, f.w));
        *reinterpret_cast<__nv_fp8x4_e5m2*>(out + n + i) = w;
        __nv_fp8x2_e4m3 h(__floats2half2_rn(f.x, f.y));
        *reinterpret_cast<__nv_fp8x2_e4m3*>(out + 2 * n + i) = h;
        __nv_fp8x2_e5m2 g(make_float2(f.z, f.w));
        *reinterpret_cast<__nv_fp8x2_e5m2*>(out + 2 * n + i + 2) = g;
        float4 r = float4(v);
        back[i] = r.x; back[i + 1] = r.y; back[i + 2] = r.z; back[i + 3] = r.w;
    }
}
"""

ARITH = r"""
#include <cuda_bf16.h>

#define FOR_EACH(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

// Outputs [K][n]: scalar intrinsics, the operators, the pair intrinsics on (a, b) pairs.
extern "C" __global__ void bf16_arith(const __nv_bfloat16* a, const __nv_bfloat16* b, const __nv_bfloat16* c,
                                      __nv_bfloat16* out, int n) {
    FOR_EACH(i, n) {
        const __nv_bfloat16 x = a[i], y = b[i], z = c[i];
        __nv_bfloat16* o = out + i;
        o[0 * n] = __hadd(x, y);
        o[1 * n] = __hsub(x, y);
        o[2 * n] = __hmul(x, y);
        o[3 * n] = __hdiv(x, y);
        o[4 * n] = __hfma(x, y, z);
        o[5 * n] = __hmax(x, y);
        o[6 * n] = __hmin(x, y);
        o[7 * n] = __hneg(x);
        o[8 * n] = __habs(x);
        o[9 * n] = hsqrt(x);
        __nv_bfloat16 s = x;
        s += y;
        o[10 * n] = s;
        o[11 * n] = x * y - z;  // two roundings, as on a GPU without contraction of bf16 operators
        o[12 * n] = -(x / y);
        const __nv_bfloat162 p = __halves2bfloat162(x, y), r = make_bfloat162(y, z);
        const __nv_bfloat162 q = __hfma2(p, r, __bfloat162bfloat162(z));
        o[13 * n] = __low2bfloat16(__hadd2(p, r));   // x + y
        o[14 * n] = __high2bfloat16(__hmul2(p, r));  // y * z
        o[15 * n] = __low2bfloat16(q);               // fma(x, y, z)
        o[16 * n] = __high2bfloat16(__hsub2(p, r) * p);  // (y - z) * y
        o[17 * n] = __low2bfloat16(__hmax2(p, __hneg2(r)));
        o[18 * n] = __nv_bfloat16((float)__heq(x, y) + 2.0f * (float)__hlt(x, y) + 4.0f * (float)__hgt(x, y)
                                  + 8.0f * (float)(x != y) + 16.0f * (float)__hne(x, y) + 32.0f * (float)__hisnan(x)
                                  + 64.0f * (float)__hisinf(x));
    }
}
"""

VLLM_STYLE = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// The helpers of vLLM's attention/dtype_bfloat16.cuh, as a paged-attention kernel writes them.
struct bf16_4_t { __nv_bfloat162 x; __nv_bfloat162 y; };
inline __device__ float2 bf1622float2(const __nv_bfloat162 val) { return __bfloat1622float2(val); }
inline __device__ __nv_bfloat162 bf162bf162(const __nv_bfloat16 val) { return __bfloat162bfloat162(val); }
inline __device__ __nv_bfloat162 add(__nv_bfloat162 a, __nv_bfloat162 b) { return __hadd2(a, b); }
inline __device__ __nv_bfloat162 mul(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmul2(a, b); }
inline __device__ __nv_bfloat162 fma(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) { return __hfma2(a, b, c); }
inline __device__ float sum(__nv_bfloat162 v) { float2 f = bf1622float2(v); return f.x + f.y; }
inline __device__ float sum(bf16_4_t v) { return sum(v.x) + sum(v.y); }
inline __device__ bf16_4_t mul(bf16_4_t a, bf16_4_t b) { return {mul(a.x, b.x), mul(a.y, b.y)}; }
inline __device__ void from_float(__nv_bfloat162& dst, float2 src) { dst = __float22bfloat162_rn(src); }
inline __device__ void zero(__nv_bfloat16& dst) { dst = __ushort_as_bfloat16((unsigned short)0x0000U); }

// One warp per key row: q.k with bf16 products summed in float, then a warp reduction;
// also scale each key pair by s with __hfma2 and swap the halves across lanes.
extern "C" __global__ void qk_dot(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                  float* __restrict__ logits, __nv_bfloat16* __restrict__ scaled,
                                  __nv_bfloat16* __restrict__ swapped, __nv_bfloat16 s, int head_size) {
    const int row = blockIdx.x, lane = threadIdx.x;
    float acc = 0.0f;
    for (int d = 4 * lane; d < head_size; d += 4 * warpSize) {
        const bf16_4_t qv = *reinterpret_cast<const bf16_4_t*>(q + d);
        const bf16_4_t kv = *reinterpret_cast<const bf16_4_t*>(k + row * head_size + d);
        acc += sum(mul(qv, kv));
        __nv_bfloat16 z;
        zero(z);
        const __nv_bfloat162 sx = fma(kv.x, bf162bf162(s), bf162bf162(z));
        __nv_bfloat162 sy;
        from_float(sy, bf1622float2(mul(kv.y, bf162bf162(s))));
        *reinterpret_cast<bf16_4_t*>(scaled + row * head_size + d) = bf16_4_t{sx, sy};
        __nv_bfloat162 other = __shfl_xor_sync(0xffffffffu, kv.x, 1);
        __nv_bfloat16 hi = __shfl_down_sync(0xffffffffu, __high2bfloat16(kv.y), 0);
        swapped[row * head_size + d] = __low2bfloat16(other);
        swapped[row * head_size + d + 1] = __high2bfloat16(other);
        swapped[row * head_size + d + 2] = __low2bfloat16(kv.y);
        swapped[row * head_size + d + 3] = hi;
    }
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (lane == 0) logits[row] = acc;
}
"""

COMPLEX = r"""
#include <cuComplex.h>

extern "C" __global__ void complex_ops(const cuFloatComplex* a, const cuFloatComplex* b, cuComplex z,
                                       cuFloatComplex* out, float* absval, int n, cuDoubleComplex w) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const cuFloatComplex x = a[i], y = b[i];
    out[0 * n + i] = cuCaddf(x, y);
    out[1 * n + i] = cuCsubf(x, y);
    out[2 * n + i] = cuCmulf(x, y);
    out[3 * n + i] = cuCdivf(x, y);
    out[4 * n + i] = cuConjf(x);
    out[5 * n + i] = cuCfmaf(x, y, z);
    out[6 * n + i] = make_cuComplex(cuCrealf(x) * cuCimagf(z), cuCimagf(x));
    const cuDoubleComplex dx = cuComplexFloatToDouble(x), dy = cuComplexFloatToDouble(y);
    out[7 * n + i] = cuComplexDoubleToFloat(cuCadd(cuCdiv(cuCmul(dx, dy), dy), w));
    out[8 * n + i] = cuComplexDoubleToFloat(cuCfma(dx, dy, make_cuDoubleComplex(cuCreal(w), cuCimag(cuConj(w)))));
    absval[i] = cuCabsf(x);
    absval[n + i] = (float)cuCabs(dy);
}
"""

SCALARS = r"""
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuComplex.h>

extern "C" __global__ void take_scalars(float* out, __nv_bfloat16 b, __nv_fp8_e4m3 e4, const __nv_fp8_e5m2 e5,
                                        cuFloatComplex z, double2 d2, cuDoubleComplex w) {
    out[0] = __bfloat162float(b);
    out[1] = float(e4);
    out[2] = float(e5);
    out[3] = z.x; out[4] = z.y;
    out[5] = (float)d2.x; out[6] = (float)d2.y;
    out[7] = (float)w.x; out[8] = (float)w.y;
}

// Byte and bit-pattern pointers: fp8 storage as unsigned char, bfloat16 as unsigned short.
extern "C" __global__ void copy_bits(const __nv_fp8_storage_t* f8, unsigned char* f8_out, const __nv_bfloat16* b,
                                     unsigned short* b_out, const cuFloatComplex* c, float2* c_out, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        f8_out[i] = f8[i];
        b_out[i] = __bfloat16_as_ushort(b[i]);
        c_out[i] = c[i];
    }
}
"""


@pytest.fixture(scope="module")
def conv():
    return CpuRawModule(code=CONVERSIONS)


@pytest.fixture(scope="module")
def arith():
    return CpuRawModule(code=ARITH)


def run(module, name, *args):
    module.get_function(name)(GRID, BLOCK, args)


def bits(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def f32(bit_patterns) -> np.ndarray:
    return np.asarray(bit_patterns, dtype=np.uint32).view(np.float32)


def assert_same(got: np.ndarray, want: np.ndarray, nan_bits: int | None = None, what: str = "") -> None:
    """Bit-identical where want is not NaN; NaN exactly where want is NaN (with nan_bits if given)."""
    g, w = got.astype(np.float32), want.astype(np.float32)
    nan = np.isnan(w)
    np.testing.assert_array_equal(np.isnan(g), nan, err_msg=f"{what}: NaN positions")
    bad = np.flatnonzero(bits(got)[~nan] != bits(want)[~nan])
    if bad.size:
        i = bad[:5]
        raise AssertionError(f"{what}: {bad.size} mismatches, e.g. inputs at {i}: got {bits(got)[~nan][i]}, "
                             f"want {bits(want)[~nan][i]}")
    if nan_bits is not None and nan.any():
        assert set(np.unique(bits(got)[nan]).tolist()) <= {nan_bits, nan_bits | (1 << (8 * got.itemsize - 1))}, what


ALL16 = np.arange(1 << 16, dtype=np.uint16)


def float_inputs_for_bf16() -> np.ndarray:
    """Every bfloat16 value, every midpoint between neighbours and the floats either side of it,
    random floats, specials (NaN with payloads, inf, float subnormals, the overflow edge)."""
    hi = ALL16.astype(np.uint32) << 16
    rng = np.random.default_rng(0)
    special = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7F800000, 0xFF800000, 0x00000001, 0x807FFFFF,
               0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7F8000, 0x00008000, 0x00018000, 0x80008001]
    return f32(np.concatenate([hi, hi | 0x8000, hi | 0x7FFF, hi | 0x8001, hi | 0x0001, hi | 0xFFFF,
                               rng.integers(0, 1 << 32, 100_000, dtype=np.uint32), special]))


# ---------------------------------------------------------------- bfloat16


def test_every_bfloat16_converts_to_float_exactly(conv):
    x = ALL16.view(BF16)
    out = np.zeros(x.size, np.float32)
    low, high = np.zeros(x.size // 2, np.float32), np.zeros(x.size // 2, np.float32)
    run(conv, "bf16_to_float", x, out, low, high, np.int32(x.size))
    want = x.astype(np.float32)
    np.testing.assert_array_equal(bits(out), bits(want))  # NaN payloads included
    np.testing.assert_array_equal(bits(low), bits(want[0::2]))
    np.testing.assert_array_equal(bits(high), bits(want[1::2]))


def test_float_to_bfloat16_rounds_like_ml_dtypes(conv):
    x = float_inputs_for_bf16()
    outs = [np.zeros(x.size, BF16) for _ in range(6)]
    run(conv, "float_to_bf16", x, *outs, np.int32(x.size))
    rn, ctor, pair, rz, rd, ru = outs
    with np.errstate(invalid="ignore"):
        want = x.astype(BF16)
    for got, what in ((rn, "__float2bfloat16_rn"), (ctor, "constructor"), (pair, "__floats2bfloat162_rn")):
        assert_same(got, want, nan_bits=0x7FFF, what=what)
    # Directed roundings from the float's bits: truncate, then step away from zero where asked.
    xb = bits(x)
    nan = np.isnan(x)
    trunc = np.where(nan, 0x7FFF, xb >> 16).astype(np.uint16)
    inexact = ((xb & 0xFFFF) != 0) & ~nan
    neg = (xb >> 31) == 1
    assert_same(rz, trunc.view(BF16), nan_bits=0x7FFF, what="_rz")
    assert_same(rd, (trunc + (inexact & neg)).astype(np.uint16).view(BF16), nan_bits=0x7FFF, what="_rd")
    assert_same(ru, (trunc + (inexact & ~neg)).astype(np.uint16).view(BF16), nan_bits=0x7FFF, what="_ru")
    # The ties really are there and really go to even.
    tie = f32([0x3F808000, 0x3F818000])  # 1 + 2^-8 (between 1 and 1+2^-7), 1 + 3*2^-8
    np.testing.assert_array_equal(bits(tie.astype(BF16)), [0x3F80, 0x3F82])


def exact_bf16(q: Fraction) -> int:
    """The bfloat16 nearest the rational q (ties to even), as bits."""
    if q == 0:
        return 0
    sign, q = (0x8000, -q) if q < 0 else (0, q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 7)
    n, rest = divmod(q, quantum)
    n = int(n) + (rest > quantum / 2 or (rest == quantum / 2 and n % 2 == 1))
    value = n * quantum
    if value >= Fraction(2) ** 128:
        return sign | 0x7F80
    return sign | int(np.float64(value.numerator / value.denominator if value.denominator != 1 else value.numerator)
                       .astype(np.float32).astype(BF16).view(np.uint16))


def arith_inputs():
    rng = np.random.default_rng(1)
    n = 4096
    a, b, c = (rng.integers(0, 1 << 16, n, dtype=np.uint16) for _ in range(3))
    # Keep most values in a sane range so that arithmetic does not drown in inf and NaN.
    for v in (a, b, c):
        v[: n // 2] = (v[: n // 2] & 0x807F) | (rng.integers(0x30, 0x50, n // 2, dtype=np.uint16) << 7)
    # fma cases where a*b is exactly a bfloat16 midpoint and c is tiny: one rounding decides by c's sign,
    # rounding a float fma first would tie to even. 1.5 * (1 + m/128), m odd < 42, lies in [1.5, 2).
    m = np.arange(1, 42, 2)
    mids = np.float32(1.5) * (1 + m / np.float32(128))
    tiny = np.array([2.0 ** -30, -(2.0 ** -30), 2.0 ** -60, -(2.0 ** -133)], np.float32)
    fa = np.full(m.size * tiny.size, 1.5, np.float32)
    fb = np.repeat((1 + m / 128).astype(np.float32), tiny.size)
    fc = np.tile(tiny, m.size)
    assert np.all((fa * fb).astype(BF16).astype(np.float32) != fa * fb) and mids.size == m.size
    specials = np.array([0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8001, 0x7F7F, 0x3F80, 0x0080], np.uint16)
    sa, sb = np.meshgrid(specials, specials)
    a = np.concatenate([a.view(BF16), fa.astype(BF16), sa.ravel().view(BF16)])
    b = np.concatenate([b.view(BF16), fb.astype(BF16), sb.ravel().view(BF16)])
    c = np.concatenate([c.view(BF16), fc.astype(BF16), np.full(sa.size, 0x3F80, np.uint16).view(BF16)])
    return a, b, c, 4096, 4096 + fa.size


def test_bfloat16_arithmetic_is_rounded_once(arith):
    a, b, c, fma_start, fma_end = arith_inputs()
    n = a.size
    out = np.zeros((19, n), BF16)
    arith.get_function("bf16_arith")(GRID, BLOCK, (a, b, c, out, np.int32(n)))
    x, y, z = (v.astype(np.float32) for v in (a, b, c))
    with np.errstate(all="ignore"):
        r = lambda v: np.asarray(v, np.float32).astype(BF16)  # noqa: E731  (float -> bf16, ml_dtypes)
        checks = {0: r(x + y), 1: r(x - y), 2: r(x * y), 3: r(x / y), 7: r(-x), 8: r(np.abs(x)), 9: r(np.sqrt(x)),
                  10: r(x + y), 11: r(r(x * y).astype(np.float32) - z), 12: r(-(x / y)), 13: r(x + y),
                  14: r(y * z), 16: r(r(y - z).astype(np.float32) * y), 5: r(np.fmax(x, y)), 6: r(np.fmin(x, y)),
                  17: r(np.fmax(x, -y))}
    # +0 > -0 for max and min, as CUDA documents (NumPy's fmax/fmin may return either zero).
    zero = (x == 0) & (y == 0)
    any_pos, any_neg = (bits(a) == 0) | (bits(b) == 0), (bits(a) == 0x8000) | (bits(b) == 0x8000)
    checks[5][zero] = np.where(any_pos, 0.0, -0.0)[zero]
    checks[6][zero] = np.where(any_neg, -0.0, 0.0)[zero]
    zero_neg = (x == 0) & (y == 0)  # max(x, -y): -y flips y's zero
    checks[17][zero_neg] = np.where((bits(a) == 0) | (bits(b) == 0x8000), 0.0, -0.0)[zero_neg]
    for k, want in checks.items():  # __hneg and __habs are bit operations: a NaN keeps its payload
        assert_same(out[k], want, nan_bits=None if k in (7, 8) else 0x7FFF, what=f"output {k}")
    assert zero.sum() >= 4
    # fma: exactly a*b + c rounded once (rational arithmetic), for the crafted midpoints and a sample.
    sample = list(range(fma_start, fma_end)) + list(range(0, 600))
    for i in sample:
        if not (np.isfinite(x[i]) and np.isfinite(y[i]) and np.isfinite(z[i])):
            continue
        exact = Fraction(float(x[i])) * Fraction(float(y[i])) + Fraction(float(z[i]))
        want = exact_bf16(exact)
        got = int(bits(out[4])[i])
        if want & 0x7FFF == 0:  # an exact zero: the sign follows IEEE rules, compare magnitudes
            got &= 0x7FFF
            want &= 0x7FFF
        assert got == want, (i, x[i], y[i], z[i], hex(got), hex(want))
        assert bits(out[15])[i] == bits(out[4])[i]
    # Those crafted cases would come out differently if rounded through a float fma first.
    naive = r(x[fma_start:fma_end] * y[fma_start:fma_end] + z[fma_start:fma_end])
    assert np.count_nonzero(bits(naive) != bits(out[4][fma_start:fma_end])) >= 20
    # Comparisons: ordered ones false on NaN, != true on NaN, __hisinf is -1/0/1.
    flags = out[18].astype(np.float32).astype(np.int64)
    with np.errstate(invalid="ignore"):
        isinf = np.where(np.isposinf(x), 1, np.where(np.isneginf(x), -1, 0))
        want = ((x == y) + 2 * (x < y) + 4 * (x > y) + 8 * (x != y) + 16 * ((x < y) | (x > y))
                + 32 * np.isnan(x) + 64 * isinf)
    np.testing.assert_array_equal(flags, want)


def test_vllm_style_bf16_kernel(tmp_path):
    rows, head = 6, 128
    rng = np.random.default_rng(2)
    q = rng.standard_normal(head).astype(BF16)
    k = rng.standard_normal((rows, head)).astype(BF16)
    s = ml_dtypes.bfloat16(0.3)
    logits = np.zeros(rows, np.float32)
    scaled = np.zeros((rows, head), BF16)
    swapped = np.zeros((rows, head), BF16)
    kern = CpuRawKernel(VLLM_STYLE, "qk_dot")
    kern((rows,), (32,), (q, k, logits, scaled, swapped, s, np.int32(head)))
    prods = (q.astype(np.float32) * k.astype(np.float32)).astype(BF16).astype(np.float64)
    np.testing.assert_allclose(logits, prods.sum(axis=1), rtol=1e-5, atol=1e-5)
    want_scaled = (k.astype(np.float32) * np.float32(s)).astype(BF16)
    np.testing.assert_array_equal(bits(scaled), bits(want_scaled))
    # lanes swapped their first pair with the neighbour (xor 1); the second pair stays.
    kk = k.reshape(rows, head // 4, 4)
    want = kk.copy()
    want[:, :, :2] = kk[:, np.arange(head // 4) ^ 1, :2]
    np.testing.assert_array_equal(bits(swapped), bits(want.reshape(rows, head)))


# ---------------------------------------------------------------- fp8


def fp8_values(dtype) -> np.ndarray:
    return np.arange(256, dtype=np.uint8).view(dtype)


def float_inputs_for_fp8() -> np.ndarray:
    """All fp8 values of both formats, every midpoint between neighbours and the floats just
    above and below each, overflow, infinities, NaN, float subnormals, random floats."""
    parts = []
    for dtype in (E4M3, E5M2):
        v = fp8_values(dtype).astype(np.float32)
        v = np.unique(v[np.isfinite(v)])
        mid = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)  # exact: few bits
        assert np.all(mid.astype(np.float64) == (v[:-1].astype(np.float64) + v[1:]) / 2)
        top = np.float32(FP8_MAX[dtype])
        step = top - v[-2]
        beyond = np.array([top + step / 2, top + step, top * 2, top + step / 4, 3.0e38], np.float32)
        parts += [v, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf)),
                  beyond, -beyond, np.nextafter(beyond, np.float32(0)), np.nextafter(beyond, np.float32(np.inf))]
    rng = np.random.default_rng(3)
    parts += [f32([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7F800000, 0xFF800000, 1, 0x807FFFFF, 0x80000000, 0]),
              (rng.standard_normal(20_000) * np.exp2(rng.integers(-20, 18, 20_000))).astype(np.float32),
              f32(rng.integers(0, 1 << 32, 20_000, dtype=np.uint32))]
    x = np.concatenate(parts).astype(np.float32)
    x = np.concatenate([x, -x])
    return x[: x.size // 4 * 4]


def test_every_fp8_widens_exactly(conv):
    a, b = fp8_values(E4M3), fp8_values(E5M2)
    n = np.int32(256)
    fa, fb, pa, pb = (np.zeros(256, np.float32) for _ in range(4))
    ha, hb = np.zeros(256, np.float16), np.zeros(256, np.float16)
    raw_a, raw_b = np.zeros(256, np.uint16), np.zeros(256, np.uint16)
    ba, bb = np.zeros(256, BF16), np.zeros(256, BF16)
    run(conv, "fp8_widen", a, b, fa, fb, ha, hb, raw_a, raw_b, ba, bb, pa, pb, n)
    for src, f, h, raw, bf, pair in ((a, fa, ha, raw_a, ba, pa), (b, fb, hb, raw_b, bb, pb)):
        what = src.dtype.name
        assert_same(f, src.astype(np.float32), nan_bits=0x7FFFFFFF, what=what + " -> float")
        assert_same(pair, src.astype(np.float32), what=what + " x2 -> float2")
        assert_same(h, src.astype(np.float16), nan_bits=0x7FFF, what=what + " -> __half")
        assert_same(raw.view(np.float16), src.astype(np.float16), nan_bits=0x7FFF, what=what + " -> halfraw")
        assert_same(bf, src.astype(BF16), nan_bits=0x7FFF, what=what + " -> bfloat16")
    assert np.count_nonzero(np.isnan(fa)) == 2 and np.count_nonzero(np.isnan(fb)) == 6
    assert np.count_nonzero(np.isinf(fb)) == 2 and not np.isinf(fa).any()


def satfinite(x: np.ndarray, dtype) -> np.ndarray:
    """CUDA's __NV_SATFINITE as ml_dtypes: clip finite overflow and infinities, keep NaN."""
    with np.errstate(invalid="ignore"):
        return np.clip(x, -FP8_MAX[dtype], FP8_MAX[dtype]).astype(dtype)


def test_float_to_fp8_matches_ml_dtypes(conv):
    x = float_inputs_for_fp8()
    n = x.size
    out = np.zeros((8, n), np.uint8)
    e4, e5 = np.zeros(n, E4M3), np.zeros(n, E5M2)
    run(conv, "fp8_narrow", x, out, e4, e5, np.int32(n))
    with np.errstate(invalid="ignore", over="ignore"):
        cases = [(0, E4M3, satfinite(x, E4M3), "float e4m3 SATFINITE"),
                 (1, E4M3, x.astype(E4M3), "float e4m3 NOSAT"),
                 (2, E5M2, satfinite(x, E5M2), "float e5m2 SATFINITE"),
                 (3, E5M2, x.astype(E5M2), "float e5m2 NOSAT"),
                 (4, E4M3, satfinite(x, E4M3), "double e4m3 SATFINITE"),
                 (5, E5M2, x.astype(E5M2), "double e5m2 NOSAT"),
                 (6, E4M3, satfinite(x, E4M3), "float2 low"),
                 (7, E4M3, satfinite(-x, E4M3), "float2 high")]
    for row, dtype, want, what in cases:
        # Float NaN inputs give 0x7F, e4m3 NOSAT overflow 0x7F or 0xFF. The double path keeps a
        # NaN's sign and (e5m2) its top payload bit, as CUDA's __nv_cvt_double_to_fp8 does.
        assert_same(out[row].view(dtype), want, nan_bits=None if row == 5 else 0x7F, what=what)
    assert set(np.unique(out[5][np.isnan(x)]).tolist()) <= {0x7E, 0x7F, 0xFE, 0xFF}
    assert_same(e4, satfinite(x, E4M3), nan_bits=0x7F, what="__nv_fp8_e4m3(float)")
    assert_same(e5, satfinite(x, E5M2), nan_bits=0x7F, what="__nv_fp8_e5m2(float)")
    # The documented edges, spelled out.
    above_464 = float(np.nextafter(np.float32(464), np.float32(np.inf)))
    probe = {448.0: 0x7E, 464.0: 0x7E, above_464: 0x7F, -3.0e38: 0xFF, 2.0 ** -10: 0x00, 2.0 ** -9: 0x01}
    idx = [int(np.flatnonzero(x == np.float32(v))[0]) for v in probe]
    assert [int(out[1, i]) for i in idx] == list(probe.values())
    assert int(out[0, idx[3]]) == 0xFE  # SATFINITE: -max
    inf = int(np.flatnonzero(np.isposinf(x))[0])
    assert (out[0, inf], out[1, inf], out[2, inf], out[3, inf]) == (0x7E, 0x7F, 0x7B, 0x7C)


def test_half_and_bfloat16_to_fp8(conv):
    h, b = ALL16.view(np.float16), ALL16.view(BF16)
    n = ALL16.size
    out = np.zeros((4, n), np.uint8)
    run(conv, "narrow16_to_fp8", h, b, out, np.int32(n))
    hf, bf = h.astype(np.float32), b.astype(np.float32)
    assert_same(out[0].view(E4M3), satfinite(hf, E4M3), nan_bits=0x7F, what="halfraw -> e4m3")
    assert_same(out[1].view(E5M2), satfinite(hf, E5M2), nan_bits=0x7F, what="halfraw -> e5m2")
    assert_same(out[2].view(E4M3), satfinite(bf, E4M3), nan_bits=0x7F, what="bfloat16raw -> e4m3")
    assert_same(out[3].view(E5M2), satfinite(bf, E5M2), nan_bits=0x7F, what="__nv_fp8_e5m2(bfloat16)")


def test_fp8_vector_types(conv):
    x = float_inputs_for_fp8()
    x = x[np.abs(x) < 3e4]  # also representable as half for the __half2 path
    x = x[: x.size // 4 * 4]
    n = x.size
    out = np.zeros((3, n), np.uint8)
    back = np.zeros(n, np.float32)
    run(conv, "fp8_vectors", x, out, back, np.int32(n))
    assert_same(out[0].view(E4M3), satfinite(x, E4M3), nan_bits=0x7F, what="__nv_fp8x4_e4m3(float4)")
    assert_same(out[1].view(E5M2), satfinite(x.astype(BF16).astype(np.float32), E5M2), nan_bits=0x7F,
                what="__nv_fp8x4_e5m2(bfloat162, bfloat162)")
    half_path = satfinite(x.astype(np.float16).astype(np.float32), E4M3).reshape(-1, 2)[0::2].ravel()
    assert_same(out[2].reshape(-1, 4)[:, :2].ravel().view(E4M3), half_path, nan_bits=0x7F, what="x2 from __half2")
    assert_same(out[2].reshape(-1, 4)[:, 2:].ravel().view(E5M2),
                satfinite(x, E5M2).reshape(-1, 4)[:, 2:].ravel(), nan_bits=0x7F, what="x2 from float2")
    assert_same(back, satfinite(x, E4M3).astype(np.float32), nan_bits=0x7FFFFFFF, what="float4(x4)")


def test_fp8_conversions_out_are_explicit_as_in_cuda():
    code = r"""
#include <cuda_fp8.h>
extern "C" __global__ void implicit(const __nv_fp8_e4m3* p, float* out) { float f = p[0]; out[0] = f; }
"""
    with pytest.raises(CpuCompileError, match="cannot convert|conversion"):
        CpuRawKernel(code, "implicit").params


# ---------------------------------------------------------------- complex


def test_cucomplex_against_numpy():
    rng = np.random.default_rng(4)
    n = 300
    a = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    b = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    a[:3] = [3 + 4j, 1e30 + 1e30j, 0]
    z = np.complex64(0.5 - 2j)
    w = 1.25 - 0.75j  # a Python complex passes as cuDoubleComplex
    out = np.zeros((9, n), np.complex64)
    absval = np.zeros((2, n), np.float32)
    CpuRawKernel(COMPLEX, "complex_ops")(((n + 127) // 128,), (128,), (a, b, z, out, absval, np.int32(n), w))
    a64, b64 = a.astype(np.complex128), b.astype(np.complex128)
    want = [a64 + b64, a64 - b64, a64 * b64, a64 / b64, np.conj(a64), a64 * b64 + z,
            a64.real * z.imag + 1j * a64.imag, a64 * b64 / b64 + w, a64 * b64 + np.conj(w)]
    for k, v in enumerate(want):
        np.testing.assert_allclose(out[k][3:], v[3:], rtol=2e-6, atol=1e-6, err_msg=f"output {k}")
    np.testing.assert_allclose(absval[0], np.abs(a64), rtol=1e-6)
    assert absval[0][0] == 5.0 and np.isfinite(absval[0][1])  # no overflow in |1e30 + 1e30j|
    np.testing.assert_allclose(absval[1], np.abs(b64), rtol=1e-6)
    np.testing.assert_array_equal(out[0][:1], [3 + 4j + b[0]])


# ---------------------------------------------------------------- arguments


@pytest.fixture(scope="module")
def scalars():
    return CpuRawModule(code=SCALARS)


def test_low_precision_and_complex_scalars_pass_by_value(scalars):
    kern = scalars.get_function("take_scalars")
    assert [p.code for p in kern.params] == ["P", "E", "4", "5", "F", "D", "D"]
    out = np.zeros(9, np.float32)
    kern(1, 1, (out, ml_dtypes.bfloat16(-1.5), ml_dtypes.float8_e4m3fn(448), ml_dtypes.float8_e5m2(-0.25),
                np.complex64(2 - 3j), np.complex128(0.5 + 7j), -4 + 0.125j))
    np.testing.assert_array_equal(out, [-1.5, 448, -0.25, 2, -3, 0.5, 7, -4, 0.125])


@pytest.mark.parametrize("index, bad, match", [
    (1, np.float32(1.5), "expects ml_dtypes.bfloat16"),
    (1, np.uint16(0x3F80), "expects ml_dtypes.bfloat16"),
    (1, 1.5, "expects ml_dtypes.bfloat16"),
    (2, ml_dtypes.float8_e5m2(1), "expects ml_dtypes.float8_e4m3fn"),
    (2, np.uint8(0x38), "expects ml_dtypes.float8_e4m3fn"),
    (4, np.complex128(1j), "expects np.complex64"),
    (4, 1j, "expects np.complex64"),
    (6, np.complex64(1j), "expects np.complex128"),
    (6, 1.0, "expects np.complex128"),
])
def test_scalar_types_are_exact(scalars, index, bad, match):
    args = [np.zeros(9, np.float32), ml_dtypes.bfloat16(1), ml_dtypes.float8_e4m3fn(1), ml_dtypes.float8_e5m2(1),
            np.complex64(0), np.complex128(0), np.complex128(0)]
    args[index] = bad
    with pytest.raises(TypeError, match=match):
        scalars.get_function("take_scalars")(1, 1, tuple(args))


def test_arrays_pass_as_pointers_whatever_their_dtype(scalars):
    n = 64
    f8 = np.arange(n, dtype=np.uint8).view(E4M3)
    b = (np.arange(n, dtype=np.uint16) * 997).view(BF16)
    c = (np.arange(n) * (1 + 2j)).astype(np.complex64)
    f8_out, b_out, c_out = np.zeros(n, np.uint8), np.zeros(n, np.uint16), np.zeros(n, np.complex64)
    kern = scalars.get_function("copy_bits")
    kern(1, 32, (f8, f8_out, b, b_out, c, c_out, np.int32(n)))
    np.testing.assert_array_equal(f8_out, f8.view(np.uint8))
    np.testing.assert_array_equal(b_out, b.view(np.uint16))
    np.testing.assert_array_equal(c_out, c)
    # uint16 bit patterns for __nv_bfloat16* and uint8 for fp8 keep working (older launchers pass them).
    b_out[:] = 0
    kern(1, 32, (f8.view(np.uint8), f8_out, b.view(np.uint16), b_out, c.view(np.float32), c_out, np.int32(n)))
    np.testing.assert_array_equal(b_out, b.view(np.uint16))


def test_scalars_under_asan():
    code = SCALARS.replace("take_scalars", "take_scalars_asan")
    kern = CpuRawKernel(code, "take_scalars_asan", asan=True)
    out = np.zeros(9, np.float32)
    kern(1, 1, (out, ml_dtypes.bfloat16(3), ml_dtypes.float8_e4m3fn(-2), ml_dtypes.float8_e5m2(8),
                np.complex64(1 + 2j), np.complex128(3 + 4j), np.complex128(5 - 6j)))
    np.testing.assert_array_equal(out, [3, -2, 8, 1, 2, 3, 4, 5, -6])


# ---------------------------------------------------------------- the real headers (NVRTC)

NVRTC_KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuComplex.h>
extern "C" __global__ void lowp(const __nv_fp8_e4m3* kv, const __nv_bfloat16* q, float* out, __nv_fp8_e5m2* o8,
                                __nv_bfloat16 scale, cuFloatComplex z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i + 1 >= n) return;
    __half_raw h = __nv_cvt_fp8_to_halfraw(kv[2 * i].__x, __NV_E4M3);
    float k0 = __half2float(__half(h)), k1 = float(kv[2 * i + 1]);
    __nv_bfloat162 qq = *reinterpret_cast<const __nv_bfloat162*>(q + 2 * i);
    __nv_bfloat162 p = __hfma2(qq, __floats2bfloat162_rn(k0, k1), __bfloat162bfloat162(scale));
    float2 f = __bfloat1622float2(__hmul2(p, p));
    f.x += __shfl_xor_sync(0xffffffffu, f.x, 1) + cuCabsf(z);
    out[i] = f.x + __high2float(p);
    o8[i] = __nv_fp8_e5m2(__nv_cvt_float_to_fp8(f.y, __NV_SATFINITE, __NV_E4M3) ? f.x : f.y);
}
"""


def test_same_lowp_source_compiles_with_nvrtc_for_sm90_and_runs_here():
    nvrtc = pytest.importorskip("sandbox.analysis.nvrtc")
    pytest.importorskip("cuda.bindings.nvrtc")
    try:
        nvrtc.cuda_include_dir()
    except nvrtc.NvrtcError as exc:
        pytest.skip(str(exc))
    compiled = nvrtc.compile_cubin(NVRTC_KERNEL, arch="sm_90")
    assert compiled.cubin and "lowp" in compiled.resources
    # and the executor runs the very same source
    n = 64
    kv = np.linspace(-4, 4, n).astype(E4M3)
    q = np.linspace(-1, 1, n).astype(BF16)
    out, o8 = np.zeros(n // 2, np.float32), np.zeros(n // 2, E5M2)
    CpuRawKernel(NVRTC_KERNEL, "lowp")((1,), (32,), (kv, q, out, o8, ml_dtypes.bfloat16(0.5), np.complex64(3 + 4j),
                                                     np.int32(n)))
    assert np.isfinite(out).all() and np.isfinite(o8.astype(np.float32)).all()
