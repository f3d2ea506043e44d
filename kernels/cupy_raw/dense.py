"""cupy.dense: the no-paging baseline: cupy.rows's kernel reading a contiguous per-sequence cache, no block table.

Idea: prepare() (untimed) gathers each sequence into [num_seqs, max_context, num_kv_heads, head_dim]
(slots past a sequence's end are NaN, never read); the kernel computes a token's row directly. The
twin of the best CUDA C design (TWIN: cupy.rows; K/V read once per GQA group, split-KV keeps SMs
busy, bytes in flight independent of the block size), so paged-vs-dense isolates the cost of the
block table. gqa.cu and dense.cu share pa::attend, so the twin does the same arithmetic in the same order.
Limits: as cupy.rows (any block size 1..4096, head dims 32..512, float32/float16/bfloat16 queries,
caches of the query's dtype, fp8 e4m3fn/e5m2 with per-tensor or per-token scales or NVFP4, every option;
any GQA ratio). Per-token scales and NVFP4 block scales are gathered with their rows. With a window only
the window's tokens are gathered (the slots before it stay NaN and are never read).
Template: dense_attention<BLOCK_SIZE, HEAD_DIM, TILE, T, ROW_MAPPED, C = T, OPTS = 0>, as gqa's (OPTS = 0:
the plain kernel, unchanged machine code); launch_partition() as gqa.
Design expectation: within a few percent of its paged twin at every block size (one 4-byte table
entry per 512 bytes of K/V row pair at block size 1, an L1 hit).
"""
from __future__ import annotations

import numpy as np


from . import common, gqa, rows

PATH = common.KERNEL_DIR / "dense.cu"
NAME = "cupy.dense"
LIMITS = rows.LIMITS
TWIN = rows  # the paged design this baseline mirrors (bit for bit: tests/kernels/test_cupy_family.py)
ROW_MAPPED = TWIN is rows
TUNABLES = gqa.TUNABLES


def kernel_name(block_size: int, head_dim: int, tile: int, dtype, kv_dtype=None, flags: int = 0,
                threads: int = common.NUM_THREADS) -> str:
    types = common.type_args(dtype, kv_dtype, flags, threads)
    query_type, _, rest = types.partition(", ")
    block_size = common.row_mapped_block(block_size) if ROW_MAPPED else block_size
    return (f"dense_attention<{block_size}, {head_dim}, {tile}, {query_type}, {str(ROW_MAPPED).lower()}"
            f"{', ' + rest if rest else ''}>")


def contiguous_cache(cache: np.ndarray, block_tables: np.ndarray, context_lens: np.ndarray,
                     first=None) -> np.ndarray:
    """[num_seqs, max_context, num_kv_heads, head_dim]: each sequence's tokens in order, NaN past its end
    (an NVFP4 cache's uint8 codes cannot hold NaN: code 0 there, beside NaN block scales).

    first (optional, [num_seqs]): only tokens first[s].. are gathered (a window); the slots before stay NaN,
    and the table entries of blocks wholly before them (-1 when freed) are never read.
    """
    block_size = cache.shape[1]
    max_context = int(context_lens.max())
    fill = 0 if cache.dtype == np.uint8 else np.nan
    out = np.full((len(context_lens), max_context) + cache.shape[2:], fill, dtype=cache.dtype)
    for s, n in enumerate(context_lens):
        tokens = np.arange(0 if first is None else int(first[s]), int(n))
        out[s, tokens] = cache[block_tables[s, tokens // block_size], tokens % block_size]
    return out


def prepare(problem, backend: str, partition_size: int | None = None, *,
            threads: int = common.NUM_THREADS) -> common.Prepared:
    p = problem

    def make_args(scratch, partition, max_partitions):
        first = p.first_read_tokens()
        keys = contiguous_cache(p.key_cache, p.block_tables, p.context_lens, first)
        values = contiguous_cache(p.value_cache, p.block_tables, p.context_lens, first)
        uploaded = tuple(common.to_device(a, backend) for a in (p.query, keys, values, p.context_lens))
        query, key_cache, value_cache, context_lens = uploaded
        # Per-token scales and NVFP4 block scales follow their rows into the contiguous layout (flattened
        # [seq, token, KV head(, group)]); e4m3 block scales go as their bytes, as the option table passes them.
        scales = {name: contiguous_cache(getattr(p.options, name), p.block_tables, p.context_lens, first).reshape(-1)
                  for name in ("k_scales", "v_scales") if getattr(p.options, name) is not None}
        scales.update({name: contiguous_cache(getattr(p.options, name), p.block_tables, p.context_lens,
                                              first).view(np.uint8).reshape(-1)
                       for name in ("k_block_scales", "v_block_scales") if getattr(p.options, name) is not None})
        options = common.option_args(p, backend, replace=scales)
        args = (*scratch, query, key_cache, value_cache, context_lens, np.int32(keys.shape[1]),
                np.int32(p.block_size), np.int32(p.num_heads), np.int32(p.num_kv_heads), common.kernel_scale(p),
                np.int32(partition), np.int32(max_partitions), *options)
        return args, (query, key_cache, value_cache, *options, context_lens), options

    return gqa.prepare_split_kv(NAME, PATH, kernel_name, p, backend, partition_size, make_args, threads,
                                row_mapped=ROW_MAPPED)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kv_dtype=None, flags: int = 0,
                   threads: int = common.NUM_THREADS) -> dict:
    """As gqa.compile_report: group 4 (TILE 4), partition 512, `threads` threads; `kernels` adds the reduce."""
    tile = gqa.tile_for(gqa.REPORT_GROUP, head_dim, threads)
    return common.split_kv_report(PATH, kernel_name(block_size, head_dim, tile, dtype, kv_dtype, flags, threads),
                                  head_dim, dtype, arch, gqa.dynamic_shared_bytes(head_dim, tile, 512, threads),
                                  f"group {gqa.REPORT_GROUP} (tile {tile}), partition 512, contiguous cache; "
                                  "reduce kernel in 'kernels'", window=bool(flags & common.OPT_WINDOW),
                                  threads=threads)
