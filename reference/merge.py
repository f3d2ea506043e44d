"""Merging two partial attention results by their log-sum-exps, exactly.

A partial result over a token set S is out_S = sum_{t in S} exp(s_t) v_t / sum_{t in S} exp(s_t) and
lse_S = log sum_{t in S} exp(s_t) (natural log; -inf and out_S = 0 for an empty S). For disjoint A and
B: lse = log(exp(lse_A) + exp(lse_B)) and out = (exp(lse_A) out_A + exp(lse_B) out_B) / exp(lse), computed
relative to m = max(lse_A, lse_B) so nothing overflows. Learned sinks are not part of any lse: a sink
enters once, after the last merge (out * 1 / (1 + exp(sink - lse)), see sink_factor).
"""
from __future__ import annotations

import numpy as np


def merge_states(out_a, lse_a, out_b, lse_b) -> tuple[np.ndarray, np.ndarray]:
    """(out, lse) of the union of two disjoint token sets from their partial results.

    out_a, out_b [..., head_dim]; lse_a, lse_b [...] (out's shape without its last axis), natural logs,
    -inf for an empty set (its out is then ignored: 0 * anything finite). Both empty: out 0, lse -inf.
    Computed in float64; returned in the inputs' result type (at least float32). NaN propagates.
    """
    out_a, out_b, lse_a, lse_b = (np.asarray(x) for x in (out_a, out_b, lse_a, lse_b))
    for name, x in (("out_a", out_a), ("out_b", out_b), ("lse_a", lse_a), ("lse_b", lse_b)):
        if x.dtype.kind != "f":
            raise ValueError(f"{name} must be a floating-point array, got {x.dtype.name}")
    if out_b.shape != out_a.shape or out_a.ndim < 1:
        raise ValueError(f"out_b.shape {out_b.shape} must equal out_a.shape {out_a.shape} ([..., head_dim])")
    for name, lse in (("lse_a", lse_a), ("lse_b", lse_b)):
        if lse.shape != out_a.shape[:-1]:
            raise ValueError(f"{name}.shape {lse.shape} must be out_a.shape without head_dim, {out_a.shape[:-1]}")
    a, b = lse_a.astype(np.float64), lse_b.astype(np.float64)
    m = np.maximum(a, b)
    empty = np.isneginf(m)
    safe_m = np.where(empty, 0.0, m)  # both empty: weights exp(-inf) = 0, no inf - inf
    with np.errstate(invalid="ignore"):
        w_a, w_b = np.exp(a - safe_m), np.exp(b - safe_m)
    total = w_a + w_b
    with np.errstate(invalid="ignore", divide="ignore"):
        mixed = (w_a[..., None] * np.where(w_a[..., None] > 0, out_a, 0.0)
                 + w_b[..., None] * np.where(w_b[..., None] > 0, out_b, 0.0)) / np.where(empty, 1.0, total)[..., None]
        lse = np.where(empty, -np.inf, safe_m + np.log(np.where(empty, 1.0, total)))
    nan = np.isnan(a) | np.isnan(b)
    mixed = np.where(nan[..., None], np.nan, mixed)
    out_type = np.result_type(out_a.dtype, out_b.dtype, np.float32)
    lse_type = np.result_type(lse_a.dtype, lse_b.dtype, np.float32)
    return mixed.astype(out_type), np.where(nan, np.nan, lse).astype(lse_type)


def sink_factor(lse, sinks) -> np.ndarray:
    """What a learned sink multiplies a finished output by: 1 / (1 + exp(sink - lse)), float64 [...].

    lse [..., num_heads] over every token of the query (natural log), sinks [num_heads] in the same units
    as the logits. An empty token set (lse -inf) gives 0 (the output is 0 either way).
    """
    lse = np.asarray(lse, dtype=np.float64)
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(np.asarray(sinks, dtype=np.float64) - lse))
