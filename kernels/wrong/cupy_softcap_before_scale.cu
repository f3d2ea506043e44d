// wrong.cupy.softcap_before_scale (negative control): cupy.v1 with one bug: the soft-cap is applied to
// the raw dot product and the scale after it (scale * cap * tanh(q.k / cap) instead of
// cap * tanh(scale * q.k / cap)). Without a soft-cap it is cupy.v1. Precisions and options as cupy.v1.
#include "v1_body.cuh"

template <int FLAGS>
struct CapBeforeScale : pa::Options<FLAGS> {
  using pa::Options<FLAGS>::Options;
  __device__ __forceinline__ float logit(float dot, float scale, const pa::ScoreAt& at) const {
    float s = dot;
    if constexpr ((FLAGS & pa::OPT_SOFTCAP) != 0) s = this->soft_cap * tanhf(s * (1.f / this->soft_cap));  // BUG:
    s *= scale;                                                                          // before the scale
    if constexpr ((FLAGS & pa::OPT_ALIBI) != 0) s += this->alibi_slopes[at.q_head] * (float)(at.kv_pos - at.q_pos);
    return s;
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_softcap_before_scale(WRONG_V1_PARAMS(max_blocks_per_seq)) {
  extern __shared__ float smem[];
  wrong::v1_body<BLOCK_SIZE, HEAD_DIM, CapBeforeScale<OPTS>>(smem, WRONG_V1_ARGS(max_blocks_per_seq));
}
