"""The reference's vectorized twin: the same float64 math as paged_attention, per sequence and KV head.

paged_attention walks tokens one at a time and takes minutes past ~200k (sequence, head, token)
triples; gathered_attention gathers each sequence's tokens through its block table, converts each KV
head to float64 once and computes its GQA group's logits as one matrix product. It is tested equal to
the loop (tests/test_reference*.py); check uses it for large problems and the sweep for its shapes'
contiguous tokens (sequence_attention).
"""
from __future__ import annotations

import math

import numpy as np

from .formats import dequantize_nvfp4

# Options that are arrays beside the cache, one entry per slot: gathered with the tokens.
PER_SLOT = ("k_scales", "v_scales", "k_block_scales", "v_block_scales")


def gather_tokens(cache: np.ndarray, block_table: np.ndarray, context_len: int, first: int = 0) -> np.ndarray:
    """Tokens first..context_len-1 of one sequence read through its table: [context_len - first, ...]
    (cache [num_blocks, block_size, ...], block_table [max_blocks_per_seq])."""
    block_size = cache.shape[1]
    tokens = np.arange(first, context_len)
    return cache[block_table[tokens // block_size], tokens % block_size]


def first_read(context_len: int, query_len: int, window_left: int) -> int:
    """The first token any of a sequence's query_len query tokens reads (0 without a window)."""
    return 0 if window_left < 0 else max(0, context_len - query_len - window_left)


def _dequantize(tokens, kv_head: int, tensor_scale, token_scales, block_scales) -> np.ndarray:
    """float64 [T, head_dim] of one KV head from tokens [T, num_kv_heads, ...] and their per-token arrays."""
    if block_scales is not None:
        x = dequantize_nvfp4(tokens[:, kv_head], block_scales[:, kv_head], tensor_scale)
    else:
        x = tokens[:, kv_head, :].astype(np.float64) * tensor_scale
    if token_scales is not None:
        x = x * token_scales[:, kv_head, None].astype(np.float64)
    return x


def sequence_attention(query, keys, values, scale=None, first: int = 0, *, window_left=-1, logits_soft_cap=0.0,
                       alibi_slopes=None, k_scale=1.0, v_scale=1.0, sinks=None, return_lse=False, k_scales=None,
                       v_scales=None, k_block_scales=None, v_block_scales=None):
    """Attention of one sequence's query tokens over its contiguous tokens.

    query [q_len, num_heads, head_dim]: the sequence's last q_len positions; keys/values
    [L - first, num_kv_heads, ...]: tokens first..L-1 as the cache stores them. The options are
    paged_attention's, the per-slot ones (PER_SLOT) given per token, aligned with keys/values.
    -> float64 [q_len, num_heads, head_dim]; with return_lse, (out, lse float64 [q_len, num_heads]).
    A query row that sees no token gets out 0 and lse -inf.
    """
    q_len, num_heads, head_dim = query.shape
    num_kv_heads = keys.shape[1]
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    tokens = first + np.arange(keys.shape[0])                                    # [T]
    positions = tokens[-1] - q_len + 1 + np.arange(q_len) if len(tokens) else np.arange(q_len)
    visible = tokens[None, :] <= positions[:, None]                              # [q_len, T]
    if window_left >= 0:
        visible &= tokens[None, :] >= positions[:, None] - window_left
    out = np.empty((q_len, num_heads, head_dim), dtype=np.float64)
    lse = np.empty((q_len, num_heads), dtype=np.float64)
    for kv_head in range(num_kv_heads):
        heads = slice(kv_head * group, (kv_head + 1) * group)
        k = _dequantize(keys, kv_head, k_scale, k_scales, k_block_scales)
        v = _dequantize(values, kv_head, v_scale, v_scales, v_block_scales)
        logits = scale * np.einsum("qgd,td->qgt", query[:, heads].astype(np.float64), k)   # [q_len, group, T]
        if logits_soft_cap > 0:
            logits = logits_soft_cap * np.tanh(logits / logits_soft_cap)
        if alibi_slopes is not None:
            slopes = np.asarray(alibi_slopes[heads], dtype=np.float64)
            logits = logits + slopes[None, :, None] * (tokens[None, None, :] - positions[:, None, None])
        logits = np.where(visible[:, None, :], logits, -np.inf)
        top = logits.max(axis=2, initial=-np.inf)                                          # [q_len, group]
        sink = None if sinks is None else np.asarray(sinks[heads], dtype=np.float64)[None, :]
        m = top if sink is None else np.maximum(top, sink)
        safe_m = np.where(np.isneginf(m), 0.0, m)                                          # no token, no sink
        weights = np.exp(logits - safe_m[..., None])
        total = weights.sum(axis=2)
        denominator = total + (0.0 if sink is None else np.exp(sink - safe_m))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, heads] = np.where(denominator[..., None] > 0, weights / denominator[..., None], 0.0) @ v
            lse[:, heads] = np.where(total > 0, safe_m + np.log(total), -np.inf)
    return (out, lse) if return_lse else out


def gathered_attention(query, key_cache, value_cache, block_tables, context_lens, scale=None, *, query_start=None,
                       **options):
    """paged_attention's result (same arguments), one gathered sequence at a time: float64
    [num_query_tokens, num_heads, head_dim]; with return_lse, (out, lse [num_query_tokens, num_heads])."""
    num_seqs = len(context_lens)
    if query_start is None:
        query_start = np.arange(num_seqs + 1)
    out = np.empty((query.shape[0],) + query.shape[1:], dtype=np.float64)
    lse = np.empty(query.shape[:2], dtype=np.float64)
    per_slot = {name: options.pop(name) for name in PER_SLOT if options.get(name) is not None}
    return_lse = options.pop("return_lse", False)
    for s in range(num_seqs):
        n, rows = int(context_lens[s]), slice(int(query_start[s]), int(query_start[s + 1]))
        first = first_read(n, rows.stop - rows.start, options.get("window_left", -1))
        keys = gather_tokens(key_cache, block_tables[s], n, first)
        values = gather_tokens(value_cache, block_tables[s], n, first)
        gathered = {name: gather_tokens(array, block_tables[s], n, first) for name, array in per_slot.items()}
        out[rows], lse[rows] = sequence_attention(query[rows], keys, values, scale, first, return_lse=True,
                                                  **options, **gathered)
    return (out, lse) if return_lse else out
