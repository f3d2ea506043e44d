// multi.cuh: the tile kernel body of cupy.multi and cupy.cascade, and their log-sum-exp merge kernel.
//
// Work unit: a TILE = up to ROWS query rows, each a (query token, query head) pair, all of one KV head,
// that read K/V through one block-table row (`table_seq`) over a token range [kv_start, kv_end).
// cupy.multi: the rows are consecutive query tokens of one sequence x the heads of a GQA group (a
// chunk of it when the group exceeds ROWS), so each K/V element of the tile's range is loaded once
// for all of them. cupy.cascade adds tiles whose rows come from several sequences sharing a prefix
// (their tables start with the same physical blocks): the prefix is loaded once for all of them.
// Each row carries its own position p (causal: t <= p), window start (t >= p - window_left) and
// query head (the score modifiers' context: ALiBi's slope, ...); a row sees no token outside [kv_start, kv_end) of its tile.
//
// Thread block (THREADS threads, default 128) per (tile, KV head x head chunk, partition): partition z covers
// [kv_start + z * partition_size, ...) of the tile's range. It walks its range in chunks of CHUNK
// tokens, flash-attention style (online softmax):
//   1. stage: the chunk's K and V rows (16-byte vectors, dequantized to float) into shared memory;
//      a token's row is found through the table on its own (t / block_size), so the block size is
//      a runtime value (any size); tokens past the range are not loaded (zeros).
//   2. logits: logit[t][r] = opt(scale * q_r . k_t), -inf where row r does not see t (mask).
//   3. softmax: per row, the running max m_r and sum l_r; alpha_r = exp(m_old - m_new) rescales.
//   4. P.V: each thread owns 4 output dims of several rows (float4 of V, one p per row).
// The partition's normalized output (times v_scale) goes straight to `out` when the row has one
// partial result in all (row_slots[qrow] == 1), else to slot `slot0 + z` of the scratch with its max
// logit and sum of exponentials; the merge kernel then combines a row's slots by log-sum-exp.
// A row that sees no token of a partition writes max -inf, sum 0 and zeros: the merge gives it weight 0.
//
// Shared memory is static (< 48 KiB, no opt-in): q[ROWS][D], K and V chunks [CHUNK][D + 4],
// p[CHUNK][ROWS + 1], per-row state. ROWS = 32 (16 at head dim 256), CHUNK * D <= 2048 floats.
#pragma once
#include <cuda_fp8.h>
#include "common.cuh"

namespace mq {

using pa::NUM_THREADS;
using pa::WARP;
constexpr int NUM_WARPS = NUM_THREADS / WARP;

template <int HEAD_DIM>
struct Shape {
  static constexpr int ROWS = HEAD_DIM <= 128 ? 32 : HEAD_DIM <= 256 ? 16 : 8;  // query rows per tile
  __host__ __device__ static constexpr int chunk() {
    int c = 64;
    while (c * HEAD_DIM > 2048) c /= 2;
    return c;
  }
  static constexpr int CHUNK = chunk();        // tokens staged per step
  static constexpr int KS = HEAD_DIM + 4;      // floats between staged K/V rows (bank shift, float4-aligned)
  static constexpr int PS = ROWS + 1;          // floats between staged probability rows
};

// fp8 formats (the cache's type C): FP8<C>::value, and the interpretation for the pair conversion.
template <typename C>
struct FP8 {
  static constexpr bool value = false;
};
template <>
struct FP8<__nv_fp8_e4m3> {
  static constexpr bool value = true;
  static constexpr __nv_fp8_interpretation_t kind = __NV_E4M3;
};
template <>
struct FP8<__nv_fp8_e5m2> {
  static constexpr bool value = true;
  static constexpr __nv_fp8_interpretation_t kind = __NV_E5M2;
};

// How the tile kernel stages a cache of element type C: VALUES values per vector load (Vec), PER_ELEM values
// per C element. 16-byte vectors of T or fp8; NVFP4: 8 bytes, one group of 16 values (one block scale).
template <typename C>
struct Staged {
  using Vec = pa::Pack16<C>;
  static constexpr int VALUES = 16 / sizeof(C), PER_ELEM = 1;
};
template <>
struct Staged<pa::Nvfp4> {
  using Vec = uint2;
  static constexpr int VALUES = 16, PER_ELEM = 2;
};

// The 16 / sizeof(C) values of one 16-byte vector, as floats, to f[0..].
template <typename C>
__device__ __forceinline__ void unpack16(const pa::Pack16<C>& p, float* f) {
  if constexpr (FP8<C>::value) {
    const __nv_fp8x2_storage_t* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(p.v);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 two = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], FP8<C>::kind)));
      f[2 * i] = two.x;
      f[2 * i + 1] = two.y;
    }
  } else {
#pragma unroll
    for (int e = 0; e < 16 / (int)sizeof(C); ++e) f[e] = pa::to_float(p.v[e]);
  }
}

// What a row sees: the causal rule (t <= p) and the window (t >= lo). A negative control swaps it.
struct Causal {
  __device__ __forceinline__ static bool visible(int t, int position, int lo) { return t <= position && t >= lo; }
};

// Finishing a query row's partial result over one partition (m, l: its max logit and its sum of
// exp(logit - m)). `direct`: the row's only partial result (row_slots[qrow] == 1), written to `out` and
// finished here (the sink in its denominator, its lse); else one of several, normalized by its own sum and
// written to its slot with m and l, which merge_slots finishes (sink, lse) once over all of them.
// row_factor: what the row's accumulated P.V is multiplied by (times v_scale with OPT_VSCALE).
template <int OPTS>
__device__ __forceinline__ float row_factor(const pa::Options<OPTS>& opt, bool direct, float m, float l, int head) {
  float inv = direct ? opt.inv_denominator(m, l, head) : (!(l <= 0.f) ? 1.f / l : 0.f);
  if constexpr ((OPTS & pa::OPT_VSCALE) != 0) inv *= opt.v_scale;
  return inv;
}

// The row's statistics (one thread per row): lse[qh] when direct (with OPT_LSE), else its slot's m and l.
template <int OPTS>
__device__ __forceinline__ void store_row_statistics(const pa::Options<OPTS>& opt, bool direct, long long qh,
                                                     long long slot, float m, float l, float* __restrict__ lse,
                                                     float* __restrict__ max_out, float* __restrict__ sum_out) {
  if (direct) {
    if constexpr ((OPTS & pa::OPT_LSE) != 0) lse[qh] = opt.lse(m, l);
  } else {
    max_out[slot] = m;
    sum_out[slot] = l;
  }
}

// tiles [num_tiles][4]: table_seq, rows (query tokens), kv_start, kv_end.
// tile_rows [num_tiles][tile_tokens][3]: query row (index into query/out), position, slot0.
// row_slots [total_q]: partial results of the row over all tiles and partitions (1: written directly).
// THREADS: the block's threads (a multiple of 32, at least CHUNK and HEAD_DIM / 4; default pa::NUM_THREADS).
template <int HEAD_DIM, typename T, typename C, int OPTS, typename Mask, int THREADS = pa::NUM_THREADS>
__device__ __forceinline__ void tile_attention(
    T* __restrict__ out, float* __restrict__ tmp_out, float* __restrict__ max_out, float* __restrict__ sum_out,
    const T* __restrict__ query, const C* __restrict__ key_cache, const C* __restrict__ value_cache,
    const int* __restrict__ block_tables, int max_blocks_per_seq, const int* __restrict__ tiles,
    const int* __restrict__ tile_rows, const int* __restrict__ row_slots, int tile_tokens, int num_heads,
    int num_kv_heads, int head_chunk, int block_size, float scale, int partition_size, int max_slots,
    float* __restrict__ lse, const pa::OptionArgs& options) {
  using S = Shape<HEAD_DIM>;
  constexpr int NUM_THREADS = THREADS, NUM_WARPS = THREADS / WARP;
  static_assert(THREADS % WARP == 0, "THREADS must be a multiple of 32");
  constexpr int ROWS = S::ROWS, CHUNK = S::CHUNK, KS = S::KS, PS = S::PS;
  constexpr bool FP4 = pa::is_nvfp4<C>;
  constexpr int VEC = Staged<C>::VALUES;         // cache values per vector load
  constexpr int PER_ELEM = Staged<C>::PER_ELEM;  // values per C element (NVFP4: 2 per byte)
  using Vec = typename Staged<C>::Vec;
  static_assert(HEAD_DIM % VEC == 0 && HEAD_DIM % 4 == 0, "head_dim * sizeof(cache) must be a multiple of 16 bytes");
  constexpr int NV = HEAD_DIM / VEC;             // vectors per token row
  constexpr int LOADS = (CHUNK * NV + NUM_THREADS - 1) / NUM_THREADS;  // K (and V) vectors per thread per chunk
  constexpr int RG = NUM_THREADS / CHUNK;        // logits: row groups (threads per token)
  constexpr int LR = (ROWS + RG - 1) / RG;       // logits: rows per thread
  constexpr int DU = HEAD_DIM / 4;               // P.V: float4 columns per row
  constexpr int RSTEP = NUM_THREADS / DU > 0 ? NUM_THREADS / DU : 1;
  constexpr int PR = (ROWS + RSTEP - 1) / RSTEP;  // P.V: rows per thread
  static_assert(DU <= NUM_THREADS && CHUNK <= NUM_THREADS && CHUNK <= 2 * WARP, "thread mapping");

  __shared__ __align__(16) float q_s[ROWS * HEAD_DIM];
  __shared__ __align__(16) float k_s[CHUNK * KS];
  __shared__ __align__(16) float v_s[CHUNK * KS];
  __shared__ float p_s[CHUNK * PS];
  __shared__ int row_pos[ROWS], row_lo[ROWS], row_qrow[ROWS], row_head[ROWS], row_slot[ROWS];
  __shared__ float m_s[ROWS], l_s[ROWS], alpha_s[ROWS];
  __shared__ pa::HeadParams row_params[ROWS];  // the rows' heads' score-modifier values (ALiBi's slope, ...)

  const int tid = threadIdx.x, warp = tid / WARP, lane = tid % WARP;
  const int tile = blockIdx.x, part = blockIdx.z;
  const int* info = tiles + 4 * (long long)tile;
  const int table_seq = info[0], ntok = info[1], kv_start = info[2], kv_end = info[3];
  const int start = kv_start + part * partition_size;
  if (start >= kv_end) return;  // the tile has fewer partitions than the grid
  const int end = pa::imin(start + partition_size, kv_end);

  const int group = num_heads / num_kv_heads;
  const int chunks = (group + head_chunk - 1) / head_chunk;
  const int kv_head = blockIdx.y / chunks, chunk_index = blockIdx.y % chunks;
  const int head0 = kv_head * group + chunk_index * head_chunk;
  const int heads_here = pa::imin(head_chunk, group - chunk_index * head_chunk);
  const int rows_here = ntok * heads_here;  // row r = token (r / heads_here), head head0 + r % heads_here
  const pa::Options<OPTS> opt(options, 0, 1);

  for (int r = tid; r < ROWS; r += NUM_THREADS) {
    if (r < rows_here) {
      const int* row = tile_rows + 3 * ((long long)tile * tile_tokens + r / heads_here);
      const int head = head0 + r % heads_here;
      row_qrow[r] = row[0];
      row_pos[r] = row[1];
      row_slot[r] = row[2] + part;
      row_lo[r] = pa::first_token(OPTS, row[1] + 1, options.window_left);
      row_head[r] = head;
      row_params[r] = opt.head(head);
    }
    m_s[r] = pa::neg_inf();
    l_s[r] = 0.f;
  }
  __syncthreads();
  for (int i = tid; i < ROWS * HEAD_DIM; i += NUM_THREADS) {
    const int r = i / HEAD_DIM, d = i % HEAD_DIM;
    q_s[i] = r < rows_here ? pa::to_float(query[((long long)row_qrow[r] * num_heads + row_head[r]) * HEAD_DIM + d])
                           : 0.f;
  }

  const int* table = block_tables + (long long)table_seq * max_blocks_per_seq;
  const long long kv_stride = (long long)num_kv_heads * HEAD_DIM / PER_ELEM;  // C elements between token rows
  const C* k_head = key_cache + (long long)kv_head * HEAD_DIM / PER_ELEM;
  const C* v_head = value_cache + (long long)kv_head * HEAD_DIM / PER_ELEM;

  // P.V accumulators: rows pv_r0 + k * RSTEP, columns 4 * pv_c .. + 3.
  const int pv_c = tid % DU, pv_r0 = tid / DU;
  const bool pv_thread = tid < RSTEP * DU;
  float acc[PR][4];
#pragma unroll
  for (int k = 0; k < PR; ++k) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.f;

  for (int c0 = start; c0 < end; c0 += CHUNK) {
    // ---- 1. stage K and V of tokens c0 .. c0 + CHUNK - 1 (< end), every load issued before any store
    Vec kp[LOADS], vp[LOADS];
    unsigned char ksc[FP4 ? LOADS : 1], vsc[FP4 ? LOADS : 1];  // NVFP4: each vector's block scales
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
      const int i = tid + j * NUM_THREADS, t = c0 + i / NV;
      if (i < CHUNK * NV && t < end) {
        const long long row = (long long)table[t / block_size] * block_size + t % block_size;
        const long long offset = row * kv_stride + (i % NV) * (VEC / PER_ELEM);
        kp[j] = *reinterpret_cast<const Vec*>(k_head + offset);
        vp[j] = *reinterpret_cast<const Vec*>(v_head + offset);
        if constexpr (FP4) {  // block scale of (row, KV head, group i % NV)
          const long long group = (row * num_kv_heads + kv_head) * NV + i % NV;
          ksc[j] = options.k_block_scales[group];
          vsc[j] = options.v_block_scales[group];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
      const int i = tid + j * NUM_THREADS, tt = i / NV;
      if (i < CHUNK * NV) {
        float* kd = k_s + tt * KS + (i % NV) * VEC;
        float* vd = v_s + tt * KS + (i % NV) * VEC;
        if (c0 + tt < end) {
          if constexpr (FP4) {
            pa::unpack_fp4(kp[j], ksc[j], kd);  // codecs.cuh, shared with cupy.rows
            pa::unpack_fp4(vp[j], vsc[j], vd);
          } else {
            unpack16(kp[j], kd);
            unpack16(vp[j], vd);
          }
          if constexpr ((OPTS & pa::OPT_KV_SCALES) != 0) {  // per-token scales: K and V rows scaled as staged
            const int t = c0 + tt;
            const long long row = (long long)table[t / block_size] * block_size + t % block_size;
            const float ks = opt.k_token(row, kv_head, num_kv_heads), vs = opt.v_token(row, kv_head, num_kv_heads);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              kd[e] *= ks;
              vd[e] *= vs;
            }
          }
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) kd[e] = vd[e] = 0.f;
        }
      }
    }
    __syncthreads();

    // ---- 2. logits of token c0 + lt for rows lr0 + k * RG
    {
      const int lt = tid % CHUNK, lr0 = tid / CHUNK, t = c0 + lt;
      float dot[LR];
#pragma unroll
      for (int k = 0; k < LR; ++k) dot[k] = 0.f;
      if (lr0 < rows_here && t < end) {
        const float4* k4 = reinterpret_cast<const float4*>(k_s + lt * KS);
#pragma unroll 4
        for (int d = 0; d < HEAD_DIM / 4; ++d) {
          const float4 kk = k4[d];
#pragma unroll
          for (int k = 0; k < LR; ++k) {
            const int r = lr0 + k * RG;
            if (r < rows_here) {
              const float4 qq = reinterpret_cast<const float4*>(q_s + r * HEAD_DIM)[d];
              dot[k] += qq.x * kk.x + qq.y * kk.y + qq.z * kk.z + qq.w * kk.w;
            }
          }
        }
      }
      if (lt < CHUNK) {
#pragma unroll
        for (int k = 0; k < LR; ++k) {
          const int r = lr0 + k * RG;
          if (r < ROWS) {
            float logit = pa::neg_inf();
            if (r < rows_here && t < end && Mask::visible(t, row_pos[r], row_lo[r])) {
              logit = opt.logit(dot[k], scale, pa::ScoreAt{row_pos[r], t, row_head[r], kv_head, row_params[r]});
            }
            p_s[lt * PS + r] = logit;
          }
        }
      }
    }
    __syncthreads();

    // ---- 3. online softmax: warp w takes rows w, w + 4, ...; lanes take tokens lane, lane + 32
    for (int r = warp; r < rows_here; r += NUM_WARPS) {
      float x0 = lane < CHUNK ? p_s[lane * PS + r] : pa::neg_inf();
      float x1 = lane + WARP < CHUNK ? p_s[(lane + WARP) * PS + r] : pa::neg_inf();
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, pa::warp_max(fmaxf(x0, x1)));
      float alpha = 1.f;
      if (m_new == pa::neg_inf()) {  // nothing seen yet: exp(-inf) = 0 for masked tokens; a NaN logit (fmaxf
        x0 = __expf(x0);             // skipped it) stays NaN
        x1 = __expf(x1);
      } else {
        alpha = __expf(m_old - m_new);  // m_old = -inf: 0 (acc and l are 0 anyway)
        x0 = __expf(x0 - m_new);
        x1 = __expf(x1 - m_new);
      }
      if (lane < CHUNK) p_s[lane * PS + r] = x0;
      if (lane + WARP < CHUNK) p_s[(lane + WARP) * PS + r] = x1;
      const float sum = pa::warp_sum(x0 + x1);
      if (lane == 0) {
        m_s[r] = m_new;
        l_s[r] = l_s[r] * alpha + sum;
        alpha_s[r] = alpha;
      }
    }
    __syncthreads();

    // ---- 4. acc[r] = alpha_r * acc[r] + sum_t p[t][r] * v_t
    if (pv_thread) {
      const int n = pa::imin(CHUNK, end - c0);
#pragma unroll
      for (int k = 0; k < PR; ++k) {
        const int r = pv_r0 + k * RSTEP;
        if (r < rows_here) {
          const float a = alpha_s[r];
          acc[k][0] *= a;
          acc[k][1] *= a;
          acc[k][2] *= a;
          acc[k][3] *= a;
        }
      }
      for (int tt = 0; tt < n; ++tt) {
        const float4 vv = reinterpret_cast<const float4*>(v_s + tt * KS)[pv_c];
#pragma unroll
        for (int k = 0; k < PR; ++k) {
          const int r = pv_r0 + k * RSTEP;
          if (r < rows_here) {
            const float p = p_s[tt * PS + r];
            acc[k][0] += p * vv.x;
            acc[k][1] += p * vv.y;
            acc[k][2] += p * vv.z;
            acc[k][3] += p * vv.w;
          }
        }
      }
    }
    __syncthreads();  // the next chunk overwrites k_s, v_s and p_s
  }

  // ---- output: normalized partial (times v_scale) to `out`, or to the row's slot with its statistics
  if (pv_thread) {
#pragma unroll
    for (int k = 0; k < PR; ++k) {
      const int r = pv_r0 + k * RSTEP;
      if (r < rows_here) {
        const float l = l_s[r];
        const long long qh = (long long)row_qrow[r] * num_heads + row_head[r];
        if (row_slots[row_qrow[r]] == 1) {  // the row's only partial result: finished here (sink, lse)
          const float inv = row_factor(opt, true, m_s[r], l, row_head[r]);
          T* o = out + qh * HEAD_DIM + 4 * pv_c;
#pragma unroll
          for (int e = 0; e < 4; ++e) pa::store(o + e, acc[k][e] * inv);
          if (pv_c == 0) store_row_statistics(opt, true, qh, 0, m_s[r], l, lse, max_out, sum_out);
        } else {  // one of several: normalized by its own sum, merged (sink, lse) by merge_slots
          const float inv = row_factor(opt, false, m_s[r], l, row_head[r]);
          const long long slot = qh * max_slots + row_slot[r];
          reinterpret_cast<float4*>(tmp_out + slot * HEAD_DIM)[pv_c] =
              make_float4(acc[k][0] * inv, acc[k][1] * inv, acc[k][2] * inv, acc[k][3] * inv);
          if (pv_c == 0) store_row_statistics(opt, false, qh, slot, m_s[r], l, lse, max_out, sum_out);
        }
      }
    }
  }
}

// Merge: out[qrow, head] = sum_s w_s * tmp_out_s / sum_s w_s, w_s = sum_s * exp(max_s - max) over the
// row's row_slots[qrow] slots (rows with one slot were written directly: nothing to do).
// FLAGS (pa::MERGE_FLAGS: OPT_SINKS, OPT_LSE): the sink joins the merged denominator once
// (Opt::inv_denominator) and lse[qrow, head] = Opt::lse of the merged slots.
// Grid (total_q, num_heads); dynamic shared memory: max_slots floats.
template <int HEAD_DIM, typename T, int FLAGS = 0>
__device__ __forceinline__ void merge_slots(T* __restrict__ out, const float* __restrict__ tmp_out,
                                            const float* __restrict__ max_in, const float* __restrict__ sum_in,
                                            const int* __restrict__ row_slots, int num_heads, int max_slots,
                                            float* __restrict__ lse, const pa::OptionArgs& options) {
  extern __shared__ float weights[];
  const int qrow = blockIdx.x, head = blockIdx.y, tid = threadIdx.x;
  const int n = row_slots[qrow];
  if (n <= 1) return;
  const long long qh = (long long)qrow * num_heads + head, base = qh * max_slots;
  float m = pa::neg_inf();
  for (int s = 0; s < n; ++s)
    if (sum_in[base + s] > 0.f) m = fmaxf(m, max_in[base + s]);
  // An empty slot (sum 0: never written) is marked -1 and skipped; every other slot joins, a NaN sum too
  // (NaN is data), and so does a weight that underflowed to 0 (its NaN output, if any, stays NaN).
  float total = 0.f;
  for (int s = 0; s < n; ++s) {
    const float l = sum_in[base + s];
    const bool empty = l <= 0.f;
    const float w = empty ? 0.f : l * __expf(max_in[base + s] - m);
    total += w;
    if (s % NUM_THREADS == tid) weights[s] = empty ? -1.f : w;
  }
  __syncthreads();
  const pa::Options<pa::MERGE_FLAGS<FLAGS>> opt(options, 0, 1);
  for (int d = tid; d < HEAD_DIM; d += NUM_THREADS) {
    float a = 0.f;
    for (int s = 0; s < n; ++s)
      if (!(weights[s] < 0.f)) a += weights[s] * tmp_out[(base + s) * HEAD_DIM + d];
    if constexpr ((FLAGS & (pa::OPT_SINKS | pa::OPT_LSE)) != 0)
      pa::store(out + qh * HEAD_DIM + d, a * opt.inv_denominator(m, total, head));
    else
      pa::store(out + qh * HEAD_DIM + d, a / total);
  }
  if constexpr ((FLAGS & pa::OPT_LSE) != 0)
    if (tid == 0) lse[qh] = opt.lse(m, total);
}

}  // namespace mq

// The merge kernel of every tile kernel built on mq::tile_attention (cupy.multi, cupy.cascade, their controls).
template <int HEAD_DIM, typename T, int FLAGS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_merge(T* __restrict__ out, const float* __restrict__ tmp_out, const float* __restrict__ max_in,
                          const float* __restrict__ sum_in, const int* __restrict__ row_slots, int num_heads,
                          int max_slots, float* __restrict__ lse, PA_OPTION_PARAMS) {
  mq::merge_slots<HEAD_DIM, T, FLAGS>(out, tmp_out, max_in, sum_in, row_slots, num_heads, max_slots, lse,
                                      PA_OPTION_ARGS);
}
