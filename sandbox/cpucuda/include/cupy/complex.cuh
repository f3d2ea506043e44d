// cupy/complex.cuh for the CPU executor: CuPy's complex type, thrust::complex<T> (float or
// double), with the functions CuPy documents for it: arithmetic with complex numbers and with
// scalars of the same type, == and !=, real, imag, abs, arg, norm, conj, polar, proj, exp, log,
// log10, pow, sqrt, the trigonometric and hyperbolic functions and their inverses, and CuPy's
// additions at global scope (isnan, isinf, isfinite, log1p, log2, expm1, min, max, rint).
//
// Layout as in CuPy: two T, aligned to 2 * sizeof(T), so arrays of NumPy complex64/complex128 are
// arrays of complex<float>/complex<double>, and NumPy complex scalars pass by value. Products and
// quotients use CuPy's (Thrust's) formulas; the transcendental functions are the C library's
// (C99 Annex G special values, as CuPy's ports of FreeBSD's), so results can differ from a GPU's
// in the last bits.
#pragma once
#include "../cpucuda_runtime.h"
#include <complex>

namespace thrust {

template <typename T>
struct alignas(2 * sizeof(T)) complex {
    static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                  "complex<T>: T must be float or double (as in CuPy)");
    typedef T value_type;

    complex() = default;
    complex(const complex&) = default;
    complex(const T& re) : m_data{re, T(0)} {}
    complex(const T& re, const T& im) : m_data{re, im} {}
    template <typename X> complex(const complex<X>& z) : m_data{T(z.real()), T(z.imag())} {}

    complex& operator=(const complex&) = default;
    complex& operator=(const T& re) { m_data[0] = re; m_data[1] = T(0); return *this; }
    template <typename U> complex& operator=(const complex<U>& z) {
        m_data[0] = T(z.real());
        m_data[1] = T(z.imag());
        return *this;
    }

    complex& operator+=(const complex z) { return *this = *this + z; }
    complex& operator-=(const complex z) { return *this = *this - z; }
    complex& operator*=(const complex z) { return *this = *this * z; }
    complex& operator/=(const complex z) { return *this = *this / z; }

    T real() const volatile { return m_data[0]; }
    T imag() const volatile { return m_data[1]; }
    T real() const { return m_data[0]; }
    T imag() const { return m_data[1]; }
    void real(T re) volatile { m_data[0] = re; }
    void imag(T im) volatile { m_data[1] = im; }
    void real(T re) { m_data[0] = re; }
    void imag(T im) { m_data[1] = im; }

  private:
    T m_data[2];
};

namespace detail {
template <typename T> inline std::complex<T> to_std(const complex<T>& z) { return {z.real(), z.imag()}; }
template <typename T> inline complex<T> from_std(const std::complex<T>& z) { return {z.real(), z.imag()}; }
template <typename T, typename U>
using promoted = typename std::conditional<(sizeof(T) > sizeof(U)), T, U>::type;
}  // namespace detail

// ---------------------------------------------------------------- arithmetic (CuPy's formulas)

template <typename T> inline complex<T> operator+(const complex<T>& a, const complex<T>& b) {
    return {a.real() + b.real(), a.imag() + b.imag()};
}
template <typename T> inline complex<T> operator+(const complex<T>& a, const T& b) { return {a.real() + b, a.imag()}; }
template <typename T> inline complex<T> operator+(const T& a, const complex<T>& b) { return {a + b.real(), b.imag()}; }
template <typename T> inline complex<T> operator-(const complex<T>& a, const complex<T>& b) {
    return {a.real() - b.real(), a.imag() - b.imag()};
}
template <typename T> inline complex<T> operator-(const complex<T>& a, const T& b) { return {a.real() - b, a.imag()}; }
template <typename T> inline complex<T> operator-(const T& a, const complex<T>& b) { return {a - b.real(), -b.imag()}; }
template <typename T> inline complex<T> operator*(const complex<T>& a, const complex<T>& b) {
    return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}
template <typename T> inline complex<T> operator*(const complex<T>& a, const T& b) { return {a.real() * b, a.imag() * b}; }
template <typename T> inline complex<T> operator*(const T& a, const complex<T>& b) { return {a * b.real(), a * b.imag()}; }
// Scaled by |re| + |im| of the divisor, so that neither the squares overflow nor underflow early.
template <typename T> inline complex<T> operator/(const complex<T>& a, const complex<T>& b) {
    const T s = std::fabs(b.real()) + std::fabs(b.imag()), oos = T(1) / s;
    const T ar = a.real() * oos, ai = a.imag() * oos, br = b.real() * oos, bi = b.imag() * oos;
    const T oos2 = T(1) / (br * br + bi * bi);
    return {(ar * br + ai * bi) * oos2, (ai * br - ar * bi) * oos2};
}
template <typename T> inline complex<T> operator/(const complex<T>& a, const T& b) { return {a.real() / b, a.imag() / b}; }
template <typename T> inline complex<T> operator/(const T& a, const complex<T>& b) { return complex<T>(a) / b; }
template <typename T> inline complex<T> operator+(const complex<T>& z) { return z; }
template <typename T> inline complex<T> operator-(const complex<T>& z) { return {-z.real(), -z.imag()}; }

template <typename T> inline bool operator==(const complex<T>& a, const complex<T>& b) {
    return a.real() == b.real() && a.imag() == b.imag();
}
template <typename T> inline bool operator==(const complex<T>& a, const T& b) { return a == complex<T>(b); }
template <typename T> inline bool operator==(const T& a, const complex<T>& b) { return complex<T>(a) == b; }
template <typename T> inline bool operator!=(const complex<T>& a, const complex<T>& b) { return !(a == b); }
template <typename T> inline bool operator!=(const complex<T>& a, const T& b) { return !(a == b); }
template <typename T> inline bool operator!=(const T& a, const complex<T>& b) { return !(a == b); }

// ---------------------------------------------------------------- general functions

template <typename T> inline T real(const complex<T>& z) { return z.real(); }
template <typename T> inline T imag(const complex<T>& z) { return z.imag(); }
template <typename T> inline T abs(const complex<T>& z) { return std::hypot(z.real(), z.imag()); }
template <typename T> inline T arg(const complex<T>& z) { return std::atan2(z.imag(), z.real()); }
template <typename T> inline T norm(const complex<T>& z) { return z.real() * z.real() + z.imag() * z.imag(); }
template <typename T> inline complex<T> conj(const complex<T>& z) { return {z.real(), -z.imag()}; }
template <typename T> inline complex<T> polar(const T& m, const T& theta = 0) {
    return {m * std::cos(theta), m * std::sin(theta)};
}
template <typename T> inline complex<T> proj(const complex<T>& z) { return detail::from_std(std::proj(detail::to_std(z))); }

// ---------------------------------------------------------------- the C library's functions

#define CPUCUDA_COMPLEX_FN(name) \
    template <typename T> inline complex<T> name(const complex<T>& z) { return detail::from_std(std::name(detail::to_std(z))); }
CPUCUDA_COMPLEX_FN(exp)
CPUCUDA_COMPLEX_FN(log)
CPUCUDA_COMPLEX_FN(log10)
CPUCUDA_COMPLEX_FN(sqrt)
CPUCUDA_COMPLEX_FN(sin)
CPUCUDA_COMPLEX_FN(cos)
CPUCUDA_COMPLEX_FN(tan)
CPUCUDA_COMPLEX_FN(sinh)
CPUCUDA_COMPLEX_FN(cosh)
CPUCUDA_COMPLEX_FN(tanh)
CPUCUDA_COMPLEX_FN(asin)
CPUCUDA_COMPLEX_FN(acos)
CPUCUDA_COMPLEX_FN(atan)
CPUCUDA_COMPLEX_FN(asinh)
CPUCUDA_COMPLEX_FN(acosh)
CPUCUDA_COMPLEX_FN(atanh)
#undef CPUCUDA_COMPLEX_FN

template <typename T> inline complex<T> pow(const complex<T>& x, const complex<T>& y) {
    return detail::from_std(std::pow(detail::to_std(x), detail::to_std(y)));
}
template <typename T> inline complex<T> pow(const complex<T>& x, const T& y) {
    return detail::from_std(std::pow(detail::to_std(x), y));
}
template <typename T> inline complex<T> pow(const T& x, const complex<T>& y) {
    return detail::from_std(std::pow(x, detail::to_std(y)));
}
// Mixed precisions: the wider of the two.
template <typename T, typename U, typename = typename std::enable_if<!std::is_same<T, U>::value>::type>
inline complex<detail::promoted<T, U>> pow(const complex<T>& x, const complex<U>& y) {
    using P = detail::promoted<T, U>;
    return pow(complex<P>(x), complex<P>(y));
}
template <typename T, typename U,
          typename = typename std::enable_if<!std::is_same<T, U>::value && std::is_arithmetic<U>::value>::type>
inline complex<detail::promoted<T, U>> pow(const complex<T>& x, const U& y) {
    using P = detail::promoted<T, U>;
    return pow(complex<P>(x), P(y));
}
template <typename T, typename U,
          typename = typename std::enable_if<!std::is_same<T, U>::value && std::is_arithmetic<T>::value>::type>
inline complex<detail::promoted<T, U>> pow(const T& x, const complex<U>& y) {
    using P = detail::promoted<T, U>;
    return pow(P(x), complex<P>(y));
}

}  // namespace thrust

namespace cpucuda {  // complex64 / complex128 scalars pass by value (see args.py)
template <> struct by_value_code<thrust::complex<float>> : std::integral_constant<char, 'F'> {};
template <> struct by_value_code<thrust::complex<double>> : std::integral_constant<char, 'D'> {};
}  // namespace cpucuda

using thrust::complex;
using thrust::conj;
using thrust::real;
using thrust::imag;
using thrust::arg;
using thrust::exp;
using thrust::log;
using thrust::log10;
using thrust::sin;
using thrust::cos;
using thrust::tan;
using thrust::sinh;
using thrust::cosh;
using thrust::tanh;
using thrust::asinh;
using thrust::acosh;
using thrust::atanh;
using thrust::asin;
using thrust::acos;
using thrust::atan;

// CuPy's additions, at global scope as in CuPy.
template <typename T> inline bool isnan(complex<T> x) { return std::isnan(x.real()) || std::isnan(x.imag()); }
template <typename T> inline bool isinf(complex<T> x) { return std::isinf(x.real()) || std::isinf(x.imag()); }
template <typename T> inline bool isfinite(complex<T> x) { return std::isfinite(x.real()) && std::isfinite(x.imag()); }
template <typename T> inline complex<T> log1p(complex<T> x) { return log(x + T(1)); }
template <typename T> inline complex<T> log2(complex<T> x) { return log(x) / std::log(T(2)); }
template <typename T> inline complex<T> expm1(complex<T> x) { return exp(x) - T(1); }
// NaN loses; otherwise ordered by the real part, then the imaginary part.
template <typename T> inline complex<T> min(complex<T> x, complex<T> y) {
    if (isnan(x)) return y;
    if (isnan(y)) return x;
    if (x.real() != y.real()) return x.real() < y.real() ? x : y;
    return x.imag() < y.imag() ? x : y;
}
template <typename T> inline complex<T> max(complex<T> x, complex<T> y) {
    if (isnan(x)) return y;
    if (isnan(y)) return x;
    if (x.real() != y.real()) return x.real() < y.real() ? y : x;
    return x.imag() < y.imag() ? y : x;
}
template <typename T> inline complex<T> rint(complex<T> x) { return {std::rint(x.real()), std::rint(x.imag())}; }
