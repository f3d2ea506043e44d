// cupy.v1: one thread block per (sequence, query head) over the whole context (vLLM's v1 design).
// The body (thread groups, 16-byte loads, shuffles, logits in dynamic shared memory) is pa::attend
// in common.cuh. Grid (num_heads, num_seqs), 128 threads; dynamic shared memory:
// max(logits_stride, 4 * HEAD_DIM) floats, logits_stride >= max(context_lens).
#include "common.cuh"

template <int BLOCK_SIZE, int HEAD_DIM, typename T>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_v1(T* __restrict__ out,                 // [num_seqs, num_heads, HEAD_DIM]
                       const T* __restrict__ query,         // [num_seqs, num_heads, HEAD_DIM]
                       const T* __restrict__ key_cache,     // [num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM]
                       const T* __restrict__ value_cache,   // same
                       const int* __restrict__ block_tables,  // [num_seqs, max_blocks_per_seq]
                       const int* __restrict__ context_lens,  // [num_seqs]
                       int max_blocks_per_seq, int num_heads, int num_kv_heads, float scale, int logits_stride) {
  extern __shared__ float smem[];
  const int seq = blockIdx.y;
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  const pa::PagedKV<BLOCK_SIZE> kv{block_tables + (long long)seq * max_blocks_per_seq};
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head, num_kv_heads,
                                      scale, 0, context_lens[seq], logits_stride, smem, out + q_offset, HEAD_DIM,
                                      (float*)nullptr, (float*)nullptr, 0);
}
