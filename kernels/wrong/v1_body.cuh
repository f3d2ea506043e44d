// v1_body.cuh: cupy.v1's kernel body (v1.cu) with the parts a negative control changes as template
// parameters, so each control's .cu holds its bug and one call, and reads as "cupy.v1 except ...".
//   Opt    the option struct: pa::Options<OPTS>, or a subclass overriding one member (logit, lse, k_token)
//   KV     the table reader: KV::of(block_tables, seq, table_width) (TableKV: cupy.v1's)
//   Range  the tokens read: Range::begin(opt.first_token()), Range::end(context_len) (Unchanged: cupy.v1's)
// A control's kernel takes cupy.v1's parameters (WRONG_V1_PARAMS) in the order v1.prepare_v1_shaped passes
// them; `table_width` is what that call passes after context_lens (max_blocks_per_seq, or what the control
// reads instead).
#pragma once
#include "../cupy_raw/common.cuh"

#define WRONG_V1_PARAMS(table_width)                                                                          \
  T *__restrict__ out, const T *__restrict__ query, const C *__restrict__ key_cache,                         \
      const C *__restrict__ value_cache, const int *__restrict__ block_tables,                               \
      const int *__restrict__ context_lens, int table_width, int num_heads, int num_kv_heads, float scale,   \
      int logits_stride, float *__restrict__ lse, PA_OPTION_PARAMS
#define WRONG_V1_ARGS(table_width)                                                                            \
  out, query, key_cache, value_cache, block_tables, context_lens, table_width, num_heads, num_kv_heads, scale, \
      logits_stride, lse, PA_OPTION_ARGS

namespace wrong {

template <int BLOCK_SIZE>
struct TableKV {  // cupy.v1's: the sequence's row of block_tables
  __device__ __forceinline__ static pa::PagedKV<BLOCK_SIZE> of(const int* block_tables, int seq, int table_width) {
    return pa::PagedKV<BLOCK_SIZE>{block_tables + (long long)seq * table_width};
  }
};

struct Unchanged {  // cupy.v1's token range: the window's first token (0 without one) to the context's end
  __device__ __forceinline__ static int begin(int first_token) { return first_token; }
  __device__ __forceinline__ static int end(int context_len) { return context_len; }
};

// One thread block per (sequence, query head), as cupy.v1; smem: the kernel's dynamic shared memory.
template <int BLOCK_SIZE, int HEAD_DIM, class Opt, class KV = TableKV<BLOCK_SIZE>, class Range = Unchanged,
          typename T, typename C>
__device__ __forceinline__ void v1_body(float* smem, T* __restrict__ out, const T* __restrict__ query,
                                        const C* __restrict__ key_cache, const C* __restrict__ value_cache,
                                        const int* __restrict__ block_tables, const int* __restrict__ context_lens,
                                        int table_width, int num_heads, int num_kv_heads, float scale,
                                        int logits_stride, float* __restrict__ lse, const pa::OptionArgs& options) {
  const int seq = blockIdx.y;
  const int context_len = context_lens[seq];
  const pa::HeadTile<1> tile(blockIdx.x, num_heads, num_kv_heads);
  const Opt opt(options, tile.head0, context_len);
  const auto kv = KV::of(block_tables, seq, table_width);
  const long long q_offset = ((long long)seq * num_heads + tile.head0) * HEAD_DIM;
  pa::attend<BLOCK_SIZE, HEAD_DIM, 1>(kv, key_cache, value_cache, query + q_offset, 1, tile.kv_head, num_kv_heads,
                                      scale, opt, Range::begin(opt.first_token()), Range::end(context_len),
                                      logits_stride, smem, out + q_offset, HEAD_DIM, (float*)nullptr,
                                      (float*)nullptr, 0, lse + (long long)seq * num_heads + tile.head0);
}

}  // namespace wrong
