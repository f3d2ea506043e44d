"""cupy.gqa: v2 plus one idea: one thread block per (sequence, KV head, partition) serves every query head of
the GQA group, so each K/V element is loaded once per group instead of once per query head.

Idea: the group's queries sit in shared memory; each K vector loaded feeds TILE dot products and each
V vector TILE accumulators (TILE = the group size rounded up to a power of two, at most 8; larger
groups take ceil(group / 8) blocks per KV head). Split-KV partitions and reduce as in v2.
Limits: as v2 (block sizes 1..256, head dims 32..256, float32/float16, any GQA ratio, no context bound).
Known cost: at head dim 32 with TILE 8 and block size >= 32 ptxas hoists the whole query tile into
registers (255 registers, ~200 bytes of spills per thread); other configurations stay at 64-110 registers.
Verdict: not measured on a GPU yet. Design expectation: the fastest here at GQA serving shapes
(group 4-8): L2->SM traffic falls by the group size and partitions keep the SMs busy; equal to v2 at
group 1 (MHA). compile_report shows group 4 (TILE 4, e.g. Llama-3-8B: 32 query / 8 KV heads).
"""
from __future__ import annotations

import numpy as np

from sandbox.variant import Limits

from . import common

PATH = common.KERNEL_DIR / "gqa.cu"
NAME = "cupy.gqa"
LIMITS = Limits(block_sizes=common.POW2_BLOCK_SIZES, head_dims=common.HEAD_DIMS)
MAX_TILE = 8
REPORT_GROUP = 4


def tile_for(group: int) -> int:
    """Query heads per block: the group rounded up to a power of two, at most MAX_TILE."""
    return min(MAX_TILE, 1 << (group - 1).bit_length())


def kernel_name(block_size: int, head_dim: int, tile: int, dtype, row_mapped: bool = False) -> str:
    """row_mapped=True is cupy.rows's instantiation of the same kernel."""
    return f"paged_attention_gqa<{block_size}, {head_dim}, {tile}, {common.ctype(dtype)}, {str(row_mapped).lower()}>"


def dynamic_shared_bytes(head_dim: int, tile: int, partition: int) -> int:
    return 4 * common.attend_dynamic_floats(head_dim, tile, partition)


def prepare_split_kv(name, path, kernel_name_for, problem, backend, partition_size, make_args):
    """Shared by gqa and dense: pick the tile, check shared memory, compile, build the two launches.

    make_args(scratch, partition, max_partitions) -> (attention kernel arguments, uploaded arrays with
    context_lens last).
    """
    p = problem
    group = p.num_heads // p.num_kv_heads
    tile = tile_for(group)
    partition = common.partition_for(p.block_size, partition_size)
    shared = dynamic_shared_bytes(p.head_dim, tile, partition)
    common.check_shared(name, shared, common.attend_static_shared_bytes(p.head_dim, tile),
                        f"partition_size {partition} with {tile} query heads per block")
    max_partitions = -(-int(p.context_lens.max()) // partition)
    batch = [kernel_name_for(b, p.head_dim, tile, p.dtype) for b in common.POW2_BLOCK_SIZES] + \
        [common.reduce_name(p.head_dim, p.dtype)]
    kernel = common.get_function(backend, path, kernel_name_for(p.block_size, p.head_dim, tile, p.dtype), batch)
    reduce = common.get_function(backend, path, common.reduce_name(p.head_dim, p.dtype), batch)
    scratch = common.split_kv_scratch(p, max_partitions, backend)
    out = common.output_like(p, backend)
    args, uploaded = make_args(scratch, partition, max_partitions)
    context_lens = uploaded[-1]
    grid = (p.num_kv_heads * -(-group // tile), p.num_seqs, max_partitions)
    launches = [(kernel, grid, (common.NUM_THREADS,), args, shared),
                common.reduce_launch(name, reduce, p, out, *scratch, context_lens, partition, max_partitions)]
    return common.Prepared(launches, out, keep=tuple(uploaded) + tuple(scratch))


def prepare(problem, backend: str, partition_size: int | None = None) -> common.Prepared:
    return prepare_paged(NAME, kernel_name, problem, backend, partition_size)


def prepare_paged(name, kernel_name_for, problem, backend: str, partition_size: int | None) -> common.Prepared:
    """gqa.cu's paged kernel (cupy.gqa or cupy.rows, by kernel_name_for) with the reduce."""
    p = problem

    def make_args(scratch, partition, max_partitions):
        uploaded = common.upload_problem(p, backend)
        query, key_cache, value_cache, block_tables, context_lens = uploaded
        args = (*scratch, query, key_cache, value_cache, block_tables, context_lens, np.int32(p.max_blocks_per_seq),
                np.int32(p.num_heads), np.int32(p.num_kv_heads), np.float32(p.softmax_scale), np.int32(partition),
                np.int32(max_partitions))
        return args, uploaded

    return prepare_split_kv(name, PATH, kernel_name_for, p, backend, partition_size, make_args)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kernel_name_for=kernel_name) -> dict:
    """NVRTC -> cubin resources for group REPORT_GROUP (TILE 4) and partition 512; `kernels` adds the reduce."""
    tile = tile_for(REPORT_GROUP)
    return common.split_kv_report(PATH, kernel_name_for(block_size, head_dim, tile, dtype), head_dim, dtype, arch,
                                  dynamic_shared_bytes(head_dim, tile, 512),
                                  f"group {REPORT_GROUP} (tile {tile}), partition 512; reduce kernel in 'kernels'")
