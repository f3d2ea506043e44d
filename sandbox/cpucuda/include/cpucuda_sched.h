// cpucuda_sched.h: blocks run one after another; inside a block every CUDA
// thread is a fiber on its own stack, and fibers switch only at barriers and
// warp operations (cooperative: between two barriers a thread runs alone,
// which is why plain read-modify-write serves as an atomic).
//
// The scheduler makes passes over the block's fibers (forward or reverse
// order) resuming those that are READY; after a pass it releases a
// __syncthreads once every thread has arrived and a warp rendezvous once
// every lane of its mask has. A pass where nothing ran and nothing was
// released is a deadlock. Errors end the launch: the runtime writes a message
// and returns to Python; the abandoned fibers are reset by the next launch.
//
// Racecheck (-DCPUCUDA_RACE, the kernel instrumented for race_checker.cpp):
// the scheduler tells the checker which fiber runs and what orders memory in
// CUDA: a released __syncthreads, a released warp operation with the lanes it
// orders (in strict mode only __syncwarp), a released tile barrier, the start
// of a block (cpucuda_race.h). The runtime is not instrumented
// (CPUCUDA_RUNTIME), so its own bookkeeping and the lazy poisoning of shared
// memory are invisible to the checker.
#pragma once

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#include <stdarg.h>

#include "cpucuda_fiber.h"
#include "cpucuda_hooks.h"
#if CPUCUDA_TRAFFIC
#include "cpucuda_traffic.h"
#endif
#if CPUCUDA_RACE
#include "cpucuda_race.h"
#endif

namespace cpucuda {

template <class T> using type_t = T;  // lets rewritten __shared__ arrays name their type

enum FiberState : int { READY = 0, AT_BARRIER = 1, AT_WARP = 2, DONE = 3, AT_GROUP = 4 };

struct Fiber {
    Context ctx;
    char* stack_lo;      // usable stack [stack_lo, stack_lo + stack_size)
    size_t stack_size;
    uint3 tid;
    unsigned linear, warp, lane;
    int state;
    const char* what;    // the operation it waits in, for messages
    const char* file;
    int line;
    uint64_t wval;       // value a lane deposits at a warp rendezvous
    int wsrc;            // lane it reads from; -1: its own value
    int pred;            // predicate for ballot / vote / __syncthreads_count
    uint64_t wres;       // result handed back on release
    unsigned wmask;      // lanes of the rendezvous it waits in (0 for coalesced_threads: found on release)
    int wkind;
    void* fake_stack;    // ASan's fake-stack handle while switched out
    unsigned group;      // AT_GROUP: the tile it waits for (see GroupWait)
    const struct Collective* coll;  // W_COLLECTIVE: the arguments every lane must agree on, and the work
};

// A warp-collective operation of all 32 lanes (nvcuda::wmma): the arguments each lane passes must be
// the same in every lane (compared at arrival), and `run`, if any, is called once on release with
// each lane's `data`, before any lane resumes (so it may read every lane's fragments and write
// them, as a tensor core instruction does in one step).
struct Collective {
    int nargs;
    uint64_t args[4];
    const char* names[4];
    void* data;
    void (*run)(void* const* lane_data);
};

// A barrier of a tile wider than a warp (cooperative_groups::thread_block_tile<N>, N = 64 ... 1024):
// the N consecutive threads from N * k. One record per tile size and tile: [log2(N) - 6][k].
struct GroupWait {
    unsigned arrived;    // threads of the tile waiting
    const char* what;
    const char* file;    // where the first one waits (every other must wait there too)
    int line;
};
static const unsigned kGroupClasses = 5;  // tiles of 64, 128, 256, 512 and 1024 threads

// Lanes of a warp may wait in several rendezvous at once when their masks
// are disjoint (tiles of a cooperative-groups partition); each lane records
// its own mask, kind and call site.
struct Warp {
    unsigned existing;   // lanes that exist (the last warp may be partial)
    unsigned arrived;    // lanes waiting in a warp operation
};

enum WarpKind : int { W_SYNC, W_SHFL, W_BALLOT, W_ANY, W_ALL, W_ADD, W_MIN, W_MAX, W_MATCH_ANY, W_MATCH_ALL,
                      W_COALESCE, W_AND, W_OR, W_XOR, W_COLLECTIVE };
enum BarrierKind : int { B_SYNC, B_COUNT, B_AND, B_OR };
enum LaunchFlags : int { F_STRICT = 1 };  // racecheck: only __syncwarp orders memory between lanes
enum PoisonKind : int { POISON_NAN = 0, POISON_FINITE = 1 };

struct LaunchConfig {  // mirrored by sandbox/cpucuda/_abi.py
    uint32_t grid[3];
    uint32_t block[3];
    uint64_t shared_mem;
    uint64_t stack_size;
    int32_t reverse;
    int32_t flags;
    int32_t poison;      // PoisonKind
    int32_t reserved;
    uint64_t poison_seed;
};

struct Runtime {
    // Per-launch.
    const char* kernel;
    char* err;
    size_t errlen;
    int rc;
    void (*body)(void*);
    void* body_ctx;
    dim3 gridDim, blockDim;
    uint3 blockIdx, threadIdx;  // threadIdx: copy of the running fiber's
    unsigned nthreads, nwarps;
    bool reverse;
    bool strict;
    int poison;
    uint64_t poison_seed;
    unsigned char* dyn_smem;
    size_t dyn_size;
    // Per-block.
    unsigned long block_gen;    // bumped per block: static __shared__ re-poisoning
    unsigned done;
    unsigned bar_arrived;
    int bar_kind, bar_count;
    const char* bar_what;
    const char* bar_file;
    int bar_line;
    Warp warps[32];
    GroupWait groups[kGroupClasses][16];
    unsigned groups_waiting;    // threads waiting at tile barriers
    // Fibers and their stacks (kept across launches).
    Fiber* fibers;
    unsigned fiber_cap;
    char** stacks;              // each: guard page + stack_size bytes
    unsigned nstacks;
    size_t stack_size;
    Fiber* cur;
    Context main_ctx;
    void* main_fake_stack;
    const void* main_stack_bottom;
    size_t main_stack_size;
    // Crash capture (normal mode only).
    sigjmp_buf crash_jmp;
    pthread_t launch_thread;
    volatile sig_atomic_t crash_sig;
    void* volatile crash_addr;
    Fiber* volatile crash_fiber;
};
static Runtime g;

static const size_t kPage = 4096;
// Normal mode puts a canary after dynamic shared memory, as large as the
// buffer itself (at least 256 bytes): overflows up to that size are reported
// without corrupting the heap. ASan mode allocates the exact size instead.
static inline size_t canary_size(size_t n) { return n > 256 ? n : 256; }

// ---------------------------------------------------------------- errors

CPUCUDA_RUNTIME static void format_error(const char* fmt, va_list ap) {
    if (g.rc) return;  // keep the first error
    g.rc = 1;
    if (g.err && g.errlen) vsnprintf(g.err, g.errlen, fmt, ap);
}

CPUCUDA_RUNTIME static void set_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    format_error(fmt, ap);
    va_end(ap);
}

static inline void switch_to_main(Fiber* f, bool finished);

// Report an error from inside a fiber and abandon the launch.
[[noreturn]] CPUCUDA_RUNTIME static void fiber_fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    format_error(fmt, ap);
    va_end(ap);
    switch_to_main(g.cur, true);
    __builtin_unreachable();
}

// "thread (x,y,z) of block (x,y,z)" into a small static buffer ring.
CPUCUDA_RUNTIME static const char* where(const Fiber* f) {
    static char bufs[4][96];
    static int next;
    char* b = bufs[next++ & 3];
    snprintf(b, 96, "thread (%u,%u,%u) of block (%u,%u,%u)", f->tid.x, f->tid.y, f->tid.z,
             g.blockIdx.x, g.blockIdx.y, g.blockIdx.z);
    return b;
}

// ---------------------------------------------------------------- switching

CPUCUDA_RUNTIME static inline void switch_to_main(Fiber* f, bool finished) {
#if CPUCUDA_ASAN
    __sanitizer_start_switch_fiber(finished ? nullptr : &f->fake_stack, g.main_stack_bottom, g.main_stack_size);
#else
    (void)finished;
#endif
    context_swap(&f->ctx, &g.main_ctx);
    __asm__ __volatile__("" ::: "memory");  // other fibers ran: reload everything
#if CPUCUDA_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, nullptr, nullptr);
#endif
}

CPUCUDA_RUNTIME static inline void resume(Fiber* f) {
    g.cur = f;
    g.threadIdx = f->tid;
#if CPUCUDA_ASAN
    __sanitizer_start_switch_fiber(&g.main_fake_stack, f->stack_lo, f->stack_size);
#endif
#if CPUCUDA_HOOKS
    cpucuda_hook_switch((int)f->linear);
#endif
    context_swap(&g.main_ctx, &f->ctx);
    __asm__ __volatile__("" ::: "memory");
#if CPUCUDA_HOOKS
    cpucuda_hook_switch(-1);
#endif
#if CPUCUDA_ASAN
    __sanitizer_finish_switch_fiber(g.main_fake_stack, nullptr, nullptr);
#endif
    g.cur = nullptr;
}

CPUCUDA_RUNTIME static void fiber_main(void*) {
#if CPUCUDA_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g.main_stack_bottom, &g.main_stack_size);
#endif
    g.body(g.body_ctx);
    Fiber* f = g.cur;
    f->state = DONE;
    g.done++;
    switch_to_main(f, true);
    __builtin_unreachable();
}

// ---------------------------------------------------------------- barriers

CPUCUDA_RUNTIME static inline bool same_site(const char* f1, int l1, const char* f2, int l2) {
    return l1 == l2 && (f1 == f2 || strcmp(f1, f2) == 0);
}

CPUCUDA_RUNTIME static int block_barrier(int kind, int pred, const char* what, const char* file, int line) {
    Fiber* f = g.cur;
    if (g.bar_arrived == 0) {
        g.bar_kind = kind;
        g.bar_count = 0;
        g.bar_what = what;
        g.bar_file = file;
        g.bar_line = line;
    } else if (!same_site(file, line, g.bar_file, g.bar_line) || kind != g.bar_kind) {
        const Fiber* other = nullptr;
        for (unsigned i = 0; i < g.nthreads && !other; ++i)
            if (g.fibers[i].state == AT_BARRIER) other = &g.fibers[i];
        fiber_fail("divergent barrier: %s reached %s at %s:%d while %s waits at %s at %s:%d "
                   "(every thread of a block must reach the same __syncthreads)",
                   where(f), what, file, line, other ? where(other) : "another thread", g.bar_what,
                   g.bar_file, g.bar_line);
    }
    g.bar_arrived++;
    g.bar_count += pred != 0;
    f->state = AT_BARRIER;
    f->what = what;
    f->file = file;
    f->line = line;
    switch_to_main(f, false);
    return (int)f->wres;
}

CPUCUDA_RUNTIME static bool release_block_barrier() {
    if (g.bar_arrived == 0 || g.bar_arrived != g.nthreads) return false;
#if CPUCUDA_TRAFFIC
    cpucuda_traffic_converge(-1);  // every warp converges at a barrier
#endif
#if CPUCUDA_RACE
    cpucuda_race_barrier();
#endif
    int result = g.bar_kind == B_COUNT ? g.bar_count
               : g.bar_kind == B_AND   ? g.bar_count == (int)g.nthreads
               : g.bar_kind == B_OR    ? g.bar_count > 0
                                       : 0;
    for (unsigned i = 0; i < g.nthreads; ++i) {
        g.fibers[i].state = READY;
        g.fibers[i].wres = (uint64_t)(int64_t)result;
    }
    g.bar_arrived = 0;
    return true;
}

// ---------------------------------------------------------------- tiles wider than a warp

// The tile of `size` threads (a power of two from 64 to 1024) that holds the calling thread: a barrier
// of its threads alone. The block's size must be a multiple of the tile's (checked by the caller).
CPUCUDA_RUNTIME static void group_barrier(unsigned size, const char* what, const char* file, int line) {
    Fiber* f = g.cur;
    const unsigned cls = (unsigned)__builtin_ctz(size) - 6u, k = f->linear / size;
    GroupWait& w = g.groups[cls][k];
    if (w.arrived == 0) {
        w.what = what;
        w.file = file;
        w.line = line;
    } else if (!same_site(file, line, w.file, w.line)) {
        const Fiber* other = nullptr;
        for (unsigned i = k * size; i < (k + 1) * size && !other; ++i)
            if (g.fibers[i].state == AT_GROUP && g.fibers[i].group == cls * 16 + k) other = &g.fibers[i];
        fiber_fail("divergent tile barrier: %s reached %s at %s:%d while %s waits at %s at %s:%d (every thread of a "
                   "thread_block_tile<%u> must reach the same sync)", where(f), what, file, line,
                   other ? where(other) : "another thread", w.what, w.file, w.line, size);
    }
    w.arrived++;
    g.groups_waiting++;
    f->state = AT_GROUP;
    f->group = cls * 16 + k;
    f->what = what;
    f->file = file;
    f->line = line;
    switch_to_main(f, false);
}

CPUCUDA_RUNTIME static bool release_groups() {
    if (g.groups_waiting == 0) return false;
    bool any = false;
    for (unsigned cls = 0; cls < kGroupClasses; ++cls)
        for (unsigned k = 0; k < 16; ++k) {
            GroupWait& w = g.groups[cls][k];
            const unsigned size = 64u << cls;
            if (w.arrived == 0 || w.arrived != size) continue;
            for (unsigned i = k * size; i < (k + 1) * size; ++i) g.fibers[i].state = READY;
#if CPUCUDA_RACE
            cpucuda_race_tile(k * size, size);
#endif
            g.groups_waiting -= size;
            w.arrived = 0;
            any = true;
        }
    return any;
}

// ---------------------------------------------------------------- warps

// A warp operation is a rendezvous of the lanes in `mask`: each deposits its
// value (and the lane it wants to read), waits, and on release every result
// is computed from the deposits at once, so no lane can see a value that a
// faster lane already replaced in the next operation. Lane groups with
// disjoint masks (say the two 16-lane tiles of a warp) rendezvous
// independently; overlapping but different masks are an error.
// coalesced_threads() (W_COALESCE) does not know its lanes in advance: it is
// released once no lane of the warp can run, with the lanes waiting at its
// call site as the group.

CPUCUDA_RUNTIME static inline bool warp_kind_syncs(int kind) {
    return kind == W_SYNC || !g.strict;  // strict racecheck: only __syncwarp orders memory
}

CPUCUDA_RUNTIME static uint64_t warp_rendezvous(int kind, unsigned mask, uint64_t val, int src, int pred,
                                                const char* what, const char* file, int line) {
    Fiber* f = g.cur;
    Warp& w = g.warps[f->warp];
    Fiber* lanes = g.fibers + f->warp * 32;
    const unsigned m = kind == W_COALESCE ? 0u : mask & w.existing;
    if (kind != W_COALESCE && !((m >> f->lane) & 1u))
        fiber_fail("%s at %s:%d: %s (lane %u) passed mask 0x%08x, which does not include its own lane",
                   what, file, line, where(f), f->lane, mask);
    for (unsigned l = 0; l < 32 && kind != W_COALESCE; ++l) {
        if (!((w.arrived >> l) & 1u)) continue;
        const Fiber& o = lanes[l];
        if (o.wkind == W_COALESCE) continue;
        const bool overlaps = (o.wmask & m) != 0;
        if (overlaps && o.wmask != m)
            fiber_fail("%s at %s:%d: lanes of warp %u disagree on the mask (0x%08x vs 0x%08x at %s:%d)",
                       what, file, line, f->warp, m, o.wmask, o.file, o.line);
        if (overlaps && (!same_site(file, line, o.file, o.line) || kind != o.wkind))
            fiber_fail("divergent warp operation: %s reached %s at %s:%d while lanes of its warp wait at %s at %s:%d",
                       where(f), what, file, line, o.what, o.file, o.line);
        if (overlaps && kind == W_COLLECTIVE) {
            const Collective *mine = f->coll, *theirs = o.coll;
            if (mine->run != theirs->run)
                fiber_fail("%s at %s:%d: lanes %u and %u of warp %u pass fragments of different shapes or types",
                           what, file, line, f->lane, l, f->warp);
            for (int a = 0; a < mine->nargs; ++a)
                if (mine->args[a] != theirs->args[a])
                    fiber_fail("%s at %s:%d: lanes of warp %u disagree on the %s (lane %u: 0x%llx, lane %u: 0x%llx); "
                               "every lane of the warp must pass the same", what, file, line, f->warp, mine->names[a],
                               f->lane, (unsigned long long)mine->args[a], l, (unsigned long long)theirs->args[a]);
        }
    }
    f->wval = val;
    f->wsrc = src;
    f->pred = pred;
    f->wmask = m;
    f->wkind = kind;
    f->state = AT_WARP;
    f->what = what;
    f->file = file;
    f->line = line;
    w.arrived |= 1u << f->lane;
    switch_to_main(f, false);
    return f->wres;
}

// Results of one complete group `m` (all its lanes have arrived).
CPUCUDA_RUNTIME static void release_group(Warp& w, Fiber* lanes, unsigned m, int kind) {
    if (kind == W_COLLECTIVE && lanes[__builtin_ctz(m)].coll->run) {
        void* data[32];
        for (unsigned l = 0; l < 32; ++l) data[l] = lanes[l].coll->data;
        lanes[__builtin_ctz(m)].coll->run(data);
    }
    uint64_t ballot = 0, acc = 0;
    bool first = true;
    for (unsigned l = 0; l < 32; ++l) {
        if (!((m >> l) & 1u)) continue;
        if (lanes[l].pred) ballot |= 1ull << l;
        int64_t v = (int64_t)lanes[l].wval;
        if (first) acc = (uint64_t)v;
        else if (kind == W_ADD) acc += (uint64_t)v;
        else if (kind == W_MIN) acc = (uint64_t)(v < (int64_t)acc ? v : (int64_t)acc);
        else if (kind == W_MAX) acc = (uint64_t)(v > (int64_t)acc ? v : (int64_t)acc);
        else if (kind == W_AND) acc &= (uint64_t)v;
        else if (kind == W_OR) acc |= (uint64_t)v;
        else if (kind == W_XOR) acc ^= (uint64_t)v;
        first = false;
    }
    bool all_equal = true;
    for (unsigned l = 0; l < 32; ++l)
        if (((m >> l) & 1u) && lanes[l].wval != lanes[__builtin_ctz(m)].wval) all_equal = false;
    for (unsigned l = 0; l < 32; ++l) {
        if (!((m >> l) & 1u)) continue;
        Fiber& f = lanes[l];
        switch (kind) {
        case W_SHFL:
            if (f.wsrc < 0) f.wres = f.wval;
            else if ((m >> f.wsrc) & 1u) f.wres = lanes[f.wsrc].wval;
            else f.wres = ~0ull;  // undefined on a GPU: read as 0xFF bytes (NaN)
            break;
        case W_BALLOT: f.wres = ballot; break;
        case W_ANY: f.wres = ballot != 0; break;
        case W_ALL: f.wres = ballot == m; break;
        case W_ADD: case W_MIN: case W_MAX: case W_AND: case W_OR: case W_XOR: f.wres = acc; break;
        case W_MATCH_ANY: {
            uint64_t same = 0;
            for (unsigned k = 0; k < 32; ++k)
                if (((m >> k) & 1u) && lanes[k].wval == f.wval) same |= 1ull << k;
            f.wres = same;
            break;
        }
        case W_MATCH_ALL: f.wres = all_equal ? m : 0; f.pred = all_equal; break;
        case W_COALESCE: f.wres = m; break;
        default: f.wres = 0;
        }
        f.state = READY;
    }
#if CPUCUDA_TRAFFIC
    if (m == w.existing) cpucuda_traffic_converge((int)((lanes - g.fibers) / 32));  // a full-warp operation
#endif
#if CPUCUDA_RACE
    if (warp_kind_syncs(kind)) cpucuda_race_warp((unsigned)((lanes - g.fibers) / 32), m);
#endif
    w.arrived &= ~m;
}

CPUCUDA_RUNTIME static bool release_warps() {
    bool any = false;
    for (unsigned wi = 0; wi < g.nwarps; ++wi) {
        Warp& w = g.warps[wi];
        Fiber* lanes = g.fibers + wi * 32;
        unsigned pending = w.arrived;
        while (pending) {
            const unsigned l = (unsigned)__builtin_ctz(pending);
            const Fiber& f = lanes[l];
            if (f.wkind == W_COALESCE) { pending &= ~(1u << l); continue; }
            const unsigned m = f.wmask;
            pending &= ~m;
            if ((w.arrived & m) == m) {
                release_group(w, lanes, m, f.wkind);
                any = true;
            }
        }
    }
    return any;
}

// coalesced_threads(): once no lane of a warp can run, the lanes waiting at
// one coalesced_threads() call site form the group.
CPUCUDA_RUNTIME static bool release_coalesced() {
    bool any = false;
    for (unsigned wi = 0; wi < g.nwarps; ++wi) {
        Warp& w = g.warps[wi];
        Fiber* lanes = g.fibers + wi * 32;
        bool runnable = false;
        for (unsigned l = 0; l < 32; ++l)
            if (((w.existing >> l) & 1u) && lanes[l].state == READY) runnable = true;
        if (runnable) continue;
        const Fiber* lead = nullptr;
        unsigned m = 0;
        for (unsigned l = 0; l < 32; ++l) {
            if (!((w.arrived >> l) & 1u) || lanes[l].wkind != W_COALESCE) continue;
            if (!lead) lead = &lanes[l];
            if (same_site(lanes[l].file, lanes[l].line, lead->file, lead->line)) m |= 1u << l;
        }
        if (m) {
            release_group(w, lanes, m, W_COALESCE);
            any = true;
        }
    }
    return any;
}

// ---------------------------------------------------------------- deadlock

CPUCUDA_RUNTIME static void describe_deadlock() {
    unsigned at_bar = 0, done = 0;
    const Fiber* warp_waiter = nullptr;
    const Fiber* group_waiter = nullptr;
    for (unsigned i = 0; i < g.nthreads; ++i) {
        const Fiber& f = g.fibers[i];
        if (f.state == AT_BARRIER) at_bar++;
        else if (f.state == AT_WARP) { if (!warp_waiter) warp_waiter = &f; }
        else if (f.state == AT_GROUP) { if (!group_waiter) group_waiter = &f; }
        else if (f.state == DONE) done++;
    }
    if (group_waiter && !warp_waiter) {
        const unsigned cls = group_waiter->group / 16, k = group_waiter->group % 16, size = 64u << cls;
        unsigned gone = 0;
        const Fiber* other = nullptr;
        for (unsigned i = k * size; i < (k + 1) * size; ++i) {
            const Fiber& o = g.fibers[i];
            if (o.state == DONE) gone++;
            else if (o.state != AT_GROUP && !other) other = &o;
        }
        if (other)
            set_error("deadlock in block (%u,%u,%u): %u thread(s) of a thread_block_tile<%u> wait at %s at %s:%d; "
                      "%s waits at %s at %s:%d instead", g.blockIdx.x, g.blockIdx.y, g.blockIdx.z,
                      g.groups[cls][k].arrived, size, group_waiter->what, group_waiter->file, group_waiter->line,
                      where(other), other->what, other->file, other->line);
        else
            set_error("deadlock in block (%u,%u,%u): %u thread(s) of a thread_block_tile<%u> wait at %s at %s:%d for "
                      "%u that have exited", g.blockIdx.x, g.blockIdx.y, g.blockIdx.z, g.groups[cls][k].arrived,
                      size, group_waiter->what, group_waiter->file, group_waiter->line, gone);
        return;
    }
    if (warp_waiter) {
        const Warp& w = g.warps[warp_waiter->warp];
        const Fiber* lanes = g.fibers + warp_waiter->warp * 32;
        const unsigned group = warp_waiter->wmask;
        unsigned here = 0;
        for (unsigned l = 0; l < 32; ++l)
            if (((w.arrived >> l) & 1u) && lanes[l].wmask == group && lanes[l].wkind == warp_waiter->wkind) here |= 1u << l;
        unsigned missing = group & ~here, gone = 0;
        const Fiber* other = nullptr;
        for (unsigned l = 0; l < 32; ++l)
            if ((missing >> l) & 1u) {
                const Fiber& o = lanes[l];
                if (o.state == DONE) gone++;
                else if (!other) other = &o;
            }
        if (other)
            set_error("deadlock in block (%u,%u,%u): lanes 0x%08x of warp %u wait at %s at %s:%d for lanes 0x%08x; "
                      "%s waits at %s at %s:%d instead",
                      g.blockIdx.x, g.blockIdx.y, g.blockIdx.z, here, warp_waiter->warp, warp_waiter->what,
                      warp_waiter->file, warp_waiter->line, missing, where(other), other->what, other->file,
                      other->line);
        else
            set_error("deadlock in block (%u,%u,%u): lanes 0x%08x of warp %u wait at %s at %s:%d for lanes "
                      "0x%08x, which have exited (%u)",
                      g.blockIdx.x, g.blockIdx.y, g.blockIdx.z, here, warp_waiter->warp, warp_waiter->what,
                      warp_waiter->file, warp_waiter->line, missing, gone);
        return;
    }
    set_error("deadlock in block (%u,%u,%u): %u thread(s) wait at %s at %s:%d but %u thread(s) have already "
              "exited and will never arrive (every thread must reach each __syncthreads)",
              g.blockIdx.x, g.blockIdx.y, g.blockIdx.z, at_bar, g.bar_what, g.bar_file, g.bar_line, done);
}

// ---------------------------------------------------------------- memory

// Fiber stacks: mmap'd with a PROT_NONE guard page below, so an overflow
// faults (and is reported) instead of overwriting the neighbour's stack.
CPUCUDA_RUNTIME static bool ensure_fibers(unsigned n, size_t stack_size) {
    if (g.stack_size != stack_size) {
        for (unsigned i = 0; i < g.nstacks; ++i) munmap(g.stacks[i], g.stack_size + kPage);
        g.nstacks = 0;
        g.stack_size = stack_size;
    }
    if (n > g.fiber_cap) {
        Fiber* nf = (Fiber*)realloc(g.fibers, n * sizeof(Fiber));
        char** ns = (char**)realloc(g.stacks, n * sizeof(char*));
        if (!nf || !ns) return false;
        g.fibers = nf;
        g.stacks = ns;
        g.fiber_cap = n;
    }
    while (g.nstacks < n) {
        void* p = mmap(nullptr, stack_size + kPage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (p == MAP_FAILED) return false;
        mprotect(p, kPage, PROT_NONE);
        g.stacks[g.nstacks++] = (char*)p;
    }
    return true;
}

// Unmap the fiber stacks. Each shared object has its own pool, and every
// stack with its guard page costs the process two memory mappings (the
// kernel caps them near 65k), so Python releases the pool of the previous
// library whenever a launch goes to a different one.
CPUCUDA_RUNTIME static void release_fibers() {
    for (unsigned i = 0; i < g.nstacks; ++i) munmap(g.stacks[i], g.stack_size + kPage);
    g.nstacks = 0;
}

// 256-byte aligned, as a GPU's shared memory window: code may rely on 256-bit alignment (wmma).
CPUCUDA_RUNTIME static unsigned char* alloc_dynamic_shared(size_t n) {
    void* p = nullptr;
#if CPUCUDA_ASAN
    if (posix_memalign(&p, 256, n ? n : 1)) return nullptr;  // exact size: ASan bounds it
#else
    if (posix_memalign(&p, 256, n + canary_size(n))) return nullptr;
#endif
    return (unsigned char*)p;
}

// The argument arrays of the launch (set from Python before it): GPU allocations start 256-byte
// aligned, NumPy's only 16-byte, so alignment rules are checked on the offset into an argument.
struct Buffer { uintptr_t base; size_t n; };
static Buffer* g_buffers;
static unsigned g_nbuffers;

CPUCUDA_RUNTIME static const Buffer* buffer_of(const void* p) {
    const uintptr_t a = (uintptr_t)p;
    for (unsigned i = 0; i < g_nbuffers; ++i)
        if (a >= g_buffers[i].base && a < g_buffers[i].base + (g_buffers[i].n ? g_buffers[i].n : 1)) return &g_buffers[i];
    return nullptr;
}

// Whether p would be `bytes`-aligned on a GPU: its offset into an argument array, else its address.
CPUCUDA_RUNTIME static bool gpu_aligned(const void* p, unsigned bytes) {
    const Buffer* b = buffer_of(p);
    return (((uintptr_t)p - (b ? b->base : 0)) % bytes) == 0;
}

// A write past the dynamic shared memory shows as a changed canary.
CPUCUDA_RUNTIME static bool canary_intact() {
#if CPUCUDA_ASAN
    return true;
#else
    for (size_t i = 0; i < canary_size(g.dyn_size); ++i)
        if (g.dyn_smem[g.dyn_size + i] != 0xA5) return false;
    return true;
#endif
}

// File-scope __shared__ variables register themselves here (static
// initialisers); function-scope ones re-poison lazily (see shared_enter).
struct SharedRegion { void* p; size_t n; void** dyn; };
static SharedRegion* g_regions;
static unsigned g_nregions;
static unsigned g_region_cap;

CPUCUDA_RUNTIME static int register_region(void* p, size_t n, void** dyn) {
    if (g_nregions == g_region_cap) {
        g_region_cap = g_region_cap ? 2 * g_region_cap : 16;
        g_regions = (SharedRegion*)realloc(g_regions, g_region_cap * sizeof(SharedRegion));
    }
    g_regions[g_nregions++] = SharedRegion{p, n, dyn};
    return 0;
}

// Poisons. "nan": 0xFF bytes (NaN for float, half and double, -1 for
// integers). "finite": large finite values of alternating sign, a new random
// pattern per launch (seeded): every 4-byte word holds two halves of
// magnitude 32768..65504 with opposite signs, which read as a float of
// magnitude 1e34..1e36 and an int of magnitude 3e7..2e9; consecutive floats
// alternate in sign (and each word holds one half of each sign). It catches what NaN hides: fmaxf
// and fminf drop a NaN operand, comparisons with NaN are false, and
// `x == x` style filters skip it; an unwritten slot read through
// fmaxf(a, slot) changes the result under one of the two signs.
CPUCUDA_RUNTIME static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

CPUCUDA_RUNTIME static inline uint32_t finite_poison_word(size_t w) {
    const uint64_t r = splitmix64(g.poison_seed + w);
    const uint32_t s = (uint32_t)((w ^ g.poison_seed) & 1u);
    const uint32_t lo = (s << 15) | 0x7800u | (uint32_t)(r & 0x3FFu);
    const uint32_t hi = ((s ^ 1u) << 15) | 0x7800u | (uint32_t)((r >> 10) & 0x3FFu);
    return (hi << 16) | lo;
}

// A plain loop, not memset, in the instrumented modes: their recorders see the
// kernel's memset calls (--wrap), and racecheck would take the lazy poisoning
// for the poisoning thread's write (a false race), traffic for kernel traffic;
// the empty asm keeps g++ from turning the loop back into memset.
CPUCUDA_RUNTIME static void poison_fill(void* p, size_t n) {
    unsigned char* b = (unsigned char*)p;
    if (g.poison == POISON_NAN) {
#if CPUCUDA_TRAFFIC || CPUCUDA_RACE
        for (size_t i = 0; i < n; ++i) {
            b[i] = 0xFF;
            __asm__ __volatile__("" : : "r"(b + i) : "memory");
        }
#else
        memset(p, 0xFF, n);
#endif
        return;
    }
    for (size_t w = 0; 4 * w < n; ++w) {
        const uint32_t word = finite_poison_word(w);
        const size_t k = n - 4 * w < 4 ? n - 4 * w : 4;
        for (size_t i = 0; i < k; ++i) b[4 * w + i] = (unsigned char)(word >> (8 * i));
        __asm__ __volatile__("" : : "r"(b + 4 * w) : "memory");
    }
}

}  // namespace cpucuda
#include "cpucuda_shared_window.h"
namespace cpucuda {

// Static __shared__ storage is poisoned by the first thread of each block
// that reaches its declaration (and given its slot of the shared window).
CPUCUDA_RUNTIME static inline void shared_enter(void* p, size_t n, unsigned long* gen) {
    if (*gen != g.block_gen) {
        *gen = g.block_gen;
        window_note(p, n);
#if CPUCUDA_HOOKS
        cpucuda_hook_shared(p, n, 0);
#endif
        poison_fill(p, n);
    }
}

// __constant__ variables register themselves (a static initialiser appended
// by the source rewrite), so Python can find and fill them: get_global().
struct ConstantSymbol { const char* name; void* p; size_t n; };
static ConstantSymbol* g_constants;
static unsigned g_nconstants;

CPUCUDA_RUNTIME static int register_constant(const char* name, void* p, size_t n) {
    g_constants = (ConstantSymbol*)realloc(g_constants, (g_nconstants + 1) * sizeof(ConstantSymbol));
    g_constants[g_nconstants++] = ConstantSymbol{name, p, n};
    return 0;
}

static inline void* dynamic_shared() { return g.dyn_smem; }

// ---------------------------------------------------------------- crashes

static char* g_altstack;
static const size_t kAltStack = 1 << 16;
static const int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
static struct sigaction g_old_actions[4];

CPUCUDA_RUNTIME static void on_crash(int sig, siginfo_t* info, void*) {
    if (!pthread_equal(pthread_self(), g.launch_thread)) {
        // Not our launch: give the signal back to whoever handled it before.
        for (int i = 0; i < 4; ++i)
            if (kCrashSignals[i] == sig) sigaction(sig, &g_old_actions[i], nullptr);
        return;  // the faulting instruction re-executes under the old handler
    }
    g.crash_sig = sig;
    g.crash_addr = info->si_addr;
    g.crash_fiber = g.cur;
    siglongjmp(g.crash_jmp, 1);
}

CPUCUDA_RUNTIME static void install_crash_handlers(stack_t* old_stack) {
    if (!g_altstack) g_altstack = (char*)malloc(kAltStack);
    stack_t ss;
    ss.ss_sp = g_altstack;
    ss.ss_size = kAltStack;
    ss.ss_flags = 0;
    sigaltstack(&ss, old_stack);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 4; ++i) sigaction(kCrashSignals[i], &sa, &g_old_actions[i]);
}

CPUCUDA_RUNTIME static void remove_crash_handlers(const stack_t* old_stack) {
    for (int i = 0; i < 4; ++i) sigaction(kCrashSignals[i], &g_old_actions[i], nullptr);
    sigaltstack(old_stack, nullptr);
}

CPUCUDA_RUNTIME static void describe_crash() {
    const Fiber* f = g.crash_fiber;
    const char* who = f ? where(f) : "the scheduler";
    uintptr_t a = (uintptr_t)g.crash_addr;
    if (f && a >= (uintptr_t)(f->stack_lo - kPage) && a < (uintptr_t)f->stack_lo) {
        set_error("stack overflow in %s (fiber stacks are %zu KiB; raise SANDBOX_CPUCUDA_STACK_KB)", who,
                  g.stack_size >> 10);
    } else if (g.crash_sig == SIGFPE) {
        set_error("arithmetic exception (SIGFPE: integer division by zero?) in %s", who);
    } else if (g.crash_sig == SIGILL) {
        set_error("illegal instruction (SIGILL: __trap() or a compiler trap) in %s", who);
    } else {
        set_error("%s: invalid memory access at address %p in %s; for the file and line run "
                  "`python -m sandbox check NAME --asan` (or asan=True / SANDBOX_CPUCUDA_ASAN=1)",
                  g.crash_sig == SIGBUS ? "SIGBUS" : "SIGSEGV", g.crash_addr, who);
    }
    g.rc = (g.crash_sig == SIGSEGV || g.crash_sig == SIGBUS) ? 2 : 1;
}

// ---------------------------------------------------------------- grid

CPUCUDA_RUNTIME static void init_block(unsigned bx, unsigned by, unsigned bz) {
    g.blockIdx = uint3{bx, by, bz};
    g.block_gen++;
    g.done = 0;
    g.bar_arrived = 0;
    const unsigned n = g.nthreads;
    for (unsigned i = 0; i < n; ++i) {
        Fiber& f = g.fibers[i];
        f.stack_lo = g.stacks[i] + kPage;
        f.stack_size = g.stack_size;
#if CPUCUDA_ASAN
        // An abandoned or finished fiber leaves poisoned frames behind.
        __asan_unpoison_memory_region(f.stack_lo, f.stack_size);
#endif
        context_init(&f.ctx, f.stack_lo, f.stack_size, fiber_main, nullptr);
        f.tid = uint3{i % g.blockDim.x, (i / g.blockDim.x) % g.blockDim.y, i / (g.blockDim.x * g.blockDim.y)};
        f.linear = i;
        f.warp = i / 32;
        f.lane = i % 32;
        f.state = READY;
        f.what = "";
        f.file = "";
        f.line = 0;
        f.wmask = 0;
        f.wkind = 0;
        f.fake_stack = nullptr;
    }
    for (unsigned w = 0; w < g.nwarps; ++w) {
        unsigned lanes = n - w * 32 >= 32 ? 32 : n - w * 32;
        g.warps[w] = Warp{lanes == 32 ? ~0u : (1u << lanes) - 1u, 0};
    }
    memset(g.groups, 0, sizeof g.groups);
    g.groups_waiting = 0;
    for (unsigned r = 0; r < g_nregions; ++r)
        if (g_regions[r].dyn) *g_regions[r].dyn = g.dyn_smem;
        else poison_fill(g_regions[r].p, g_regions[r].n);
    poison_fill(g.dyn_smem, g.dyn_size);
#if CPUCUDA_HOOKS
    cpucuda_hook_block_begin((int64_t)bx + (int64_t)g.gridDim.x * (by + (int64_t)g.gridDim.y * bz), n);
    for (unsigned r = 0; r < g_nregions; ++r)
        if (!g_regions[r].dyn) cpucuda_hook_shared(g_regions[r].p, g_regions[r].n, 0);
    cpucuda_hook_shared(g.dyn_smem, g.dyn_size, 1);
#endif
}

CPUCUDA_RUNTIME static int run_fibers() {
    const unsigned n = g.nthreads;
    for (;;) {
        bool ran = false;
        for (unsigned k = 0; k < n; ++k) {
            Fiber* f = &g.fibers[g.reverse ? n - 1 - k : k];
            if (f->state != READY) continue;
            resume(f);
            ran = true;
            if (g.rc) return g.rc;
        }
        if (g.done == n) break;
        bool released = release_warps();
        released |= release_block_barrier();
        released |= release_groups();
        if (!released) released = release_coalesced();
        if (!ran && !released) {
            describe_deadlock();
            return g.rc;
        }
    }
    return 0;
}

CPUCUDA_RUNTIME static int run_block() {
    const int rc = run_fibers();
    if (rc) return rc;
#if CPUCUDA_TRAFFIC
    cpucuda_traffic_block_end();
#endif
    if (!canary_intact()) {
        set_error("write past the end of dynamic shared memory (%zu bytes requested at launch) in block (%u,%u,%u)",
                  g.dyn_size, g.blockIdx.x, g.blockIdx.y, g.blockIdx.z);
        return g.rc;
    }
    return 0;
}

#if CPUCUDA_ASAN
// Before ASan aborts the child, say which CUDA thread was running.
CPUCUDA_RUNTIME static void on_asan_death() {
    if (g.cur) fprintf(stderr, "cpucuda: the faulting CUDA thread is %s\n", where(g.cur));
}
#endif

CPUCUDA_RUNTIME static int run_grid(const LaunchConfig* cfg, void (*body)(void*), void* ctx, char* err,
                                    size_t errlen, const char* kernel) {
#if CPUCUDA_ASAN
    __sanitizer_set_death_callback(on_asan_death);
#endif
    g.kernel = kernel;
    g.err = err;
    g.errlen = errlen;
    if (err && errlen) err[0] = 0;
    g.rc = 0;
    g.body = body;
    g.body_ctx = ctx;
    g.gridDim = dim3(cfg->grid[0], cfg->grid[1], cfg->grid[2]);
    g.blockDim = dim3(cfg->block[0], cfg->block[1], cfg->block[2]);
    g.nthreads = cfg->block[0] * cfg->block[1] * cfg->block[2];
    g.nwarps = (g.nthreads + 31) / 32;
    g.reverse = cfg->reverse != 0;
    g.strict = (cfg->flags & F_STRICT) != 0;
    g.poison = cfg->poison;
    g.poison_seed = cfg->poison_seed;
    if (g.nthreads == 0 || g.nthreads > 1024) {
        set_error("block of %u threads: must be 1..1024", g.nthreads);
        return g.rc;
    }
    if (!ensure_fibers(g.nthreads, cfg->stack_size)) {
        set_error("cannot allocate %u fiber stacks of %zu bytes", g.nthreads, (size_t)cfg->stack_size);
        return g.rc;
    }
    g.dyn_size = cfg->shared_mem;
    g.dyn_smem = alloc_dynamic_shared(g.dyn_size);
#if !CPUCUDA_ASAN
    memset(g.dyn_smem + g.dyn_size, 0xA5, canary_size(g.dyn_size));
#endif
    const uint64_t nblocks = (uint64_t)cfg->grid[0] * cfg->grid[1] * cfg->grid[2];

#if !CPUCUDA_ASAN  // ASan reports crashes itself
    stack_t old_stack;
    g.launch_thread = pthread_self();
    g.crash_fiber = nullptr;
    install_crash_handlers(&old_stack);
    if (sigsetjmp(g.crash_jmp, 1)) {
        remove_crash_handlers(&old_stack);
        describe_crash();
        free(g.dyn_smem);
        g.dyn_smem = nullptr;
        return g.rc;
    }
#endif
    for (uint64_t k = 0; k < nblocks && !g.rc; ++k) {
        uint64_t b = g.reverse ? nblocks - 1 - k : k;
        init_block((unsigned)(b % cfg->grid[0]), (unsigned)(b / cfg->grid[0] % cfg->grid[1]),
                   (unsigned)(b / ((uint64_t)cfg->grid[0] * cfg->grid[1])));
        run_block();
    }
#if !CPUCUDA_ASAN
    remove_crash_handlers(&old_stack);
#endif
    free(g.dyn_smem);
    g.dyn_smem = nullptr;
    fflush(stdout);  // the kernel's printf before Python prints anything else
    return g.rc;
}

}  // namespace cpucuda

// The built-in variables. threadIdx is the running fiber's (copied in at
// every switch), so reads after a barrier see the right thread.
static const uint3& threadIdx = cpucuda::g.threadIdx;
static const uint3& blockIdx = cpucuda::g.blockIdx;
static const dim3& blockDim = cpucuda::g.blockDim;
static const dim3& gridDim = cpucuda::g.gridDim;
static constexpr int warpSize = 32;
