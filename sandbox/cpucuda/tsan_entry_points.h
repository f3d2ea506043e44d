// tsan_entry_points.h: ThreadSanitizer's entry points and the linker's libc wraps, for the recorders of the
// instrumented modes (traffic_recorder.cpp, race_checker.cpp; see instrument.py). The including file defines,
// before including this one:
//   void on_access(uint64_t address, unsigned bytes, bool write, void* pc)   every instrumented access
//   void on_libc(void* dst, const void* src, size_t bytes, void* pc, int what)   memcpy 0, memmove 1, memset 2
//                                                                              (src: nullptr for memset)
// and its own __tsan_func_entry / __tsan_func_exit. pc: the return address of the hook (the access's instruction).
#pragma once

#define CPUCUDA_TSAN_READ(n)                                                                              \
    HOOK void __tsan_read##n(void* p) { on_access((uint64_t)p, n, false, __builtin_return_address(0)); }  \
    HOOK void __tsan_unaligned_read##n(void* p) { on_access((uint64_t)p, n, false, __builtin_return_address(0)); }
#define CPUCUDA_TSAN_WRITE(n)                                                                            \
    HOOK void __tsan_write##n(void* p) { on_access((uint64_t)p, n, true, __builtin_return_address(0)); } \
    HOOK void __tsan_unaligned_write##n(void* p) { on_access((uint64_t)p, n, true, __builtin_return_address(0)); }
CPUCUDA_TSAN_READ(1) CPUCUDA_TSAN_READ(2) CPUCUDA_TSAN_READ(4) CPUCUDA_TSAN_READ(8) CPUCUDA_TSAN_READ(16)
CPUCUDA_TSAN_WRITE(1) CPUCUDA_TSAN_WRITE(2) CPUCUDA_TSAN_WRITE(4) CPUCUDA_TSAN_WRITE(8) CPUCUDA_TSAN_WRITE(16)
#undef CPUCUDA_TSAN_READ
#undef CPUCUDA_TSAN_WRITE
HOOK void __tsan_read_range(void* p, unsigned long n) { on_access((uint64_t)p, (unsigned)n, false, __builtin_return_address(0)); }
HOOK void __tsan_write_range(void* p, unsigned long n) { on_access((uint64_t)p, (unsigned)n, true, __builtin_return_address(0)); }
HOOK void __tsan_vptr_read(void**) {}
HOOK void __tsan_vptr_update(void**, void*) {}
HOOK void __tsan_init() {}

// The kernel's libc calls, which the instrumentation cannot see inside (the linker's --wrap: instrument.WRAPPED).
extern "C" void* __real_memcpy(void*, const void*, size_t);
extern "C" void* __real_memmove(void*, const void*, size_t);
extern "C" void* __real_memset(void*, int, size_t);
HOOK void* __wrap_memcpy(void* d, const void* s, size_t n) {
    on_libc(d, s, n, __builtin_return_address(0), 0);
    return __real_memcpy(d, s, n);
}
HOOK void* __wrap_memmove(void* d, const void* s, size_t n) {
    on_libc(d, s, n, __builtin_return_address(0), 1);
    return __real_memmove(d, s, n);
}
HOOK void* __wrap_memset(void* d, int c, size_t n) {
    on_libc(d, nullptr, n, __builtin_return_address(0), 2);
    return __real_memset(d, c, n);
}
