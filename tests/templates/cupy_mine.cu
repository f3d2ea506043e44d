// cupy.mine: one thread block per (query head, sequence), one thread per output element.
// Grid (num_heads, num_seqs), 32 threads. The option parameters come last, in the option table's order
// (PA_OPTION_PARAMS: load_source puts their definition in front of this file); this kernel reads v_scale.
extern "C" __global__ void mine(float* out,                // [num_seqs, num_heads, head_dim]
                                const float* q,            // [num_seqs, num_heads, head_dim]
                                const float* k,            // [num_blocks, block_size, num_kv_heads, head_dim]
                                const float* v,            // same
                                const int* tables,         // [num_seqs, max_blocks]
                                const int* lens,           // [num_seqs]
                                int max_blocks, int block_size, int heads, int kv_heads, int head_dim,
                                float scale,               // softmax scale * k_scale
                                PA_OPTION_PARAMS) {
  const int s = blockIdx.y, h = blockIdx.x, kvh = h / (heads / kv_heads);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float m = __int_as_float(0xff800000), denom = 0.f, acc = 0.f;  // m = -inf
    for (int t = 0; t < lens[s]; ++t) {
      const long row = ((long)tables[s * max_blocks + t / block_size] * block_size + t % block_size) * kv_heads + kvh;
      float logit = 0.f;
      for (int i = 0; i < head_dim; ++i) logit += q[((long)s * heads + h) * head_dim + i] * k[row * head_dim + i];
      logit *= scale;
      const float m_new = fmaxf(m, logit), c = __expf(m - m_new), w = __expf(logit - m_new);
      denom = denom * c + w;
      acc = acc * c + w * v[row * head_dim + d];
      m = m_new;
    }
    out[((long)s * heads + h) * head_dim + d] = acc / denom * v_scale;
  }
}
