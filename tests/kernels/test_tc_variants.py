"""The tensor-core variants beyond the registry-walking suites: cupy.tc (paged decode on nvcuda::wmma) and
cupy.mla_tc (MLA on wmma).

tests/kernels/test_variants.py and tests/kernels/test_cupy_family.py walk the registry, so they already hold cupy.tc to the
reference on the shared strategy's problems and its edge cases, and run it under ASan, racecheck, both
shared-memory poisons and reversed thread order; tests/kernels/test_mla_variants.py does the same for cupy.mla_tc
(property tests, edge cases, every index invalid, tunables, compile reports of the fp8 record), and the
racecheck mutation test removes each barrier of tc.cu and mla_tc.cu. Here: what is particular to a
tensor-core tile: split-KV merges at small partitions (rows that see nothing of a partition), GQA groups
wider than the 16-row tile, every option at once with several query tokens, an fp8 record's scales that
are not powers of two, compile reports for sm_90 free of local memory, and the traffic recorder's
tensor-core FLOPs against the MMAs each kernel must issue.

The executor emulates every MMA (a warp rendezvous each), so problems stay small.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import reference
import sandbox
from kernels.cupy_raw import common, mla_tc, tc
from sandbox.analysis.traffic import metrics as M
from sandbox.checking.check import expected_output
from sandbox.checking.compare import assert_close, compare
from sandbox.checking.mla_check import check_mla_problem
from sandbox.problem.mla import record as rec
from sandbox.problem.mla import MLAProblem
from sandbox.problem import DecodeProblem
from sandbox.problem.strategies import problems_for
from sandbox.variant import Unsupported, registry
from sandbox.variant.runner import outputs

MMA_FLOPS = 2 * 16 * 16 * 16


def _run(module, problem, **kwargs):
    prepared = module.prepare(problem, "cpu", **kwargs)
    prepared.launch()
    return outputs(prepared, problem)


def _assert_right(module, problem, **kwargs):
    got, want = _run(module, problem, **kwargs), expected_output(problem)
    if problem.options.return_lse:  # (out, lse): the lse is float32 whatever the query's dtype
        (got, lse), (want, want_lse) = got, want
        assert lse.shape == problem.query.shape[:2] and lse.dtype == np.float32
        assert_close(lse, want_lse, "float32", f"{module.NAME} {kwargs} lse on {problem!r}")
    assert got.shape == problem.query.shape and got.dtype == problem.dtype
    assert_close(got, want, problem.dtype, f"{module.NAME} {kwargs} on {problem!r}")


def test_tc_is_registered_where_the_suites_walk():
    assert registry.get("cupy.tc").module is tc
    assert "cupy.tc" in registry.variants("cupy")
    assert set(tc.LIMITS.dtypes) == {"float16", "bfloat16"} and tc.LIMITS.max_query_len is None
    with pytest.raises(Unsupported, match="dtype=float32"):
        tc.LIMITS.check("cupy.tc", DecodeProblem.random(1, num_seqs=1, context_lens=[3], dtype="float32"))
    assert tc.LIMITS.options == common.SUPPORT["options"]  # every option of the other CUDA C variants
    with pytest.raises(Unsupported, match="head_dim=512"):  # a chunk of 8 tokens: under the MMA's 16
        tc.LIMITS.check("cupy.tc", DecodeProblem.random(1, num_seqs=1, context_lens=[3], head_dim=512, dtype="float16"))


@settings(max_examples=4, deadline=None)
@given(problem=problems_for(tc.LIMITS, head_dims=(32, 64), max_tokens=200, max_num_seqs=2, max_kv_heads=2,
                            max_query_tokens=20),
       partition=st.sampled_from([16, 40, 512]))
def test_tc_matches_reference_at_any_partition_size(problem, partition):
    """Partitions of 16 and 40 tokens: most rows have several partial results (merged), and a row whose window
    lies after a partition sees none of it (max -inf, sum 0: weight 0 in the merge)."""
    _assert_right(tc, problem, partition_size=partition)


@pytest.mark.parametrize("heads,kv_heads,head_dim,dtype,kv_dtype", [
    (32, 1, 96, "float16", None),                # a group of 32: two 16-row tiles per KV head, 6 k-steps
    (20, 2, 256, "bfloat16", "float8_e5m2"),      # a group of 10 (6 idle rows), 16-token chunks, 16 k-steps
    (2, 2, 80, "bfloat16", "float8_e4m3fn"),      # MHA: 16 query tokens of one head per tile
])
def test_tc_groups_head_dims_and_caches(heads, kv_heads, head_dim, dtype, kv_dtype):
    problem = DecodeProblem.random(11, num_seqs=2, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                                   block_size=16, context_lens=[70, 17], dtype=dtype, kv_dtype=kv_dtype,
                                   query_lens=[17, 2])
    _assert_right(tc, problem)


def test_tc_every_option_at_once_with_several_query_tokens():
    problem = DecodeProblem.random(12, num_seqs=2, num_heads=8, num_kv_heads=2, head_dim=64, block_size=8,
                                   context_lens=[90, 13], dtype="float16", kv_dtype="float8_e4m3fn",
                                   query_lens=[9, 3], window_left=11, logits_soft_cap=5.0, alibi_slopes="paper",
                                   k_scale=3.0, v_scale=0.25, extreme_logits=True)
    _assert_right(tc, problem, partition_size=24)


def test_tc_sinks_lse_and_per_token_scales_over_partitions_and_head_chunks():
    """Sinks, the log-sum-exp and per-token fp8 scales together, over a GQA group of 32 (two 16-head chunks
    per KV head) and 16-token partitions (up to 5 partial results a row, merged): a sink joins the merged
    denominator once, the lse is the merged tokens' (the sink not in it). e5m2's per-token scales (about
    1e-5) would leave fp16's normal range as weights of V: the kernel weighs V by its scale relative to the
    partition's largest. Against the float64 loop (reference.paged_attention), compare.py's tolerances:
    the lse is held to float32's."""
    problem = DecodeProblem.random(15, num_seqs=2, num_heads=32, num_kv_heads=1, head_dim=32, block_size=8,
                                   context_lens=[70, 9], dtype="float16", kv_dtype="float8_e5m2",
                                   query_lens=[2, 1], sinks="random", return_lse=True, per_token_scales=True)
    work = tc.work_for(problem, 16)
    assert work.layout.head_chunks == 2 and work.max_slots == 5
    out, lse = _run(tc, problem, partition_size=16)
    truth, truth_lse = reference.paged_attention(*problem.arrays(), **problem.kwargs())
    assert lse.shape == (problem.query.shape[0], problem.num_heads) and lse.dtype == np.float32
    for name, got, want, dtype in (("out", out, truth, problem.dtype), ("lse", lse, truth_lse, "float32")):
        comparison = compare(got, want, dtype)
        assert comparison.ok, f"cupy.tc {name} on {problem!r}:\n{comparison.report}"


@pytest.mark.parametrize("window_left", [0, 1])
def test_tc_windows_that_leave_a_partition_empty_for_some_rows(window_left):
    """16 query tokens in one tile whose range spans several partitions: with a window of 0 or 1 tokens
    every row sees one or two tokens, and most partitions hold none of a given row's."""
    problem = DecodeProblem.random(13, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=32, block_size=4,
                                   context_lens=[40], dtype="bfloat16", query_lens=16, window_left=window_left,
                                   free_outside_window=False)
    _assert_right(tc, problem, partition_size=4)


@pytest.mark.parametrize("head_dim,dtype,kv_dtype,flags", [
    (128, "float16", None, 0),
    (256, "bfloat16", "float8_e4m3fn", 0),
    (64, "bfloat16", None, 15),  # window, soft-cap, ALiBi and v_scale compiled in
    (128, "float16", "float8_e5m2", 112),  # sinks, lse and per-token scales (their shared arrays)
])
def test_tc_compiles_for_sm90_without_local_memory(head_dim, dtype, kv_dtype, flags):
    report = tc.compile_report(16, head_dim, dtype, "sm_90", kv_dtype=kv_dtype, flags=flags)
    for kernel in report["kernels"]:
        assert kernel["local_bytes"] == 0 and kernel["spill_stores"] == 0 and kernel["spill_loads"] == 0, kernel
    assert report["static_shared_bytes"] == tc.static_shared_bytes(head_dim, flags)


def test_tc_traffic_counts_the_mmas_the_kernel_must_issue():
    """Tensor-core FLOPs = 2 * 16 * 16 * 16 per m16n16k16 MMA: per chunk of each block's partition and per
    16-token block holding range tokens, head_dim / 16 k-steps of Q.K^T and of P_hi.V and of P_lo.V.
    The model then charges the attention math to tensor cores, not to CUDA cores."""
    problem = DecodeProblem.random(14, num_seqs=2, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16,
                                   context_lens=[100, 33], dtype="float16", query_lens=2)
    mmas = tc.mma_count(problem, tc.work_for(problem))
    # 2 KV heads x (Q.K^T, P_hi.V, P_lo.V) x 4 k-steps (or column blocks) x 16-token blocks: the tile over
    # 100 tokens has 64-token chunks of 4 and 3 blocks, the one over 33 tokens one chunk of 3
    assert mmas == 2 * 3 * 4 * (4 + 3 + 3)
    result = sandbox.traffic("cupy.tc", problem, census=False)
    assert result["metrics"]["sandbox__tensor_flops.sum"] == MMA_FLOPS * mmas
    assert result["metrics"]["smsp__inst_executed_pipe_tensor.sum"] == 2 * mmas  # m16n8k16 units
    levels = result["model"]["levels_us"]
    assert levels["tensor"] > 0 and levels["fp32"] == 0
    assert result["metrics"][M.DRAM_READ] > 0


# ---- cupy.mla_tc -------------------------------------------------------------------------------------


def _assert_mla_right(problem, **kwargs):
    prepared = mla_tc.prepare(problem, "cpu", **kwargs)
    prepared.launch()
    from sandbox.checking.mla_check import compare_mla, expected_mla
    comparison = compare_mla(prepared.result(), prepared.lse(), *expected_mla(problem), problem.dtype)
    assert comparison.ok, f"cupy.mla_tc {kwargs} on {problem!r}:\n{comparison.report}"


def test_mla_tc_is_registered_where_the_mla_suites_walk():
    assert registry.get("cupy.mla_tc", problem="mla").module is mla_tc
    assert "cupy.mla_tc" in registry.variants(problem="mla") and "cupy.mla_tc" not in registry.variants()
    assert mla_tc.LIMITS.block_sizes is None and set(mla_tc.LIMITS.modes) == {"dense", "sparse"}


@pytest.mark.parametrize("kwargs", [
    # two head tiles (20 heads: 12 idle rows in the second), several query rows, fp8 records, 16-token partitions
    dict(num_heads=20, kv_format="fp8_record", query_lens=3, block_size=5, context_lens=[70, 18]),
    # sparse with -1s and one row reading nothing, over partitions of 16 index entries, float16
    dict(num_heads=3, dtype="float16", topk=37, valid_counts=[0, 30, 1], block_size=64, context_lens=[40, 120, 9]),
])
def test_mla_tc_at_small_partitions(kwargs):
    _assert_mla_right(MLAProblem.random(21, num_seqs=len(kwargs["context_lens"]), **kwargs), partition_size=16)


def test_mla_tc_applies_record_scales_that_are_not_powers_of_two_exactly():
    """The record's float32 scales multiply S and P in float, so scales no 16-bit type holds (x 1.37) cost
    nothing: the error stays within float16's tolerance as for FlashMLA's power-of-two scales (a kernel that
    dequantized code x scale to float16 in shared memory would round each value by up to 2^-11)."""
    problem = MLAProblem.random(22, num_seqs=2, num_heads=4, kv_format="fp8_record", block_size=16,
                                context_lens=[50, 7], topk=20, dtype="float16")  # fp16: the tighter tolerance
    records = problem.latent_cache.reshape(-1, rec.RECORD_BYTES)
    scales = records[:, rec.SCALES_AT:rec.ROPE_AT].copy().view("<f4")
    finite = np.isfinite(scales).all(axis=1)  # an all-0xFF (unread, NaN) record stays as it is
    scales[finite] *= np.float32(1.37)
    records[finite, rec.SCALES_AT:rec.ROPE_AT] = scales[finite].view(np.uint8)
    result = check_mla_problem("cupy.mla_tc", problem, "cpu")
    assert result.error is None and result.comparison.ok, (result.error, result.comparison)


def test_mla_tc_compiles_for_sm90_without_local_memory():
    """The sparse instantiation over a bf16 cache: 255 registers, the one nearest a spill (tests/kernels/test_mla_variants.py
    compiles the dense one over fp8 records)."""
    report = mla_tc.compile_report(64, 576, "bfloat16", "sm_90", sparse=True)
    for kernel in report["kernels"]:
        assert kernel["local_bytes"] == 0 and kernel["spill_stores"] == 0 and kernel["spill_loads"] == 0, kernel
    assert report["static_shared_bytes"] == mla_tc.STATIC_SHARED_BYTES


def test_mla_tc_traffic_counts_the_mmas_the_kernel_must_issue():
    """Per block (query row, 16-head tile, partition) and 16-token chunk, each of the 4 warps issues 8 + 1
    MMAs of Q.K^T (its nope scale tile and RoPE dims) and 8 x 2 of P.V (P_hi, P_lo)."""
    problem = MLAProblem.random(23, num_seqs=2, num_heads=20, block_size=16, context_lens=[40, 17])
    mmas = mla_tc.mma_count(problem)
    assert mmas == 2 * 4 * 25 * (3 + 2)  # 2 head tiles x 4 warps x 25 x chunks (40 tokens: 3, 17: 2)
    result = sandbox.traffic("cupy.mla_tc", problem, census=False)
    assert result["metrics"]["sandbox__tensor_flops.sum"] == MMA_FLOPS * mmas
    levels = result["model"]["levels_us"]
    assert levels["tensor"] > 0 and levels["fp32"] == 0


def test_mla_traffic_samples_sequences_that_do_the_same_work():
    """mla_sample counts the first sequence of four alike and scales by 4: the MMAs scale exactly; a problem
    whose sequences share prefix blocks is counted whole."""
    from sandbox.analysis.traffic import variant as V

    alike = MLAProblem.random(24, num_seqs=4, num_heads=4, block_size=8, context_lens=[20] * 4, share_prefix=False)
    counted, scale, note = V.mla_sample(alike, 1)
    assert scale == 4 and counted.num_seqs == 1 and "1 of 4 sequences" in note
    sampled = sandbox.traffic("cupy.mla_tc", alike, census=False, sample_seqs=1)
    exact = sandbox.traffic("cupy.mla_tc", alike, census=False, sample_seqs=None)
    assert sampled["metrics"]["sandbox__tensor_flops.sum"] == exact["metrics"]["sandbox__tensor_flops.sum"]
    shared = MLAProblem.shared(25, num_groups=1, group_size=3, block_size=8, prefix_len=16, suffix_lens=[4, 4, 4])
    assert V.mla_sample(shared, 1)[1] == 1.0
