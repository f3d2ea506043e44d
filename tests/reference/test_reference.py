"""The reference holds itself to its own definition: dense equivalence, permutation, NaN, GQA."""
import numpy as np
from hypothesis import given, strategies as st

import reference
from sandbox.problem import DecodeProblem
from sandbox.problem.strategies import decode_problems

small_problems = decode_problems(head_dims=(8, 16), max_tokens=300, max_num_seqs=3)


@given(small_problems)
def test_paged_equals_dense_on_gathered_kv(problem):
    out = reference.paged_decode(*problem.arrays())
    for s in range(problem.num_seqs):
        n = int(problem.context_lens[s])
        keys = reference.gather_tokens(problem.key_cache, problem.block_tables[s], n)
        values = reference.gather_tokens(problem.value_cache, problem.block_tables[s], n)
        np.testing.assert_allclose(out[s], reference.dense_decode(problem.query[s], keys, values), rtol=1e-12, atol=1e-12)


@given(small_problems, st.integers(0, 2**32 - 1))
def test_permuting_physical_blocks_with_the_table_changes_nothing(problem, seed):
    perm = np.random.default_rng(seed).permutation(problem.num_blocks)  # new position of old block b: perm[b]
    key_cache = np.empty_like(problem.key_cache)
    value_cache = np.empty_like(problem.value_cache)
    key_cache[perm] = problem.key_cache
    value_cache[perm] = problem.value_cache
    tables = np.where(problem.block_tables >= 0, perm[np.maximum(problem.block_tables, 0)], -1).astype(np.int32)
    before = reference.paged_decode(*problem.arrays())
    after = reference.paged_decode(problem.query, key_cache, value_cache, tables, problem.context_lens)
    np.testing.assert_array_equal(before, after)


@given(small_problems)
def test_unused_slots_never_influence_the_output(problem):
    assert not np.isnan(reference.paged_decode(*problem.arrays())).any()
    zeroed = [np.nan_to_num(c, nan=0.0) for c in (problem.key_cache, problem.value_cache)]
    np.testing.assert_array_equal(reference.paged_decode(*problem.arrays()),
                                  reference.paged_decode(problem.query, *zeroed, problem.block_tables, problem.context_lens))


@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.sampled_from([1, 3, 8]))
def test_identical_keys_give_the_mean_of_the_values(seed, context_len, block_size):
    p = DecodeProblem.random(seed, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=8, block_size=block_size,
                             context_lens=[context_len], extreme_logits=True)
    tokens = np.arange(context_len)
    blocks, offsets = p.block_tables[0, tokens // block_size], tokens % block_size
    p.key_cache[blocks, offsets] = p.key_cache[blocks[0], offsets[0]]
    out = reference.paged_decode(*p.arrays())
    mean = p.value_cache[blocks, offsets].astype(np.float64).mean(axis=0)  # [kv_heads, head_dim]
    np.testing.assert_allclose(out[0], np.repeat(mean, 2, axis=0), rtol=1e-10, atol=1e-12)


@given(small_problems)
def test_gqa_equals_repeating_each_kv_head_over_its_group(problem):
    group = problem.num_heads // problem.num_kv_heads
    expanded = [np.repeat(c, group, axis=2) for c in (problem.key_cache, problem.value_cache)]
    np.testing.assert_allclose(reference.paged_decode(*problem.arrays()),
                               reference.paged_decode(problem.query, *expanded, problem.block_tables, problem.context_lens),
                               rtol=1e-12, atol=1e-12)


@given(small_problems)
def test_gathered_twin_equals_the_token_loop(problem):
    np.testing.assert_allclose(reference.gathered_attention(*problem.arrays(), **problem.kwargs()), reference.paged_decode(*problem.arrays()), rtol=1e-12, atol=1e-12)


def test_write_cache_skips_negative_slots_and_writes_the_rest():
    rng = np.random.default_rng(7)
    key_cache = np.zeros((3, 4, 2, 8), np.float32)
    value_cache = np.zeros_like(key_cache)
    key, value = rng.standard_normal((2, 5, 2, 8)).astype(np.float32)
    slots = np.array([0, -1, 5, 11, -7])
    reference.write_cache(key_cache, value_cache, key, value, slots)
    np.testing.assert_array_equal(key_cache[0, 0], key[0])
    np.testing.assert_array_equal(key_cache[1, 1], key[2])
    np.testing.assert_array_equal(value_cache[2, 3], value[3])
    assert np.count_nonzero(key_cache.reshape(12, -1).any(axis=1)) == 3
