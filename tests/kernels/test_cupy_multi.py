"""cupy.multi and cupy.cascade beyond the shared suite: groups sharing a prompt as BlockManager makes them
(fork with copy-on-write splits, prefix caching, groups of one, windows that free or poison prefix
blocks), the cascade's plan and its byte count, multi-token queries with every option and precision,
split-KV merges, the negative controls rejected directly, and both variants under ASan and racecheck.

The kernels are compiled once per (head dim, dtype, cache dtype, options) and cached on disk: the cases
below share a few instantiations so the file stays under a minute on two cores.
"""
from __future__ import annotations

import numpy as np
import pytest

from kernels.cupy_raw import cascade, common, multi
from kernels.wrong import cupy_cascade_partial_block
from kernels.wrong.cupy_controls import causal_off_by_one as cupy_causal_off_by_one
from sandbox.paging import cascade_plan
from sandbox import cpucuda
from sandbox.analysis import nvrtc
from sandbox.variant import registry
from sandbox.checking.check import expected_output
from sandbox.checking.compare import assert_close, compare
from sandbox.problem import DecodeProblem
from sandbox.variant.runner import outputs

SMALL = dict(num_heads=8, num_kv_heads=2, head_dim=64, dtype="float32")


def _run(module, problem, **kwargs):
    prepared = module.prepare(problem, "cpu", **kwargs)
    prepared.launch()
    return prepared, outputs(prepared, problem)


def _assert_right(module, problem, **kwargs):
    prepared, got = _run(module, problem, **kwargs)
    assert got.shape == problem.query.shape and got.dtype == problem.dtype and got.flags.c_contiguous
    assert_close(got, expected_output(problem), problem.dtype, f"{module.NAME} {kwargs} on {problem!r}")
    return prepared


def test_registered():
    assert registry.get("cupy.multi").module is multi and registry.get("cupy.cascade").module is cascade
    assert registry.get("wrong.cupy.causal_off_by_one").module is cupy_causal_off_by_one
    assert registry.get("wrong.cupy.cascade_partial_block").module is cupy_cascade_partial_block
    assert multi.LIMITS.max_query_len is None and cascade.LIMITS == multi.LIMITS


# ---- shared prompts: cascade and its no-sharing twin against the reference -------------------------

SHARED = {
    # fork (parallel sampling): a partly full last prompt block, copy-on-write splits by the appenders
    "fork_cow_splits": dict(seed=1, num_groups=2, group_size=3, prefix_len=37, block_size=8, how="fork"),
    # children that never appended still share the parent's partial block; a later member appended
    "fork_partial_block_still_shared": dict(seed=2, num_groups=1, group_size=4, prefix_len=37, block_size=8,
                                            how="fork", suffix_lens=[0, 5, 0, 19]),
    # prefix caching: only the prompt's full blocks are shared; several query tokens per sequence
    "prefix_caching_multi_token": dict(seed=3, num_groups=2, group_size=3, prefix_len=45, block_size=4,
                                       how="prefix", query_lens=6),
    # query tokens inside the prefix (q_s = L_s): the prefix part is causal too
    "whole_context_queries": dict(seed=4, num_groups=1, group_size=2, prefix_len=24, block_size=8, how="fork",
                                  suffix_lens=[3, 0], query_lens=[27, 24]),
    # groups of one: nothing to share, the cascade is cupy.multi
    "groups_of_one": dict(seed=5, num_groups=3, group_size=1, prefix_len=40, block_size=16, how="fork"),
    # a window that frees the prefix's first blocks (-1): members no longer share block 0
    "window_frees_prefix_blocks": dict(seed=6, num_groups=1, group_size=3, prefix_len=64, block_size=8, how="fork",
                                       window_left=20, query_lens=2),
    # a window whose blocks before it stay in the table but hold NaN: the prefix is shared, its read part
    # starts at the earliest window; unread blocks must not be loaded
    "window_nan_prefix_blocks_kept": dict(seed=7, num_groups=2, group_size=3, prefix_len=64, block_size=4,
                                          how="fork", window_left=30, free_outside_window=False, query_lens=3),
    # one block as big as the prompt, block size 1 (a table lookup per token), long prefix split in partitions
    "block_size_256": dict(seed=8, num_groups=1, group_size=3, prefix_len=300, block_size=256, how="fork",
                           max_suffix_len=40),
    "block_size_1": dict(seed=9, num_groups=1, group_size=3, prefix_len=50, block_size=1, how="prefix",
                         query_lens=3),
}


@pytest.mark.parametrize("case", list(SHARED))
def test_shared_prompts_give_the_reference_answer(case):
    problem = DecodeProblem.shared(**SMALL, **SHARED[case])
    groups = cascade_plan.plan(problem.block_tables, problem.context_lens, problem.block_size)
    for partition_size in (None, 24):  # one partition per tile, and several merged by log-sum-exp
        _assert_right(multi, problem, partition_size=partition_size)
        prepared = _assert_right(cascade, problem, partition_size=partition_size)
        assert prepared.plan == groups
        assert prepared.shared_prefixes == [(g.seqs, g.prefix_tokens(problem.block_size) if len(g.seqs) > 1 else 0)
                                            for g in groups]


def test_plans_of_the_shared_cases_share_what_they_should():
    fork = DecodeProblem.shared(**SMALL, **SHARED["fork_cow_splits"])
    assert cascade.prepare(fork, "cpu").shared_prefixes == [((0, 1, 2), 32), ((3, 4, 5), 32)]
    alone = DecodeProblem.shared(**SMALL, **SHARED["groups_of_one"])
    assert [p for _, p in cascade.prepare(alone, "cpu").shared_prefixes] == [0, 0, 0]
    freed = DecodeProblem.shared(**SMALL, **SHARED["window_frees_prefix_blocks"])
    assert (freed.block_tables[:, 0] == -1).all()
    assert [p for _, p in cascade.prepare(freed, "cpu").shared_prefixes] == [0, 0, 0]
    kept = DecodeProblem.shared(**SMALL, **SHARED["window_nan_prefix_blocks_kept"])
    prepared = cascade.prepare(kept, "cpu")
    assert [p for _, p in prepared.shared_prefixes] == [64, 64]
    first = kept.first_read_tokens()
    assert first.min() >= kept.block_size  # whole blocks before every window hold NaN ...
    starts = [start for _, _, start, _ in prepared.work.tiles]
    assert min(starts) >= first.min()  # ... and no tile starts before the earliest window


def test_cascade_loads_a_prefix_once_per_tile_where_multi_loads_it_per_sequence():
    problem = DecodeProblem.shared(10, num_groups=1, group_size=8, prefix_len=64, suffix_lens=[1] * 8,
                                   block_size=16, **SMALL)  # GQA 4 x 8 members = 32 rows: one prefix tile
    m, c = multi.prepare(problem, "cpu"), cascade.prepare(problem, "cpu")
    token = multi.kv_token_bytes(problem)
    assert m.bytes_loaded() == 8 * 65 * token
    assert c.bytes_loaded() == (64 + 8 * 1) * token
    assert c.bytes_moved() == c.bytes_loaded() + 2 * problem.query.nbytes + 4 * (4 + 8) + problem.context_lens.nbytes


# ---- bytes_moved: the prefix once per group ------------------------------------------------------

def test_bytes_moved_of_the_readme_example_counts_the_prompt_once():
    """n = 8 samples of a 2048-token prompt at block size 16 (Llama-3-8B heads, float16), not run."""
    problem = DecodeProblem.shared(0, num_groups=1, group_size=8, prefix_len=2048, suffix_lens=[0] * 8,
                                   block_size=16, num_heads=32, num_kv_heads=8, head_dim=128, dtype="float16")
    groups = cascade.plan_for(problem)
    assert groups == [cascade_plan.Group(tuple(range(8)), 128)]
    token = 2 * 8 * 128 * 2  # K and V, 8 KV heads, head dim 128, 2 bytes
    moved = cascade.bytes_moved_for(problem, cascade.shared_prefixes(groups, 16))
    assert problem.bytes_moved() == 8 * 2048 * token + 2 * 8 * 32 * 128 * 2 + 8 * 128 * 4 + 8 * 4 == 67_244_064
    assert moved == 2048 * token + 2 * 8 * 32 * 128 * 2 + 128 * 4 + 8 * 4 == 8_520_224
    saved = cascade_plan.prefix_bytes_saved(groups, 16, token)
    assert saved == 7 * 2048 * token and moved == problem.bytes_moved() - saved - 7 * 128 * 4


def test_bytes_moved_without_sharing_and_with_windows():
    plain = DecodeProblem.random(11, num_seqs=3, block_size=8, max_context_len=90, share_prefix=False, **SMALL)
    groups = cascade.plan_for(plain)
    assert all(len(g.seqs) == 1 for g in groups)
    assert cascade.bytes_moved_for(plain, cascade.shared_prefixes(groups, 8)) == plain.bytes_moved()
    kept = DecodeProblem.shared(**SMALL, **SHARED["window_nan_prefix_blocks_kept"])
    prefixes = cascade.shared_prefixes(cascade.plan_for(kept), 4)
    first, lens = kept.first_read_tokens(), kept.context_lens.astype(int)
    tokens = sum(64 - min(first[s] for s in seqs) + sum(lens[s] - max(64, first[s]) for s in seqs)
                 for seqs, _ in prefixes)
    entries = sum(16 - min(first[s] for s in seqs) // 4 + sum(-(-lens[s] // 4) - max(64, first[s]) // 4 for s in seqs)
                  for seqs, _ in prefixes)
    expected = tokens * multi.kv_token_bytes(kept) + 2 * kept.query.nbytes + 4 * entries + kept.context_lens.nbytes \
        + kept.query_start.nbytes
    assert cascade.bytes_moved_for(kept, prefixes) == expected < kept.bytes_moved()


# ---- multi-token queries: every option and precision ---------------------------------------------

OPTION_CASES = {
    "bf16_e4m3_every_option": dict(dtype="bfloat16", kv_dtype="float8_e4m3fn", window_left=13, logits_soft_cap=5.0,
                                   alibi_slopes="random", k_scale=0.75 / 448, v_scale=1.5 / 448, extreme_logits=True),
    "fp16_e5m2_window_free": dict(dtype="float16", kv_dtype="float8_e5m2", window_left=9, alibi_slopes="paper"),
    "bf16_plain_cache": dict(dtype="bfloat16", logits_soft_cap=1.0, k_scale=0.5, v_scale=3.0, extreme_logits=True),
}


@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_multi_token_queries_with_options_and_precisions(case):
    kwargs = OPTION_CASES[case]
    problem = DecodeProblem.random(12, num_seqs=3, num_heads=12, num_kv_heads=2, head_dim=80, block_size=4,
                                   context_lens=[61, 9, 40], query_lens=[17, 9, 1], **kwargs)
    for partition_size in (None, 8):
        _assert_right(multi, problem, partition_size=partition_size)
    shared = DecodeProblem.shared(13, num_groups=1, group_size=3, prefix_len=33, block_size=4, how="fork",
                                  num_heads=12, num_kv_heads=2, head_dim=80, query_lens=4, **kwargs)
    _assert_right(cascade, shared, partition_size=8)


def test_groups_larger_than_a_tile_and_decode():
    """64 query heads on one KV head: two head chunks of 32; decode (query_start None) and head dim 256."""
    problem = DecodeProblem.random(14, num_seqs=2, num_heads=64, num_kv_heads=1, head_dim=64, block_size=32,
                                   context_lens=[70, 1])
    assert multi.Layout.for_problem(problem) == multi.Layout(head_chunk=32, tile_tokens=1, head_chunks=2)
    _assert_right(multi, problem, partition_size=16)
    wide = DecodeProblem.random(15, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=256, block_size=2,
                                context_lens=[9, 20], query_lens=[9, 3], dtype="float16")
    assert multi.Layout.for_problem(wide) == multi.Layout(head_chunk=2, tile_tokens=8, head_chunks=1)
    _assert_right(multi, wide, partition_size=4)


def test_partitions_start_at_the_window_of_the_tiles_first_token():
    problem = DecodeProblem.random(16, num_seqs=2, block_size=8, context_lens=[200, 150], query_lens=[10, 1],
                                   window_left=30, **SMALL)
    work = multi.multi_work(problem, multi.Layout.for_problem(problem), 512)
    assert [t for t in work.tiles] == [(0, 8, 190 - 30, 198), (0, 2, 198 - 30, 200), (1, 1, 149 - 30, 150)]
    assert (problem.block_tables[0, : 160 // 8] == -1).all()  # freed: never looked up


# ---- negative controls, directly -----------------------------------------------------------------

def test_cascade_partial_block_control_is_rejected_on_forked_groups():
    """Children that never appended share the parent's partial block; a member that appended has its own
    copy: counting the block as shared makes that member see the first member's slots there."""
    problem = DecodeProblem.shared(**SMALL, **SHARED["fork_partial_block_still_shared"])
    good, _ = _run(cascade, problem)
    bad, got = _run(cupy_cascade_partial_block, problem)
    assert good.shared_prefixes == [((0, 1, 2, 3), 32)] and bad.shared_prefixes == [((0, 1, 2, 3), 40)]
    assert not compare(got, expected_output(problem), problem.dtype).ok
    # All members stopped inside the shared partial block: the control is right there (the block is shared).
    same = DecodeProblem.shared(**SMALL, seed=17, num_groups=1, group_size=3, prefix_len=37, block_size=8,
                                how="fork", suffix_lens=[0, 0, 0])
    assert_close(_run(cupy_cascade_partial_block, same)[1], expected_output(same), same.dtype)


def test_causal_off_by_one_control_is_wrong_on_multi_token_queries_only():
    decode = DecodeProblem.random(18, num_seqs=2, block_size=8, max_context_len=60, **SMALL)
    assert_close(_run(cupy_causal_off_by_one, decode)[1], expected_output(decode), decode.dtype)
    prefill = DecodeProblem.random(18, num_seqs=2, block_size=8, max_context_len=60, query_lens=3, **SMALL)
    assert not compare(_run(cupy_causal_off_by_one, prefill)[1], expected_output(prefill), prefill.dtype).ok


# ---- the executor's checking modes and a GPU compile -------------------------------------------------

def _checked_problem():
    """Small, yet it has a shared prefix, a NaN-poisoned window start, multi-token tiles and merges."""
    return DecodeProblem.shared(19, num_groups=1, group_size=3, prefix_len=21, block_size=4, how="fork",
                                num_heads=4, num_kv_heads=2, head_dim=32, query_lens=3, window_left=9,
                                free_outside_window=False)


@pytest.mark.parametrize("mode", ["asan", "racecheck"])
def test_no_out_of_bounds_access_or_race(mode):
    problem = _checked_problem()
    with cpucuda.modes(**{mode: True}):
        for module in (multi, cascade, cupy_cascade_partial_block):
            got = _run(module, problem, partition_size=4)[1]
            if module is not cupy_cascade_partial_block:
                assert_close(got, expected_output(problem), problem.dtype, f"{module.NAME} under {mode}")


def test_compiles_for_sm_90_with_the_shared_memory_the_launcher_checks():
    expressions = [multi.kernel_name(128, "float16"), multi.kernel_name(80, "bfloat16", "float8_e4m3fn", 15),
                   multi.merge_name(128, "float16")]
    compiled = nvrtc.compile_cubin(common.load_source(multi.PATH), expressions, arch="sm_90", options=common.OPTIONS)
    for expression, head_dim in zip(expressions[:2], (128, 80)):
        res = compiled.resources[expression]
        assert 0 < res.registers <= 255 and res.static_shared_bytes == multi.static_shared_bytes(head_dim)
        assert res.static_shared_bytes <= common.SHARED_LIMIT_BYTES
