// cpucuda_fp8.h: CUDA 12's <cuda_fp8.h> for the CPU executor: __nv_fp8_e4m3
// (e4m3fn: no infinity, max finite 448, NaN 0x7F/0xFF) and __nv_fp8_e5m2 (IEEE
// style: max finite 57344, infinity 0x7C/0xFC), their x2/x4 vectors, and the
// __nv_cvt_* intrinsics. Conversions port CUDA's host code paths, so they are
// the GPU's: round to nearest even with subnormals; __NV_SATFINITE clamps
// overflow (and infinity) to +-max finite; __NV_NOSAT turns overflow into NaN
// (e4m3) or infinity (e5m2); NaN stays NaN. A float NaN becomes 0x7F in both
// formats; fp8 -> half gives the canonical 0x7FFF for NaN, fp8 -> float
// 0x7FFFFFFF. Constructors from float/half/bfloat16/double/integers use
// __NV_SATFINITE; conversions out of fp8 are explicit, as in CUDA (write
// float(x) or static_cast<float>(x)). Apart from NaN bit patterns these match
// ml_dtypes.float8_e4m3fn / float8_e5m2 exactly (NOSAT) and ml_dtypes of the
// clipped value (SATFINITE). Every conversion is a few integer operations.
#pragma once
#include "cpucuda_runtime.h"

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short int __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;
typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

namespace cpucuda {

// CUDA's __nv_cvt_double_to_fp8: every finite double rounds once, to nearest even.
static inline __nv_fp8_storage_t double_to_fp8(double x, bool satfinite, bool e5m2) {
    uint64_t xb;
    memcpy(&xb, &x, 8);
    const int sig = e5m2 ? 3 : 4;  // significand bits with the implicit one
    const int bias = e5m2 ? 15 : 7;
    const uint64_t mindenorm_o2 = e5m2 ? 0x3EE0000000000000ull : 0x3F50000000000000ull;  // 2^-17 : 2^-10
    // maxnorm + 1/2 ulp (57344 + 2048 : 448 + 16); e5m2's midpoint rounds up to inf (its max is odd)
    const uint64_t overflow = e5m2 ? 0x40EE000000000000ull - 1u : 0x407D000000000000ull;
    const uint64_t minnorm = e5m2 ? 0x3F10000000000000ull : 0x3F90000000000000ull;  // 2^-14 : 2^-6
    const unsigned maxnorm = e5m2 ? 0x7Bu : 0x7Eu;
    const uint64_t half_ulp = 1ull << (53 - sig - 1);
    const unsigned sign = (unsigned)(xb >> 63) << 7;
    const int exp = (int)((xb >> 52) & 0x7FF) - 1023 + bias;
    unsigned mantissa = (unsigned)(xb >> (53 - sig)) & ((1u << (sig - 1)) - 1u);
    const uint64_t absx = xb & 0x7FFFFFFFFFFFFFFFull;
    unsigned res;
    if (absx <= mindenorm_o2) {
        res = 0;
    } else if (absx > 0x7FF0000000000000ull) {
        res = e5m2 ? 0x7Eu | mantissa : 0x7Fu;
    } else if (absx > overflow) {
        res = satfinite ? maxnorm : (e5m2 ? 0x7Cu : 0x7Fu);
    } else if (absx >= minnorm) {
        res = ((unsigned)exp << (sig - 1)) | mantissa;
        const uint64_t round = xb & ((half_ulp << 1) - 1);
        if (round > half_ulp || (round == half_ulp && (mantissa & 1u))) ++res;
    } else {  // subnormal
        const int shift = 1 - exp;
        mantissa |= 1u << (sig - 1);
        res = mantissa >> shift;
        const uint64_t round = (xb | (1ull << 52)) & ((half_ulp << (shift + 1)) - 1);
        if (round > (half_ulp << shift) || (round == (half_ulp << shift) && (res & 1u))) ++res;
    }
    return (__nv_fp8_storage_t)(res | sign);
}

static inline __nv_fp8_storage_t float_to_fp8(float f, bool satfinite, bool e5m2) {
    if (f != f) return 0x7Fu;  // canonical nan, positive
    return double_to_fp8((double)f, satfinite, e5m2);
}

// CUDA's __nv_cvt_fp8_to_halfraw: exact; NaN becomes 0x7FFF.
static inline unsigned short fp8_to_half_bits(__nv_fp8_storage_t x, bool e5m2) {
    unsigned short ur = (unsigned short)(x << 8);
    if (e5m2) return (ur & 0x7FFFu) > 0x7C00u ? 0x7FFFu : ur;
    if ((x & 0x7Fu) == 0x7Fu) return 0x7FFFu;
    const unsigned sign = ur & 0x8000u;
    unsigned exponent = ((ur & 0x7800u) >> 1) + 0x2000u;
    unsigned mantissa = (ur & 0x0700u) >> 1;
    if (exponent == 0x2000u) {  // zero or subnormal
        if (mantissa) {
            mantissa <<= 1;
            while (!(mantissa & 0x0400u)) {
                mantissa <<= 1;
                exponent -= 0x0400u;
            }
            mantissa &= 0x03FFu;
        } else {
            exponent = 0;
        }
    }
    return (unsigned short)(sign | exponent | mantissa);
}

// CUDA's host half -> float: exact, NaN becomes 0x7FFFFFFF.
static inline float fp8_half_bits_to_float(unsigned short h) {
    if ((h & 0x7FFFu) > 0x7C00u) {
        const uint32_t nan = 0x7FFFFFFFu;
        float f;
        memcpy(&f, &nan, 4);
        return f;
    }
    return half_bits_to_float(h);
}
static inline float fp8_to_float(__nv_fp8_storage_t x, bool e5m2) {
    return fp8_half_bits_to_float(fp8_to_half_bits(x, e5m2));
}

}  // namespace cpucuda

// ---------------------------------------------------------------- intrinsics

static inline __nv_fp8_storage_t __nv_cvt_double_to_fp8(double x, __nv_saturation_t saturate,
                                                        __nv_fp8_interpretation_t interp) {
    return cpucuda::double_to_fp8(x, saturate != __NV_NOSAT, interp == __NV_E5M2);
}
static inline __nv_fp8x2_storage_t __nv_cvt_double2_to_fp8x2(double2 x, __nv_saturation_t saturate,
                                                             __nv_fp8_interpretation_t interp) {
    return (__nv_fp8x2_storage_t)(__nv_cvt_double_to_fp8(x.x, saturate, interp)
                                  | (__nv_cvt_double_to_fp8(x.y, saturate, interp) << 8));
}
static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t saturate,
                                                       __nv_fp8_interpretation_t interp) {
    return cpucuda::float_to_fp8(x, saturate != __NV_NOSAT, interp == __NV_E5M2);
}
static inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(float2 x, __nv_saturation_t saturate,
                                                            __nv_fp8_interpretation_t interp) {
    return (__nv_fp8x2_storage_t)(__nv_cvt_float_to_fp8(x.x, saturate, interp)
                                  | (__nv_cvt_float_to_fp8(x.y, saturate, interp) << 8));
}
static inline __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(__half_raw x, __nv_saturation_t saturate,
                                                         __nv_fp8_interpretation_t interp) {
    return __nv_cvt_float_to_fp8(cpucuda::fp8_half_bits_to_float(x.x), saturate, interp);
}
static inline __nv_fp8x2_storage_t __nv_cvt_halfraw2_to_fp8x2(__half2_raw x, __nv_saturation_t saturate,
                                                              __nv_fp8_interpretation_t interp) {
    return (__nv_fp8x2_storage_t)(__nv_cvt_halfraw_to_fp8(__half_raw{x.x}, saturate, interp)
                                  | (__nv_cvt_halfraw_to_fp8(__half_raw{x.y}, saturate, interp) << 8));
}
static inline __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw x, __nv_saturation_t saturate,
                                                             __nv_fp8_interpretation_t interp) {
    return __nv_cvt_float_to_fp8(cpucuda::bf16_bits_to_float(x.x), saturate, interp);
}
static inline __nv_fp8x2_storage_t __nv_cvt_bfloat16raw2_to_fp8x2(__nv_bfloat162_raw x, __nv_saturation_t saturate,
                                                                  __nv_fp8_interpretation_t interp) {
    return (__nv_fp8x2_storage_t)(__nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{x.x}, saturate, interp)
                                  | (__nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{x.y}, saturate, interp) << 8));
}
static inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t x, __nv_fp8_interpretation_t interp) {
    return __half_raw{cpucuda::fp8_to_half_bits(x, interp == __NV_E5M2)};
}
static inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t x, __nv_fp8_interpretation_t interp) {
    return __half2_raw{cpucuda::fp8_to_half_bits((__nv_fp8_storage_t)x, interp == __NV_E5M2),
                       cpucuda::fp8_to_half_bits((__nv_fp8_storage_t)(x >> 8), interp == __NV_E5M2)};
}
// fp8 values are bfloat16 values: exact (NaN becomes 0x7FFF).
static inline __nv_bfloat16_raw __nv_cvt_fp8_to_bf16raw(__nv_fp8_storage_t x, __nv_fp8_interpretation_t interp) {
    return __nv_bfloat16_raw{cpucuda::float_to_bf16_bits(cpucuda::fp8_to_float(x, interp == __NV_E5M2))};
}
static inline __nv_bfloat162_raw __nv_cvt_fp8x2_to_bf162raw(__nv_fp8x2_storage_t x, __nv_fp8_interpretation_t interp) {
    return __nv_bfloat162_raw{__nv_cvt_fp8_to_bf16raw((__nv_fp8_storage_t)x, interp).x,
                              __nv_cvt_fp8_to_bf16raw((__nv_fp8_storage_t)(x >> 8), interp).x};
}

// ---------------------------------------------------------------- types

#define CPUCUDA_FP8_SCALAR(NAME, INTERP)                                                                      \
    struct __attribute__((aligned(1))) NAME {                                                                 \
        __nv_fp8_storage_t __x;                                                                               \
        NAME() = default;                                                                                     \
        explicit NAME(const __half f) { __x = __nv_cvt_halfraw_to_fp8(__half_raw(f), __NV_SATFINITE, INTERP); } \
        explicit NAME(const __nv_bfloat16 f) {                                                                \
            __x = __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw(f), __NV_SATFINITE, INTERP);                  \
        }                                                                                                     \
        explicit NAME(const float f) { __x = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, INTERP); }              \
        explicit NAME(const double f) { __x = __nv_cvt_double_to_fp8(f, __NV_SATFINITE, INTERP); }            \
        explicit NAME(const unsigned short v) { __x = NAME((float)v).__x; }                                   \
        explicit NAME(const unsigned int v) { __x = NAME((float)v).__x; }                                     \
        explicit NAME(const unsigned long v) { __x = NAME((float)v).__x; }                                    \
        explicit NAME(const unsigned long long v) { __x = NAME((float)v).__x; }                               \
        explicit NAME(const short v) { __x = NAME((float)v).__x; }                                            \
        explicit NAME(const int v) { __x = NAME((float)v).__x; }                                              \
        explicit NAME(const long v) { __x = NAME((float)v).__x; }                                             \
        explicit NAME(const long long v) { __x = NAME((float)v).__x; }                                        \
        explicit operator __half() const { return __half(__nv_cvt_fp8_to_halfraw(__x, INTERP)); }            \
        explicit operator float() const { return cpucuda::fp8_to_float(__x, INTERP == __NV_E5M2); }          \
        explicit operator __nv_bfloat16() const { return __nv_bfloat16(__nv_cvt_fp8_to_bf16raw(__x, INTERP)); } \
        explicit operator double() const { return (double)float(*this); }                                    \
        explicit operator unsigned char() const { return to_int<unsigned char>(); }                          \
        explicit operator unsigned short() const { return to_int<unsigned short>(); }                        \
        explicit operator unsigned int() const { return to_int<unsigned int>(); }                            \
        explicit operator unsigned long() const { return to_int<unsigned long>(); }                          \
        explicit operator unsigned long long() const { return to_int<unsigned long long>(); }                \
        explicit operator signed char() const { return to_int<signed char>(); }                              \
        explicit operator char() const { return to_int<char>(); }                                            \
        explicit operator short() const { return to_int<short>(); }                                          \
        explicit operator int() const { return to_int<int>(); }                                              \
        explicit operator long() const { return to_int<long>(); }                                            \
        explicit operator long long() const { return to_int<long long>(); }                                  \
        explicit operator bool() const { return (__x & 0x7Fu) != 0u; }                                       \
      private:                                                                                                \
        /* toward zero; NaN gives 0 (0x8000000000000000 for 64-bit types); saturates */                     \
        template <class I> I to_int() const {                                                                 \
            return cpucuda::float_to_int_sat<I>(float(*this), cpucuda::INT_RZ);                               \
        }                                                                                                     \
    };
CPUCUDA_FP8_SCALAR(__nv_fp8_e4m3, __NV_E4M3)
CPUCUDA_FP8_SCALAR(__nv_fp8_e5m2, __NV_E5M2)
#undef CPUCUDA_FP8_SCALAR

#define CPUCUDA_FP8_VECTORS(X2, X4, INTERP)                                                                   \
    struct __attribute__((aligned(2))) X2 {                                                                   \
        __nv_fp8x2_storage_t __x;                                                                             \
        X2() = default;                                                                                       \
        explicit X2(const __half2 f) { __x = __nv_cvt_halfraw2_to_fp8x2(__half2_raw(f), __NV_SATFINITE, INTERP); } \
        explicit X2(const __nv_bfloat162 f) {                                                                 \
            __x = __nv_cvt_bfloat16raw2_to_fp8x2(__nv_bfloat162_raw(f), __NV_SATFINITE, INTERP);              \
        }                                                                                                     \
        explicit X2(const float2 f) { __x = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, INTERP); }            \
        explicit X2(const double2 f) { __x = __nv_cvt_double2_to_fp8x2(f, __NV_SATFINITE, INTERP); }          \
        explicit operator __half2() const { return __half2(__nv_cvt_fp8x2_to_halfraw2(__x, INTERP)); }       \
        explicit operator __nv_bfloat162() const { return __nv_bfloat162(__nv_cvt_fp8x2_to_bf162raw(__x, INTERP)); } \
        explicit operator float2() const {                                                                    \
            const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__x, INTERP);                                    \
            return make_float2(cpucuda::fp8_half_bits_to_float(h.x), cpucuda::fp8_half_bits_to_float(h.y));  \
        }                                                                                                     \
    };                                                                                                        \
    struct __attribute__((aligned(4))) X4 {                                                                   \
        __nv_fp8x4_storage_t __x;                                                                             \
        X4() = default;                                                                                       \
        explicit X4(const __half2 lo, const __half2 hi) {                                                     \
            __x = (__nv_fp8x4_storage_t)__nv_cvt_halfraw2_to_fp8x2(__half2_raw(lo), __NV_SATFINITE, INTERP)   \
                  | ((__nv_fp8x4_storage_t)__nv_cvt_halfraw2_to_fp8x2(__half2_raw(hi), __NV_SATFINITE, INTERP) << 16); \
        }                                                                                                     \
        explicit X4(const __nv_bfloat162 lo, const __nv_bfloat162 hi) {                                       \
            __x = (__nv_fp8x4_storage_t)__nv_cvt_bfloat16raw2_to_fp8x2(__nv_bfloat162_raw(lo), __NV_SATFINITE, INTERP) \
                  | ((__nv_fp8x4_storage_t)__nv_cvt_bfloat16raw2_to_fp8x2(__nv_bfloat162_raw(hi), __NV_SATFINITE, INTERP) << 16); \
        }                                                                                                     \
        explicit X4(const float4 f) {                                                                         \
            __x = (__nv_fp8x4_storage_t)__nv_cvt_float2_to_fp8x2(make_float2(f.x, f.y), __NV_SATFINITE, INTERP) \
                  | ((__nv_fp8x4_storage_t)__nv_cvt_float2_to_fp8x2(make_float2(f.z, f.w), __NV_SATFINITE, INTERP) << 16); \
        }                                                                                                     \
        explicit X4(const double4 f) {                                                                        \
            __x = (__nv_fp8x4_storage_t)__nv_cvt_double2_to_fp8x2(make_double2(f.x, f.y), __NV_SATFINITE, INTERP) \
                  | ((__nv_fp8x4_storage_t)__nv_cvt_double2_to_fp8x2(make_double2(f.z, f.w), __NV_SATFINITE, INTERP) << 16); \
        }                                                                                                     \
        explicit operator float4() const {                                                                    \
            const bool e5 = INTERP == __NV_E5M2;                                                              \
            return make_float4(cpucuda::fp8_to_float((__nv_fp8_storage_t)__x, e5),                           \
                               cpucuda::fp8_to_float((__nv_fp8_storage_t)(__x >> 8), e5),                    \
                               cpucuda::fp8_to_float((__nv_fp8_storage_t)(__x >> 16), e5),                   \
                               cpucuda::fp8_to_float((__nv_fp8_storage_t)(__x >> 24), e5));                  \
        }                                                                                                     \
    };
CPUCUDA_FP8_VECTORS(__nv_fp8x2_e4m3, __nv_fp8x4_e4m3, __NV_E4M3)
CPUCUDA_FP8_VECTORS(__nv_fp8x2_e5m2, __nv_fp8x4_e5m2, __NV_E5M2)
#undef CPUCUDA_FP8_VECTORS

// By-value kernel parameters of these types take ml_dtypes scalars.
namespace cpucuda {
template <> struct by_value_code<__nv_fp8_e4m3> : std::integral_constant<char, '4'> {};
template <> struct by_value_code<__nv_fp8_e5m2> : std::integral_constant<char, '5'> {};
}  // namespace cpucuda
