// cupy.tc: cupy.multi's tiles of query rows (query tokens x the heads of a GQA group, one KV head)
// with Q.K^T and P.V on tensor cores (nvcuda::wmma, m16n16k16, float accumulators).
//
// paged_attention_tc<HEAD_DIM, T, C = T, OPTS = 0>: T the query/output type and the MMA's input type
// (__half or __nv_bfloat16), C the cache's (T or fp8: dequantized to T in shared memory; every fp8
// value is exact in both), OPTS the pa::OPT_* bitmask compiled in. Same arguments, work list and
// split-KV merge as paged_attention_multi (multi.cu / multi.cuh): tiles [num_tiles][4], tile_rows
// [num_tiles][tile_tokens][3], row_slots [total_q]; the block size is a runtime value (block_size).
// Grid (num_tiles, num_kv_heads * head chunks, max partitions per tile), 128 threads (4 warps).
//
// A block holds one 16-row tile (row r = token r / heads_here, head head0 + r % heads_here; rows past
// rows_here are zero queries whose results are never written) and walks its partition in chunks of
// CHUNK tokens:
//   1. stage: the chunk's K and V rows (16-byte loads) into shared memory as T, zeros past `end`;
//   2. S = Q.K^T: warp w computes the 16 x 16 block of tokens 16w .. 16w + 15 (HEAD_DIM / 16 MMAs, the
//      query's fragments held in registers for the whole partition); blocks wholly past `end` are skipped;
//   3. online softmax in float (scale, soft-cap, ALiBi, causal and window masks on S; per-token K scales
//      multiply S, per-token V scales P, see below); P split into two
//      16-bit parts, P = P_hi + P_lo (P_hi = P rounded to T, P_lo = the rest rounded): P rounded once to
//      T would cost 2^-11 (fp16) or 2^-8 (bf16) of |V| (beyond compare.py's tolerances where one token
//      dominates a row and |V| is large); the pair keeps about 22 (fp16) or 16 (bf16) bits;
//   4. O += P_hi.V + P_lo.V: warp w owns column blocks w, w + 4, ... of O in accumulator fragments (2 MMAs
//      per 16-token block); when a row's max grew (alpha != 1) each block is first rescaled through the
//      warp's 16 x 16 float scratch (store, scale rows, load: the element mapping is not specified).
// Output as multi.cuh (through the scratch; mq::row_factor, mq::store_row_statistics): a row with one partial
// result is finished here (the sink in its denominator, its lse) and written to `out`, else O / l goes to its
// slot with the max logit and sum, and paged_attention_merge (mq::merge_slots) finishes the row once.
// Per-token fp8 scales (OPT_KV_SCALES): the staged K and V stay exact (scaled, they would be rounded to 16
// bits); K's scale multiplies S in float, V's the probability before its split, relative to v_unit, the
// partition's largest V scale (P * v_scale / v_unit <= 1: e5m2's scales, ~1e-5, would put P * v_scale below
// fp16's normal range), and v_unit multiplies the output.
//
// Shared memory (static, < 48 KiB): q [16][D + 8] T, K and V [CHUNK][D + 8] T, a [16][16] float scratch per
// warp, S [16][CHUNK + 4] float, P_hi and P_lo [16][CHUNK + 8] T, per-row state (with OPT_KV_SCALES the chunk's
// K and V scales and the warps' max V scale, floats). CHUNK * HEAD_DIM <= 4096 (at most 64).
// Padded row strides keep every fragment pointer 32-byte aligned and ldm a multiple of 16 bytes.
#include <mma.h>
#include "multi.cuh"

namespace tc {

using namespace nvcuda;
using pa::NUM_THREADS;
using pa::WARP;
constexpr int NUM_WARPS = NUM_THREADS / WARP;
constexpr int ROWS = 16;  // query rows per tile: the MMA's M

template <int HEAD_DIM>
struct Shape {
  __host__ __device__ static constexpr int chunk() {
    int c = 64;
    while (c * HEAD_DIM > 4096) c /= 2;
    return c;
  }
  static constexpr int CHUNK = chunk();   // tokens staged per step (a multiple of 16)
  static constexpr int KS = HEAD_DIM + 8;  // T elements between staged q/K/V rows
  static constexpr int SS = CHUNK + 4;     // floats between S rows
  static constexpr int PS = CHUNK + 8;     // T elements between P rows
};

template <typename T>
__device__ __forceinline__ T to_mma(float x);
template <>
__device__ __forceinline__ __half to_mma<__half>(float x) { return __float2half(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 to_mma<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
__device__ __forceinline__ float from_mma(__half x) { return __half2float(x); }
__device__ __forceinline__ float from_mma(__nv_bfloat16 x) { return __bfloat162float(x); }

// One 16-byte cache vector (16 / sizeof(C) values) to dst[0..] as T.
template <typename T, typename C>
__device__ __forceinline__ void stage16(const pa::Pack16<C>& p, T* dst) {
  if constexpr (mq::FP8<C>::value) {
    float f[16];
    mq::unpack16(p, f);
    pa::Pack16<T> lo, hi;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      lo.v[e] = to_mma<T>(f[e]);
      hi.v[e] = to_mma<T>(f[8 + e]);
    }
    reinterpret_cast<pa::Pack16<T>*>(dst)[0] = lo;
    reinterpret_cast<pa::Pack16<T>*>(dst)[1] = hi;
  } else {
    *reinterpret_cast<pa::Pack16<T>*>(dst) = p;
  }
}

template <int HEAD_DIM, typename T, typename C, int OPTS>
__device__ __forceinline__ void tile_attention(
    T* __restrict__ out, float* __restrict__ tmp_out, float* __restrict__ max_out, float* __restrict__ sum_out,
    const T* __restrict__ query, const C* __restrict__ key_cache, const C* __restrict__ value_cache,
    const int* __restrict__ block_tables, int max_blocks_per_seq, const int* __restrict__ tiles,
    const int* __restrict__ tile_rows, const int* __restrict__ row_slots, int tile_tokens, int num_heads,
    int num_kv_heads, int head_chunk, int block_size, float scale, int partition_size, int max_slots,
    float* __restrict__ lse, const pa::OptionArgs& options) {
  using S = Shape<HEAD_DIM>;
  constexpr int CHUNK = S::CHUNK, KS = S::KS, SS = S::SS, PS = S::PS;
  constexpr int VEC = 16 / sizeof(C);                 // cache values per 16-byte vector
  static_assert(HEAD_DIM % 16 == 0, "head_dim must be a multiple of the MMA's K (16)");
  constexpr int NV = HEAD_DIM / VEC;                  // vectors per token row
  constexpr int LOADS = (CHUNK * NV + NUM_THREADS - 1) / NUM_THREADS;
  constexpr int DK = HEAD_DIM / 16;                   // k-steps of Q.K^T, column blocks of O
  constexpr int FPW = (DK + NUM_WARPS - 1) / NUM_WARPS;  // O's column blocks per warp: f = warp + 4j < DK
  static_assert(CHUNK % 16 == 0 && CHUNK / 16 <= NUM_WARPS && CHUNK <= 2 * WARP, "thread mapping");
  constexpr bool KV_SCALED = (OPTS & pa::OPT_KV_SCALES) != 0;  // per-token scales (fp8 caches)

  // 16-bit arrays as raw bits: the CPU executor's static __half storage gets a C++ guard variable
  // (a race under racecheck); on a GPU the two declarations are the same memory.
  static_assert(sizeof(T) == sizeof(unsigned short), "16-bit MMA inputs");
  __shared__ __align__(32) unsigned short q_bits[ROWS * KS];
  __shared__ __align__(32) unsigned short k_bits[CHUNK * KS];
  __shared__ __align__(32) unsigned short v_bits[CHUNK * KS];
  __shared__ __align__(32) float scratch[NUM_WARPS * 16 * 16];  // per warp: one O block (rescale, output)
  __shared__ __align__(32) float s_s[ROWS * SS];
  __shared__ __align__(32) unsigned short p_bits[ROWS * PS];
  __shared__ __align__(32) unsigned short p_lo_bits[ROWS * PS];
  T* const q_s = reinterpret_cast<T*>(q_bits);
  T* const k_s = reinterpret_cast<T*>(k_bits);
  T* const v_s = reinterpret_cast<T*>(v_bits);
  T* const p_s = reinterpret_cast<T*>(p_bits);
  T* const p_lo_s = reinterpret_cast<T*>(p_lo_bits);
  __shared__ int row_pos[ROWS], row_lo[ROWS], row_qrow[ROWS], row_head[ROWS], row_slot[ROWS];
  __shared__ float m_s[ROWS], l_s[ROWS], alpha_s[ROWS];
  __shared__ pa::HeadParams row_params[ROWS];  // the rows' heads' score-modifier values (ALiBi's slope, ...)
  __shared__ int rescale_s[ROWS];  // the row's max grew in this chunk (alpha != 1): O needs rescaling
  // OPT_KV_SCALES: the chunk's K scales and V scales / v_unit, and each warp's max V scale of the partition
  // (one element each without: never referenced, so not allocated)
  __shared__ float tok_k[KV_SCALED ? CHUNK : 1], tok_v[KV_SCALED ? CHUNK : 1], warp_vmax[KV_SCALED ? NUM_WARPS : 1];

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
  const int rows_here = ntok * heads_here;
  const pa::Options<OPTS> opt(options, 0, 1);
  const int* table = block_tables + (long long)table_seq * max_blocks_per_seq;

  // Per-token scales: K's multiplies S (in float: the staged fp8 values stay exact in T), V's the
  // probabilities before their split into P_hi + P_lo, relative to v_unit, the partition's largest V scale
  // (so P * v_scale / v_unit <= 1 keeps its bits in fp16, whose range ends near 6e-5 where e5m2's scales
  // lie); v_unit multiplies the output. The max rides on the first barrier below.
  if constexpr (KV_SCALED) {
    float vmax = 0.f;
    for (int t = start + tid; t < end; t += NUM_THREADS)
      vmax = fmaxf(vmax, opt.v_token((long long)table[t / block_size] * block_size + t % block_size, kv_head,
                                     num_kv_heads));
    vmax = pa::warp_max(vmax);
    if (lane == 0) warp_vmax[warp] = vmax;
  }

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
  float v_unit = 1.f;
  if constexpr (KV_SCALED) {
    v_unit = warp_vmax[0];
#pragma unroll
    for (int w = 1; w < NUM_WARPS; ++w) v_unit = fmaxf(v_unit, warp_vmax[w]);
    if (!(v_unit > 0.f)) v_unit = 1.f;  // every V scale 0: any unit
  }
  for (int i = tid; i < ROWS * HEAD_DIM; i += NUM_THREADS) {
    const int r = i / HEAD_DIM, d = i % HEAD_DIM;
    q_s[r * KS + d] = r < rows_here ? query[((long long)row_qrow[r] * num_heads + row_head[r]) * HEAD_DIM + d]
                                    : to_mma<T>(0.f);
  }

  __syncthreads();
  // The tile's query fragments stay in registers for every chunk (warps that compute S blocks only).
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa[DK];
  if (warp < CHUNK / 16)
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) wmma::load_matrix_sync(qa[kk], q_s + kk * 16, KS);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[FPW];
#pragma unroll
  for (int j = 0; j < FPW; ++j) wmma::fill_fragment(o[j], 0.f);
  float* const my_scratch = scratch + warp * 16 * 16;

  const long long kv_stride = (long long)num_kv_heads * HEAD_DIM;  // between token rows
  const C* k_head = key_cache + (long long)kv_head * HEAD_DIM;
  const C* v_head = value_cache + (long long)kv_head * HEAD_DIM;

  for (int c0 = start; c0 < end; c0 += CHUNK) {
    const int n = pa::imin(CHUNK, end - c0);
    const int blocks = (n + 15) / 16;  // 16-token blocks holding tokens of the range
    // ---- 1. stage K and V of tokens c0 .. c0 + n - 1, every load issued before any store
    pa::Pack16<C> kp[LOADS], vp[LOADS];
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
      const int i = tid + j * NUM_THREADS, t = c0 + i / NV;
      if (i < CHUNK * NV && t < end) {
        const long long row = (long long)table[t / block_size] * block_size + t % block_size;
        const long long offset = row * kv_stride + (i % NV) * VEC;
        kp[j] = *reinterpret_cast<const pa::Pack16<C>*>(k_head + offset);
        vp[j] = *reinterpret_cast<const pa::Pack16<C>*>(v_head + offset);
      }
    }
    if constexpr (KV_SCALED) {
      if (tid < CHUNK) {
        const int t = c0 + tid;
        const long long row = t < end ? (long long)table[t / block_size] * block_size + t % block_size : 0;
        tok_k[tid] = t < end ? opt.k_token(row, kv_head, num_kv_heads) : 0.f;
        tok_v[tid] = t < end ? opt.v_token(row, kv_head, num_kv_heads) / v_unit : 0.f;
      }
    }
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
      const int i = tid + j * NUM_THREADS, tt = i / NV;
      if (i < CHUNK * NV) {
        T* kd = k_s + tt * KS + (i % NV) * VEC;
        T* vd = v_s + tt * KS + (i % NV) * VEC;
        if (tt < n) {
          stage16(kp[j], kd);
          stage16(vp[j], vd);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) kd[e] = vd[e] = to_mma<T>(0.f);
        }
      }
    }
    __syncthreads();

    // ---- 2. S[:, 16w .. 16w + 15] = Q . K^T on tensor cores (K staged [token][dim]: B = K^T col-major)
    if (warp < blocks) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s;
      wmma::fill_fragment(s, 0.f);
#pragma unroll
      for (int kk = 0; kk < DK; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
        wmma::load_matrix_sync(b, k_s + warp * 16 * KS + kk * 16, KS);
        wmma::mma_sync(s, qa[kk], b, s);
      }
      wmma::store_matrix_sync(s_s + warp * 16, s, SS, wmma::mem_row_major);
    }
    __syncthreads();

    // ---- 3. online softmax: warp w takes rows w, w + 4, ...; lanes take tokens lane, lane + 32
    for (int r = warp; r < ROWS; r += NUM_WARPS) {
      float x[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lt = lane + h * WARP, t = c0 + lt;
        x[h] = pa::neg_inf();
        if (r < rows_here && lt < n && mq::Causal::visible(t, row_pos[r], row_lo[r])) {
          float dot = s_s[r * SS + lt];
          if constexpr (KV_SCALED) dot *= tok_k[lt];
          x[h] = opt.logit(dot, scale, pa::ScoreAt{row_pos[r], t, row_head[r], kv_head, row_params[r]});
        }
      }
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, pa::warp_max(fmaxf(x[0], x[1])));
      float alpha = 1.f, sum = 0.f;
      if (m_new != pa::neg_inf()) alpha = __expf(m_old - m_new);  // m_old = -inf: 0 (O and l are 0 anyway)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lt = lane + h * WARP;
        // nothing seen yet (m_new = -inf): masked weights 0, a NaN logit (fmaxf skips it) stays NaN
        const float p = m_new == pa::neg_inf() ? (x[h] == pa::neg_inf() ? 0.f : x[h]) : __expf(x[h] - m_new);
        if (lt < CHUNK) {
          float pv = p;  // the weight of V's staged row
          if constexpr (KV_SCALED) pv *= tok_v[lt];
          const T hi = to_mma<T>(pv);
          p_s[r * PS + lt] = hi;
          p_lo_s[r * PS + lt] = to_mma<T>(pv - from_mma(hi));
          sum += p;
        }
      }
      sum = pa::warp_sum(sum);
      if (lane == 0) {
        m_s[r] = m_new;
        l_s[r] = l_s[r] * alpha + sum;
        alpha_s[r] = alpha;
        rescale_s[r] = alpha != 1.f;
      }
    }
    __syncthreads();

    // ---- 4. O = alpha * O + P_hi . V + P_lo . V on each warp's column blocks (O in its fragments); the
    // rescale goes through the warp's scratch (the fragments' element mapping is not specified) and is
    // skipped, exactly, in a chunk where no row's max grew (every alpha is 1: the common case once the max settles)
    bool rescale = false;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) rescale |= rescale_s[r] != 0;
#pragma unroll
    for (int j = 0; j < FPW; ++j) {
      const int f = warp + j * NUM_WARPS;
      if (f >= DK) break;
      if (rescale) {
        wmma::store_matrix_sync(my_scratch, o[j], 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 16 * 16; e += WARP) my_scratch[e] *= alpha_s[e / 16];
        __syncwarp();
        wmma::load_matrix_sync(o[j], my_scratch, 16, wmma::mem_row_major);
        __syncwarp();  // the next block's store reuses the scratch
      }
      for (int kk = 0; kk < blocks; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        wmma::load_matrix_sync(b, v_s + kk * 16 * KS + f * 16, KS);
        wmma::load_matrix_sync(a, p_s + kk * 16, PS);
        wmma::mma_sync(o[j], a, b, o[j]);
        wmma::load_matrix_sync(a, p_lo_s + kk * 16, PS);
        wmma::mma_sync(o[j], a, b, o[j]);
      }
    }
    __syncthreads();  // the next chunk overwrites k_s, v_s, s_s, p_s and the row statistics
  }

  // ---- output (mq::row_factor, mq::store_row_statistics): the row's only partial result finished (sink, lse)
  // to `out`, or one of several, normalized by its own sum, to its slot with its statistics (times v_scale, and
  // v_unit with per-token scales)
#pragma unroll
  for (int j = 0; j < FPW; ++j) {
    const int f = warp + j * NUM_WARPS;
    if (f >= DK) break;
    wmma::store_matrix_sync(my_scratch, o[j], 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 16 * 16; e += WARP) {
      const int r = e / 16, d = f * 16 + e % 16;
      if (r < rows_here) {
        const bool direct = row_slots[row_qrow[r]] == 1;
        const float inv = mq::row_factor(opt, direct, m_s[r], l_s[r], row_head[r]) * v_unit;
        const long long qh = (long long)row_qrow[r] * num_heads + row_head[r];
        if (direct)
          pa::store(out + qh * HEAD_DIM + d, my_scratch[e] * inv);
        else
          tmp_out[(qh * max_slots + row_slot[r]) * HEAD_DIM + d] = my_scratch[e] * inv;
      }
    }
    __syncwarp();
  }
  for (int r = tid; r < rows_here; r += NUM_THREADS) {
    const long long qh = (long long)row_qrow[r] * num_heads + row_head[r];
    mq::store_row_statistics(opt, row_slots[row_qrow[r]] == 1, qh, qh * max_slots + row_slot[r], m_s[r], l_s[r], lse,
                             max_out, sum_out);
  }
}

}  // namespace tc

template <int HEAD_DIM, typename T, typename C = T, int OPTS = 0>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_tc(T* __restrict__ out,             // [total_q, num_heads, HEAD_DIM]
                       float* __restrict__ tmp_out,     // [total_q, num_heads, max_slots, HEAD_DIM]
                       float* __restrict__ max_out,     // [total_q, num_heads, max_slots]
                       float* __restrict__ sum_out,     // [total_q, num_heads, max_slots]
                       const T* __restrict__ query,     // [total_q, num_heads, HEAD_DIM]
                       const C* __restrict__ key_cache, // [num_blocks, block_size, num_kv_heads, HEAD_DIM]
                       const C* __restrict__ value_cache,
                       const int* __restrict__ block_tables, int max_blocks_per_seq,
                       const int* __restrict__ tiles, const int* __restrict__ tile_rows,
                       const int* __restrict__ row_slots, int tile_tokens, int num_heads, int num_kv_heads,
                       int head_chunk, int block_size, float scale, int partition_size, int max_slots,
                       float* __restrict__ lse,  // [total_q, num_heads], written with OPT_LSE
                       PA_OPTION_PARAMS) {
  tc::tile_attention<HEAD_DIM, T, C, OPTS>(
      out, tmp_out, max_out, sum_out, query, key_cache, value_cache, block_tables, max_blocks_per_seq, tiles,
      tile_rows, row_slots, tile_tokens, num_heads, num_kv_heads, head_chunk, block_size, scale, partition_size,
      max_slots, lse, PA_OPTION_ARGS);
}
