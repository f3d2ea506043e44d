// wrong.cupy.off_by_one (negative control): cupy.v1 with one bug: the number of tokens in the last
// block is computed as (context_len - 1) % BLOCK_SIZE instead of that + 1, so the last token is
// dropped (and a context of one token attends to nothing: NaN). Reads stay in bounds.
// Precisions and options as cupy.v1 (T, C, OPTS).
#include "v1_body.cuh"

template <int BLOCK_SIZE>
struct DropsLastToken : wrong::Unchanged {
  __device__ __forceinline__ static int end(int context_len) {
    const int num_blocks = (context_len + BLOCK_SIZE - 1) / BLOCK_SIZE;
    const int in_last_block = (context_len - 1) % BLOCK_SIZE;  // BUG: should be + 1
    return (num_blocks - 1) * BLOCK_SIZE + in_last_block;
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_off_by_one(WRONG_V1_PARAMS(max_blocks_per_seq)) {
  extern __shared__ float smem[];
  wrong::v1_body<BLOCK_SIZE, HEAD_DIM, pa::Options<OPTS>, wrong::TableKV<BLOCK_SIZE>, DropsLastToken<BLOCK_SIZE>>(
      smem, WRONG_V1_ARGS(max_blocks_per_seq));
}
