// cuComplex.h for the CPU executor: CUDA's single and double complex types
// (cuFloatComplex is float2, cuDoubleComplex double2, as in CUDA, so arrays of
// NumPy complex64/complex128 are arrays of them) and CUDA's functions, with
// CUDA's formulas: cuCdiv scales by |re|+|im| of the divisor, cuCabs avoids
// overflow the way CUDA's does. The GPU may contract a*b+c into an FMA where
// g++ does not, so results can differ from a GPU's in the last bit.
#pragma once
#include "cpucuda_runtime.h"

typedef float2 cuFloatComplex;
typedef double2 cuDoubleComplex;
typedef cuFloatComplex cuComplex;

#define CPUCUDA_COMPLEX(C, R, SUFFIX, MAKE, FABS, SQRT, MAXV)                                                \
    static inline R cuCreal##SUFFIX(C x) { return x.x; }                                                      \
    static inline R cuCimag##SUFFIX(C x) { return x.y; }                                                      \
    static inline C MAKE(R r, R i) { C z; z.x = r; z.y = i; return z; }                                      \
    static inline C cuConj##SUFFIX(C x) { return MAKE(x.x, -x.y); }                                           \
    static inline C cuCadd##SUFFIX(C x, C y) { return MAKE(x.x + y.x, x.y + y.y); }                           \
    static inline C cuCsub##SUFFIX(C x, C y) { return MAKE(x.x - y.x, x.y - y.y); }                           \
    static inline C cuCmul##SUFFIX(C x, C y) {                                                                \
        return MAKE((x.x * y.x) - (x.y * y.y), (x.x * y.y) + (x.y * y.x));                                    \
    }                                                                                                          \
    static inline C cuCdiv##SUFFIX(C x, C y) {                                                                \
        R s = FABS(y.x) + FABS(y.y);                                                                           \
        R oos = (R)1 / s;                                                                                      \
        const R ars = x.x * oos, ais = x.y * oos, brs = y.x * oos, bis = y.y * oos;                            \
        s = (brs * brs) + (bis * bis);                                                                         \
        oos = (R)1 / s;                                                                                        \
        return MAKE(((ars * brs) + (ais * bis)) * oos, ((ais * brs) - (ars * bis)) * oos);                     \
    }                                                                                                          \
    static inline R cuCabs##SUFFIX(C x) {                                                                     \
        const R a = FABS(x.x), b = FABS(x.y);                                                                  \
        const R v = a > b ? a : b, w = a > b ? b : a;                                                          \
        R t = w / v;                                                                                           \
        t = (R)1 + t * t;                                                                                      \
        t = v * SQRT(t);                                                                                       \
        if (v == (R)0 || v > MAXV || w > MAXV) t = v + w;                                                      \
        return t;                                                                                              \
    }                                                                                                          \
    static inline C cuCfma##SUFFIX(C x, C y, C d) {                                                           \
        R re = (x.x * y.x) + d.x, im = (x.x * y.y) + d.y;                                                      \
        re = -(x.y * y.y) + re;                                                                                \
        im = (x.y * y.x) + im;                                                                                 \
        return MAKE(re, im);                                                                                   \
    }
CPUCUDA_COMPLEX(cuFloatComplex, float, f, make_cuFloatComplex, fabsf, sqrtf, FLT_MAX)
CPUCUDA_COMPLEX(cuDoubleComplex, double, , make_cuDoubleComplex, fabs, sqrt, DBL_MAX)
#undef CPUCUDA_COMPLEX

static inline cuComplex make_cuComplex(float x, float y) { return make_cuFloatComplex(x, y); }
static inline cuDoubleComplex cuComplexFloatToDouble(cuFloatComplex c) {
    return make_cuDoubleComplex((double)c.x, (double)c.y);
}
static inline cuFloatComplex cuComplexDoubleToFloat(cuDoubleComplex c) {
    return make_cuFloatComplex((float)c.x, (float)c.y);
}
