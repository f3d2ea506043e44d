"""Checking an MLA variant against the float64 truth: expected out and lse, fixed edge cases, one problem's verdict."""
from __future__ import annotations

import numpy as np

from ..problem.mla import record as rec
from ..problem.kinds import MLA
from ..problem.mla import MLAProblem
from ..problem.mla.validate import token_slots
from .check import REFERENCE_LOOP_LIMIT, CheckResult
from .compare import TOLERANCES, Comparison, compare
from ..variant.mla.runner import run_mla_problem

# lse is computed in float32 whatever the output dtype (logits of exact bf16/fp16/fp8 inputs, float32
# accumulation and exp): the float32 tolerance applies; -inf (a row that reads nothing) must be -inf.
LSE_TOLERANCE = TOLERANCES["float32"]


def latent_rows(problem: MLAProblem, slots: np.ndarray) -> np.ndarray:
    """float64 [len(slots), 576]: the latent rows at `slots`, fp8 records dequantized exactly."""
    flat = problem.latent_cache.reshape(-1, problem.latent_cache.shape[2])[slots]
    return rec.decode_records(flat) if problem.fp8 else flat.astype(np.float64)


def attend(query: np.ndarray, keys: np.ndarray, visible: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """query [rows, heads, 576], keys float64 [n, 576], visible bool [rows, n] -> (out float64 [rows, heads, 512],
    lse float64 [rows, heads]); a row that sees nothing gets 0 and -inf."""
    rows, heads, dims = query.shape
    logits = scale * (query.reshape(-1, dims).astype(np.float64) @ keys.T).reshape(rows, heads, -1)  # BLAS
    logits = np.where(visible[:, None, :], logits, -np.inf)
    m = logits.max(axis=2, initial=-np.inf)
    safe = np.where(np.isfinite(m), m, 0.0)
    weights = np.exp(logits - safe[..., None])
    total = weights.sum(axis=2)
    weighted = (weights.reshape(rows * heads, -1) @ keys[:, :rec.VALUE_DIMS]).reshape(rows, heads, -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(total[..., None] > 0, weighted / total[..., None], 0.0)
        lse = np.where(total > 0, safe + np.log(total), -np.inf)
    return out, lse


def gathered_mla(problem: MLAProblem) -> tuple[np.ndarray, np.ndarray]:
    """reference.mla_attention's float64 math, vectorised: dense per sequence (causal mask), sparse per row."""
    p = problem
    out = np.zeros((p.query.shape[0], p.num_heads, rec.VALUE_DIMS), np.float64)
    lse = np.full((p.query.shape[0], p.num_heads), -np.inf, np.float64)
    seqs, positions = p.rows()
    for s in range(p.num_seqs):
        rows = np.flatnonzero(seqs == s)
        if p.sparse:
            for r in rows:
                slots = p.indices[r][p.indices[r] >= 0].astype(np.int64)
                if slots.size:
                    out[r:r + 1], lse[r:r + 1] = attend(p.query[r:r + 1], latent_rows(p, slots),
                                                        np.ones((1, slots.size), bool), p.softmax_scale)
            continue
        keys = latent_rows(p, token_slots(p.block_tables[s], int(p.context_lens[s]), p.block_size))
        visible = np.arange(len(keys))[None, :] <= positions[rows][:, None]
        out[rows], lse[rows] = attend(p.query[rows], keys, visible, p.softmax_scale)
    return out, lse


def expected_mla(problem: MLAProblem) -> tuple[np.ndarray, np.ndarray]:
    """The truth for `problem`, (out, lse): reference.mla_attention, or its gathered twin for large problems."""
    if int(problem.tokens_per_row().sum()) * problem.num_heads <= REFERENCE_LOOP_LIMIT:
        return MLA.reference(problem)
    return gathered_mla(problem)


def compare_lse(got, expected) -> Comparison:
    """lse within LSE_TOLERANCE where the truth is finite; exactly -inf where it is -inf, NaN where it is NaN
    (a NaN input propagates)."""
    got = np.asarray(got, np.float64)
    expected = np.asarray(expected, np.float64)
    if got.shape != expected.shape:
        return Comparison(False, float("inf"), got.size, expected.size,
                          f"lse shape mismatch: got {got.shape}, expected {expected.shape}")
    empty, nan = np.isneginf(expected), np.isnan(expected)
    finite = np.where(empty | nan, 0.0, expected)
    diff = np.abs(np.where(empty | nan, 0.0, got) - finite)
    bad = np.where(empty, ~np.isneginf(got), np.where(
        nan, ~np.isnan(got), ~np.isfinite(got) | (diff > LSE_TOLERANCE.atol + LSE_TOLERANCE.rtol * np.abs(finite))))
    worst = float(np.max(np.where(bad & empty, np.inf, np.where(np.isfinite(got), diff, np.inf)))) if got.size else 0.0
    if not bad.any():
        return Comparison(True, worst, 0, got.size, f"lse: all {got.size} within atol={LSE_TOLERANCE.atol:g} "
                                                    f"rtol={LSE_TOLERANCE.rtol:g}, -inf where nothing is read")
    lines = [f"lse: {int(bad.sum())} of {got.size} differ (atol={LSE_TOLERANCE.atol:g} rtol={LSE_TOLERANCE.rtol:g}; "
             "-inf expected where a row reads nothing)"]
    for index in np.argwhere(bad)[:5]:
        idx = tuple(int(i) for i in index)
        lines.append(f"  at {idx}: got {float(got[idx])!r}, expected {float(expected[idx])!r}")
    return Comparison(False, worst, int(bad.sum()), got.size, "\n".join(lines))


def compare_mla(got_out, got_lse, expected_out, expected_lse, dtype) -> Comparison:
    """out within the dtype's tolerance and lse within LSE_TOLERANCE: one verdict, max_abs_err of out."""
    out = compare(got_out, expected_out, dtype)
    lse = compare_lse(got_lse, expected_lse)
    report = out.report if lse.ok else (out.report + "\n" + lse.report)
    return Comparison(out.ok and lse.ok, out.max_abs_err, out.num_bad + lse.num_bad, out.total + lse.total, report)


def check_mla_problem(name: str, problem: MLAProblem, backend: str = "auto", config: dict | None = None) -> CheckResult:
    """Run MLA variant `name` on `problem` with the tunables in `config` (None: its defaults) and compare out
    and lse with the truth; errors are captured."""
    try:
        got, got_lse = run_mla_problem(name, problem, backend, return_lse=True, config=config)
    except Exception as exc:  # a crash is a failed check, reported with its message
        return CheckResult(name, problem.describe(), None, f"{type(exc).__name__}: {exc}")
    return CheckResult(name, problem.describe(), compare_mla(got, got_lse, *expected_mla(problem), problem.dtype))


def error_key(problem: MLAProblem) -> str:
    """'bfloat16' or 'bfloat16:fp8_record': what check reports the worst error per."""
    return problem.dtype.name + (f":{rec.FORMAT}" if problem.fp8 else "")


def mla_edge_cases(limits, num_heads: int = 2, block_sizes=(1, 16, 64, 256), max_tokens: int = 300,
                   brief: bool = False):
    """Named fixed MLA problems for what `limits` (MLALimits) declares (STYLE.md 7). Yields (name, problem).

    Context 1, k*bs and k*bs + 1 tokens per block size; query rows at a block edge; extreme logits; a
    forked prompt (copy-on-write); each cache format; sparse rows with every index invalid, one valid
    index, as many as the context, -1s among block-edge tokens; prefix-cached groups, sparse. brief: the
    first two block sizes only and no prefix-cached case (the Numba simulator pays per multiply-add).
    """
    dtype = "bfloat16" if "bfloat16" in limits.dtypes else limits.dtypes[0]
    sizes = [b for b in block_sizes if limits.block_sizes is None or b in limits.block_sizes]
    sizes = sizes[:2] if brief else sizes
    sparse = "sparse" in limits.modes
    dense = "dense" in limits.modes
    base = dict(num_heads=num_heads, dtype=dtype)
    seed = 3000
    cases = []
    for bs in sizes:
        k = max(1, min(3, max_tokens // bs))
        cases += [(f"context_len_1/bs{bs}", dict(num_seqs=2, context_lens=[1, 1], block_size=bs)),
                  (f"len_k_block/bs{bs}", dict(num_seqs=2, context_lens=[bs, k * bs], block_size=bs)),
                  (f"len_k_block_plus_1/bs{bs}",
                   dict(num_seqs=2, context_lens=[min(bs + 1, max_tokens), min((k - 1) * bs + 1, max_tokens) or 1],
                        block_size=bs))]
    bs = sizes[min(1, len(sizes) - 1)]
    short = min(3 * bs + 2, max_tokens)
    if limits.max_query_len != 1:
        cases.append(("query_len_block_plus_1", dict(num_seqs=2, context_lens=[short, short], block_size=bs,
                                                     query_lens=[min(bs + 1, short), 1])))
    cases.append(("extreme_logits", dict(num_seqs=2, context_lens=[short, 5], block_size=bs, extreme_logits=True)))
    for kv_format in limits.kv_formats:
        cases.append((f"cache_{kv_format}", dict(num_seqs=2, context_lens=[short, bs + 1], block_size=bs,
                                                  kv_format=kv_format)))
    if sparse:
        rows = dict(num_seqs=2, context_lens=[short, bs + 1], block_size=bs, topk=2 * bs + 3)
        cases += [("sparse_every_index_invalid", dict(rows, valid_counts=[0, 0])),
                  ("sparse_one_valid_index", dict(rows, valid_counts=[1, 1])),
                  ("sparse_whole_context", dict(rows, topk=short, valid_counts=[short, short])),
                  ("sparse_block_edges_and_invalid", dict(rows, valid_counts=[bs, 2]))]
        if limits.kv_formats:
            cases.append(("sparse_fp8_record", dict(rows, kv_format=limits.kv_formats[0], valid_counts=[bs + 2, 1])))
    for seed, (label, kwargs) in enumerate(cases, start=seed):
        if not dense and "topk" not in kwargs:
            continue
        yield label, MLAProblem.random(seed, **base, **kwargs)
    shared = dict(num_heads=num_heads, dtype=dtype, block_size=bs, prefix_len=bs + 3, suffix_lens=[2, bs, 1, 3])
    if dense:
        yield "shared_fork_copy_on_write", MLAProblem.shared(seed + 1, **shared)
    if sparse and not brief:
        yield "shared_prefix_sparse", MLAProblem.shared(seed + 2, how="prefix", topk=bs + 4, **shared)


def mla_check_problems(limits, seed: int, num_random: int, simulated: bool = False):
    """What `python -m sandbox check` runs on an MLA variant: its edge cases and num_random random problems
    inside `limits`, [(label, problem)]. simulated (the Numba simulator): 1 head, short contexts."""
    edges = dict(num_heads=1, block_sizes=(1, 4), max_tokens=9, brief=True) if simulated else {}
    out = list(mla_edge_cases(limits, **edges))
    rng = np.random.default_rng(seed)
    sizes = limits.block_sizes or (1, 3, 16, 64, 128, 256)
    formats = (None,) + tuple(limits.kv_formats)
    for i in range(num_random):
        sparse = "sparse" in limits.modes and (i % 2 or "dense" not in limits.modes)
        problem = MLAProblem.random(int(rng.integers(2**31)), num_seqs=2 if simulated else 3,
                                    num_heads=2 if simulated else 18, block_size=int(rng.choice(sizes)),
                                    max_context_len=12 if simulated else 300, dtype=limits.dtypes[i % len(limits.dtypes)],
                                    kv_format=formats[(i // len(limits.dtypes)) % len(formats)],
                                    query_lens=None if limits.max_query_len == 1 else int(rng.integers(1, 4)),
                                    topk=int(rng.integers(1, 40)) if sparse else None, extreme_logits=bool(i % 2))
        out.append((f"random#{i} seed={problem.seed}", problem))
    return [(label, p) for label, p in out if limits.supports(p)]


def variant_check_problems(variant, seed: int, num_random: int):
    """mla_check_problems for a registry variant (the Numba simulator's: the small ones)."""
    return mla_check_problems(variant.limits, seed, num_random, variant.family_plugin.runtime == "numba")


# The check command's part of the MLA kind (sandbox/problem/kinds.py): its problems, how one is checked, and the
# label the worst error is reported per (bfloat16, float16, bfloat16:fp8_record, ...).
MLA.attach(check_problems=variant_check_problems, check=check_mla_problem, error_key=error_key)
