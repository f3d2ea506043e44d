"""Inline PTX on the CPU executor (sandbox/cpucuda/ptx.py, ptx_ops.py, include/cpucuda_ptx.h): every translated
instruction against an exact reference (rounding to f16/bf16 is computed with Python fractions, not with the code
under test), the statement shapes vLLM's dtype_float16.cuh uses, and the refusals (file:line and the instruction;
nothing refused inside code the preprocessor drops)."""
from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from sandbox.cpucuda import CpuCompileError, CpuKernelError, CpuRawKernel, CpuRawModule

# The shapes of vLLM's csrc/attention/dtype_float16.cuh (register constraints, {%0, %1} vectors, union
# members as outputs, "\n" in the template, a ROCm branch the preprocessor drops), written afresh.
VLLM_SHAPES = r"""
#include <stdint.h>
namespace shapes {
inline __device__ uint32_t splat(uint16_t a) {
  uint32_t b;
  asm volatile("mov.b32 %0, {%1, %1};" : "=r"(b) : "h"(a));
  return b;
}
inline __device__ float to_f32(uint16_t h) {
  float f;
  asm volatile("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
  return f;
}
inline __device__ float2 to_f32x2(uint32_t v) {
  uint16_t lo, hi;
  asm volatile("mov.b32 {%0, %1}, %2;\n" : "=h"(lo), "=h"(hi) : "r"(v));
  return make_float2(to_f32(lo), to_f32(hi));
}
inline __device__ uint16_t to_f16(float f) {
  union { uint32_t u32; uint16_t u16[2]; } tmp;
  asm volatile("cvt.rn.f16.f32 %0, %1;\n" : "=h"(tmp.u16[0]) : "f"(f));
  return tmp.u16[0];
}
inline __device__ uint32_t to_f16x2(float2 f) {
  union { uint32_t u32; uint16_t u16[2]; } tmp;
#ifndef USE_ROCM
  asm volatile("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(tmp.u32) : "f"(f.y), "f"(f.x));
#else
  asm volatile("v_cvt_pkrtz_f16_f32 %0, %1, %2;" : "=v"(tmp.u32) : "v"(f.x), "v"(f.y));
#endif
  return tmp.u32;
}
inline __device__ uint16_t add(uint16_t a, uint16_t b) {
  uint16_t c;
  asm volatile("add.f16 %0, %1, %2;\n" : "=h"(c) : "h"(a), "h"(b));
  return c;
}
inline __device__ uint32_t add(uint32_t a, uint32_t b) {
  uint32_t c;
  asm volatile("add.f16x2 %0, %1, %2;\n" : "=r"(c) : "r"(a), "r"(b));
  return c;
}
inline __device__ uint16_t mul(uint16_t a, uint16_t b) {
  uint16_t c;
  asm volatile("mul.f16 %0, %1, %2;\n" : "=h"(c) : "h"(a), "h"(b));
  return c;
}
inline __device__ uint32_t mul(uint32_t a, uint32_t b) {
  uint32_t c;
  asm volatile("mul.f16x2 %0, %1, %2;\n" : "=r"(c) : "r"(a), "r"(b));
  return c;
}
inline __device__ uint32_t fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
}  // namespace shapes

// out[k][i] for the pair (a[i], b[i]) of halves: k = 0 add.f16, 1 mul.f16, 2/3 add.f16x2 lo/hi, 4/5 mul.f16x2,
// 6/7 fma.rn.f16x2 (a * b + a), 8 splat then unpack (b's bits), 9 to_f16(to_f32(a)) (a round trip),
// 10/11 to_f16x2 of the floats (lo = fx[i], hi = fy[i]) unpacked by to_f32x2 and rounded back.
extern "C" __global__ void vllm_shapes(const uint16_t* a, const uint16_t* b, const float* fx, const float* fy,
                                       uint16_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t a2 = (uint32_t)a[i] | ((uint32_t)b[i] << 16), b2 = (uint32_t)b[i] | ((uint32_t)a[i] << 16);
  out[0 * n + i] = shapes::add(a[i], b[i]);
  out[1 * n + i] = shapes::mul(a[i], b[i]);
  const uint32_t s = shapes::add(a2, b2), p = shapes::mul(a2, b2), f = shapes::fma(a2, b2, a2);
  out[2 * n + i] = (uint16_t)s; out[3 * n + i] = (uint16_t)(s >> 16);
  out[4 * n + i] = (uint16_t)p; out[5 * n + i] = (uint16_t)(p >> 16);
  out[6 * n + i] = (uint16_t)f; out[7 * n + i] = (uint16_t)(f >> 16);
  out[8 * n + i] = (uint16_t)(shapes::splat(b[i]) >> 16);
  out[9 * n + i] = shapes::to_f16(shapes::to_f32(a[i]));
  const float2 back = shapes::to_f32x2(shapes::to_f16x2(make_float2(fx[i], fy[i])));
  out[10 * n + i] = shapes::to_f16(back.x);
  out[11 * n + i] = shapes::to_f16(back.y);
}
"""

def cvt(op: str, dst: str, src: str, d: str, s: str) -> str:
    return f'asm("{op} %0, %1;" : "={d}"({dst}) : "{s}"({src}));'


CONVERSIONS = rf"""
// out[k][i] of x[i] (float): f16 with rn rz rm rp, bf16 with rn rz rm rp, f16 rn.sat, bf16 rn.relu,
// f16 rn.satfinite, f16 rn.ftz (x subnormal as a float: zero).
extern "C" __global__ void from_f32(const float* x, uint16_t* out, int n) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  uint16_t h;
  {cvt("cvt.rn.f16.f32", "h", "v", "h", "f")} out[0 * n + i] = h;
  {cvt("cvt.rz.f16.f32", "h", "v", "h", "f")} out[1 * n + i] = h;
  {cvt("cvt.rm.f16.f32", "h", "v", "h", "f")} out[2 * n + i] = h;
  {cvt("cvt.rp.f16.f32", "h", "v", "h", "f")} out[3 * n + i] = h;
  {cvt("cvt.rn.bf16.f32", "h", "v", "h", "f")} out[4 * n + i] = h;
  {cvt("cvt.rz.bf16.f32", "h", "v", "h", "f")} out[5 * n + i] = h;
  {cvt("cvt.rm.bf16.f32", "h", "v", "h", "f")} out[6 * n + i] = h;
  {cvt("cvt.rp.bf16.f32", "h", "v", "h", "f")} out[7 * n + i] = h;
  {cvt("cvt.rn.sat.f16.f32", "h", "v", "h", "f")} out[8 * n + i] = h;
  {cvt("cvt.rn.relu.bf16.f32", "h", "v", "h", "f")} out[9 * n + i] = h;
  {cvt("cvt.rn.satfinite.f16.f32", "h", "v", "h", "f")} out[10 * n + i] = h;
  {cvt("cvt.rn.ftz.f16.f32", "h", "v", "h", "f")} out[11 * n + i] = h;
}}
// Every 16-bit pattern h: as f16 and as bf16 widened to f32, and narrowed across (f16 -> bf16 -> f16, rn).
extern "C" __global__ void from_16(const uint16_t* h, float* f16_f32, float* bf16_f32, uint16_t* f16_bf16,
                                   uint16_t* bf16_f16, int n) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float f; uint16_t r;
  {cvt("cvt.f32.f16", "f", "h[i]", "f", "h")} f16_f32[i] = f;
  {cvt("cvt.f32.bf16", "f", "h[i]", "f", "h")} bf16_f32[i] = f;
  {cvt("cvt.rn.bf16.f16", "r", "h[i]", "h", "h")} f16_bf16[i] = r;
  {cvt("cvt.rz.f16.bf16", "r", "h[i]", "h", "h")} bf16_f16[i] = r;
}}
// Pairs: cvt.rn.f16x2.f32 and cvt.rz.bf16x2.f32 (first source to the upper half), integer width conversions.
extern "C" __global__ void pairs(const float* x, const float* y, uint32_t* out, int* ints, int n) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(x[i]), "f"(y[i])); out[2 * i] = d;
  asm("cvt.rz.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(x[i]), "f"(y[i])); out[2 * i + 1] = d;
  int v = ints[i], w;
  asm("cvt.sat.s8.s32 %0, %1;" : "=r"(w) : "r"(v)); ints[n + i] = w;
  asm("cvt.u16.u32 %0, %1;" : "=r"(w) : "r"(v)); ints[2 * n + i] = w;
  asm("cvt.s32.s16 %0, %1;" : "=r"(w) : "r"(v)); ints[3 * n + i] = w;
  asm("cvt.rni.f32.f32 %0, %1;" : "=f"(*(float*)&w) : "f"(x[i])); ints[4 * n + i] = w;
}}
// bf16 arithmetic, with the case double rounding gets wrong: a * b on a bf16 tie, c a hair below zero.
extern "C" __global__ void bf16_math(const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out, int n) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i])); out[3 * i] = d;
  asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a[i]), "r"(b[i])); out[3 * i + 1] = d;
  asm("mul.rn.ftz.sat.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a[i]), "r"(b[i])); out[3 * i + 2] = d;
}}
"""

MEMORY_AND_BITS = r"""
// Loads and stores in their vector and cache-hint forms; prmt in every mode; lop3.
extern "C" __global__ void memory(const uint4* src, uint4* dst, const unsigned char* bytes, int* ints) {
  const int i = threadIdx.x;
  uint32_t a, b, c, d;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(src + i));
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(dst + i), "r"(d), "r"(c), "r"(b), "r"(a));
  float f0, f1;
  asm volatile("ld.global.ca.v2.f32 {%0, %1}, [%2+8];" : "=f"(f0), "=f"(f1) : "l"(src + i));
  asm volatile("st.global.wb.v2.f32 [%0+8], {%1, %2};" :: "l"(dst + 32 + i), "f"(f1), "f"(f0));
  uint32_t u, s;
  asm volatile("ld.global.nc.L1::no_allocate.u8 %0, [%1];" : "=r"(u) : "l"(bytes + i));
  asm volatile("ld.global.nc.s8 %0, [%1];" : "=r"(s) : "l"(bytes + i));
  ints[i] = (int)u;
  ints[32 + i] = (int)s;
  uint32_t w;
  asm volatile("ld.global.nc.b32 %0, [%1+4];" : "=r"(w) : "l"(src + i));
  asm volatile("st.global.cs.b32 [%0], %1;" :: "l"(ints + 64 + i), "r"(w));
  unsigned short h;
  asm volatile("ld.global.b16 %0, [%1];" : "=h"(h) : "l"(src + i));
  asm volatile("st.global.b16 [%0], %1;" :: "l"(ints + 96 + i), "h"(h));
}
extern "C" __global__ void misaligned(const unsigned char* p, uint32_t* out) {
  uint32_t a, b, c, d;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p + 4));
  out[0] = a + b + c + d;
}
// out[7 * i + k]: prmt default (selector c[i]) then f4e b4e rc8 ecl ecr rc16 (selector c[i] & 3).
extern "C" __global__ void bits(const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i])); out[9 * i] = d;
  asm("prmt.b32.f4e %0, %1, %2, %3;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i])); out[9 * i + 1] = d;
  asm("prmt.b32.b4e %0, %1, %2, %3;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i])); out[9 * i + 2] = d;
  asm("prmt.b32.rc8 %0, %1, %2, %3;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i])); out[9 * i + 3] = d;
  asm("prmt.b32.ecl %0, %1, %2, %3;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i])); out[9 * i + 4] = d;
  asm("prmt.b32.ecr %0, %1, %2, %3;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i])); out[9 * i + 5] = d;
  asm("prmt.b32.rc16 %0, %1, %2, %3;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i])); out[9 * i + 6] = d;
  asm("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i])); out[9 * i + 7] = d;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a[i]), "r"(b[i]), "r"(c[i]), "n"(0xE8)); out[9 * i + 8] = d;
}
// shfl.sync in its four modes next to the intrinsic: out[4][64] from PTX, ref[4][64] from __shfl_*_sync.
extern "C" __global__ void shuffles(const uint32_t* v, uint32_t* out, uint32_t* ref, int* pred) {
  const int t = threadIdx.x;
  uint32_t d;
  int p;
  asm volatile("{ .reg .pred q; shfl.sync.idx.b32 %0|q, %2, %3, %4, %5; selp.b32 %1, 1, 0, q; }"
               : "=r"(d), "=r"(p) : "r"(v[t]), "r"(5), "r"(0x181f), "r"(0xffffffff));
  out[t] = d;
  asm volatile("shfl.sync.up.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(v[t]), "r"(3), "r"(0x1800), "r"(0xffffffff));
  out[64 + t] = d;
  asm volatile("shfl.sync.down.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(v[t]), "r"(2), "r"(0x1f), "r"(0xffffffff));
  out[128 + t] = d;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(v[t]), "r"(6), "r"(0x1f), "r"(0xffffffff));
  out[192 + t] = d;
  ref[t] = __shfl_sync(0xffffffffu, v[t], 5, 8);
  ref[64 + t] = __shfl_up_sync(0xffffffffu, v[t], 3, 8);
  ref[128 + t] = __shfl_down_sync(0xffffffffu, v[t], 2);
  ref[192 + t] = __shfl_xor_sync(0xffffffffu, v[t], 6);
  pred[t] = p;
}
"""


# ---------------------------------------------------------------- an exact reference

F16, BF16 = (5, 10), (8, 7)  # exponent and fraction bits


def round_exact(v, fmt, mode: str) -> int:
    """The bits of the value v (a Fraction or float), rounded to fmt with mode rn/rz/rm/rp: integer arithmetic."""
    ebits, mbits = fmt
    if isinstance(v, float) and v != v:
        return 0x7FFF
    neg = (v < 0) or (isinstance(v, float) and v == 0 and np.signbit(v))
    sign = (1 << (ebits + mbits)) if neg else 0
    inf = ((1 << ebits) - 1) << mbits
    if isinstance(v, float) and abs(v) == float("inf"):
        return sign | inf
    a = abs(Fraction(v))
    if a == 0:
        return sign
    bias = (1 << (ebits - 1)) - 1
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, 1 - bias)
    q = Fraction(2) ** (e - mbits)
    m, r = divmod(a, q)
    m = int(m)
    up = {"rn": r > q / 2 or (r == q / 2 and m % 2 == 1), "rz": False, "rm": neg and r > 0, "rp": not neg and r > 0}[mode]
    m += up
    if m == 2 << mbits:
        m, e = m >> 1, e + 1
    field = e + bias if m >> mbits else 0
    if field >= (1 << ebits) - 1:
        to_inf = mode == "rn" or (mode == "rm" and neg) or (mode == "rp" and not neg)
        return sign | (inf if to_inf else inf - 1)
    return sign | (field << mbits) | (m & ((1 << mbits) - 1))


def value(bits: int, fmt) -> Fraction | float:
    """The value of a 16-bit pattern in fmt (NaN and infinities as floats)."""
    ebits, mbits = fmt
    sign = -1 if bits >> (ebits + mbits) & 1 else 1
    e, m = bits >> mbits & ((1 << ebits) - 1), bits & ((1 << mbits) - 1)
    if e == (1 << ebits) - 1:
        return float("nan") if m else sign * float("inf")
    bias = (1 << (ebits - 1)) - 1
    mag = Fraction(m, 1 << mbits) * Fraction(2) ** (1 - bias) if e == 0 else \
        Fraction((1 << mbits) + m, 1 << mbits) * Fraction(2) ** (e - bias)
    return -mag if sign < 0 else (mag if mag or sign > 0 else -0.0)


def _samples(n: int, seed: int) -> np.ndarray:
    """f32 values that stress rounding to f16 and bf16: ties, neighbours of ties, subnormals, overflow, specials."""
    rng = np.random.default_rng(seed)
    h = rng.integers(0, 1 << 16, n // 4, dtype=np.uint32).astype(np.uint16)
    f16 = h.view(np.float16).astype(np.float32)
    nxt = np.nextafter(h.view(np.float16), np.float16(np.inf)).astype(np.float32)
    with np.errstate(invalid="ignore"):  # NaN patterns stay NaN
        ties = ((f16.astype(np.float64) + nxt) / 2).astype(np.float32)
    bf = (rng.integers(0, 1 << 32, n // 4, dtype=np.uint64).astype(np.uint32) & 0xFFFF8000 | 0x8000).view(np.float32)
    near = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, -np.float32(np.inf)), bf])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, -65520, 1e-8, -3e-8, 6e-8, 1.5,
                        -0.25, 3.4e38, -3.4e38, 1e-40, -1e-45, 0.999, 1.0, 1.0001], np.float32)
    x = np.concatenate([near, special]).astype(np.float32)
    return x[np.isfinite(x) | np.isnan(x) | np.isinf(x)]


@pytest.fixture(scope="module")
def conversions():
    return CpuRawModule(code=CONVERSIONS)


def _launch(kernel, n, args):
    kernel(((n + 127) // 128,), (128,), args)


def test_conversions_from_f32_round_exactly_in_every_mode(conversions):
    x = _samples(2400, 1)
    n = x.size
    out = np.zeros((12, n), np.uint16)
    _launch(conversions.get_function("from_f32"), n, (x, out, np.int32(n)))
    for k, (fmt, mode) in enumerate([(F16, m) for m in ("rn", "rz", "rm", "rp")] + [(BF16, m) for m in ("rn", "rz", "rm", "rp")]):
        expected = np.array([round_exact(float(v), fmt, mode) for v in x], np.uint16)
        bad = np.flatnonzero(out[k] != expected)
        assert bad.size == 0, (k, [(x[i], hex(out[k][i]), hex(expected[i])) for i in bad[:5]])
    with np.errstate(over="ignore"):  # NumPy rounds to infinity too, and says so
        np.testing.assert_array_equal(out[0], np.where(np.isnan(x), 0x7FFF, x.astype(np.float16).view(np.uint16)))
    finite = ~np.isnan(x)
    np.testing.assert_array_equal(out[4][finite], x[finite].astype(ml_dtypes.bfloat16).view(np.uint16))
    sat = np.array([0 if not (v > 0) else round_exact(min(float(v), 1.0), F16, "rn") for v in x], np.uint16)
    np.testing.assert_array_equal(out[8], sat)
    relu = np.array([0x7FFF if v != v else 0 if v <= 0 else round_exact(float(v), BF16, "rn") for v in x], np.uint16)
    np.testing.assert_array_equal(out[9], relu)
    satfinite = np.where((out[0] & 0x7FFF) == 0x7C00, (out[0] & 0x8000) | 0x7BFF, out[0])
    np.testing.assert_array_equal(out[10], satfinite)
    f32_subnormal = (np.abs(x) < np.finfo(np.float32).tiny) & (x != 0)
    np.testing.assert_array_equal(out[11], np.where(f32_subnormal, np.signbit(x) * 0x8000, out[0]).astype(np.uint16))


def test_conversions_from_16_bits_cover_every_pattern(conversions):
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    n = h.size
    f16_f32, bf16_f32 = np.zeros(n, np.float32), np.zeros(n, np.float32)
    f16_bf16, bf16_f16 = np.zeros(n, np.uint16), np.zeros(n, np.uint16)
    _launch(conversions.get_function("from_16"), n, (h, f16_f32, bf16_f32, f16_bf16, bf16_f16, np.int32(n)))
    as_f16 = h.view(np.float16).astype(np.float32)
    nan = np.isnan(as_f16)
    np.testing.assert_array_equal(f16_f32[~nan], as_f16[~nan])
    assert np.all(f16_f32.view(np.uint32)[nan] == 0x7FFFFFFF)  # the canonical NaN
    as_bf16 = (h.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(bf16_f32[~np.isnan(as_bf16)], as_bf16[~np.isnan(as_bf16)])
    rng = np.random.default_rng(2)
    for i in rng.choice(n, 3000, replace=False):
        assert f16_bf16[i] == round_exact(value(int(h[i]), F16), BF16, "rn"), hex(h[i])
        assert bf16_f16[i] == round_exact(value(int(h[i]), BF16), F16, "rz"), hex(h[i])


def test_pairs_integer_widths_and_integral_rounding(conversions):
    rng = np.random.default_rng(3)
    n = 512
    x, y = rng.standard_normal(n).astype(np.float32) * 300, rng.standard_normal(n).astype(np.float32)
    ints = np.zeros(5 * n, np.int32)
    ints[:n] = rng.integers(-70000, 70000, n)
    out = np.zeros(2 * n, np.uint32)
    _launch(conversions.get_function("pairs"), n, (x, y, out, ints, np.int32(n)))
    f16x2, bf16x2 = out[0::2], out[1::2]
    np.testing.assert_array_equal(f16x2 >> 16, x.astype(np.float16).view(np.uint16))  # the first source: upper half
    np.testing.assert_array_equal(f16x2 & 0xFFFF, y.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(bf16x2 >> 16, [round_exact(float(v), BF16, "rz") for v in x])
    np.testing.assert_array_equal(bf16x2 & 0xFFFF, [round_exact(float(v), BF16, "rz") for v in y])
    v = ints[:n].astype(np.int64)
    np.testing.assert_array_equal(ints[n:2 * n], np.clip(v, -128, 127))
    np.testing.assert_array_equal(ints[2 * n:3 * n], v & 0xFFFF)
    np.testing.assert_array_equal(ints[3 * n:4 * n], (v & 0xFFFF).astype(np.uint16).view(np.int16))
    np.testing.assert_array_equal(ints[4 * n:].view(np.float32), np.rint(x))


def test_bf16_and_f16_arithmetic_rounds_once(conversions):
    rng = np.random.default_rng(4)
    n = 256
    a16 = rng.standard_normal((n, 2)).astype(ml_dtypes.bfloat16)
    b16 = rng.standard_normal((n, 2)).astype(ml_dtypes.bfloat16)
    c16 = rng.standard_normal((n, 2)).astype(ml_dtypes.bfloat16)
    # A tie of bf16 (1.75 * 0.578125 = 1 + 1.5 * 2^-7) plus a tiny negative c: exactly rounded, the result is the
    # lower neighbour; rounding a*b+c to double first would land on the tie and round up to even.
    a16[0], b16[0], c16[0] = 1.75, 0.578125, -(2.0 ** -100)
    a, b, c = (np.ascontiguousarray(v).view(np.uint32).reshape(n) for v in (a16, b16, c16))
    out = np.zeros(3 * n, np.uint32)
    _launch(conversions.get_function("bf16_math"), n, (a, b, c, out, np.int32(n)))
    for i in range(n):
        for half in range(2):
            x, y, z = (value(int(v[i]) >> (16 * half) & 0xFFFF, BF16) for v in (a, b, c))
            fma = round_exact(x * y + z, BF16, "rn")
            add = round_exact(x + y, BF16, "rn")
            assert (out[3 * i] >> (16 * half)) & 0xFFFF == fma, (i, half, x, y, z)
            assert (out[3 * i + 1] >> (16 * half)) & 0xFFFF == add
            hx, hy = (value(int(v[i]) >> (16 * half) & 0xFFFF, F16) for v in (a, b))
            if isinstance(hx, Fraction) and isinstance(hy, Fraction):  # mul.rn.ftz.sat.f16x2 (the bits read as f16)
                ftz = [0 if abs(v) < Fraction(1, 1 << 14) else v for v in (hx, hy)]
                prod = ftz[0] * ftz[1]
                expect = 0 if prod <= 0 else round_exact(min(prod, Fraction(1)), F16, "rn")
                expect = 0 if 0 < expect < 0x400 else expect  # a subnormal result flushes too
                assert (out[3 * i + 2] >> (16 * half)) & 0xFFFF == expect
    assert out[0] & 0xFFFF == round_exact(Fraction(259, 256) - Fraction(1, 2 ** 100), BF16, "rn") == 0x3F81


def test_vllm_statement_shapes(tmp_path):
    rng = np.random.default_rng(5)
    n = 300
    a = rng.standard_normal(n).astype(np.float16)
    b = (rng.standard_normal(n) * 4).astype(np.float16)
    a[:4] = [6e-5, 65504, -0.0, 1.0]
    b[:4] = [3e-3, 2.0, 0.0, -1.0]
    fx, fy = rng.standard_normal(n).astype(np.float32), (rng.standard_normal(n) * 1e4).astype(np.float32)
    out = np.zeros((12, n), np.uint16)
    (tmp_path / "dtype_shapes.cuh").write_text(VLLM_SHAPES.split("// out[k][i]")[0])
    code = '#include "dtype_shapes.cuh"\n// out[k][i]' + VLLM_SHAPES.split("// out[k][i]")[1]
    k = CpuRawKernel(code, "vllm_shapes", options=(f"-I{tmp_path}",))
    _launch(k, n, (a.view(np.uint16), b.view(np.uint16), fx, fy, out, np.int32(n)))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    def f16(v):  # the exact value (a double here) rounded once; overflow to infinity as in PTX
        with np.errstate(over="ignore"):
            return np.asarray(v, np.float64).astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(out[0], f16(a64 + b64))
    np.testing.assert_array_equal(out[1], f16(a64 * b64))
    np.testing.assert_array_equal(out[2], f16(a64 + b64))
    np.testing.assert_array_equal(out[3], f16(b64 + a64))
    np.testing.assert_array_equal(out[4], f16(a64 * b64))
    np.testing.assert_array_equal(out[6], f16(a64 * b64 + a64))
    np.testing.assert_array_equal(out[7], f16(b64 * a64 + b64))
    np.testing.assert_array_equal(out[8], b.view(np.uint16))
    np.testing.assert_array_equal(out[9], a.view(np.uint16))
    np.testing.assert_array_equal(out[10], fx.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(out[11], fy.astype(np.float16).view(np.uint16))


@pytest.fixture(scope="module")
def memory_and_bits():
    return CpuRawModule(code=MEMORY_AND_BITS)


def test_loads_and_stores(memory_and_bits):
    rng = np.random.default_rng(6)
    src = rng.integers(0, 1 << 32, (32, 4), dtype=np.uint64).astype(np.uint32)
    dst = np.zeros((64, 4), np.uint32)
    raw = rng.integers(0, 256, 32, dtype=np.uint8)
    ints = np.zeros(128, np.int32)
    memory_and_bits.get_function("memory")(1, 32, (src, dst, raw, ints))
    np.testing.assert_array_equal(dst[:32], src[:, ::-1])
    np.testing.assert_array_equal(dst[32:, 2], src[:, 3])
    np.testing.assert_array_equal(dst[32:, 3], src[:, 2])
    np.testing.assert_array_equal(ints[:32], raw)
    np.testing.assert_array_equal(ints[32:64], raw.view(np.int8))
    np.testing.assert_array_equal(ints[64:96].view(np.uint32), src[:, 1])
    np.testing.assert_array_equal(ints[96:].view(np.uint32) & 0xFFFF, src[:, 0] & 0xFFFF)
    with pytest.raises(CpuKernelError, match=r"misaligned address 0x[0-9a-f]+ for ld\.global\.nc\.v4\.u32 "
                                             r"\(a 16-byte access must be 16-byte aligned\) at \S+\.cu:\d+ in thread \(0,0,0\)"):
        memory_and_bits.get_function("misaligned")(1, 1, (np.zeros(64, np.uint8), np.zeros(1, np.uint32)))


def _prmt(a: int, b: int, c: int, mode: str) -> int:
    x = [(a >> (8 * k)) & 0xFF for k in range(4)] + [(b >> (8 * k)) & 0xFF for k in range(4)]
    tables = {"f4e": [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]],
              "b4e": [[0, 7, 6, 5], [1, 0, 7, 6], [2, 1, 0, 7], [3, 2, 1, 0]],
              "rc8": [[k] * 4 for k in range(4)],
              "ecl": [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]],
              "ecr": [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]],
              "rc16": [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]]}
    d = 0
    for i in range(4):
        if mode == "default":
            sel = (c >> (4 * i)) & 0xF
            byte = x[sel & 7]
            if sel & 8:
                byte = 0xFF if byte & 0x80 else 0
        else:
            byte = x[tables[mode][c & 3][i]]
        d |= byte << (8 * i)
    return d


def test_prmt_and_lop3(memory_and_bits):
    rng = np.random.default_rng(7)
    n = 200
    a, b, c = (rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32) for _ in range(3))
    out = np.zeros(9 * n, np.uint32)
    _launch(memory_and_bits.get_function("bits"), n, (a, b, c, out, np.int32(n)))
    out = out.reshape(n, 9)
    for i in range(n):
        for k, mode in enumerate(("default", "f4e", "b4e", "rc8", "ecl", "ecr", "rc16")):
            assert out[i, k] == _prmt(int(a[i]), int(b[i]), int(c[i]), mode), (i, mode)
    np.testing.assert_array_equal(out[:, 7], a ^ b ^ c)
    np.testing.assert_array_equal(out[:, 8], (a & b) | (a & c) | (b & c))  # 0xE8: the majority


def test_shfl_sync_matches_the_intrinsics(memory_and_bits):
    v = np.arange(100, 164, dtype=np.uint32)
    out, ref, pred = np.zeros(256, np.uint32), np.zeros(256, np.uint32), np.zeros(64, np.int32)
    memory_and_bits.get_function("shuffles")(1, 64, (v, out, ref, pred))
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(pred, 1)


# ---------------------------------------------------------------- refusals

def test_untranslated_ptx_is_refused_with_file_line_and_instruction(tmp_path):
    code = ('extern "C" __global__ void k(unsigned* out) {\n'
            '    unsigned t;\n'
            '    asm volatile("brev.b32 %0, %1;" : "=r"(t) : "r"(out[0]));\n'
            '    out[0] = t;\n'
            '}\n')
    with pytest.raises(CpuCompileError) as info:
        CpuRawKernel(code, "k").compile()
    first = str(info.value).splitlines()[0]
    assert first.startswith("<code>:3: inline PTX instruction `brev.b32` is not translated"), first
    # In a header (a library's: PTX for other architectures sits in functions no kernel calls) the refusal
    # waits until the statement is reached.
    (tmp_path / "lib.cuh").write_text("#pragma once\n__device__ unsigned lib_brev(unsigned a) {\n  unsigned r;\n"
                                      "  asm(\"brev.b32 %0, %1;\" : \"=r\"(r) : \"r\"(a));\n  return r;\n}\n")
    code = ('#include "lib.cuh"\nextern "C" __global__ void k(unsigned* out, int use) '
            '{ out[0] = use ? lib_brev(out[0]) : 7u; }\n')
    kernel = CpuRawKernel(code, "k", options=(f"-I{tmp_path}",))
    out = np.zeros(1, np.uint32)
    kernel(1, 1, (out, np.int32(0)))
    assert out[0] == 7
    with pytest.raises(CpuKernelError, match=rf"{tmp_path / 'lib.cuh'}:4: inline PTX instruction `brev\.b32` is not "
                                             r"translated.*, reached in thread \(0,0,0\) of block \(0,0,0\)"):
        kernel(1, 1, (out, np.int32(1)))


def test_asm_the_preprocessor_drops_is_not_refused():
    code = ('extern "C" __global__ void k(unsigned* out) {\n'
            '    unsigned lane = 0;\n'
            '#ifdef USE_ROCM\n'
            '    asm volatile("v_mbcnt_lo_u32_b32 %0, -1, 0" : "=v"(lane));\n'
            '#elif 0\n'
            '    asm volatile("tanh.approx.f32 %0, %0;" : "+f"(lane));\n'
            '#else\n'
            '    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));\n'
            '#endif\n'
            '    out[threadIdx.x] = lane;\n'
            '}\n')
    out = np.zeros(64, np.uint32)
    CpuRawKernel(code, "k")(1, 64, (out,))
    np.testing.assert_array_equal(out, np.arange(64) % 32)
    with pytest.raises(CpuCompileError, match=r"<code>:4: inline PTX cannot be translated: operand constraint '=v'"):
        CpuRawKernel(code, "k", options=("-DUSE_ROCM",)).compile()
