// Intercepts <cub/block/block_scan.cuh>: cub::BlockScan<T, BLOCK_DIM_X,
// ALGORITHM, BLOCK_DIM_Y, BLOCK_DIM_Z>: InclusiveSum, ExclusiveSum,
// InclusiveScan and ExclusiveScan with an operator, one item per thread,
// optionally returning the block aggregate. Warps scan by shuffle-up steps,
// warp totals go through TempStorage (declare it __shared__) and one
// __syncthreads.
#pragma once
#include "../util_type.cuh"

namespace cub {

template <typename T, int BLOCK_DIM_X, BlockScanAlgorithm ALGORITHM = BLOCK_SCAN_RAKING, int BLOCK_DIM_Y = 1,
          int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockScan {
    using Shape = detail::BlockShape<BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z>;

  public:
    struct TempStorage {
        T warp_totals[Shape::WARPS];
    };

    __device__ explicit BlockScan(TempStorage& temp) : temp_(temp) {}

    template <typename Op> __device__ void InclusiveScan(T input, T& output, Op op, T& block_aggregate) {
        const int rank = Shape::rank(), warp = rank / 32, lane = rank % 32;
        const unsigned mask = cpucuda::g.warps[cpucuda::g.cur->warp].existing;
        T x = input;
        for (int offset = 1; offset < 32; offset *= 2) {
            const T y = __shfl_up_sync(mask, x, offset);
            if (lane >= offset) x = op(y, x);
        }
        const int last = 31 - __builtin_clz(mask);  // the warp's last existing lane
        if (lane == last) temp_.warp_totals[warp] = x;
        __syncthreads();
        T prefix = x, aggregate = temp_.warp_totals[0];
        bool have_prefix = false;
        for (int w = 0; w < Shape::WARPS; ++w) {
            if (w > 0) aggregate = op(aggregate, temp_.warp_totals[w]);
            if (w < warp) {
                prefix = have_prefix ? op(prefix, temp_.warp_totals[w]) : temp_.warp_totals[w];
                have_prefix = true;
            }
        }
        output = have_prefix ? op(prefix, x) : x;
        block_aggregate = aggregate;
    }
    template <typename Op> __device__ void InclusiveScan(T input, T& output, Op op) {
        T aggregate;
        InclusiveScan(input, output, op, aggregate);
    }
    // Exclusive: the inclusive result of the previous thread; thread 0 gets `initial`.
    template <typename Op> __device__ void ExclusiveScan(T input, T& output, T initial, Op op, T& block_aggregate) {
        T inclusive;
        InclusiveScan(input, inclusive, op, block_aggregate);
        const int rank = Shape::rank(), lane = rank % 32;
        const unsigned mask = cpucuda::g.warps[cpucuda::g.cur->warp].existing;
        T previous = __shfl_up_sync(mask, inclusive, 1);
        // Lane 0 of a warp: the last inclusive value of the warp before, i.e. inclusive minus own
        // contribution, which for a general operator is rebuilt from the warp totals.
        if (lane == 0) {
            const int warp = rank / 32;
            previous = initial;
            for (int w = 0; w < warp; ++w) previous = op(previous, temp_.warp_totals[w]);
            output = previous;
        } else {
            output = op(initial, previous);
        }
    }
    template <typename Op> __device__ void ExclusiveScan(T input, T& output, T initial, Op op) {
        T aggregate;
        ExclusiveScan(input, output, initial, op, aggregate);
    }
    __device__ void InclusiveSum(T input, T& output) { InclusiveScan(input, output, cub::Sum()); }
    __device__ void InclusiveSum(T input, T& output, T& block_aggregate) {
        InclusiveScan(input, output, cub::Sum(), block_aggregate);
    }
    __device__ void ExclusiveSum(T input, T& output) { ExclusiveScan(input, output, T(0), cub::Sum()); }
    __device__ void ExclusiveSum(T input, T& output, T& block_aggregate) {
        ExclusiveScan(input, output, T(0), cub::Sum(), block_aggregate);
    }

  private:
    TempStorage& temp_;
};

}  // namespace cub
