// cpucuda_ptx.h: what inline PTX becomes on the CPU. sandbox/cpucuda/ptx.py
// translates each asm statement into calls of these functions, with PTX's
// semantics exactly:
//
// * registers are bit patterns (h: uint16_t, r: uint32_t, l: uint64_t,
//   f: float, d: double); get<U>() reads the low bits of a register as an
//   instruction type, put() writes a result zero-extended (put_signed: sign-
//   extended) to the register's width;
// * floating-point conversions and f16/bf16 arithmetic are computed exactly:
//   every f16, bf16 and f32 value is a double, products of two of them are
//   exact in double, and a sum is kept exact in the sense that matters by
//   rounding it to odd (its last bit says "inexact"); one rounding to the
//   destination format with the instruction's mode (rn, rz, rm, rp) then gives
//   the correctly rounded result, subnormals and overflow included. NaN
//   results are the canonical NaN (0x7fff for f16 and bf16, 0x7fffffff for f32);
// * loads and stores check the alignment PTX requires (a GPU stops the kernel
//   with "misaligned address") and are ordinary accesses, so ASan and
//   racecheck see them;
// * shfl.sync is the executor's warp rendezvous, as __shfl_sync.
#pragma once

namespace cpucuda {
namespace ptx {

// ---------------------------------------------------------------- registers

template <class T> struct bits_of { using type = T; };
template <> struct bits_of<float> { using type = uint32_t; };
template <> struct bits_of<double> { using type = uint64_t; };

template <class T> static inline typename std::make_unsigned<typename bits_of<T>::type>::type raw(const T& reg) {
    typename std::make_unsigned<typename bits_of<T>::type>::type b;
    memcpy(&b, &reg, sizeof b);
    return b;
}

// The low bits of a register, as the instruction's type U (an unsigned integer).
template <class U, class R> static inline U get(const R& reg) { return (U)raw(reg); }

// A result into a register: zero-extended or truncated to the register's width.
template <class R, class U> static inline void put(R& reg, U value) {
    const auto b = (decltype(raw(reg)))value;
    memcpy(&reg, &b, sizeof reg);
}
// Sign-extended from the instruction type U (ld.s8, cvt.s32.s16, ...).
template <class R, class U> static inline void put_signed(R& reg, U value) {
    using S = typename std::make_signed<U>::type;
    const auto b = (decltype(raw(reg)))(int64_t)(S)value;
    memcpy(&reg, &b, sizeof reg);
}

// Operands to registers and back: arithmetic values convert (a pointer becomes its address),
// objects of the register's size (__half, __half2, ...) are copied bit for bit.
template <class R, class T> static inline R to_reg(const T& v) {
    if constexpr (std::is_pointer<T>::value) {
        return (R)(uintptr_t)v;
    } else if constexpr (std::is_arithmetic<T>::value && std::is_arithmetic<R>::value &&
                         (std::is_floating_point<T>::value == std::is_floating_point<R>::value)) {
        return (R)v;
    } else {
        static_assert(sizeof(T) == sizeof(R) || std::is_arithmetic<T>::value,
                      "inline PTX operand: its size differs from the register's (h: 2, r: 4, l: 8 bytes)");
        if constexpr (sizeof(T) == sizeof(R)) {
            R r;
            memcpy(&r, &v, sizeof r);
            return r;
        } else {
            return (R)v;
        }
    }
}
template <class T, class R> static inline void from_reg(T& lhs, const R& r) {
    if constexpr (std::is_pointer<T>::value) {
        lhs = (T)(uintptr_t)r;
    } else if constexpr (std::is_arithmetic<T>::value &&
                         (std::is_floating_point<T>::value == std::is_floating_point<R>::value)) {
        lhs = (T)r;
    } else {
        static_assert(sizeof(T) == sizeof(R),
                      "inline PTX output operand: its size differs from the register's (h: 2, r: 4, l: 8 bytes)");
        memcpy(&lhs, &r, sizeof r);
    }
}

// ---------------------------------------------------------------- floating-point formats

enum Fmt { F16, BF16, F32, F64 };
enum Rnd { RN, RZ, RM, RP };
enum FloatFlags : unsigned { FTZ = 1, SAT = 2, RELU = 4, SATFINITE = 8 };

struct Format { int ebits, mbits; };
static constexpr Format kFormats[] = {{5, 10}, {8, 7}, {8, 23}, {11, 52}};

static inline double decode(Fmt f, uint64_t b) {
    switch (f) {
    case F16: return (double)cpucuda::half_bits_to_float((uint16_t)b);
    case BF16: { const uint32_t w = (uint32_t)(b & 0xffffu) << 16; float x; memcpy(&x, &w, 4); return x; }
    case F32: { const uint32_t w = (uint32_t)b; float x; memcpy(&x, &w, 4); return x; }
    default: { double x; memcpy(&x, &b, 8); return x; }
    }
}

static inline uint64_t canonical_nan(Fmt f) {
    return f == F16 ? 0x7fffu : f == BF16 ? 0x7fffu : f == F32 ? 0x7fffffffu : 0x7fffffffffffffffull;
}

static inline bool is_subnormal(Fmt f, uint64_t b) {
    const Format F = kFormats[f];
    const uint64_t e = (b >> F.mbits) & ((1ull << F.ebits) - 1), m = b & ((1ull << F.mbits) - 1);
    return e == 0 && m != 0;
}

static inline uint64_t sign_bit(Fmt f) { return 1ull << (kFormats[f].ebits + kFormats[f].mbits); }

// x (exact, or rounded to odd when it stands for an inexact result) to format f, rounded by r.
static inline uint64_t encode(Fmt f, double x, Rnd r) {
    if (f == F64) { uint64_t b; memcpy(&b, &x, 8); return b; }
    const Format F = kFormats[f];
    if (x != x) return canonical_nan(f);
    const bool neg = signbit(x);
    const uint64_t sign = neg ? sign_bit(f) : 0;
    const uint64_t inf = ((1ull << F.ebits) - 1) << F.mbits;
    const double a = fabs(x);
    if (a == 0) return sign;
    if (isinf(a)) return sign | inf;
    const int bias = (1 << (F.ebits - 1)) - 1, emin = 1 - bias;
    int e = ilogb(a);
    if (e < emin) e = emin;                       // subnormal: the quantum stays 2^(emin - mbits)
    const double scaled = ldexp(a, F.mbits - e);  // exact: a power-of-two scaling of a double
    uint64_t m = (uint64_t)scaled;
    const double frac = scaled - (double)m;       // exact
    bool up = false;
    switch (r) {
    case RN: up = frac > 0.5 || (frac == 0.5 && (m & 1)); break;
    case RZ: break;
    case RM: up = neg && frac > 0; break;
    case RP: up = !neg && frac > 0; break;
    }
    m += up;
    if (m == (2ull << F.mbits)) { m >>= 1; ++e; }  // the carry reached the next binade
    uint64_t exp_field = m >> F.mbits ? (uint64_t)(e + bias) : 0;
    if (exp_field >= (1ull << F.ebits) - 1) {      // overflow: infinity or the largest finite value
        const bool to_inf = r == RN || (r == RM && neg) || (r == RP && !neg);
        return sign | (to_inf ? inf : inf - 1);
    }
    return sign | (exp_field << F.mbits) | (m & ((1ull << F.mbits) - 1));
}

// a + b rounded to odd: the nearest double whose last bit is 1 when the sum is inexact. Rounding
// that once more to a format of at most 51 significand bits gives the correctly rounded sum.
static inline double sum_to_odd(double a, double b) {
    const double s = a + b;
    if (!isfinite(s)) return s;
    const double bb = s - a, err = (a - (s - bb)) + (b - bb);  // TwoSum: s + err == a + b exactly
    if (err == 0) return s;
    uint64_t bits;
    memcpy(&bits, &s, 8);
    if (bits & 1) return s;
    return nextafter(s, err > 0 ? INFINITY : -INFINITY);
}

// The flags that act on a result: ftz (subnormal to signed zero), sat ([0, 1], NaN to +0),
// relu (negative to +0, NaN stays NaN), satfinite (infinity to the largest finite value).
static inline uint64_t finish(Fmt f, uint64_t b, unsigned flags) {
    const uint64_t sign = sign_bit(f), mag = b & (sign - 1);
    const uint64_t inf = ((1ull << kFormats[f].ebits) - 1) << kFormats[f].mbits;
    const bool nan = mag > inf;
    if ((flags & FTZ) && is_subnormal(f, b)) b &= sign;
    if (flags & SAT) {
        if (nan || (b & sign)) return 0;
        if (decode(f, b) > 1.0) return encode(f, 1.0, RN);
    }
    if (flags & RELU) {
        if (nan) return canonical_nan(f);
        if (b & sign) return 0;
    }
    if ((flags & SATFINITE) && mag == inf) b = (b & sign) | (inf - 1);
    return b;
}

static inline double input(Fmt f, uint64_t b, unsigned flags) {
    if ((flags & FTZ) && is_subnormal(f, b)) b &= sign_bit(f);
    return decode(f, b);
}

// cvt between floating-point formats (narrowing with a rounding mode; widening is exact). .ftz acts
// on f32 subnormals only, so the caller passes it for the side that is f32.
static inline uint64_t cvt(Fmt to, Fmt from, uint64_t b, Rnd r, unsigned in_flags, unsigned out_flags) {
    const double x = input(from, b, in_flags);
    if (x != x) return finish(to, canonical_nan(to), out_flags);
    return finish(to, encode(to, x, r), out_flags);
}

// cvt.rni/rzi/rmi/rpi: a float rounded to an integral value of the same format.
static inline uint64_t cvt_integral(Fmt f, uint64_t b, Rnd r, unsigned flags) {
    const double x = input(f, b, flags);
    const double y = r == RN ? nearbyint(x) : r == RZ ? trunc(x) : r == RM ? floor(x) : ceil(x);
    return finish(f, encode(f, y, RN), flags);
}

enum Arith { ADD, SUB, MUL, FMA };

// add/sub/mul/fma of one f16 or bf16 (or f32) lane, rounded once.
static inline uint64_t arith(Arith op, Fmt f, uint64_t a, uint64_t b, uint64_t c, Rnd r, unsigned flags) {
    const double x = input(f, a, flags), y = input(f, b, flags), z = input(f, c, flags);
    double v;
    switch (op) {
    case ADD: v = sum_to_odd(x, y); break;
    case SUB: v = sum_to_odd(x, -y); break;
    case MUL: v = x * y; break;                   // exact: at most 2 x 24 significand bits
    default: v = sum_to_odd(x * y, z); break;     // the product is exact, the sum rounded to odd
    }
    if (v != v) return finish(f, canonical_nan(f), flags & ~RELU);
    return finish(f, encode(f, v, r), flags);
}

// The same on both 16-bit halves of a 32-bit register (f16x2, bf16x2).
static inline uint32_t arith2(Arith op, Fmt f, uint32_t a, uint32_t b, uint32_t c, Rnd r, unsigned flags) {
    const uint32_t lo = (uint32_t)arith(op, f, a & 0xffffu, b & 0xffffu, c & 0xffffu, r, flags);
    const uint32_t hi = (uint32_t)arith(op, f, a >> 16, b >> 16, c >> 16, r, flags);
    return (hi << 16) | (lo & 0xffffu);
}

// cvt between integer types: truncation or extension (C++'s, which is two's complement), or with
// .sat a clamp to the destination's range.
template <class D, class A> static inline D cvt_int(A a, bool sat) {
    if (!sat) return (D)a;
    const __int128 v = a, lo = std::numeric_limits<D>::min(), hi = std::numeric_limits<D>::max();
    return (D)(v < lo ? lo : v > hi ? hi : v);
}

// ---------------------------------------------------------------- bits

// prmt.b32: byte permute of {b, a} (a holds bytes 0-3). mode 0: the default (a selector nibble
// per result byte, bit 3 replicating the byte's sign); 1..6: f4e, b4e, rc8, ecl, ecr, rc16.
static inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t c, int mode) {
    const uint64_t x = ((uint64_t)b << 32) | a;
    static const unsigned char table[6][4][4] = {  // [mode-1][c & 3][result byte 0..3] = source byte
        {{0, 1, 2, 3}, {1, 2, 3, 4}, {2, 3, 4, 5}, {3, 4, 5, 6}},  // f4e
        {{0, 7, 6, 5}, {1, 0, 7, 6}, {2, 1, 0, 7}, {3, 2, 1, 0}},  // b4e
        {{0, 0, 0, 0}, {1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}},  // rc8
        {{0, 1, 2, 3}, {1, 1, 2, 3}, {2, 2, 2, 3}, {3, 3, 3, 3}},  // ecl
        {{0, 0, 0, 0}, {0, 1, 1, 1}, {0, 1, 2, 2}, {0, 1, 2, 3}},  // ecr
        {{0, 1, 0, 1}, {2, 3, 2, 3}, {0, 1, 0, 1}, {2, 3, 2, 3}},  // rc16
    };
    uint32_t d = 0;
    for (int i = 0; i < 4; ++i) {
        uint32_t byte;
        if (mode == 0) {
            const unsigned sel = (c >> (4 * i)) & 0xfu;
            byte = (uint32_t)(x >> (8 * (sel & 7u))) & 0xffu;
            if (sel & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;
        } else {
            byte = (uint32_t)(x >> (8 * table[mode - 1][c & 3u][i])) & 0xffu;
        }
        d |= byte << (8 * i);
    }
    return d;
}

// lop3.b32: bit i of the result is bit (a_i << 2 | b_i << 1 | c_i) of the look-up table.
static inline uint32_t lop3(uint32_t a, uint32_t b, uint32_t c, uint32_t lut) {
    uint32_t d = 0;
    for (int k = 0; k < 8; ++k)
        if ((lut >> k) & 1u) d |= ((k & 4) ? a : ~a) & ((k & 2) ? b : ~b) & ((k & 1) ? c : ~c);
    return d;
}

// ---------------------------------------------------------------- memory

[[noreturn]] static inline void misaligned(uint64_t addr, unsigned bytes, const char* what, const char* file,
                                           int line) {
    fiber_fail("misaligned address 0x%llx for %s (a %u-byte access must be %u-byte aligned) at %s:%d in %s",
               (unsigned long long)addr, what, bytes, bytes, file, line, where(g.cur));
}

// ld of `n` elements of `bytes` each from `addr` into out[0..n): PTX vector loads must be
// aligned to their whole size.
template <class U>
static inline void load(uint64_t addr, U* out, int n, const char* what, const char* file, int line) {
    if (addr % (sizeof(U) * n)) misaligned(addr, (unsigned)(sizeof(U) * n), what, file, line);
    const U* p = (const U*)(uintptr_t)addr;
    for (int i = 0; i < n; ++i) out[i] = p[i];
}
template <class U>
static inline void store(uint64_t addr, const U* in, int n, const char* what, const char* file, int line) {
    if (addr % (sizeof(U) * n)) misaligned(addr, (unsigned)(sizeof(U) * n), what, file, line);
    U* p = (U*)(uintptr_t)addr;
    for (int i = 0; i < n; ++i) p[i] = in[i];
}

// ---------------------------------------------------------------- warps

enum ShflMode { SHFL_UP, SHFL_DOWN, SHFL_BFLY, SHFL_IDX };

// shfl.sync.mode.b32 d|p, a, b, c, membermask: PTX's source-lane rule (c packs the clamp value
// in bits 0-4 and the segment mask in bits 8-12); out of range, a lane reads its own value.
static inline uint32_t shfl(ShflMode mode, uint32_t a, uint32_t b, uint32_t c, uint32_t membermask, bool* p,
                            const char* what, const char* file, int line) {
    const int lane = (int)g.cur->lane, bval = (int)(b & 31u), cval = (int)(c & 31u), seg = (int)((c >> 8) & 31u);
    const int max_lane = (lane & seg) | (cval & ~seg), min_lane = lane & seg;
    int j = lane;
    bool ok;
    switch (mode) {
    case SHFL_UP: j = lane - bval; ok = j >= max_lane; break;
    case SHFL_DOWN: j = lane + bval; ok = j <= max_lane; break;
    case SHFL_BFLY: j = lane ^ bval; ok = j <= max_lane; break;
    default: j = min_lane | (bval & ~seg); ok = j <= max_lane; break;
    }
    if (p) *p = ok;
    return cpucuda::shuffle(membermask, a, ok ? j : -1, what, file, line);
}

}  // namespace ptx
}  // namespace cpucuda

#include "cpucuda_ptx_approx.h"
#include "cpucuda_ptx_async.h"
