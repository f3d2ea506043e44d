// kv_access.cuh: where a sequence's tokens live (PagedKV through the block table, DenseKV contiguous), which
// query heads a block serves (HeadTile), and the per-token steps both K/V mappings share: a lane's K vectors
// into dot products (accumulate_qk), dot products into logits (store_logits: the options' score hook), a
// lane's share of a V row (load_value_row) and its weighted sum (accumulate_pv).
#pragma once
#include "codecs.cuh"
#include "options.cuh"

namespace pa {

// Logical block b of a sequence starts at token row table[b] * BLOCK_SIZE of the paged cache.
// BLOCK_SIZE = 0 (the row-mapped kernels' any-block-size instantiation): the block size is a runtime value.
template <int BLOCK_SIZE>
struct PagedKV {
  const int* table;  // this sequence's block-table row
  __device__ __forceinline__ static PagedKV make(const int* table, int) { return PagedKV{table}; }
  __device__ __forceinline__ long long first_row(int b) const { return (long long)table[b] * BLOCK_SIZE; }
  __device__ __forceinline__ long long row(int t) const { return first_row(t / BLOCK_SIZE) + t % BLOCK_SIZE; }
};
template <>
struct PagedKV<0> {
  const int* table;
  int block_size;
  __device__ __forceinline__ static PagedKV make(const int* table, int block_size) { return PagedKV{table, block_size}; }
  __device__ __forceinline__ long long first_row(int b) const { return (long long)table[b] * block_size; }
  __device__ __forceinline__ long long row(int t) const { return first_row(t / block_size) + t % block_size; }
};

// A contiguous cache [num_seqs, max_context, ...]: no table, BLOCK_SIZE only sets the thread mapping
// (BLOCK_SIZE = 0: the row-mapped mapping, which needs none).
template <int BLOCK_SIZE>
struct DenseKV {
  long long seq_row;  // seq * max_context
  __device__ __forceinline__ long long first_row(int b) const { return seq_row + (long long)b * BLOCK_SIZE; }
  __device__ __forceinline__ long long row(int t) const { return seq_row + t; }
};

// Query heads [head0, head0 + num_heads_here) of one KV head, served by block x of a grid with
// ceil(group / TILE) blocks per KV head (TILE = 1: one block per query head, x = head).
template <int TILE>
struct HeadTile {
  int kv_head, head0, num_heads_here;
  __device__ HeadTile(int x, int num_heads, int num_kv_heads) {
    const int group = num_heads / num_kv_heads;
    const int chunks = (group + TILE - 1) / TILE;
    kv_head = x / chunks;
    head0 = kv_head * group + (x % chunks) * TILE;
    num_heads_here = imin(TILE, group - (x % chunks) * TILE);
  }
};

// qk[g] += q_g . (the lane's K vectors): kp[jj] is vector `first + jj * TGS` of the token's row
// (vectors past NUM_VECS are skipped), ks[jj] its NVFP4 block scales (CacheVec<T, HEAD_DIM>; unread for
// other caches); q_smem holds TILE staged query heads, HEAD_DIM apart.
template <int HEAD_DIM, int TILE, int TGS, typename T, int N, typename V, typename S>
__device__ __forceinline__ void accumulate_qk(const V (&kp)[N], const S (&ks)[N], const float* q_smem, int first,
                                              float (&qk)[TILE]) {
  using RV = CacheVec<T, HEAD_DIM>;
  constexpr int VEC = RV::VALUES;
  constexpr int NUM_VECS = HEAD_DIM / VEC;
#pragma unroll
  for (int jj = 0; jj < N; ++jj) {
    const int v = first + jj * TGS;
    if constexpr (RV::QUANTIZED) {  // dequantize the vector once, then TILE dot products
      if (v < NUM_VECS) {
        float kf[VEC];
        RV::dequantize(kp[jj], ks[jj], kf);
#pragma unroll
        for (int g = 0; g < TILE; ++g) {
          const float4* q4 = reinterpret_cast<const float4*>(q_smem + g * HEAD_DIM + v * VEC);
#pragma unroll
          for (int e = 0; e < VEC / 4; ++e) {
            const float4 qq = q4[RV::q_chunk(v, e)];
            qk[g] += qq.x * kf[4 * e] + qq.y * kf[4 * e + 1] + qq.z * kf[4 * e + 2] + qq.w * kf[4 * e + 3];
          }
        }
      }
    } else if (v < NUM_VECS) {
#pragma unroll
      for (int g = 0; g < TILE; ++g) {
        const float4* q4 = reinterpret_cast<const float4*>(q_smem + g * HEAD_DIM + v * VEC);
#pragma unroll
        for (int e = 0; e < VEC / 4; ++e) {
          const float4 qq = q4[e];
          qk[g] += qq.x * to_float(kp[jj].v[4 * e]) + qq.y * to_float(kp[jj].v[4 * e + 1]) +
                   qq.z * to_float(kp[jj].v[4 * e + 2]) + qq.w * to_float(kp[jj].v[4 * e + 3]);
        }
      }
    }
  }
}

// Finishes one token's logits: sums the TGS lanes' partial dot products, makes them logits (the token's
// K scale with OPT_KV_SCALES, the scale, then the options: opt.logit), and (for a token in range) keeps
// the running max and writes logits[g][token - start] (index = token - start).
template <int TILE, int TGS, typename Opt>
__device__ __forceinline__ void store_logits(float (&qk)[TILE], float scale, const Opt& opt,
                                             int kv_head, int heads_here, const HeadParams (&heads)[TILE], int token,
                                             bool valid, bool writer,
                                             int index, float* logits, int logits_stride, float (&qk_max)[TILE],
                                             float k_token_scale = 1.f) {
#pragma unroll
  for (int g = 0; g < TILE; ++g) {
    float dot = group_sum<TGS>(qk[g]);
    if constexpr ((Opt::flags & OPT_KV_SCALES) != 0) dot *= k_token_scale;
    // a padding head of the tile (g >= heads_here) is named as the first: its logits are never used, and no
    // modifier reads past the heads' arrays
    qk[g] = opt.logit(dot, scale, ScoreAt{opt.position, token, opt.first_head + (g < heads_here ? g : 0), kv_head,
                                          heads[g]});
  }
  if (valid) {
#pragma unroll
    for (int g = 0; g < TILE; ++g) {
      qk_max[g] = fmaxf(qk_max[g], qk[g]);
      if (writer) logits[g * logits_stride + index] = qk[g];
    }
  }
}

// The lane's share of one V row: vectors lane_in_row + j * LPT, j < V_VECS (past NUM_VECS: not loaded), of
// RV = CacheVec<C, HEAD_DIM, true>; NVFP4: their block scales vs[j] from the row's scales `row_scales`.
template <typename RV, int NUM_VECS, int LPT, int V_VECS, typename T>
__device__ __forceinline__ void load_value_row(const T* __restrict__ vrow, const unsigned char* row_scales,
                                               int lane_in_row, typename RV::Vec (&vp)[V_VECS],
                                               typename RV::Scales (&vs)[V_VECS]) {
#pragma unroll
  for (int j = 0; j < V_VECS; ++j) {
    const int v = lane_in_row + j * LPT;
    if (V_VECS * LPT == NUM_VECS || v < NUM_VECS) {
      vp[j] = RV::load(vrow, v);
      if constexpr (RV::GROUPS != 0) vs[j] = RV::load_scales(row_scales, v);
    }
  }
}

// acc[g][j * VEC + e] += p_g * v[e] for the lane's V vectors (RV's, with their NVFP4 block scales vs);
// p_g = probs[g * probs_stride] (times the row's V scale v_token_scale when SCALED: per-token scales).
template <typename RV, int TILE, int NUM_VECS, int LPT, bool SCALED = false, int V_VECS, int ACC, typename V,
          typename S>
__device__ __forceinline__ void accumulate_pv(const V (&vp)[V_VECS], const S (&vs)[V_VECS], const float* probs,
                                              int probs_stride, int lane_in_row, float (&acc)[TILE][ACC],
                                              float v_token_scale = 1.f) {
  constexpr int VEC = RV::VALUES;
  float p[TILE];
#pragma unroll
  for (int g = 0; g < TILE; ++g) p[g] = SCALED ? probs[g * probs_stride] * v_token_scale : probs[g * probs_stride];
#pragma unroll
  for (int j = 0; j < V_VECS; ++j) {
    const int v = lane_in_row + j * LPT;
    if constexpr (RV::QUANTIZED) {  // dequantize the vector once
      if (V_VECS * LPT == NUM_VECS || v < NUM_VECS) {
        float vf[VEC];
        RV::dequantize(vp[j], vs[j], vf);
#pragma unroll
        for (int e = 0; e < VEC; ++e)
#pragma unroll
          for (int g = 0; g < TILE; ++g) acc[g][j * VEC + e] += p[g] * vf[e];
      }
    } else if (V_VECS * LPT == NUM_VECS || v < NUM_VECS) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float vf = to_float(vp[j].v[e]);
#pragma unroll
        for (int g = 0; g < TILE; ++g) acc[g][j * VEC + e] += p[g] * vf;
      }
    }
  }
}

}  // namespace pa
