"""Correctness checks: the expected output of a problem, fixed edge cases, and checking a variant."""
from __future__ import annotations

import dataclasses

import numpy as np

import reference

from .compare import Comparison, compare
from ..problem.dtypes import FP8_MAX_FINITE
from ..problem.options import PLAIN, AttentionOptions
from ..problem.decode import DecodeProblem

# Above this many (sequence, head, token) triples the token loop of reference.paged_decode takes
# minutes; gathered_decode (tested equal to it) does the same float64 math per sequence.
REFERENCE_LOOP_LIMIT = 200_000


def gather_sequence(cache: np.ndarray, block_table: np.ndarray, context_len: int, first: int = 0) -> np.ndarray:
    """Contiguous [context_len - first, num_kv_heads, head_dim] of tokens first..context_len-1, read through the table."""
    block_size = cache.shape[1]
    tokens = np.arange(first, context_len)
    return cache[block_table[tokens // block_size], tokens % block_size]


def grouped_dense_decode(query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float) -> np.ndarray:
    """reference.dense_decode's float64 math, one KV head at a time: query [num_heads, head_dim],
    keys/values [context_len, num_kv_heads, head_dim] -> float64 [num_heads, head_dim].

    Each KV head is converted to float64 once and its GQA group's logits are one matrix product
    (the reference converts per query head): ~8x faster at serving shapes, equal to rounding.
    """
    return grouped_attention(query[None], keys, values, scale, first=0)[0]


def grouped_attention(query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float, first: int,
                      options: AttentionOptions = PLAIN) -> np.ndarray:
    """reference.paged_attention's float64 math for one sequence, vectorised per KV head.

    query [q_len, num_heads, head_dim] (the sequence's last q_len positions); keys/values
    [L - first, num_kv_heads, head_dim]: tokens first..L-1 in the cache's dtype.
    -> float64 [q_len, num_heads, head_dim].
    """
    q_len, num_heads, head_dim = query.shape
    num_kv_heads = keys.shape[1]
    group = num_heads // num_kv_heads
    tokens = first + np.arange(keys.shape[0])                                    # [T]
    positions = tokens[-1] - q_len + 1 + np.arange(q_len) if len(tokens) else np.arange(q_len)
    visible = tokens[None, :] <= positions[:, None]                              # [q_len, T]
    if options.window_left >= 0:
        visible &= tokens[None, :] >= positions[:, None] - options.window_left
    out = np.empty((q_len, num_heads, head_dim), dtype=np.float64)
    for kv_head in range(num_kv_heads):
        heads = slice(kv_head * group, (kv_head + 1) * group)
        k = keys[:, kv_head, :].astype(np.float64) * options.k_scale
        v = values[:, kv_head, :].astype(np.float64) * options.v_scale
        logits = scale * np.einsum("qgd,td->qgt", query[:, heads].astype(np.float64), k)   # [q_len, group, T]
        if options.logits_soft_cap > 0:
            logits = options.logits_soft_cap * np.tanh(logits / options.logits_soft_cap)
        if options.alibi_slopes is not None:
            slopes = options.alibi_slopes[heads].astype(np.float64)
            logits = logits + slopes[None, :, None] * (tokens[None, None, :] - positions[:, None, None])
        logits = np.where(visible[:, None, :], logits, -np.inf)
        weights = np.exp(logits - logits.max(axis=2, keepdims=True))
        out[:, heads] = (weights / weights.sum(axis=2, keepdims=True)) @ v
    return out


def gathered_decode(problem: DecodeProblem) -> np.ndarray:
    """float64 [num_query_tokens, num_heads, head_dim]: gather each sequence's read tokens, then grouped_attention."""
    p = problem
    out = np.empty((p.query.shape[0], p.num_heads, p.head_dim), dtype=np.float64)
    starts = np.concatenate([[0], np.cumsum(p.query_lens)])
    first_read = p.first_read_tokens()
    for s in range(p.num_seqs):
        n, first = int(p.context_lens[s]), int(first_read[s])
        keys = gather_sequence(p.key_cache, p.block_tables[s], n, first)
        values = gather_sequence(p.value_cache, p.block_tables[s], n, first)
        rows = slice(int(starts[s]), int(starts[s + 1]))
        out[rows] = grouped_attention(p.query[rows], keys, values, p.softmax_scale, first, p.options)
    return out


def expected_output(problem: DecodeProblem) -> np.ndarray:
    """The truth for `problem`: reference.paged_attention, or its gathered twin for large problems."""
    work = int(problem.context_lens.astype(np.int64) @ problem.query_lens) * problem.num_heads
    if work <= REFERENCE_LOOP_LIMIT:
        return reference.paged_attention(*problem.arrays(), **problem.kwargs())
    return gathered_decode(problem)


def edge_case_problems(head_dim: int = 64, dtype="float32", block_sizes=(1, 16, 256), max_tokens=600):
    """Named fixed problems that hunt the known traps (STYLE.md 7). Yields (name, problem)."""
    seed = 1000
    for block_size in block_sizes:
        cap_blocks = max(2, min(4, max_tokens // block_size))
        lens = {
            "context_len_1": [1, 1],
            "len_k_block": [block_size, cap_blocks * block_size],
            "len_k_block_plus_1": [block_size + 1, (cap_blocks - 1) * block_size + 1],
        }
        for label, context_lens in lens.items():
            seed += 1
            yield (f"{label}/bs{block_size}",
                   DecodeProblem.random(seed, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=head_dim,
                                        block_size=block_size, context_lens=context_lens, dtype=dtype))
    for ratio in (1, 8):
        seed += 1
        yield (f"gqa_{ratio}", DecodeProblem.random(seed, num_seqs=2, num_heads=ratio, num_kv_heads=1,
                                                     head_dim=head_dim, block_size=16, max_context_len=70, dtype=dtype))
    seed += 1
    yield ("extreme_logits", DecodeProblem.random(seed, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=head_dim,
                                                 block_size=16, max_context_len=70, dtype=dtype, extreme_logits=True))
    seed += 1
    yield ("shared_prefix_full_capacity",
           DecodeProblem.random(seed, num_seqs=4, num_heads=4, num_kv_heads=4, head_dim=head_dim, block_size=8,
                                context_lens=[64, 40, 64, 17], dtype=dtype, share_prefix=True))


BRIEF_OPTION_CASES = ("window_start_k_block_plus_1", "softcap_bites_on_extreme_logits", "query_len_block_plus_1",
                      "every_option_at_once")


def option_edge_cases(limits, head_dim: int = 64, brief: bool = False):
    """Named fixed problems for the precisions and options a variant declares (Limits). Yields (name, problem).

    Window starts at k*block_size and k*block_size + 1 with the blocks before them freed, a window of
    the last token alone and one longer than the context; a soft-cap that bites on extreme logits;
    ALiBi as in the paper and random; each fp8 cache over its whole range; everything at once.
    brief: only BRIEF_OPTION_CASES and the fp8 caches (for the slow Numba simulator).
    """
    dtype = "bfloat16" if "bfloat16" in limits.dtypes else limits.dtypes[0]
    block_size = 8 if limits.block_sizes is None or 8 in limits.block_sizes else limits.block_sizes[0]
    base = dict(num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=head_dim, block_size=block_size, dtype=dtype)
    lens = [5 * block_size + 3, 3 * block_size]
    cases = []
    if "window" in limits.options:
        last = lens[0] - 1
        cases += [("window_start_k_block", dict(window_left=last - 2 * block_size)),
                  ("window_start_k_block_plus_1", dict(window_left=last - 2 * block_size - 1)),
                  ("window_last_token", dict(window_left=0)),
                  ("window_longer_than_context", dict(window_left=10 * block_size))]
    if "softcap" in limits.options:
        cases.append(("softcap_bites_on_extreme_logits", dict(logits_soft_cap=5.0, extreme_logits=True)))
    if "alibi" in limits.options:
        cases += [("alibi_paper", dict(alibi_slopes="paper")), ("alibi_random", dict(alibi_slopes="random"))]
    if "kv_scale" in limits.options:
        cases.append(("kv_scales", dict(k_scale=0.5, v_scale=3.0)))
    for kv_dtype in limits.kv_dtypes:
        cases.append((f"cache_{kv_dtype}", dict(kv_dtype=kv_dtype)))
    if limits.max_query_len != 1:
        cases += [("query_len_block_plus_1", dict(query_lens=[block_size + 1, 1])),
                  ("query_len_whole_context", dict(query_lens=lens))]
    if set(limits.options) >= {"window", "softcap", "alibi", "kv_scale"}:
        kv_dtype = limits.kv_dtypes[0] if limits.kv_dtypes else None
        unit = 1 / FP8_MAX_FINITE[kv_dtype] if kv_dtype else 1.0  # fp8 values reach 448 / 57344: back to about 1
        everything = dict(window_left=2 * block_size + 1, logits_soft_cap=30.0, alibi_slopes="paper",
                          k_scale=0.75 * unit, v_scale=1.5 * unit, kv_dtype=kv_dtype)
        if limits.max_query_len != 1:
            everything["query_lens"] = [3, 2]
        cases.append(("every_option_at_once", everything))
    for seed, (label, kwargs) in enumerate(cases, start=2000):
        if brief and label not in BRIEF_OPTION_CASES and not label.startswith("cache_"):
            continue
        yield label, DecodeProblem.random(seed, context_lens=lens, **base, **kwargs)


@dataclasses.dataclass
class CheckResult:
    variant: str
    problem: str
    comparison: Comparison | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.comparison)


def check_problem(name: str, problem: DecodeProblem, backend: str = "auto") -> CheckResult:
    """Run `name` on `problem` and compare with the truth; errors are captured, not raised."""
    from ..variant.runner import run_problem

    try:
        got = run_problem(name, problem, backend)
    except Exception as exc:  # a crash is a failed check, reported with its message
        return CheckResult(name, problem.describe(), None, f"{type(exc).__name__}: {exc}")
    return CheckResult(name, problem.describe(), compare(got, expected_output(problem), problem.dtype))
