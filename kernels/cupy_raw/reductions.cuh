// reductions.cuh: the reduce kernel that combines the partitions of split-KV variants (cupy.v2, gqa, rows,
// dense) by log-sum-exp rescaling, finishing their sinks and log-sum-exp once.
#pragma once
#include "codecs.cuh"
#include "options.cuh"

namespace pa {

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
