// cpucuda_bf16.h: __nv_bfloat16 and __nv_bfloat162 as CUDA 12's cuda_bf16.h
// declares them (the runtime header includes this, as it does the half one).
//
// Storage is the top 16 bits of an IEEE float (uint16). Conversions:
// * bfloat16 -> float is exact (the bits shifted up, NaN payloads kept);
// * float -> bfloat16 (__float2bfloat16, _rn, constructors, operator=) rounds
//   to nearest even, bit-identical to ml_dtypes.bfloat16 except that every
//   NaN becomes CUDA's canonical 0x7FFF (cvt.rn.bf16.f32 does that; ml_dtypes
//   keeps the sign and gives 0x7FC0/0xFFC0); _rz/_rd/_ru round as named;
// * double and 64-bit integers round once, straight to bfloat16 (through a
//   round-to-odd float, so there is no double rounding), as CUDA's do.
// Arithmetic widens to float, computes in float, and rounds the result once to
// bfloat16 (nearest even). For + - * / and sqrt that is the correctly rounded
// bfloat16 result, what the GPU's .rn instructions give: float's 24 bits are at
// least 2*8+2, so rounding twice cannot differ from rounding once. __hfma
// rounds the exact a*b+c once. Transcendentals (hexp, hrcp, h2sin, ...) round
// the accurate libm value, where the GPU's approximations can differ in the
// last bit.
#pragma once

#include <limits>

namespace cpucuda {

static inline uint16_t float_to_bf16_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // canonical nan
    x += 0x7fffu + ((x >> 16) & 1u);  // nearest even; a carry into the exponent is right (up to inf)
    return (uint16_t)(x >> 16);
}
static inline float bf16_bits_to_float(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
// Directed roundings: toward zero, toward -inf (down), toward +inf (up).
static inline uint16_t float_to_bf16_bits_rz(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    return (uint16_t)(x >> 16);
}
static inline uint16_t float_to_bf16_bits_directed(float f, bool up) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    uint16_t h = (uint16_t)(x >> 16);
    const bool negative = (x >> 31) != 0u;
    if ((x & 0xffffu) && negative != up) ++h;  // inexact, and truncation went the wrong way
    return h;
}
// hi + lo (exactly that sum; |lo| below half a float ulp of hi) rounded to a
// float with round-to-odd: the float below or above whose last bit is 1 when
// the sum is not a float. Rounding that float to bfloat16 (nearest even) is
// then the correctly rounded bfloat16 of the sum, as if rounded once (24 bits
// >= 8 + 2).
static inline float odd_float(double hi, double lo) {
    float f = (float)hi;
    if (!(fabs(hi) <= DBL_MAX) || isinf(f)) return f;  // nan or inf, or beyond every bfloat16 too
    double rest = (hi - (double)f) + lo;               // hi - f is exact; the sign is what matters
    uint32_t b;
    memcpy(&b, &f, 4);
    if (rest != 0.0 && !(b & 1u)) f = nextafterf(f, rest > 0.0 ? INFINITY : -INFINITY);
    return f;
}
static inline uint16_t double_to_bf16_bits(double d) { return float_to_bf16_bits(odd_float(d, 0.0)); }
// Integers beyond 2^52 split into a high part exact in a double (at most 52
// significant bits) and a low part under 4096, far below a float ulp there.
static inline uint16_t i64_to_bf16_bits(long long v) {
    if (v > -(1ll << 52) && v < (1ll << 52)) return float_to_bf16_bits(odd_float((double)v, 0.0));
    const long long hi = v & ~0xfffll;
    return float_to_bf16_bits(odd_float((double)hi, (double)(v - hi)));
}
static inline uint16_t u64_to_bf16_bits(unsigned long long v) {
    if (v < (1ull << 52)) return float_to_bf16_bits(odd_float((double)v, 0.0));
    const unsigned long long hi = v & ~0xfffull;
    return float_to_bf16_bits(odd_float((double)hi, (double)(v - hi)));
}
// a*b+c rounded once: a*b is exact in a double; the double sum and its exact
// error (TwoSum) feed the round-to-odd float.
static inline uint16_t bf16_fma_bits(float a, float b, float c) {
    const double p = (double)a * (double)b, s = p + (double)c;
    if (!(fabs(s) <= DBL_MAX)) return float_to_bf16_bits((float)s);
    const double bb = s - p, err = (p - (s - bb)) + ((double)c - bb);
    return float_to_bf16_bits(odd_float(s, err));
}

// Float to integer the CUDA way: round as asked, NaN gives 0 (0x8000000000000000
// for 64-bit types), values outside the type's range saturate.
enum IntRound { INT_RN, INT_RZ, INT_RD, INT_RU };
template <class I> static inline I float_to_int_sat(float f, IntRound mode) {
    if (f != f) return sizeof(I) == 8 ? (I)0x8000000000000000ull : (I)0;
    const double r = mode == INT_RN ? nearbyint((double)f) : mode == INT_RZ ? trunc((double)f)
                   : mode == INT_RD ? floor((double)f) : ceil((double)f);
    if (r <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (r >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)r;
}

}  // namespace cpucuda

struct __nv_bfloat16_raw { unsigned short x; };
struct __nv_bfloat162_raw { unsigned short x, y; };

struct __attribute__((aligned(2))) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;  // trivial, so __shared__ arrays need no constructor
    __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(cpucuda::float_to_bf16_bits(f)) {}
    __nv_bfloat16(double d) : __x(cpucuda::double_to_bf16_bits(d)) {}
    __nv_bfloat16(short v) : __x(cpucuda::i64_to_bf16_bits(v)) {}
    __nv_bfloat16(unsigned short v) : __x(cpucuda::i64_to_bf16_bits(v)) {}
    __nv_bfloat16(int v) : __x(cpucuda::i64_to_bf16_bits(v)) {}
    __nv_bfloat16(unsigned int v) : __x(cpucuda::i64_to_bf16_bits(v)) {}
    __nv_bfloat16(long v) : __x(cpucuda::i64_to_bf16_bits(v)) {}
    __nv_bfloat16(unsigned long v) : __x(cpucuda::u64_to_bf16_bits(v)) {}
    __nv_bfloat16(long long v) : __x(cpucuda::i64_to_bf16_bits(v)) {}
    __nv_bfloat16(unsigned long long v) : __x(cpucuda::u64_to_bf16_bits(v)) {}
    operator float() const { return cpucuda::bf16_bits_to_float(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
    __nv_bfloat16& operator=(const __nv_bfloat16_raw& r) { __x = r.x; return *this; }
};
typedef __nv_bfloat16 nv_bfloat16;

struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    constexpr __nv_bfloat162(const __nv_bfloat16& a, const __nv_bfloat16& b) : x(a), y(b) {}
    __nv_bfloat162(const __nv_bfloat162_raw& r) { x.__x = r.x; y.__x = r.y; }
    operator __nv_bfloat162_raw() const { return __nv_bfloat162_raw{x.__x, y.__x}; }
    __nv_bfloat162& operator=(const __nv_bfloat162_raw& r) { x.__x = r.x; y.__x = r.y; return *this; }
};
typedef __nv_bfloat162 nv_bfloat162;

// ---------------------------------------------------------------- conversions

namespace cpucuda {
static inline __nv_bfloat16 bf16_of_bits(unsigned short bits) { __nv_bfloat16 h; h.__x = bits; return h; }
}  // namespace cpucuda
static inline float __bfloat162float(__nv_bfloat16 h) { return cpucuda::bf16_bits_to_float(h.__x); }
static inline __nv_bfloat16 __float2bfloat16(float f) { return cpucuda::bf16_of_bits(cpucuda::float_to_bf16_bits(f)); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rz(float f) { return cpucuda::bf16_of_bits(cpucuda::float_to_bf16_bits_rz(f)); }
static inline __nv_bfloat16 __float2bfloat16_rd(float f) { return cpucuda::bf16_of_bits(cpucuda::float_to_bf16_bits_directed(f, false)); }
static inline __nv_bfloat16 __float2bfloat16_ru(float f) { return cpucuda::bf16_of_bits(cpucuda::float_to_bf16_bits_directed(f, true)); }
static inline __nv_bfloat16 __double2bfloat16(double d) { return cpucuda::bf16_of_bits(cpucuda::double_to_bf16_bits(d)); }
static inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __nv_bfloat162(__float2bfloat16(a), __float2bfloat16(a)); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__float2bfloat16(a), __float2bfloat16(b)); }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2(__bfloat162float(h.x), __bfloat162float(h.y)); }
static inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
static inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }
static inline __nv_bfloat162 __low2bfloat162(__nv_bfloat162 a) { return __nv_bfloat162(a.x, a.x); }
static inline __nv_bfloat162 __high2bfloat162(__nv_bfloat162 a) { return __nv_bfloat162(a.y, a.y); }
static inline __nv_bfloat162 __lows2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(a.x, b.x); }
static inline __nv_bfloat162 __highs2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(a.y, b.y); }
static inline __nv_bfloat162 __lowhigh2highlow(__nv_bfloat162 a) { return __nv_bfloat162(a.y, a.x); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return cpucuda::bf16_of_bits(u); }
static inline __nv_bfloat16 __short_as_bfloat16(short s) { return cpucuda::bf16_of_bits((unsigned short)s); }
static inline __nv_bfloat16 __int2bfloat16_rn(int v) { return cpucuda::bf16_of_bits(cpucuda::i64_to_bf16_bits(v)); }
static inline __nv_bfloat16 __uint2bfloat16_rn(unsigned int v) { return cpucuda::bf16_of_bits(cpucuda::i64_to_bf16_bits(v)); }
static inline __nv_bfloat16 __short2bfloat16_rn(short v) { return cpucuda::bf16_of_bits(cpucuda::i64_to_bf16_bits(v)); }
static inline __nv_bfloat16 __ushort2bfloat16_rn(unsigned short v) { return cpucuda::bf16_of_bits(cpucuda::i64_to_bf16_bits(v)); }
static inline __nv_bfloat16 __ll2bfloat16_rn(long long v) { return cpucuda::bf16_of_bits(cpucuda::i64_to_bf16_bits(v)); }
static inline __nv_bfloat16 __ull2bfloat16_rn(unsigned long long v) { return cpucuda::bf16_of_bits(cpucuda::u64_to_bf16_bits(v)); }
#define CPUCUDA_BF16_TO_INT(suffix, T, mode)                                                                   \
    static inline T __bfloat162##suffix(__nv_bfloat16 h) { return cpucuda::float_to_int_sat<T>(__bfloat162float(h), cpucuda::mode); }
CPUCUDA_BF16_TO_INT(int_rn, int, INT_RN)
CPUCUDA_BF16_TO_INT(int_rz, int, INT_RZ)
CPUCUDA_BF16_TO_INT(int_rd, int, INT_RD)
CPUCUDA_BF16_TO_INT(int_ru, int, INT_RU)
CPUCUDA_BF16_TO_INT(uint_rn, unsigned int, INT_RN)
CPUCUDA_BF16_TO_INT(uint_rz, unsigned int, INT_RZ)
CPUCUDA_BF16_TO_INT(short_rz, short, INT_RZ)
CPUCUDA_BF16_TO_INT(ushort_rz, unsigned short, INT_RZ)
CPUCUDA_BF16_TO_INT(ll_rn, long long, INT_RN)
CPUCUDA_BF16_TO_INT(ll_rz, long long, INT_RZ)
CPUCUDA_BF16_TO_INT(ull_rz, unsigned long long, INT_RZ)
#undef CPUCUDA_BF16_TO_INT

// ---------------------------------------------------------------- arithmetic
// Overloads of the __half intrinsics' names: the argument types pick them.

#define CPUCUDA_BF16_BINOP(name, name2, expr)                                                                  \
    static inline __nv_bfloat16 name(__nv_bfloat16 a, __nv_bfloat16 b) {                                     \
        const float x = __bfloat162float(a), y = __bfloat162float(b);                                          \
        return __float2bfloat16(expr);                                                                         \
    }                                                                                                          \
    static inline __nv_bfloat162 name2(__nv_bfloat162 a, __nv_bfloat162 b) {                                  \
        return __nv_bfloat162(name(a.x, b.x), name(a.y, b.y));                                                 \
    }
CPUCUDA_BF16_BINOP(__hadd, __hadd2, x + y)
CPUCUDA_BF16_BINOP(__hsub, __hsub2, x - y)
CPUCUDA_BF16_BINOP(__hmul, __hmul2, x * y)
CPUCUDA_BF16_BINOP(__hdiv, __h2div, x / y)
CPUCUDA_BF16_BINOP(__hadd_rn, __hadd2_rn, x + y)
CPUCUDA_BF16_BINOP(__hsub_rn, __hsub2_rn, x - y)
CPUCUDA_BF16_BINOP(__hmul_rn, __hmul2_rn, x * y)
// _sat: the result clamped to [0, 1], NaN to +0.
CPUCUDA_BF16_BINOP(__hadd_sat, __hadd2_sat, x + y != x + y ? 0.0f : fminf(fmaxf(x + y, 0.0f), 1.0f))
CPUCUDA_BF16_BINOP(__hsub_sat, __hsub2_sat, x - y != x - y ? 0.0f : fminf(fmaxf(x - y, 0.0f), 1.0f))
CPUCUDA_BF16_BINOP(__hmul_sat, __hmul2_sat, x * y != x * y ? 0.0f : fminf(fmaxf(x * y, 0.0f), 1.0f))
#undef CPUCUDA_BF16_BINOP

static inline bool __hisnan(__nv_bfloat16 a) { return (a.__x & 0x7fffu) > 0x7f80u; }
// CUDA's __hisinf: -1 for -inf, 1 for +inf, 0 otherwise.
static inline int __hisinf(__nv_bfloat16 a) { return a.__x == 0x7f80u ? 1 : a.__x == 0xff80u ? -1 : 0; }
static inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return cpucuda::bf16_of_bits(cpucuda::bf16_fma_bits(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
static inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return __nv_bfloat162(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
static inline __nv_bfloat16 __hfma_sat(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    __nv_bfloat16 r = __hfma(a, b, c);
    return __hisnan(r) ? cpucuda::bf16_of_bits(0) : __float2bfloat16(fminf(fmaxf(__bfloat162float(r), 0.0f), 1.0f));
}
static inline __nv_bfloat162 __hfma2_sat(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return __nv_bfloat162(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y));
}
// _relu: negative results become +0, NaN stays (canonical) NaN.
static inline __nv_bfloat16 __hfma_relu(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    __nv_bfloat16 r = __hfma(a, b, c);
    return __hisnan(r) ? cpucuda::bf16_of_bits(0x7fffu) : (r.__x & 0x8000u) ? cpucuda::bf16_of_bits(0) : r;
}
static inline __nv_bfloat162 __hfma2_relu(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return __nv_bfloat162(__hfma_relu(a.x, b.x, c.x), __hfma_relu(a.y, b.y, c.y));
}
static inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { a.__x ^= 0x8000u; return a; }
static inline __nv_bfloat162 __hneg2(__nv_bfloat162 a) { return __nv_bfloat162(__hneg(a.x), __hneg(a.y)); }
static inline __nv_bfloat16 __habs(__nv_bfloat16 a) { a.__x &= 0x7fffu; return a; }
static inline __nv_bfloat162 __habs2(__nv_bfloat162 a) { return __nv_bfloat162(__habs(a.x), __habs(a.y)); }
// __hmax/__hmin: a NaN input yields the other input (canonical NaN if both are
// NaN), and +0 > -0. The _nan variants propagate NaN.
static inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) {
    if (__hisnan(a)) return __hisnan(b) ? cpucuda::bf16_of_bits(0x7fffu) : b;
    if (__hisnan(b)) return a;
    const float x = __bfloat162float(a), y = __bfloat162float(b);
    if (x == y) return (a.__x & 0x8000u) ? b : a;
    return x > y ? a : b;
}
static inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) {
    if (__hisnan(a)) return __hisnan(b) ? cpucuda::bf16_of_bits(0x7fffu) : b;
    if (__hisnan(b)) return a;
    const float x = __bfloat162float(a), y = __bfloat162float(b);
    if (x == y) return (a.__x & 0x8000u) ? a : b;
    return x < y ? a : b;
}
static inline __nv_bfloat16 __hmax_nan(__nv_bfloat16 a, __nv_bfloat16 b) {
    return (__hisnan(a) || __hisnan(b)) ? cpucuda::bf16_of_bits(0x7fffu) : __hmax(a, b);
}
static inline __nv_bfloat16 __hmin_nan(__nv_bfloat16 a, __nv_bfloat16 b) {
    return (__hisnan(a) || __hisnan(b)) ? cpucuda::bf16_of_bits(0x7fffu) : __hmin(a, b);
}
static inline __nv_bfloat162 __hmax2(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(__hmax(a.x, b.x), __hmax(a.y, b.y)); }
static inline __nv_bfloat162 __hmin2(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(__hmin(a.x, b.x), __hmin(a.y, b.y)); }
static inline __nv_bfloat162 __hmax2_nan(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(__hmax_nan(a.x, b.x), __hmax_nan(a.y, b.y)); }
static inline __nv_bfloat162 __hmin2_nan(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(__hmin_nan(a.x, b.x), __hmin_nan(a.y, b.y)); }
static inline __nv_bfloat162 __hisnan2(__nv_bfloat162 a) {
    return __nv_bfloat162(cpucuda::bf16_of_bits(__hisnan(a.x) ? 0x3f80u : 0u), cpucuda::bf16_of_bits(__hisnan(a.y) ? 0x3f80u : 0u));
}

// Comparisons. Ordered ones are false when either input is NaN, the unordered
// (..u) ones true. The 2-forms return 1.0/0.0 per half; __hb..2 return true
// when both halves compare true.
#define CPUCUDA_BF16_CMP(name, expr)                                                                           \
    static inline bool name(__nv_bfloat16 a, __nv_bfloat16 b) {                                               \
        const float x = __bfloat162float(a), y = __bfloat162float(b);                                          \
        return expr;                                                                                           \
    }                                                                                                          \
    static inline __nv_bfloat162 name##2(__nv_bfloat162 a, __nv_bfloat162 b) {                                \
        return __nv_bfloat162(cpucuda::bf16_of_bits(name(a.x, b.x) ? 0x3f80u : 0u), cpucuda::bf16_of_bits(name(a.y, b.y) ? 0x3f80u : 0u)); \
    }
CPUCUDA_BF16_CMP(__heq, x == y)
CPUCUDA_BF16_CMP(__hne, x < y || x > y)
CPUCUDA_BF16_CMP(__hlt, x < y)
CPUCUDA_BF16_CMP(__hle, x <= y)
CPUCUDA_BF16_CMP(__hgt, x > y)
CPUCUDA_BF16_CMP(__hge, x >= y)
CPUCUDA_BF16_CMP(__hequ, !(x < y || x > y))
CPUCUDA_BF16_CMP(__hneu, x != y)
CPUCUDA_BF16_CMP(__hltu, !(x >= y))
CPUCUDA_BF16_CMP(__hleu, !(x > y))
CPUCUDA_BF16_CMP(__hgtu, !(x <= y))
CPUCUDA_BF16_CMP(__hgeu, !(x < y))
#undef CPUCUDA_BF16_CMP
#define CPUCUDA_BF16_BCMP(name, op)                                                                            \
    static inline bool name(__nv_bfloat162 a, __nv_bfloat162 b) { return op(a.x, b.x) && op(a.y, b.y); }
CPUCUDA_BF16_BCMP(__hbeq2, __heq)
CPUCUDA_BF16_BCMP(__hbne2, __hne)
CPUCUDA_BF16_BCMP(__hblt2, __hlt)
CPUCUDA_BF16_BCMP(__hble2, __hle)
CPUCUDA_BF16_BCMP(__hbgt2, __hgt)
CPUCUDA_BF16_BCMP(__hbge2, __hge)
CPUCUDA_BF16_BCMP(__hbequ2, __hequ)
CPUCUDA_BF16_BCMP(__hbneu2, __hneu)
CPUCUDA_BF16_BCMP(__hbltu2, __hltu)
CPUCUDA_BF16_BCMP(__hbleu2, __hleu)
CPUCUDA_BF16_BCMP(__hbgtu2, __hgtu)
CPUCUDA_BF16_BCMP(__hbgeu2, __hgeu)
#undef CPUCUDA_BF16_BCMP

// Math functions: the float function, rounded once.
#define CPUCUDA_BF16_UNARY(name, name2, expr)                                                                  \
    static inline __nv_bfloat16 name(__nv_bfloat16 a) { const float x = __bfloat162float(a); return __float2bfloat16(expr); } \
    static inline __nv_bfloat162 name2(__nv_bfloat162 a) { return __nv_bfloat162(name(a.x), name(a.y)); }
CPUCUDA_BF16_UNARY(hexp, h2exp, expf(x))
CPUCUDA_BF16_UNARY(hexp2, h2exp2, exp2f(x))
CPUCUDA_BF16_UNARY(hexp10, h2exp10, exp10f(x))
CPUCUDA_BF16_UNARY(hlog, h2log, logf(x))
CPUCUDA_BF16_UNARY(hlog2, h2log2, log2f(x))
CPUCUDA_BF16_UNARY(hlog10, h2log10, log10f(x))
CPUCUDA_BF16_UNARY(hsqrt, h2sqrt, sqrtf(x))
CPUCUDA_BF16_UNARY(hrsqrt, h2rsqrt, 1.0f / sqrtf(x))
CPUCUDA_BF16_UNARY(hrcp, h2rcp, 1.0f / x)
CPUCUDA_BF16_UNARY(hsin, h2sin, sinf(x))
CPUCUDA_BF16_UNARY(hcos, h2cos, cosf(x))
CPUCUDA_BF16_UNARY(htanh, h2tanh, tanhf(x))
CPUCUDA_BF16_UNARY(hceil, h2ceil, ceilf(x))
CPUCUDA_BF16_UNARY(hfloor, h2floor, floorf(x))
CPUCUDA_BF16_UNARY(htrunc, h2trunc, truncf(x))
CPUCUDA_BF16_UNARY(hrint, h2rint, rintf(x))
#undef CPUCUDA_BF16_UNARY

// ---------------------------------------------------------------- operators
// As cuda_bf16.hpp defines them: bf16 op bf16 -> bf16. Mixed bf16/float
// expressions are ambiguous there too, so they are here.
static inline __nv_bfloat16 operator+(__nv_bfloat16 a, __nv_bfloat16 b) { return __hadd(a, b); }
static inline __nv_bfloat16 operator-(__nv_bfloat16 a, __nv_bfloat16 b) { return __hsub(a, b); }
static inline __nv_bfloat16 operator*(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmul(a, b); }
static inline __nv_bfloat16 operator/(__nv_bfloat16 a, __nv_bfloat16 b) { return __hdiv(a, b); }
static inline __nv_bfloat16 operator-(__nv_bfloat16 a) { return __hneg(a); }
static inline __nv_bfloat16 operator+(__nv_bfloat16 a) { return a; }
static inline __nv_bfloat16& operator+=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = a + b; }
static inline __nv_bfloat16& operator-=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = a - b; }
static inline __nv_bfloat16& operator*=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = a * b; }
static inline __nv_bfloat16& operator/=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = a / b; }
static inline __nv_bfloat16& operator++(__nv_bfloat16& a) { return a = a + cpucuda::bf16_of_bits(0x3f80u); }
static inline __nv_bfloat16& operator--(__nv_bfloat16& a) { return a = a - cpucuda::bf16_of_bits(0x3f80u); }
static inline __nv_bfloat16 operator++(__nv_bfloat16& a, int) { __nv_bfloat16 old = a; ++a; return old; }
static inline __nv_bfloat16 operator--(__nv_bfloat16& a, int) { __nv_bfloat16 old = a; --a; return old; }
static inline bool operator==(__nv_bfloat16 a, __nv_bfloat16 b) { return __heq(a, b); }
static inline bool operator!=(__nv_bfloat16 a, __nv_bfloat16 b) { return __hneu(a, b); }
static inline bool operator<(__nv_bfloat16 a, __nv_bfloat16 b) { return __hlt(a, b); }
static inline bool operator<=(__nv_bfloat16 a, __nv_bfloat16 b) { return __hle(a, b); }
static inline bool operator>(__nv_bfloat16 a, __nv_bfloat16 b) { return __hgt(a, b); }
static inline bool operator>=(__nv_bfloat16 a, __nv_bfloat16 b) { return __hge(a, b); }
static inline __nv_bfloat162 operator+(__nv_bfloat162 a, __nv_bfloat162 b) { return __hadd2(a, b); }
static inline __nv_bfloat162 operator-(__nv_bfloat162 a, __nv_bfloat162 b) { return __hsub2(a, b); }
static inline __nv_bfloat162 operator*(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmul2(a, b); }
static inline __nv_bfloat162 operator/(__nv_bfloat162 a, __nv_bfloat162 b) { return __h2div(a, b); }
static inline __nv_bfloat162 operator-(__nv_bfloat162 a) { return __hneg2(a); }
static inline __nv_bfloat162 operator+(__nv_bfloat162 a) { return a; }
static inline __nv_bfloat162& operator+=(__nv_bfloat162& a, __nv_bfloat162 b) { return a = a + b; }
static inline __nv_bfloat162& operator-=(__nv_bfloat162& a, __nv_bfloat162 b) { return a = a - b; }
static inline __nv_bfloat162& operator*=(__nv_bfloat162& a, __nv_bfloat162 b) { return a = a * b; }
static inline __nv_bfloat162& operator/=(__nv_bfloat162& a, __nv_bfloat162 b) { return a = a / b; }
static inline bool operator==(__nv_bfloat162 a, __nv_bfloat162 b) { return __hbeq2(a, b); }
static inline bool operator!=(__nv_bfloat162 a, __nv_bfloat162 b) { return __hbneu2(a, b); }
static inline bool operator<(__nv_bfloat162 a, __nv_bfloat162 b) { return __hblt2(a, b); }
static inline bool operator<=(__nv_bfloat162 a, __nv_bfloat162 b) { return __hble2(a, b); }
static inline bool operator>(__nv_bfloat162 a, __nv_bfloat162 b) { return __hbgt2(a, b); }
static inline bool operator>=(__nv_bfloat162 a, __nv_bfloat162 b) { return __hbge2(a, b); }

// atomicAdd on bfloat16 (sm_80+): fibers never switch inside, so it is atomic.
static inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) { __nv_bfloat16 old = *p; *p = __hadd(old, v); return old; }
static inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) { __nv_bfloat162 old = *p; *p = __hadd2(old, v); return old; }
static inline __nv_bfloat16 atomicAdd_block(__nv_bfloat16* p, __nv_bfloat16 v) { return atomicAdd(p, v); }
static inline __nv_bfloat162 atomicAdd_block(__nv_bfloat162* p, __nv_bfloat162 v) { return atomicAdd(p, v); }
static inline __nv_bfloat16 atomicAdd_system(__nv_bfloat16* p, __nv_bfloat16 v) { return atomicAdd(p, v); }
static inline __nv_bfloat162 atomicAdd_system(__nv_bfloat162* p, __nv_bfloat162 v) { return atomicAdd(p, v); }
