"""numpy.mine: gather each sequence's K/V through its block table, then a float32 softmax per query head.

Idea: the plainest paged attention a NumPy user writes, one sequence at a time (a template to copy:
rename it, register it, change the idea).
Limits: any block size, head dim and GQA ratio; float32 and float16 queries with a cache of the
query's dtype; sliding windows; decode only (one query token per sequence); CPU only.
Verdict: not measured; a loop over sequences, so it is slower than numpy.gather on wide batches.
"""
import numpy as np

from sandbox.variant import Limits

LIMITS = Limits(block_sizes=None, head_dims=None, dtypes=("float32", "float16"), options=("window",),
                backends=("cpu",))


def attend(problem) -> np.ndarray:
    """float32 [num_seqs, num_heads, head_dim]: every sequence's query over its tokens (the window's, if any)."""
    p = problem
    group = p.num_heads // p.num_kv_heads
    out = np.zeros((p.num_seqs, p.num_heads, p.head_dim), np.float32)
    for s, first in enumerate(p.first_read_tokens()):       # first: the window's start (0 without one)
        tokens = np.arange(first, p.context_lens[s])
        slots = p.block_tables[s, tokens // p.block_size], tokens % p.block_size
        keys = np.repeat(p.key_cache[slots].astype(np.float32), group, axis=1)     # [tokens, heads, head_dim]
        values = np.repeat(p.value_cache[slots].astype(np.float32), group, axis=1)
        logits = np.einsum("hd,thd->ht", p.query[s].astype(np.float32), keys) * np.float32(p.softmax_scale)
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        out[s] = np.einsum("ht,thd->hd", weights / weights.sum(axis=1, keepdims=True), values)
    return out


class Prepared:
    def __init__(self, problem):
        self.problem, self.out = problem, None

    def launch(self):                      # the only timed part
        self.out = attend(self.problem)

    def result(self):                      # [num_seqs, num_heads, head_dim] in the query's dtype, C-contiguous
        return np.ascontiguousarray(self.out.astype(self.problem.dtype))


def prepare(problem, backend):             # untimed: layout conversion, upload, compile
    return Prepared(problem)
