// warp.cuh: warps, thread counts and the warp-level reductions every CUDA C kernel here uses.
#pragma once

namespace pa {

constexpr int WARP = 32;
// The default threads per block. A variant's kernels take their thread count as a template argument
// (THREADS, a multiple of 32; kernels/cupy_raw/<variant>.py TUNABLES["threads"]); NUM_THREADS is its default
// and the thread count of the kernels that have no such argument.
constexpr int NUM_THREADS = 128;
constexpr int NUM_WARPS = NUM_THREADS / WARP;
constexpr unsigned FULL_MASK = 0xffffffffu;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// Sum over aligned groups of WIDTH lanes (a power of two <= 32); every lane of the warp calls it.
template <int WIDTH>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int m = WIDTH / 2; m >= 1; m /= 2) x += __shfl_xor_sync(FULL_MASK, x, m);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int m = WARP / 2; m >= 1; m /= 2) x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, m));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) { return group_sum<WARP>(x); }

}  // namespace pa
