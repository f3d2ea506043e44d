"""numpy.gather: what a user writes first. Gather K/V through the block table with fancy indexing, float32 softmax.

Idea: pad every sequence to the table's capacity, gather [num_seqs, capacity, kv_heads, head_dim]
in one indexing step, mask the padding to -inf, softmax in float32, then one batched matmul.
Limits: any block size, head dim and GQA ratio; float32 and float16 (computed in float32); CPU only.
Verdict: the CPU baseline. Memory is O(num_seqs x capacity), so very long tables cost copies.
"""
from __future__ import annotations

import numpy as np

from sandbox.variant import Limits

LIMITS = Limits(block_sizes=None, head_dims=None, backends=("cpu",))


def paged_decode_gather(query, key_cache, value_cache, block_tables, context_lens, scale) -> np.ndarray:
    """float32 [num_seqs, num_heads, head_dim] from the canonical inputs (see DESIGN.md)."""
    num_seqs, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    group = num_heads // num_kv_heads
    capacity = block_tables.shape[1] * block_size

    tokens = np.arange(capacity)
    valid = tokens[None, :] < context_lens[:, None]                        # [seqs, capacity]
    # Unused table entries may be -1: point them at block 0 and let the mask drop them.
    blocks = np.where(valid, block_tables[:, tokens // block_size], 0)
    offsets = np.broadcast_to(tokens % block_size, blocks.shape)
    keys = key_cache[blocks, offsets].astype(np.float32)                    # [seqs, capacity, kv, d]
    values = value_cache[blocks, offsets].astype(np.float32)
    # NaN in padding would poison the matmuls (0 * NaN = NaN): zero it, the mask does the rest.
    keys[~valid] = 0.0
    values[~valid] = 0.0

    q = query.astype(np.float32).reshape(num_seqs, num_kv_heads, group, head_dim)
    logits = np.einsum("skgd,stkd->skgt", q, keys) * np.float32(scale)     # [seqs, kv, group, capacity]
    logits = np.where(valid[:, None, None, :], logits, -np.inf)
    logits -= logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=-1, keepdims=True)
    out = np.einsum("skgt,stkd->skgd", weights, values)
    return out.reshape(num_seqs, num_heads, head_dim)


class _Prepared:
    def __init__(self, problem):
        self.problem = problem
        self.out = None

    def launch(self) -> None:
        p = self.problem
        self.out = paged_decode_gather(p.query, p.key_cache, p.value_cache, p.block_tables,
                                       p.context_lens, p.softmax_scale)

    def result(self) -> np.ndarray:
        return self.out.astype(self.problem.dtype)


def prepare(problem, backend: str) -> _Prepared:
    return _Prepared(problem)
