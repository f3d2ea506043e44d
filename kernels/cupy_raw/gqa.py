"""cupy.gqa: v2 plus one idea: one thread block per (sequence, KV head, partition) serves every query head of
the GQA group, so each K/V element is loaded once per group instead of once per query head.

Idea: the group's queries sit in shared memory; each K vector loaded feeds TILE dot products and each
V vector TILE accumulators (TILE = the group size rounded up to a power of two, at most 8; larger
groups take ceil(group / 8) blocks per KV head). Split-KV partitions and reduce as in v2.
Limits: as v2 (block sizes 1..256, head dims 32..512, float32/float16/bfloat16 queries, caches of the
query's dtype or fp8 e4m3fn/e5m2, every option of common.SUPPORT; any GQA ratio, no context bound) and NVFP4
caches (codecs.cuh's CacheVec<pa::Nvfp4>, the loads cupy.rows makes: 16-byte K vectors of 32 values with
their two block scales, 8-byte V vectors with one; every head dim and option here, kv_scales fp8 only); the
tile shrinks to fit shared memory: 4 query heads per block at head dim 512, gqa.max_tile). With a
window, partitions start at the window's start and blocks before it are never looked up.
Template: paged_attention_gqa<BLOCK_SIZE, HEAD_DIM, TILE, T, ROW_MAPPED, C = T, OPTS = 0> (query type,
row mapping, cache type, pa::OPT_* bitmask; OPTS = 0 is the plain kernel, unchanged machine code).
prepare() returns launch() (partition kernel + reduce) and launch_partition() (the first alone).
Known cost: at head dim 32 with TILE 8 and block size >= 32 ptxas hoists the whole query tile into
registers (255 registers, ~200 bytes of spills per thread); other configurations stay at 64-110 registers.
Verdict: not measured on a GPU yet. Design expectation: the fastest here at GQA serving shapes
(group 4-8): L2->SM traffic falls by the group size and partitions keep the SMs busy; equal to v2 at
group 1 (MHA). compile_report shows group 4 (TILE 4, e.g. Llama-3-8B: 32 query / 8 KV heads).
"""
from __future__ import annotations

import numpy as np

from sandbox.problem.dtypes import NVFP4
from sandbox.variant import Limits

from . import common

PATH = common.KERNEL_DIR / "gqa.cu"
NAME = "cupy.gqa"
LIMITS = Limits(block_sizes=common.POW2_BLOCK_SIZES, head_dims=common.HEAD_DIMS,
                **dict(common.SUPPORT, kv_dtypes=common.SUPPORT["kv_dtypes"] + (NVFP4,)))
MAX_TILE = 8
REPORT_GROUP = 4
TUNABLES = {"threads": common.ATTEND_THREADS}  # the partition kernel's threads per block, the default first


def max_tile(head_dim: int, threads: int = common.NUM_THREADS, partition: int = 512) -> int:
    """The largest tile (a power of two <= MAX_TILE) whose shared memory fits the no-opt-in limit at
    `partition` tokens: the warps' partial outputs grow with tile x head_dim (4 at head dim 512)."""
    tile = MAX_TILE
    while tile > 1 and (4 * common.attend_dynamic_floats(head_dim, tile, partition, threads)
                        + common.attend_static_shared_bytes(head_dim, tile, threads)) > common.SHARED_LIMIT_BYTES:
        tile //= 2
    return tile


def tile_for(group: int, head_dim: int = 128, threads: int = common.NUM_THREADS) -> int:
    """Query heads per block: the group rounded up to a power of two, at most max_tile(head_dim, threads)
    (MAX_TILE = 8 up to head dim 256 at 128 threads)."""
    return min(max_tile(head_dim, threads), 1 << (group - 1).bit_length())


def kernel_name(block_size: int, head_dim: int, tile: int, dtype, row_mapped: bool = False, kv_dtype=None,
                flags: int = 0, threads: int = common.NUM_THREADS) -> str:
    """row_mapped=True is cupy.rows's instantiation of the same kernel."""
    types = common.type_args(dtype, kv_dtype, flags, threads)
    query_type, _, rest = types.partition(", ")
    return (f"paged_attention_gqa<{block_size}, {head_dim}, {tile}, {query_type}, {str(row_mapped).lower()}"
            f"{', ' + rest if rest else ''}>")


def dynamic_shared_bytes(head_dim: int, tile: int, partition: int, threads: int = common.NUM_THREADS) -> int:
    return 4 * common.attend_dynamic_floats(head_dim, tile, partition, threads)


def prepare_split_kv(name, path, kernel_name_for, problem, backend, partition_size, make_args,
                     threads: int = common.NUM_THREADS, row_mapped: bool = False):
    """Shared by gqa, rows and dense: pick the tile, check shared memory, compile, build the two launches
    (the partition kernel with `threads` threads per block). row_mapped (rows, dense): any block size (the
    template's BLOCK_SIZE is common.row_mapped_block's) and any partition size.

    kernel_name_for(block_size, head_dim, tile, dtype, kv_dtype=, flags=, threads=) names the instantiation;
    make_args(scratch, partition, max_partitions) -> (attention kernel arguments, uploaded arrays with
    context_lens last, the option arguments on the device).
    """
    p = problem
    group = p.num_heads // p.num_kv_heads
    tile = tile_for(group, p.head_dim, threads)
    partition = (common.row_partition_for(partition_size) if row_mapped
                 else common.partition_for(p.block_size, partition_size))
    shared = dynamic_shared_bytes(p.head_dim, tile, partition, threads)
    common.check_shared(name, shared, common.attend_static_shared_bytes(p.head_dim, tile, threads),
                        f"partition_size {partition} with {tile} query heads per block and {threads} threads")
    max_partitions = -(-int(common.tokens_read(p).max()) // partition)
    flags = common.option_flags(p)

    def name_for(block_size):
        return kernel_name_for(block_size, p.head_dim, tile, p.dtype, kv_dtype=p.kv_dtype, flags=flags,
                               threads=threads)

    reduce_expression = common.reduce_name(p.head_dim, p.dtype, window=bool(flags & common.OPT_WINDOW), flags=flags)
    flags &= ~common.MERGE_FLAGS  # sinks and lse are the reduce's: the partition kernel is built without them
    expression = name_for(p.block_size)
    block_args = common.POW2_BLOCK_SIZES + ((0,) if row_mapped else ())
    batch = common.cpu_batch([name_for(b) for b in block_args], expression,
                             plain=flags == 0 and p.kv_dtype == p.dtype and threads == common.NUM_THREADS
                             ) + [reduce_expression]
    kernel = common.get_function(backend, path, expression, batch)
    reduce = common.get_function(backend, path, reduce_expression, batch)
    scratch = common.split_kv_scratch(p, max_partitions, backend)
    out = common.output_like(p, backend)
    lse = common.lse_output(p, backend)
    args, uploaded, options = make_args(scratch, partition, max_partitions)
    context_lens = uploaded[-1]
    grid = (p.num_kv_heads * -(-group // tile), p.num_seqs, max_partitions)
    launches = [(kernel, grid, (threads,), args, shared),
                common.reduce_launch(name, reduce, p, out, *scratch, context_lens, partition, max_partitions, lse,
                                     options)]
    return common.SplitKVPrepared(launches, out, keep=tuple(uploaded) + tuple(scratch), out_dtype=p.dtype,
                                  lse=lse if p.options.return_lse else None)


def prepare(problem, backend: str, partition_size: int | None = None, *,
            threads: int = common.NUM_THREADS) -> common.Prepared:
    return prepare_paged(NAME, kernel_name, problem, backend, partition_size, threads)


def prepare_paged(name, kernel_name_for, problem, backend: str, partition_size: int | None,
                  threads: int = common.NUM_THREADS, row_mapped: bool = False) -> common.Prepared:
    """gqa.cu's paged kernel (cupy.gqa or cupy.rows, by kernel_name_for) with the reduce."""
    p = problem

    def make_args(scratch, partition, max_partitions):
        uploaded = common.upload_problem(p, backend)
        query, key_cache, value_cache, block_tables, context_lens = uploaded
        options = common.option_args(p, backend)
        args = (*scratch, query, key_cache, value_cache, block_tables, context_lens, np.int32(p.max_blocks_per_seq),
                np.int32(p.block_size), np.int32(p.num_heads), np.int32(p.num_kv_heads), common.kernel_scale(p),
                np.int32(partition),
                np.int32(max_partitions), *options)
        return args, (*uploaded[:-1], *options, uploaded[-1]), options

    return prepare_split_kv(name, PATH, kernel_name_for, p, backend, partition_size, make_args, threads, row_mapped)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kernel_name_for=kernel_name, kv_dtype=None,
                   flags: int = 0, threads: int = common.NUM_THREADS) -> dict:
    """NVRTC -> cubin resources for group REPORT_GROUP (TILE 4), partition 512 and `threads` threads;
    `kernels` adds the reduce."""
    tile = tile_for(REPORT_GROUP, head_dim, threads)
    return common.split_kv_report(PATH, kernel_name_for(block_size, head_dim, tile, dtype, kv_dtype=kv_dtype,
                                                        flags=flags, threads=threads),
                                  head_dim, dtype, arch, dynamic_shared_bytes(head_dim, tile, 512, threads),
                                  f"group {REPORT_GROUP} (tile {tile}), partition 512; reduce kernel in 'kernels'",
                                  window=bool(flags & common.OPT_WINDOW), threads=threads)
