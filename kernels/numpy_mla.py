"""numpy.mla: MLA as a user writes it first. Gather latent rows by slot with fancy indexing, float32 softmax.

Idea: per sequence (dense) gather the whole context's latent rows [L, 576] through the table in one
indexing step (fp8 records dequantized to float32), take every query row's logits against them in one
einsum, mask the future (t > p) to -inf, softmax in float32 and multiply by the rows' first 512 dims;
sparse rows gather their valid indices instead. Every head reads the same rows: they are gathered once
per sequence (dense) or query row (sparse), not once per head.
Limits: any block size; bfloat16 and float16 queries; caches of the query's dtype or fp8 records; dense
and sparse; any query length; CPU only.
Verdict: the CPU baseline (not measured on a GPU: it runs on the CPU only). Memory is O(L x 576) floats
per sequence.
"""
from __future__ import annotations

import numpy as np

from sandbox.problem.mla import record as rec
from sandbox.problem.mla.validate import token_slots
from sandbox.variant.mla.limits import MLALimits

LIMITS = MLALimits(backends=("cpu",))


def gather_rows(problem, slots: np.ndarray) -> np.ndarray:
    """float32 [len(slots), 576]: the latent rows at `slots`, fp8 records dequantized."""
    flat = problem.latent_cache.reshape(-1, problem.latent_cache.shape[2])[slots]
    return (rec.decode_records(flat) if problem.fp8 else flat).astype(np.float32)


def softmax_attend(query: np.ndarray, keys: np.ndarray, visible: np.ndarray, scale: float):
    """query [rows, heads, 576], keys float32 [n, 576], visible bool [rows, n] -> out float32 [rows, heads, 512],
    lse float32 [rows, heads] (0 and -inf for a row that sees nothing)."""
    logits = np.einsum("rhd,nd->rhn", query.astype(np.float32), keys) * np.float32(scale)
    logits = np.where(visible[:, None, :], logits, -np.inf)
    m = logits.max(axis=2, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0).astype(np.float32)
    weights = np.exp(logits - m)
    total = weights.sum(axis=2, keepdims=True)
    seen = ~(total <= 0)  # a NaN total (a NaN query, key or scale) is seen: NaN is data, not an empty row
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(seen, (weights @ keys[:, :rec.VALUE_DIMS]) / total, 0.0)
        lse = np.where(seen, m + np.log(total), -np.inf)[..., 0]
    return out.astype(np.float32), lse.astype(np.float32)


def mla_gather(problem):
    """(out float32 [total_q, num_heads, 512], lse float32 [total_q, num_heads]) for an MLAProblem."""
    p = problem
    out = np.empty((p.query.shape[0], p.num_heads, rec.VALUE_DIMS), np.float32)
    lse = np.empty((p.query.shape[0], p.num_heads), np.float32)
    seqs, positions = p.rows()
    for s in range(p.num_seqs):
        rows = np.flatnonzero(seqs == s)
        if p.sparse:
            for r in rows:
                # -1 points at slot 0 for the gather; the mask drops it (slot 0 may hold NaN: zeroed first)
                valid = p.indices[r] >= 0
                keys = gather_rows(p, np.where(valid, p.indices[r], 0))
                keys[~valid] = 0.0
                out[r:r + 1], lse[r:r + 1] = softmax_attend(p.query[r:r + 1], keys, valid[None, :], p.softmax_scale)
            continue
        keys = gather_rows(p, token_slots(p.block_tables[s], int(p.context_lens[s]), p.block_size))
        visible = np.arange(len(keys))[None, :] <= positions[rows][:, None]
        out[rows], lse[rows] = softmax_attend(p.query[rows], keys, visible, p.softmax_scale)
    return out, lse


class _Prepared:
    def __init__(self, problem):
        self.problem = problem
        self.out = self.lse_ = None

    def launch(self) -> None:
        self.out, self.lse_ = mla_gather(self.problem)

    def result(self) -> np.ndarray:
        return np.ascontiguousarray(self.out.astype(self.problem.dtype))

    def lse(self) -> np.ndarray:
        return self.lse_

    def bytes_moved(self) -> int:
        return self.problem.bytes_moved()


def prepare(problem, backend: str) -> _Prepared:
    return _Prepared(problem)
