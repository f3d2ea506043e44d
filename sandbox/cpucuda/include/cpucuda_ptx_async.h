// cpucuda_ptx_async.h: cp.async (global -> shared copies that land later), commit_group, wait_group.
//
// A GPU makes a cp.async's bytes visible in shared memory only after the issuing thread's matching
// cp.async.wait_group (and to other threads after a barrier as well). Here each copy reads global
// memory when it is issued (ASan checks that read at the cp.async's line) and is held in the thread's
// queue; the thread's wait_group N writes the copies of every committed group but the N newest into
// shared memory. So a kernel that reads before waiting sees the old contents (the poison), and
// racecheck sees the shared write at the wait: another thread's read that is not ordered after that
// wait by a barrier is a race. Traffic mode copies at issue instead (one global load and one shared
// store at the cp.async's line, the widths issued: what Nsight Compute counts as an LDGSTS).
// src-size below cp-size (and the ignore-src predicate) fills the rest with zeros; src-size 0 reads
// nothing, as on a GPU, so its source address may be anything.
#pragma once

namespace cpucuda {
namespace ptx {

struct alignas(16) Bytes16 { uint64_t lo, hi; };
struct AsyncCopy { unsigned char* dst; Bytes16 data; uint32_t bytes; uint32_t group; };
static const unsigned kAsyncMax = 128;  // pending copies per thread
struct AsyncQueue { unsigned long block_gen; uint32_t committed, n; AsyncCopy copies[kAsyncMax]; };
static AsyncQueue* g_async;
static unsigned g_async_cap;

CPUCUDA_RUNTIME static inline AsyncQueue& async_queue() {
    if (g_async_cap < g.nthreads) {
        free(g_async);
        g_async = (AsyncQueue*)calloc(g.nthreads, sizeof(AsyncQueue));
        if (!g_async) fiber_fail("out of memory for cp.async queues of %u threads", g.nthreads);
        g_async_cap = g.nthreads;
    }
    AsyncQueue& q = g_async[g.cur->linear];
    if (q.block_gen != g.block_gen) {  // a new block (or launch): what the last one left pending is gone
        q.block_gen = g.block_gen;
        q.committed = 0;
        q.n = 0;
    }
    return q;
}

// The global read and the shared write, as ordinary (instrumented) accesses of the copy's width.
static inline void async_read(Bytes16& out, const unsigned char* src, uint32_t cp_size, uint32_t src_size) {
    out = Bytes16{0, 0};
    if (src_size == cp_size && cp_size == 16) {
        out = *(const Bytes16*)src;
    } else if (src_size == cp_size && cp_size == 8) {
        out.lo = *(const uint64_t*)src;
    } else if (src_size == cp_size && cp_size == 4) {
        out.lo = *(const uint32_t*)src;
    } else {
        unsigned char* o = (unsigned char*)&out;
        for (uint32_t i = 0; i < src_size; ++i) o[i] = src[i];
    }
}
static inline void async_write(unsigned char* dst, const Bytes16& data, uint32_t cp_size) {
    if (cp_size == 16) *(Bytes16*)dst = data;
    else if (cp_size == 8) *(uint64_t*)dst = data.lo;
    else *(uint32_t*)dst = (uint32_t)data.lo;
}

static inline void cp_async(uint64_t shared_addr, uint64_t global_addr, uint32_t cp_size, uint32_t src_size,
                            const char* what, const char* file, int line) {
    if (src_size > cp_size)
        fiber_fail("%s at %s:%d in %s: src-size %u exceeds cp-size %u", what, file, line, where(g.cur), src_size,
                   cp_size);
    unsigned char* dst = window_pointer(shared_addr, cp_size, what, file, line);
    if (shared_addr % cp_size) misaligned(shared_addr, cp_size, what, file, line);
    if (src_size && global_addr % cp_size) misaligned(global_addr, cp_size, what, file, line);
    Bytes16 data;
    async_read(data, (const unsigned char*)(uintptr_t)global_addr, cp_size, src_size);
#if CPUCUDA_TRAFFIC
    async_write(dst, data, cp_size);
#else
    AsyncQueue& q = async_queue();
    if (q.n == kAsyncMax)
        fiber_fail("%s at %s:%d in %s: more than %u cp.async copies pending in one thread (wait_group earlier)",
                   what, file, line, where(g.cur), kAsyncMax);
    q.copies[q.n++] = AsyncCopy{dst, data, cp_size, q.committed};
#endif
}

CPUCUDA_RUNTIME static inline void cp_async_commit() {
#if !CPUCUDA_TRAFFIC
    async_queue().committed++;
#endif
}

// Write the copies of every committed group except the `keep` newest ones, in issue order.
static inline void cp_async_wait(uint32_t keep) {
#if !CPUCUDA_TRAFFIC
    AsyncQueue& q = async_queue();
    const uint32_t done_below = q.committed > keep ? q.committed - keep : 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < q.n; ++i) {
        const AsyncCopy& c = q.copies[i];
        if (c.group < done_below) async_write(c.dst, c.data, c.bytes);
        else q.copies[kept++] = c;
    }
    q.n = kept;
#else
    (void)keep;
#endif
}

// cp.async.wait_all: commit, then wait for everything.
static inline void cp_async_wait_all() {
    cp_async_commit();
    cp_async_wait(0);
}

}  // namespace ptx
}  // namespace cpucuda
