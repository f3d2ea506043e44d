// common.cuh: what the CUDA C paged-attention variants share (kernels/cupy_raw/*.cu).
//
// attend(): one thread block computes attention for TILE query heads of one KV head over the
// token range [start, end) of one sequence (vLLM's paged_attention_kernel design):
//   K: thread groups of max(32 / BLOCK_SIZE, 1) lanes per token; a warp walks one cache block at
//      a time; each lane loads 16-byte vectors (4 floats / 8 halves / 16 fp8), interleaved across the group
//      so a group reads contiguous bytes; the dot product is finished with xor-shuffles in the group.
//   softmax: logits in dynamic shared memory; max and sum by warp shuffles + one shared-memory
//      step across the 4 warps; accumulation in float32.
//   V: a token row is split across min(head_dim / VEC, 32) lanes in 16-byte vectors; a warp
//      takes several token rows at once; rows, then warps, are summed (shuffles, then shared memory).
// ROW_MAPPED (cupy.rows): the thread mapping ignores the block size. K: TGS = NUM_VECS / 4 lanes per
//   token (4 vectors each, 64 bytes for head dim 128 in fp16; NVFP4: one 32-value vector each), a warp
//   loads UK passes of 32 / TGS tokens (8 vectors per lane, 4 KiB per warp) before any math; V: each lane
//   loads UV token rows (128 bytes) before any math. Each token row is found through the table on its
//   own (an L1 hit), so a block size of 1 keeps as many bytes in flight as 256; the block size only sets
//   the index arithmetic.
// Tokens at or past `end` are never loaded (their slots may hold NaN), and only the blocks that
// hold tokens of [start, end) are looked up in the block table (unused entries may be -1).
// The KV policy (PagedKV, DenseKV) maps a logical block to its first token row in the cache.
//
// Precisions: T is the query's and output's type (float, __half, __nv_bfloat16), KV the cache's (T,
// or __nv_fp8_e4m3 / __nv_fp8_e5m2: 16 values per 16-byte vector, dequantized to float in pairs, or
// pa::Nvfp4: 32 e2m1 values per 16-byte K vector with their two e4m3 block scales loaded beside them, 16 per
// 8-byte V vector; CacheVec says what attend loads for each).
// Options (AttentionOptions): the kernel's Opt type carries a compile-time bitmask (Options<FLAGS>,
// pa::OPT_*) and the runtime values (pa::OptionArgs); with FLAGS = 0 no option code is compiled.
// k_scale costs nothing here: the launcher folds it into `scale`. v_scale multiplies the output,
// the soft-cap and ALiBi rewrite each logit after the scale (Opt::logit), and a window moves `start`.
// Sinks and the log-sum-exp act where a head's softmax is finished (Opt::inv_denominator, Opt::lse): in
// attend for a kernel that covers the whole range, in the reduce (or merge) for split-KV kernels, whose
// partition kernels are built without them (PARTITION_FLAGS), so a sink is added once, after the merge.
//
// reduce kernel: combines the partitions of split-KV variants (log-sum-exp rescaling).
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace pa {

constexpr int WARP = 32;
// The default threads per block. A variant's kernels take their thread count as a template argument
// (THREADS, a multiple of 32; kernels/cupy_raw/<variant>.py TUNABLES["threads"]); NUM_THREADS is its default
// and the thread count of the kernels that have no such argument.
constexpr int NUM_THREADS = 128;
constexpr int NUM_WARPS = NUM_THREADS / WARP;
constexpr unsigned FULL_MASK = 0xffffffffu;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

// 16 bytes of T: one vector load / store (ld.global.v4).
template <typename T>
struct alignas(16) Pack16 {
  T v[16 / sizeof(T)];
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half(x); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }

// fp8 caches: Fp8<KV>::pair dequantizes two adjacent values (one fp8x2 -> half2 cvt instruction on
// sm_89+, cuda_fp8.h's software conversion on sm_80), then widens them to float; every fp8 value is
// exact in half.
template <typename KV>
struct Fp8 {
  static constexpr bool value = false;
};
template <__nv_fp8_interpretation_t KIND>
struct Fp8Format {
  static constexpr bool value = true;
  __device__ __forceinline__ static float2 pair(unsigned short two) {
    return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(two, KIND)));
  }
};
template <>
struct Fp8<__nv_fp8_e4m3> : Fp8Format<__NV_E4M3> {};
template <>
struct Fp8<__nv_fp8_e5m2> : Fp8Format<__NV_E5M2> {};
template <typename KV>
constexpr bool is_fp8 = Fp8<KV>::value;

// NVFP4 caches (OPT_NVFP4): bytes of two e2m1 codes (element 2i in the low nibble, as cuda_fp4.h packs
// them) with one e4m3 block scale per 16 values beside the cache; value = e2m1 * block scale (* k_scale,
// folded into `scale`; v_scale in the output). Nvfp4 is the cache's element type C: one byte, two values.
struct Nvfp4 {
  unsigned char bits;
};
template <typename C>
constexpr bool is_nvfp4 = false;
template <>
constexpr bool is_nvfp4<Nvfp4> = true;

// e2m1 code (4 bits: sign, 2 exponent bits, 1 mantissa bit) -> 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives.
__device__ __forceinline__ float e2m1(unsigned code) {
  const unsigned mag = code & 7u;
  const float v = mag < 2u ? 0.5f * (float)mag : __int_as_float((int)(((126u + (mag >> 1)) << 23) | ((mag & 1u) << 22)));
  return (code & 8u) != 0u ? -v : v;
}

// An e4m3 byte as float (subnormals included; every e4m3 value is exact in half).
__device__ __forceinline__ float e4m3(unsigned char bits) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(bits, __NV_E4M3)));
}

// 16 NVFP4 values (8 bytes of e2m1 pairs, element 2i in the low nibble) times their e4m3 block scale, as
// floats, to f[0..16).
__device__ __forceinline__ void unpack_fp4(const uint2& p, unsigned char block_scale, float* f) {
  const float s = e4m3(block_scale);
  const unsigned words[2] = {p.x, p.y};
#pragma unroll
  for (int w = 0; w < 2; ++w)
#pragma unroll
    for (int b = 0; b < 8; ++b) f[8 * w + b] = e2m1((words[w] >> (4 * b)) & 15u) * s;
}

// The VEC values of one 16-byte vector as floats.
template <typename KV>
__device__ __forceinline__ void unpack(const Pack16<KV>& p, float (&f)[16 / sizeof(KV)]) {
  if constexpr (is_fp8<KV>) {
    const unsigned short* pairs = reinterpret_cast<const unsigned short*>(p.v);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 two = Fp8<KV>::pair(pairs[i]);
      f[2 * i] = two.x;
      f[2 * i + 1] = two.y;
    }
  } else {
#pragma unroll
    for (int e = 0; e < 16 / (int)sizeof(KV); ++e) f[e] = to_float(p.v[e]);
  }
}

// The vectors attend() loads from a cache of element type C, and what one holds: VALUES values in ELEMS
// elements of C, with GROUPS NVFP4 block scales (Scales: their e4m3 bytes, loaded beside the codes).
// The query's type and fp8: 16 bytes (Pack16), no scales. NVFP4: 16 bytes (32 values, two scale groups)
// when every row's codes are a multiple of 16 bytes (HEAD_DIM % 32 == 0) and not NARROW, else 8 bytes (16
// values, one group). The V phase asks for NARROW vectors: a lane keeps TILE accumulators per value it
// loads, and 16 values (fp8's count) keep them in registers at TILE 8.
template <int GROUPS>
struct Fp4Bits;
template <>
struct Fp4Bits<1> {
  using Vec = uint2;
  using Scales = unsigned char;
};
template <>
struct Fp4Bits<2> {
  using Vec = uint4;
  using Scales = unsigned short;  // little-endian: the first group's scale in the low byte
};

template <typename C, int HEAD_DIM, bool NARROW = false>
struct CacheVec {
  using Vec = Pack16<C>;
  using Scales = unsigned char;  // never loaded
  static constexpr int VALUES = 16 / sizeof(C), ELEMS = VALUES, GROUPS = 0, PER_ELEM = 1;
  static constexpr bool QUANTIZED = is_fp8<C>;  // values are dequantized (fp8 pairs), else read as they are
  static constexpr int LANE_VECS = 4;           // row-mapped K: vectors of a token's row per lane
  __device__ __forceinline__ static Vec load(const C* row, int v) {
    return *reinterpret_cast<const Vec*>(row + v * ELEMS);
  }
  __device__ __forceinline__ static const unsigned char* scale_row(const unsigned char*, long long, int, int) {
    return nullptr;
  }
  __device__ __forceinline__ static Scales load_scales(const unsigned char*, int) { return 0; }
  __device__ __forceinline__ static void dequantize(const Vec& p, Scales, float (&f)[VALUES]) { unpack(p, f); }
  // Where q_smem keeps query value d of a head, and the float4 chunk e of vector v (see the NVFP4 case).
  static constexpr bool SWIZZLED = false;
  __device__ __forceinline__ static int q_position(int d) { return d; }
  __device__ __forceinline__ static int q_chunk(int, int e) { return e; }
};

template <int HEAD_DIM, bool NARROW>
struct CacheVec<Nvfp4, HEAD_DIM, NARROW> {
  static_assert(HEAD_DIM % 16 == 0, "an NVFP4 cache needs head_dim to be a multiple of 16 (one scale per 16 values)");
  static constexpr int GROUPS = !NARROW && HEAD_DIM % 32 == 0 ? 2 : 1;
  using Vec = typename Fp4Bits<GROUPS>::Vec;
  using Scales = typename Fp4Bits<GROUPS>::Scales;
  static constexpr int VALUES = 16 * GROUPS, ELEMS = VALUES / 2, PER_ELEM = 2;  // two codes a byte
  static constexpr bool QUANTIZED = true;
  // row-mapped K: 32 values of a token's row per lane (float16's share): ptxas keeps a lane's share of the
  // query tile in registers, and with more (4 32-value vectors) it ran out: 255 registers and 1.6 KB of
  // spills at head dim 128, 0.3-1 KB at 64-96 with 64 values; 32 values: 156-165 registers, no spills, 64..512
  static constexpr int LANE_VECS = 32 / VALUES;
  __device__ __forceinline__ static Vec load(const Nvfp4* row, int v) {
    return *reinterpret_cast<const Vec*>(row + v * ELEMS);
  }
  // The block scales of cache row `row` (a slot) and KV head `kv_head`: HEAD_DIM / 16 bytes.
  __device__ __forceinline__ static const unsigned char* scale_row(const unsigned char* scales, long long row,
                                                                   int kv_head, int num_kv_heads) {
    return scales + (row * num_kv_heads + kv_head) * (HEAD_DIM / 16);
  }
  __device__ __forceinline__ static Scales load_scales(const unsigned char* row_scales, int v) {
    return *reinterpret_cast<const Scales*>(row_scales + v * GROUPS);
  }
  // 32-value vectors are 128 bytes of staged query: every lane of a token's group would read the same banks
  // (2-way conflicts at head dim 128, 8-way at 512). q_smem rotates vector v's float4 chunks by v (chunk e at
  // (e + v) % 8), so up to 8 lanes reading chunk e of different vectors hit 8 different bank quads.
  static constexpr bool SWIZZLED = GROUPS == 2;
  __device__ __forceinline__ static int q_position(int d) {
    if constexpr (SWIZZLED) {
      const int v = d / VALUES, e = d % VALUES / 4;
      return v * VALUES + (e + v) % (VALUES / 4) * 4 + d % 4;
    }
    return d;
  }
  __device__ __forceinline__ static int q_chunk(int v, int e) {
    if constexpr (SWIZZLED) return (e + v) % (VALUES / 4);
    return e;
  }
  __device__ __forceinline__ static void dequantize(const Vec& p, Scales s, float (&f)[VALUES]) {
    if constexpr (GROUPS == 2) {
      unpack_fp4(make_uint2(p.x, p.y), (unsigned char)(s & 0xffu), f);
      unpack_fp4(make_uint2(p.z, p.w), (unsigned char)(s >> 8), f + 16);
    } else {
      unpack_fp4(p, s, f);
    }
  }
};

// Lane bytes in flight the row-mapped phases aim at: 8 16-byte vectors (UK, UV below).
constexpr int ROW_BYTES_IN_FLIGHT = 128;

// ---- options: which are compiled in (FLAGS), and their runtime values
// pa::OPT_* (the bits), pa::OptionArgs (the option arguments, in the option table's order),
// PA_OPTION_PARAMS (a kernel's option parameters) and PA_OPTION_ARGS (them gathered into an OptionArgs)
// come from the option table (sandbox/problem/option_table.py): load_source puts them in front of the source.

// The first token a decode query reads: the window's start with OPT_WINDOW in flags, else 0.
__device__ __forceinline__ int first_token(int flags, int context_len, int window_left) {
  return (flags & OPT_WINDOW) != 0 && context_len - 1 - window_left > 0 ? context_len - 1 - window_left : 0;
}

// Options<FLAGS>: the option arguments (OptionArgs) plus what the kernels derive from them; fields of
// options not in FLAGS are never read. A kernel builds one per block (for the query heads it serves) and
// hands it to attend; an option enters the math through the hooks below (first_token, slope, logit),
// and negative controls derive from it to change one rule.
template <int FLAGS>
struct Options : OptionArgs {
  static constexpr int flags = FLAGS;
  float inv_cap;        // OPT_SOFTCAP: 1 / soft_cap (logit = cap * tanh(logit / cap))
  const float* alibi;   // OPT_ALIBI: the served heads' slopes (alibi[g] for head g of the tile)
  const float* sink;    // OPT_SINKS: the served heads' sink logits (sink[g] for head g of the tile)
  int position;         // the query token's position (decode: context_len - 1); ALiBi adds slope * (t - position)
  // OPT_WINDOW: only tokens t >= position - window_left; OPT_VSCALE: output *= v_scale (V = value * v_scale)

  __device__ __forceinline__ Options(const OptionArgs& args, int first_head, int context_len)
      : OptionArgs(args), inv_cap(0.f), alibi(nullptr), sink(nullptr), position(context_len - 1) {
    if constexpr ((FLAGS & OPT_SOFTCAP) != 0) inv_cap = 1.f / soft_cap;
    if constexpr ((FLAGS & OPT_ALIBI) != 0) alibi = alibi_slopes + first_head;
    if constexpr ((FLAGS & OPT_SINKS) != 0) sink = sinks + first_head;
  }

  // The first token the query reads: the window's start (0 without a window).
  __device__ __forceinline__ int first_token() const { return pa::first_token(FLAGS, position + 1, window_left); }

  // ALiBi slope of served head g (0 without ALiBi).
  __device__ __forceinline__ float slope(int g) const {
    if constexpr ((FLAGS & OPT_ALIBI) != 0) return alibi[g];
    return 0.f;
  }

  // The logit of token `token` from its dot product q . k: scale, then soft-cap, then ALiBi.
  __device__ __forceinline__ float logit(float dot, float scale, float slope_g, int token) const {
    float s = dot * scale;
    if constexpr ((FLAGS & OPT_SOFTCAP) != 0) s = soft_cap * tanhf(s * inv_cap);
    if constexpr ((FLAGS & OPT_ALIBI) != 0) s += slope_g * (float)(token - position);
    return s;
  }

  // Per-token scales (OPT_KV_SCALES): K's and V's scale of cache row `row` (block * block_size + offset)
  // and KV head `kv_head`; 1 without (the per-tensor k_scale is in `scale`, v_scale in the output).
  __device__ __forceinline__ float k_token(long long row, int kv_head, int num_kv_heads) const {
    if constexpr ((FLAGS & OPT_KV_SCALES) != 0) return k_scales[row * num_kv_heads + kv_head];
    return 1.f;
  }
  __device__ __forceinline__ float v_token(long long row, int kv_head, int num_kv_heads) const {
    if constexpr ((FLAGS & OPT_KV_SCALES) != 0) return v_scales[row * num_kv_heads + kv_head];
    return 1.f;
  }

  // 1 / the softmax denominator of served head g, from the range's max logit and its sum of
  // exp(logit - max) over the tokens (`total`): with OPT_SINKS, the sink joins the denominator only,
  //   out = acc * e^(max - m) / (total * e^(max - m) + e^(sink - m)),  m = max(max, sink);
  // without, 1 / total. No token (total 0, max -inf): 0 (the output is 0); a NaN total stays NaN (`!(total <= 0)`).
  __device__ __forceinline__ float inv_denominator(float max, float total, int g) const {
    if constexpr ((FLAGS & OPT_SINKS) != 0) {
      const float s = sink[g], m = fmaxf(max, s);
      const float f = !(total <= 0.f) ? __expf(max - m) : 0.f;
      return f / (total * f + __expf(s - m));
    }
    return !(total <= 0.f) ? 1.f / total : 0.f;
  }

  // The log-sum-exp (natural log) of the tokens' logits from their max and sum of exp(logit - max):
  // the sink is not part of it; no token: -inf; a NaN total: NaN.
  __device__ __forceinline__ float lse(float max, float total) const {
    return !(total <= 0.f) ? max + logf(total) : neg_inf();
  }
};

// The options a split-KV partition kernel is built with: the sink and the log-sum-exp belong to the
// merge of the partitions (the reduce), never to one partition.
template <int FLAGS>
constexpr int PARTITION_FLAGS = FLAGS & ~(OPT_SINKS | OPT_LSE);
// The options a reduce or merge kernel takes: those it finishes.
template <int FLAGS>
constexpr int MERGE_FLAGS = FLAGS & (OPT_SINKS | OPT_LSE);

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// Sum over aligned groups of WIDTH lanes (a power of two <= 32); every lane of the warp calls it.
template <int WIDTH>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int m = WIDTH / 2; m >= 1; m /= 2) x += __shfl_xor_sync(FULL_MASK, x, m);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int m = WARP / 2; m >= 1; m /= 2) x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, m));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) { return group_sum<WARP>(x); }

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
                                             const float (&slopes)[TILE], int token, bool valid, bool writer,
                                             int index, float* logits, int logits_stride, float (&qk_max)[TILE],
                                             float k_token_scale = 1.f) {
#pragma unroll
  for (int g = 0; g < TILE; ++g) {
    float dot = group_sum<TGS>(qk[g]);
    if constexpr ((Opt::flags & OPT_KV_SCALES) != 0) dot *= k_token_scale;
    qk[g] = opt.logit(dot, scale, slopes[g], token);
  }
  if (valid) {
#pragma unroll
    for (int g = 0; g < TILE; ++g) {
      qk_max[g] = fmaxf(qk_max[g], qk[g]);
      if (writer) logits[g * logits_stride + index] = qk[g];
    }
  }
}

// K phase, block-mapped (vLLM): a warp walks one cache block at a time, TGS = 32 / BLOCK_SIZE lanes
// per token (1 from block size 32 up); one table lookup per block. With a window, `start` may fall
// inside a block: its tokens before `start` are neither loaded nor kept (OPT_WINDOW only; without it
// every start is a block boundary).
template <int BLOCK_SIZE, int HEAD_DIM, int TILE, int THREADS, typename T, typename KV, typename Opt>
__device__ __forceinline__ void block_mapped_logits(const KV& kv, const T* __restrict__ k_head, long long kv_stride,
                                                    int kv_head, int num_kv_heads,
                                                    const float* q_smem, float scale, const Opt& opt,
                                                    const float (&slopes)[TILE], int start, int end,
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
      store_logits<TILE, TGS>(qk, scale, opt, slopes, token, valid, lane_in_group == 0, token - start, logits,
                              logits_stride, qk_max, valid ? opt.k_token(row0 + offset, kv_head, num_kv_heads) : 1.f);
    }
  }
}

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
                                                  const float (&slopes)[TILE], int start, int end,
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
      store_logits<TILE, TGS>(qk, scale, opt, slopes, t, t < end, lane_in_group == 0, t - start, logits,
                              logits_stride, qk_max, t < end ? opt.k_token(kv.row(t), kv_head, num_kv_heads) : 1.f);
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

// Shared memory: static q tile + reduction slots; dynamic `smem` must hold
// max(TILE * logits_stride, NUM_WARPS * TILE * HEAD_DIM) floats (logits, then the warps' partial outputs).
//
// T:        the cache's element type (K/V); Q: the query's (float, __half, __nv_bfloat16)
// q:        the tile's first query head; heads are HEAD_DIM apart; heads >= num_heads_here are not read
// scale:    softmax scale (times k_scale); opt: Options<FLAGS> or a type derived from it
// out:      out + g * out_head_stride + d  <- normalized output of head g (OutT: Q, or float for partitions)
// max_out, sum_out (nullable): + g * stats_stride <- the range's max logit and sum of exp(logit - max)
// ROW_MAPPED: the block-size-independent mapping of cupy.rows (see the top of this file).
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
  float qk_max[TILE], slopes[TILE];
#pragma unroll
  for (int g = 0; g < TILE; ++g) {
    qk_max[g] = neg_inf();
    slopes[g] = g < num_heads_here ? opt.slope(g) : 0.f;
  }
  const T* k_head = key_cache + (long long)kv_head * HEAD_DIM / VRV::PER_ELEM;
  if constexpr (ROW_MAPPED)
    row_mapped_logits<BLOCK_SIZE, HEAD_DIM, TILE, THREADS>(kv, k_head, kv_stride, kv_head, num_kv_heads, q_smem, scale, opt, slopes, start, end,
                                                  logits, logits_stride, qk_max);
  else
    block_mapped_logits<BLOCK_SIZE, HEAD_DIM, TILE, THREADS>(kv, k_head, kv_stride, kv_head, num_kv_heads, q_smem, scale, opt, slopes, start, end,
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
      // UV rows per lane in flight (ROW_BYTES_IN_FLIGHT: 8 16-byte vectors, 16 NVFP4 8-byte ones) before
      // their math; rows past `end` are neither loaded nor used (their slots may hold NaN).
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

// Split-KV, second pass: combine the partitions of one (sequence, head) with log-sum-exp weights
//   w_p = exp_sum_p * exp(max_p - max),  out = sum_p w_p * tmp_out_p / sum_p w_p.
// Reads only this sequence's ceil((context_len - first) / partition_size) partitions (empty ones are
// never written); first = the window's start with WINDOW (window_left is read only then), else 0.
// FLAGS (OPT_SINKS, OPT_LSE: MERGE_FLAGS of the problem's): the sink joins the merged denominator
// (out = sum_p w_p * tmp_out_p * Opt::inv_denominator), and lse[seq, head] = Opt::lse of the merged range.
// Grid (num_heads, num_seqs); dynamic shared memory: max_partitions floats.
template <int HEAD_DIM, typename T, bool WINDOW = false, int FLAGS = 0>
__global__ void __launch_bounds__(NUM_THREADS)
    paged_attention_reduce(T* __restrict__ out, const float* __restrict__ tmp_out, const float* __restrict__ max_logits,
                           const float* __restrict__ exp_sums, const int* __restrict__ context_lens, int num_heads,
                           int max_partitions, int partition_size,
                           float* __restrict__ lse,  // [num_seqs, num_heads], written with OPT_LSE in FLAGS
                           PA_OPTION_PARAMS) {
  extern __shared__ float weights[];
  __shared__ float red[2][NUM_WARPS];
  const int head = blockIdx.x, seq = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / WARP, lane = tid % WARP;
  const int tokens = context_lens[seq] - first_token(WINDOW ? OPT_WINDOW : 0, context_lens[seq], window_left);
  const int parts = (tokens + partition_size - 1) / partition_size;
  const long long base = ((long long)seq * num_heads + head) * max_partitions;

  float m = neg_inf();
  for (int p = tid; p < parts; p += NUM_THREADS) m = fmaxf(m, max_logits[base + p]);
  m = warp_max(m);
  if (lane == 0) red[0][warp] = m;
  __syncthreads();
  m = red[0][0];
#pragma unroll
  for (int w = 1; w < NUM_WARPS; ++w) m = fmaxf(m, red[0][w]);

  float s = 0.f;
  for (int p = tid; p < parts; p += NUM_THREADS) {
    const float w = exp_sums[base + p] * __expf(max_logits[base + p] - m);
    weights[p] = w;
    s += w;
  }
  s = warp_sum(s);
  if (lane == 0) red[1][warp] = s;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < NUM_WARPS; ++w) total += red[1][w];

  const Options<MERGE_FLAGS<FLAGS>> opt(PA_OPTION_ARGS, head, context_lens[seq]);
  for (int d = tid; d < HEAD_DIM; d += NUM_THREADS) {
    float acc = 0.f;
    for (int p = 0; p < parts; ++p) acc += weights[p] * tmp_out[(base + p) * HEAD_DIM + d];
    if constexpr ((FLAGS & OPT_SINKS) != 0)  // the sink joins the merged denominator, once
      store(out + ((long long)seq * num_heads + head) * HEAD_DIM + d, acc * opt.inv_denominator(m, total, 0));
    else
      store(out + ((long long)seq * num_heads + head) * HEAD_DIM + d, acc / total);
  }
  if constexpr ((FLAGS & OPT_LSE) != 0)
    if (tid == 0) lse[(long long)seq * num_heads + head] = opt.lse(m, total);
}

}  // namespace pa
