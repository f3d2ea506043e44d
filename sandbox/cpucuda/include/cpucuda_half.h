// cpucuda_half.h: __half and __half2 as CUDA's cuda_fp16.h declares them.
// Storage is the IEEE binary16 bit pattern (uint16); conversions from float
// round to nearest even, like __float2half_rn and NumPy's astype(float16).
// Arithmetic converts to float, computes, and rounds back once: exact for
// + - * (a float holds the exact result of two halves), not bit-exact for
// intrinsics that fuse or approximate on the GPU (__hfma, h2exp, ...).
#pragma once

namespace cpucuda {

static inline uint16_t float_to_half_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)  // inf, or nan with its top payload bits kept quiet
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
    if (ax >= 0x477ff000u)  // >= 65520 rounds to infinity
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {  // below 2^-14: subnormal; f * 2^24 is exact, rint rounds to even
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
    }
    uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
    const uint32_t rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may reach the exponent: right
    return (uint16_t)(sign | h);
}

static inline float half_bits_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t bits;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-08f;  // m * 2^-24, exact
        return sign ? -v : v;
    }
    bits = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

}  // namespace cpucuda

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };

struct __attribute__((aligned(2))) __half {
    unsigned short __x;
    __half() = default;  // trivial, so __shared__ __half arrays need no constructor
    __half(const __half_raw& r) : __x(r.x) {}
    __half(float f) : __x(cpucuda::float_to_half_bits(f)) {}
    __half(double d) : __x(cpucuda::float_to_half_bits((float)d)) {}
    __half(int v) : __x(cpucuda::float_to_half_bits((float)v)) {}
    __half(unsigned int v) : __x(cpucuda::float_to_half_bits((float)v)) {}
    __half(short v) : __x(cpucuda::float_to_half_bits((float)v)) {}
    __half(unsigned short v) : __x(cpucuda::float_to_half_bits((float)v)) {}
    __half(long long v) : __x(cpucuda::float_to_half_bits((float)v)) {}
    __half(unsigned long long v) : __x(cpucuda::float_to_half_bits((float)v)) {}
    operator float() const { return cpucuda::half_bits_to_float(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
    __half& operator=(const __half_raw& r) { __x = r.x; return *this; }
};
typedef __half half;
typedef __half nv_half;  // CUDA 12.2+ spells both

struct __attribute__((aligned(4))) __half2 {
    __half x, y;
    __half2() = default;
    constexpr __half2(const __half& a, const __half& b) : x(a), y(b) {}
    __half2(const __half2_raw& r) { x.__x = r.x; y.__x = r.y; }
    operator __half2_raw() const { return __half2_raw{x.__x, y.__x}; }
};
typedef __half2 half2;
typedef __half2 nv_half2;

// Conversions.
static inline float __half2float(__half h) { return cpucuda::half_bits_to_float(h.__x); }
static inline __half __float2half(float f) { __half h; h.__x = cpucuda::float_to_half_bits(f); return h; }
static inline __half __float2half_rn(float f) { return __float2half(f); }
static inline __half __double2half(double d) { return __float2half((float)d); }
static inline __half __int2half_rn(int i) { return __float2half((float)i); }
static inline int __half2int_rn(__half h) { return (int)lrintf(__half2float(h)); }
static inline int __half2int_rz(__half h) { return (int)__half2float(h); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
static inline __half __short_as_half(short s) { __half h; h.__x = (unsigned short)s; return h; }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 make_half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 __half2half2(__half a) { return __half2(a, a); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__float2half(a), __float2half(b)); }
static inline __half2 __float2half2_rn(float a) { return __half2(__float2half(a), __float2half(a)); }
static inline __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
static inline float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
static inline float __low2float(__half2 h) { return __half2float(h.x); }
static inline float __high2float(__half2 h) { return __half2float(h.y); }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
static inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
static inline __half2 __lowhigh2highlow(__half2 a) { return __half2(a.y, a.x); }

// Arithmetic through float, rounded once.
#define CPUCUDA_HALF_BINOP(name, expr) \
    static inline __half name(__half a, __half b) { float x = __half2float(a), y = __half2float(b); return __float2half(expr); } \
    static inline __half2 name##2(__half2 a, __half2 b) { return __half2(name(a.x, b.x), name(a.y, b.y)); }
CPUCUDA_HALF_BINOP(__hadd, x + y)
CPUCUDA_HALF_BINOP(__hsub, x - y)
CPUCUDA_HALF_BINOP(__hmul, x * y)
CPUCUDA_HALF_BINOP(__hmax, fmaxf(x, y))
CPUCUDA_HALF_BINOP(__hmin, fminf(x, y))
#undef CPUCUDA_HALF_BINOP
static inline __half __hdiv(__half a, __half b) { return __float2half(__half2float(a) / __half2float(b)); }
static inline __half2 __h2div(__half2 a, __half2 b) { return __half2(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); }
static inline __half __hfma(__half a, __half b, __half c) { return __float2half(fmaf(__half2float(a), __half2float(b), __half2float(c))); }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
static inline __half __hneg(__half a) { a.__x ^= 0x8000u; return a; }
static inline __half2 __hneg2(__half2 a) { return __half2(__hneg(a.x), __hneg(a.y)); }
static inline __half __habs(__half a) { a.__x &= 0x7fffu; return a; }
static inline __half2 __habs2(__half2 a) { return __half2(__habs(a.x), __habs(a.y)); }
static inline bool __hisnan(__half a) { return (a.__x & 0x7fffu) > 0x7c00u; }
static inline bool __hisinf(__half a) { return (a.__x & 0x7fffu) == 0x7c00u; }
static inline bool __heq(__half a, __half b) { return __half2float(a) == __half2float(b); }
static inline bool __hne(__half a, __half b) { return __half2float(a) != __half2float(b); }
static inline bool __hlt(__half a, __half b) { return __half2float(a) < __half2float(b); }
static inline bool __hle(__half a, __half b) { return __half2float(a) <= __half2float(b); }
static inline bool __hgt(__half a, __half b) { return __half2float(a) > __half2float(b); }
static inline bool __hge(__half a, __half b) { return __half2float(a) >= __half2float(b); }
static inline __half hexp(__half a) { return __float2half(expf(__half2float(a))); }
static inline __half hlog(__half a) { return __float2half(logf(__half2float(a))); }
static inline __half hsqrt(__half a) { return __float2half(sqrtf(__half2float(a))); }
static inline __half hrsqrt(__half a) { return __float2half(1.0f / sqrtf(__half2float(a))); }

// Operators, as cuda_fp16.hpp defines them: half op half -> half. Mixed
// half/float expressions are ambiguous there too, so they are here.
static inline __half operator+(__half a, __half b) { return __hadd(a, b); }
static inline __half operator-(__half a, __half b) { return __hsub(a, b); }
static inline __half operator*(__half a, __half b) { return __hmul(a, b); }
static inline __half operator/(__half a, __half b) { return __hdiv(a, b); }
static inline __half operator-(__half a) { return __hneg(a); }
static inline __half operator+(__half a) { return a; }
static inline __half& operator+=(__half& a, __half b) { return a = a + b; }
static inline __half& operator-=(__half& a, __half b) { return a = a - b; }
static inline __half& operator*=(__half& a, __half b) { return a = a * b; }
static inline __half& operator/=(__half& a, __half b) { return a = a / b; }
static inline bool operator==(__half a, __half b) { return __heq(a, b); }
static inline bool operator!=(__half a, __half b) { return __hne(a, b); }
static inline bool operator<(__half a, __half b) { return __hlt(a, b); }
static inline bool operator<=(__half a, __half b) { return __hle(a, b); }
static inline bool operator>(__half a, __half b) { return __hgt(a, b); }
static inline bool operator>=(__half a, __half b) { return __hge(a, b); }
static inline __half2 operator+(__half2 a, __half2 b) { return __hadd2(a, b); }
static inline __half2 operator-(__half2 a, __half2 b) { return __hsub2(a, b); }
static inline __half2 operator*(__half2 a, __half2 b) { return __hmul2(a, b); }
static inline __half2 operator/(__half2 a, __half2 b) { return __h2div(a, b); }
static inline __half2& operator+=(__half2& a, __half2 b) { return a = a + b; }
static inline __half2& operator-=(__half2& a, __half2 b) { return a = a - b; }
static inline __half2& operator*=(__half2& a, __half2 b) { return a = a * b; }
static inline __half2& operator/=(__half2& a, __half2 b) { return a = a / b; }
