// wrong.cupy.ignores_table (negative control): cupy.v1 with one bug: it never reads the block
// table and takes logical block b to be physical block b (modulo num_blocks, so it stays in bounds),
// as if the cache were contiguous. Right only when the table is the identity, which tests never draw.
// Precisions and options as cupy.v1 (T, C, OPTS).
#include "v1_body.cuh"

template <int BLOCK_SIZE>
struct IgnoresTableKV {
  int num_blocks;
  __device__ __forceinline__ long long first_row(int b) const { return (long long)(b % num_blocks) * BLOCK_SIZE; }
  __device__ __forceinline__ static IgnoresTableKV of(const int*, int, int num_blocks) {
    return IgnoresTableKV{num_blocks};  // BUG: block_tables is never read
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_ignores_table(WRONG_V1_PARAMS(num_blocks)) {
  extern __shared__ float smem[];
  wrong::v1_body<BLOCK_SIZE, HEAD_DIM, pa::Options<OPTS>, IgnoresTableKV<BLOCK_SIZE>>(
      smem, WRONG_V1_ARGS(num_blocks));
}
