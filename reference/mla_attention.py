"""Reference multi-head latent attention (MLA) over a paged latent cache, dense or top-k sparse (NumPy, float64).

Layout (docs/mla.md):
    query         [total_q, num_heads, 576]               512 latent dims + 64 RoPE dims per head
    latent_cache  [num_blocks, block_size, 576]           the query's dtype, or
                  uint8 [num_blocks, block_size, 656]     fp8 records (below)
    block_tables  [num_seqs, max_blocks_per_seq] int32
    context_lens  [num_seqs] int32
    query_start   None (one query row per sequence) or int32 [num_seqs + 1]
    indices       None (dense) or int32 [total_q, topk]: cache slots, -1 = invalid
Token t of sequence s lives at slot block_tables[s, t // block_size] * block_size + t % block_size.
Query row j of sequence s (q_s rows) sits at position p = L_s - q_s + j. Dense: it reads tokens
t <= p. Sparse: it reads exactly the slots of its valid indices. The key of a token is its whole
576-wide latent row, the value the row's first 512 dims; every head reads the same row.

fp8 record (656 bytes, little-endian): bytes 0..511 are e4m3fn codes of dims 0..511, bytes 512..527
four float32 scales (scale j for dims 128j..128j+127), bytes 528..655 the 64 RoPE dims as bfloat16.
Dims 0..511 dequantize to code * scale, computed exactly in float64.
"""
from __future__ import annotations

import math

import ml_dtypes  # noqa: F401  (registers bfloat16 and float8_e4m3fn with NumPy)
import numpy as np


def latent_row(latent_cache: np.ndarray, slot: int) -> np.ndarray:
    """float64 [576]: the latent row stored at `slot` (block slot // block_size, offset slot % block_size)."""
    block_size = latent_cache.shape[1]
    row = latent_cache[slot // block_size, slot % block_size]
    if latent_cache.dtype != np.uint8:
        return row.astype(np.float64)
    codes = row[:512].view(np.dtype("float8_e4m3fn")).astype(np.float64)
    scales = row[512:528].view("<f4").astype(np.float64)
    rope = row[528:656].view(np.dtype("bfloat16")).astype(np.float64)
    out = np.empty(576, dtype=np.float64)
    out[:512] = codes * np.repeat(scales, 128)   # dim d is scaled by scales[d // 128]
    out[512:] = rope
    return out


def mla_attention(query, latent_cache, block_tables, context_lens, scale=None, *, query_start=None, indices=None,
                  return_lse=False):
    """Attention of every query row and head over the latent rows it reads, one token at a time.

    Returns float64 out [total_q, num_heads, 512], and with return_lse also float64 lse [total_q,
    num_heads] (natural log of the sum of exp(logit)). A row that reads nothing (every index -1) has
    out 0 and lse -inf.
    """
    num_seqs = len(context_lens)
    num_heads = query.shape[1]
    block_size = latent_cache.shape[1]
    scale = 1.0 / math.sqrt(576) if scale is None else float(scale)
    if query_start is None:
        query_start = np.arange(num_seqs + 1)
    out = np.zeros((query.shape[0], num_heads, 512), dtype=np.float64)
    lse = np.full((query.shape[0], num_heads), -np.inf, dtype=np.float64)
    for s in range(num_seqs):
        context_len = int(context_lens[s])
        first_row, end_row = int(query_start[s]), int(query_start[s + 1])
        for row in range(first_row, end_row):
            position = context_len - (end_row - first_row) + (row - first_row)
            if indices is None:
                slots = [int(block_tables[s, t // block_size]) * block_size + t % block_size
                         for t in range(position + 1)]
            else:
                slots = [int(i) for i in indices[row] if i >= 0]
            if not slots:
                continue  # nothing to attend to: out stays 0, lse -inf
            keys = np.stack([latent_row(latent_cache, slot) for slot in slots])   # [n, 576]
            for h in range(num_heads):
                logits = scale * (keys @ query[row, h].astype(np.float64))        # [n]
                m = logits.max()
                weights = np.exp(logits - m)
                total = weights.sum()
                out[row, h] = (weights / total) @ keys[:, :512]
                lse[row, h] = m + math.log(total)
    return (out, lse) if return_lse else out
