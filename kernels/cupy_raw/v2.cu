// cupy.v2: v1 plus split-KV. Block (head, seq, partition) attends to tokens
// [first + partition * partition_size, ...) (first: the window's start, else 0) and writes a
// normalized partial output with its max logit and exp sum; pa::paged_attention_reduce (reductions.cuh)
// combines them with log-sum-exp weights. Partitions past a sequence's end return at once and are
// never read by the reduce. Dynamic shared memory: max(partition_size, 4 * HEAD_DIM) floats.
// THREADS: threads per block (TUNABLES["threads"] of the variant; default pa::NUM_THREADS = 128).
// T: query/output type; C: cache type (T or fp8); OPTS: pa::OPT_* bitmask (0: plain, no option code compiled in).
#include "common.cuh"

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0, int THREADS = pa::NUM_THREADS>
__global__ void __launch_bounds__(THREADS)
    paged_attention_v2(float* __restrict__ tmp_out,       // [num_seqs, num_heads, max_partitions, HEAD_DIM]
                       float* __restrict__ max_logits,    // [num_seqs, num_heads, max_partitions]
                       float* __restrict__ exp_sums,      // [num_seqs, num_heads, max_partitions]
                       const T* __restrict__ query,       // [num_seqs, num_heads, HEAD_DIM]
                       const C* __restrict__ key_cache,   // [num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM]
                       const C* __restrict__ value_cache,
                       const int* __restrict__ block_tables, const int* __restrict__ context_lens,
                       int max_blocks_per_seq, int num_heads, int num_kv_heads, float scale,
                       int partition_size, int max_partitions,
                       PA_OPTION_PARAMS) {
  extern __shared__ float smem[];
  const int seq = blockIdx.y, part = blockIdx.z;
  const int context_len = context_lens[seq];
  const int start = pa::first_token(OPTS, context_len, window_left) + part * partition_size;
  if (start >= context_len) return;
  const int end = pa::imin(start + partition_size, context_len);
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  // sinks and lse are the reduce's (a sink is added once, after the merge)
  const pa::Options<pa::PARTITION_FLAGS<OPTS>> opt(PA_OPTION_ARGS, tile.head0, context_len);
  const pa::PagedKV<BLOCK_SIZE> kv{block_tables + (long long)seq * max_blocks_per_seq};
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  const long long stat = ((long long)seq * num_heads + tile.head0) * max_partitions + part;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1, false, THREADS>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head, num_kv_heads,
                                      scale, opt, start, end, partition_size, smem, tmp_out + stat * HEAD_DIM,
                                      (long long)max_partitions * HEAD_DIM, max_logits + stat, exp_sums + stat,
                                      max_partitions);
}
