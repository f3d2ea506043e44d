"""The CUDA C family on the fixed edge cases of learned sinks, the log-sum-exp output, block sizes that are
not powers of two, head dim 512, per-token fp8 scales and NVFP4 caches (the shared suite draws these
options at random; these are the cases a random draw rarely reaches).

Each case is one small problem on the CPU executor, checked against the float64 reference (out and, with
return_lse, lse). Every case with an option compiles one instantiation (g++): the list is kept short.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kernels.cupy_raw import common, multi
from sandbox.checking.check import check_problem
from sandbox.problem import DecodeProblem
from sandbox.variant import registry


def assert_checks(name: str, problem: DecodeProblem) -> None:
    result = check_problem(name, problem, "cpu")
    assert result.error is None, f"{name} raised on {result.problem}: {result.error}"
    assert result.comparison.ok, f"{name} is wrong on {result.problem}:\n{result.comparison.report}"


def test_every_cuda_c_attention_variant_declares_the_new_options():
    for name in ("cupy.v1", "cupy.v2", "cupy.gqa", "cupy.rows", "cupy.dense", "cupy.multi", "cupy.cascade"):
        limits = registry.get(name).limits
        assert {"sinks", "lse", "kv_scales"} <= set(limits.options), name
        assert {64, 80, 96, 112, 128, 192, 256, 512} <= set(limits.head_dims), name
    for name in ("cupy.rows", "cupy.dense", "cupy.multi", "cupy.cascade"):
        assert registry.get(name).limits.block_sizes is None, name
    assert "nvfp4" in registry.get("cupy.multi").limits.kv_dtypes


@pytest.mark.parametrize("name", ["cupy.v2", "cupy.multi"])
def test_dominant_sink_is_added_once_across_partitions(name):
    """Context 1300 spans three 512-token partitions: a sink added per partition would weigh three times."""
    problem = DecodeProblem.random(71, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                                   context_lens=[1300, 40], dtype="float32", sinks=[3.0, 12.0, -1.0, 0.5],
                                   return_lse=True)
    assert_checks(name, problem)


def test_window_of_one_token_with_a_sink():
    """window_left 0: each query reads its own token only, beside the sink."""
    problem = DecodeProblem.random(72, num_seqs=3, num_heads=4, num_kv_heads=2, head_dim=64, block_size=8,
                                   context_lens=[1, 17, 600], dtype="float16", window_left=0, sinks="random",
                                   return_lse=True)
    assert_checks("cupy.rows", problem)


def test_lse_on_extreme_logits():
    problem = DecodeProblem.random(73, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=64, block_size=16,
                                   max_context_len=300, dtype="float32", extreme_logits=True, return_lse=True)
    assert_checks("cupy.v1", problem)


@pytest.mark.parametrize("block_size", [1, 3, 61, 528])
@pytest.mark.parametrize("name", ["cupy.rows", "cupy.multi"])
def test_block_sizes_that_are_not_powers_of_two(name, block_size):
    # head dim 80 in float16: the instantiations tests/kernels/test_cupy_family.py compiles for rows (one g++ module)
    problem = DecodeProblem.random(74 + block_size, num_seqs=3, num_heads=8, num_kv_heads=2, head_dim=80,
                                   block_size=block_size, context_lens=[1, 2 * block_size + 3, 700], dtype="float16")
    assert_checks(name, problem)


@pytest.mark.parametrize("name,options", [("cupy.v1", dict(return_lse=True)), ("cupy.rows", dict(window_left=300)),
                                          ("cupy.multi", {})])
def test_head_dim_512(name, options):
    problem = DecodeProblem.random(75, num_seqs=2, num_heads=8, num_kv_heads=1, head_dim=512, block_size=16,
                                   context_lens=[700, 33], dtype="float16", **options)
    assert_checks(name, problem)


@pytest.mark.parametrize("name", ["cupy.rows", "cupy.multi"])
def test_per_token_scale_that_dominates(name):
    """One token's K scale 1000 times its neighbours': its logit dominates the softmax."""
    problem = DecodeProblem.random(76, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                                   context_lens=[90, 20], dtype="bfloat16", kv_dtype="float8_e4m3fn",
                                   per_token_scales=True)
    k_scales = problem.options.k_scales.copy()
    k_scales[problem.block_tables[0, 2], 5, 1] *= 1000.0
    problem = dataclasses.replace(problem, options=dataclasses.replace(problem.options, k_scales=k_scales))
    assert_checks(name, problem)


def test_nvfp4_with_subnormal_block_scales():
    """Every block scale an e4m3 subnormal (codes 1..7: 2^-9 .. 7 * 2^-9)."""
    problem = DecodeProblem.random(77, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=128, block_size=61,
                                   context_lens=[200, 61], dtype="float16", kv_dtype="nvfp4", query_lens=[3, 1])
    rng = np.random.default_rng(0)
    subnormal = {}
    for name in ("k_block_scales", "v_block_scales"):
        scales = getattr(problem.options, name)
        codes = np.where(np.isnan(scales.astype(np.float32)), scales.view(np.uint8), rng.integers(1, 8, scales.shape))
        subnormal[name] = codes.astype(np.uint8).view(scales.dtype)
    problem = dataclasses.replace(problem, options=dataclasses.replace(problem.options, **subnormal))
    assert_checks("cupy.multi", problem)


def test_nvfp4_bytes_loaded_count_packed_codes_and_block_scales():
    problem = DecodeProblem.random(78, num_seqs=1, num_heads=2, num_kv_heads=2, head_dim=64, block_size=16,
                                   context_lens=[10], kv_dtype="nvfp4")
    assert multi.kv_token_bytes(problem) == 2 * 2 * (32 + 4)
    assert common.ctype(np.uint8) == "pa::Nvfp4"


def _write_inputs(dtype, num_tokens=7, num_kv_heads=3, head_dim=32, block_size=5, num_blocks=4, seed=0):
    rng = np.random.default_rng(seed)
    key = (rng.standard_normal((num_tokens, num_kv_heads, head_dim)) * 40).astype(dtype)
    value = (rng.standard_normal((num_tokens, num_kv_heads, head_dim)) * 0.01).astype(dtype)
    key[1, 2] = 0  # a head of zeros: scale 1
    key[2, 0, 3] = np.inf  # amax over finite values only
    value[3, 1, 0] = np.nan
    slots = rng.permutation(num_blocks * block_size)[:num_tokens]
    slots[4] = -1  # padding: skipped
    return key, value, slots, (num_blocks, block_size, num_kv_heads)


@pytest.mark.parametrize("cache_dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_cache_writer_chooses_per_token_scales_as_the_reference(cache_dtype):
    import reference
    from kernels.cupy_raw import write_cache
    from sandbox.problem import dtypes

    key, value, slots, slots_shape = _write_inputs("float16")
    cache_shape = slots_shape + (key.shape[2],)
    caches = [np.zeros(cache_shape, dtypes.dtype(cache_dtype)) for _ in range(2)]
    scales = [np.full(slots_shape, np.nan, np.float32) for _ in range(2)]
    want = [c.copy() for c in caches] + [s.copy() for s in scales]
    reference.write_cache(want[0], want[1], key, value, slots, k_scales=want[2], v_scales=want[3])
    prepared = write_cache.prepare_write(*caches, key, value, slots, "cpu", k_scales=scales[0], v_scales=scales[1])
    prepared.launch()
    for got, expected in zip(prepared.result(), want):  # as floats: an fp8 NaN's payload is not compared
        np.testing.assert_array_equal(got.astype(np.float32), expected.astype(np.float32))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cache_writer_quantizes_nvfp4_as_the_reference(dtype):
    import reference
    from kernels.cupy_raw import write_cache
    from sandbox.problem import dtypes

    key, value, slots, slots_shape = _write_inputs(dtypes.dtype(dtype), head_dim=48)
    caches = [np.zeros(slots_shape + (24,), np.uint8) for _ in range(2)]
    scales = [np.zeros(slots_shape + (3,), dtypes.dtype("float8_e4m3fn")) for _ in range(2)]
    want = [c.copy() for c in caches] + [s.copy() for s in scales]
    reference.write_cache(want[0], want[1], key, value, slots, 0.5, 2.0, k_block_scales=want[2], v_block_scales=want[3])
    prepared = write_cache.prepare_write(*caches, key, value, slots, "cpu", 0.5, 2.0, k_block_scales=scales[0],
                                         v_block_scales=scales[1])
    prepared.launch()
    for got, expected in zip(prepared.result(), want):
        np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))


def test_sweep_pages_an_nvfp4_shape_at_any_block_size():
    """`--shapes ...xbf16:nvfp4`: the sweep's tokens are quantized once (codes and block scales), paged per block
    size beside the cache, and held to the truth from the contiguous tokens."""
    from sandbox.checking.compare import compare
    from sandbox.sweep import shapes
    from sandbox.variant.runner import run_problem

    shape = shapes.parse_shape("2x100x4/2x64xbf16:nvfp4 window=40")
    assert shape.name == "2x100x4/2x64xbf16:nvfp4 window=40" and shape.kv_dtype == "nvfp4"
    assert shape.attention_options().k_scale == pytest.approx(1 / (6 * 448))
    tokens = shapes.make_tokens(shape, 0)
    expected = shapes.expected_output(tokens)
    for block_size in (16, 61):
        problem = shapes.paged_problem(tokens, block_size)
        assert problem.kv_format == "nvfp4" and problem.options.k_block_scales.shape[1] == block_size
        assert compare(run_problem("numpy.gather", problem, "cpu"), expected, problem.dtype)
    with pytest.raises(ValueError, match="head_dim a multiple of 16"):
        shapes.parse_shape("1x10x2/1x72xfp16:nvfp4")
