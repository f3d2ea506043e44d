// wrong.cupy.softcap_before_scale (negative control): cupy.v1 with one bug: the soft-cap is applied to
// the raw dot product and the scale after it (scale * cap * tanh(q.k / cap) instead of
// cap * tanh(scale * q.k / cap)). Without a soft-cap it is cupy.v1. Precisions and options as cupy.v1.
#include "../cupy_raw/common.cuh"

template <int FLAGS>
struct CapBeforeScale : pa::Options<FLAGS> {
  using pa::Options<FLAGS>::Options;
  __device__ __forceinline__ float logit(float dot, float scale, float slope_g, int token) const {
    float s = dot;
    if constexpr ((FLAGS & pa::OPT_SOFTCAP) != 0) s = this->soft_cap * tanhf(s * this->inv_cap);  // BUG: before
    s *= scale;                                                                                    // the scale
    if constexpr ((FLAGS & pa::OPT_ALIBI) != 0) s += slope_g * (float)(token - this->position);
    return s;
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_softcap_before_scale(T* __restrict__ out, const T* __restrict__ query,
                                         const C* __restrict__ key_cache, const C* __restrict__ value_cache,
                                         const int* __restrict__ block_tables, const int* __restrict__ context_lens,
                                         int max_blocks_per_seq, int num_heads, int num_kv_heads, float scale,
                                         int logits_stride, float* __restrict__ lse, PA_OPTION_PARAMS) {
  extern __shared__ float smem[];
  const int seq = blockIdx.y;
  const int context_len = context_lens[seq];
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  const CapBeforeScale<OPTS> opt(PA_OPTION_ARGS, tile.head0, context_len);
  const pa::PagedKV<BLOCK_SIZE> kv{block_tables + (long long)seq * max_blocks_per_seq};
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head, num_kv_heads,
                                      scale, opt, opt.first_token(), context_len, logits_stride, smem,
                                      out + q_offset, HEAD_DIM, (float*)nullptr, (float*)nullptr, 0,
                                      lse + (long long)seq * num_heads + tile.head0);
}
