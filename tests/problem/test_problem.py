"""DecodeProblem generator, the shared strategy's reach, validation messages, the comparison helper."""
import numpy as np
import pytest
from hypothesis import Phase, example, find, given, settings
from hypothesis import strategies as st

from sandbox.checking.compare import TOLERANCES, compare
from sandbox.problem.dtypes import KV_FORMATS, QUERY_DTYPES
from sandbox.problem.options import FEATURES, AttentionOptions
from sandbox.problem import DecodeProblem
from sandbox.problem.strategies import decode_problems
from sandbox.problem.validate import validate_decode_inputs


@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 2, 16, 256]), st.integers(1, 5))
@example(seed=1088, block_size=1, num_seqs=1)  # once drew blocks [0, 1, 2, 4]: increasing, with one gap
def test_random_problem_has_the_promised_traps(seed, block_size, num_seqs):
    p = DecodeProblem.random(seed, num_seqs=num_seqs, num_heads=4, num_kv_heads=2, head_dim=8,
                             block_size=block_size, max_context_len=3 * block_size + 1)
    capacity = p.max_blocks_per_seq * block_size
    assert p.context_lens.max() == capacity, "one sequence fills its whole table"
    used = {int(b) for s in range(num_seqs) for b in p.block_tables[s, :-(-int(p.context_lens[s]) // block_size)]}
    order = [int(b) for b in p.block_tables[p.block_tables >= 0]]
    assert len(set(order)) < 2 or order != sorted(order), "physical blocks are never in increasing order"
    # Every slot no sequence reads is NaN; every slot read is finite.
    read = np.zeros(p.key_cache.shape[:2], bool)
    for s in range(num_seqs):
        t = np.arange(p.context_lens[s])
        read[p.block_tables[s, t // block_size], t % block_size] = True
    assert np.isfinite(p.key_cache[read]).all() and np.isfinite(p.value_cache[read]).all()
    assert np.isnan(p.key_cache[~read]).all() and np.isnan(p.value_cache[~read]).all()
    assert used <= set(range(p.num_blocks))


def test_random_problem_is_reproducible_from_its_seed():
    a = DecodeProblem.random(42, dtype="float16", extreme_logits=True)
    b = DecodeProblem.random(42, dtype="float16", extreme_logits=True)
    for x, y in zip(a.arrays()[:5], b.arrays()[:5]):
        np.testing.assert_array_equal(x, y)
    assert "seed=42" in a.describe()


def test_sharing_happens_for_some_seed():
    shared = [DecodeProblem.random(seed, num_seqs=4, block_size=4, max_context_len=64) for seed in range(20)]
    assert any(len(set(p.block_tables[p.block_tables >= 0].tolist())) < int((p.block_tables >= 0).sum()) for p in shared)


def test_extreme_logits_would_overflow_a_naive_exp():
    p = DecodeProblem.random(3, num_seqs=2, head_dim=64, block_size=16, max_context_len=64, extreme_logits=True)
    s, h = 0, 0
    keys = p.key_cache[p.block_tables[s, 0], :, h // 4].astype(np.float64)
    logits = p.softmax_scale * keys[np.isfinite(keys[:, 0])] @ p.query[s, h].astype(np.float64)
    assert np.abs(logits).max() > 88.7


# The strategy must reach every edge case; `find` proves each one is reachable.
@pytest.mark.parametrize("what, predicate", [
    ("context length 1", lambda p: (p.context_lens == 1).any()),
    ("k * block_size", lambda p: ((p.context_lens % p.block_size == 0) & (p.context_lens > p.block_size)).any()),
    ("k * block_size + 1", lambda p: (p.block_size > 1 and ((p.context_lens % p.block_size == 1) & (p.context_lens > 1)).any())),
    ("GQA ratio 8", lambda p: p.num_heads // p.num_kv_heads == 8),
    ("GQA ratio 2", lambda p: p.num_heads // p.num_kv_heads == 2),
    ("block size 1", lambda p: p.block_size == 1),
    ("block size 256 with 257 tokens", lambda p: p.block_size == 256 and (p.context_lens == 257).any()),
    ("float16", lambda p: p.dtype == np.float16),
    ("float32", lambda p: p.dtype == np.float32),
    ("shared physical blocks", lambda p: len(set(p.block_tables[p.block_tables >= 0].tolist())) < int((p.block_tables >= 0).sum())),
])
def test_strategy_reaches(what, predicate):
    find(decode_problems(), predicate, settings=settings(max_examples=2000, database=None, derandomize=True))


FULL = decode_problems(dtypes=QUERY_DTYPES, kv_dtypes=KV_FORMATS, options=FEATURES, max_query_len=None)


def _window_start_at(p, offset):
    """Some sequence's window starts at k*block_size + offset (k >= 1) and the window is shorter than it."""
    if p.options.window_left < 0:
        return False
    start = p.context_lens.astype(np.int64) - p.query_lens - p.options.window_left
    return bool(((start > p.block_size) & (start % p.block_size == offset)).any())


REACH = [
    ("bfloat16", lambda p: p.dtype.name == "bfloat16"),
    ("e4m3 cache with a float16 query", lambda p: p.kv_dtype.name == "float8_e4m3fn" and p.dtype.name == "float16"),
    ("e5m2 cache with a bfloat16 query", lambda p: p.kv_dtype.name == "float8_e5m2" and p.dtype.name == "bfloat16"),
    ("every option off", lambda p: p.options.features == ()),
    ("every option on (per-tensor scales)", lambda p: set(p.options.features) == set(FEATURES) - {"kv_scales"}),
    ("per-token scales with two other options", lambda p: "kv_scales" in p.options.features and len(p.options.features) >= 3),
    ("sinks on extreme logits", lambda p: "sinks" in p.options.features and p.recipe["extreme_logits"]),
    ("lse with several query tokens", lambda p: p.options.return_lse and p.max_query_len > 1),
    ("per-token scales beside an e5m2 cache", lambda p: p.kv_format == "float8_e5m2" and "kv_scales" in p.options.features),
    ("an nvfp4 cache with a bfloat16 query", lambda p: p.kv_format == "nvfp4" and p.dtype.name == "bfloat16"),
    ("an nvfp4 cache shared by a forked group", lambda p: p.kv_format == "nvfp4" and p.recipe.get("how") == "fork"),
    ("window starting at k*block_size", lambda p: _window_start_at(p, 0)),
    ("window starting at k*block_size + 1", lambda p: p.block_size > 1 and _window_start_at(p, 1)),
    ("window longer than the context", lambda p: p.options.window_left >= int(p.context_lens.max())),
    ("window of the last token alone", lambda p: p.options.window_left == 0),
    ("freed blocks before a window", lambda p: p.options.window_left >= 0 and bool(
        ((p.block_tables[:, :1] == -1) & (p.context_lens[:, None] > p.block_size)).any())),
    ("soft-cap on extreme logits", lambda p: 0 < p.options.logits_soft_cap <= 5 and p.recipe["extreme_logits"]),
    ("ALiBi paper slopes", lambda p: p.recipe.get("alibi_slopes") == "paper"),
    ("ALiBi random slopes", lambda p: p.recipe.get("alibi_slopes") == "random"),
    ("several query tokens, one longer than a block", lambda p: p.max_query_len > p.block_size > 1),
    ("a group forked from one prompt (copy-on-write)", lambda p: p.recipe.get("how") == "fork" and p.recipe["group_size"] > 1),
    ("a group sharing a cached prefix", lambda p: p.recipe.get("how") == "prefix" and p.recipe["group_size"] > 1),
    ("a query as long as its context", lambda p: p.max_query_len > 1 and bool((p.query_lens == p.context_lens).any())),
    ("a block size that is not a power of two", lambda p: p.block_size & (p.block_size - 1) != 0),
    ("a block of 528 or more tokens", lambda p: p.block_size >= 528),
    ("a non-power-of-two block size with a context of k*bs + 1", lambda p: p.block_size & (p.block_size - 1) != 0
     and bool((p.context_lens % p.block_size == 1).any() & (p.context_lens > p.block_size).any())),
]


def test_strategy_reaches_precisions_and_options():
    """One pass of plain generation (no shrinking, unlike find) must meet every case of REACH."""
    missing = {what for what, _ in REACH}

    @settings(max_examples=800, database=None, derandomize=True, phases=[Phase.generate])
    @given(FULL)
    def draw(problem):
        missing.difference_update({what for what, predicate in REACH if what in missing and predicate(problem)})

    draw()
    assert not missing, f"the strategy never drew: {sorted(missing)}"


def test_multiply_adds_count_the_tokens_each_query_token_reads():
    shape = dict(num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=4, context_lens=[5, 9])
    assert DecodeProblem.random(1, **shape).multiply_adds() == 2 * 4 * 32 * (5 + 9)
    assert DecodeProblem.random(1, window_left=2, **shape).multiply_adds() == 2 * 4 * 32 * (3 + 3)
    assert DecodeProblem.random(1, query_lens=[2, 3], **shape).multiply_adds() == 2 * 4 * 32 * (2 * 5 + 3 * 9)


def test_a_work_bound_rejects_only_the_draws_above_it():
    """The simulated family's bound: every draw stays under it, and GQA ratio 8 with a 128 head dim is still drawn."""
    bound = 200_000
    seen = set()

    @settings(max_examples=200, database=None, derandomize=True, phases=[Phase.generate])
    @given(decode_problems(head_dims=(32, 128), max_tokens=160, max_multiply_adds=bound))
    def draw(problem):
        assert problem.multiply_adds() <= bound
        seen.add((problem.num_heads // problem.num_kv_heads, problem.head_dim))

    draw()
    assert (8, 128) in seen


def test_repr_rebuilds_a_problem_with_options_and_query_lens():
    p = DecodeProblem.random(3, dtype="bfloat16", kv_dtype="e5m2", window_left=7, logits_soft_cap=4.0,
                             alibi_slopes="random", query_lens=[1, 3, 2, 5], max_context_len=40)
    rebuilt = eval(repr(p), {"DecodeProblem": DecodeProblem})
    for x, y in zip(p.arrays()[:5] + (p.query_start, p.options.alibi_slopes),
                    rebuilt.arrays()[:5] + (rebuilt.query_start, rebuilt.options.alibi_slopes)):
        np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))
    assert p.options.kwargs().keys() == rebuilt.options.kwargs().keys() and p.options.window_left == 7


def _valid():
    return DecodeProblem.random(0, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=8, block_size=4, max_context_len=10)


@pytest.mark.parametrize("mutate, message", [
    (lambda a: a.update(block_tables=np.where(a["block_tables"] == a["block_tables"][1, 0], 9000, a["block_tables"]).astype(np.int32)),
     r"block_tables\[\d, \d\] = 9000 is out of range for \d+ blocks"),
    (lambda a: a.update(context_lens=np.array([0, 3], np.int32)), r"context_lens\[0\] = 0 is out of range \[1, 12\]"),
    (lambda a: a.update(context_lens=np.array([3, 13], np.int32)), r"context_lens\[1\] = 13 is out of range \[1, 12\]"),
    (lambda a: a.update(context_lens=a["context_lens"].astype(np.int64)), "context_lens.dtype must be int32"),
    (lambda a: a.update(query=a["query"][:, :3]), r"num_heads \(3, from query\) must be a multiple of num_kv_heads \(2"),
    (lambda a: a.update(query=a["query"].astype(np.float64)), "query.dtype must be one of"),
    (lambda a: a.update(value_cache=a["value_cache"].astype(np.float16)), r"value_cache.dtype must equal key_cache.dtype \(float32\)"),
    (lambda a: a.update(key_cache=a["key_cache"].astype(np.float16), value_cache=a["value_cache"].astype(np.float16)),
     "key_cache.dtype float16 with query.dtype float32 is not allowed"),
    (lambda a: a.update(key_cache=np.zeros(a["key_cache"].shape, np.int8), value_cache=np.zeros(a["key_cache"].shape, np.int8)),
     "key_cache.dtype must be the query's dtype"),
    (lambda a: a.update(key_cache=a["key_cache"].astype("float8_e4m3fn"), value_cache=a["value_cache"].astype("float8_e5m2")),
     r"value_cache.dtype must equal key_cache.dtype \(float8_e4m3fn\)"),
    (lambda a: a.update(options=AttentionOptions(k_scale=0.0)), "k_scale must be a positive finite number, got 0.0"),
    (lambda a: a.update(options=AttentionOptions(v_scale=float("inf"))), "v_scale must be a positive finite number"),
    (lambda a: a.update(options=AttentionOptions(window_left=-2)), r"window_left must be an integer >= -1 \(-1: no window\), got -2"),
    (lambda a: a.update(options=AttentionOptions(window_left=2.5)), "window_left must be an integer >= -1"),
    (lambda a: a.update(options=AttentionOptions(logits_soft_cap=-1.0)), "logits_soft_cap must be a finite number >= 0"),
    (lambda a: a.update(options=AttentionOptions(logits_soft_cap=float("nan"))), "logits_soft_cap must be a finite number >= 0"),
    (lambda a: a.update(options=AttentionOptions(alibi_slopes=np.ones(3, np.float32))), r"alibi_slopes must have shape \(4,\)"),
    (lambda a: a.update(options=AttentionOptions(alibi_slopes=np.ones(4, np.float64))), "alibi_slopes must be a float32 NumPy array"),
    (lambda a: a.update(options=AttentionOptions(alibi_slopes=np.array([1, np.inf, 0, 0], np.float32))), r"alibi_slopes\[1\] = inf is not finite"),
    (lambda a: a.update(query_start=np.array([0, 1, 2], np.int64)), "query_start.dtype must be int32"),
    (lambda a: a.update(query_start=np.array([0, 2], np.int32)), r"query_start has 2 entries, expected num_seqs \+ 1 = 3"),
    (lambda a: a.update(query_start=np.array([1, 1, 2], np.int32)), r"query_start\[0\] must be 0"),
    (lambda a: a.update(query_start=np.array([0, 1, 3], np.int32)), r"query_start\[2\] = 3 must equal the query's 2 rows"),
    (lambda a: a.update(query_start=np.array([0, 0, 2], np.int32)), r"query_start\[1\] - query_start\[0\] = 0 query tokens for sequence 0"),
    (lambda a: a.update(query=np.concatenate([a["query"]] * 3)), r"query has 6 rows, expected num_seqs = 2 \(from context_lens\)"),
    (lambda a: a.update(key_cache=a["key_cache"][..., :4], value_cache=a["value_cache"][..., :4]), "key_cache head_dim 4 must equal query head_dim 8"),
    (lambda a: a.update(block_tables=a["block_tables"][:1]), "block_tables has 1 rows, expected num_seqs = 2"),
    (lambda a: a.update(query=list(a["query"])), "query must be a NumPy array"),
    (lambda a: a.update(scale=float("nan")), "scale must be a finite non-zero number"),
    (lambda a: a.update(key_cache=np.zeros((3, 5000, 2, 8), np.float32), value_cache=np.zeros((3, 5000, 2, 8), np.float32)),
     r"key_cache block_size \(shape\[1\]\) must be in \[1, 4096\], got 5000"),
])
def test_validation_names_the_argument_and_the_bound(mutate, message):
    p = _valid()
    args = dict(query=p.query, key_cache=p.key_cache, value_cache=p.value_cache,
                block_tables=p.block_tables, context_lens=p.context_lens, scale=None, options=AttentionOptions())
    validate_decode_inputs(**args)
    mutate(args)
    with pytest.raises(ValueError, match=message):
        validate_decode_inputs(**args)


@pytest.mark.parametrize("block_size", [0, 4097, 2.0, True])
def test_random_and_shared_refuse_a_block_size_outside_1_to_4096(block_size):
    for constructor in (DecodeProblem.random, DecodeProblem.shared):
        with pytest.raises(ValueError, match=rf"block_size must be an integer in \[1, 4096\], got {block_size!r}"):
            constructor(0, block_size=block_size)


def test_unused_table_entries_may_be_minus_one():
    p = DecodeProblem.random(0, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=8, block_size=4, context_lens=[1, 12])
    assert (p.block_tables[0, 1:] == -1).all()
    validate_decode_inputs(*p.arrays())


def test_compare_explains_a_failure():
    expected = np.zeros((2, 3, 4))
    got = expected.copy().astype(np.float32)
    got[1, 2, 3] = 0.5
    got[0, 0, 0] = np.nan
    result = compare(got, expected, "float32")
    assert not result.ok and result.num_bad == 2
    assert "2 of 24 elements differ" in result.report
    assert "1 elements are NaN/inf" in result.report
    assert "(1, 2, 3): got 0.5" in result.report
    assert f"atol={TOLERANCES['float32'].atol:g}" in result.report


def test_compare_passes_within_tolerance_and_reports_the_error():
    expected = np.linspace(-1, 1, 24).reshape(2, 3, 4)
    result = compare(expected.astype(np.float16), expected, "float16")
    assert result.ok and 0 < result.max_abs_err < TOLERANCES["float16"].atol


def test_repr_is_the_call_that_rebuilds_the_problem():
    """Hypothesis prints repr() for a falsifying example: pasting it must rebuild the same arrays."""
    p = DecodeProblem.random(7, num_seqs=3, block_size=4, context_lens=[1, 9, 12], dtype="float16", extreme_logits=True)
    assert repr(p).startswith("DecodeProblem.random(seed=7, ")
    rebuilt = eval(repr(p), {"DecodeProblem": DecodeProblem})
    for x, y in zip(p.arrays()[:5], rebuilt.arrays()[:5]):
        np.testing.assert_array_equal(x, y)


def test_shared_problems_come_from_the_allocator_and_repr_rebuilds_them():
    p = DecodeProblem.shared(4, num_groups=2, group_size=3, prefix_len=21, block_size=4, dtype="float16",
                             kv_dtype="e5m2", query_lens=2, logits_soft_cap=3.0)
    rebuilt = eval(repr(p), {"DecodeProblem": DecodeProblem})
    assert repr(p).startswith("DecodeProblem.shared(seed=4")
    for x, y in zip(p.arrays()[:5], rebuilt.arrays()[:5]):
        np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))
    # Within a group every table starts with the prompt's 5 full blocks.
    for g in range(2):
        rows = p.block_tables[3 * g: 3 * g + 3, :5]
        assert (rows == rows[0]).all()
