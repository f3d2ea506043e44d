"""wrong.cupy.neighbour_head_scale: cupy.v1 reading each token's K scale from the neighbouring KV head's entry.

Negative control: the property tests must reject it (tests/test_variants.py) on problems with per-token
scales (k_scales). Realistic: an off-by-one in the flattened [slot, KV head] scale index (the entry before
its own: the neighbouring KV head's; for KV head 0 the previous slot's last head). Stays in bounds.
Limits: as cupy.v1.
"""
from __future__ import annotations

import pathlib

from kernels.cupy_raw import common, v1

PATH = pathlib.Path(__file__).resolve().parent / "cupy_neighbour_head_scale.cu"
NAME = "wrong.cupy.neighbour_head_scale"
LIMITS = v1.LIMITS


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
    return f"paged_attention_neighbour_head_scale<{block_size}, {head_dim}, {common.type_args(dtype, kv_dtype, flags)}>"


def prepare(problem, backend: str):
    return v1.prepare_v1_shaped(NAME, PATH, kernel_name, problem, backend, problem.max_blocks_per_seq)
