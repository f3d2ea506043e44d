// race_checker.cpp: racecheck's checker, linked (uninstrumented) into every racecheck build.
//
// The kernel's translation unit is compiled with g++'s ThreadSanitizer instrumentation (__tsan_readN /
// __tsan_writeN before every access it cannot prove private); nothing links libtsan: this file defines
// those entry points and checks each access against CUDA's ordering rules within a block
// (sandbox/cpucuda/racecheck.py reads the reports back).
//
// * Only the launch's arrays and the object's global (__device__) variables (regions from Python) and
//   shared memory (regions from the runtime) are checked; everything else (the fibers' stacks, the
//   runtime's state) is a register on a GPU.
// * Intervals: a global counter that a block's start and every released __syncthreads increment, in
//   constant time. An access recorded in an older interval never races.
// * Within an interval, a warp operation that orders memory (every one by default, only __syncwarp in
//   strict mode) orders the lanes taking part: each thread keeps a vector clock over the 32 lanes of
//   its warp, joined over the lanes of the operation at its release. A tile barrier (tiles of 64 ...
//   1024 threads) orders its threads: each thread keeps, per tile size, its own clock at the last
//   such barrier it passed. Threads of different warps are otherwise unordered.
// * Shadow: per 4-byte word of a region, a cell: the interval's last write and up to two readers (each:
//   thread, interval, own clock, instruction, size, the bytes of the word it touched). A write is
//   compared with the last write and the readers, a read with the last write; byte masks keep
//   neighbouring halves of a word apart. A reader ordered before a new one of no more bytes gives up its
//   slot to it (whatever races with it races with the new one). A word written in parts by two threads
//   in one interval, or read in parts by more than two unordered ones, splits into one cell per byte
//   (Region::bytes) until the interval ends, so no byte's writer or readers are lost. The one
//   approximation: of three or more unordered readers of the same bytes two are kept (of different
//   warps when there are such), so a write that a partial-mask warp operation orders after the two
//   kept ones, but not after a third of their warp, is not reported. The shadow is mapped lazily and
//   reused by the next launch without clearing (intervals only grow).
// * Reads of an array passed as a pointer to const are not recorded until something writes to it (a
//   kernel cannot, through that parameter): the big read-only inputs cost no shadow.
// * Atomics are not instrumented (cpucuda_device.h): they never race with each other, and a plain
//   access racing an atomic one is not reported. libc memcpy/memmove/memset from kernel code come
//   through the linker's --wrap and count as the running thread's reads and writes.
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <algorithm>
#include <vector>

#include "recorder_regions.h"

#define EXPORT extern "C" __attribute__((visibility("default")))
#define HOOK extern "C" __attribute__((visibility("hidden")))

namespace {

const unsigned kTileClasses = 5;  // tiles of 64, 128, 256, 512, 1024 threads

struct Access {          // 16 bytes
    uint32_t interval;   // 0: none
    uint32_t clock;      // the thread's own clock component at the access
    uint32_t pc;         // offset in the shared object of the hook's return address
    uint16_t thread;     // linear thread index in the block (bits 0-9) | the bytes of the word touched << 12
    uint16_t size;       // bytes of the whole access (at most 65535)
};

// One word's (or, once split, one byte's) interval: the last write and up to two readers.
struct Cell { Access write, read[2]; };

struct Word {
    Cell cell;
    uint32_t split;      // the interval in which its bytes went to Region::bytes (several writers' parts)
};

struct Region {
    uint64_t lo, hi;     // real addresses [lo, hi)
    uint64_t base;       // lo rounded down to a word: shadow[(a - base) / 4]
    int32_t target;      // argument index, -3: a global variable; shared: -1 static, -2 dynamic
    int32_t shared;
    int32_t readonly;    // a pointer-to-const argument nothing has written yet
    Word* shadow;
    Cell* bytes;         // one cell per byte, mapped at the first split: bytes[(a - base)]
};

struct Mapping { void* p; size_t bytes; bool used; };

struct Thread {
    uint32_t clock[32];             // over the lanes of its warp; its own lane: its own clock
    uint32_t tile[kTileClasses];    // its own clock after the last tile barrier of at least that size
};

struct Report {          // read by Python: keep in step with racecheck.py's _REPORT
    uint64_t address;    // of the current access (the one that found the race)
    uint64_t region_lo;
    int32_t target, shared;
    int32_t now_thread, before_thread;
    int32_t now_write, before_write;
    uint64_t now_pc, before_pc;
    int32_t now_size, before_size;
    int64_t block;       // linear block index
    int64_t count;       // distinct (instruction, instruction) pairs reported in this launch
};

// A write-after-write found at an access whose value is not yet stored: decided at the next hook, once the
// store is done. Same bytes as the earlier writer's: a same-value race (benign on a GPU, where one of the
// writes lands last and both hold the same bits), reported apart from the races that fail a launch.
struct Pending {
    bool on;
    uint64_t address, pc;
    unsigned size, thread;
    Access before;
    uint8_t old_bytes[16];
    Region region;  // a copy: the region table may grow before the decision
};

struct State {
    bool active;
    bool busy;              // inside the checker's own bookkeeping
    Pending pending;
    bool found_same;
    Report same;            // the first same-value write-after-write (count: how many distinct pairs)
    uint64_t so_base;
    uint32_t interval;
    RegionIndex<Region> regions;
    size_t global_regions;
    std::vector<Mapping> mappings;
    std::vector<Thread> threads;
    int cur = -1;
    int64_t block;
    bool found;
    Report report;
    std::vector<uint64_t> pairs;    // (pc, pc) of every race reported
};

State S;

uint64_t so_base() {
    Dl_info info;
    if (dladdr((void*)&so_base, &info) && info.dli_fbase) return (uint64_t)info.dli_fbase;
    return 0;
}

// A zero-filled shadow mapping of at least `bytes`, from the launch's pool (mapped once, reused: stale
// entries are of older intervals). The kernel touches its pages lazily.
void* shadow_for(size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    Mapping* best = nullptr;
    for (Mapping& m : S.mappings)
        if (!m.used && m.bytes >= bytes && (!best || m.bytes < best->bytes)) best = &m;
    if (!best) {
        // the unused mappings too small for this one go: the pool holds what the largest launches needed
        S.mappings.erase(std::remove_if(S.mappings.begin(), S.mappings.end(),
                                        [&](const Mapping& m) { return !m.used && m.bytes < bytes && !munmap(m.p, m.bytes); }),
                         S.mappings.end());
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        S.mappings.push_back(Mapping{p, bytes, false});
        best = &S.mappings.back();
    }
    best->used = true;
    return best->p;
}

void add_region(uint64_t lo, uint64_t hi, int32_t target, int32_t shared, int32_t readonly) {
    for (size_t i = S.global_regions; i < S.regions.size() && shared; ++i)
        if (S.regions[i].lo == lo) {
            if (hi > S.regions[i].hi) {  // grown (another launch's dynamic size at the same address)
                S.regions[i].hi = hi;
                S.regions[i].shadow = (Word*)shadow_for((hi - S.regions[i].base + 3) / 4 * sizeof(Word));
                S.regions[i].bytes = nullptr;
                S.regions.changed();
            }
            return;
        }
    Region r{lo, hi, lo & ~3ull, target, shared, readonly, nullptr, nullptr};
    r.shadow = (Word*)shadow_for((hi - r.base + 3) / 4 * sizeof(Word));
    if (r.shadow) {
        S.regions.push_back(r);
        S.regions.changed();
    }
}

inline Region* region_of(uint64_t a) {
    const int i = S.regions.find(a);
    return i < 0 ? nullptr : &S.regions[i];
}


inline unsigned tid_of(const Access& a) { return a.thread & 1023u; }
inline unsigned mask_of(const Access& a) { return a.thread >> 12; }
inline void set_mask(Access& a, unsigned mask) { a.thread = (uint16_t)(tid_of(a) | mask << 12); }

// Whether access `a` (of another thread, this interval) happens before what thread `t` does now.
inline bool ordered(const Access& a, unsigned t) {
    const unsigned u = tid_of(a);
    const Thread& me = S.threads[t];
    if ((u >> 5) == (t >> 5) && me.clock[u & 31] >= a.clock) return true;
    // the smallest aligned tile holding both: 2^(highest differing bit + 1) threads, at least 64
    const unsigned x = u ^ t;
    const unsigned bits = 32 - __builtin_clz(x | 1);
    const unsigned cls = bits <= 6 ? 0 : bits - 6;
    return cls < kTileClasses && S.threads[u].tile[cls] > a.clock;
}

// Whether `a` is a live access of another thread that overlaps `mask` and is not ordered before `t`.
inline bool races(const Access& a, unsigned t, unsigned mask) {
    return a.interval == S.interval && tid_of(a) != t && (mask_of(a) & mask) && !ordered(a, t);
}

void note_race(const Region& r, uint64_t address, unsigned t, bool write, uint64_t pc, unsigned size,
               const Access& before, bool before_write, bool same_value = false) {
    const uint64_t key = ((pc - S.so_base) * 0x9E3779B97F4A7C15ull ^ before.pc) + same_value;
    if (std::find(S.pairs.begin(), S.pairs.end(), key) != S.pairs.end()) return;
    S.busy = true;  // the vector's memmove is libc's, wrapped to call check(): not a kernel access
    S.pairs.push_back(key);
    S.busy = false;
    bool& found = same_value ? S.found_same : S.found;
    Report& report = same_value ? S.same : S.report;
    if (found) {
        report.count++;
        return;
    }
    found = true;
    report = Report{address, r.lo, r.target, r.shared, (int32_t)t, (int32_t)tid_of(before), write, before_write,
                    pc - S.so_base, before.pc, (int32_t)size, (int32_t)before.size, S.block, 1};
}

// A write-after-write at the access now being made: keep the bytes the earlier write left, decide later.
void defer_write_race(const Region& r, uint64_t address, unsigned t, uint64_t pc, unsigned size,
                      const Access& before) {
    if (S.pending.on) return;  // this access's first overlapping word decides for all of it
    Pending& p = S.pending;
    p.on = true;
    p.address = address;
    p.pc = pc;
    p.size = size < 16 ? size : 16;
    p.thread = t;
    p.before = before;
    p.region = r;
    // byte by byte through volatile: libc's memcpy is wrapped to feed this checker (on_libc), and a copy
    // loop g++ turned into a memcpy call would re-enter it
    const volatile uint8_t* src = (const volatile uint8_t*)address;
    for (unsigned i = 0; i < p.size; ++i) p.old_bytes[i] = src[i];
}

// The deferred write is stored by now: the same bytes as before make it a same-value race.
void settle_pending() {
    if (!S.pending.on) return;
    Pending& p = S.pending;
    p.on = false;
    const volatile uint8_t* now = (const volatile uint8_t*)p.address;
    bool same = true;
    for (unsigned i = 0; i < p.size; ++i) same &= now[i] == p.old_bytes[i];
    note_race(p.region, p.address, p.thread, true, p.pc, p.size, p.before, true, same);
}

inline bool live(const Access& a) { return a.interval == S.interval; }
inline bool within(unsigned inner, unsigned outer) { return (inner & ~outer) == 0; }

// Whether recording `now` (thread t) in `c` would lose an access a later one must be compared with: a write
// leaving another thread's bytes of this interval behind, or a read that finds both reader slots taken by
// other unordered readers of other bytes. Such a word splits into one cell per byte.
inline bool needs_split(const Cell& c, unsigned mask, unsigned t, bool write) {
    if (write) return live(c.write) && tid_of(c.write) != t && !within(mask_of(c.write), mask);
    bool same = true;
    for (const Access& s : c.read) {
        if (!live(s) || tid_of(s) == t || (within(mask_of(s), mask) && ordered(s, t))) return false;
        same &= mask_of(s) == mask;
    }
    return !same;
}

// Record a read in one of the cell's two reader slots (needs_split said nothing is lost).
inline void keep_reader(Cell& c, const Access& now, unsigned t) {
    Access* slot = c.read;
    for (int i = 0; i < 2; ++i) {
        Access& s = slot[i];
        if (!live(s)) {  // free (and so is the slot after it)
            s = now;
            if (i == 0) slot[1].interval = 0;
            return;
        }
        if (tid_of(s) == t) {  // its own later read: the higher clock, both masks
            const unsigned mask = mask_of(s) | mask_of(now);
            s = now;
            set_mask(s, mask);
            return;
        }
    }
    for (int i = 0; i < 2; ++i)
        if (within(mask_of(slot[i]), mask_of(now)) && ordered(slot[i], t)) {
            slot[i] = now;  // whatever races with it races with the new reader too
            return;
        }
    // Two unordered readers of the same bytes already: a write races with at least one of them unless it is
    // ordered after both, which a write can be only after readers of its own warp (or tile); keep two of
    // different warps when there are such.
    if ((tid_of(slot[0]) >> 5) == (tid_of(slot[1]) >> 5) && (tid_of(slot[0]) >> 5) != (t >> 5)) slot[1] = now;
}

struct Current {         // the access being checked
    Region* region;
    uint64_t address, pc;
    unsigned thread, size;
    bool write;
};

// Compare `now` (its mask: the bytes of the cell it touches) with the cell, then record it.
void visit(Cell& c, const Current& cur, Access now) {
    const unsigned t = cur.thread, mask = mask_of(now);
    if (races(c.write, t, mask)) {
        if (cur.write) defer_write_race(*cur.region, cur.address, t, cur.pc, cur.size, c.write);
        else note_race(*cur.region, cur.address, t, cur.write, cur.pc, cur.size, c.write, true);
    }
    if (!cur.write) {
        keep_reader(c, now, t);
        return;
    }
    for (const Access& rd : c.read)
        if (races(rd, t, mask)) {
            note_race(*cur.region, cur.address, t, true, cur.pc, cur.size, rd, false);
            break;
        }
    const unsigned kept = live(c.write) && tid_of(c.write) == t ? mask_of(c.write) : 0;  // its own bytes stay its
    c.write = now;
    set_mask(c.write, mask | kept);
}

// The word's cell as four cells of one byte each (mask 1), in Region::bytes.
Cell* split(Region& r, Word& w, uint64_t word) {
    if (!r.bytes) r.bytes = (Cell*)shadow_for((r.hi - r.base + 3) / 4 * 4 * sizeof(Cell));
    Cell* b = r.bytes + 4 * word;
    if (w.split == S.interval) return b;
    for (unsigned i = 0; i < 4; ++i) {
        b[i] = Cell{};
        const Access* from[3] = {&w.cell.write, &w.cell.read[0], &w.cell.read[1]};
        Access* to[3] = {&b[i].write, &b[i].read[0], &b[i].read[1]};
        for (int k = 0, next_read = 1; k < 3; ++k)
            if (live(*from[k]) && ((mask_of(*from[k]) >> i) & 1u)) {
                Access* dst = k == 0 ? to[0] : to[next_read++];
                *dst = *from[k];
                set_mask(*dst, 1);
            }
    }
    w.split = S.interval;
    return b;
}

void check(uint64_t addr, unsigned size, bool write, void* ret) {
    // static initialisers (S may not be constructed yet: it is zero until then), the scheduler, no launch
    if (!S.active || S.cur < 0 || size == 0 || S.busy) return;
    settle_pending();
    Region* r = region_of(addr);
    if (!r) return;
    if (r->readonly) {
        if (!write) return;
        r->readonly = 0;  // written after all (a cast): from now on its reads are recorded too
    }
    const Current cur{r, addr, (uint64_t)ret, (unsigned)S.cur, size, write};
    const unsigned t = cur.thread;
    const uint64_t end = std::min(addr + size, r->hi);
    Access now{S.interval, S.threads[t].clock[t & 31], (uint32_t)(cur.pc - S.so_base), (uint16_t)t,
               (uint16_t)std::min(size, 65535u)};
    for (uint64_t a = std::max(addr, r->lo); a < end;) {
        const uint64_t word = (a - r->base) >> 2, next = std::min(r->base + 4 * (word + 1), end);
        const unsigned first = (unsigned)((a - r->base) & 3), mask = ((1u << (next - a)) - 1) << first;
        Word& w = r->shadow[word];
        if (w.split != S.interval && !needs_split(w.cell, mask, t, write)) {
            set_mask(now, mask);
            visit(w.cell, cur, now);
        } else {
            Cell* bytes = split(*r, w, word);
            set_mask(now, 1);
            for (unsigned i = first; i < first + (unsigned)(next - a); ++i) visit(bytes[i], cur, now);
        }
        a = next;
    }
}

}  // namespace

// ---------------------------------------------------------------- the runtime's hooks (cpucuda_hooks.h, cpucuda_race.h)

HOOK void cpucuda_hook_block_begin(int64_t block, unsigned nthreads) {
    if (!S.active) return;
    settle_pending();
    S.block = block;
    S.interval++;
    if (S.threads.size() < nthreads) S.threads.resize(nthreads);
    for (unsigned i = 0; i < nthreads; ++i) {
        Thread& th = S.threads[i];
        memset(&th, 0, sizeof th);
        th.clock[i & 31] = 1;
    }
}

HOOK void cpucuda_hook_switch(int fiber) { S.cur = S.active ? fiber : -1; }

HOOK void cpucuda_race_barrier() {
    settle_pending();
    S.interval++;
}

HOOK void cpucuda_race_warp(unsigned warp, unsigned lanes) {
    if (!S.active) return;
    Thread* th = &S.threads[warp * 32];
    uint32_t join[32] = {0};
    for (unsigned l = 0; l < 32; ++l)
        if ((lanes >> l) & 1u)
            for (unsigned k = 0; k < 32; ++k) join[k] = std::max(join[k], th[l].clock[k]);
    for (unsigned l = 0; l < 32; ++l)
        if ((lanes >> l) & 1u) {
            memcpy(th[l].clock, join, sizeof join);
            th[l].clock[l]++;
        }
}

HOOK void cpucuda_race_tile(unsigned first, unsigned size) {
    if (!S.active) return;
    const unsigned cls = (unsigned)__builtin_ctz(size) - 6u;
    for (unsigned w = first / 32; w < (first + size) / 32; ++w) cpucuda_race_warp(w, ~0u);  // whole warps
    for (unsigned i = first; i < first + size; ++i)
        for (unsigned c = 0; c <= cls && c < kTileClasses; ++c) S.threads[i].tile[c] = S.threads[i].clock[i & 31];
}

HOOK void cpucuda_hook_shared(const void* p, size_t n, int dynamic) {
    if (S.active && n) add_region((uint64_t)p, (uint64_t)p + n, dynamic ? -2 : -1, 1, 0);
}

// ---------------------------------------------------------------- ThreadSanitizer's entry points, libc

namespace {
inline void on_access(uint64_t p, unsigned n, bool write, void* pc) { check(p, n, write, pc); }
// memcpy/memmove: a read of the source and a write of the destination; memset: a write
inline void on_libc(void* d, const void* s, size_t n, void* pc, int) {
    if (s) check((uint64_t)s, (unsigned)n, false, pc);
    check((uint64_t)d, (unsigned)n, true, pc);
}
}  // namespace
#include "tsan_entry_points.h"
HOOK void __tsan_func_entry(void*) {}
HOOK void __tsan_func_exit() {}

// ---------------------------------------------------------------- Python's side (racecheck.py)

struct PyRegion { uint64_t lo, hi; int64_t target, readonly; };

EXPORT void cpucuda_race_begin(const PyRegion* regions, int64_t n) {
    S.so_base = so_base();
    S.regions.clear();
    for (Mapping& m : S.mappings) m.used = false;
    for (int64_t i = 0; i < n; ++i)
        if (regions[i].hi > regions[i].lo)
            add_region(regions[i].lo, regions[i].hi, (int32_t)regions[i].target, 0, (int32_t)regions[i].readonly);
    S.global_regions = S.regions.size();
    S.regions.changed();
    S.found = false;
    S.found_same = false;
    S.pending.on = false;
    S.pairs.clear();
    S.interval++;
    S.active = true;
}

// 1 and the first race of the launch in *out, or 0 when there was none.
EXPORT int cpucuda_race_end(Report* out) {
    settle_pending();
    S.active = false;
    S.cur = -1;
    // Every loaded racecheck library keeps its own pool: the big mappings give their pages back (they read
    // as zeros, interval 0, when next touched), the small ones stay as they are.
    for (const Mapping& m : S.mappings)
        if (m.bytes >= ((size_t)1 << 20)) madvise(m.p, m.bytes, MADV_DONTNEED);
    if (!S.found) return 0;
    *out = S.report;
    return 1;
}

// 1 and the launch's first same-value write-after-write in *out (count: distinct pairs), or 0 when none.
EXPORT int cpucuda_race_same_value(Report* out) {
    if (!S.found_same) return 0;
    *out = S.same;
    return 1;
}
