// cpucuda_bf16.h: a minimal __nv_bfloat16 (the top 16 bits of a float,
// rounded to nearest even) with the conversions kernels use. NumPy has no
// bfloat16: pass such arrays as uint16 and convert on the host.
#pragma once

namespace cpucuda {
static inline uint16_t float_to_bf16_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  // quiet nan
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
static inline float bf16_bits_to_float(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
}  // namespace cpucuda

struct __attribute__((aligned(2))) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(cpucuda::float_to_bf16_bits(f)) {}
    __nv_bfloat16(double d) : __x(cpucuda::float_to_bf16_bits((float)d)) {}
    __nv_bfloat16(int v) : __x(cpucuda::float_to_bf16_bits((float)v)) {}
    operator float() const { return cpucuda::bf16_bits_to_float(__x); }
};
typedef __nv_bfloat16 nv_bfloat16;

struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    constexpr __nv_bfloat162(const __nv_bfloat16& a, const __nv_bfloat16& b) : x(a), y(b) {}
};
typedef __nv_bfloat162 nv_bfloat162;

static inline float __bfloat162float(__nv_bfloat16 h) { return cpucuda::bf16_bits_to_float(h.__x); }
static inline __nv_bfloat16 __float2bfloat16(float f) { __nv_bfloat16 h; h.__x = cpucuda::float_to_bf16_bits(f); return h; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__float2bfloat16(a), __float2bfloat16(b)); }
static inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2(__bfloat162float(h.x), __bfloat162float(h.y)); }
static inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
static inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }
