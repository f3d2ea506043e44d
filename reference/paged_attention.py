"""Reference attention over a paged KV cache (NumPy, float64): the plainest statement of the contract.

Layout (the project's canonical one, see docs/design.md):
    query         [num_seqs, num_heads, head_dim]   (decode), or [total_q, num_heads, head_dim] with query_start
    key_cache     [num_blocks, block_size, num_kv_heads, head_dim]   query's dtype, or fp8
    value_cache   [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables  [num_seqs, max_blocks_per_seq] int32
    context_lens  [num_seqs] int32
    query_start   None, or int32 [num_seqs + 1]: sequence s owns query rows query_start[s]:query_start[s+1]
Token t of sequence s lives at key_cache[block_tables[s, t // block_size], t % block_size].
Query token j of sequence s (q_s tokens) sits at position p = L_s - q_s + j and sees tokens t <= p.
"""
from __future__ import annotations

import math

import numpy as np


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    weights = np.exp(shifted)
    return weights / weights.sum()


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
        weights = _softmax(scale * (k @ q))
        out[h] = weights @ v
    return out


def paged_attention(query, key_cache, value_cache, block_tables, context_lens, scale=None, *, query_start=None,
                    k_scale=1.0, v_scale=1.0, window_left=-1, logits_soft_cap=0.0, alibi_slopes=None) -> np.ndarray:
    """Attention of every query token over its sequence's paged K/V, one token at a time.

    Returns float64 [num_query_tokens, num_heads, head_dim]. Tokens after a query token's
    position, before its window, and slots past context_lens[s] are never read.
    """
    num_seqs = len(context_lens)
    num_heads, head_dim = query.shape[1], query.shape[2]
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if query_start is None:
        query_start = np.arange(num_seqs + 1)  # decode: one query token per sequence
    out = np.empty((query.shape[0], num_heads, head_dim), dtype=np.float64)
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
                    k = key_cache[block, t % block_size, kv_head].astype(np.float64) * k_scale
                    logit = scale * np.dot(q, k)
                    if logits_soft_cap > 0:
                        logit = logits_soft_cap * math.tanh(logit / logits_soft_cap)
                    if alibi_slopes is not None:
                        logit += float(alibi_slopes[h]) * (t - position)
                    logits[i] = logit
                weights = _softmax(logits)
                acc = np.zeros(head_dim, dtype=np.float64)
                for i, t in enumerate(tokens):
                    block = block_tables[s, t // block_size]
                    acc += weights[i] * (value_cache[block, t % block_size, kv_head].astype(np.float64) * v_scale)
                out[row, h] = acc
    return out


def paged_decode(query, key_cache, value_cache, block_tables, context_lens, scale=None, *, k_scale=1.0, v_scale=1.0,
                 window_left=-1, logits_soft_cap=0.0, alibi_slopes=None, query_start=None) -> np.ndarray:
    """Decode attention (one query token per sequence, unless query_start says otherwise): paged_attention.

    Returns float64 [num_seqs, num_heads, head_dim] for decode.
    """
    return paged_attention(query, key_cache, value_cache, block_tables, context_lens, scale, query_start=query_start,
                           k_scale=k_scale, v_scale=v_scale, window_left=window_left,
                           logits_soft_cap=logits_soft_cap, alibi_slopes=alibi_slopes)


def _fp8_max_finite(dtype: np.dtype) -> float | None:
    return {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}.get(dtype.name)


def _store(cache: np.ndarray, index, x: np.ndarray, scale: float) -> None:
    """cache[index] = x, or fp8(clip(x / scale, -max, max)) for an fp8 cache (RNE; NaN stays NaN)."""
    limit = _fp8_max_finite(cache.dtype)
    if limit is None:
        cache[index] = x
    else:
        cache[index] = np.clip(x.astype(np.float32) / np.float32(scale), -limit, limit).astype(cache.dtype)


def write_cache(key_cache, value_cache, key, value, slot_mapping, k_scale=1.0, v_scale=1.0) -> None:
    """Store new tokens' K/V in place: token i goes to slot slot_mapping[i]; slot < 0 is skipped.

    key/value [num_tokens, num_kv_heads, head_dim]; slot = block * block_size + offset. A cache of
    the inputs' dtype stores them as they are; an fp8 cache stores fp8(clip(x / scale, +-max_finite)).
    """
    block_size = key_cache.shape[1]
    for i, slot in enumerate(slot_mapping):
        slot = int(slot)
        if slot < 0:
            continue
        _store(key_cache, (slot // block_size, slot % block_size), key[i], k_scale)
        _store(value_cache, (slot // block_size, slot % block_size), value[i], v_scale)
