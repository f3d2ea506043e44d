// cupy.v1: one thread block per (sequence, query head) over the whole context (vLLM's v1 design).
// The body (thread groups, 16-byte loads, shuffles, logits in dynamic shared memory) is pa::attend
// in attend.cuh. Grid (num_heads, num_seqs), 128 threads; dynamic shared memory:
// max(logits_stride, 4 * HEAD_DIM) floats, logits_stride >= the most tokens a sequence reads.
// THREADS: threads per block (TUNABLES["threads"] of the variant; default pa::NUM_THREADS = 128).
// T: query/output type; C: cache type (T or fp8); OPTS: pa::OPT_* bitmask of the options compiled in
// (0: plain attention, no option code compiled in; the option arguments, PA_OPTION_PARAMS in the option
// table's order, are then never read). With OPT_WINDOW a sequence reads tokens [max(0, L - 1 - window_left), L).
#include "common.cuh"

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0, int THREADS = pa::NUM_THREADS>
__global__ void __launch_bounds__(THREADS)
    paged_attention_v1(T* __restrict__ out,                 // [num_seqs, num_heads, HEAD_DIM]
                       const T* __restrict__ query,         // [num_seqs, num_heads, HEAD_DIM]
                       const C* __restrict__ key_cache,     // [num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM]
                       const C* __restrict__ value_cache,   // same
                       const int* __restrict__ block_tables,  // [num_seqs, max_blocks_per_seq]
                       const int* __restrict__ context_lens,  // [num_seqs]
                       int max_blocks_per_seq, int num_heads, int num_kv_heads,
                       float scale,                          // softmax scale * k_scale
                       int logits_stride,
                       float* __restrict__ lse,              // [num_seqs, num_heads], written with OPT_LSE
                       PA_OPTION_PARAMS) {                   // the option table's (read only when compiled in)
  extern __shared__ float smem[];
  const int seq = blockIdx.y;
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  const pa::Options<OPTS> opt(PA_OPTION_ARGS, tile.head0, context_lens[seq]);
  const pa::PagedKV<BLOCK_SIZE> kv{block_tables + (long long)seq * max_blocks_per_seq};
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1, false, THREADS>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head,
                                                      num_kv_heads, scale, opt, opt.first_token(), context_lens[seq],
                                                      logits_stride, smem, out + q_offset, HEAD_DIM, (float*)nullptr,
                                                      (float*)nullptr, 0, lse + (long long)seq * num_heads + tile.head0);
}
