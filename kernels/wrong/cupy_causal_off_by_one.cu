// wrong.cupy.causal_off_by_one (negative control): cupy.multi with one bug in the causal mask: a query
// token at position p also sees token p + 1 (t <= p + 1), and the tile's token range ends one token later
// to match (clipped to the context, so reads stay in bounds). Decode is unaffected (the last query token
// has no token after it); every other query token of a multi-token query attends one token too far.
// Precisions and options as cupy.multi (T, C, OPTS).
#include "../cupy_raw/multi.cuh"

struct SeesNextToken {
  __device__ __forceinline__ static bool visible(int t, int position, int lo) {
    return t <= position + 1 && t >= lo;  // BUG: should be t <= position
  }
};

template <int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_causal_off_by_one(T* __restrict__ out, float* __restrict__ tmp_out, float* __restrict__ max_out,
                                      float* __restrict__ sum_out, const T* __restrict__ query,
                                      const C* __restrict__ key_cache, const C* __restrict__ value_cache,
                                      const int* __restrict__ block_tables, int max_blocks_per_seq,
                                      const int* __restrict__ tiles, const int* __restrict__ tile_rows,
                                      const int* __restrict__ row_slots, int tile_tokens, int num_heads,
                                      int num_kv_heads, int head_chunk, int block_size, float scale,
                                      int partition_size, int max_slots, float* __restrict__ lse,
                                      PA_OPTION_PARAMS) {
  mq::tile_attention<HEAD_DIM, T, C, OPTS, SeesNextToken>(
      out, tmp_out, max_out, sum_out, query, key_cache, value_cache, block_tables, max_blocks_per_seq, tiles,
      tile_rows, row_slots, tile_tokens, num_heads, num_kv_heads, head_chunk, block_size, scale, partition_size,
      max_slots, lse, PA_OPTION_ARGS);
}
