// codecs.cuh: the cache's element formats and the vectors a kernel loads from them.
//
// T is the query's and output's type (float, __half, __nv_bfloat16), C the cache's (T, or __nv_fp8_e4m3 /
// __nv_fp8_e5m2: 16 values per 16-byte vector, dequantized to float in pairs, or pa::Nvfp4: 32 e2m1 values per
// 16-byte K vector with their two e4m3 block scales loaded beside them, 16 per 8-byte V vector; CacheVec says
// what attend loads for each).
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace pa {

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

}  // namespace pa
