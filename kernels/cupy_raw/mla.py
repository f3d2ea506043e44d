"""cupy.mla: multi-head latent attention on CUDA cores; one block per (query row, 16-head tile, partition).

Idea: all heads read the same 576-wide latent row per token (MQA-like), so a block stages each row once
(16-byte loads, fp8 records dequantized with their per-128-dim scales, bf16 RoPE) in shared memory for a
tile of 16 heads, each head's query and 512-dim output kept in the registers of its 8 threads; the
row's tokens (dense: t <= p through the block table, any block size; sparse: its top-k entries, -1
skipped) are split into partitions of 512 that run as separate blocks and are merged by an exact
log-sum-exp (mla_merge). Kernel body and thread mapping: mla.cu.
Limits: any block size (a runtime value: the default and FlashMLA's is 64); bfloat16 and float16 queries;
caches of the query's dtype or the 656-byte fp8 record; dense and sparse; any query length (query_start;
each query row is its own block, so query rows of one sequence each read the context); any context.
Template: mla_attention<T, RECORD, SPARSE, FLAW = 0> (FLAW: the negative controls' deliberate bugs) and
mla_merge<T>; one instantiation per (query dtype, cache format, mode) serves every block size.
Tunable: partition_size (TUNABLES), tokens (sparse: index entries) per block.
Resources (NVRTC, bf16 and fp8 record, dense and sparse alike): 166-167 registers, 37,952 bytes of static
shared memory, no local memory nor spills at sm_80 and sm_90; 18.8% theoretical occupancy (3 blocks of 4
warps per SM, register-limited). Merge: 32 registers.
Verdict: not measured on a GPU. At FlashMLA's headline shape (batch 128, 128 heads, context 4096, bf16):
146 GFLOP against 0.61 GB of latent rows, 242 FLOP per byte, far right of any GPU's CUDA-core ridge point in
the device table (sandbox.analysis.gpus), so CUDA cores bind (each 4 multiply-adds also cost one 16-byte
shared load); with 16 heads the same context is 30 FLOP/byte, still compute-bound. Modelled times: `python -m
sandbox traffic cupy.mla --shape mla:128x4096x128xbf16 --block-sizes 64`. This is the CUDA-core baseline the
tensor-core cupy.mla_tc is for.
"""
from __future__ import annotations

import numpy as np

from sandbox.problem import mla_record as rec
from sandbox.variant import Unsupported
from sandbox.variant.mla_limits import MLALimits

from . import common

PATH = common.KERNEL_DIR / "mla.cu"
NAME = "cupy.mla"
LIMITS = MLALimits()
TUNABLES = {"partition_size": (512, 256, 1024)}  # the default first (sandbox.variant.tunables)
DEFAULT_PARTITION = 512
HEADS_PER_TILE = 16   # mla::HEADS
CHUNK = 16            # mla::CHUNK: tokens staged per step
STATIC_SHARED_BYTES = 4 * CHUNK * rec.LATENT_DIMS + 4 * CHUNK + 4 * HEADS_PER_TILE * CHUNK
REPORT_CONTEXT = 4096
CTYPES = {"bfloat16": "__nv_bfloat16", "float16": "__half"}


def kernel_name(dtype, record: bool, sparse: bool, flaw: int = 0) -> str:
    base = f"mla_attention<{CTYPES[np.dtype(dtype).name]}, {str(record).lower()}, {str(sparse).lower()}"
    return base + (f", {flaw}>" if flaw else ">")


def merge_name(dtype) -> str:
    return f"mla_merge<{CTYPES[np.dtype(dtype).name]}>"


# The negative controls' instantiations (kernels/wrong/cupy_controls.py's mla_* rows: bfloat16 over a bf16 cache, FLAW 1 dense,
# FLAW 2 sparse), compiled in the same executor batch as cupy.mla's own.
CONTROL_KERNELS = ((1, False), (2, True))


def batch() -> list[str]:
    """Every instantiation of mla.cu the variant and its negative controls use: one module on the CPU executor
    (g++ pays its fixed cost, ~4 s, once; each instantiation adds well under a second)."""
    names = [kernel_name(d, r, s) for d in CTYPES for r in (False, True) for s in (False, True)]
    names += [kernel_name("bfloat16", False, sparse, flaw) for flaw, sparse in CONTROL_KERNELS]
    return names + [merge_name(d) for d in CTYPES]


def partition_tokens(partition_size: int | None) -> int:
    size = DEFAULT_PARTITION if partition_size is None else int(partition_size)
    if size < 1:
        raise Unsupported(f"{NAME}: partition_size must be >= 1, got {size}")
    return size


class MLAPrepared(common.Prepared):
    """The attention kernel, then (when a row has several partitions) the merge; lse() beside result() (always)."""

    def __init__(self, launches, out, lse, keep, problem):
        super().__init__(launches, out, keep=keep, out_dtype=problem.dtype, lse=lse)
        self.problem = problem

    def launch_parts(self):
        names = ("partition", "merge")
        return [(names[i], (lambda launch=launch: launch[0](launch[1], launch[2], launch[3], shared_mem=launch[4])))
                for i, launch in enumerate(self.launches)]

    def bytes_moved(self) -> int:
        return self.problem.bytes_moved()

    def bytes_loaded(self) -> int:
        """Latent bytes the blocks load: every row each query row reads, once per head tile (no cache)."""
        p = self.problem
        tiles = -(-p.num_heads // HEADS_PER_TILE)
        return int(p.tokens_per_row().sum()) * tiles * p.latent_cache.shape[2] * p.latent_cache.dtype.itemsize


def row_work(problem, partition: int):
    """(row_seq, tokens, parts): per query row its sequence, the tokens (dense: p + 1) or index entries (sparse)
    it walks, and its partitions."""
    seqs, positions = problem.rows()
    tokens = np.full(len(seqs), problem.topk, np.int64) if problem.sparse else positions + 1
    return seqs, tokens, -(-tokens // partition)


def prepare_mla(name: str, problem, backend: str, flaw: int = 0, partition_size: int | None = None) -> MLAPrepared:
    """Compile and build the launches of cupy.mla (or, with `flaw`, of a negative control) on `problem`."""
    p = problem
    partition = partition_tokens(partition_size)
    seqs, tokens, parts = row_work(p, partition)
    expression = kernel_name(p.dtype, p.fp8, p.sparse, flaw)
    names = batch()
    kernel = common.get_function(backend, PATH, expression, names)
    merge = common.get_function(backend, PATH, merge_name(p.dtype), names)
    return launches_for(p, backend, kernel, merge, partition, seqs, tokens, parts, HEADS_PER_TILE)


def prepare(problem, backend: str, *, partition_size: int = DEFAULT_PARTITION) -> MLAPrepared:
    return prepare_mla(NAME, problem, backend, partition_size=partition_size)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kv_dtype=None, sparse: bool = False) -> dict:
    """NVRTC -> cubin resources of the attention kernel and, in `kernels`, the merge. head_dim and block_size
    are ignored (MLA's head dim is 576; the block size is a runtime value); kv_dtype "float8_e4m3fn" names the
    fp8 record (its codes are e4m3), None the query's dtype; sparse: the top-k instantiation."""
    name, record = report_format(NAME, dtype, kv_dtype)
    return report_with_merge(PATH, kernel_name(name, record, sparse), merge_name(name), arch,
                             f"{HEADS_PER_TILE} heads per tile, {CHUNK}-token chunks, "
                             f"{'fp8 record' if record else name} cache, {'sparse' if sparse else 'dense'}; "
                             "block size is a runtime value")


def report_format(variant: str, dtype, kv_dtype) -> tuple[str, bool]:
    """(query dtype name, whether the cache is the fp8 record) of an MLA compile report's arguments; what an
    MLA kernel does not take is Unsupported."""
    name = np.dtype(dtype).name
    if name not in CTYPES:
        raise Unsupported(f"{variant} takes bfloat16 or float16 queries, not {name}")
    if kv_dtype not in (None, name, "float8_e4m3fn"):
        raise Unsupported(f"{variant}: kv_dtype {kv_dtype} is not the fp8 record's e4m3")
    return name, kv_dtype == "float8_e4m3fn"


def report_with_merge(path, expression: str, merge: str, arch: str, note: str) -> dict:
    """NVRTC -> cubin resources of an MLA attention kernel, with it and its merge in `kernels`."""
    main = common.compile_report(path, expression, arch, common.NUM_THREADS, 0, extra_expressions=[merge])
    second = common.compile_report(path, merge, arch, common.NUM_THREADS, 0, extra_expressions=[expression])
    fields = ("registers", "static_shared_bytes", "dynamic_shared_bytes", "local_bytes", "spill_stores",
              "spill_loads", "threads_per_block", "image")
    main["kernels"] = [dict(name="partition", **{f: main[f] for f in fields}),
                       dict(name="merge", **{f: second[f] for f in fields})]
    main["note"] = note
    return main

def launches_for(p, backend: str, kernel, merge, partition: int, seqs, tokens, parts, heads_per_tile: int):
    """The MLAPrepared of an MLA kernel with this file's argument order (cupy.mla, cupy.mla_tc): one block per
    (query row, tile of heads_per_tile heads, partition), then the merge where a row has several partitions.
    seqs, tokens, parts: per query row, its sequence, the tokens (or index entries) it reads, its partitions."""
    max_parts = int(parts.max())
    up = lambda a: common.to_device(np.ascontiguousarray(a), backend)  # noqa: E731
    rows = p.query.shape[0]
    out = up(np.zeros((rows, p.num_heads, rec.VALUE_DIMS), p.dtype))
    lse = up(np.full((rows, p.num_heads), np.nan, np.float32))
    stats = (rows, p.num_heads, max_parts) if max_parts > 1 else (1,)
    scratch = [up(np.full(shape, np.nan, np.float32))  # a slot the merge reads unwritten poisons the output
               for shape in (stats + ((rec.VALUE_DIMS,) if max_parts > 1 else ()), stats, stats)]
    indices = p.indices if p.sparse else np.full((1, 1), -1, np.int32)
    arrays = [up(a) for a in (p.query, p.latent_cache.view(np.uint8), p.block_tables, indices,
                              seqs.astype(np.int32), tokens.astype(np.int32), parts.astype(np.int32))]
    query, cache, tables, indices_d, row_seq, row_tokens, row_parts = arrays
    args = (out, lse, *scratch, query, cache, tables, np.int32(p.max_blocks_per_seq), np.int32(p.block_size),
            indices_d, np.int32(max(p.topk, 1)), row_seq, row_tokens, row_parts, np.int32(p.num_heads),
            np.float32(p.softmax_scale), np.int32(partition), np.int32(max_parts))
    grid = (rows, -(-p.num_heads // heads_per_tile), max_parts)
    launches = [(kernel, grid, (common.NUM_THREADS,), args, 0)]
    if max_parts > 1:
        merge_args = (out, lse, *scratch, row_parts, np.int32(p.num_heads), np.int32(max_parts))
        launches.append((merge, (rows, p.num_heads), (common.NUM_THREADS,), merge_args, 0))
    return MLAPrepared(launches, out, lse, keep=(*arrays, *scratch), problem=p)
