"""wrong.cupy.off_by_one: cupy.v1 that counts one token too few in the last block ((len - 1) % block_size).

Negative control: the property tests must reject it (tests/test_variants.py). Realistic: the classic
last-block off-by-one. Stays in bounds. Limits: as cupy.v1 (every precision and option).
"""
from __future__ import annotations

import pathlib

from kernels.cupy_raw import common, v1

PATH = pathlib.Path(__file__).resolve().parent / "cupy_off_by_one.cu"
NAME = "wrong.cupy.off_by_one"
LIMITS = v1.LIMITS


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
    return f"paged_attention_off_by_one<{block_size}, {head_dim}, {common.type_args(dtype, kv_dtype, flags)}>"


def prepare(problem, backend: str):
    return v1.prepare_v1_shaped(NAME, PATH, kernel_name, problem, backend, problem.max_blocks_per_seq)
