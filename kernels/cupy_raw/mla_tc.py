"""cupy.mla_tc: multi-head latent attention on tensor cores; one block per (query row, 16-head tile, partition).

Idea: cupy.mla's work unit, split and merge (mla.cu's mla_merge), with Q.K^T (576 wide) and P.V (512 wide)
as m16n16k16 MMAs over the 16 heads of a tile (the MMA's M) and chunks of 16 latent rows staged in shared
memory in the query's 16-bit type (an fp8 record's codes exact, its RoPE values bf16). Warp w owns scale
tile w of the record (nope dims 128w..128w+127) and 16 RoPE dims: it keeps its 9 query fragments in
registers, computes its partial S (the record's float32 scales applied to S in float), and accumulates
O's 8 column blocks of its tile in registers, with P * scale_w split into two 16-bit parts (P_hi + P_lo).
Limits: any block size (a runtime value; 64 the default, FlashMLA's); bfloat16 and float16 queries; caches
of the query's dtype or the 656-byte fp8 record (with float16 queries its bf16 RoPE values are rounded to
float16: exact within float16's normal range); dense and sparse; any query length; any context.
Template: mla_tc_attention<T, RECORD, SPARSE> (mla_tc.cu) and mla_merge<T> (mla.cu).
Tunable: partition_size (TUNABLES), tokens (sparse: index entries) per block.
Verdict: not measured on a GPU; docs/tensor-cores.md names the commands that model it.
"""
from __future__ import annotations

import numpy as np

from sandbox.problem import mla_record as rec
from sandbox.variant import Unsupported
from sandbox.variant.mla_limits import MLALimits

from . import common, mla

PATH = common.KERNEL_DIR / "mla_tc.cu"
NAME = "cupy.mla_tc"
LIMITS = MLALimits()
TUNABLES = {"partition_size": (512, 256, 1024)}  # the default first (sandbox.variant.tunables)
DEFAULT_PARTITION = 512
HEADS_PER_TILE = 16   # mlatc::HEADS: the MMA's M
CHUNK = 16            # mlatc::CHUNK: tokens per step
KS = rec.LATENT_DIMS + 8
STATIC_SHARED_BYTES = (2 * CHUNK * KS + 4 * 2 * 4 * 16 * 16 + 4 * 4 * 16 * 16 + 2 * 2 * 4 * 16 * (CHUNK + 8)
                       + 4 * CHUNK * 4 + 4 * CHUNK + 4 * 4 * HEADS_PER_TILE)
MMA_FLOPS = 2 * 16 * 16 * 16
CTYPES = mla.CTYPES


def kernel_name(dtype, record: bool, sparse: bool) -> str:
    return f"mla_tc_attention<{CTYPES[np.dtype(dtype).name]}, {str(record).lower()}, {str(sparse).lower()}>"


def batch() -> list[str]:
    """Every instantiation the variant uses: one module on the CPU executor."""
    names = [kernel_name(d, r, s) for d in CTYPES for r in (False, True) for s in (False, True)]
    return names + [mla.merge_name(d) for d in CTYPES]


def partition_tokens(partition_size: int | None) -> int:
    size = DEFAULT_PARTITION if partition_size is None else int(partition_size)
    if size < 1:
        raise Unsupported(f"{NAME}: partition_size must be >= 1, got {size}")
    return size


def mma_count(problem, partition_size: int | None = None) -> int:
    """m16n16k16 MMAs the attention kernel issues: per block (query row, head tile, partition) and chunk of 16
    tokens, each of 4 warps does 8 + 1 for Q.K^T and 8 x 2 (P_hi, P_lo) for P.V."""
    _, tokens, _ = mla.row_work(problem, partition_tokens(partition_size))
    partition = partition_tokens(partition_size)
    chunks = 0
    for n in tokens.tolist():
        for start in range(0, n, partition):
            chunks += -(-(min(start + partition, n) - start) // CHUNK)
    return chunks * -(-problem.num_heads // HEADS_PER_TILE) * 4 * (9 + 16)


def prepare(problem, backend: str, *, partition_size: int = DEFAULT_PARTITION) -> mla.MLAPrepared:
    p = problem
    partition = partition_tokens(partition_size)
    common.check_shared(NAME, 0, STATIC_SHARED_BYTES, f"a tile of {HEADS_PER_TILE} heads, {CHUNK}-token chunks")
    seqs, tokens, parts = mla.row_work(p, partition)
    names = batch()
    kernel = common.get_function(backend, PATH, kernel_name(p.dtype, p.fp8, p.sparse), names)
    merge = common.get_function(backend, PATH, mla.merge_name(p.dtype), names)
    return mla.launches_for(p, backend, kernel, merge, partition, seqs, tokens, parts, HEADS_PER_TILE)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kv_dtype=None, sparse: bool = False) -> dict:
    """NVRTC -> cubin resources of the attention kernel and, in `kernels`, the merge (arguments as cupy.mla's:
    head_dim and block_size ignored, kv_dtype "float8_e4m3fn" names the fp8 record)."""
    name, record = mla.report_format(NAME, dtype, kv_dtype)
    return mla.report_with_merge(PATH, kernel_name(name, record, sparse), mla.merge_name(name), arch,
                                 f"{HEADS_PER_TILE} heads per tile on m16n16k16 MMAs, {CHUNK}-token chunks, "
                                 f"{'fp8 record' if record else name} cache, {'sparse' if sparse else 'dense'}; "
                                 "block size is a runtime value")
