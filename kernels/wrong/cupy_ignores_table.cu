// wrong.cupy.ignores_table (negative control): cupy.v1 with one bug: it never reads the block
// table and takes logical block b to be physical block b (modulo num_blocks, so it stays in bounds),
// as if the cache were contiguous. Right only when the table is the identity, which tests never draw.
#include "../cupy_raw/common.cuh"

template <int BLOCK_SIZE>
struct IgnoresTableKV {
  int num_blocks;
  __device__ __forceinline__ long long first_row(int b) const { return (long long)(b % num_blocks) * BLOCK_SIZE; }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_ignores_table(T* __restrict__ out, const T* __restrict__ query, const T* __restrict__ key_cache,
                                  const T* __restrict__ value_cache, const int* __restrict__ block_tables,
                                  const int* __restrict__ context_lens, int num_blocks, int num_heads,
                                  int num_kv_heads, float scale, int logits_stride) {
  extern __shared__ float smem[];
  const int seq = blockIdx.y;
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  const IgnoresTableKV<BLOCK_SIZE> kv{num_blocks};  // BUG: block_tables is never read
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head, num_kv_heads,
                                      scale, 0, context_lens[seq], logits_stride, smem, out + q_offset, HEAD_DIM,
                                      (float*)nullptr, (float*)nullptr, 0);
}
