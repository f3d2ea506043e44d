"""Every registered cache-write kernel is exact against reference.write_cache, for every (key/value
dtype, cache dtype) pair: a cache of the inputs' dtype stores them bit for bit, an fp8 cache stores
fp8(clip(x / scale, +-max_finite)) rounded to nearest even (saturating, NaN kept NaN).

Nothing here names a writer: a new one is picked up from the registry.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import reference
from sandbox.problem import dtypes
from sandbox.variant import registry
from sandbox.variant.cache_write import write_cache

# (key/value dtype, cache dtype): the inputs' own dtype, or fp8 with any query dtype.
PAIRS = [(d, d) for d in dtypes.QUERY_DTYPES] + [(d, f) for d in dtypes.QUERY_DTYPES for f in dtypes.FP8_DTYPES]
PAIR_IDS = [f"{dtypes.short(d)}->{dtypes.short(c)}" for d, c in PAIRS]


def assert_same_cache(got, expected, what):
    """Same dtype, NaN exactly where expected has NaN, every other element bit-identical (-0 != +0)."""
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    got_nan = np.isnan(got.astype(np.float32))
    expected_nan = np.isnan(expected.astype(np.float32))
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32}[got.dtype.itemsize]
    differ = (got.view(bits) != expected.view(bits)) & ~(got_nan & expected_nan)
    if differ.any():
        i = tuple(int(x) for x in np.argwhere(differ)[0])
        raise AssertionError(f"{what}: {int(differ.sum())} elements differ; first at {i}: got {got[i]!r} "
                             f"(bits {int(got.view(bits)[i]):#x}), expected {expected[i]!r} "
                             f"(bits {int(expected.view(bits)[i]):#x})")


def nasty_values(rng, shape, dtype, cache_dtype):
    """Normal values at several magnitudes; for an fp8 cache also values past its max, inf, NaN and
    values far below its smallest subnormal."""
    x = rng.standard_normal(shape).astype(np.float32)
    x *= np.float32(10.0) ** rng.integers(-3, 3, size=shape).astype(np.float32)
    if dtypes.is_fp8(cache_dtype):
        flat = x.reshape(-1)
        limit = dtypes.FP8_MAX_FINITE[cache_dtype]
        picks = rng.integers(0, flat.size, size=max(1, flat.size // 8))
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 2.5 * limit, -1.01 * limit, 1e-9, -1e-12, 0.0, -0.0],
                            dtype=np.float32)
        flat[picks] = specials[rng.integers(0, specials.size, size=picks.size)]
    with np.errstate(over="ignore"):  # float16 inputs: what exceeds 65504 is inf, one more trap
        return x.astype(dtype)


@st.composite
def write_problems(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    block_size = draw(st.sampled_from([1, 2, 16, 256]))
    num_blocks = draw(st.integers(1, 4))
    num_kv_heads = draw(st.integers(1, 3))
    head_dim = draw(st.sampled_from([8, 64, 128]))
    dtype, cache_dtype = draw(st.sampled_from(PAIRS))
    fp8 = dtypes.is_fp8(cache_dtype)
    k_scale = draw(st.sampled_from([1.0, 0.37, 1 / 448, 3.0])) if fp8 else 1.0
    v_scale = draw(st.sampled_from([1.0, 0.05, 1 / 57344])) if fp8 else 1.0
    num_slots = num_blocks * block_size
    num_tokens = draw(st.integers(1, min(num_slots, 40)))
    slots = rng.permutation(num_slots)[:num_tokens].astype(np.int64)
    slots[rng.random(num_tokens) < 0.25] = -1                     # padding tokens are skipped
    cache_shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = np.full(cache_shape, np.nan, dtype=np.float32).astype(cache_dtype)
    value_cache = key_cache.copy()
    key = nasty_values(rng, (num_tokens, num_kv_heads, head_dim), dtype, cache_dtype)
    value = nasty_values(rng, (num_tokens, num_kv_heads, head_dim), dtype, cache_dtype)
    return key_cache, value_cache, key, value, slots, k_scale, v_scale


def check_writer(name, key_cache, value_cache, key, value, slots, k_scale=1.0, v_scale=1.0):
    expected_k, expected_v = key_cache.copy(), value_cache.copy()
    reference.write_cache(expected_k, expected_v, key, value, slots, k_scale, v_scale)
    got_k, got_v = write_cache(name, key_cache, value_cache, key, value, slots, k_scale, v_scale)
    what = f"{name} writing {key.dtype.name} into {key_cache.dtype.name} (k_scale={k_scale}, v_scale={v_scale})"
    assert_same_cache(got_k, expected_k, what + ": key_cache")  # untouched slots stay NaN
    assert_same_cache(got_v, expected_v, what + ": value_cache")


@pytest.mark.parametrize("name", registry.cache_writers())
@given(problem=write_problems())
def test_cache_write_is_exact(name, problem):
    check_writer(name, *problem)


@pytest.mark.parametrize("name", registry.cache_writers())
@pytest.mark.parametrize("dtype, cache_dtype", PAIRS, ids=PAIR_IDS)
def test_cache_write_every_dtype_pair(name, dtype, cache_dtype):
    """Each pair once, with fp8's traps in the inputs and a scale that is not a power of two."""
    rng = np.random.default_rng(len(dtype) * 7 + len(cache_dtype))
    shape = (3, 4, 2, 16)
    key_cache = np.full(shape, np.nan, np.float32).astype(cache_dtype)
    key = nasty_values(rng, (5, 2, 16), dtype, cache_dtype)
    value = nasty_values(rng, (5, 2, 16), dtype, cache_dtype)
    scales = (0.37, 1 / 448) if dtypes.is_fp8(cache_dtype) else (1.0, 1.0)
    check_writer(name, key_cache, key_cache.copy(), key, value, np.array([7, -1, 0, 11, 4]), *scales)


@pytest.mark.parametrize("name", registry.cache_writers())
def test_cache_write_rejects_out_of_range_slots(name):
    cache = np.zeros((2, 4, 1, 8), np.float32)
    kv = np.ones((2, 1, 8), np.float32)
    with pytest.raises(ValueError, match=r"slot_mapping\[1\] = 8 is out of range for 8 slots"):
        write_cache(name, cache, cache.copy(), kv, kv, np.array([0, 8]))
    with pytest.raises(ValueError, match="writes slot 3 more than once"):
        write_cache(name, cache, cache.copy(), kv, kv, np.array([3, 3]))


@pytest.mark.parametrize("name", registry.cache_writers())
def test_cache_write_rejects_mismatched_dtypes_and_bad_scales(name):
    cache = np.zeros((2, 4, 1, 8), np.float16)
    kv = np.ones((2, 1, 8), np.float32)
    with pytest.raises(ValueError, match="key.dtype must equal key_cache.dtype"):
        write_cache(name, cache, cache.copy(), kv, kv, np.array([0, 1]))
    fp8 = cache.astype("float8_e4m3fn")
    with pytest.raises(ValueError, match="k_scale must be a positive finite number"):
        write_cache(name, fp8, fp8.copy(), kv, kv, np.array([0, 1]), k_scale=0.0)
