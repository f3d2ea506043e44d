// wrong.cupy.window_off_by_one (negative control): cupy.v1 with one bug: the sliding window starts one
// token early (L - 2 - window_left instead of L - 1 - window_left), so one token before the window
// takes part. Its slot holds NaN or a stale value; when it opens a freed block (table entry -1) this
// control reads block 0 instead, so it stays in bounds (a real kernel would read out of bounds there).
// Without a window it is cupy.v1. Precisions and options as cupy.v1 (T, C, OPTS).
#include "v1_body.cuh"

template <int BLOCK_SIZE>
struct FreedIsBlockZeroKV {
  const int* table;
  __device__ __forceinline__ long long first_row(int b) const {
    const int block = table[b];
    return (long long)(block < 0 ? 0 : block) * BLOCK_SIZE;
  }
  __device__ __forceinline__ static FreedIsBlockZeroKV of(const int* block_tables, int seq, int max_blocks_per_seq) {
    return FreedIsBlockZeroKV{block_tables + (long long)seq * max_blocks_per_seq};
  }
};

struct StartsOneEarly : wrong::Unchanged {
  __device__ __forceinline__ static int begin(int first_token) {
    return first_token > 0 ? first_token - 1 : 0;  // BUG: the window is window_left + 2 tokens long
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_window_off_by_one(WRONG_V1_PARAMS(max_blocks_per_seq)) {
  extern __shared__ float smem[];
  wrong::v1_body<BLOCK_SIZE, HEAD_DIM, pa::Options<OPTS>, FreedIsBlockZeroKV<BLOCK_SIZE>, StartsOneEarly>(
      smem, WRONG_V1_ARGS(max_blocks_per_seq));
}
