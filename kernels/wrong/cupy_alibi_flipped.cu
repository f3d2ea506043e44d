// wrong.cupy.alibi_flipped (negative control): cupy.v1 with one bug: the ALiBi bias has the wrong sign,
// slope * (position - t) instead of slope * (t - position), so distant tokens are favoured, not
// penalized. Without ALiBi it is cupy.v1. Precisions and options as cupy.v1 (T, C, OPTS).
#include "v1_body.cuh"

template <int FLAGS>
struct FlippedAlibi : pa::Options<FLAGS> {
  using pa::Options<FLAGS>::Options;
  // BUG: the token's distance mirrored: every score modifier sees kv_pos 2p - t, so ALiBi adds
  // slope * (p - t)
  __device__ __forceinline__ float logit(float dot, float scale, const pa::ScoreAt& at) const {
    return pa::Options<FLAGS>::logit(dot, scale, pa::ScoreAt{at.q_pos, 2 * at.q_pos - at.kv_pos, at.q_head, at.kv_head});
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_alibi_flipped(WRONG_V1_PARAMS(max_blocks_per_seq)) {
  extern __shared__ float smem[];
  wrong::v1_body<BLOCK_SIZE, HEAD_DIM, FlippedAlibi<OPTS>>(smem, WRONG_V1_ARGS(max_blocks_per_seq));
}
