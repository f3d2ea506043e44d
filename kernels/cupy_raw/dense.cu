// cupy.dense: the gqa / rows kernel (ROW_MAPPED false / true) reading a contiguous cache
// [num_seqs, max_context, num_kv_heads, HEAD_DIM] with no block table: the no-paging baseline.
// BLOCK_SIZE only sets the thread mapping of gqa (tokens a warp takes at once), so each paged block
// size has its twin. Same grid, partitions, options, shared memory and reduce as gqa.
// THREADS: threads per block (TUNABLES["threads"] of the variant; default pa::NUM_THREADS = 128).
// T: query/output type; C: cache type (T or fp8); OPTS: pa::OPT_* bitmask (0: plain, no option code compiled in).
#include "common.cuh"

template <int BLOCK_SIZE, int HEAD_DIM, int TILE, typename T, bool ROW_MAPPED, typename C = T, int OPTS = 0, int THREADS = pa::NUM_THREADS>
__global__ void __launch_bounds__(THREADS)
    dense_attention(float* __restrict__ tmp_out,      // [num_seqs, num_heads, max_partitions, HEAD_DIM]
                    float* __restrict__ max_logits,   // [num_seqs, num_heads, max_partitions]
                    float* __restrict__ exp_sums,     // [num_seqs, num_heads, max_partitions]
                    const T* __restrict__ query,      // [num_seqs, num_heads, HEAD_DIM]
                    const C* __restrict__ key_cache,  // [num_seqs, max_context, num_kv_heads, HEAD_DIM]
                    const C* __restrict__ value_cache,
                    const int* __restrict__ context_lens, int max_context, int block_size, int num_heads,
                    int num_kv_heads,
                    float scale, int partition_size, int max_partitions,
                    PA_OPTION_PARAMS) {
  extern __shared__ float smem[];
  const int seq = blockIdx.y, part = blockIdx.z;
  const int context_len = context_lens[seq];
  const int start = pa::first_token(OPTS, context_len, window_left) + part * partition_size;
  if (start >= context_len) return;
  const int end = pa::imin(start + partition_size, context_len);
  const pa::HeadTile<TILE> tile(blockIdx.x, num_heads, num_kv_heads);
  // sinks and lse are the reduce's (a sink is added once, after the merge)
  const pa::Options<pa::PARTITION_FLAGS<OPTS>> opt(PA_OPTION_ARGS, tile.head0, context_len);
  const pa::DenseKV<BLOCK_SIZE> kv{(long long)seq * max_context};
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  const long long stat = ((long long)seq * num_heads + tile.head0) * max_partitions + part;
  pa::attend<BLOCK_SIZE, HEAD_DIM, TILE, ROW_MAPPED, THREADS>(kv, key_cache, value_cache, query + q_offset, tile.num_heads_here,
                                                     tile.kv_head, num_kv_heads, scale, opt, start, end,
                                                     partition_size, smem, tmp_out + stat * HEAD_DIM,
                                                     (long long)max_partitions * HEAD_DIM, max_logits + stat,
                                                     exp_sums + stat, max_partitions);
}
