// wrong.cupy.neighbour_head_scale (negative control): cupy.v1 with one bug in the per-token scales: K's
// scale of a token is read from the entry before its own in the flattened [slot, KV head] scales, i.e. the
// neighbouring KV head's of the same slot (for KV head 0, the previous slot's last head; entry 0 reads
// itself), an off-by-one in the index. Without per-token scales it is cupy.v1. Reads stay in bounds.
// Precisions and options as cupy.v1.
#include "v1_body.cuh"

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
    paged_attention_neighbour_head_scale(WRONG_V1_PARAMS(max_blocks_per_seq)) {
  extern __shared__ float smem[];
  wrong::v1_body<BLOCK_SIZE, HEAD_DIM, NeighbourHeadScale<OPTS>>(smem, WRONG_V1_ARGS(max_blocks_per_seq));
}
