// wrong.cupy.window_off_by_one (negative control): cupy.v1 with one bug: the sliding window starts one
// token early (L - 2 - window_left instead of L - 1 - window_left), so one token before the window
// takes part. Its slot holds NaN or a stale value; when it opens a freed block (table entry -1) this
// control reads block 0 instead, so it stays in bounds (a real kernel would read out of bounds there).
// Without a window it is cupy.v1. Precisions and options as cupy.v1 (T, C, OPTS).
#include "../cupy_raw/common.cuh"

template <int BLOCK_SIZE>
struct FreedIsBlockZeroKV {
  const int* table;
  __device__ __forceinline__ long long first_row(int b) const {
    const int block = table[b];
    return (long long)(block < 0 ? 0 : block) * BLOCK_SIZE;
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_window_off_by_one(T* __restrict__ out, const T* __restrict__ query,
                                      const C* __restrict__ key_cache, const C* __restrict__ value_cache,
                                      const int* __restrict__ block_tables, const int* __restrict__ context_lens,
                                      int max_blocks_per_seq, int num_heads, int num_kv_heads, float scale,
                                      int logits_stride, float* __restrict__ lse, PA_OPTION_PARAMS) {
  extern __shared__ float smem[];
  const int seq = blockIdx.y;
  const int context_len = context_lens[seq];
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  const pa::Options<OPTS> opt(PA_OPTION_ARGS, tile.head0, context_len);
  int start = opt.first_token();
  if (start > 0) start -= 1;  // BUG: the window is window_left + 2 tokens long
  const FreedIsBlockZeroKV<BLOCK_SIZE> kv{block_tables + (long long)seq * max_blocks_per_seq};
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head, num_kv_heads,
                                      scale, opt, start, context_len, logits_stride, smem, out + q_offset, HEAD_DIM,
                                      (float*)nullptr, (float*)nullptr, 0,
                                      lse + (long long)seq * num_heads + tile.head0);
}
