// cupy.multi (and cupy.cascade, the same kernels over another work list): tiles of query rows
// (query tokens x the heads of a GQA group) that load each K/V element once per tile; split-KV
// partitions merged by log-sum-exp. The kernel body, thread mapping and shared memory are in
// multi.cuh.
// paged_attention_multi<HEAD_DIM, T, C = T, OPTS = 0, THREADS = 128>: T the query/output type, C the cache's (T or
// fp8), OPTS the pa::OPT_* bitmask compiled in (0: the plain kernel), THREADS the block's threads. The block size is a runtime
// value (any size): every K/V row is found through the table on its own.
// Grid (num_tiles, num_kv_heads * head chunks, max partitions per tile), THREADS threads; the merge: 128.
// paged_attention_merge<HEAD_DIM, T>: grid (total_q, num_heads), max_slots floats of shared memory.
#include "multi.cuh"

template <int HEAD_DIM, typename T, typename C = T, int OPTS = 0, int THREADS = pa::NUM_THREADS>
__global__ void __launch_bounds__(THREADS)
    paged_attention_multi(T* __restrict__ out,             // [total_q, num_heads, HEAD_DIM]
                          float* __restrict__ tmp_out,     // [total_q, num_heads, max_slots, HEAD_DIM]
                          float* __restrict__ max_out,     // [total_q, num_heads, max_slots]
                          float* __restrict__ sum_out,     // [total_q, num_heads, max_slots]
                          const T* __restrict__ query,     // [total_q, num_heads, HEAD_DIM]
                          const C* __restrict__ key_cache, // [num_blocks, block_size, num_kv_heads, HEAD_DIM]
                          const C* __restrict__ value_cache,
                          const int* __restrict__ block_tables, int max_blocks_per_seq,
                          const int* __restrict__ tiles, const int* __restrict__ tile_rows,
                          const int* __restrict__ row_slots, int tile_tokens, int num_heads, int num_kv_heads,
                          int head_chunk, int block_size, float scale, int partition_size, int max_slots,
                          float* __restrict__ lse,  // [total_q, num_heads], written with OPT_LSE
                          PA_OPTION_PARAMS) {
  mq::tile_attention<HEAD_DIM, T, C, OPTS, mq::Causal, THREADS>(
      out, tmp_out, max_out, sum_out, query, key_cache, value_cache, block_tables, max_blocks_per_seq, tiles,
      tile_rows, row_slots, tile_tokens, num_heads, num_kv_heads, head_chunk, block_size, scale, partition_size,
      max_slots, lse, PA_OPTION_ARGS);
}
