// cpucuda_shared_window.h: 32-bit shared-memory addresses (__cvta_generic_to_shared, the [%r] operands
// of cp.async and ld/st.shared) for a CPU, whose shared memory is ordinary 64-bit memory.
//
// A GPU names shared memory by offsets in a per-block window. Here each shared region gets a slot of
// 2^20 bytes of that window (more than any GPU's 228 KiB): slot 0 is the launch's dynamic shared
// memory, slots 1.. the static __shared__ variables in the order the block first reaches them.
// An address that falls in no region stops the launch, as a GPU's shared-window fault does.
#pragma once

namespace cpucuda {

static const unsigned kWindowSlotBits = 20;
static const unsigned kWindowSlots = 4096;  // 2^32 / 2^20
struct WindowRegion { unsigned char* p; size_t n; };
static WindowRegion g_window[kWindowSlots];  // [0]: dynamic shared memory (refreshed at each lookup)
static unsigned g_window_used = 1;

// A static __shared__ region (shared_enter, once per block): its slot, kept for the process.
CPUCUDA_RUNTIME static inline void window_note(void* p, size_t n) {
    for (unsigned s = 1; s < g_window_used; ++s)
        if (g_window[s].p == p) return;
    if (g_window_used < kWindowSlots) g_window[g_window_used++] = WindowRegion{(unsigned char*)p, n};
}

CPUCUDA_RUNTIME static inline uint32_t window_address(const void* ptr, const char* file, int line) {
    g_window[0] = WindowRegion{g.dyn_smem, g.dyn_size};
    const unsigned char* q = (const unsigned char*)ptr;
    for (unsigned s = 0; s < g_window_used; ++s)
        if (g_window[s].p && q >= g_window[s].p && q <= g_window[s].p + g_window[s].n)  // one past the end too
            return (s << kWindowSlotBits) | (uint32_t)(q - g_window[s].p);
    fiber_fail("__cvta_generic_to_shared(%p) at %s:%d in %s: the pointer is not in shared memory", ptr, file,
               line, where(g.cur));
}

// A window address back to memory, checked to lie in its region with `bytes` to spare.
CPUCUDA_RUNTIME static inline unsigned char* window_pointer(uint64_t a, unsigned bytes, const char* what,
                                                            const char* file, int line) {
    g_window[0] = WindowRegion{g.dyn_smem, g.dyn_size};
    const uint64_t s = a >> kWindowSlotBits, off = a & ((1u << kWindowSlotBits) - 1);
    if (s < g_window_used && g_window[s].p && off + bytes <= g_window[s].n) return g_window[s].p + off;
    fiber_fail("%s at %s:%d in %s: shared address 0x%llx (%u bytes) is outside every shared region "
               "(an out-of-bounds shared access)", what, file, line, where(g.cur), (unsigned long long)a, bytes);
}

CPUCUDA_RUNTIME static inline bool in_shared(const void* ptr) {
    g_window[0] = WindowRegion{g.dyn_smem, g.dyn_size};
    const unsigned char* q = (const unsigned char*)ptr;
    for (unsigned s = 0; s < g_window_used; ++s)
        if (g_window[s].p && q >= g_window[s].p && q < g_window[s].p + g_window[s].n) return true;
    return false;
}

}  // namespace cpucuda

static inline size_t __cvta_generic_to_shared(const void* p, const char* cpucuda_file = __builtin_FILE(),
                                              int cpucuda_line = __builtin_LINE()) {
    return cpucuda::window_address(p, cpucuda_file, cpucuda_line);
}
static inline void* __cvta_shared_to_generic(size_t a, const char* cpucuda_file = __builtin_FILE(),
                                              int cpucuda_line = __builtin_LINE()) {
    return cpucuda::window_pointer(a, 0, "__cvta_shared_to_generic", cpucuda_file, cpucuda_line);
}
// The address-space predicates and conversions CUDA offers (CCCL's cuda::device::is_address_from uses them).
// Global memory is every address that is not shared memory or a thread's stack; nothing is __constant__
// or a __grid_constant__ parameter's (they are copies in ordinary memory here).
static inline unsigned int __isShared(const void* p) { return cpucuda::in_shared(p); }
static inline unsigned int __isLocal(const void* p) {
    const char* q = (const char*)p;
    const cpucuda::Fiber* f = cpucuda::g.cur;
    return f && q >= f->stack_lo && q < f->stack_lo + f->stack_size;
}
static inline unsigned int __isGlobal(const void* p) { return !__isShared(p) && !__isLocal(p); }
static inline unsigned int __isConstant(const void*) { return 0; }
static inline unsigned int __isGridConstant(const void*) { return 0; }
static inline size_t __cvta_generic_to_global(const void* p) { return (size_t)p; }
static inline void* __cvta_global_to_generic(size_t a) { return (void*)a; }
