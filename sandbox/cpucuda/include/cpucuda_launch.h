// cpucuda_launch.h: the typed bridge between Python and a kernel. Python
// passes `void** args`, one pointer per parameter to the parameter's bytes
// (like cuLaunchKernel's kernelParams); C++ deduces the kernel's parameter
// types from its address, so templates and name expressions need no parsing.
#pragma once

#define CPUCUDA_EXPORT extern "C" __attribute__((visibility("default"), used))

namespace cpucuda {

// Type codes of by-value types that headers included after this one define
// (<cuda_fp8.h> specialises it for __nv_fp8_e4m3 and __nv_fp8_e5m2); 0: none.
template <class T> struct by_value_code : std::integral_constant<char, 0> {};

// One character per parameter, NumPy's type codes: the exact C type that
// Python must pass. 'P' pointer, 'C' pointer to const, 'V' a struct passed by
// value (a __grid_constant__ Params; sandbox.cpucuda.Struct), 'x' unsupported.
// Beyond NumPy's own: 'E' __nv_bfloat16, '4' __nv_fp8_e4m3, '5' __nv_fp8_e5m2
// (ml_dtypes' codes for bfloat16, float8_e4m3fn, float8_e5m2); 'F' float2 =
// cuFloatComplex and 'D' double2 = cuDoubleComplex (complex64, complex128).
template <class T> constexpr char type_code() {
    using U = std::remove_cv_t<T>;
    if (std::is_pointer<U>::value)
        return std::is_const<std::remove_pointer_t<U>>::value ? 'C' : 'P';
    if (by_value_code<U>::value) return by_value_code<U>::value;
    if (std::is_same<U, bool>::value) return '?';
    if (std::is_same<U, __half>::value) return 'e';
    if (std::is_same<U, __nv_bfloat16>::value) return 'E';
    if (std::is_same<U, float2>::value) return 'F';
    if (std::is_same<U, double2>::value) return 'D';
    if (std::is_same<U, float>::value) return 'f';
    if (std::is_same<U, double>::value) return 'd';
    if (std::is_integral<U>::value) {
        const bool s = std::is_signed<U>::value;
        switch (sizeof(U)) {
        case 1: return s ? 'b' : 'B';
        case 2: return s ? 'h' : 'H';
        case 4: return s ? 'i' : 'I';
        case 8: return s ? 'q' : 'Q';
        }
    }
    if (std::is_class<U>::value && std::is_trivially_copyable<U>::value) return 'V';
    return 'x';
}

template <class T> static const char* type_name() { return __PRETTY_FUNCTION__; }

template <class... P> static const char* signature(void (*)(P...)) {
    static const char codes[] = {type_code<P>()..., '\0'};
    return codes;
}

template <class... P> static const char* param_type_name(void (*)(P...), int i) {
    static const char* names[] = {type_name<P>()..., nullptr};
    return (i >= 0 && i < (int)sizeof...(P)) ? names[i] : nullptr;
}

template <class... P> static size_t param_size(void (*)(P...), int i) {
    static const size_t sizes[] = {sizeof(P)..., 0};
    return (i >= 0 && i < (int)sizeof...(P)) ? sizes[i] : 0;
}

template <class... P, size_t... I>
static void call_with(void (*k)(P...), void** args, std::index_sequence<I...>) {
    k(*static_cast<std::remove_cv_t<P>*>(args[I])...);
}

template <class... P> struct Call {
    void (*k)(P...);
    void** args;
    static void run(void* self) {
        Call* c = static_cast<Call*>(self);
        call_with(c->k, c->args, std::index_sequence_for<P...>{});
    }
};

template <class... P>
static int launch(void (*k)(P...), void** args, const LaunchConfig* cfg, char* err, size_t errlen,
                  const char* name) {
    Call<P...> call{k, args};
    return run_grid(cfg, &Call<P...>::run, &call, err, errlen, name);
}

}  // namespace cpucuda

CPUCUDA_EXPORT const char* cpucuda_fiber_impl(void) { return CPUCUDA_FIBER_IMPL; }
CPUCUDA_EXPORT void cpucuda_release(void) { cpucuda::release_fibers(); }
CPUCUDA_EXPORT void* cpucuda_malloc(size_t n) { return malloc(n); }
CPUCUDA_EXPORT void cpucuda_free(void* p) { free(p); }
