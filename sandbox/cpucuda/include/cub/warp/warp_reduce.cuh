// Intercepts <cub/warp/warp_reduce.cuh>: cub::WarpReduce<T, LOGICAL_WARP_THREADS>.
// Sum / Reduce over a logical warp (a power of two <= 32 lanes, aligned), by
// shuffle-down steps; the result is valid in the logical warp's first lane.
// The overloads with `valid_items` reduce only the first valid_items lanes.
#pragma once
#include "../util_type.cuh"

namespace cub {

template <typename T, int LOGICAL_WARP_THREADS = 32, int LEGACY_PTX_ARCH = 0>
class WarpReduce {
    static_assert(LOGICAL_WARP_THREADS > 0 && LOGICAL_WARP_THREADS <= 32 &&
                      (LOGICAL_WARP_THREADS & (LOGICAL_WARP_THREADS - 1)) == 0,
                  "cub::WarpReduce on sandbox.cpucuda: LOGICAL_WARP_THREADS must be a power of two <= 32");

  public:
    struct TempStorage {};  // shuffles need no shared memory

    __device__ explicit WarpReduce(TempStorage&) {}

    template <typename Op> __device__ T Reduce(T input, Op op) { return Reduce(input, op, LOGICAL_WARP_THREADS); }
    template <typename Op> __device__ T Reduce(T input, Op op, int valid_items) {
        const unsigned lane = cpucuda::g.cur->lane;
        const unsigned base = lane & ~(unsigned)(LOGICAL_WARP_THREADS - 1);
        const unsigned low = LOGICAL_WARP_THREADS == 32 ? ~0u : (1u << LOGICAL_WARP_THREADS) - 1u;
        const unsigned mask = (low << base) & cpucuda::g.warps[cpucuda::g.cur->warp].existing;
        const int me = (int)(lane - base);
        for (int offset = 1; offset < LOGICAL_WARP_THREADS; offset *= 2) {
            const T other = __shfl_down_sync(mask, input, offset, LOGICAL_WARP_THREADS);
            if (me + offset < valid_items && (me & (2 * offset - 1)) == 0) input = op(input, other);
        }
        return input;
    }
    __device__ T Sum(T input) { return Reduce(input, cub::Sum()); }
    __device__ T Sum(T input, int valid_items) { return Reduce(input, cub::Sum(), valid_items); }
};

}  // namespace cub
