"""The reference's precisions, options and multi-token queries, each pinned to what it must mean."""
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

import reference
from sandbox.problem.dtypes import KV_FORMATS, QUERY_DTYPES
from sandbox.problem.option_table import alibi_paper_slopes
from sandbox.problem.options import FEATURES
from sandbox.problem import DecodeProblem
from sandbox.problem.strategies import decode_problems

# Every option of the table and every cache format, drawn the way the variants' property tests draw them.
everything = decode_problems(head_dims=(16, 32), max_tokens=120, max_num_seqs=3, dtypes=QUERY_DTYPES,
                             kv_dtypes=KV_FORMATS, options=FEATURES, max_query_len=None)


def ref(p, **overrides):
    return reference.paged_attention(*p.arrays(), **{**p.kwargs(), **overrides})


def outputs(result) -> tuple:
    """(out,) or (out, lse): what a call returned, as a tuple."""
    return result if isinstance(result, tuple) else (result,)


@given(everything)
def test_gathered_twin_equals_the_token_loop_with_every_option(problem):
    twin = outputs(reference.gathered_attention(*problem.arrays(), **problem.kwargs()))
    loop = outputs(ref(problem))
    assert len(twin) == len(loop) == 1 + problem.options.return_lse
    for got, expected in zip(twin, loop):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@given(everything)
def test_unread_slots_never_influence_the_output(problem):
    """Freed blocks before a window, tails, spares: all NaN, and the output (and lse) is finite."""
    assert all(np.isfinite(x).all() for x in outputs(ref(problem)))


@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 4, 16]))
def test_window_of_zero_reads_the_last_token_alone(seed, block_size):
    p = DecodeProblem.random(seed, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=8, block_size=block_size,
                             max_context_len=50, window_left=0)
    for s in range(2):
        t = int(p.context_lens[s]) - 1
        v = p.value_cache[p.block_tables[s, t // block_size], t % block_size, 0].astype(np.float64)
        np.testing.assert_allclose(ref(p)[s], np.stack([v, v]), rtol=1e-12)


@given(st.integers(0, 2**31 - 1))
def test_window_longer_than_the_context_is_no_window(seed):
    p = DecodeProblem.random(seed, num_seqs=3, head_dim=8, block_size=4, max_context_len=40, window_left=40)
    np.testing.assert_array_equal(ref(p), ref(p, window_left=-1))


@given(st.integers(0, 2**31 - 1))
def test_window_equals_attention_over_the_last_tokens(seed):
    """A window of W is plain attention over tokens L-1-W .. L-1 (dense_decode on exactly those)."""
    p = DecodeProblem.random(seed, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=8, block_size=4,
                             context_lens=[37], window_left=9)
    tokens = np.arange(37 - 1 - 9, 37)
    rows = p.block_tables[0, tokens // 4], tokens % 4
    dense = reference.dense_decode(p.query[0], p.key_cache[rows], p.value_cache[rows])
    np.testing.assert_allclose(ref(p)[0], dense, rtol=1e-12)


def test_freed_blocks_before_the_window_are_minus_one_and_poisoned():
    p = DecodeProblem.random(3, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=8, block_size=4,
                             context_lens=[40], window_left=9)
    first_read = 40 - 1 - 9                         # token 30, in block 7
    assert (p.block_tables[0, :7] == -1).all() and (p.block_tables[0, 7:] >= 0).all()
    assert np.isnan(p.key_cache[p.block_tables[0, 7], : first_read % 4]).all()


def test_soft_cap_bounds_the_logits_and_is_applied_after_the_scale():
    p = DecodeProblem.random(4, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=8, block_size=4,
                             context_lens=[2], extreme_logits=True, logits_soft_cap=2.0)
    k = p.key_cache[p.block_tables[0, 0], :2, 0].astype(np.float64)
    logits = 2.0 * np.tanh(p.softmax_scale * (k @ p.query[0, 0].astype(np.float64)) / 2.0)
    w = np.exp(logits - logits.max())
    w /= w.sum()
    v = p.value_cache[p.block_tables[0, 0], :2, 0].astype(np.float64)
    np.testing.assert_allclose(ref(p)[0, 0], w @ v, rtol=1e-12)


def test_alibi_adds_slope_times_distance_to_the_last_token():
    """With identical keys, ALiBi alone shapes the weights: w_t ~ exp(slope * (t - (L-1)))."""
    p = DecodeProblem.random(5, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=8, block_size=4,
                             context_lens=[6], alibi_slopes=[0.5, -0.25])
    rows = p.block_tables[0, np.arange(6) // 4], np.arange(6) % 4
    p.key_cache[rows] = p.key_cache[rows][0]
    v = p.value_cache[rows][:, 0].astype(np.float64)
    for h, slope in enumerate([0.5, -0.25]):
        w = np.exp(slope * (np.arange(6) - 5.0))
        np.testing.assert_allclose(ref(p)[0, h], (w / w.sum()) @ v, rtol=1e-12)


def test_paper_slopes_are_the_geometric_sequence():
    np.testing.assert_array_equal(alibi_paper_slopes(4), np.float32([2**-2, 2**-4, 2**-6, 2**-8]))
    assert alibi_paper_slopes(12).shape == (12,) and alibi_paper_slopes(12)[0] == np.float32(2**-1)


@pytest.mark.parametrize("kv_dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_scales_multiply_the_dequantized_cache(kv_dtype):
    p = DecodeProblem.random(6, num_seqs=2, head_dim=16, block_size=4, max_context_len=30, kv_dtype=kv_dtype,
                             k_scale=0.01, v_scale=0.02)
    scaled_k = (p.key_cache.astype(np.float64) * 0.01)
    scaled_v = (p.value_cache.astype(np.float64) * 0.02)
    plain = reference.paged_attention(p.query, scaled_k, scaled_v, p.block_tables, p.context_lens)
    np.testing.assert_allclose(ref(p), plain, rtol=1e-12, atol=1e-15)


def test_fp8_caches_span_the_format_with_subnormals():
    for kv_dtype, smallest_normal in (("float8_e4m3fn", 2.0**-6), ("float8_e5m2", 2.0**-14)):
        p = DecodeProblem.random(7, num_seqs=2, head_dim=64, block_size=16, max_context_len=200, kv_dtype=kv_dtype)
        values = np.abs(p.key_cache.astype(np.float64))
        values = values[np.isfinite(values)]
        assert ((values > 0) & (values < smallest_normal)).any(), "no subnormals drawn"
        assert values.max() >= float(ml_dtypes.finfo(kv_dtype).max) / 2


@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 4, 16]))
def test_the_last_query_token_of_a_sequence_is_its_decode(seed, block_size):
    p = DecodeProblem.random(seed, num_seqs=3, head_dim=8, block_size=block_size, max_context_len=40, query_lens=5,
                             window_left=7, alibi_slopes="random", logits_soft_cap=3.0)
    last_rows = np.cumsum(p.query_lens) - 1
    decode = reference.paged_attention(p.query[last_rows], p.key_cache, p.value_cache, p.block_tables, p.context_lens,
                                       **p.options.kwargs())
    np.testing.assert_allclose(ref(p)[last_rows], decode, rtol=1e-12)


def test_query_token_j_sees_tokens_up_to_its_position():
    """Row j of a sequence with q tokens is decode over the first L - q + j + 1 tokens."""
    p = DecodeProblem.random(8, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=8, block_size=4,
                             context_lens=[11], query_lens=[4])
    for j in range(4):
        shorter = np.int32([11 - 4 + j + 1])
        decode = reference.paged_attention(p.query[j:j + 1], p.key_cache, p.value_cache, p.block_tables, shorter)
        np.testing.assert_allclose(ref(p)[j], decode[0], rtol=1e-12)


def test_write_cache_to_fp8_saturates_rounds_to_even_and_keeps_nan():
    cache = np.zeros((1, 4, 1, 4), ml_dtypes.float8_e4m3fn)
    other = np.zeros_like(cache)
    x = np.float32([[[1000.0, -1000.0, np.nan, 1.0625]], [[17.0, 0.0, -0.0, 2.0**-9]]])  # 1.0625: tie -> 1.0
    reference.write_cache(cache, other, x, x, np.array([0, 1]), k_scale=1.0, v_scale=2.0)
    got = cache[0, :2, 0].astype(np.float32)
    assert got[0, 0] == 448 and got[0, 1] == -448 and math.isnan(got[0, 2]) and got[0, 3] == 1.0
    assert got[1, 0] == 16.0 and got[1, 3] == 2.0**-9          # 17 ties to even (16); smallest subnormal kept
    assert other[0, 0, 0, 0].astype(np.float32) == 448 and other[0, 1, 0, 0].astype(np.float32) == 8.0  # 17/2 -> 8
