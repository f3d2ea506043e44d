// flashinfer.decode: FlashInfer's paged decode kernel body (BatchDecodeWithPagedKVCacheDevice, from the
// headers the flashinfer-python wheel ships; nothing of FlashInfer is copied here) behind a launcher of ours
// that takes flat arguments, so CuPy's RawModule and the CPU executor pass plain arrays and scalars.
//
// The template arguments are what FlashInfer's BatchDecodeWithPagedKVCacheDispatched picks (see decode.py):
// vec_size, bdx = HEAD_DIM / vec_size, bdy = GQA group, bdz, tile_size_per_bdx, NUM_STAGES_SMEM = 2 (sm_80+).
// Layout NHD: k/v cache [num_pages, page_size, num_kv_heads, HEAD_DIM]; q [batch, num_qo_heads, HEAD_DIM].
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/variants.cuh>

namespace sandbox_fi {

using flashinfer::BatchDecodeParams;
using flashinfer::DefaultAttention;
using flashinfer::PosEncodingMode;

// uint_fastdiv's divisor constructor is host-only (FlashInfer builds its params on the host); the launcher
// builds them on the device, so it fills the same two members through a layout twin.
struct FastDivTwin {
  cuda::fast_mod_div<uint32_t> impl;
  uint32_t d;
};
static_assert(sizeof(FastDivTwin) == sizeof(flashinfer::uint_fastdiv), "uint_fastdiv changed its layout");

template <uint32_t NUM_STAGES_SMEM, uint32_t TILE_SIZE_PER_BDX, uint32_t VEC_SIZE, uint32_t BDX, uint32_t BDY,
          uint32_t BDZ, bool SOFT_CAP, bool WINDOW, typename DTypeQ, typename DTypeKV>
__global__ void decode(const DTypeQ* q, const DTypeKV* key_cache, const DTypeKV* value_cache, const int32_t* kv_indices,
                       const int32_t* kv_indptr, const int32_t* kv_last_page_len, const int32_t* request_indices,
                       const int32_t* kv_tile_indices, const int32_t* kv_chunk_size, DTypeQ* o, float* lse,
                       uint32_t batch_size, uint32_t padded_batch_size, uint32_t num_qo_heads,
                       uint32_t num_kv_heads, uint32_t page_size, int32_t window_left, float logits_soft_cap,
                       float sm_scale, bool partition_kv) {
  using Params = BatchDecodeParams<DTypeQ, DTypeKV, DTypeQ, int32_t>;
  using Variant = DefaultAttention<false, WINDOW, SOFT_CAP, false>;
  constexpr uint32_t HEAD_DIM = BDX * VEC_SIZE;
  extern __shared__ uint8_t smem[];
  Params params;
  params.q = const_cast<DTypeQ*>(q);
  params.paged_kv.num_heads = num_kv_heads;
  params.paged_kv.head_dim = HEAD_DIM;
  params.paged_kv.batch_size = batch_size;
  params.paged_kv.stride_page = num_kv_heads * page_size * HEAD_DIM;
  params.paged_kv.stride_n = num_kv_heads * HEAD_DIM;
  params.paged_kv.stride_h = HEAD_DIM;
  params.paged_kv.v_stride_page = params.paged_kv.stride_page;
  params.paged_kv.v_stride_n = params.paged_kv.stride_n;
  params.paged_kv.v_stride_h = params.paged_kv.stride_h;
  params.paged_kv.k_data = const_cast<DTypeKV*>(key_cache);
  params.paged_kv.v_data = const_cast<DTypeKV*>(value_cache);
  params.paged_kv.indices = const_cast<int32_t*>(kv_indices);
  params.paged_kv.indptr = const_cast<int32_t*>(kv_indptr);
  params.paged_kv.last_page_len = const_cast<int32_t*>(kv_last_page_len);
  const FastDivTwin page_div{cuda::fast_mod_div<uint32_t>(page_size), page_size};
  memcpy(&params.paged_kv.page_size, &page_div, sizeof(page_div));
  params.o = o;
  params.lse = lse;
  params.padded_batch_size = padded_batch_size;
  params.num_qo_heads = num_qo_heads;
  params.q_stride_n = num_qo_heads * HEAD_DIM;
  params.q_stride_h = HEAD_DIM;
  params.window_left = window_left;
  params.logits_soft_cap = logits_soft_cap;
  params.sm_scale = sm_scale;
  params.rope_rcp_scale = 1.f;
  params.rope_rcp_theta = 1.f;
  params.request_indices = const_cast<int32_t*>(request_indices);
  params.kv_tile_indices = const_cast<int32_t*>(kv_tile_indices);
  params.kv_chunk_size_ptr = const_cast<int32_t*>(kv_chunk_size);
  params.partition_kv = partition_kv;
  flashinfer::BatchDecodeWithPagedKVCacheDevice<PosEncodingMode::kNone, NUM_STAGES_SMEM, TILE_SIZE_PER_BDX,
                                                VEC_SIZE, BDX, BDY, BDZ, Variant>(params, smem);
}

}  // namespace sandbox_fi
