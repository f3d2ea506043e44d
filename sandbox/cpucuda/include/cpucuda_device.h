// cpucuda_device.h: barriers, warp operations, atomics and memory helpers as
// kernels call them. Each synchronising call records its call site through
// __builtin_FILE()/__builtin_LINE() default arguments (they take the caller's
// location), so divergence and deadlock reports name the source line.
#pragma once

#define CPUCUDA_SITE const char *cpucuda_file = __builtin_FILE(), int cpucuda_line = __builtin_LINE()

// ---------------------------------------------------------------- barriers

static inline void __syncthreads(CPUCUDA_SITE) {
    cpucuda::block_barrier(cpucuda::B_SYNC, 0, "__syncthreads", cpucuda_file, cpucuda_line);
}
static inline int __syncthreads_count(int pred, CPUCUDA_SITE) {
    return cpucuda::block_barrier(cpucuda::B_COUNT, pred, "__syncthreads_count", cpucuda_file, cpucuda_line);
}
static inline int __syncthreads_and(int pred, CPUCUDA_SITE) {
    return cpucuda::block_barrier(cpucuda::B_AND, pred, "__syncthreads_and", cpucuda_file, cpucuda_line);
}
static inline int __syncthreads_or(int pred, CPUCUDA_SITE) {
    return cpucuda::block_barrier(cpucuda::B_OR, pred, "__syncthreads_or", cpucuda_file, cpucuda_line);
}
// One block runs at a time and fibers are cooperative: fences order nothing
// that is not already ordered.
static inline void __threadfence() {}
static inline void __threadfence_block() {}
static inline void __threadfence_system() {}

// ---------------------------------------------------------------- warps

namespace cpucuda {
template <class T> struct is_shfl_type : std::is_arithmetic<T> {};
template <> struct is_shfl_type<__half> : std::true_type {};
template <> struct is_shfl_type<__half2> : std::true_type {};
template <> struct is_shfl_type<__nv_bfloat16> : std::true_type {};
template <> struct is_shfl_type<__nv_bfloat162> : std::true_type {};

template <class T> static inline uint64_t to_bits(T v) {
    static_assert(is_shfl_type<T>::value && sizeof(T) <= 8, "CUDA shuffles only arithmetic and half types");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T> static inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

static inline void check_width(int width, const char* what, const char* file, int line) {
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fiber_fail("%s at %s:%d: width %d must be a power of two in 1..32", what, file, line, width);
}

template <class T>
static inline T shuffle(unsigned mask, T var, int src, const char* what, const char* file, int line) {
    return from_bits<T>(warp_rendezvous(W_SHFL, mask, to_bits(var), src, 0, what, file, line));
}
}  // namespace cpucuda

static inline void __syncwarp(unsigned mask = 0xffffffffu, CPUCUDA_SITE) {
    cpucuda::warp_rendezvous(cpucuda::W_SYNC, mask, 0, -1, 0, "__syncwarp", cpucuda_file, cpucuda_line);
}

template <class T>
static inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize, CPUCUDA_SITE) {
    cpucuda::check_width(width, "__shfl_sync", cpucuda_file, cpucuda_line);
    int lane = (int)cpucuda::g.cur->lane, base = lane & ~(width - 1);
    return cpucuda::shuffle(mask, var, base + (srcLane & (width - 1)), "__shfl_sync", cpucuda_file, cpucuda_line);
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize, CPUCUDA_SITE) {
    cpucuda::check_width(width, "__shfl_xor_sync", cpucuda_file, cpucuda_line);
    int lane = (int)cpucuda::g.cur->lane, base = lane & ~(width - 1), src = lane ^ laneMask;
    if (src < base || src >= base + width) src = -1;
    return cpucuda::shuffle(mask, var, src, "__shfl_xor_sync", cpucuda_file, cpucuda_line);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned int delta, int width = warpSize, CPUCUDA_SITE) {
    cpucuda::check_width(width, "__shfl_down_sync", cpucuda_file, cpucuda_line);
    int lane = (int)cpucuda::g.cur->lane, base = lane & ~(width - 1), src = lane + (int)delta;
    if (src >= base + width) src = -1;
    return cpucuda::shuffle(mask, var, src, "__shfl_down_sync", cpucuda_file, cpucuda_line);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned int delta, int width = warpSize, CPUCUDA_SITE) {
    cpucuda::check_width(width, "__shfl_up_sync", cpucuda_file, cpucuda_line);
    int lane = (int)cpucuda::g.cur->lane, base = lane & ~(width - 1), src = lane - (int)delta;
    if (src < base) src = -1;
    return cpucuda::shuffle(mask, var, src, "__shfl_up_sync", cpucuda_file, cpucuda_line);
}
static inline unsigned __ballot_sync(unsigned mask, int pred, CPUCUDA_SITE) {
    return (unsigned)cpucuda::warp_rendezvous(cpucuda::W_BALLOT, mask, 0, -1, pred, "__ballot_sync", cpucuda_file,
                                              cpucuda_line);
}
static inline int __any_sync(unsigned mask, int pred, CPUCUDA_SITE) {
    return (int)cpucuda::warp_rendezvous(cpucuda::W_ANY, mask, 0, -1, pred, "__any_sync", cpucuda_file, cpucuda_line);
}
static inline int __all_sync(unsigned mask, int pred, CPUCUDA_SITE) {
    return (int)cpucuda::warp_rendezvous(cpucuda::W_ALL, mask, 0, -1, pred, "__all_sync", cpucuda_file, cpucuda_line);
}
#define CPUCUDA_REDUCE(name, kind, T)                                                                           \
    static inline T name(unsigned mask, T v, CPUCUDA_SITE) {                                                   \
        return (T)cpucuda::warp_rendezvous(cpucuda::kind, mask, (uint64_t)(int64_t)v, -1, 0, #name, cpucuda_file, \
                                           cpucuda_line);                                                       \
    }
CPUCUDA_REDUCE(__reduce_add_sync, W_ADD, int)
CPUCUDA_REDUCE(__reduce_add_sync, W_ADD, unsigned)
CPUCUDA_REDUCE(__reduce_min_sync, W_MIN, int)
CPUCUDA_REDUCE(__reduce_min_sync, W_MIN, unsigned)
CPUCUDA_REDUCE(__reduce_max_sync, W_MAX, int)
CPUCUDA_REDUCE(__reduce_max_sync, W_MAX, unsigned)
CPUCUDA_REDUCE(__reduce_and_sync, W_AND, unsigned)
CPUCUDA_REDUCE(__reduce_or_sync, W_OR, unsigned)
CPUCUDA_REDUCE(__reduce_xor_sync, W_XOR, unsigned)
#undef CPUCUDA_REDUCE
// __match_any_sync: the lanes of `mask` holding the same value; __match_all_sync:
// `mask` if all hold the same value (and *pred = 1), else 0.
template <class T>
static inline unsigned __match_any_sync(unsigned mask, T value, CPUCUDA_SITE) {
    static_assert(std::is_integral<T>::value || std::is_floating_point<T>::value, "__match_any_sync takes a scalar");
    return (unsigned)cpucuda::warp_rendezvous(cpucuda::W_MATCH_ANY, mask, cpucuda::to_bits(value), -1, 0,
                                              "__match_any_sync", cpucuda_file, cpucuda_line);
}
template <class T>
static inline unsigned __match_all_sync(unsigned mask, T value, int* pred, CPUCUDA_SITE) {
    static_assert(std::is_integral<T>::value || std::is_floating_point<T>::value, "__match_all_sync takes a scalar");
    unsigned r = (unsigned)cpucuda::warp_rendezvous(cpucuda::W_MATCH_ALL, mask, cpucuda::to_bits(value), -1, 0,
                                                    "__match_all_sync", cpucuda_file, cpucuda_line);
    *pred = r != 0;
    return r;
}
namespace cpucuda {
// A collective of the whole warp (see Collective in cpucuda_sched.h); `what` names it in messages.
static inline void warp_collective(Collective* c, const char* what, const char* file, int line) {
    Fiber* f = g.cur;
    const unsigned existing = g.warps[f->warp].existing;
    if (existing != ~0u)
        fiber_fail("%s at %s:%d: a warp-collective operation needs all 32 lanes of the warp; warp %u of this block has "
                   "%d thread(s)", what, file, line, f->warp, __builtin_popcount(existing));
    f->coll = c;
    warp_rendezvous(W_COLLECTIVE, ~0u, 0, -1, 0, what, file, line);
}

// The lanes of the calling warp that reach this call site together
// (cooperative_groups::coalesced_threads()).
static inline unsigned coalesced_lanes(const char* file, int line) {
    return (unsigned)warp_rendezvous(W_COALESCE, 0, 0, -1, 0, "coalesced_threads", file, line);
}
}  // namespace cpucuda
// Every existing lane counts as active: fibers do not model divergence.
static inline unsigned __activemask() { return cpucuda::g.warps[cpucuda::g.cur->warp].existing; }
static inline unsigned __lanemask_lt() { return (1u << cpucuda::g.cur->lane) - 1u; }

// ---------------------------------------------------------------- atomics
// Fibers never switch inside these, so a plain read-modify-write is atomic.

#define CPUCUDA_ATOMIC_RMW(T, op) T old = *p; *p = (op); return old;
// Traffic mode: an atomic is one access of its width, reported to the recorder with the caller's
// address (so the function stays out of line) and done without instrumentation (no load + store).
#if CPUCUDA_TRAFFIC
#define CPUCUDA_ATOMIC_FN static __attribute__((noinline, no_sanitize("thread")))
#define CPUCUDA_ATOMIC_NOTE(p) cpucuda_traffic_atomic((const void*)(p), sizeof(*(p)), __builtin_return_address(0));
#elif CPUCUDA_RACE
// Racecheck: atomics are invisible to the checker (atomics never race with atomics, and a plain access
// racing an atomic one is not reported: racecheck.py says why), so they are not instrumented.
#define CPUCUDA_ATOMIC_FN static __attribute__((noinline, no_sanitize("thread")))
#define CPUCUDA_ATOMIC_NOTE(p)
#else
#define CPUCUDA_ATOMIC_FN static inline
#define CPUCUDA_ATOMIC_NOTE(p)
#endif
#define CPUCUDA_ATOMIC(name, T, op)                                                                      \
    CPUCUDA_ATOMIC_FN T name(T* p, T v) { CPUCUDA_ATOMIC_NOTE(p) CPUCUDA_ATOMIC_RMW(T, op) }            \
    static inline T name##_block(T* p, T v) { return name(p, v); }                                      \
    static inline T name##_system(T* p, T v) { return name(p, v); }
#define CPUCUDA_ATOMIC_INTS(name, op)                    \
    CPUCUDA_ATOMIC(name, int, op)                        \
    CPUCUDA_ATOMIC(name, unsigned int, op)               \
    CPUCUDA_ATOMIC(name, unsigned long long, op)
CPUCUDA_ATOMIC_INTS(atomicAdd, old + v)
CPUCUDA_ATOMIC(atomicAdd, float, old + v)
CPUCUDA_ATOMIC(atomicAdd, double, old + v)
CPUCUDA_ATOMIC(atomicAdd, __half, __hadd(old, v))
CPUCUDA_ATOMIC(atomicAdd, __half2, __hadd2(old, v))
CPUCUDA_ATOMIC(atomicSub, int, old - v)
CPUCUDA_ATOMIC(atomicSub, unsigned int, old - v)
CPUCUDA_ATOMIC_INTS(atomicExch, v)
CPUCUDA_ATOMIC(atomicExch, float, v)
CPUCUDA_ATOMIC_INTS(atomicMin, v < old ? v : old)
CPUCUDA_ATOMIC(atomicMin, long long, v < old ? v : old)
CPUCUDA_ATOMIC_INTS(atomicMax, v > old ? v : old)
CPUCUDA_ATOMIC(atomicMax, long long, v > old ? v : old)
CPUCUDA_ATOMIC_INTS(atomicAnd, old & v)
CPUCUDA_ATOMIC_INTS(atomicOr, old | v)
CPUCUDA_ATOMIC_INTS(atomicXor, old ^ v)
CPUCUDA_ATOMIC(atomicInc, unsigned int, old >= v ? 0u : old + 1u)
CPUCUDA_ATOMIC(atomicDec, unsigned int, (old == 0u || old > v) ? v : old - 1u)
#undef CPUCUDA_ATOMIC_INTS
#undef CPUCUDA_ATOMIC
// CUDA has no atomicMax/atomicMin for float: kernels build them from
// atomicCAS on the bits, as they must on the GPU.
#define CPUCUDA_CAS_BODY auto old = *p; if (old == compare) *p = v; return old;
#define CPUCUDA_CAS(T)                                                         \
    CPUCUDA_ATOMIC_FN T atomicCAS(T* p, T compare, T v) { CPUCUDA_ATOMIC_NOTE(p) CPUCUDA_CAS_BODY } \
    static inline T atomicCAS_block(T* p, T compare, T v) { return atomicCAS(p, compare, v); }
CPUCUDA_CAS(int)
CPUCUDA_CAS(unsigned int)
CPUCUDA_CAS(unsigned long long)
CPUCUDA_CAS(unsigned short)
#undef CPUCUDA_CAS
#undef CPUCUDA_CAS_BODY
#undef CPUCUDA_ATOMIC_RMW
#undef CPUCUDA_ATOMIC_FN
#undef CPUCUDA_ATOMIC_NOTE

// ---------------------------------------------------------------- memory

template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldca(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldlu(const T* p) { return *p; }
template <class T> static inline T __ldcv(const T* p) { return *p; }
template <class T> static inline void __stwb(T* p, T v) { *p = v; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stwt(T* p, T v) { *p = v; }
#if defined(__x86_64__)
static inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }
#endif
static inline void __nanosleep(unsigned int) {}

// ---------------------------------------------------------------- errors

namespace cpucuda {
[[noreturn]] static inline void device_assert_fail(const char* expr, const char* file, int line) {
    fiber_fail("assertion `%s` failed at %s:%d in %s", expr, file, line, where(g.cur));
}
}  // namespace cpucuda
static inline void __trap(CPUCUDA_SITE) {
    cpucuda::fiber_fail("__trap() at %s:%d in %s", cpucuda_file, cpucuda_line, cpucuda::where(cpucuda::g.cur));
}
static inline void __brkpt() {}
