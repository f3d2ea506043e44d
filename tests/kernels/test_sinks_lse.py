"""Learned sinks, the log-sum-exp output and merge_states: each pinned to its definition (docs/options.md)."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import reference
import sandbox
from sandbox.checking.check import check_problem
from sandbox.problem import DecodeProblem
from sandbox.variant import registry


def _problem(seed, **kw):
    shape = dict(num_seqs=3, num_heads=4, num_kv_heads=2, head_dim=8, block_size=4, max_context_len=30)
    return DecodeProblem.random(seed, **dict(shape, **kw))


def test_lse_is_the_natural_log_of_the_tokens_exponentials_and_the_sink_only_divides():
    p = _problem(1, sinks=[0.5, -1.0, 3.0, 9.0], return_lse=True, share_prefix=False)
    out, lse = reference.paged_attention(*p.arrays(), **p.kwargs())
    plain, plain_lse = reference.paged_attention(*p.arrays(), **dict(p.kwargs(), sinks=None))
    np.testing.assert_array_equal(lse, plain_lse)  # the sink is not part of the lse
    s, h = 1, 2  # by hand: logits of sequence 1, head 2 over its tokens
    n, kv = int(p.context_lens[s]), h // 2
    keys = reference.gather_tokens(p.key_cache, p.block_tables[s], n)[:, kv].astype(np.float64)
    logits = keys @ p.query[s, h].astype(np.float64) / math.sqrt(8)
    assert lse[s, h] == pytest.approx(math.log(np.exp(logits).sum()), rel=1e-12)
    factor = 1.0 / (1.0 + np.exp(p.options.sinks[None, :] - plain_lse))  # S / (S + e^sink), S = e^lse
    np.testing.assert_allclose(out, plain * factor[..., None], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(reference.sink_factor(plain_lse, p.options.sinks), factor, rtol=1e-15)


def test_a_sink_far_below_every_logit_changes_nothing_and_one_far_above_takes_everything():
    p = _problem(2, share_prefix=False)
    plain = reference.paged_attention(*p.arrays())
    low = reference.paged_attention(*p.arrays(), sinks=np.full(4, -1e4, np.float32))
    high = reference.paged_attention(*p.arrays(), sinks=np.full(4, 1e3, np.float32))
    np.testing.assert_array_equal(low, plain)
    assert np.abs(high).max() == 0.0


def _split_merge(p, cut):
    """Every sequence's tokens cut at `cut` (clamped to its length), each part computed alone with its lse
    (sequence_attention; plain problems: the prefix part's query sees all of it), then merged."""
    outs, lses = [], []
    for s in range(p.num_seqs):
        n = int(p.context_lens[s])
        c = min(cut, n)
        q = p.query[s:s + 1]
        keys = reference.gather_tokens(p.key_cache, p.block_tables[s], n)
        values = reference.gather_tokens(p.value_cache, p.block_tables[s], n)
        a = reference.sequence_attention(q, keys[:c], values[:c], None, 0, return_lse=True)
        b = reference.sequence_attention(q, keys[c:], values[c:], None, c, return_lse=True)
        out, lse = sandbox.merge_states(*a, *b)
        outs.append(out)
        lses.append(lse)
    return np.concatenate(outs), np.concatenate(lses)


@given(st.integers(0, 2**31 - 1), st.integers(0, 40))
def test_merging_two_parts_by_lse_equals_the_whole(seed, cut):
    p = _problem(seed, return_lse=True)
    out, lse = _split_merge(p, cut)
    expected_out, expected_lse = reference.paged_attention(*p.arrays(), **p.kwargs())
    np.testing.assert_allclose(out, expected_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-12)


def test_merge_states_handles_empty_sets():
    out = np.arange(6.0).reshape(2, 3)
    lse = np.array([0.5, -2.0])
    empty_out, empty_lse = np.full((2, 3), np.nan), np.full(2, -np.inf)  # an empty part's out is never read
    for merged in (sandbox.merge_states(out, lse, empty_out, empty_lse),
                   sandbox.merge_states(empty_out, empty_lse, out, lse)):
        np.testing.assert_array_equal(merged[0], out)
        np.testing.assert_array_equal(merged[1], lse)
    both = sandbox.merge_states(empty_out, empty_lse, empty_out, empty_lse)
    np.testing.assert_array_equal(both[0], np.zeros((2, 3)))
    assert np.isneginf(both[1]).all() and not np.isnan(both[0]).any()
    same = sandbox.merge_states(out, lse, out, lse)
    np.testing.assert_allclose(same[0], out)
    np.testing.assert_allclose(same[1], lse + math.log(2))
    assert np.isnan(sandbox.merge_states(out, np.array([np.nan, 0.0]), out, lse)[0][0]).all()


def test_merge_states_names_mismatched_shapes():
    with pytest.raises(ValueError, match=r"out_b.shape \(2, 4\) must equal out_a.shape \(2, 3\)"):
        sandbox.merge_states(np.zeros((2, 3)), np.zeros(2), np.zeros((2, 4)), np.zeros(2))
    with pytest.raises(ValueError, match=r"lse_b.shape \(3,\) must be out_a.shape without head_dim, \(2,\)"):
        sandbox.merge_states(np.zeros((2, 3)), np.zeros(2), np.zeros((2, 3)), np.zeros(3))


def test_an_empty_token_range_gives_zero_and_minus_infinity_never_nan():
    q = np.ones((2, 4, 8), np.float32)
    none = np.zeros((0, 2, 8), np.float32)
    for sinks in (None, np.zeros(4, np.float32)):
        out, lse = reference.sequence_attention(q, none, none, None, 5, sinks=sinks, return_lse=True)
        np.testing.assert_array_equal(out, 0.0)
        assert np.isneginf(lse).all()


def test_run_returns_out_and_lse_and_check_compares_both(monkeypatch):
    p = _problem(4, sinks="random", return_lse=True)
    out, lse = sandbox.run("numpy.gather", *p.arrays(), **p.kwargs(), backend="cpu")
    assert out.dtype == p.dtype and lse.dtype == np.float32 and lse.shape == (p.query.shape[0], p.num_heads)
    assert check_problem("numpy.gather", p).ok
    # an lse in base 2 (FlashInfer's convention, not the contract's) is caught
    module = registry.get("numpy.gather").module
    real = module.paged_attention_gather
    monkeypatch.setattr(module, "paged_attention_gather",
                        lambda problem: (lambda o, l: (o, l / np.float32(math.log(2))))(*real(problem)))
    result = check_problem("numpy.gather", p)
    assert not result.ok and "lse:" in result.comparison.report


def test_sinks_are_validated_before_any_launch():
    p = _problem(5)
    with pytest.raises(ValueError, match=r"sinks must have shape \(4,\) = \[num_heads\], got \(3,\)"):
        sandbox.run("numpy.gather", *p.arrays(), sinks=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"sinks\[1\] = nan is not finite"):
        sandbox.run("numpy.gather", *p.arrays(), sinks=np.array([0, np.nan, 0, 0], np.float32))
    with pytest.raises(ValueError, match="return_lse must be True or False, got 'yes'"):
        sandbox.run("numpy.gather", *p.arrays(), return_lse="yes")
