// Intercepts <cub/block/block_reduce.cuh>: cub::BlockReduce<T, BLOCK_DIM_X,
// ALGORITHM, BLOCK_DIM_Y, BLOCK_DIM_Z>. Each warp reduces by shuffles, warp
// leaders store their partials in TempStorage (declare it __shared__), one
// __syncthreads, and thread 0 combines them: the result is valid in thread 0.
#pragma once
#include "../warp/warp_reduce.cuh"

namespace cub {

template <typename T, int BLOCK_DIM_X, BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockReduce {
    using Shape = detail::BlockShape<BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z>;

  public:
    struct TempStorage {
        T warp_aggregates[Shape::WARPS];
    };

    __device__ explicit BlockReduce(TempStorage& temp) : temp_(temp) {}

    template <typename Op> __device__ T Reduce(T input, Op op) { return Reduce(input, op, Shape::THREADS); }
    template <typename Op> __device__ T Reduce(T input, Op op, int num_valid) {
        const int rank = Shape::rank(), warp = rank / 32, lane = rank % 32;
        const int warp_valid = num_valid - warp * 32;
        typename WarpReduce<T>::TempStorage unused;
        const T partial = WarpReduce<T>(unused).Reduce(input, op, warp_valid < 32 ? warp_valid : 32);
        if (lane == 0 && warp_valid > 0) temp_.warp_aggregates[warp] = partial;
        __syncthreads();
        T total = partial;
        if (rank == 0) {
            const int warps = (num_valid + 31) / 32;
            for (int w = 1; w < warps && w < Shape::WARPS; ++w) total = op(total, temp_.warp_aggregates[w]);
        }
        return total;
    }
    template <int N, typename Op> __device__ T Reduce(T (&inputs)[N], Op op) {
        T v = inputs[0];
        for (int i = 1; i < N; ++i) v = op(v, inputs[i]);
        return Reduce(v, op);
    }
    __device__ T Sum(T input) { return Reduce(input, cub::Sum()); }
    __device__ T Sum(T input, int num_valid) { return Reduce(input, cub::Sum(), num_valid); }
    template <int N> __device__ T Sum(T (&inputs)[N]) { return Reduce(inputs, cub::Sum()); }

  private:
    TempStorage& temp_;
};

}  // namespace cub
