"""CuPy's complex type on the CPU executor: <cupy/complex.cuh> (complex<float> and complex<double> with the functions
CuPy documents), translate_cucomplex=True (cuComplex code compiled against it, as CuPy does), and complex NumPy
scalars passed by value to complex<T> parameters. Checked against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

from sandbox.cpucuda import CpuRawKernel, CpuRawModule

CODE = r"""
#include <cupy/complex.cuh>

// out[k][i] for z = a[i], w = b[i] (and the scalars s, t by value):
template <typename T>
__global__ void complex_ops(const complex<T>* a, const complex<T>* b, complex<T> s, complex<double> t,
                            complex<T>* out, T* reals, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const complex<T> z = a[i], w = b[i];
    complex<T> acc = z;
    acc += w; acc *= s; acc -= T(1); acc /= w;
    const complex<T> results[] = {
        z + w, z - w, z * w, z / w, z * T(2), T(3) / w, -z, conj(z), exp(z), log(z), log10(z), sqrt(z),
        pow(z, w), pow(z, T(1.5)), pow(T(2), z), sin(z), cos(z), tan(z), sinh(z), cosh(z), tanh(z),
        asin(z), acos(z), atan(z), asinh(z), acosh(z), atanh(z), thrust::polar(abs(z), arg(z)), acc,
        complex<T>(t), log1p(z), expm1(z), log2(z), min(z, w), max(z, w), rint(z * T(3))};
    const int m = sizeof(results) / sizeof(results[0]);
    for (int k = 0; k < m; ++k) out[k * n + i] = results[k];
    reals[0 * n + i] = abs(z);
    reals[1 * n + i] = arg(z);
    reals[2 * n + i] = norm(z);
    reals[3 * n + i] = real(z) + imag(w);
    reals[4 * n + i] = (z == w) + 2 * (z != w) + 4 * isfinite(z) + 8 * isnan(z) + 16 * isinf(z);
}
"""


def _expected(z, w, s, t, dtype):
    rt = z.real.dtype.type
    acc = ((z + w) * s - 1) / w
    with np.errstate(all="ignore"):
        return [z + w, z - w, z * w, z / w, z * 2, 3 / w, -z, np.conj(z), np.exp(z), np.log(z), np.log10(z),
                np.sqrt(z), z ** w, z ** rt(1.5), rt(2) ** z, np.sin(z), np.cos(z), np.tan(z), np.sinh(z), np.cosh(z),
                np.tanh(z), np.arcsin(z), np.arccos(z), np.arctan(z), np.arcsinh(z), np.arccosh(z), np.arctanh(z),
                z, acc, np.full_like(z, t), np.log1p(z), np.expm1(z), np.log2(z),
                np.where((z.real < w.real) | ((z.real == w.real) & (z.imag < w.imag)), z, w),
                np.where((z.real < w.real) | ((z.real == w.real) & (z.imag < w.imag)), w, z),
                np.rint((z * 3).real) + 1j * np.rint((z * 3).imag)]


@pytest.fixture(scope="module")
def module():
    return CpuRawModule(code=CODE, name_expressions=["complex_ops<float>", "complex_ops<double>"])


@pytest.mark.parametrize("dtype, rtol", [(np.complex64, 2e-5), (np.complex128, 1e-12)])
def test_complex_functions_against_numpy(module, dtype, rtol):
    ctype = "float" if dtype == np.complex64 else "double"
    mod = module
    rng = np.random.default_rng(8)
    n = 200
    z = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    w = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    w[0] = z[0]  # equality
    s, t = dtype(0.5 - 1.5j), np.complex128(2 + 3j)
    expected = _expected(z, w, s, t, dtype)
    out = np.zeros((len(expected), n), dtype)
    reals = np.zeros((5, n), z.real.dtype)
    mod.get_function(f"complex_ops<{ctype}>")((2,), (128,), (z, w, s, t, out, reals, np.int32(n)))
    for k, e in enumerate(expected):
        np.testing.assert_allclose(out[k], e.astype(dtype), rtol=rtol, atol=rtol, err_msg=f"result {k}")
    np.testing.assert_allclose(reals[0], np.abs(z), rtol=rtol)
    np.testing.assert_allclose(reals[1], np.angle(z), rtol=rtol)
    np.testing.assert_allclose(reals[2], np.abs(z) ** 2, rtol=10 * rtol)
    np.testing.assert_allclose(reals[3], z.real + w.imag, rtol=rtol)
    np.testing.assert_array_equal(reals[4], np.where(z == w, 1, 2) + 4)


TRANSLATED = r"""
#include <cuComplex.h>
extern "C" __global__ void axpy(const cuFloatComplex* x, cuFloatComplex* y, cuFloatComplex a, cuDoubleComplex b,
                                double* norms, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    cuFloatComplex v = cuCfmaf(a, x[i], y[i]);
    v = cuCaddf(v, cuComplexDoubleToFloat(b));
    v = cuCsubf(cuCmulf(v, make_cuFloatComplex(1.0f, 0.0f)), cuCdivf(x[i], make_cuComplex(2.0f, 0.0f)));
    y[i] = cuConjf(v);
    norms[i] = cuCabs(cuComplexFloatToDouble(v)) + cuCreal(b) + cuCimagf(a) + cuCrealf(x[i]) * 0.0f;
    const complex<float> same = v;  // the translation made cuFloatComplex CuPy's complex<float>
    if (same != v) norms[i] = -1.0;
}
"""


def test_translate_cucomplex_compiles_cucomplex_code_against_cupy_complex():
    rng = np.random.default_rng(9)
    n = 64
    x = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    y = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    a, b = np.complex64(1.5 - 0.5j), np.complex128(0.25 + 2j)
    v = a * x + y + np.complex64(b) - x / 2
    norms = np.zeros(n)
    yy = y.copy()
    CpuRawKernel(TRANSLATED, "axpy", translate_cucomplex=True)((1,), (64,), (x, yy, a, b, norms, np.int32(n)))
    np.testing.assert_allclose(yy, np.conj(v), rtol=1e-5)
    np.testing.assert_allclose(norms, np.abs(v.astype(np.complex128)) + b.real + a.imag, rtol=1e-5)
    # Without the translation the same source uses cuComplex.h's float2 types: compiled as well, another result
    # type for the `complex<float>` line, which is then an error.
    with pytest.raises(Exception, match="complex"):
        CpuRawKernel(TRANSLATED, "axpy").compile()
