"""Cache writes that choose their own scales, exact against reference.write_cache: fp8 with a scale per
(token, KV head) (scale = amax / max finite, stored beside the row) and NVFP4 (an e4m3 block scale per 16
values, e2m1 codes two per byte). Every writer whose module declares the format in WRITES runs here.
"""
import ml_dtypes
import numpy as np
import pytest

import reference
from reference.formats import quantize_nvfp4
from sandbox.problem import dtypes
from sandbox.variant import Unsupported, registry
from sandbox.variant.cache_write import write_cache

from test_cache_write import assert_same_cache, nasty_values


def writers(fmt):
    return [n for n in registry.cache_writers() if fmt in getattr(registry.get_cache_writer(n).module, "WRITES", ())]


def check_scaled_write(name, key_cache, value_cache, key, value, slots, k_scale=1.0, v_scale=1.0, **beside):
    expected = [key_cache.copy(), value_cache.copy()] + [a.copy() for a in beside.values()]
    reference.write_cache(*expected[:2], key, value, slots, k_scale, v_scale, **dict(zip(beside, expected[2:])))
    got = write_cache(name, key_cache, value_cache, key, value, slots, k_scale, v_scale, **beside)
    assert len(got) == 4
    for what, g, e in zip(["key_cache", "value_cache", *beside], got, expected):
        assert_same_cache(g, e, f"{name} writing {key.dtype.name} into {dtypes.kv_format(key_cache.dtype)}: {what}")


@pytest.mark.parametrize("name", writers("kv_scales"))
@pytest.mark.parametrize("dtype, cache_dtype", [("float32", "float8_e4m3fn"), ("bfloat16", "float8_e5m2"),
                                                ("float16", "float8_e4m3fn")])
def test_per_token_scales_with_one_huge_token(name, dtype, cache_dtype):
    """Each (token, KV head) gets amax / max finite: one row 1e30 (1e4 for float16) beside rows at 1e-3, a row of
    zeros (scale 1.0), fp8's traps (NaN, inf, past the max: not part of the amax) and padding slots."""
    rng = np.random.default_rng(7)
    shape = (3, 3, 2, 16)
    key_cache = np.full(shape, np.nan, np.float32).astype(cache_dtype)
    key = nasty_values(rng, (6, 2, 16), dtype, cache_dtype)
    value = nasty_values(rng, (6, 2, 16), dtype, cache_dtype)
    key[0, 1] = (np.linspace(-1, 1, 16) * (1e4 if dtype == "float16" else 1e30)).astype(dtype)
    key[1, 0] = (rng.standard_normal(16) * 1e-3).astype(dtype)
    value[2, 1] = 0
    scales = np.full(shape[:3], np.nan, np.float32)
    check_scaled_write(name, key_cache, key_cache.copy(), key, value, np.array([7, -1, 0, 8, 4, 2]),
                       k_scales=scales, v_scales=scales.copy())


@pytest.mark.parametrize("name", writers("nvfp4"))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_nvfp4_write_with_subnormal_block_scales(name, dtype):
    """Groups at magnitudes from 1e-5 (the block scale amax / 6 an e4m3 subnormal, or 0) to past 6 * 448 (saturating),
    every e2m1 tie (0.25, 0.75, ... 5 times the block scale), a group of zeros, NaN, inf, -0, and the per-tensor
    scale dividing first."""
    rng = np.random.default_rng(11 + len(dtype))
    num_tokens, heads, head_dim = 5, 2, 32
    x = rng.standard_normal((num_tokens, heads, head_dim)).astype(np.float32)
    x *= np.float32(10.0) ** rng.integers(-5, 4, size=(num_tokens, heads, 2, 1)).repeat(16, -1).reshape(x.shape)
    x[0, 0, :16] = [0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6, -0.25, -0.75, -5, 7, -0.0, 0.5, 1]  # ties at scale 1
    x[0, 0, 16:] = 0.004 * np.arange(16)          # amax / 6 = 0.01: an e4m3 subnormal block scale
    x[1, 1, :16] = 0
    x[2, 0, :4] = [np.nan, -np.nan, np.inf, -np.inf]
    x[3, 1, 16:] = 5e4                            # amax / 6 past 448: the block scale saturates
    key = x.astype(dtype)
    value = (-x[::-1]).astype(dtype)
    key_cache = np.full((3, 2, heads, head_dim // 2), 0xAB, np.uint8)
    block_scales = np.full((3, 2, heads, head_dim // 16), 0x7F, np.uint8).view(ml_dtypes.float8_e4m3fn)
    check_scaled_write(name, key_cache, key_cache.copy(), key, value, np.array([0, 5, -1, 3, 2]), 1.0, 0.5,
                       k_block_scales=block_scales, v_block_scales=block_scales.copy())
    _, scales = quantize_nvfp4(key[0, 0, 16:].astype(np.float32), 1.0)
    assert 0 < float(scales[0]) < 2.0 ** -6  # the case is what it says


def test_a_writer_without_the_format_refuses_it():
    undeclared = [n for n in registry.cache_writers() if n not in writers("kv_scales")]
    cache = np.zeros((2, 4, 1, 16), "float8_e4m3fn")
    kv = np.ones((2, 1, 16), np.float32)
    scales = np.ones((2, 4, 1), np.float32)
    for name in undeclared:
        with pytest.raises(Unsupported, match=f"{name} does not write kv_scales caches"):
            write_cache(name, cache, cache.copy(), kv, kv, np.array([0, 1]), k_scales=scales, v_scales=scales.copy())
