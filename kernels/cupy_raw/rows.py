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
float32/float16/bfloat16 queries, caches of the query's dtype, fp8 e4m3fn/e5m2 or NVFP4 (every head dim
here: all are multiples of 16), every option of common.SUPPORT with each of them (kv_scales: fp8 only);
any GQA ratio. fp8 keeps the mapping in vectors: 16 fp8 values per 16-byte load, 8 vectors per lane in
flight. NVFP4 (common.cuh's CacheVec<pa::Nvfp4>): K in 16-byte vectors of 32 values (two e4m3 block
scales, one 2-byte load beside the codes; 8-byte vectors of one group where a row is not a multiple of 16
bytes, head dims 80 and 112), 32 values of a row per lane, 8 vectors per lane in flight; V in 8-byte vectors
of 16 values with their scale byte, 16 per lane in flight (a lane accumulates every value it loads:
16 keep the accumulators at fp8's); dequantized in registers (pa::unpack_fp4, shared with cupy.multi), the
staged queries' chunks rotated per 32-value vector so a token's lanes read different banks.
Template and option bitmask: gqa's kernel with ROW_MAPPED = true; launch_partition() as gqa.
Known cost: at head dim 32 one lane holds a whole K row, and ptxas keeps the whole query tile in
registers: 249 registers at TILE 4, 255 with ~530 bytes of spills per thread at TILE 8 (gqa spills
there too); at head dims 64-256 it uses 64-128 registers and spills at most 16 bytes. NVFP4 (sm_90, TILE 4,
float16): 156-165 registers at head dims 64..512 (3 blocks of 128 threads per SM), no spills; 255 at 32.
Design expectation: as fast as gqa at block size >= 32, faster below (its bytes in flight do not
shrink with the block size, gqa's do), so block size 8 within a few percent of 128. Measured: see README.
Traffic (`python -m sandbox traffic cupy.rows --shape 64x4096x32/8x128xbf16:nvfp4 --sample-seqs 1`, block
sizes 1, 16, 128): DRAM reads 302.6 MB against 303.1 MB ideal (1.028x with the 9 MB split-KV scratch
written), bank conflicts only in the partial-output store after the V loop (as with float16); modelled at
88 us (e4m3 120 us, float16 232 us), 73.7% of DRAM bandwidth, bound by shared memory (the staged queries).
"""
from __future__ import annotations

import dataclasses

from . import gqa

PATH = gqa.PATH
NAME = "cupy.rows"
LIMITS = dataclasses.replace(gqa.LIMITS, block_sizes=None)  # any block size: a runtime value past the powers of two
TUNABLES = gqa.TUNABLES


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
