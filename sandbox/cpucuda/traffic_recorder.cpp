// traffic_recorder.cpp: the traffic mode's recorder, linked (uninstrumented) into every traffic build.
//
// The kernel's translation unit is compiled with g++'s ThreadSanitizer instrumentation, which calls
// __tsan_readN / __tsan_writeN before every memory access it cannot prove private, and
// __tsan_func_entry / __tsan_func_exit around every function left out of line. Nothing links
// libtsan: this file defines those entry points and turns them into memory-traffic counts
// (sandbox/cpucuda/traffic.py reads them back).
//
// * Accesses outside the launch's arrays and shared memory (the fibers' stacks, the runtime's own
//   state: threadIdx, the fiber table) are dropped: on a GPU they are registers and special registers.
// * Each kept access is appended to its fiber's list: (address, width, site), the site being the
//   instruction (return address of the hook) + the chain of out-of-line calls + the array + the kind.
//   Global addresses are rebased so every array starts where Python placed it (256-byte aligned).
// * When a warp converges (a __syncthreads releases, a warp operation of every existing lane releases,
//   the block ends), its lanes' lists are grouped into warp-level requests: the k-th access of each
//   lane to a site since the last convergence belong to one request. When every lane ran the same
//   sites in the same order (the common case) the lists are zipped; otherwise each record is numbered
//   per (lane, site) and grouped by (site, number).
// * A global request gives its distinct 32-byte sectors (with byte masks) to the sector stream and
//   their count to the site; a shared request its wavefronts (most distinct 4-byte words in one bank)
//   and ideal (ceil(distinct bytes / 128)).
// * Atomics come through cpucuda_traffic_atomic (the executor's atomics call it, uninstrumented),
//   tensor-core MMAs through cpucuda_traffic_mma, and libc memcpy/memset/memmove (invisible to the
//   instrumentation) through the linker's --wrap: when they touch an array or shared memory from
//   kernel code, their call site and bytes are reported as unseen, never counted silently.
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "recorder_regions.h"

#define EXPORT extern "C" __attribute__((visibility("default")))
#define HOOK extern "C" __attribute__((visibility("hidden")))

namespace {

enum Kind : int32_t { K_LOAD = 0, K_STORE = 1, K_ATOMIC = 2 };

struct Region {          // filled by Python (the arrays) or by the runtime (shared memory)
    uint64_t lo, hi;     // real addresses [lo, hi)
    uint64_t vbase;      // global: the virtual address of lo; shared: unused
    int32_t target;      // global: argument index; shared: -1 static, -2 dynamic
    int32_t shared;
};

struct Rec { uint64_t addr; uint32_t site; uint32_t width; };

struct SiteInfo {        // read by Python: keep in step with traffic.py's _SITE
    uint64_t pc;         // offset in the shared object of the hook's return address
    int32_t chain;       // -1: none
    int32_t region;
    int32_t kind;
    int32_t shared;
};

struct ChainInfo { int32_t parent; int32_t pad; uint64_t pc; };  // traffic.py's _CHAIN

struct __attribute__((packed)) SiteBlockRow {  // raw.SITE_BLOCK_DTYPE
    int64_t block;
    int32_t site;
    int64_t requests, lanes, bytes, sectors, wavefronts, ideal;
};

struct __attribute__((packed)) SectorRow {  // raw.SECTOR_DTYPE
    int64_t block;
    uint64_t sector;
    uint32_t mask;
    uint8_t write, read;
};

struct Unseen { uint64_t pc; int64_t bytes; int64_t calls; int32_t what; int32_t pad; };  // traffic.py's _UNSEEN

struct Acc { int64_t requests, lanes, bytes, sectors, wavefronts, ideal; };

struct Fiber {
    std::vector<Rec> recs;
    int32_t chain;
    int32_t depth;
    int32_t stack[128];
};

struct Piece { uint64_t index; uint32_t mask; };

struct SiteKey {
    uint64_t pc;
    int32_t chain, region, kind;
    bool operator==(const SiteKey& o) const { return pc == o.pc && chain == o.chain && region == o.region && kind == o.kind; }
};
struct SiteKeyHash {
    size_t operator()(const SiteKey& k) const {
        return (size_t)(k.pc * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)k.chain << 20 ^ (uint64_t)k.region << 8 ^
                        (uint64_t)k.kind);
    }
};

struct State {
    bool active;
    uint64_t base;                       // load address of this shared object
    RegionIndex<Region> regions;
    size_t global_regions;               // regions[0, global_regions) came from Python
    std::vector<Fiber> fibers;
    int32_t cur = -1;
    int64_t block;
    unsigned nthreads;
    std::vector<SiteInfo> sites;
    std::unordered_map<SiteKey, uint32_t, SiteKeyHash> site_index;
    std::vector<ChainInfo> chains;
    std::unordered_map<uint64_t, int32_t> chain_index;
    std::vector<Acc> acc;
    std::vector<int32_t> touched;
    std::vector<SiteBlockRow> rows;
    std::vector<SectorRow> sectors;
    std::vector<int64_t> mma_inst, mma_flops;
    std::vector<Unseen> unseen;
    std::vector<Piece> pieces;
    // site lookup cache: direct-mapped on (pc, chain, region, kind)
    struct Slot { uint64_t pc; int32_t chain, region, kind; uint32_t site; };
    Slot cache[4096];
};

State S;

uint64_t so_base() {
    Dl_info info;
    if (dladdr((void*)&so_base, &info) && info.dli_fbase) return (uint64_t)info.dli_fbase;
    return 0;
}

inline int find_region(uint64_t a) { return S.regions.find(a); }

int32_t intern_chain(int32_t parent, uint64_t pc) {
    const uint64_t key = ((uint64_t)(uint32_t)(parent + 1) << 40) ^ (pc - S.base);
    auto it = S.chain_index.find(key);
    if (it != S.chain_index.end()) return it->second;
    const int32_t id = (int32_t)S.chains.size();
    S.chains.push_back(ChainInfo{parent, 0, pc - S.base});
    S.chain_index.emplace(key, id);
    return id;
}

uint32_t intern_site(uint64_t pc, int32_t chain, int32_t region, int32_t kind) {
    const uint64_t h = (pc * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(uint32_t)chain * 0xC2B2AE3D27D4EB4Full) ^
                       ((uint64_t)region << 3) ^ (uint64_t)kind;
    State::Slot& slot = S.cache[(h >> 20) & 4095];  // most accesses repeat a recent site
    if (slot.pc == pc && slot.chain == chain && slot.region == region && slot.kind == kind) return slot.site;
    const SiteKey key{pc, chain, region, kind};
    auto it = S.site_index.find(key);
    uint32_t id;
    if (it != S.site_index.end()) {
        id = it->second;
    } else {
        id = (uint32_t)S.sites.size();
        S.sites.push_back(SiteInfo{pc - S.base, chain, region, kind, S.regions[region].shared});
        S.site_index.emplace(key, id);
        S.acc.push_back(Acc{});
    }
    slot = State::Slot{pc, chain, region, kind, id};
    return id;
}

inline void record(uint64_t addr, uint32_t width, int32_t kind, void* pc) {
    // static initialisers (S may not be constructed yet: it is zero until then), the scheduler, no launch
    if (!S.active || S.cur < 0) return;
    const int r = find_region(addr);
    if (r < 0) return;
    Fiber& f = S.fibers[S.cur];
    const Region& R = S.regions[r];
    const uint32_t site = intern_site((uint64_t)pc, f.chain, r, kind);
    f.recs.push_back(Rec{R.shared ? addr : R.vbase + (addr - R.lo), site, width});
}

Acc& acc_of(uint32_t site) {
    Acc& a = S.acc[site];
    if (a.requests == 0) S.touched.push_back((int32_t)site);
    return a;
}

// The lanes' (address, width) of one request, as aligned pieces of `size` bytes with byte masks,
// sorted and merged: the distinct sectors (size 32) or words (size 4).
void pieces_of(const Rec* const* lanes, int n, uint64_t size) {
    S.pieces.clear();
    for (int i = 0; i < n; ++i) {
        const uint64_t a = lanes[i]->addr, end = a + lanes[i]->width;
        for (uint64_t p = a / size; p * size < end; ++p) {
            const uint64_t lo = std::max(a, p * size) - p * size, hi = std::min(end, (p + 1) * size) - p * size;
            const uint32_t mask = (uint32_t)((((uint64_t)1 << (hi - lo)) - 1) << lo);
            S.pieces.push_back(Piece{p, mask});
        }
    }
    auto& v = S.pieces;
    bool sorted = true;
    for (size_t i = 1; i < v.size() && sorted; ++i) sorted = v[i - 1].index <= v[i].index;
    if (!sorted) std::sort(v.begin(), v.end(), [](const Piece& x, const Piece& y) { return x.index < y.index; });
    size_t out = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        if (out && v[out - 1].index == v[i].index) v[out - 1].mask |= v[i].mask;
        else v[out++] = v[i];
    }
    v.resize(out);
}

void request(uint32_t site, const Rec* const* lanes, int n) {
    const SiteInfo& s = S.sites[site];
    Acc& a = acc_of(site);
    a.requests++;
    a.lanes += n;
    for (int i = 0; i < n; ++i) a.bytes += lanes[i]->width;
    if (!s.shared) {
        pieces_of(lanes, n, 32);
        a.sectors += (int64_t)S.pieces.size();
        for (const Piece& p : S.pieces)
            S.sectors.push_back(SectorRow{S.block, p.index, p.mask, (uint8_t)(s.kind != K_LOAD),
                                          (uint8_t)(s.kind != K_STORE)});
    } else {
        pieces_of(lanes, n, 4);
        int per_bank[32] = {0};
        int64_t bytes = 0, most = 0;
        for (const Piece& p : S.pieces) {
            most = std::max<int64_t>(most, ++per_bank[p.index & 31]);
            bytes += __builtin_popcount(p.mask);
        }
        a.wavefronts += most;
        a.ideal += (bytes + 127) / 128;
    }
}

// Group the records of `lanes` (a warp's fibers) into requests, then clear them.
void converge_lanes(Fiber* lanes, int count) {
    const Rec* group[32];
    int lead = -1;
    bool zip = true;
    for (int l = 0; l < count; ++l) {
        const auto& r = lanes[l].recs;
        if (r.empty()) continue;
        if (lead < 0) { lead = l; continue; }
        const auto& first = lanes[lead].recs;
        if (r.size() != first.size()) { zip = false; break; }
        for (size_t j = 0; j < r.size(); ++j)
            if (r[j].site != first[j].site) { zip = false; break; }
        if (!zip) break;
    }
    if (lead < 0) return;
    if (zip) {
        const size_t n = lanes[lead].recs.size();
        for (size_t j = 0; j < n; ++j) {
            int m = 0;
            for (int l = 0; l < count; ++l)
                if (!lanes[l].recs.empty()) group[m++] = &lanes[l].recs[j];
            request(lanes[lead].recs[j].site, group, m);
        }
    } else {
        // (site, k) -> request, in order of first appearance (lane by lane)
        std::unordered_map<uint64_t, uint32_t> index;
        std::vector<std::vector<const Rec*>> requests;
        std::vector<uint32_t> request_site;
        for (int l = 0; l < count; ++l) {
            std::unordered_map<uint32_t, uint32_t> times;
            for (const Rec& r : lanes[l].recs) {
                const uint64_t key = ((uint64_t)r.site << 32) | times[r.site]++;
                auto it = index.find(key);
                uint32_t q;
                if (it == index.end()) {
                    q = (uint32_t)requests.size();
                    index.emplace(key, q);
                    requests.emplace_back();
                    request_site.push_back(r.site);
                } else {
                    q = it->second;
                }
                requests[q].push_back(&r);
            }
        }
        for (size_t q = 0; q < requests.size(); ++q)
            request(request_site[q], requests[q].data(), (int)requests[q].size());
    }
    for (int l = 0; l < count; ++l) lanes[l].recs.clear();
}

void converge_warp(unsigned w) {
    const unsigned first = w * 32;
    if (first >= S.nthreads) return;
    const unsigned count = S.nthreads - first < 32 ? S.nthreads - first : 32;
    converge_lanes(&S.fibers[first], (int)count);
}

void converge_all() {
    for (unsigned w = 0; w * 32 < S.nthreads; ++w) converge_warp(w);
}

void add_shared_region(const void* p, size_t n, int32_t target) {
    const uint64_t lo = (uint64_t)p;
    for (size_t i = S.global_regions; i < S.regions.size(); ++i)
        if (S.regions[i].lo == lo) {
            S.regions[i].hi = lo + n;
            S.regions.changed();
            return;
        }
    S.regions.push_back(Region{lo, lo + n, 0, target, 1});
    S.regions.changed();
}

void note_unseen(const void* dst, const void* src, size_t n, void* pc, int32_t what) {
    if (!S.active || S.cur < 0 || n == 0) return;
    const bool hits = (find_region((uint64_t)dst) >= 0) || (src && find_region((uint64_t)src) >= 0) ||
                      (find_region((uint64_t)dst + n - 1) >= 0) || (src && find_region((uint64_t)src + n - 1) >= 0);
    if (!hits) return;
    const uint64_t off = (uint64_t)pc - S.base;
    for (Unseen& u : S.unseen)
        if (u.pc == off && u.what == what) {
            u.bytes += (int64_t)n;
            u.calls++;
            return;
        }
    S.unseen.push_back(Unseen{off, (int64_t)n, 1, what, 0});
}

}  // namespace

// ---------------------------------------------------------------- the runtime's hooks (cpucuda_hooks.h, cpucuda_traffic.h)

HOOK void cpucuda_hook_block_begin(int64_t block, unsigned nthreads) {
    if (!S.active) return;
    S.block = block;
    S.nthreads = nthreads;
    if (S.fibers.size() < nthreads) S.fibers.resize(nthreads);
    for (unsigned i = 0; i < nthreads; ++i) {
        S.fibers[i].recs.clear();
        S.fibers[i].chain = -1;
        S.fibers[i].depth = 0;
    }
}

HOOK void cpucuda_hook_switch(int fiber) { S.cur = S.active ? fiber : -1; }

HOOK void cpucuda_traffic_converge(int warp) {
    if (!S.active) return;
    if (warp < 0) converge_all();
    else converge_warp((unsigned)warp);
}

HOOK void cpucuda_traffic_block_end() {
    if (!S.active) return;
    converge_all();
    for (int32_t site : S.touched) {
        Acc& a = S.acc[site];
        S.rows.push_back(SiteBlockRow{S.block, site, a.requests, a.lanes, a.bytes, a.sectors, a.wavefronts, a.ideal});
        a = Acc{};
    }
    S.touched.clear();
}

HOOK void cpucuda_hook_shared(const void* p, size_t n, int dynamic) {
    if (S.active) add_shared_region(p, n, dynamic ? -2 : -1);
}

HOOK void cpucuda_traffic_atomic(const void* p, unsigned size, void* pc) { record((uint64_t)p, size, K_ATOMIC, pc); }

// One warp-level matrix multiply-accumulate of m x n x k (call it once per warp, from any one lane):
// counted in m16n8k16 units (sm_80/sm_90's HMMA.16816) and as 2 * m * n * k FLOPs.
EXPORT void cpucuda_traffic_mma(int m, int n, int k) {
    if (!S.active || S.block < 0 || (size_t)S.block >= S.mma_inst.size()) return;
    const int64_t mnk = (int64_t)m * n * k;
    S.mma_inst[S.block] += (mnk + 2047) / 2048;
    S.mma_flops[S.block] += 2 * mnk;
}

// ---------------------------------------------------------------- ThreadSanitizer's entry points, libc

namespace {
inline void on_access(uint64_t p, unsigned n, bool write, void* pc) { record(p, n, write ? K_STORE : K_LOAD, pc); }
inline void on_libc(void* d, const void* s, size_t n, void* pc, int what) { note_unseen(d, s, n, pc, what); }
}  // namespace
#include "tsan_entry_points.h"

HOOK void __tsan_func_entry(void* caller_pc) {
    if (!S.active || S.cur < 0) return;
    Fiber& f = S.fibers[S.cur];
    if (f.depth < 128) f.stack[f.depth] = f.chain;
    f.depth++;
    f.chain = intern_chain(f.chain, (uint64_t)caller_pc);
}

HOOK void __tsan_func_exit() {
    if (!S.active || S.cur < 0) return;
    Fiber& f = S.fibers[S.cur];
    if (f.depth > 0 && --f.depth < 128) f.chain = f.stack[f.depth];
}

// ---------------------------------------------------------------- Python's side (traffic.py)

struct PyRegion { uint64_t lo, hi, vbase; int64_t target; };

EXPORT void cpucuda_traffic_begin(const PyRegion* regions, int64_t n, int64_t num_blocks) {
    S.base = so_base();
    S.regions.clear();
    for (int64_t i = 0; i < n; ++i)
        if (regions[i].hi > regions[i].lo)
            S.regions.push_back(Region{regions[i].lo, regions[i].hi, regions[i].vbase, (int32_t)regions[i].target, 0});
    S.global_regions = S.regions.size();
    S.regions.changed();
    S.sites.clear();
    S.site_index.clear();
    S.chains.clear();
    S.chain_index.clear();
    S.acc.clear();
    S.touched.clear();
    S.rows.clear();
    S.sectors.clear();
    S.unseen.clear();
    S.mma_inst.assign(num_blocks, 0);
    S.mma_flops.assign(num_blocks, 0);
    memset(S.cache, 0xff, sizeof S.cache);
    S.block = -1;
    S.active = true;
}

EXPORT void cpucuda_traffic_end() {
    S.active = false;
    S.cur = -1;
}

// What Python copies out after a launch: pointers and counts.
struct Results {
    const void *sites, *chains, *rows, *sectors, *mma_inst, *mma_flops, *unseen, *regions;
    int64_t nsites, nchains, nrows, nsectors, nblocks, nunseen, nregions;
};

EXPORT void cpucuda_traffic_results(Results* out) {
    out->sites = S.sites.data();
    out->nsites = (int64_t)S.sites.size();
    out->chains = S.chains.data();
    out->nchains = (int64_t)S.chains.size();
    out->rows = S.rows.data();
    out->nrows = (int64_t)S.rows.size();
    out->sectors = S.sectors.data();
    out->nsectors = (int64_t)S.sectors.size();
    out->mma_inst = S.mma_inst.data();
    out->mma_flops = S.mma_flops.data();
    out->nblocks = (int64_t)S.mma_inst.size();
    out->unseen = S.unseen.data();
    out->nunseen = (int64_t)S.unseen.size();
    out->regions = S.regions.data();
    out->nregions = (int64_t)S.regions.size();
}

// Free the big buffers once Python has its copies.
EXPORT void cpucuda_traffic_release() {
    std::vector<SectorRow>().swap(S.sectors);
    std::vector<SiteBlockRow>().swap(S.rows);
}
