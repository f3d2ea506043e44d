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
