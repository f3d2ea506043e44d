"""wrong.cupy.alibi_flipped: cupy.v1 whose ALiBi bias has the wrong sign (slope * (position - t)).

Negative control: the property tests must reject it (tests/test_variants.py). Realistic: the relative distance
taken as query minus key instead of key minus query. Stays in bounds. Limits: as cupy.v1 (every precision and
option).
"""
from __future__ import annotations

import pathlib

from kernels.cupy_raw import common, v1

PATH = pathlib.Path(__file__).resolve().parent / "cupy_alibi_flipped.cu"
NAME = "wrong.cupy.alibi_flipped"
LIMITS = v1.LIMITS


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
    return f"paged_attention_alibi_flipped<{block_size}, {head_dim}, {common.type_args(dtype, kv_dtype, flags)}>"


def prepare(problem, backend: str):
    return v1.prepare_v1_shaped(NAME, PATH, kernel_name, problem, backend, problem.max_blocks_per_seq)
