"""cupy.rows on an NVFP4 cache, a fixed case the shared suite's draws rarely reach.

The row mapping loads a K row's codes in 16-byte vectors of 32 values, two e4m3 block scales each (loaded
as one 2-byte word beside the codes), and V in 8-byte vectors of one group. Head dim 96 gives 3 K vectors
and 6 V vectors a row (lanes per row not a power of two); block size 19 puts rows of one vector's tokens in
different blocks, and the contexts end at k * 19, k * 19 + 1 and past the 512-token partition inside a
block. Each vector's two groups carry different scales (16x apart, alternating by group and slot), so a
kernel that applied one group's scale to the other, or read the neighbouring slot's, would be far off:
the test checks that its own problem tells them apart. And the traffic profiler's NVFP4 shapes (what the
DRAM-versus-ideal figure of cupy.rows on NVFP4 is counted on) hold packed codes and block scales.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from sandbox.checking.check import check_problem, expected_output
from sandbox.checking.compare import compare
from sandbox.problem import DecodeProblem

E4M3 = "float8_e4m3fn"


def _group_scales(scales: np.ndarray) -> np.ndarray:
    """float8_e4m3fn [num_blocks, block_size, num_kv_heads, groups]: 0.25 or 4 by group parity (swapped on odd
    slots), times 1 + (slot % 5) / 8 (exact in e4m3); slots that were NaN (never read) stay NaN."""
    blocks, block_size, heads, groups = scales.shape
    slot = np.arange(blocks * block_size).reshape(blocks, block_size, 1, 1)
    parity = (np.arange(groups).reshape(1, 1, 1, groups) + slot) % 2
    pattern = np.where(parity == 0, 0.25, 4.0) * (1 + (slot % 5) / 8) * np.ones((1, 1, heads, 1))
    return np.where(np.isnan(scales.astype(np.float32)), np.nan, pattern).astype(E4M3)


def _swap_groups(scales: np.ndarray) -> np.ndarray:
    """Each 16-byte vector's two block scales exchanged (groups 2i and 2i + 1)."""
    groups = scales.shape[-1]
    return scales[..., np.arange(groups) ^ 1]


def test_rows_reads_nvfp4_vectors_with_two_different_group_scales_across_block_boundaries():
    problem = DecodeProblem.random(97, num_seqs=3, num_heads=6, num_kv_heads=2, head_dim=96, block_size=19,
                                   context_lens=[38, 39, 600], dtype="bfloat16", kv_dtype="nvfp4",
                                   k_scale=0.05, v_scale=0.5)  # outputs of order 1: the tolerance sees the scales
    options = problem.options
    scaled = {name: _group_scales(getattr(options, name)) for name in ("k_block_scales", "v_block_scales")}
    problem = dataclasses.replace(problem, options=dataclasses.replace(options, **scaled))

    swapped = dataclasses.replace(problem, options=dataclasses.replace(
        problem.options, **{name: _swap_groups(s) for name, s in scaled.items()}))
    assert not compare(expected_output(swapped), expected_output(problem), problem.dtype).ok, \
        "the case must tell each vector's two group scales apart"

    result = check_problem("cupy.rows", problem, "cpu")
    assert result.error is None, result.error
    assert result.comparison.ok, result.comparison.report


def test_traffic_pages_an_nvfp4_shape_as_packed_codes_with_block_scales():
    """`python -m sandbox traffic cupy.rows --shape ...xbf16:nvfp4` counts what the kernel reads: a uint8 cache of
    head_dim // 2 bytes a row and e4m3 block scales beside it, so its ideal bytes are NVFP4's."""
    from sandbox.commands import traffic
    from sandbox.sweep import shapes
    shape = shapes.parse_shape("2x40x4/2x64xbf16:nvfp4")
    problem = traffic.problem_for(shape, 19, seed=0)
    assert problem.kv_format == "nvfp4" and problem.key_cache.shape[1:] == (19, 2, 32)
    assert problem.options.k_block_scales.shape == problem.key_cache.shape[:3] + (4,)
    bf16 = traffic.problem_for(shapes.parse_shape("2x40x4/2x64xbf16"), 19, seed=0)
    # K and V of 80 token rows x 2 KV heads: 128 bytes each in bf16, 32 bytes of codes + 4 of scales in NVFP4
    assert bf16.bytes_moved() - problem.bytes_moved() == 2 * 80 * 2 * (128 - 36)
