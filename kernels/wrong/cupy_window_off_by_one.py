"""wrong.cupy.window_off_by_one: cupy.v1 whose sliding window starts one token early (reads one token too many).

Negative control: the property tests must reject it (tests/test_variants.py). Realistic: `L - window_left - 1`
written as the first token and then decremented again (or `>` for `>=`). A freed block (-1) it opens is read as
block 0, so it stays in bounds. Limits: as cupy.v1 (every precision and option).
"""
from __future__ import annotations

import pathlib

from kernels.cupy_raw import common, v1

PATH = pathlib.Path(__file__).resolve().parent / "cupy_window_off_by_one.cu"
NAME = "wrong.cupy.window_off_by_one"
LIMITS = v1.LIMITS


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
    return f"paged_attention_window_off_by_one<{block_size}, {head_dim}, {common.type_args(dtype, kv_dtype, flags)}>"


def prepare(problem, backend: str):
    return v1.prepare_v1_shaped(NAME, PATH, kernel_name, problem, backend, problem.max_blocks_per_seq, extra_tokens=1)
