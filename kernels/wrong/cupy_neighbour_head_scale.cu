// wrong.cupy.neighbour_head_scale (negative control): cupy.v1 with one bug in the per-token scales: K's
// scale of a token is read from the entry before its own in the flattened [slot, KV head] scales, i.e. the
// neighbouring KV head's of the same slot (for KV head 0, the previous slot's last head; entry 0 reads
// itself), an off-by-one in the index. Without per-token scales it is cupy.v1. Reads stay in bounds.
// Precisions and options as cupy.v1.
#include "../cupy_raw/common.cuh"

template <int FLAGS>
struct NeighbourHeadScale : pa::Options<FLAGS> {
  using pa::Options<FLAGS>::Options;
  __device__ __forceinline__ float k_token(long long row, int kv_head, int num_kv_heads) const {
    if constexpr ((FLAGS & pa::OPT_KV_SCALES) != 0) {
      const long long own = row * num_kv_heads + kv_head;
      return this->k_scales[own > 0 ? own - 1 : 0];  // BUG: the neighbouring head's entry, not its own
    }
    return 1.f;
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_neighbour_head_scale(T* __restrict__ out, const T* __restrict__ query, const C* __restrict__ key_cache,
                                         const C* __restrict__ value_cache, const int* __restrict__ block_tables,
                                         const int* __restrict__ context_lens, int max_blocks_per_seq, int num_heads,
                                         int num_kv_heads, float scale, int logits_stride, float* __restrict__ lse,
                                         PA_OPTION_PARAMS) {
  extern __shared__ float smem[];
  const int seq = blockIdx.y;
  const int context_len = context_lens[seq];
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  const NeighbourHeadScale<OPTS> opt(PA_OPTION_ARGS, tile.head0, context_len);
  const pa::PagedKV<BLOCK_SIZE> kv{block_tables + (long long)seq * max_blocks_per_seq};
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head, num_kv_heads,
                                      scale, opt, opt.first_token(), context_len, logits_stride, smem,
                                      out + q_offset, HEAD_DIM, (float*)nullptr, (float*)nullptr, 0,
                                      lse + (long long)seq * num_heads + tile.head0);
}
