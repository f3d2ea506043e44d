"""Reference decode attention over a paged KV cache (NumPy, float64).

Layout (the project's canonical one, see DESIGN.md):
    query         [num_seqs, num_heads, head_dim]
    key_cache     [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache   [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables  [num_seqs, max_blocks_per_seq] int32
    context_lens  [num_seqs] int32
Token t of sequence s lives at key_cache[block_tables[s, t // block_size], t % block_size].
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


def paged_decode(query, key_cache, value_cache, block_tables, context_lens, scale=None) -> np.ndarray:
    """Decode attention reading K/V through the block table.

    Returns float64 [num_seqs, num_heads, head_dim]. Slots past context_lens[s] are never read.
    """
    num_seqs, num_heads, head_dim = query.shape
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    out = np.empty((num_seqs, num_heads, head_dim), dtype=np.float64)
    for s in range(num_seqs):
        context_len = int(context_lens[s])
        for h in range(num_heads):
            kv_head = h // group
            q = query[s, h].astype(np.float64)
            logits = np.empty(context_len, dtype=np.float64)
            for t in range(context_len):
                block = block_tables[s, t // block_size]
                k = key_cache[block, t % block_size, kv_head].astype(np.float64)
                logits[t] = scale * np.dot(q, k)
            weights = _softmax(logits)
            acc = np.zeros(head_dim, dtype=np.float64)
            for t in range(context_len):
                block = block_tables[s, t // block_size]
                acc += weights[t] * value_cache[block, t % block_size, kv_head].astype(np.float64)
            out[s, h] = acc
    return out


def write_cache(key_cache, value_cache, key, value, slot_mapping) -> None:
    """Store new tokens' K/V in place: token i goes to slot slot_mapping[i]; slot < 0 is skipped.

    key/value [num_tokens, num_kv_heads, head_dim]; slot = block * block_size + offset.
    """
    block_size = key_cache.shape[1]
    for i, slot in enumerate(slot_mapping):
        slot = int(slot)
        if slot < 0:
            continue
        key_cache[slot // block_size, slot % block_size] = key[i]
        value_cache[slot // block_size, slot % block_size] = value[i]
