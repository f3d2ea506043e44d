// rows.cuh: the row mapping, cupy.rows's idea (attend<..., ROW_MAPPED = true>).
//
// The thread mapping ignores the block size. K: TGS = NUM_VECS / 4 lanes per token (4 vectors each, 64 bytes
// for head dim 128 in fp16; NVFP4: one 32-value vector each), a warp loads UK passes of 32 / TGS tokens (8
// vectors per lane, 4 KiB per warp) before any math; V: each lane loads UV token rows (128 bytes) before any
// math. Each token row is found through the table on its own (an L1 hit), so a block size of 1 keeps as many
// bytes in flight as 256; the block size only sets the index arithmetic.
#pragma once
#include "kv_access.cuh"

namespace pa {

// Lane bytes in flight the row-mapped phases aim at: 8 16-byte vectors (UK, UV below).
constexpr int ROW_BYTES_IN_FLIGHT = 128;

// Lanes per token in the row-mapped K phase: LANE_VECS vectors each (a power of two, at most a warp).
template <int NUM_VECS, int LANE_VECS = 4>
__host__ __device__ constexpr int row_group_size() {
  int tgs = 1;
  while (tgs * 2 <= NUM_VECS / LANE_VECS && tgs < WARP) tgs *= 2;
  return tgs;
}

// K phase, row-mapped (cupy.rows): TGS lanes per token whatever the block size; a warp takes chunks of
// UK * (32 / TGS) consecutive tokens and issues every load of a chunk (8 vectors per lane) before
// its math. Each token's row is looked up on its own: kv.row(t).
template <int BLOCK_SIZE, int HEAD_DIM, int TILE, int THREADS, typename T, typename KV, typename Opt>
__device__ __forceinline__ void row_mapped_logits(const KV& kv, const T* __restrict__ k_head, long long kv_stride,
                                                  int kv_head, int num_kv_heads,
                                                  const float* q_smem, float scale, const Opt& opt,
                                                  int heads_here, const HeadParams (&heads)[TILE], int start,
                                                  int end,
                                                  float* logits, int logits_stride, float (&qk_max)[TILE]) {
  using RV = CacheVec<T, HEAD_DIM>;
  constexpr int VEC = RV::VALUES;
  constexpr int NUM_VECS = HEAD_DIM / VEC;
  constexpr int TGS = row_group_size<NUM_VECS, RV::LANE_VECS>();
  constexpr int K_VECS = (NUM_VECS + TGS - 1) / TGS;  // vectors per lane per token
  constexpr int TOKENS_PER_PASS = WARP / TGS;
  // passes whose loads are in flight together: ROW_BYTES_IN_FLIGHT per lane (8 16-byte vectors)
  constexpr int LANE_BYTES = K_VECS * (int)sizeof(typename RV::Vec);
  constexpr int UK = LANE_BYTES >= ROW_BYTES_IN_FLIGHT ? 1 : ROW_BYTES_IN_FLIGHT / LANE_BYTES;
  constexpr int CHUNK = UK * TOKENS_PER_PASS;
  constexpr int NUM_WARPS = THREADS / WARP;
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int group = lane / TGS, lane_in_group = lane % TGS;
  for (int c0 = start + warp * CHUNK; c0 < end; c0 += NUM_WARPS * CHUNK) {
    typename RV::Vec kp[UK][K_VECS];
    typename RV::Scales ks[UK][K_VECS];  // NVFP4: each vector's block scales, loaded beside it
#pragma unroll
    for (int u = 0; u < UK; ++u) {
      const int t = c0 + u * TOKENS_PER_PASS + group;
      if (t < end) {
        const long long row = kv.row(t);
        const T* k = k_head + row * kv_stride;
        const unsigned char* k_scales = RV::scale_row(opt.k_block_scales, row, kv_head, num_kv_heads);
#pragma unroll
        for (int j = 0; j < K_VECS; ++j) {
          const int v = lane_in_group + j * TGS;
          if (v < NUM_VECS) {
            kp[u][j] = RV::load(k, v);
            if constexpr (RV::GROUPS != 0) ks[u][j] = RV::load_scales(k_scales, v);
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < UK; ++u) {
      const int t = c0 + u * TOKENS_PER_PASS + group;
      float qk[TILE];
#pragma unroll
      for (int g = 0; g < TILE; ++g) qk[g] = 0.f;
      if (t < end) accumulate_qk<HEAD_DIM, TILE, TGS, T>(kp[u], ks[u], q_smem, lane_in_group, qk);
      store_logits<TILE, TGS>(qk, scale, opt, kv_head, heads_here, heads, t, t < end, lane_in_group == 0, t - start, logits,
                              logits_stride, qk_max, t < end ? opt.k_token(kv.row(t), kv_head, num_kv_heads) : 1.f);
    }
  }
}

// V phase, row-mapped (cupy.rows): each lane loads UV token rows (ROW_BYTES_IN_FLIGHT: 8 16-byte vectors, 16
// NVFP4 8-byte ones) before their math, each row found through the table on its own (kv.row(t)); rows past
// `end` are neither loaded nor used (their slots may hold NaN). acc[g] += p_g[t] * v_t for the lane's share
// (LPT lanes per row, ROWS rows per warp; attend's V mapping).
template <typename VRV, int TILE, int NUM_VECS, int LPT, int ROWS, int THREADS, bool KV_SCALED, typename T,
          typename KV, typename Opt, int ACC>
__device__ __forceinline__ void row_mapped_values(const KV& kv, const T* __restrict__ v_head, long long kv_stride,
                                                  int kv_head, int num_kv_heads, const Opt& opt, int start, int end,
                                                  const float* logits, int logits_stride, int warp, int row,
                                                  int lane_in_row, float (&acc)[TILE][ACC]) {
  constexpr int V_VECS = (NUM_VECS + LPT - 1) / LPT;
  constexpr int NUM_WARPS = THREADS / WARP;
  constexpr int LANE_BYTES = V_VECS * (int)sizeof(typename VRV::Vec);
  constexpr int UV = LANE_BYTES >= ROW_BYTES_IN_FLIGHT ? 1 : ROW_BYTES_IN_FLIGHT / LANE_BYTES;
  constexpr int CHUNK = UV * ROWS;
  for (int c0 = start + warp * CHUNK; c0 < end; c0 += NUM_WARPS * CHUNK) {
    typename VRV::Vec vp[UV][V_VECS];
    typename VRV::Scales vs[UV][V_VECS];  // NVFP4: each vector's block scale, loaded beside it
#pragma unroll
    for (int u = 0; u < UV; ++u) {
      const int t = c0 + u * ROWS + row;
      if (t < end) {
        const long long vrow = kv.row(t);
        load_value_row<VRV, NUM_VECS, LPT>(v_head + vrow * kv_stride,
                                           VRV::scale_row(opt.v_block_scales, vrow, kv_head, num_kv_heads),
                                           lane_in_row, vp[u], vs[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < UV; ++u) {
      const int t = c0 + u * ROWS + row;
      if (t < end)
        accumulate_pv<VRV, TILE, NUM_VECS, LPT, KV_SCALED>(vp[u], vs[u], logits + t - start, logits_stride,
                                                           lane_in_row, acc,
                                                           opt.v_token(kv.row(t), kv_head, num_kv_heads));
    }
  }
}

}  // namespace pa
