"""Comparison against the reference that explains a failure (after gpu-mode's verbose_allclose).

Tolerances per input dtype live here, and only here, each with its reason.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    why: str


TOLERANCES = {
    # Outputs are convex combinations of V values in [-1, 1]. Kernels accumulate in float32
    # (about 6e-8 relative per add) and may use fast exp (__expf, 2 ulp); logits reach +-120 in the
    # extreme-logit problems, so a logit carries up to ~1e-5 absolute error and a weight ~1e-5
    # relative. 1e-4 leaves a 10x margin and still sees one dropped token out of a few hundred.
    "float32": Tolerance(atol=1e-4, rtol=1e-4,
                         why="float32 accumulation + fast exp; 10x margin over the worst case measured"),
    # The reference reads the same float16-rounded inputs in float64, so the error is float32
    # accumulation plus the final float16 rounding of the output (2^-11 relative, 4.9e-4 at 1.0).
    # vLLM's tests use atol 1e-3 for float16 outputs.
    "float16": Tolerance(atol=1e-3, rtol=1e-3,
                         why="float32 accumulation + float16 output rounding (4.9e-4 at |x| = 1); vLLM uses atol 1e-3"),
    # bfloat16 keeps 8 significant bits: the output rounding alone is up to 2^-9 = 2e-3 relative, and a
    # kernel may round its query or its softmax weights to bfloat16 on the way (vLLM's do), which
    # adds a few such roundings. vLLM's tests use rtol 1.6e-2 for bfloat16; atol 1e-2 covers outputs
    # near zero that are sums of such rounded terms.
    "bfloat16": Tolerance(atol=1e-2, rtol=1.6e-2,
                          why="8-bit significand: output rounding 2^-9 + rounded intermediates; vLLM uses rtol 1.6e-2"),
}
# The log-sum-exp (return_lse) is a float32 output whatever the query's dtype: it is held to "float32".
# An fp8 cache changes nothing here: the truth is computed from the same dequantized cache values
# (reference reads fp8 exactly in float64), so only the kernel's arithmetic and output rounding
# count, and those follow the query's (= output's) dtype.


def tolerance_for(dtype) -> Tolerance:
    name = np.dtype(dtype).name
    if name not in TOLERANCES:
        raise ValueError(f"no tolerance for dtype {name}; known: {sorted(TOLERANCES)}")
    return TOLERANCES[name]


@dataclasses.dataclass
class Comparison:
    ok: bool
    max_abs_err: float
    num_bad: int
    total: int
    report: str

    def __bool__(self) -> bool:
        return self.ok


def compare(got, expected, dtype, max_shown: int = 5) -> Comparison:
    """Compare a kernel's output with the reference; the report says how many are off and where.

    got, expected: same shape (typically [num_seqs, num_heads, head_dim]); dtype: the input dtype.
    NaN or inf anywhere in `got` where expected is finite counts as a mismatch, and so does a number where the
    reference has NaN (a NaN input propagates: NaN is data); NaN in both, or the same infinity in both, matches.
    """
    tol = tolerance_for(dtype)
    got = np.asarray(got)
    expected = np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        return Comparison(False, float("inf"), got.size, expected.size,
                          f"shape mismatch: got {got.shape}, expected {expected.shape}")
    got64 = got.astype(np.float64)
    # the same infinity counts as equal (an empty token set's lse is -inf), and so does NaN where NaN is due
    same = (got64 == expected) | (np.isnan(got64) & np.isnan(expected))
    finite = np.isfinite(got64) | same
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(got64 - expected))
    nan_lost = np.isnan(expected) & ~same
    bad = ~finite | nan_lost | (diff > tol.atol + tol.rtol * np.abs(np.where(same, 0.0, expected)))
    max_abs_err = float(np.max(np.where(finite, diff, np.inf))) if got.size else 0.0
    num_bad = int(bad.sum())
    if not num_bad:
        return Comparison(True, max_abs_err, 0, got.size,
                          f"all {got.size} elements within atol={tol.atol:g} rtol={tol.rtol:g} (max abs err {max_abs_err:.3g})")
    lines = [f"{num_bad} of {got.size} elements differ beyond atol={tol.atol:g} rtol={tol.rtol:g} "
             f"({np.dtype(dtype).name}: {tol.why})"]
    nonfinite = int((~finite).sum())
    if nonfinite:
        lines.append(f"{nonfinite} elements are NaN/inf in the output where the reference is not")
    if nan_lost.any():
        lines.append(f"{int(nan_lost.sum())} elements are numbers where the reference is NaN (a NaN input was dropped)")
    lines.append(f"max abs err {max_abs_err:.3g}")
    for index in np.argwhere(bad)[:max_shown]:
        idx = tuple(int(i) for i in index)
        lines.append(f"  at {idx}: got {float(got64[idx])!r}, expected {float(expected[idx])!r}")
    if num_bad > max_shown:
        lines.append(f"  ... and {num_bad - max_shown} more")
    return Comparison(False, max_abs_err, num_bad, got.size, "\n".join(lines))


def assert_close(got, expected, dtype, context: str = "") -> Comparison:
    """compare(), raising AssertionError with the full report (and the context, e.g. the problem) on failure."""
    result = compare(got, expected, dtype)
    if not result.ok:
        raise AssertionError((context + "\n" if context else "") + result.report)
    return result
