// cupy.write_cache: store new tokens' K/V rows at their slots (vLLM's reshape_and_cache for the
// canonical layout). Block i writes token i's row of num_kv_heads * head_dim elements into row
// slot_mapping[i] of the cache; slot < 0 (padding) is skipped.
// write_cache<U>: a cache of the inputs' dtype; U is the copy unit (uint4 when a row is a multiple of
//   16 bytes): the kernel moves bits, so float32, float16 and bfloat16 share it.
// write_cache_fp8<T, F, VEC>: an fp8 cache F (__nv_fp8_e4m3 / __nv_fp8_e5m2) of inputs T (float,
//   __half, __nv_bfloat16): each value is stored as fp8(x / scale), rounded to nearest even and
//   saturated to the largest finite fp8 (NaN stays NaN): __nv_cvt_float2_to_fp8x2 with __NV_SATFINITE.
//   The division is IEEE (as the reference's float32 x / scale). VEC: 16 / sizeof(T) values per thread
//   step, read as one 16-byte vector and written as VEC bytes (needs a row of a multiple of VEC); else 1.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

template <typename U>
__global__ void write_cache(U* __restrict__ key_cache,          // [num_blocks * block_size, row_units]
                            U* __restrict__ value_cache,
                            const U* __restrict__ key,          // [num_tokens, row_units]
                            const U* __restrict__ value,
                            const long long* __restrict__ slot_mapping,  // [num_tokens]
                            int row_units) {
  const long long slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;
  const long long src = (long long)blockIdx.x * row_units, dst = slot * row_units;
  for (int i = threadIdx.x; i < row_units; i += blockDim.x) {
    key_cache[dst + i] = key[src + i];
    value_cache[dst + i] = value[src + i];
  }
}

namespace wc {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename F>
struct Kind;
template <>
struct Kind<__nv_fp8_e4m3> {
  static constexpr __nv_fp8_interpretation_t value = __NV_E4M3;
};
template <>
struct Kind<__nv_fp8_e5m2> {
  static constexpr __nv_fp8_interpretation_t value = __NV_E5M2;
};

template <typename T, int N>
struct alignas(sizeof(T) * N) In {
  T v[N];
};
template <int N>
struct alignas(N) Out {
  __nv_fp8_storage_t v[N];
};

// N values x[0..N) / scale -> N fp8 bytes (pairs through the fp8x2 conversion).
template <typename F, typename T, int N>
__device__ __forceinline__ Out<N> quantize(const In<T, N>& in, float scale) {
  Out<N> out;
  if constexpr (N == 1) {
    out.v[0] = __nv_cvt_float_to_fp8(to_float(in.v[0]) / scale, __NV_SATFINITE, Kind<F>::value);
  } else {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      const float2 two = make_float2(to_float(in.v[i]) / scale, to_float(in.v[i + 1]) / scale);
      const __nv_fp8x2_storage_t q = __nv_cvt_float2_to_fp8x2(two, __NV_SATFINITE, Kind<F>::value);
      out.v[i] = (__nv_fp8_storage_t)(q & 0xffu);
      out.v[i + 1] = (__nv_fp8_storage_t)(q >> 8);
    }
  }
  return out;
}

}  // namespace wc

template <typename T, typename F, bool VEC>
__global__ void write_cache_fp8(F* __restrict__ key_cache,            // [num_blocks * block_size, row_elems]
                                F* __restrict__ value_cache,
                                const T* __restrict__ key,            // [num_tokens, row_elems]
                                const T* __restrict__ value,
                                const long long* __restrict__ slot_mapping,  // [num_tokens]
                                int row_elems, float k_scale, float v_scale) {
  constexpr int N = VEC ? 16 / sizeof(T) : 1;
  using In = wc::In<T, N>;
  using Out = wc::Out<N>;
  const long long slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;
  const long long src = (long long)blockIdx.x * row_elems, dst = slot * row_elems;
  const In* k_in = reinterpret_cast<const In*>(key + src);
  const In* v_in = reinterpret_cast<const In*>(value + src);
  Out* k_out = reinterpret_cast<Out*>(key_cache + dst);
  Out* v_out = reinterpret_cast<Out*>(value_cache + dst);
  for (int i = threadIdx.x; i < row_elems / N; i += blockDim.x) {
    k_out[i] = wc::quantize<F>(k_in[i], k_scale);
    v_out[i] = wc::quantize<F>(v_in[i], v_scale);
  }
}

// ---- per-token fp8 scales and NVFP4: the writer chooses the scales (reference.write_cache)

namespace wc {

template <typename F>
struct MaxFinite;
template <>
struct MaxFinite<__nv_fp8_e4m3> {
  static constexpr float value = 448.f;
};
template <>
struct MaxFinite<__nv_fp8_e5m2> {
  static constexpr float value = 57344.f;
};

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}

// |x| for a finite x, else 0 (NaN and inf take no part in an amax).
__device__ __forceinline__ float finite_abs(float x) { return isfinite(x) ? fabsf(x) : 0.f; }

// e2m1 code of v (round to nearest even, saturating at +-6; NaN -> 8, as ml_dtypes' float4_e2m1fn).
__device__ __forceinline__ unsigned e2m1_code(float v) {
  if (isnan(v)) return 8u;
  const float m = fminf(fabsf(v), 6.f);
  const unsigned c = (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) + (m >= 3.5f) + (m > 5.f);
  return signbit(v) ? c | 8u : c;
}

}  // namespace wc

// Per-token fp8 scales: warp w quantizes KV heads w, w + warps, ... of token blockIdx.x: scale = amax of the
// head's finite values / max finite (1 for a head of zeros), stored at scales[slot * num_kv_heads + head],
// then fp8(x / scale) as write_cache_fp8. Rows [num_tokens, num_kv_heads, head_dim].
template <typename T, typename F>
__global__ void write_cache_fp8_token(F* __restrict__ key_cache, F* __restrict__ value_cache,
                                      const T* __restrict__ key, const T* __restrict__ value,
                                      const long long* __restrict__ slot_mapping, int num_kv_heads, int head_dim,
                                      float* __restrict__ k_scales, float* __restrict__ v_scales) {
  const long long slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int h = warp; h < num_kv_heads; h += warps) {
    const long long src = ((long long)blockIdx.x * num_kv_heads + h) * head_dim;
    const long long dst = (slot * num_kv_heads + h) * head_dim;
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const T* in = (which == 0 ? key : value) + src;
      F* out = (which == 0 ? key_cache : value_cache) + dst;
      float amax = 0.f;
      for (int d = lane; d < head_dim; d += 32) amax = fmaxf(amax, wc::finite_abs(wc::to_float(in[d])));
      amax = wc::warp_max(amax);
      const float scale = amax > 0.f ? amax / wc::MaxFinite<F>::value : 1.f;
      for (int d = lane; d < head_dim; d += 32)
        reinterpret_cast<__nv_fp8_storage_t*>(out)[d] =
            __nv_cvt_float_to_fp8(wc::to_float(in[d]) / scale, __NV_SATFINITE, wc::Kind<F>::value);
      if (lane == 0) (which == 0 ? k_scales : v_scales)[slot * num_kv_heads + h] = scale;
    }
  }
}

// NVFP4: thread i of token blockIdx.x takes group i (16 values of one KV head) of K and V: y = x / tensor
// scale, block scale = e4m3(amax(|y| finite) / 6) (round to nearest even, saturating), codes e2m1(y / block
// scale) (0 for a block scale of 0), packed two per byte (element 2i low). Caches: bytes [slots, num_kv_heads
// * head_dim / 2]; block scales: e4m3 bytes [slots * num_kv_heads * head_dim / 16].
template <typename T>
__global__ void write_cache_nvfp4(unsigned char* __restrict__ key_cache, unsigned char* __restrict__ value_cache,
                                  const T* __restrict__ key, const T* __restrict__ value,
                                  const long long* __restrict__ slot_mapping, int row_groups, float k_scale,
                                  float v_scale, unsigned char* __restrict__ k_block_scales,
                                  unsigned char* __restrict__ v_block_scales) {
  const long long slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;
  for (int g = threadIdx.x; g < row_groups; g += blockDim.x) {
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const T* in = (which == 0 ? key : value) + ((long long)blockIdx.x * row_groups + g) * 16;
      const float tensor_scale = which == 0 ? k_scale : v_scale;
      float y[16], amax = 0.f;
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        y[e] = wc::to_float(in[e]) / tensor_scale;
        amax = fmaxf(amax, wc::finite_abs(y[e]));
      }
      const __nv_fp8_storage_t block = __nv_cvt_float_to_fp8(amax / 6.f, __NV_SATFINITE, __NV_E4M3);
      const float s = __half2float(__half(__nv_cvt_fp8_to_halfraw(block, __NV_E4M3)));
      unsigned char* out = (which == 0 ? key_cache : value_cache) + (slot * row_groups + g) * 8;
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const unsigned lo = s > 0.f ? wc::e2m1_code(y[2 * b] / s) : 0u;
        const unsigned hi = s > 0.f ? wc::e2m1_code(y[2 * b + 1] / s) : 0u;
        out[b] = (unsigned char)(lo | (hi << 4));
      }
      (which == 0 ? k_block_scales : v_block_scales)[slot * row_groups + g] = block;
    }
  }
}
