"""cupy.rows: gqa with a thread mapping that ignores the block size, and a chunk's loads issued before its math.

Idea: in gqa (vLLM's mapping) the block size decides how many lanes share a token and how many
bytes a warp has in flight: at block size 1 a warp holds one 256-byte K row per table lookup and
each V loop step waits on a lookup and a 512-byte load. Here every token row is found through the
table on its own (kv.row(t), an L1 hit), a fixed number of lanes shares a row (4 vectors per lane),
and each warp issues 8 vectors per lane (4 KiB at head dim 128 in fp16) for K and for V before
using any: the block size only changes index arithmetic. Same grid, GQA tile, split-KV partitions
and reduce as gqa (one kernel template, gqa.cu, ROW_MAPPED = true).
Limits: as gqa but any block size 1..4096 (powers of two up to 256 compiled in, every other size a
runtime value in one instantiation; partitions of 512 tokens whatever the block size), head dims 32..512,
float32/float16/bfloat16 queries, caches of the query's dtype or fp8 e4m3fn/e5m2, every option of
common.SUPPORT; any GQA ratio). fp8 keeps the mapping in
vectors: 16 fp8 values per 16-byte load, 8 vectors per lane in flight. Template and option bitmask:
gqa's kernel with ROW_MAPPED = true; launch_partition() as gqa.
Known cost: at head dim 32 one lane holds a whole K row, and ptxas keeps the whole query tile in
registers: 249 registers at TILE 4, 255 with ~530 bytes of spills per thread at TILE 8 (gqa spills
there too); at head dims 64-256 it uses 64-128 registers and spills at most 16 bytes.
Design expectation: as fast as gqa at block size >= 32, faster below (its bytes in flight do not
shrink with the block size, gqa's do), so block size 8 within a few percent of 128. Measured: see README.
"""
from __future__ import annotations

import dataclasses

from . import gqa

PATH = gqa.PATH
NAME = "cupy.rows"
LIMITS = dataclasses.replace(gqa.LIMITS, block_sizes=None)  # any block size: a runtime value past the powers of two
TUNABLES = gqa.TUNABLES
# Global load requests a warp has in flight before their math (the performance model's Little's law): the
# row mapping issues 8 16-byte vectors per lane (UK passes x K_VECS in common.cuh's rows path) for K, then for V.
LOADS_IN_FLIGHT = 8


def kernel_name(block_size: int, head_dim: int, tile: int, dtype, kv_dtype=None, flags: int = 0,
                threads: int = gqa.common.NUM_THREADS) -> str:
    """Block sizes other than the powers of two up to 256 share the runtime-block-size instantiation (0)."""
    return gqa.kernel_name(gqa.common.row_mapped_block(block_size), head_dim, tile, dtype, row_mapped=True,
                           kv_dtype=kv_dtype, flags=flags,
                           threads=threads)


def prepare(problem, backend: str, partition_size: int | None = None, *, threads: int = gqa.common.NUM_THREADS):
    return gqa.prepare_paged(NAME, kernel_name, problem, backend, partition_size, threads, row_mapped=True)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kv_dtype=None, flags: int = 0,
                   threads: int = gqa.common.NUM_THREADS) -> dict:
    """As gqa.compile_report (group 4, TILE 4, partition 512), for the row-mapped instantiation."""
    return gqa.compile_report(block_size, head_dim, dtype, arch, kernel_name_for=kernel_name, kv_dtype=kv_dtype,
                              flags=flags, threads=threads)
