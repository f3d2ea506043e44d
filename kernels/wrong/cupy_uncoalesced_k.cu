// wrong.cupy.uncoalesced_k (negative control, twice over): the naive thread mapping of a first port
// - each thread takes a token and reads its K row one element at a time, so the 32 lanes of a warp
// load 32 different rows: every 2-byte (fp16) load of a warp touches 32 sectors, 16x the bytes it
// uses (the traffic count must flag it: sectors per request) - and it forgets the softmax scale (the
// checker must reject it). V is read coalesced (a thread per dimension). Reads stay in bounds.
// Grid (num_heads, num_seqs), 128 threads; dynamic shared memory: a float per token read.
#include "../cupy_raw/common.cuh"

template <int BLOCK_SIZE, int HEAD_DIM, typename T>
__global__ void __launch_bounds__(pa::NUM_THREADS)
    paged_attention_uncoalesced_k(T* __restrict__ out,                 // [num_seqs, num_heads, HEAD_DIM]
                                  const T* __restrict__ query,         // [num_seqs, num_heads, HEAD_DIM]
                                  const T* __restrict__ key_cache,     // [num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM]
                                  const T* __restrict__ value_cache,
                                  const int* __restrict__ block_tables, const int* __restrict__ context_lens,
                                  int max_blocks_per_seq, int num_heads, int num_kv_heads, float scale,
                                  int logits_stride, float* __restrict__ lse,
                                  PA_OPTION_PARAMS) {  // the option table's, in its order (never read: plain decode)
  extern __shared__ float logits[];  // [context_len]
  __shared__ float q[HEAD_DIM];
  __shared__ float red[pa::NUM_THREADS];
  const int head = blockIdx.x, seq = blockIdx.y, tid = threadIdx.x;
  const int kv_head = head / (num_heads / num_kv_heads);
  const int len = context_lens[seq];
  const int* table = block_tables + (long long)seq * max_blocks_per_seq;
  const long long row_stride = (long long)num_kv_heads * HEAD_DIM;
  for (int d = tid; d < HEAD_DIM; d += pa::NUM_THREADS) q[d] = pa::to_float(query[((long long)seq * num_heads + head) * HEAD_DIM + d]);
  __syncthreads();
  float m = pa::neg_inf();
  for (int t = tid; t < len; t += pa::NUM_THREADS) {  // one token per thread: uncoalesced
    const T* k = key_cache + ((long long)table[t / BLOCK_SIZE] * BLOCK_SIZE + t % BLOCK_SIZE) * row_stride +
                 (long long)kv_head * HEAD_DIM;
    float s = 0.f;
    for (int d = 0; d < HEAD_DIM; ++d) s += q[d] * pa::to_float(k[d]);
    logits[t] = s;  // BUG: the logit is never multiplied by `scale`
    m = fmaxf(m, s);
  }
  red[tid] = m;
  __syncthreads();
  for (int w = pa::NUM_THREADS / 2; w > 0; w /= 2) {
    if (tid < w) red[tid] = fmaxf(red[tid], red[tid + w]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int t = tid; t < len; t += pa::NUM_THREADS) {
    logits[t] = __expf(logits[t] - m);
    sum += logits[t];
  }
  red[tid] = sum;
  __syncthreads();
  for (int w = pa::NUM_THREADS / 2; w > 0; w /= 2) {
    if (tid < w) red[tid] += red[tid + w];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
  for (int d = tid; d < HEAD_DIM; d += pa::NUM_THREADS) {  // V: a thread per dimension, coalesced
    float acc = 0.f;
    for (int t = 0; t < len; ++t) {
      const T* v = value_cache + ((long long)table[t / BLOCK_SIZE] * BLOCK_SIZE + t % BLOCK_SIZE) * row_stride +
                   (long long)kv_head * HEAD_DIM;
      acc += logits[t] * pa::to_float(v[d]);
    }
    pa::store(out + ((long long)seq * num_heads + head) * HEAD_DIM + d, acc * inv);
  }
}
