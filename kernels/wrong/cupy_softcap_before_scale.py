"""wrong.cupy.softcap_before_scale: cupy.v1 that soft-caps the raw dot product and scales after (scale * cap * tanh(q.k / cap)).

Negative control: the property tests must reject it (tests/test_variants.py). Realistic: Gemma 2's cap applied
where the logits are first formed, before the 1/sqrt(d) scale. Stays in bounds. Limits: as cupy.v1 (every
precision and option).
"""
from __future__ import annotations

import pathlib

from kernels.cupy_raw import common, v1

PATH = pathlib.Path(__file__).resolve().parent / "cupy_softcap_before_scale.cu"
NAME = "wrong.cupy.softcap_before_scale"
LIMITS = v1.LIMITS


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
    return f"paged_attention_softcap_before_scale<{block_size}, {head_dim}, {common.type_args(dtype, kv_dtype, flags)}>"


def prepare(problem, backend: str):
    return v1.prepare_v1_shaped(NAME, PATH, kernel_name, problem, backend, problem.max_blocks_per_seq)
