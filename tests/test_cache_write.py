"""Every registered cache-write kernel is exact against reference.write_cache."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import reference
from sandbox import registry
from sandbox.cache_write import write_cache


@st.composite
def write_problems(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    block_size = draw(st.sampled_from([1, 2, 16, 256]))
    num_blocks = draw(st.integers(1, 4))
    num_kv_heads = draw(st.integers(1, 3))
    head_dim = draw(st.sampled_from([8, 64, 128]))
    dtype = draw(st.sampled_from(["float32", "float16"]))
    num_slots = num_blocks * block_size
    num_tokens = draw(st.integers(1, min(num_slots, 40)))
    slots = rng.permutation(num_slots)[:num_tokens].astype(np.int64)
    slots[rng.random(num_tokens) < 0.25] = -1                     # padding tokens are skipped
    cache_shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = np.full(cache_shape, np.nan, dtype=dtype)
    value_cache = np.full(cache_shape, np.nan, dtype=dtype)
    key = rng.standard_normal((num_tokens, num_kv_heads, head_dim)).astype(dtype)
    value = rng.standard_normal((num_tokens, num_kv_heads, head_dim)).astype(dtype)
    return key_cache, value_cache, key, value, slots


@pytest.mark.parametrize("name", registry.cache_writers())
@given(problem=write_problems())
def test_cache_write_is_exact(name, problem):
    key_cache, value_cache, key, value, slots = problem
    expected_k, expected_v = key_cache.copy(), value_cache.copy()
    reference.write_cache(expected_k, expected_v, key, value, slots)
    got_k, got_v = write_cache(name, key_cache, value_cache, key, value, slots)
    np.testing.assert_array_equal(got_k, expected_k)  # NaN == NaN here: untouched slots stay NaN
    np.testing.assert_array_equal(got_v, expected_v)


@pytest.mark.parametrize("name", registry.cache_writers())
def test_cache_write_rejects_out_of_range_slots(name):
    cache = np.zeros((2, 4, 1, 8), np.float32)
    kv = np.ones((2, 1, 8), np.float32)
    with pytest.raises(ValueError, match=r"slot_mapping\[1\] = 8 is out of range for 8 slots"):
        write_cache(name, cache, cache.copy(), kv, kv, np.array([0, 8]))
    with pytest.raises(ValueError, match="writes slot 3 more than once"):
        write_cache(name, cache, cache.copy(), kv, kv, np.array([3, 3]))
