"""Reference attention over a paged KV cache (NumPy, float64): the plainest statement of the contract.

Layout (the project's canonical one, see docs/design.md):
    query         [num_seqs, num_heads, head_dim]   (decode), or [total_q, num_heads, head_dim] with query_start
    key_cache     [num_blocks, block_size, num_kv_heads, head_dim]   query's dtype, or fp8
                  [num_blocks, block_size, num_kv_heads, head_dim // 2] uint8: NVFP4 (reference/formats.py)
    value_cache   the same as key_cache
    block_tables  [num_seqs, max_blocks_per_seq] int32
    context_lens  [num_seqs] int32
    query_start   None, or int32 [num_seqs + 1]: sequence s owns query rows query_start[s]:query_start[s+1]
Token t of sequence s lives at key_cache[block_tables[s, t // block_size], t % block_size].
Query token j of sequence s (q_s tokens) sits at position p = L_s - q_s + j and sees tokens t <= p.
"""
from __future__ import annotations

import math

import numpy as np

from .formats import dequantize_nvfp4


def _softmax(logits: np.ndarray, sink: float | None = None) -> tuple[np.ndarray, float]:
    """(weights, lse): exp(s_t - m) / (sum_t exp(s_t - m) + exp(sink - m)) with m = max(max_t s_t, sink), and
    lse = log sum_t exp(s_t) over the tokens alone (-inf when there are none; the weights are then empty)."""
    top = logits.max() if len(logits) else -math.inf
    lse = top + math.log(np.exp(logits - top).sum()) if len(logits) else -math.inf
    m = top if sink is None else max(top, sink)
    weights = np.exp(logits - m)
    denominator = weights.sum() + (0.0 if sink is None else math.exp(sink - m))
    return weights / denominator, lse


def dense_decode(query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float | None = None) -> np.ndarray:
    """Attention of one sequence over contiguous K/V.

    query [num_heads, head_dim], keys/values [context_len, num_kv_heads, head_dim]
    -> float64 [num_heads, head_dim]. Query head h reads KV head h // (num_heads // num_kv_heads).
    """
    num_heads, head_dim = query.shape
    num_kv_heads = keys.shape[1]
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    out = np.empty((num_heads, head_dim), dtype=np.float64)
    for h in range(num_heads):
        kv_head = h // group
        q = query[h].astype(np.float64)
        k = keys[:, kv_head, :].astype(np.float64)
        v = values[:, kv_head, :].astype(np.float64)
        weights, _ = _softmax(scale * (k @ q))
        out[h] = weights @ v
    return out


def _row(cache, block_scales, tensor_scale, token_scales, block, offset, kv_head) -> np.ndarray:
    """One token's K (or V) row of one KV head, dequantized: float64 [head_dim]."""
    if block_scales is not None:  # NVFP4: e2m1 * block scale * tensor scale
        x = dequantize_nvfp4(cache[block, offset, kv_head], block_scales[block, offset, kv_head], tensor_scale)
    else:
        x = cache[block, offset, kv_head].astype(np.float64) * tensor_scale
    if token_scales is not None:  # fp8 with one scale per (token, KV head)
        x = x * float(token_scales[block, offset, kv_head])
    return x


def paged_attention(query, key_cache, value_cache, block_tables, context_lens, scale=None, *, query_start=None,
                    window_left=-1, logits_soft_cap=0.0, alibi_slopes=None, k_scale=1.0, v_scale=1.0, sinks=None,
                    return_lse=False, k_scales=None, v_scales=None, k_block_scales=None, v_block_scales=None,
                    score_modifiers=()):
    """Attention of every query token over its sequence's paged K/V, one token at a time.

    The options (docs/design.md, sandbox/problem/option_table.py):
        k_t = K[t] * k_scale (* k_scales[slot of t, kv head] per token; NVFP4: e2m1 * k_block_scales * k_scale)
        s_t = scale * q . k_t;  soft-cap: s_t = cap * tanh(s_t / cap);  ALiBi: s_t += slope[h] * (t - p)
        only tokens max(0, p - window_left) <= t <= p (window_left -1: 0 <= t <= p)
        out = sum_t exp(s_t - m) v_t / (sum_t exp(s_t - m) + exp(sink_h - m)), m = max(max_t s_t, sink_h)
              (without sinks: the plain softmax); v_t like k_t with the v_ scales.
    Returns float64 [num_query_tokens, num_heads, head_dim]; with return_lse, (out, lse) where lse float64
    [num_query_tokens, num_heads] = log sum_t exp(s_t) over the tokens only (natural log, no sink).
    Tokens after a query token's position, before its window, and slots past context_lens[s] are never read.
    score_modifiers: further rules f(s_t, p, t, h, kv_head) -> s_t applied after ALiBi, in order: the reference
    line of a score modifier tried without editing this loop (tests/kernels/test_score_modifier.py); a shipped option
    writes its line here.
    """
    num_seqs = len(context_lens)
    num_heads, head_dim = query.shape[1], query.shape[2]
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if query_start is None:
        query_start = np.arange(num_seqs + 1)  # decode: one query token per sequence
    out = np.empty((query.shape[0], num_heads, head_dim), dtype=np.float64)
    lse = np.empty((query.shape[0], num_heads), dtype=np.float64)
    for s in range(num_seqs):
        context_len = int(context_lens[s])
        first_row, end_row = int(query_start[s]), int(query_start[s + 1])
        for row in range(first_row, end_row):
            position = context_len - (end_row - first_row) + (row - first_row)
            first = 0 if window_left < 0 else max(0, position - window_left)
            tokens = range(first, position + 1)
            for h in range(num_heads):
                kv_head = h // group
                q = query[row, h].astype(np.float64)
                logits = np.empty(len(tokens), dtype=np.float64)
                for i, t in enumerate(tokens):
                    block = block_tables[s, t // block_size]
                    k = _row(key_cache, k_block_scales, k_scale, k_scales, block, t % block_size, kv_head)
                    logit = scale * np.dot(q, k)
                    if logits_soft_cap > 0:
                        logit = logits_soft_cap * math.tanh(logit / logits_soft_cap)
                    if alibi_slopes is not None:
                        logit += float(alibi_slopes[h]) * (t - position)
                    for modify in score_modifiers:
                        logit = modify(logit, position, t, h, kv_head)
                    logits[i] = logit
                weights, lse[row, h] = _softmax(logits, None if sinks is None else float(sinks[h]))
                acc = np.zeros(head_dim, dtype=np.float64)
                for i, t in enumerate(tokens):
                    block = block_tables[s, t // block_size]
                    acc += weights[i] * _row(value_cache, v_block_scales, v_scale, v_scales, block, t % block_size,
                                             kv_head)
                out[row, h] = acc
    return (out, lse) if return_lse else out


def paged_decode(query, key_cache, value_cache, block_tables, context_lens, scale=None, **options):
    """Decode attention (one query token per sequence, unless query_start says otherwise): paged_attention.

    Returns float64 [num_seqs, num_heads, head_dim] for decode (with return_lse, (out, lse)).
    """
    return paged_attention(query, key_cache, value_cache, block_tables, context_lens, scale, **options)
