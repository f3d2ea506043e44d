// wrong.cupy.lse_base2 (negative control): cupy.v1 with one bug: the log-sum-exp it returns is in base 2
// (log2 sum_t exp(s_t), as FlashInfer and FlashMLA return it) where the contract asks for the natural log
// that vLLM's merge takes. The output is cupy.v1's. Precisions and options as cupy.v1.
#include "v1_body.cuh"

template <int FLAGS>
struct Base2Lse : pa::Options<FLAGS> {
  using pa::Options<FLAGS>::Options;
  __device__ __forceinline__ float lse(float max, float total) const {
    return total > 0.f ? (max + logf(total)) * 1.4426950408889634f : pa::neg_inf();  // BUG: log2, not ln
  }
};

template <int BLOCK_SIZE, int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_lse_base2(WRONG_V1_PARAMS(max_blocks_per_seq)) {
  extern __shared__ float smem[];
  wrong::v1_body<BLOCK_SIZE, HEAD_DIM, Base2Lse<OPTS>>(smem, WRONG_V1_ARGS(max_blocks_per_seq));
}
