"""wrong.cupy.uncoalesced_k: a thread per token reading its K row element by element, and no softmax scale.

Negative control twice over (kernels/wrong/cupy_uncoalesced_k.cu): the property tests must reject it (the
logits are never scaled), and the traffic count must flag its K loads: the 32 lanes of a warp read 32
different token rows, so each warp-level K load touches 32 sectors for 64 bytes (fp16) where a coalesced
one touches 16 for 512 (tests/test_traffic_variants.py). Realistic: the first port of a CPU loop.
Limits: plain decode (no options, no fp8 cache), block sizes 1..256, v1's head dims and context bound.
Loads in flight: read from its SASS by the traffic model, like every CUDA C kernel.
"""
from __future__ import annotations

import pathlib

from kernels.cupy_raw import common, v1
from sandbox.problem.dtypes import QUERY_DTYPES
from sandbox.variant import Limits

PATH = pathlib.Path(__file__).resolve().parent / "cupy_uncoalesced_k.cu"
NAME = "wrong.cupy.uncoalesced_k"
LIMITS = Limits(block_sizes=common.POW2_BLOCK_SIZES, head_dims=common.HEAD_DIMS, dtypes=QUERY_DTYPES)


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
    return f"paged_attention_uncoalesced_k<{block_size}, {head_dim}, {common.ctype(dtype)}>"


def prepare(problem, backend: str):
    return v1.prepare_v1_shaped(NAME, PATH, kernel_name, problem, backend, problem.max_blocks_per_seq)
