// wrong.cupy.off_by_one (negative control): cupy.v1 with one bug: the number of tokens in the last
// block is computed as (context_len - 1) % BLOCK_SIZE instead of that + 1, so the last token is
// dropped (and a context of one token attends to nothing: NaN). Reads stay in bounds.
// Precisions and options as cupy.v1 (T, C, OPTS).
#include "../cupy_raw/common.cuh"

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_off_by_one(T* __restrict__ out, const T* __restrict__ query, const C* __restrict__ key_cache,
                               const C* __restrict__ value_cache, const int* __restrict__ block_tables,
                               const int* __restrict__ context_lens, int max_blocks_per_seq, int num_heads,
                               int num_kv_heads, float scale, int logits_stride, float* __restrict__ lse, PA_OPTION_PARAMS) {
  extern __shared__ float smem[];
  const int seq = blockIdx.y;
  const int context_len = context_lens[seq];
  const int num_blocks = (context_len + BLOCK_SIZE - 1) / BLOCK_SIZE;
  const int in_last_block = (context_len - 1) % BLOCK_SIZE;  // BUG: should be + 1
  const int end = (num_blocks - 1) * BLOCK_SIZE + in_last_block;
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  const pa::Options<OPTS> opt(PA_OPTION_ARGS, tile.head0, context_len);
  const pa::PagedKV<BLOCK_SIZE> kv{block_tables + (long long)seq * max_blocks_per_seq};
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head, num_kv_heads,
                                      scale, opt, opt.first_token(), end, logits_stride, smem, out + q_offset,
                                      HEAD_DIM, (float*)nullptr, (float*)nullptr, 0,
                                      lse + (long long)seq * num_heads + tile.head0);
}
