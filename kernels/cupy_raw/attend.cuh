// attend.cuh: attend(), the body of cupy.v1, v2, gqa, rows and dense.
//
// One thread block computes attention for TILE query heads of one KV head over the token range [start, end)
// of one sequence (vLLM's paged_attention_kernel design):
//   K: thread groups of max(32 / BLOCK_SIZE, 1) lanes per token; a warp walks one cache block at
//      a time; each lane loads 16-byte vectors (4 floats / 8 halves / 16 fp8), interleaved across the group
//      so a group reads contiguous bytes; the dot product is finished with xor-shuffles in the group.
//   softmax: logits in dynamic shared memory; max and sum by warp shuffles + one shared-memory
//      step across the 4 warps; accumulation in float32.
//   V: a token row is split across min(head_dim / VEC, 32) lanes in 16-byte vectors; a warp
//      takes several token rows at once; rows, then warps, are summed (shuffles, then shared memory).
// ROW_MAPPED (cupy.rows): the block-size-independent mapping of rows.cuh for K and V.
// Tokens at or past `end` are never loaded (their slots may hold NaN), and only the blocks that
// hold tokens of [start, end) are looked up in the block table (unused entries may be -1).
// The KV policy (PagedKV, DenseKV) maps a logical block to its first token row in the cache.
#pragma once
#include "rows.cuh"

namespace pa {

// K phase, block-mapped (vLLM): a warp walks one cache block at a time, TGS = 32 / BLOCK_SIZE lanes
// per token (1 from block size 32 up); one table lookup per block. With a window, `start` may fall
// inside a block: its tokens before `start` are neither loaded nor kept (OPT_WINDOW only; without it
// every start is a block boundary).
template <int BLOCK_SIZE, int HEAD_DIM, int TILE, int THREADS, typename T, typename KV, typename Opt>
__device__ __forceinline__ void block_mapped_logits(const KV& kv, const T* __restrict__ k_head, long long kv_stride,
                                                    int kv_head, int num_kv_heads,
                                                    const float* q_smem, float scale, const Opt& opt,
                                                    int heads_here, const HeadParams (&heads)[TILE], int start,
                                                    int end,
                                                    float* logits, int logits_stride, float (&qk_max)[TILE]) {
  using RV = CacheVec<T, HEAD_DIM>;
  constexpr int VEC = RV::VALUES;
  constexpr int NUM_VECS = HEAD_DIM / VEC;
  constexpr int TGS = BLOCK_SIZE < WARP ? WARP / BLOCK_SIZE : 1;
  constexpr int GROUPS_PER_WARP = WARP / TGS;
  constexpr int TOKENS_PER_GROUP = BLOCK_SIZE / GROUPS_PER_WARP;
  static_assert(TOKENS_PER_GROUP * GROUPS_PER_WARP == BLOCK_SIZE, "block size must divide 32 or be a multiple of 32");
  constexpr int K_VECS = (NUM_VECS + TGS - 1) / TGS;  // vectors per lane
  constexpr int K_CHUNK = K_VECS < 8 ? K_VECS : 8;
  constexpr int NUM_WARPS = THREADS / WARP;
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int group = lane / TGS, lane_in_group = lane % TGS;
  const int first_block = start / BLOCK_SIZE, end_block = (end + BLOCK_SIZE - 1) / BLOCK_SIZE;
  for (int b = first_block + warp; b < end_block; b += NUM_WARPS) {
    const long long row0 = kv.first_row(b);
#pragma unroll 1
    for (int i = 0; i < TOKENS_PER_GROUP; ++i) {
      const int offset = group + i * GROUPS_PER_WARP;
      const int token = b * BLOCK_SIZE + offset;
      bool valid = token < end;
      if constexpr ((Opt::flags & OPT_WINDOW) != 0) valid = valid && token >= start;
      float qk[TILE];
#pragma unroll
      for (int g = 0; g < TILE; ++g) qk[g] = 0.f;
      if (valid) {
        const T* k = k_head + (row0 + offset) * kv_stride;
        const unsigned char* k_scales = RV::scale_row(opt.k_block_scales, row0 + offset, kv_head, num_kv_heads);
        // K_CHUNK vectors in flight, then their math: bounds registers when one lane holds a whole row.
#pragma unroll 1
        for (int j0 = 0; j0 < K_VECS; j0 += K_CHUNK) {
          typename RV::Vec kp[K_CHUNK];
          typename RV::Scales ks[K_CHUNK];
#pragma unroll
          for (int jj = 0; jj < K_CHUNK; ++jj) {
            const int v = lane_in_group + (j0 + jj) * TGS;
            if (v < NUM_VECS) {
              kp[jj] = RV::load(k, v);
              if constexpr (RV::GROUPS != 0) ks[jj] = RV::load_scales(k_scales, v);
            }
          }
          accumulate_qk<HEAD_DIM, TILE, TGS, T>(kp, ks, q_smem, lane_in_group + j0 * TGS, qk);
        }
      }
      store_logits<TILE, TGS>(qk, scale, opt, kv_head, heads_here, heads, token, valid, lane_in_group == 0, token - start, logits,
                              logits_stride, qk_max, valid ? opt.k_token(row0 + offset, kv_head, num_kv_heads) : 1.f);
    }
  }
}

// Shared memory: static q tile + reduction slots; dynamic `smem` must hold
// max(TILE * logits_stride, NUM_WARPS * TILE * HEAD_DIM) floats (logits, then the warps' partial outputs).
//
// T:        the cache's element type (K/V); Q: the query's (float, __half, __nv_bfloat16)
// q:        the tile's first query head; heads are HEAD_DIM apart; heads >= num_heads_here are not read
// scale:    softmax scale (times k_scale); opt: Options<FLAGS> or a type derived from it
// out:      out + g * out_head_stride + d  <- normalized output of head g (OutT: Q, or float for partitions)
// max_out, sum_out (nullable): + g * stats_stride <- the range's max logit and sum of exp(logit - max)
// ROW_MAPPED: the block-size-independent mapping of cupy.rows (rows.cuh).
// THREADS: the block's threads (a multiple of 32; the kernel's launch bound), THREADS / 32 warps.
template <int BLOCK_SIZE, int HEAD_DIM, int TILE, bool ROW_MAPPED = false, int THREADS = NUM_THREADS, typename T,
          typename Q, typename KV, typename OutT, typename Opt>
__device__ void attend(const KV kv, const T* __restrict__ key_cache, const T* __restrict__ value_cache,
                       const Q* __restrict__ q, int num_heads_here, int kv_head, int num_kv_heads, float scale,
                       const Opt& opt, int start, int end, int logits_stride, float* __restrict__ smem,
                       OutT* __restrict__ out, long long out_head_stride,
                       float* __restrict__ max_out, float* __restrict__ sum_out, long long stats_stride,
                       float* __restrict__ lse_out = nullptr) {
  using VRV = CacheVec<T, HEAD_DIM, true>;  // the V phase's vectors (NVFP4: 16 values, one block scale)
  constexpr int VEC = VRV::VALUES;
  static_assert(HEAD_DIM % VEC == 0, "head_dim * sizeof(T) must be a multiple of 16 bytes (NVFP4: 8 bytes)");
  constexpr int NUM_VECS = HEAD_DIM / VEC;
  // V phase: LPT lanes per token row, ROWS rows per warp.
  constexpr int LPT = NUM_VECS < WARP ? NUM_VECS : WARP;
  constexpr int ROWS = WARP / LPT;
  constexpr int V_VECS = (NUM_VECS + LPT - 1) / LPT;
  static_assert(THREADS % WARP == 0 && THREADS >= WARP, "THREADS must be a positive multiple of 32");
  constexpr int NUM_WARPS = THREADS / WARP;
  constexpr int NUM_THREADS = THREADS;
  constexpr bool KV_SCALED = (Opt::flags & OPT_KV_SCALES) != 0;  // per-token scales: V rows scaled in the P.V step

  __shared__ __align__(16) float q_smem[TILE * HEAD_DIM];
  __shared__ float red_max[TILE][NUM_WARPS];
  __shared__ float red_sum[TILE][NUM_WARPS];

  const int tid = threadIdx.x, warp = tid / WARP, lane = tid % WARP;
  // elements of T between token rows (NVFP4: bytes, two values each)
  const long long kv_stride = (long long)num_kv_heads * HEAD_DIM / VRV::PER_ELEM;

  using KRV = CacheVec<T, HEAD_DIM>;  // the K phase's vectors: q_smem's layout is theirs (KRV::q_position)
  for (int i = tid; i < TILE * HEAD_DIM; i += NUM_THREADS) {
    const float x = i / HEAD_DIM < num_heads_here ? to_float(q[i]) : 0.f;
    if constexpr (KRV::SWIZZLED)
      q_smem[i - i % HEAD_DIM + KRV::q_position(i % HEAD_DIM)] = x;
    else
      q_smem[i] = x;
  }
  __syncthreads();

  // ---- K: logits[g][t - start] = opt.logit(q_g . k_t): scale, soft-cap, ALiBi
  float* logits = smem;
  float qk_max[TILE];
  HeadParams heads[TILE];  // the score modifiers' per-head values (ALiBi's slope, ...), loaded once
#pragma unroll
  for (int g = 0; g < TILE; ++g) {
    qk_max[g] = neg_inf();
    heads[g] = opt.head(opt.first_head + (g < num_heads_here ? g : 0));
  }
  const T* k_head = key_cache + (long long)kv_head * HEAD_DIM / VRV::PER_ELEM;
  if constexpr (ROW_MAPPED)
    row_mapped_logits<BLOCK_SIZE, HEAD_DIM, TILE, THREADS>(kv, k_head, kv_stride, kv_head, num_kv_heads, q_smem, scale, opt, num_heads_here, heads, start, end,
                                                  logits, logits_stride, qk_max);
  else
    block_mapped_logits<BLOCK_SIZE, HEAD_DIM, TILE, THREADS>(kv, k_head, kv_stride, kv_head, num_kv_heads, q_smem, scale, opt, num_heads_here, heads, start, end,
                                                    logits, logits_stride, qk_max);
#pragma unroll
  for (int g = 0; g < TILE; ++g) {
    const float m = warp_max(qk_max[g]);
    if (lane == 0) red_max[g][warp] = m;
  }
  __syncthreads();

  // ---- softmax numerators exp(logit - max), and their sums
  const int n = end - start;
  float row_max[TILE], sums[TILE];
#pragma unroll
  for (int g = 0; g < TILE; ++g) {
    row_max[g] = red_max[g][0];
#pragma unroll
    for (int w = 1; w < NUM_WARPS; ++w) row_max[g] = fmaxf(row_max[g], red_max[g][w]);
    sums[g] = 0.f;
  }
  for (int i = tid; i < n; i += NUM_THREADS) {
#pragma unroll
    for (int g = 0; g < TILE; ++g) {
      const float e = __expf(logits[g * logits_stride + i] - row_max[g]);
      logits[g * logits_stride + i] = e;
      sums[g] += e;
    }
  }
#pragma unroll
  for (int g = 0; g < TILE; ++g) {
    const float s = warp_sum(sums[g]);
    if (lane == 0) red_sum[g][warp] = s;
  }
  __syncthreads();

  // ---- V: acc[g] = sum_t p_g[t] * v_t  (normalized at the end)
  const int row = lane / LPT, lane_in_row = lane % LPT;
  float acc[TILE][V_VECS * VEC];
#pragma unroll
  for (int g = 0; g < TILE; ++g)
#pragma unroll
    for (int x = 0; x < V_VECS * VEC; ++x) acc[g][x] = 0.f;
  const T* v_head = value_cache + (long long)kv_head * HEAD_DIM / VRV::PER_ELEM;
  if (row < ROWS) {
    if constexpr (ROW_MAPPED) {
      row_mapped_values<VRV, TILE, NUM_VECS, LPT, ROWS, THREADS, KV_SCALED>(kv, v_head, kv_stride, kv_head, num_kv_heads,
                                                                           opt, start, end, logits, logits_stride,
                                                                           warp, row, lane_in_row, acc);
    } else {
      for (int t = start + warp * ROWS + row; t < end; t += NUM_WARPS * ROWS) {
        typename VRV::Vec vp[V_VECS];
        typename VRV::Scales vs[V_VECS];
        const long long vrow = kv.first_row(t / BLOCK_SIZE) + t % BLOCK_SIZE;
        load_value_row<VRV, NUM_VECS, LPT>(v_head + vrow * kv_stride,
                                           VRV::scale_row(opt.v_block_scales, vrow, kv_head, num_kv_heads),
                                           lane_in_row, vp, vs);
        accumulate_pv<VRV, TILE, NUM_VECS, LPT, KV_SCALED>(vp, vs, logits + t - start, logits_stride, lane_in_row, acc,
                                                           opt.v_token(vrow, kv_head, num_kv_heads));
      }
    }
  }
  // Rows of a warp -> row 0 (rows are LPT lanes apart).
#pragma unroll
  for (int g = 0; g < TILE; ++g)
#pragma unroll
    for (int x = 0; x < V_VECS * VEC; ++x) {
      float a = acc[g][x];
      if constexpr ((LPT & (LPT - 1)) == 0) {  // rows fill the warp: xor tree
#pragma unroll
        for (int m = LPT; m < ROWS * LPT; m *= 2) a += __shfl_xor_sync(FULL_MASK, a, m);
      } else {
        float total = a;
#pragma unroll
        for (int r = 1; r < ROWS; ++r) total += __shfl_down_sync(FULL_MASK, a, r * LPT);
        a = total;
      }
      acc[g][x] = a;
    }
  __syncthreads();  // everyone is done with the logits: reuse smem for the warps' partial outputs
  float* partial = smem;  // [NUM_WARPS][TILE][HEAD_DIM]
  if (row == 0) {
#pragma unroll
    for (int j = 0; j < V_VECS; ++j) {
      const int v = lane_in_row + j * LPT;
      if (V_VECS * LPT == NUM_VECS || v < NUM_VECS) {
#pragma unroll
        for (int g = 0; g < TILE; ++g)
#pragma unroll
          for (int e = 0; e < VEC; ++e) partial[(warp * TILE + g) * HEAD_DIM + v * VEC + e] = acc[g][j * VEC + e];
      }
    }
  }
  __syncthreads();
  for (int i = tid; i < num_heads_here * HEAD_DIM; i += NUM_THREADS) {
    const int g = i / HEAD_DIM, d = i % HEAD_DIM;
    float s = 0.f, total = 0.f;
#pragma unroll
    for (int w = 0; w < NUM_WARPS; ++w) {
      s += partial[(w * TILE + g) * HEAD_DIM + d];
      total += red_sum[g][w];
    }
    float value;
    if constexpr ((Opt::flags & (OPT_SINKS | OPT_LSE)) != 0) {  // a sink in the denominator; no token: 0
      float m = red_max[g][0];
#pragma unroll
      for (int w = 1; w < NUM_WARPS; ++w) m = fmaxf(m, red_max[g][w]);
      value = s * opt.inv_denominator(m, total, g);
    } else {
      value = s / total;
    }
    if constexpr ((Opt::flags & OPT_VSCALE) != 0) value *= opt.v_scale;
    store(out + g * out_head_stride + d, value);
  }
  if constexpr ((Opt::flags & OPT_LSE) != 0) {  // lse_out[g] <- the log-sum-exp of head g
    for (int g = tid; g < num_heads_here; g += NUM_THREADS) {
      float m = red_max[g][0], total = 0.f;
#pragma unroll
      for (int w = 0; w < NUM_WARPS; ++w) {
        m = fmaxf(m, red_max[g][w]);
        total += red_sum[g][w];
      }
      lse_out[g] = opt.lse(m, total);
    }
  }
  if (max_out != nullptr) {
    for (int g = tid; g < num_heads_here; g += NUM_THREADS) {
      float m = red_max[g][0], total = 0.f;
#pragma unroll
      for (int w = 0; w < NUM_WARPS; ++w) {
        m = fmaxf(m, red_max[g][w]);
        total += red_sum[g][w];
      }
      max_out[g * stats_stride] = m;
      sum_out[g * stats_stride] = total;
    }
  }
}

}  // namespace pa
