"""wrong.cupy.lse_base2: cupy.v1 returning the log-sum-exp in base 2 (log2 sum_t exp(s_t)) instead of the natural log.

Negative control: the property tests must reject it (tests/test_variants.py) on any problem with return_lse.
Realistic: FlashInfer and FlashMLA return lse in base 2; vLLM's merge_attn_states takes natural logs, so a
kernel ported from one to the other merges with the wrong weights. Stays in bounds. Limits: as cupy.v1.
"""
from __future__ import annotations

import pathlib

from kernels.cupy_raw import common, v1

PATH = pathlib.Path(__file__).resolve().parent / "cupy_lse_base2.cu"
NAME = "wrong.cupy.lse_base2"
LIMITS = v1.LIMITS


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
    return f"paged_attention_lse_base2<{block_size}, {head_dim}, {common.type_args(dtype, kv_dtype, flags)}>"


def prepare(problem, backend: str):
    return v1.prepare_v1_shaped(NAME, PATH, kernel_name, problem, backend, problem.max_blocks_per_seq)
