// Intercepts <cooperative_groups.h>: CUDA's cooperative groups on top of the
// executor's barriers and warp operations.
//
// this_thread_block() and this_thread_block(scratch) with block_tile_memory<MaxBlockSize>
// (also cooperative_groups::experimental's); tiled_partition<N>(parent) (N a power of two up to
// the block's size: N <= 32 a warp tile with every warp-level call, N = 64 ... 1024 a tile of
// whole warps with sync, thread_rank, size / num_threads, meta_group_rank, meta_group_size and
// cg::reduce) and tiled_partition(parent, n) (n <= 32); coalesced_threads()
// (the lanes of the warp that reach the call together); labeled_partition(g,
// label) (lanes with equal labels, via __match_any_sync); cg::reduce with
// cg::plus / less / greater / bit_and / bit_or / bit_xor (<cooperative_groups/reduce.h>);
// group.sync(), thread_rank(), size() / num_threads(), meta_group_rank(),
// meta_group_size(), shfl, shfl_xor, shfl_down, shfl_up, any, all, ballot.
// this_grid().sync() is refused at compile time: blocks run one after
// another here, so a grid-wide barrier could never be reached by all blocks.
// Every call that waits records the caller's line (divergence and deadlock
// reports name it).
#pragma once
#include "cpucuda_runtime.h"

namespace cooperative_groups {

namespace details {
template <class> constexpr bool always_false = false;
static inline unsigned lane() { return cpucuda::g.cur->lane; }
static inline unsigned warp_lanes() { return cpucuda::g.warps[cpucuda::g.cur->warp].existing; }
static inline unsigned block_rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
static inline unsigned block_size() { return blockDim.x * blockDim.y * blockDim.z; }
// Lane of the k-th set bit of `mask` (k from 0); 32 if there is none.
static inline unsigned nth_lane(unsigned mask, unsigned k) {
    for (unsigned l = 0; l < 32; ++l)
        if ((mask >> l) & 1u) {
            if (k == 0) return l;
            --k;
        }
    return 32;
}
// Bits of `bits` at the lanes of `mask`, packed to ranks 0..popc(mask)-1.
static inline unsigned compress(unsigned bits, unsigned mask) {
    unsigned out = 0, r = 0;
    for (unsigned l = 0; l < 32; ++l)
        if ((mask >> l) & 1u) out |= ((bits >> l) & 1u) << r++;
    return out;
}
}  // namespace details

class thread_group {
  public:
    virtual ~thread_group() = default;
};

// ---------------------------------------------------------------- block

class thread_block : public thread_group {
  public:
    void sync(CPUCUDA_SITE) const {
        cpucuda::block_barrier(cpucuda::B_SYNC, 0, "thread_block::sync", cpucuda_file, cpucuda_line);
    }
    unsigned long long thread_rank() const { return details::block_rank(); }
    unsigned long long size() const { return details::block_size(); }
    unsigned long long num_threads() const { return details::block_size(); }
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 group_dim() const { return blockDim; }
    dim3 dim_threads() const { return blockDim; }
    bool is_valid() const { return true; }
};

static inline thread_block this_thread_block() { return thread_block(); }

// Scratch memory for tiles wider than a warp (CUDA 11 needed it before sm_80): declared __shared__ and
// handed to this_thread_block(). The executor keeps tile state itself; the block must fit MaxBlockSize.
template <unsigned int MaxBlockSize = 1024>
struct block_tile_memory {
    static_assert(MaxBlockSize >= 1 && MaxBlockSize <= 1024, "block_tile_memory<MaxBlockSize>: 1 to 1024 threads");
    alignas(16) unsigned char reserved[(MaxBlockSize + 31) / 32 * 8];
};

template <unsigned int MaxBlockSize>
static inline thread_block this_thread_block(block_tile_memory<MaxBlockSize>&, CPUCUDA_SITE) {
    if (details::block_size() > MaxBlockSize)
        cpucuda::fiber_fail("this_thread_block(scratch) at %s:%d: the block has %u threads but its "
                            "block_tile_memory<%u> holds tiles for at most %u", cpucuda_file, cpucuda_line,
                            details::block_size(), MaxBlockSize, MaxBlockSize);
    return thread_block();
}

// ---------------------------------------------------------------- grid

class grid_group : public thread_group {
  public:
    // A template so that the refusal fires only where sync() is called.
    template <class D = void>
    void sync() const {
        static_assert(details::always_false<D>,
                      "cooperative_groups::grid_group::sync() cannot run on sandbox.cpucuda: blocks run one after "
                      "another on the CPU, so a grid-wide barrier would wait forever for blocks that start only "
                      "after it; split the kernel in two launches");
    }
    bool is_valid() const { return true; }
    unsigned long long thread_rank() const {
        const unsigned long long b = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        return b * details::block_size() + details::block_rank();
    }
    unsigned long long size() const {
        return (unsigned long long)gridDim.x * gridDim.y * gridDim.z * details::block_size();
    }
    unsigned long long num_threads() const { return size(); }
    dim3 group_dim() const { return gridDim; }
};

static inline grid_group this_grid() { return grid_group(); }

// ---------------------------------------------------------------- warp-level groups

// A group of lanes of one warp: `mask_` its lanes. Tiles are contiguous and
// aligned (`width_` lanes); coalesced and labeled groups are any lane set.
class coalesced_group : public thread_group {
  protected:
    unsigned mask_;
    unsigned width_;  // tile width (power of two) or 32 for arbitrary lane sets
    unsigned meta_rank_, meta_size_;
    bool tiled_;

    unsigned rank_of_lane(unsigned l) const { return __builtin_popcount(mask_ & ((1u << l) - 1u)); }
    unsigned lane_of_rank(unsigned r) const {
        return tiled_ ? (details::lane() & ~(width_ - 1)) + r : details::nth_lane(mask_, r);
    }

  public:
    coalesced_group(unsigned mask, unsigned width, unsigned meta_rank, unsigned meta_size, bool tiled)
        : mask_(mask), width_(width), meta_rank_(meta_rank), meta_size_(meta_size), tiled_(tiled) {}

    unsigned long long thread_rank() const { return rank_of_lane(details::lane()); }
    unsigned long long size() const { return tiled_ ? width_ : (unsigned)__builtin_popcount(mask_); }
    unsigned long long num_threads() const { return size(); }
    unsigned long long meta_group_rank() const { return meta_rank_; }
    unsigned long long meta_group_size() const { return meta_size_; }
    unsigned get_mask() const { return mask_; }
    bool is_valid() const { return mask_ != 0; }

    void sync(CPUCUDA_SITE) const { __syncwarp(mask_, cpucuda_file, cpucuda_line); }

    template <class T> T shfl(T var, unsigned src_rank, CPUCUDA_SITE) const {
        const unsigned n = (unsigned)size();
        const unsigned src = lane_of_rank(src_rank % n);
        return cpucuda::shuffle(mask_, var, (int)src, "shfl", cpucuda_file, cpucuda_line);
    }
    template <class T> T shfl_xor(T var, unsigned lane_mask, CPUCUDA_SITE) const {
        const unsigned r = (unsigned)thread_rank() ^ lane_mask;
        const int src = r < size() ? (int)lane_of_rank(r) : -1;
        return cpucuda::shuffle(mask_, var, src, "shfl_xor", cpucuda_file, cpucuda_line);
    }
    // Out of range: the caller's own value (CUDA leaves the source lane's value unchanged).
    template <class T> T shfl_down(T var, unsigned delta, CPUCUDA_SITE) const {
        const unsigned r = (unsigned)thread_rank() + delta;
        const int src = r < size() ? (int)lane_of_rank(r) : -1;
        return cpucuda::shuffle(mask_, var, src, "shfl_down", cpucuda_file, cpucuda_line);
    }
    template <class T> T shfl_up(T var, unsigned delta, CPUCUDA_SITE) const {
        const unsigned r = (unsigned)thread_rank();
        const int src = r >= delta ? (int)lane_of_rank(r - delta) : -1;
        return cpucuda::shuffle(mask_, var, src, "shfl_up", cpucuda_file, cpucuda_line);
    }
    unsigned ballot(int pred, CPUCUDA_SITE) const {
        return details::compress(__ballot_sync(mask_, pred, cpucuda_file, cpucuda_line), mask_);
    }
    int any(int pred, CPUCUDA_SITE) const { return __any_sync(mask_, pred, cpucuda_file, cpucuda_line); }
    int all(int pred, CPUCUDA_SITE) const { return __all_sync(mask_, pred, cpucuda_file, cpucuda_line); }
    template <class T> unsigned match_any(T value, CPUCUDA_SITE) const {
        return details::compress(__match_any_sync(mask_, value, cpucuda_file, cpucuda_line), mask_);
    }
};

// tiled_partition(parent, n): a tile of n lanes (a power of two <= 32).
class thread_block_tile_base : public coalesced_group {
  public:
    thread_block_tile_base(unsigned n, unsigned parent_rank, unsigned parent_size)
        : coalesced_group(tile_mask(n), n, parent_rank / n, (parent_size + n - 1) / n, true) {}
    static unsigned tile_mask(unsigned n) {
        if (n == 0 || n > 32 || (n & (n - 1)))
            cpucuda::fiber_fail("tiled_partition: tile size %u must be a power of two <= 32 (tiles never span warps)",
                                n);
        const unsigned low = n == 32 ? ~0u : (1u << n) - 1u;
        return (low << (details::lane() & ~(n - 1))) & details::warp_lanes();
    }
    unsigned long long thread_rank() const { return details::lane() & (width_ - 1); }
};

namespace details {
// A tile of N = 64 ... 1024 threads: whole warps, consecutive in the block. Its barrier is the
// scheduler's group barrier; warp-level calls (shfl, ballot, ...) exist for warp tiles only, as in CUDA.
template <unsigned N>
class multi_warp_tile : public thread_group {
    unsigned meta_rank_, meta_size_;

  public:
    multi_warp_tile(unsigned parent_rank, unsigned parent_size, CPUCUDA_SITE)
        : meta_rank_(parent_rank / N), meta_size_(parent_size / N) {
        if (parent_size % N)
            cpucuda::fiber_fail("tiled_partition<%u> at %s:%d: the parent group has %u threads, not a multiple of the "
                                "tile size", N, cpucuda_file, cpucuda_line, parent_size);
    }
    void sync(CPUCUDA_SITE) const {
        cpucuda::group_barrier(N, "thread_block_tile::sync", cpucuda_file, cpucuda_line);
    }
    unsigned long long thread_rank() const { return block_rank() % N; }
    static constexpr unsigned long long size() { return N; }
    static constexpr unsigned long long num_threads() { return N; }
    unsigned long long meta_group_rank() const { return meta_rank_; }
    unsigned long long meta_group_size() const { return meta_size_; }
    bool is_valid() const { return true; }
};
}  // namespace details

template <unsigned N, class Parent = void>
class thread_block_tile
    : public std::conditional_t<(N <= 32), thread_block_tile_base, details::multi_warp_tile<N>> {
    static_assert(N > 0 && N <= 1024 && (N & (N - 1)) == 0, "thread_block_tile<N>: N must be a power of two <= 1024");
    using base = std::conditional_t<(N <= 32), thread_block_tile_base, details::multi_warp_tile<N>>;

  public:
    thread_block_tile(unsigned parent_rank, unsigned parent_size, CPUCUDA_SITE)
        : base(make(parent_rank, parent_size, cpucuda_file, cpucuda_line)) {}
    static constexpr unsigned long long num_threads() { return N; }
    static constexpr unsigned long long size() { return N; }

  private:
    static base make(unsigned parent_rank, unsigned parent_size, const char* file, int line) {
        if constexpr (N <= 32) return base(N, parent_rank, parent_size);
        else return base(parent_rank, parent_size, file, line);
    }
};

template <unsigned N> static inline thread_block_tile<N> tiled_partition(const thread_block&, CPUCUDA_SITE) {
    return thread_block_tile<N>(details::block_rank(), details::block_size(), cpucuda_file, cpucuda_line);
}
template <unsigned N, unsigned M, class P>
static inline thread_block_tile<N> tiled_partition(const thread_block_tile<M, P>& parent, CPUCUDA_SITE) {
    static_assert(N <= M, "a tile can only be split into smaller tiles");
    return thread_block_tile<N>((unsigned)parent.thread_rank(), M, cpucuda_file, cpucuda_line);
}
static inline thread_block_tile_base tiled_partition(const thread_block&, unsigned n) {
    return thread_block_tile_base(n, details::block_rank(), details::block_size());
}
static inline thread_block_tile_base tiled_partition(const thread_block_tile_base& parent, unsigned n) {
    return thread_block_tile_base(n, (unsigned)parent.thread_rank(), (unsigned)parent.size());
}

static inline coalesced_group coalesced_threads(CPUCUDA_SITE) {
    return coalesced_group(cpucuda::coalesced_lanes(cpucuda_file, cpucuda_line), 32, 0, 1, false);
}

template <class Label>
static inline coalesced_group labeled_partition(const coalesced_group& parent, Label label, CPUCUDA_SITE) {
    const unsigned m = __match_any_sync(parent.get_mask(), label, cpucuda_file, cpucuda_line);
    return coalesced_group(m, 32, 0, 1, false);
}

// ---------------------------------------------------------------- free functions

static inline void sync(const thread_block& g, CPUCUDA_SITE) { g.sync(cpucuda_file, cpucuda_line); }
static inline void sync(const coalesced_group& g, CPUCUDA_SITE) { g.sync(cpucuda_file, cpucuda_line); }
template <unsigned N>
static inline void sync(const details::multi_warp_tile<N>& g, CPUCUDA_SITE) { g.sync(cpucuda_file, cpucuda_line); }
template <class D = void> static inline void sync(const grid_group& g) { g.template sync<D>(); }
template <class G> static inline unsigned long long thread_rank(const G& g) { return g.thread_rank(); }
template <class G> static inline unsigned long long group_size(const G& g) { return g.size(); }

// CUDA 11's spelling of the same (cg::experimental::block_tile_memory<TileCommunicationSize, MaxBlockSize>).
namespace experimental {
template <size_t TileCommunicationSize = 8, unsigned int MaxBlockSize = 1024>
struct block_tile_memory : cooperative_groups::block_tile_memory<MaxBlockSize> {};
template <size_t S, unsigned int MaxBlockSize>
static inline thread_block this_thread_block(block_tile_memory<S, MaxBlockSize>& scratch, CPUCUDA_SITE) {
    return cooperative_groups::this_thread_block(
        static_cast<cooperative_groups::block_tile_memory<MaxBlockSize>&>(scratch), cpucuda_file, cpucuda_line);
}
using cooperative_groups::tiled_partition;
}  // namespace experimental

}  // namespace cooperative_groups

namespace cg = cooperative_groups;
