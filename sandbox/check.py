"""Correctness checks: the expected output of a problem, fixed edge cases, and checking a variant."""
from __future__ import annotations

import dataclasses

import numpy as np

import reference

from .compare import Comparison, compare
from .problem import DecodeProblem

# Above this many (sequence, head, token) triples the token loop of reference.paged_decode takes
# minutes; gathered_decode (tested equal to it) does the same float64 math per sequence.
REFERENCE_LOOP_LIMIT = 200_000


def gather_sequence(cache: np.ndarray, block_table: np.ndarray, context_len: int) -> np.ndarray:
    """Contiguous [context_len, num_kv_heads, head_dim] of one sequence, read through its block table."""
    block_size = cache.shape[1]
    tokens = np.arange(context_len)
    return cache[block_table[tokens // block_size], tokens % block_size]


def grouped_dense_decode(query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float) -> np.ndarray:
    """reference.dense_decode's float64 math, one KV head at a time: query [num_heads, head_dim],
    keys/values [context_len, num_kv_heads, head_dim] -> float64 [num_heads, head_dim].

    Each KV head is converted to float64 once and its GQA group's logits are one matrix product
    (the reference converts per query head): ~8x faster at serving shapes, equal to rounding.
    """
    num_heads, head_dim = query.shape
    num_kv_heads = keys.shape[1]
    group = num_heads // num_kv_heads
    out = np.empty((num_heads, head_dim), dtype=np.float64)
    for kv_head in range(num_kv_heads):
        heads = slice(kv_head * group, (kv_head + 1) * group)
        k = keys[:, kv_head, :].astype(np.float64)
        v = values[:, kv_head, :].astype(np.float64)
        logits = scale * (query[heads].astype(np.float64) @ k.T)          # [group, context_len]
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        out[heads] = (weights / weights.sum(axis=1, keepdims=True)) @ v
    return out


def gathered_decode(problem: DecodeProblem) -> np.ndarray:
    """float64 [num_seqs, num_heads, head_dim]: gather each sequence, then grouped_dense_decode."""
    p = problem
    out = np.empty((p.num_seqs, p.num_heads, p.head_dim), dtype=np.float64)
    for s in range(p.num_seqs):
        n = int(p.context_lens[s])
        keys = gather_sequence(p.key_cache, p.block_tables[s], n)
        values = gather_sequence(p.value_cache, p.block_tables[s], n)
        out[s] = grouped_dense_decode(p.query[s], keys, values, p.softmax_scale)
    return out


def expected_output(problem: DecodeProblem) -> np.ndarray:
    """The truth for `problem`: reference.paged_decode, or its gathered twin for large problems."""
    work = int(problem.context_lens.astype(np.int64).sum()) * problem.num_heads
    if work <= REFERENCE_LOOP_LIMIT:
        return reference.paged_decode(*problem.arrays())
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
    from .runner import run_problem

    try:
        got = run_problem(name, problem, backend)
    except Exception as exc:  # a crash is a failed check, reported with its message
        return CheckResult(name, problem.describe(), None, f"{type(exc).__name__}: {exc}")
    return CheckResult(name, problem.describe(), compare(got, expected_output(problem), problem.dtype))
