// Pieces of CUB shared by the collectives: operators and algorithm tags.
#pragma once
#include "../cpucuda_runtime.h"

#define CUB_NAMESPACE_BEGIN namespace cub {
#define CUB_NAMESPACE_END }
#define CUB_RUNTIME_FUNCTION
#define CUB_PTX_ARCH __CUDA_ARCH__

namespace cub {

struct Sum {
    template <class T> __device__ T operator()(const T& a, const T& b) const { return a + b; }
};
struct Max {
    template <class T> __device__ T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
struct Min {
    template <class T> __device__ T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};

// Accepted for source compatibility; every algorithm is the same warp-shuffle scheme here.
enum BlockReduceAlgorithm { BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY, BLOCK_REDUCE_RAKING, BLOCK_REDUCE_WARP_REDUCTIONS };
enum BlockScanAlgorithm { BLOCK_SCAN_RAKING, BLOCK_SCAN_RAKING_MEMOIZE, BLOCK_SCAN_WARP_SCANS };

namespace detail {
template <int X, int Y, int Z> struct BlockShape {
    static constexpr int THREADS = X * Y * Z;
    static constexpr int WARPS = (THREADS + 31) / 32;
    static __device__ int rank() { return (int)(threadIdx.x + X * (threadIdx.y + Y * threadIdx.z)); }
};
}  // namespace detail

}  // namespace cub
