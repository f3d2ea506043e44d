// cupy.mla: multi-head latent attention (MLA) over a paged latent cache on CUDA cores, dense or top-k sparse.
//
// Work unit: one thread block per (query row, tile of HEADS = 16 heads, partition of the row's tokens).
// Every head reads the same 576-wide latent row per token, so a block stages each token's row once
// (16-byte loads, dequantized to float32 in shared memory) for its 16 heads: the row is read from
// global memory once per head tile, num_heads / 16 times in all.
// Thread (h, g) = (tid / 8, tid % 8) serves head head0 + h; it holds float4 j = 0..17 of the head's
// query at dims 4 * (8j + g) .. + 3 in registers (the 8 lanes of a head cover the row, a group of 8
// consecutive float4 per step: conflict-free shared loads) and the 16 float4 of the output it owns
// (the same interleave over the first 512 dims), so a token costs each thread 72 + 64 multiply-adds,
// 34 float4 shared loads and 3 shuffles (the head's dot product across its 8 lanes).
// Per chunk of CHUNK = 16 tokens: stage (barrier) | logits of the 16 tokens (to shared memory, by the
// head's first lane; __syncwarp) | online softmax (running max m and sum l per head, kept by each of
// the head's lanes alike) and P.V | barrier.
// Tokens: dense, token t < p + 1 of the row's sequence (p its position) at slot table[t / bs] * bs + t % bs
// (any block size: a runtime value); sparse, entry k of the row's indices (-1: skipped, weight 0).
// Split: partition z covers tokens (entries) [z * partition, (z + 1) * partition) of the row. A row
// with one partition writes out and lse directly; otherwise each partition writes its normalized
// output, max logit and sum to the scratch and mla_merge combines them by log-sum-exp (exact).
// A head that reads nothing (every index -1) writes out 0 and lse -inf.
//
// Latent cache: bytes, ROW bytes per token: 1152 (576 x bf16 / fp16), or the 656-byte fp8 record:
//   [0, 512) e4m3 codes of dims 0..511 | [512, 528) 4 float32 scales, one per 128 dims | [528, 656) 64 bf16 RoPE.
// Template: mla_attention<T, RECORD, SPARSE, FLAW = 0>: T the query/output type (__nv_bfloat16, __half),
// RECORD the fp8 record cache (else T), SPARSE indices (else the block table), FLAW a negative control's
// deliberate bug (kernels/wrong/): 0 none, 1 values read from dims 64..575 (the RoPE dims included),
// 2 index -1 read as slot 0.
// Grid (total_q, ceil(num_heads / 16), max partitions), 128 threads, static shared memory only.
#include "common.cuh"

namespace mla {

constexpr int DIMS = 576, VALUE_DIMS = 512;
constexpr int HEADS = 16;                   // heads per tile
constexpr int LANES = 8;                    // threads per head
constexpr int THREADS = HEADS * LANES;      // 128 = pa::NUM_THREADS
constexpr int QV = DIMS / 4 / LANES;        // 18 float4 of the query per thread
constexpr int AV = VALUE_DIMS / 4 / LANES;  // 16 float4 of the output per thread
constexpr int CHUNK = 16;                   // tokens staged per step
constexpr int RECORD_BYTES = 656, SCALES_AT = 512, ROPE_AT = 528;
enum : int { FLAW_NONE = 0, FLAW_V_FROM_ROPE = 1, FLAW_INVALID_AS_SLOT0 = 2 };
static_assert(THREADS == pa::NUM_THREADS, "one thread per (head, lane)");

template <typename T, bool RECORD>
struct Row {
  static constexpr int BYTES = RECORD ? RECORD_BYTES : DIMS * (int)sizeof(T);
  static constexpr int VECS = BYTES / 16;    // 16-byte vectors per row: 41 (record) or 72
};

// Vector v of the latent row at `row` (ROW bytes) as floats into k (576 floats of shared memory).
// Plain cache: 8 values, dims 8v..8v+7. Record: v < 32: 16 e4m3 codes (dims 16v..) times scale[v / 8];
// v = 32: the scales (read by the code vectors, nothing to store); v > 32: 8 bf16 RoPE values.
template <typename T, bool RECORD>
__device__ __forceinline__ void stage_vector(const unsigned char* __restrict__ row, int v, float* k) {
  const pa::Pack16<unsigned char> raw = *reinterpret_cast<const pa::Pack16<unsigned char>*>(row + 16 * v);
  if constexpr (RECORD) {
    if (v < 32) {
      const float scale = reinterpret_cast<const float*>(row + SCALES_AT)[v >> 3];
      const unsigned short* pairs = reinterpret_cast<const unsigned short*>(raw.v);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float2 two = pa::Fp8<__nv_fp8_e4m3>::pair(pairs[i]);
        k[16 * v + 2 * i] = two.x * scale;
        k[16 * v + 2 * i + 1] = two.y * scale;
      }
    } else if (v > 32) {
      const __nv_bfloat16* rope = reinterpret_cast<const __nv_bfloat16*>(raw.v);
#pragma unroll
      for (int i = 0; i < 8; ++i) k[VALUE_DIMS + 8 * (v - 33) + i] = __bfloat162float(rope[i]);
    }
  } else {
    const T* x = reinterpret_cast<const T*>(raw.v);
#pragma unroll
    for (int i = 0; i < 8; ++i) k[8 * v + i] = pa::to_float(x[i]);
  }
}

template <typename T, bool RECORD>
__device__ __forceinline__ void zero_vector(int v, float* k) {
  if constexpr (RECORD) {
    if (v < 32) {
      for (int i = 0; i < 16; ++i) k[16 * v + i] = 0.f;
    } else if (v > 32) {
      for (int i = 0; i < 8; ++i) k[VALUE_DIMS + 8 * (v - 33) + i] = 0.f;
    }
  } else {
    for (int i = 0; i < 8; ++i) k[8 * v + i] = 0.f;
  }
}

}  // namespace mla

template <typename T, bool RECORD, bool SPARSE, int FLAW = 0>
__global__ void __launch_bounds__(mla::THREADS)
    mla_attention(T* __restrict__ out,                    // [total_q, num_heads, 512]
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
  using namespace mla;
  using R = Row<T, RECORD>;
  __shared__ __align__(16) float k_s[CHUNK * DIMS];
  __shared__ int valid_s[CHUNK];
  __shared__ float p_s[HEADS * CHUNK];     // logits of the chunk, per head

  const int row = blockIdx.x, part = blockIdx.z, tid = threadIdx.x;
  const int start = part * partition;
  const int end = pa::imin(start + partition, row_tokens[row]);
  if (start >= end && part > 0) return;  // the row has fewer partitions than the grid
  const int h = tid / LANES, g = tid % LANES, head = blockIdx.y * HEADS + h;
  const bool active = head < num_heads;
  const int* table = block_tables + (long long)row_seq[row] * max_blocks_per_seq;
  const int* my_indices = indices + (long long)row * topk;

  float4 q[QV];
  {
    const T* qh = query + ((long long)row * num_heads + (active ? head : 0)) * DIMS;
#pragma unroll
    for (int j = 0; j < QV; ++j) {
      const T* e = qh + 4 * (LANES * j + g);
      q[j] = active ? make_float4(pa::to_float(e[0]), pa::to_float(e[1]), pa::to_float(e[2]), pa::to_float(e[3]))
                    : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  float4 acc[AV];
#pragma unroll
  for (int j = 0; j < AV; ++j) acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
  float m = pa::neg_inf(), l = 0.f;

  for (int c0 = start; c0 < end; c0 += CHUNK) {
    // ---- stage the chunk's rows: item i = (token i / VECS, vector i % VECS)
    for (int i = tid; i < CHUNK * R::VECS; i += THREADS) {
      const int tt = i / R::VECS, v = i % R::VECS, t = c0 + tt;
      long long slot = -1;
      if (t < end) {
        if constexpr (SPARSE) {
          slot = my_indices[t];
          if constexpr (FLAW == FLAW_INVALID_AS_SLOT0) slot = slot < 0 ? 0 : slot;
        } else {
          slot = (long long)table[t / block_size] * block_size + t % block_size;
        }
      }
      if (v == 0) valid_s[tt] = slot >= 0;
      if (slot >= 0)
        stage_vector<T, RECORD>(cache + slot * R::BYTES, v, k_s + tt * DIMS);
      else  // past the range or an invalid index: zeros, so that weight 0 times the row stays 0
        zero_vector<T, RECORD>(v, k_s + tt * DIMS);
    }
    __syncthreads();

    // ---- logits of the chunk's tokens for this thread's head; lane 0 of the head keeps them in p_s
    // (a loop over tokens, not unrolled: the query and the output already hold 136 registers)
    float* logits = p_s + h * CHUNK;
#pragma unroll 1
    for (int tt = 0; tt < CHUNK; ++tt) {
      const float4* k4 = reinterpret_cast<const float4*>(k_s + tt * DIMS);
      float dot = 0.f;
#pragma unroll
      for (int j = 0; j < QV; ++j) {
        const float4 kk = k4[LANES * j + g];
        dot += q[j].x * kk.x + q[j].y * kk.y + q[j].z * kk.z + q[j].w * kk.w;
      }
      dot = pa::group_sum<LANES>(dot);
      if (g == 0) logits[tt] = valid_s[tt] ? dot * scale : pa::neg_inf();
    }
    __syncwarp();  // a head's 8 lanes share a warp: lane 0's logits are visible to the other 7

    // ---- online softmax and P.V (values: the row's first 512 dims), every lane of a head alike
    float chunk_max = pa::neg_inf();
#pragma unroll
    for (int tt = 0; tt < CHUNK; ++tt) chunk_max = fmaxf(chunk_max, logits[tt]);
    const float m_new = fmaxf(m, chunk_max);
    if (m_new != pa::neg_inf()) {  // else nothing seen yet: acc and l stay 0
      const float alpha = __expf(m - m_new);  // m = -inf: 0
      l *= alpha;
#pragma unroll
      for (int j = 0; j < AV; ++j) {
        acc[j].x *= alpha;
        acc[j].y *= alpha;
        acc[j].z *= alpha;
        acc[j].w *= alpha;
      }
      constexpr int V_SHIFT = FLAW == FLAW_V_FROM_ROPE ? (DIMS - VALUE_DIMS) / 4 : 0;
#pragma unroll 1
      for (int tt = 0; tt < CHUNK; ++tt) {
        const float p = __expf(logits[tt] - m_new);  // -inf: 0
        l += p;
        const float4* v4 = reinterpret_cast<const float4*>(k_s + tt * DIMS) + V_SHIFT;
#pragma unroll
        for (int j = 0; j < AV; ++j) {
          const float4 vv = v4[LANES * j + g];
          acc[j].x += p * vv.x;
          acc[j].y += p * vv.y;
          acc[j].z += p * vv.z;
          acc[j].w += p * vv.w;
        }
      }
      m = m_new;
    } else {  // a NaN logit is skipped by fmaxf: it makes the row's sum NaN (NaN is data)
#pragma unroll 1
      for (int tt = 0; tt < CHUNK; ++tt)
        if (logits[tt] != logits[tt]) l = logits[tt];
    }
    __syncthreads();  // the next chunk overwrites k_s and valid_s
  }

  if (!active) return;
  const float inv = !(l <= 0.f) ? 1.f / l : 0.f;  // NaN stays NaN
  const long long rh = (long long)row * num_heads + head;
  if (row_parts[row] == 1) {
    T* o = out + rh * VALUE_DIMS;
#pragma unroll
    for (int j = 0; j < AV; ++j) {
      T* e = o + 4 * (LANES * j + g);
      pa::store(e, acc[j].x * inv);
      pa::store(e + 1, acc[j].y * inv);
      pa::store(e + 2, acc[j].z * inv);
      pa::store(e + 3, acc[j].w * inv);
    }
    if (g == 0) lse[rh] = !(l <= 0.f) ? m + logf(l) : pa::neg_inf();
  } else {
    const long long slot = rh * max_parts + part;
    float4* o = reinterpret_cast<float4*>(tmp_out + slot * VALUE_DIMS);
#pragma unroll
    for (int j = 0; j < AV; ++j)
      o[LANES * j + g] = make_float4(acc[j].x * inv, acc[j].y * inv, acc[j].z * inv, acc[j].w * inv);
    if (g == 0) {
      tmp_max[slot] = m;
      tmp_sum[slot] = l;
    }
  }
}

// Merge of a row's partitions: out = sum_z w_z * tmp_out_z / sum_z w_z, w_z = sum_z * exp(max_z - M),
// lse = M + log(sum_z w_z) (-inf and out 0 when no partition saw a token). Rows with one partition were
// written directly. Grid (total_q, num_heads), 128 threads, no shared memory.
template <typename T>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    mla_merge(T* __restrict__ out, float* __restrict__ lse, const float* __restrict__ tmp_out,
              const float* __restrict__ tmp_max, const float* __restrict__ tmp_sum,
              const int* __restrict__ row_parts, int num_heads, int max_parts) {
  const int row = blockIdx.x, head = blockIdx.y, n = row_parts[row];
  if (n <= 1) return;
  const long long rh = (long long)row * num_heads + head, base = rh * max_parts;
  float big = pa::neg_inf();
  for (int z = 0; z < n; ++z)
    if (tmp_sum[base + z] > 0.f) big = fmaxf(big, tmp_max[base + z]);
  float total = 0.f;  // a partition with a NaN sum joins (`!(sum <= 0)`): NaN is data
  for (int z = 0; z < n; ++z)
    if (!(tmp_sum[base + z] <= 0.f)) total += tmp_sum[base + z] * __expf(tmp_max[base + z] - big);
  for (int d = threadIdx.x; d < mla::VALUE_DIMS; d += blockDim.x) {
    float a = 0.f;
    for (int z = 0; z < n; ++z)
      if (!(tmp_sum[base + z] <= 0.f))
        a += tmp_sum[base + z] * __expf(tmp_max[base + z] - big) * tmp_out[(base + z) * mla::VALUE_DIMS + d];
    pa::store(out + rh * mla::VALUE_DIMS + d, !(total <= 0.f) ? a / total : 0.f);
  }
  if (threadIdx.x == 0) lse[rh] = !(total <= 0.f) ? big + logf(total) : pa::neg_inf();
}
