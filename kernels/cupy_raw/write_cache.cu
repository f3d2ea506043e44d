// cupy.write_cache: store new tokens' K/V rows at their slots (vLLM's reshape_and_cache for the
// canonical layout). Block i copies token i's row of num_kv_heads * head_dim elements into row
// slot_mapping[i] of the cache; slot < 0 (padding) is skipped. U is the copy unit (uint4 when a row
// is a multiple of 16 bytes): the kernel moves bits, so float16 and float32 share it.
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
