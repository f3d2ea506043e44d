// cupy/cuComplex_bridge.h: what translate_cucomplex=True puts where a source includes
// <cuComplex.h>, as CuPy does: cuComplex's types become complex<float> / complex<double>
// (cupy/complex.cuh) and its functions the complex operations they name.
#pragma once
#include "complex.cuh"

typedef complex<float> cuFloatComplex;
typedef complex<float> cuComplex;
typedef complex<double> cuDoubleComplex;

static inline float cuCrealf(cuFloatComplex z) { return z.real(); }
static inline float cuCimagf(cuFloatComplex z) { return z.imag(); }
static inline cuFloatComplex make_cuFloatComplex(float re, float im) { return cuFloatComplex(re, im); }
static inline cuFloatComplex make_cuComplex(float re, float im) { return cuFloatComplex(re, im); }
static inline cuFloatComplex cuConjf(cuFloatComplex z) { return conj(z); }
static inline cuFloatComplex cuCaddf(cuFloatComplex a, cuFloatComplex b) { return a + b; }
static inline cuFloatComplex cuCsubf(cuFloatComplex a, cuFloatComplex b) { return a - b; }
static inline cuFloatComplex cuCmulf(cuFloatComplex a, cuFloatComplex b) { return a * b; }
static inline cuFloatComplex cuCdivf(cuFloatComplex a, cuFloatComplex b) { return a / b; }
static inline float cuCabsf(cuFloatComplex z) { return abs(z); }
static inline cuFloatComplex cuComplexDoubleToFloat(cuDoubleComplex z) { return cuFloatComplex(z); }
static inline cuFloatComplex cuCfmaf(cuFloatComplex a, cuFloatComplex b, cuFloatComplex c) { return a * b + c; }

static inline double cuCreal(cuDoubleComplex z) { return z.real(); }
static inline double cuCimag(cuDoubleComplex z) { return z.imag(); }
static inline cuDoubleComplex make_cuDoubleComplex(double re, double im) { return cuDoubleComplex(re, im); }
static inline cuDoubleComplex cuConj(cuDoubleComplex z) { return conj(z); }
static inline cuDoubleComplex cuCadd(cuDoubleComplex a, cuDoubleComplex b) { return a + b; }
static inline cuDoubleComplex cuCsub(cuDoubleComplex a, cuDoubleComplex b) { return a - b; }
static inline cuDoubleComplex cuCmul(cuDoubleComplex a, cuDoubleComplex b) { return a * b; }
static inline cuDoubleComplex cuCdiv(cuDoubleComplex a, cuDoubleComplex b) { return a / b; }
static inline double cuCabs(cuDoubleComplex z) { return abs(z); }
static inline cuDoubleComplex cuComplexFloatToDouble(cuFloatComplex z) { return cuDoubleComplex(z); }
static inline cuDoubleComplex cuCfma(cuDoubleComplex a, cuDoubleComplex b, cuDoubleComplex c) { return a * b + c; }
