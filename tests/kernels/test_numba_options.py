"""The newer rows of the option table in every numba.* kernel, on fixed edge cases (tiny shapes: the simulator runs
each CUDA thread in Python): learned sinks (dominant, beside one token, on extreme logits; numba.split adding it
once however the context is partitioned, empty partitions included), the log-sum-exp output, block sizes that are
not powers of two, head dim 512, per-token fp8 scales with one huge scale, NVFP4 with subnormal block scales."""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import reference
from kernels.numba_cuda import options
from sandbox import run_problem
from sandbox.checking.compare import assert_close
from sandbox.problem import DecodeProblem
from sandbox.variant import registry

from declared import require, within

NUMBA = registry.variants("numba")
SHAPE = dict(num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32)


def _check(name, problem):
    """The variant's output (and lse) against reference.paged_attention with the problem's options."""
    expected = reference.paged_attention(*problem.arrays(), **problem.kwargs())
    got = run_problem(name, problem)
    if problem.options.return_lse:
        (got, lse), (expected, expected_lse) = got, expected
        assert lse.dtype == np.float32 and lse.shape == expected_lse.shape
        assert_close(lse, expected_lse, np.float32, f"{name} lse on {problem}")
    assert not np.isnan(got.astype(np.float32)).any(), f"{name} returned NaN on {problem}"
    assert_close(got, expected, problem.dtype, f"{name} on {problem}")


SINK_CASES = {
    "sink_dominant": dict(sinks=[12.0] * 4, block_size=8, context_lens=[1, 30], return_lse=True),
    "sink_beside_one_token_window": dict(sinks=[3.0, -3.0, 0.0, 40.0], window_left=0, block_size=4,
                                         context_lens=[9, 17], return_lse=True, dtype="float16"),
    "lse_and_sink_on_extreme_logits": dict(sinks="random", return_lse=True, extreme_logits=True, block_size=3,
                                           context_lens=[7, 25], dtype="bfloat16"),
    "lse_alone_with_fp8": dict(return_lse=True, kv_dtype="e5m2", block_size=16, context_lens=[16, 33]),
}


@pytest.mark.parametrize("name", NUMBA)
@pytest.mark.parametrize("case", list(SINK_CASES))
def test_sinks_and_lse_edge_cases(name, case):
    problem = DecodeProblem.random(60 + len(case), **dict(SHAPE, **SINK_CASES[case]))
    require(name, problem)
    _check(name, problem)


def test_split_adds_the_sink_once_whatever_the_partitions():
    """Partitions of 4, 12 and 64 tokens and the default: the same output and lse; the 1-token sequence leaves
    14 partitions empty (max -inf, sum 0), which the merge weighs 0 (no NaN)."""
    from kernels.numba_cuda import split

    problem = DecodeProblem.random(22, num_seqs=3, num_heads=2, num_kv_heads=1, head_dim=32, block_size=4,
                                   context_lens=[1, 60, 23], sinks=[2.0, -1.0], return_lse=True, extreme_logits=True)
    expected, expected_lse = reference.paged_attention(*problem.arrays(), **problem.kwargs())
    for size in (4, 12, 64, None):
        prepared = split.prepare(problem, registry.family("numba").resolve("auto"), partition_size=size)
        prepared.launch()
        out, lse = prepared.result(), prepared.lse()
        assert_close(out, expected, problem.dtype, f"partition_size={size}")
        assert_close(lse, expected_lse, np.float32, f"lse, partition_size={size}")
        if size == 4:
            assert prepared.num_partitions == 15
            part_max = prepared.partials[0].copy_to_host()
            assert np.isneginf(part_max[0, :, 1:]).all()


def test_sinks_and_lse_are_compiled_in_only_when_used():
    plain = DecodeProblem.random(1, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, max_context_len=8)
    both = DecodeProblem.random(1, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, max_context_len=8,
                                sinks="random", return_lse=True)
    scaled = DecodeProblem.random(1, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, max_context_len=8,
                                  kv_dtype="e4m3", per_token_scales=True)
    assert options.kernel_key(plain)[2] == 0
    assert options.kernel_key(both)[2] == options.OPT_SINKS | options.OPT_LSE
    assert options.kernel_key(scaled) == ("float32", "float8_e4m3fn", options.OPT_KV_SCALES)


@pytest.mark.parametrize("name", NUMBA)
def test_block_sizes_that_are_not_powers_of_two(name):
    """Block sizes 1, 3, 61 and 528 as runtime values, each with lengths 1, bs and bs + 1 (k*bs, k*bs + 1)."""
    problems = [DecodeProblem.random(70 + bs, num_seqs=3, num_heads=2, num_kv_heads=1, head_dim=32, block_size=bs,
                                     context_lens=[1, k * bs, k * bs + 1], dtype=("float32", "float16")[i % 2],
                                     sinks="random" if i % 2 else None)
                for i, (bs, k) in enumerate([(1, 5), (3, 3), (61, 1), (528, 1)])]
    for problem in within(name, problems):
        _check(name, problem)


@pytest.mark.parametrize("name", NUMBA)
def test_head_dim_512(name):
    problem = DecodeProblem.random(8, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=512, block_size=8,
                                   context_lens=[9, 20], dtype="bfloat16", return_lse=True)
    require(name, problem)
    _check(name, problem)


@pytest.mark.parametrize("name", NUMBA)
def test_per_token_scales_with_one_huge_scale(name):
    """One slot's K and V scales 2^12 times the others': its logit dominates the softmax and its V the output;
    every other slot's own scale still counts (a kernel reading the wrong slot's or head's scale is off)."""
    problem = DecodeProblem.random(9, **dict(SHAPE, block_size=4, context_lens=[13, 6], kv_dtype="e4m3",
                                             per_token_scales=True, share_prefix=False))
    require(name, problem)
    block, offset = int(problem.block_tables[0, 1]), 2  # token 6 of sequence 0
    scales = {}
    for field in ("k_scales", "v_scales"):
        scales[field] = getattr(problem.options, field).copy()
        scales[field][block, offset, 1] *= np.float32(2.0 ** 12)
    _check(name, dataclasses.replace(problem, options=dataclasses.replace(problem.options, **scales)))


@pytest.mark.parametrize("name", NUMBA)
def test_nvfp4_with_subnormal_block_scales(name):
    """Block scales of some slots set to e4m3 subnormals (codes 1..7) beside normal ones, a per-tensor k_scale,
    sinks and lse: e2m1 * block scale * tensor scale, exactly as the reference dequantizes."""
    problem = DecodeProblem.random(10, **dict(SHAPE, block_size=5, context_lens=[12, 7], kv_dtype="nvfp4",
                                              query_lens=[3, 1], k_scale=0.5, sinks="random", return_lse=True))
    require(name, problem)
    rng = np.random.default_rng(3)
    scales = {}
    for field in ("k_block_scales", "v_block_scales"):
        codes = getattr(problem.options, field).view(np.uint8).copy()
        subnormal = rng.random(codes.shape) < 0.5
        codes[subnormal] = rng.integers(1, 8, size=int(subnormal.sum()), dtype=np.uint8)
        assert 0 < float(codes[subnormal][:1].view(ml_dtypes.float8_e4m3fn)[0]) < 2.0 ** -6
        scales[field] = codes.view(ml_dtypes.float8_e4m3fn)
    _check(name, dataclasses.replace(problem, options=dataclasses.replace(problem.options, **scales)))
