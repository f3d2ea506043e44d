"""numpy.gather: what a user writes first. Gather K/V through the block table with fancy indexing, float32 softmax.

Idea: pad every sequence to the table's capacity, gather [num_seqs, capacity, kv_heads, head_dim]
in one indexing step, mask what a query row may not see (padding, the future of a multi-token
query, tokens before a sliding window) to -inf, softmax in float32, then one batched matmul.
Limits: any block size, head dim and GQA ratio; float32, float16 and bfloat16 queries, fp8 caches
(all computed in float32); every option; several query tokens per sequence; CPU only.
Verdict: the CPU baseline. Memory is O(num_seqs x capacity), so very long tables cost copies.
"""
from __future__ import annotations

import numpy as np

from sandbox.variant import FULL_SUPPORT, Limits

LIMITS = Limits(block_sizes=None, head_dims=None, backends=("cpu",), max_query_len=None, **FULL_SUPPORT)


def paged_attention_gather(problem) -> np.ndarray:
    """float32 [num_query_tokens, num_heads, head_dim] for a DecodeProblem (see sandbox/problem/decode.py)."""
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
    keys = p.key_cache[blocks, offsets].astype(np.float32) * np.float32(opts.k_scale)    # [seqs, capacity, kv, d]
    values = p.value_cache[blocks, offsets].astype(np.float32) * np.float32(opts.v_scale)
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
    logits -= logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=-1, keepdims=True)
    out = np.einsum("rkgt,rtkd->rkgd", weights, values[seq_of_row])
    return out.reshape(-1, num_heads, head_dim)


class _Prepared:
    def __init__(self, problem):
        self.problem = problem
        self.out = None

    def launch(self) -> None:
        self.out = paged_attention_gather(self.problem)

    def result(self) -> np.ndarray:
        return self.out.astype(self.problem.dtype)


def prepare(problem, backend: str) -> _Prepared:
    return _Prepared(problem)
