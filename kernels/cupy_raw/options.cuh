// options.cuh: the attention options in the kernels (docs/options.md).
//
// The kernel's Opt type carries a compile-time bitmask (Options<FLAGS>, pa::OPT_*) and the runtime values
// (pa::OptionArgs); with FLAGS = 0 no option code is compiled. k_scale costs nothing here: the launcher folds
// it into `scale`. v_scale multiplies the output, the score modifiers (soft-cap, ALiBi, ...) rewrite each logit
// after the scale (Opt::logit, with its whole context: ScoreAt), and a window moves `start`. Sinks and the
// log-sum-exp act where a head's softmax is finished (Opt::inv_denominator, Opt::lse): in attend for a kernel
// that covers the whole range, in the reduce (or merge) for split-KV kernels, whose partition kernels are
// built without them (PARTITION_FLAGS), so a sink is added once, after the merge.
#pragma once
#include "warp.cuh"

namespace pa {

// ---- options: which are compiled in (FLAGS), and their runtime values
// pa::OPT_* (the bits), pa::OptionArgs (the option arguments, in the option table's order),
// PA_OPTION_PARAMS (a kernel's option parameters) and PA_OPTION_ARGS (them gathered into an OptionArgs)
// come from the option table (sandbox/problem/option_table.py): load_source puts them in front of the source.

// The first token a decode query reads: the window's start with OPT_WINDOW in flags, else 0.
__device__ __forceinline__ int first_token(int flags, int context_len, int window_left) {
  return (flags & OPT_WINDOW) != 0 && context_len - 1 - window_left > 0 ? context_len - 1 - window_left : 0;
}

// Where a logit sits: the query token's position and head, the token's position and KV head (FlashInfer's
// LogitsTransform context), and the query head's HeadParams (the score modifiers' per-head values, generated
// from the option table: ALiBi's slope, ...; a kernel loads them once per head it serves, Options::head).
// Every score modifier of the option table reads what it needs from it.
struct ScoreAt {
  int q_pos, kv_pos, q_head, kv_head;
  HeadParams head;
};

// Options<FLAGS>: the option arguments (OptionArgs) plus what the kernels derive from them; fields of
// options not in FLAGS are never read. A kernel builds one per block (for the query heads it serves) and
// hands it to attend; an option enters the math through the hooks below (first_token, logit, ...), and
// negative controls derive from it to change one rule.
template <int FLAGS>
struct Options : OptionArgs {
  static constexpr int flags = FLAGS;
  const float* sink;    // OPT_SINKS: the served heads' sink logits (sink[g] for head g of the tile)
  int first_head;       // the first query head the block serves (served head g is first_head + g)
  int position;         // the query token's position (decode: context_len - 1)
  // OPT_WINDOW: only tokens t >= position - window_left; OPT_VSCALE: output *= v_scale (V = value * v_scale)

  __device__ __forceinline__ Options(const OptionArgs& args, int first_head, int context_len)
      : OptionArgs(args), sink(nullptr), first_head(first_head), position(context_len - 1) {
    if constexpr ((FLAGS & OPT_SINKS) != 0) sink = sinks + first_head;
  }

  // The first token the query reads: the window's start (0 without a window).
  __device__ __forceinline__ int first_token() const { return pa::first_token(FLAGS, position + 1, window_left); }

  // The per-head values of query head q_head the score modifiers in FLAGS read (those not in FLAGS are 0).
  __device__ __forceinline__ HeadParams head(int q_head) const { return PA_HEAD_PARAMS(q_head); }

  // The logit of the token at `at` from its dot product q . k: the scale, then every score modifier in FLAGS
  // in the option table's order (PA_SCORE_HOOKS, generated from the rows' ScoreHook.cuda: soft-cap, ALiBi).
  __device__ __forceinline__ float logit(float dot, float scale, const ScoreAt& at) const {
    float s = dot * scale;
    PA_SCORE_HOOKS
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

}  // namespace pa
