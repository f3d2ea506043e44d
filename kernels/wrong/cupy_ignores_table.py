"""wrong.cupy.ignores_table: cupy.v1 that never reads the block table (physical block = logical block mod num_blocks).

Negative control: the property tests must reject it (tests/test_variants.py). Realistic: the bug of a
kernel first written for a contiguous cache. Stays in bounds. Limits: as cupy.v1 (every precision and option).
"""
from __future__ import annotations

import pathlib

from kernels.cupy_raw import common, v1

PATH = pathlib.Path(__file__).resolve().parent / "cupy_ignores_table.cu"
NAME = "wrong.cupy.ignores_table"
LIMITS = v1.LIMITS


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
    return f"paged_attention_ignores_table<{block_size}, {head_dim}, {common.type_args(dtype, kv_dtype, flags)}>"


def prepare(problem, backend: str):
    return v1.prepare_v1_shaped(NAME, PATH, kernel_name, problem, backend, problem.num_blocks)
