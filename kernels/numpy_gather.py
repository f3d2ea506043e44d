"""numpy.gather: what a user writes first. Gather K/V through the block table with fancy indexing, float32 softmax.

Idea: pad every sequence to the table's capacity, gather [num_seqs, capacity, kv_heads, head_dim]
in one indexing step (per-token scales and NVFP4 block scales with it), mask what a query row may not
see (padding, the future of a multi-token query, tokens before a sliding window) to -inf, softmax in
float32 with the sinks in its denominator, then one batched matmul.
Limits: any block size, head dim and GQA ratio; float32, float16 and bfloat16 queries; fp8 caches
(per tensor or per token and head) and NVFP4 caches (all computed in float32); every option (the
log-sum-exp too); several query tokens per sequence; CPU only. It is the contract layer's own check:
it implements every feature the option table defines.
Verdict: the CPU baseline. Memory is O(num_seqs x capacity), so very long tables cost copies.
"""
from __future__ import annotations

import numpy as np

from reference.formats import dequantize_nvfp4
from sandbox.problem.dtypes import KV_FORMATS, QUERY_DTYPES
from sandbox.variant import Limits

# Every option of the table, each written out below (no score hook: a new score modifier needs its line here too).
OPTIONS = ("window", "softcap", "alibi", "kv_scale", "sinks", "lse", "kv_scales")
LIMITS = Limits(block_sizes=None, head_dims=None, dtypes=QUERY_DTYPES, kv_dtypes=KV_FORMATS, options=OPTIONS,
                backends=("cpu",), max_query_len=None)


def _gather_kv(cache, blocks, offsets, tensor_scale, token_scales, block_scales) -> np.ndarray:
    """float32 [seqs, capacity, kv_heads, head_dim] of the slots (blocks, offsets), dequantized."""
    if block_scales is not None:
        x = dequantize_nvfp4(cache[blocks, offsets], block_scales[blocks, offsets], tensor_scale).astype(np.float32)
    else:
        x = cache[blocks, offsets].astype(np.float32) * np.float32(tensor_scale)
    if token_scales is not None:
        x *= token_scales[blocks, offsets][..., None]
    return x


def paged_attention_gather(problem):
    """float32 [num_query_tokens, num_heads, head_dim] for a DecodeProblem (see sandbox/problem/decode.py);
    with return_lse, (out, lse float32 [num_query_tokens, num_heads])."""
    p, opts = problem, problem.options
    num_heads, head_dim = p.num_heads, p.head_dim
    group = num_heads // p.num_kv_heads
    capacity = p.max_blocks_per_seq * p.block_size

    # One row per query token: its sequence and its position (decode: L - 1).
    seq_of_row = np.repeat(np.arange(p.num_seqs), p.query_lens)
    row_in_seq = np.arange(len(seq_of_row)) - np.repeat(np.cumsum(p.query_lens) - p.query_lens, p.query_lens)
    positions = (p.context_lens.astype(np.int64) - p.query_lens)[seq_of_row] + row_in_seq   # [rows]

    tokens = np.arange(capacity)
    first = p.first_read_tokens()
    needed = (tokens[None, :] >= first[:, None]) & (tokens[None, :] < p.context_lens[:, None])  # [seqs, capacity]
    # Unread table entries may be -1: point them at block 0 and let the mask drop them.
    blocks = np.where(needed, p.block_tables[:, tokens // p.block_size], 0)
    offsets = np.broadcast_to(tokens % p.block_size, blocks.shape)
    keys = _gather_kv(p.key_cache, blocks, offsets, opts.k_scale, opts.k_scales, opts.k_block_scales)
    values = _gather_kv(p.value_cache, blocks, offsets, opts.v_scale, opts.v_scales, opts.v_block_scales)
    # NaN in padding would poison the matmuls (0 * NaN = NaN): zero it, the mask does the rest.
    keys[~needed] = 0.0
    values[~needed] = 0.0

    visible = tokens[None, :] <= positions[:, None]                                          # [rows, capacity]
    if opts.window_left >= 0:
        visible &= tokens[None, :] >= positions[:, None] - opts.window_left

    q = p.query.astype(np.float32).reshape(-1, p.num_kv_heads, group, head_dim)
    logits = np.einsum("rkgd,rtkd->rkgt", q, keys[seq_of_row]) * np.float32(p.softmax_scale)  # [rows, kv, group, cap]
    if opts.logits_soft_cap > 0:
        cap = np.float32(opts.logits_soft_cap)
        logits = cap * np.tanh(logits / cap)
    if opts.alibi_slopes is not None:
        slopes = opts.alibi_slopes.reshape(p.num_kv_heads, group)
        distance = (tokens[None, :] - positions[:, None]).astype(np.float32)                     # [rows, capacity]
        logits = logits + slopes[None, :, :, None] * distance[:, None, None, :]
    logits = np.where(visible[:, None, None, :], logits, -np.inf)
    top = logits.max(axis=-1)                                                                # [rows, kv, group]
    weights = np.exp(logits - top[..., None])
    total = weights.sum(axis=-1)
    if opts.sinks is not None:  # m = max(top, sink): rescale the tokens' weights, add the sink's
        sinks = np.broadcast_to(opts.sinks.reshape(p.num_kv_heads, group), top.shape)
        m = np.maximum(top, sinks)
        shrink = np.exp(top - m)
        weights *= shrink[..., None]
        denominator = total * shrink + np.exp(sinks - m)
    else:
        denominator = total
    out = np.einsum("rkgt,rtkd->rkgd", weights / denominator[..., None], values[seq_of_row])
    out = out.reshape(-1, num_heads, head_dim)
    if opts.return_lse:
        return out, (top + np.log(total)).reshape(-1, num_heads).astype(np.float32)
    return out


class _Prepared:
    def __init__(self, problem):
        self.problem = problem
        self.out = None

    def launch(self) -> None:
        self.out = paged_attention_gather(self.problem)

    def result(self):
        out = self.out[0] if self.problem.options.return_lse else self.out
        return out.astype(self.problem.dtype)

    def lse(self):
        """float32 [num_query_tokens, num_heads] (sandbox.variant.limits.Prepared)."""
        if not self.problem.options.return_lse:
            raise ValueError("this launch computes no log-sum-exp: prepare it for a problem with return_lse=True")
        return self.out[1]


def prepare(problem, backend: str) -> _Prepared:
    return _Prepared(problem)
