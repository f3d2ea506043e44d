"""Correctness checks: the expected output of a problem, fixed edge cases, and checking a variant."""
from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np

import reference

from .compare import Comparison, compare
from ..problem.option_schema import Case, Context
from ..problem.options import OPTIONS
from ..problem.decode import DecodeProblem
from ..variant.runner import run_problem

# Above this many (sequence, head, token) triples the token loop of reference.paged_attention takes
# minutes; reference.gathered_attention (tested equal to it) does the same float64 math per sequence.
REFERENCE_LOOP_LIMIT = 200_000


def expected_output(problem: DecodeProblem):
    """The truth for `problem`: reference.paged_attention, or its vectorized twin for large problems
    (float64; with return_lse, (out, lse))."""
    work = int(problem.context_lens.astype(np.int64) @ problem.query_lens) * problem.num_heads
    truth = reference.paged_attention if work <= REFERENCE_LOOP_LIMIT else reference.gathered_attention
    return truth(*problem.arrays(), **problem.kwargs())


def edge_block_sizes(limits) -> tuple[int, ...]:
    """The block sizes of the fixed edge cases a variant runs: 1, 16, 256 where declared, and 61 (not a
    power of two) for a variant that takes any block size."""
    if limits.block_sizes is None:
        return (1, 16, 61, 256)
    return tuple(b for b in (1, 16, 256) if b in limits.block_sizes)


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


def option_edge_cases(limits, head_dim: int = 64, brief: bool = False):
    """Named fixed problems for the precisions and options a variant declares (Limits). Yields (name, problem).

    Each declared option's cases from its row of the option table (option_table.py: window starts at
    k*block_size and k*block_size + 1 with the blocks before them freed, a soft-cap that bites on extreme
    logits, ALiBi as in the paper and random, ...); each fp8 cache over its whole range; query lengths
    past a block; every declared option at once. brief: only the cases marked brief, the caches and
    those two (for the slow Numba simulator and the executor's compiles).
    """
    dtype = "bfloat16" if "bfloat16" in limits.dtypes else limits.dtypes[0]
    block_size = 8 if limits.block_sizes is None or 8 in limits.block_sizes else limits.block_sizes[0]
    base = dict(num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=head_dim, block_size=block_size, dtype=dtype)
    lens = [5 * block_size + 3, 3 * block_size]
    context = Context(num_heads=4, head_dim=head_dim, kv_format=dtype, block_size=block_size, context_lens=tuple(lens),
                      kv_formats=tuple(limits.kv_dtypes))
    # each case switches one option on alone: every declared row's cases, whatever the base problem's cache
    # (a row such as kv_scales names its own fp8 cache) and whatever it excludes
    cases = [case for option in OPTIONS if option.feature in limits.options for case in option.cases(context)]
    cases += [Case(f"cache_{kv_dtype}", dict(kv_dtype=kv_dtype), brief=True) for kv_dtype in limits.kv_dtypes]
    if limits.max_query_len != 1:
        cases += [Case("query_len_block_plus_1", dict(query_lens=[block_size + 1, 1]), brief=True),
                  Case("query_len_whole_context", dict(query_lens=lens))]
    kv_dtype = limits.kv_dtypes[0] if limits.kv_dtypes else None
    at_once = replace(context, kv_format=kv_dtype or dtype)
    together = [o for o in declared_options(limits, at_once) if o.together is not None]
    if len(together) >= 2:
        everything = dict(kv_dtype=kv_dtype)
        for option in together:
            everything.update(option.together(at_once))
        if limits.max_query_len != 1:
            everything["query_lens"] = [3, 2]
        cases.append(Case("every_option_at_once", everything, brief=True))
    for seed, case in enumerate(cases, start=2000):
        if brief and not case.brief:
            continue
        yield case.label, DecodeProblem.random(seed, context_lens=lens, **base, **case.keywords)


def declared_options(limits, context: Context) -> list:
    """The rows of the option table whose feature `limits` declares and that apply to `context`, dropping
    a row that an earlier one excludes (exclusive options are never on together)."""
    chosen = []
    for option in OPTIONS:
        if option.feature in limits.options and option.applies(context) and not (
                {o.feature for o in chosen} & set(option.excludes)):
            chosen.append(option)
    return chosen


@dataclasses.dataclass
class CheckResult:
    variant: str
    problem: str
    comparison: Comparison | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.comparison)


def check_problem(name: str, problem: DecodeProblem, backend: str = "auto", config: dict | None = None) -> CheckResult:
    """Run `name` on `problem` with the tunables in `config` (None: its defaults) and compare with the truth
    (out, and the lse when the problem asks for it, held to float32's tolerance); errors are captured, not raised."""
    try:
        got = run_problem(name, problem, backend, config)
    except Exception as exc:  # a crash is a failed check, reported with its message
        return CheckResult(name, problem.describe(), None, f"{type(exc).__name__}: {exc}")
    expected = expected_output(problem)
    if not problem.options.return_lse:
        return CheckResult(name, problem.describe(), compare(got, expected, problem.dtype))
    if not (isinstance(got, tuple) and len(got) == 2):
        return CheckResult(name, problem.describe(), None,
                           f"return_lse: {name} returned {type(got).__name__}, expected a pair (out, lse)")
    return CheckResult(name, problem.describe(), combined(compare(got[0], expected[0], problem.dtype),
                                                          compare(got[1], expected[1], "float32")))


def combined(out: Comparison, lse: Comparison) -> Comparison:
    """One verdict for (out, lse): both must pass; the report names each."""
    return Comparison(out.ok and lse.ok, max(out.max_abs_err, lse.max_abs_err), out.num_bad + lse.num_bad,
                      out.total + lse.total, f"out: {out.report}\nlse: {lse.report}")
