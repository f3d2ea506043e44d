// wrong.cupy.ignores_table (negative control): cupy.v1 with one bug: it never reads the block
// table and takes logical block b to be physical block b (modulo num_blocks, so it stays in bounds),
// as if the cache were contiguous. Right only when the table is the identity, which tests never draw.
// Precisions and options as cupy.v1 (T, C, OPTS).
#include "../cupy_raw/common.cuh"

template <int BLOCK_SIZE>
struct IgnoresTableKV {
  int num_blocks;
  __device__ __forceinline__ long long first_row(int b) const { return (long long)(b % num_blocks) * BLOCK_SIZE; }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_ignores_table(T* __restrict__ out, const T* __restrict__ query, const C* __restrict__ key_cache,
                                  const C* __restrict__ value_cache, const int* __restrict__ block_tables,
                                  const int* __restrict__ context_lens, int num_blocks, int num_heads,
                                  int num_kv_heads, float scale, int logits_stride, float* __restrict__ lse, PA_OPTION_PARAMS) {
  extern __shared__ float smem[];
  const int seq = blockIdx.y;
  const int context_len = context_lens[seq];
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  const pa::Options<OPTS> opt(PA_OPTION_ARGS, tile.head0, context_len);
  const IgnoresTableKV<BLOCK_SIZE> kv{num_blocks};  // BUG: block_tables is never read
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head, num_kv_heads,
                                      scale, opt, opt.first_token(), context_len, logits_stride, smem,
                                      out + q_offset, HEAD_DIM, (float*)nullptr, (float*)nullptr, 0,
                                      lse + (long long)seq * num_heads + tile.head0);
}
