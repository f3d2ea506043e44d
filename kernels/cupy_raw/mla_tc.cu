// cupy.mla_tc: multi-head latent attention (MLA) over a paged latent cache with Q.K^T (576 wide) and P.V
// (512 wide) on tensor cores (nvcuda::wmma m16n16k16, float accumulators), dense or top-k sparse.
//
// Work unit, token rule, split and merge are cupy.mla's (mla.cu, included: its record layout, Row and
// mla_merge): one thread block per (query row, tile of 16 heads = the MMA's M, partition of the row's
// tokens); a row with several partitions is merged by log-sum-exp. 128 threads = 4 warps.
//
// Warp w owns a quarter of the row's dims: nope dims 128w .. 128w + 127 (scale tile w of an fp8 record)
// and RoPE dims 512 + 16w .. + 15, for both products:
//   Q.K^T: the warp keeps its 9 query fragments (8 nope k-steps + 1 RoPE k-step, loaded once through
//          shared memory) in registers and computes its partial S over its dims, the nope part and the RoPE
//          part apart; S = sum_w scale_w(t) * S_nope_w + sum_w S_rope_w (scale 1 for a plain cache), so an
//          fp8 record's codes enter the MMA as exact 16-bit values and its float32 scales are applied in
//          float, whatever they are;
//   P.V:   O's column blocks 8w .. 8w + 7 (dims of scale tile w), with P_w = P * scale_w(t) (fp8 record;
//          P for a plain cache) split into two 16-bit parts, P_w = P_hi + P_lo (each rounded to T), one MMA
//          each: P rounded once would cost 2^-8 of |V| in bf16.
// O stays in accumulator fragments (8 per warp); the per-head rescale of the online softmax goes through
// a 16 x 16 float scratch per warp (store, scale each row, load back: the fragments' element mapping is
// not specified), only in a chunk where some head's max grew (exact: every alpha is 1 otherwise).
// Per chunk of CHUNK = 16 tokens: stage the rows into shared memory as T (16-byte loads, up to 6 per thread
// issued before their stores; barrier) | partial S (barrier) |
// softmax in float, 8 threads per head (barrier) | rescale O and O += P_w.V (barrier).
// Tokens past the range or of an invalid index (-1) are staged as zeros with weight 0.
//
// T (the query/output type, __nv_bfloat16 or __half) is the MMA's input type: a plain cache holds T; the
// record's e4m3 codes are exact in both, its bf16 RoPE values exact in bf16 and, with __half queries,
// rounded to __half (exact within half's normal range).
// Template: mla_tc_attention<T, RECORD, SPARSE>; arguments as mla_attention's.
// Grid (total_q, ceil(num_heads / 16), max partitions), static shared memory only (< 48 KiB).
#include <mma.h>
#include "mla.cu"

namespace mlatc {

using namespace nvcuda;
using mla::DIMS;
using mla::VALUE_DIMS;
constexpr int HEADS = 16;                  // heads per tile: the MMA's M
constexpr int CHUNK = 16;                  // tokens per step: the MMA's N (Q.K^T) and K (P.V)
constexpr int WARPS = pa::NUM_WARPS;       // 4: one scale tile of the record each
constexpr int KS = DIMS + 8;               // T elements between staged rows (16-byte shift)
constexpr int NOPE_STEPS = VALUE_DIMS / 16 / WARPS;  // 8 k-steps (and O column blocks) per warp
constexpr int SS = 16;                     // floats between rows of a 16 x 16 scratch
constexpr int PS = CHUNK + 8;              // T elements between P rows
constexpr int GROUP = pa::NUM_THREADS / HEADS;  // 8 threads per head in the softmax
static_assert(VALUE_DIMS == 128 * WARPS && DIMS - VALUE_DIMS == 16 * WARPS, "a warp per scale tile");

template <typename T>
__device__ __forceinline__ T to_mma(float x);
template <>
__device__ __forceinline__ __half to_mma<__half>(float x) { return __float2half(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 to_mma<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
__device__ __forceinline__ float from_mma(__half x) { return __half2float(x); }
__device__ __forceinline__ float from_mma(__nv_bfloat16 x) { return __bfloat162float(x); }

// Vector v (loaded: raw) of a latent row to dst (a staged row of T). Plain cache: 8 values at dims 8v..;
// record: v < 32: 16 e4m3 codes (dims 16v..) unscaled; v = 32: the 4 scales to scales[0..3]; v > 32:
// 8 bf16 RoPE values (dims 512 + 8(v - 33)..).
template <typename T, bool RECORD>
__device__ __forceinline__ void stage_vector(const pa::Pack16<unsigned char>& raw, int v, T* dst, float* scales) {
  if constexpr (RECORD) {
    if (v < 32) {
      const unsigned short* pairs = reinterpret_cast<const unsigned short*>(raw.v);
      pa::Pack16<T> lo, hi;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 a = pa::Fp8<__nv_fp8_e4m3>::pair(pairs[i]), b = pa::Fp8<__nv_fp8_e4m3>::pair(pairs[4 + i]);
        lo.v[2 * i] = to_mma<T>(a.x);
        lo.v[2 * i + 1] = to_mma<T>(a.y);
        hi.v[2 * i] = to_mma<T>(b.x);
        hi.v[2 * i + 1] = to_mma<T>(b.y);
      }
      reinterpret_cast<pa::Pack16<T>*>(dst + 16 * v)[0] = lo;
      reinterpret_cast<pa::Pack16<T>*>(dst + 16 * v)[1] = hi;
    } else if (v == 32) {
      const float* s = reinterpret_cast<const float*>(raw.v);
#pragma unroll
      for (int j = 0; j < 4; ++j) scales[j] = s[j];
    } else {
      const __nv_bfloat16* rope = reinterpret_cast<const __nv_bfloat16*>(raw.v);
      pa::Pack16<T> x;
#pragma unroll
      for (int i = 0; i < 8; ++i) x.v[i] = to_mma<T>(__bfloat162float(rope[i]));
      *reinterpret_cast<pa::Pack16<T>*>(dst + VALUE_DIMS + 8 * (v - 33)) = x;
    }
  } else {
    *reinterpret_cast<pa::Pack16<unsigned char>*>(dst + 8 * v) = raw;
  }
}

// Zeros where vector v of a row would go (a token past the range or an invalid index).
template <typename T, bool RECORD>
__device__ __forceinline__ void zero_vector(int v, T* dst, float* scales) {
  pa::Pack16<T> z;
#pragma unroll
  for (int i = 0; i < 8; ++i) z.v[i] = to_mma<T>(0.f);
  if constexpr (RECORD) {
    if (v < 32) {
      reinterpret_cast<pa::Pack16<T>*>(dst + 16 * v)[0] = z;
      reinterpret_cast<pa::Pack16<T>*>(dst + 16 * v)[1] = z;
    } else if (v == 32) {
#pragma unroll
      for (int j = 0; j < 4; ++j) scales[j] = 0.f;
    } else {
      *reinterpret_cast<pa::Pack16<T>*>(dst + VALUE_DIMS + 8 * (v - 33)) = z;
    }
  } else {
    *reinterpret_cast<pa::Pack16<T>*>(dst + 8 * v) = z;
  }
}

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

}  // namespace mlatc

template <typename T, bool RECORD, bool SPARSE>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    mla_tc_attention(T* __restrict__ out,                    // [total_q, num_heads, 512]
                     float* __restrict__ lse,                // [total_q, num_heads]
                     float* __restrict__ tmp_out,            // [total_q, num_heads, max_parts, 512]
                     float* __restrict__ tmp_max,            // [total_q, num_heads, max_parts]
                     float* __restrict__ tmp_sum,            // [total_q, num_heads, max_parts]
                     const T* __restrict__ query,            // [total_q, num_heads, 576]
                     const unsigned char* __restrict__ cache,  // [num_blocks, block_size, ROW bytes]
                     const int* __restrict__ block_tables,   // [num_seqs, max_blocks_per_seq] (dense)
                     int max_blocks_per_seq, int block_size,
                     const int* __restrict__ indices,        // [total_q, topk] slots, -1 invalid (sparse)
                     int topk,
                     const int* __restrict__ row_seq,        // [total_q] the row's sequence
                     const int* __restrict__ row_tokens,     // [total_q] tokens (dense: p + 1) or entries (topk)
                     const int* __restrict__ row_parts,      // [total_q] partitions of the row
                     int num_heads, float scale, int partition, int max_parts) {
  using namespace mlatc;
  using R = mla::Row<T, RECORD>;
  static_assert(sizeof(T) == sizeof(unsigned short), "16-bit MMA inputs");
  // 16-bit arrays as raw bits (the CPU executor's static __half storage gets a guard variable).
  __shared__ __align__(32) unsigned short k_bits[CHUNK * KS];         // staged rows (first: the queries)
  __shared__ __align__(32) float s_part[2 * WARPS * HEADS * SS];      // per warp: S_nope, S_rope
  __shared__ __align__(32) float scratch[WARPS * HEADS * SS];         // per warp: an O fragment
  __shared__ __align__(32) unsigned short p_bits[2 * WARPS * HEADS * PS];  // per warp: P_hi, P_lo
  __shared__ float scale_s[CHUNK * WARPS];
  __shared__ int valid_s[CHUNK];
  __shared__ float m_s[HEADS], l_s[HEADS], alpha_s[HEADS];
  __shared__ int rescale_s[HEADS];  // the head's max grew in this chunk (alpha != 1): O needs rescaling
  T* const k_s = reinterpret_cast<T*>(k_bits);
  T* const p_s = reinterpret_cast<T*>(p_bits);

  const int row = blockIdx.x, part = blockIdx.z, tid = threadIdx.x, warp = tid / pa::WARP, lane = tid % pa::WARP;
  const int start = part * partition;
  const int end = pa::imin(start + partition, row_tokens[row]);
  if (start >= end && part > 0) return;  // the row has fewer partitions than the grid
  const int head0 = blockIdx.y * HEADS;
  const int heads_here = pa::imin(HEADS, num_heads - head0);
  const int* table = block_tables + (long long)row_seq[row] * max_blocks_per_seq;
  const int* my_indices = indices + (long long)row * topk;

  // ---- the tile's queries through k_s (zeros past num_heads) into each warp's 9 fragments
  for (int i = tid; i < HEADS * DIMS / 8; i += pa::NUM_THREADS) {
    const int h = i / (DIMS / 8), c = i % (DIMS / 8);
    pa::Pack16<T> x;
    if (h < heads_here)
      x = *reinterpret_cast<const pa::Pack16<T>*>(query + ((long long)row * num_heads + head0 + h) * DIMS + 8 * c);
    else
#pragma unroll
      for (int e = 0; e < 8; ++e) x.v[e] = to_mma<T>(0.f);
    *reinterpret_cast<pa::Pack16<T>*>(k_s + h * KS + 8 * c) = x;
  }
  if (tid < HEADS) {
    m_s[tid] = pa::neg_inf();
    l_s[tid] = 0.f;
  }
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa[NOPE_STEPS + 1];
#pragma unroll
  for (int k = 0; k < NOPE_STEPS; ++k) wmma::load_matrix_sync(qa[k], k_s + 128 * warp + 16 * k, KS);
  wmma::load_matrix_sync(qa[NOPE_STEPS], k_s + VALUE_DIMS + 16 * warp, KS);
  Acc o[NOPE_STEPS];
#pragma unroll
  for (int j = 0; j < NOPE_STEPS; ++j) wmma::fill_fragment(o[j], 0.f);
  __syncthreads();  // k_s is overwritten by the first chunk

  float* my_scratch = scratch + warp * HEADS * SS;
  for (int c0 = start; c0 < end; c0 += CHUNK) {
    // ---- stage the chunk's rows: item i = (token i / VECS, vector i % VECS); every load before any store
    // (in rounds of BATCH items, 6 or 5: 9 loads in flight with the query's and O's fragments live would spill)
    constexpr int ITEMS = (CHUNK * R::VECS + pa::NUM_THREADS - 1) / pa::NUM_THREADS;
    constexpr int BATCH = ITEMS <= 6 ? ITEMS : (ITEMS + 1) / 2;
#pragma unroll
    for (int j0 = 0; j0 < ITEMS; j0 += BATCH) {
    pa::Pack16<unsigned char> raw[BATCH];
    bool valid[BATCH];
#pragma unroll
    for (int jj = 0; jj < BATCH; ++jj) {
      const int j = j0 + jj;
      const int i = tid + j * pa::NUM_THREADS, tt = i / R::VECS, v = i % R::VECS, t = c0 + tt;
      long long slot = -1;
      if (j < ITEMS && i < CHUNK * R::VECS && t < end) {
        if constexpr (SPARSE)
          slot = my_indices[t];
        else
          slot = (long long)table[t / block_size] * block_size + t % block_size;
      }
      valid[jj] = slot >= 0;
      if (valid[jj]) raw[jj] = *reinterpret_cast<const pa::Pack16<unsigned char>*>(cache + slot * R::BYTES + 16 * v);
    }
#pragma unroll
    for (int jj = 0; jj < BATCH; ++jj) {
      const int j = j0 + jj;
      const int i = tid + j * pa::NUM_THREADS, tt = i / R::VECS, v = i % R::VECS;
      if (j < ITEMS && i < CHUNK * R::VECS) {
        if (v == 0) {
          valid_s[tt] = valid[jj];
          if constexpr (!RECORD)
#pragma unroll
            for (int w = 0; w < WARPS; ++w) scale_s[tt * WARPS + w] = 1.f;
        }
        if (valid[jj])
          stage_vector<T, RECORD>(raw[jj], v, k_s + tt * KS, scale_s + tt * WARPS);
        else  // past the range or an invalid index: zeros, weight 0
          zero_vector<T, RECORD>(v, k_s + tt * KS, scale_s + tt * WARPS);
      }
    }
    }
    __syncthreads();

    // ---- partial S of warp w over its dims (K staged [token][dim]: B = K^T col-major)
    {
      Acc nope, rope;
      wmma::fill_fragment(nope, 0.f);
      wmma::fill_fragment(rope, 0.f);
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
#pragma unroll
      for (int k = 0; k < NOPE_STEPS; ++k) {
        wmma::load_matrix_sync(b, k_s + 128 * warp + 16 * k, KS);
        wmma::mma_sync(nope, qa[k], b, nope);
      }
      wmma::load_matrix_sync(b, k_s + VALUE_DIMS + 16 * warp, KS);
      wmma::mma_sync(rope, qa[NOPE_STEPS], b, rope);
      wmma::store_matrix_sync(s_part + (2 * warp) * HEADS * SS, nope, SS, wmma::mem_row_major);
      wmma::store_matrix_sync(s_part + (2 * warp + 1) * HEADS * SS, rope, SS, wmma::mem_row_major);
    }
    __syncthreads();

    // ---- online softmax: head h = tid / 8, tokens 2g, 2g + 1 (g = tid % 8); P_w = P * scale_w, split in two
    {
      const int h = tid / GROUP, g = tid % GROUP;
      float x[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tt = 2 * g + e;
        float dot = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w)
          dot += scale_s[tt * WARPS + w] * s_part[(2 * w) * HEADS * SS + h * SS + tt] +
                 s_part[(2 * w + 1) * HEADS * SS + h * SS + tt];
        x[e] = valid_s[tt] ? dot * scale : pa::neg_inf();
      }
      float chunk_max = fmaxf(x[0], x[1]);
#pragma unroll
      for (int mask = GROUP / 2; mask >= 1; mask /= 2)
        chunk_max = fmaxf(chunk_max, __shfl_xor_sync(pa::FULL_MASK, chunk_max, mask));
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, chunk_max);
      const float alpha = m_new == pa::neg_inf() ? 1.f : __expf(m_old - m_new);  // m_old = -inf: 0
      float sum = 0.f;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tt = 2 * g + e;
        // -inf: 0; nothing seen yet (m_new = -inf): a NaN logit (fmaxf skips it) stays NaN
        const float p = m_new == pa::neg_inf() ? (x[e] == pa::neg_inf() ? 0.f : x[e]) : __expf(x[e] - m_new);
        sum += p;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
          const float pw = p * scale_s[tt * WARPS + w];
          const T hi = to_mma<T>(pw);
          p_s[(2 * w) * HEADS * PS + h * PS + tt] = hi;
          p_s[(2 * w + 1) * HEADS * PS + h * PS + tt] = to_mma<T>(pw - from_mma(hi));
        }
      }
      sum = pa::group_sum<GROUP>(sum);
      __syncwarp();  // every lane of the head has read m_s[h] before lane g = 0 updates it
      if (g == 0) {
        m_s[h] = m_new;
        l_s[h] = l_s[h] * alpha + sum;
        alpha_s[h] = alpha;
        rescale_s[h] = alpha != 1.f;
      }
    }
    __syncthreads();

    // ---- O = alpha * O (through the scratch; skipped, exactly, when every alpha is 1), then O += P_hi.V + P_lo.V
    // for the warp's column blocks
    {
      bool rescale = false;
#pragma unroll
      for (int h = 0; h < HEADS; ++h) rescale |= rescale_s[h] != 0;
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> ph, pl;
      wmma::load_matrix_sync(ph, p_s + (2 * warp) * HEADS * PS, PS);
      wmma::load_matrix_sync(pl, p_s + (2 * warp + 1) * HEADS * PS, PS);
#pragma unroll
      for (int j = 0; j < NOPE_STEPS; ++j) {
        if (rescale) {
          wmma::store_matrix_sync(my_scratch, o[j], SS, wmma::mem_row_major);
          __syncwarp();
#pragma unroll
          for (int e = lane; e < HEADS * 16; e += pa::WARP) my_scratch[e] *= alpha_s[e / 16];
          __syncwarp();
          wmma::load_matrix_sync(o[j], my_scratch, SS, wmma::mem_row_major);
        }
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> v;
        wmma::load_matrix_sync(v, k_s + 128 * warp + 16 * j, KS);
        wmma::mma_sync(o[j], ph, v, o[j]);
        wmma::mma_sync(o[j], pl, v, o[j]);
        __syncwarp();  // the next block's store reuses the scratch
      }
    }
    __syncthreads();  // the next chunk overwrites k_s, s_part, p_s and the statistics' inputs
  }

  // ---- output: O / l per head to `out` (or the row's partition slot), lse = m + log(l)
  const bool direct = row_parts[row] == 1;
#pragma unroll
  for (int j = 0; j < NOPE_STEPS; ++j) {
    wmma::store_matrix_sync(my_scratch, o[j], SS, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < HEADS * 16; e += pa::WARP) {
      const int h = e / 16, d = 128 * warp + 16 * j + e % 16;
      if (h < heads_here) {
        const float l = l_s[h], inv = !(l <= 0.f) ? 1.f / l : 0.f;  // NaN stays NaN
        const long long rh = (long long)row * num_heads + head0 + h;
        if (direct)
          pa::store(out + rh * VALUE_DIMS + d, my_scratch[e] * inv);
        else
          tmp_out[(rh * max_parts + part) * VALUE_DIMS + d] = my_scratch[e] * inv;
      }
    }
    __syncwarp();
  }
  if (tid < heads_here) {
    const float m = m_s[tid], l = l_s[tid];
    const long long rh = (long long)row * num_heads + head0 + tid;
    if (direct) {
      lse[rh] = !(l <= 0.f) ? m + logf(l) : pa::neg_inf();
    } else {
      tmp_max[rh * max_parts + part] = m;
      tmp_sum[rh * max_parts + part] = l;
    }
  }
}
