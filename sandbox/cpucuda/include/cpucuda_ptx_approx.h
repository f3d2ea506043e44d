// cpucuda_ptx_approx.h: PTX's approximate math (ex2, lg2, rcp, rsqrt, sqrt, tanh, sin, cos .approx).
//
// How the CPU rounds them: a GPU's .approx results are within documented bounds of the exact
// function (ex2.approx.f32: 2 ulp; lg2, rsqrt, tanh: a few ulp; each SM generation the same), not
// bit-defined. Here every .approx result is the exact function computed in double and rounded once
// to nearest even in the instruction's format: the most accurate value a GPU could return, so a
// kernel's result can differ from a GPU's in the last bit or two of these operations, never more.
// .ftz flushes subnormal inputs and results to signed zero, as PTX says. f16/bf16 (and x2)
// forms compute each half the same way. The .rn forms (rcp.rn, sqrt.rn) are exactly rounded
// on a GPU too, so they match bit for bit.
#pragma once

namespace cpucuda {
namespace ptx {

// A register's bits as a float or double (setp compares values, not bits).
template <class T, class U> static inline T bits_as(U bits) {
    static_assert(sizeof(T) == sizeof(U), "bits_as: sizes differ");
    T x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

enum ApproxOp { EX2, LG2, RCP, RSQRT, SQRT, TANH, SIN, COS };

static inline double approx_value(ApproxOp op, double x) {
    switch (op) {
    case EX2: return exp2(x);
    case LG2: return log2(x);
    case RCP: return 1.0 / x;
    case RSQRT: return 1.0 / sqrt(x);
    case SQRT: return sqrt(x);
    case TANH: return tanh(x);
    case SIN: return sin(x);
    default: return cos(x);
    }
}

// One lane: the bits of f-format input b to the bits of the result.
static inline uint64_t approx(ApproxOp op, Fmt f, uint64_t b, unsigned flags) {
    const double x = input(f, b, flags);
    return finish(f, encode(f, approx_value(op, x), RN), flags);
}

// Both 16-bit halves of an f16x2 / bf16x2 register.
static inline uint32_t approx2(ApproxOp op, Fmt f, uint32_t b, unsigned flags) {
    return (uint32_t)approx(op, f, b & 0xffffu, flags) | ((uint32_t)approx(op, f, b >> 16, flags) << 16);
}

// setp's comparisons. Ordered ones are false when either operand is NaN, the u-forms true.
enum Cmp { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_EQU, CMP_NEU, CMP_LTU, CMP_LEU, CMP_GTU,
           CMP_GEU, CMP_NUM, CMP_NAN };

template <class T> static inline bool compare(Cmp c, T a, T b) {
    if constexpr (std::is_floating_point<T>::value) {
        const bool unordered = a != a || b != b;
        switch (c) {
        case CMP_NUM: return !unordered;
        case CMP_NAN: return unordered;
        case CMP_EQU: return unordered || a == b;
        case CMP_NEU: return unordered || a != b;
        case CMP_LTU: return unordered || a < b;
        case CMP_LEU: return unordered || a <= b;
        case CMP_GTU: return unordered || a > b;
        case CMP_GEU: return unordered || a >= b;
        case CMP_NE: return !unordered && a != b;
        default: break;
        }
    }
    switch (c) {
    case CMP_EQ: return a == b;
    case CMP_NE: return a != b;
    case CMP_LT: return a < b;
    case CMP_LE: return a <= b;
    case CMP_GT: return a > b;
    case CMP_GE: return a >= b;
    default: return false;
    }
}

// bfind: the bit position of the most significant non-sign bit (0xffffffff when there is none);
// .shiftamt gives the left shift that would move it to the top instead.
template <class T> static inline uint32_t bfind(T a, bool shiftamt) {
    using U = typename std::make_unsigned<T>::type;
    const int bits = 8 * sizeof(T);
    U v = (U)a;
    if (std::is_signed<T>::value && a < 0) v = (U)~v;
    if (v == 0) return 0xffffffffu;
    int pos = bits - 1;
    while (!((v >> pos) & 1)) --pos;
    return shiftamt ? (uint32_t)(bits - 1 - pos) : (uint32_t)pos;
}

// shl/shr: shift amounts past the width give 0 (shr.s: the sign), unlike C++.
template <class T> static inline T shift_left(T a, uint32_t n) { return n >= 8 * sizeof(T) ? T(0) : T(a << n); }
template <class T> static inline T shift_right(T a, uint32_t n) {
    if (n >= 8 * sizeof(T)) return std::is_signed<T>::value && a < 0 ? T(-1) : T(0);
    return T(a >> n);
}

// %clock / %clock64 / %globaltimer: time read from the host's monotonic clock (ns), enough for
// kernels that time themselves or seed from it; never a GPU's cycle count.
static inline uint64_t clock_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// An inline PTX statement from a library header that cannot run here, reached at run time: stop the
// launch with its reason (compile time would refuse whole libraries for code off the kernel's path).
[[noreturn]] static inline void refused(const char* message, const char* file, int line) {
    fiber_fail("%s:%d: inline PTX %s, reached in %s", file, line, message, where(g.cur));
}

}  // namespace ptx
}  // namespace cpucuda
