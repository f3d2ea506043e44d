// wrong.cupy.alibi_flipped (negative control): cupy.v1 with one bug: the ALiBi bias has the wrong sign,
// slope * (position - t) instead of slope * (t - position), so distant tokens are favoured, not
// penalized. Without ALiBi it is cupy.v1. Precisions and options as cupy.v1 (T, C, OPTS).
#include "v1_body.cuh"

template <int FLAGS>
struct FlippedAlibi : pa::Options<FLAGS> {
  using pa::Options<FLAGS>::Options;
  __device__ __forceinline__ float logit(float dot, float scale, float slope_g, int token) const {
    float s = dot * scale;
    if constexpr ((FLAGS & pa::OPT_SOFTCAP) != 0) s = this->soft_cap * tanhf(s * this->inv_cap);
    if constexpr ((FLAGS & pa::OPT_ALIBI) != 0) s += slope_g * (float)(this->position - token);  // BUG: sign
    return s;
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_alibi_flipped(WRONG_V1_PARAMS(max_blocks_per_seq)) {
  extern __shared__ float smem[];
  wrong::v1_body<BLOCK_SIZE, HEAD_DIM, FlippedAlibi<OPTS>>(smem, WRONG_V1_ARGS(max_blocks_per_seq));
}
