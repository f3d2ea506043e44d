"""cupy.dense: the no-paging baseline: cupy.rows's kernel reading a contiguous per-sequence cache, no block table.

Idea: prepare() (untimed) gathers each sequence into [num_seqs, max_context, num_kv_heads, head_dim]
(slots past a sequence's end are NaN, never read); the kernel computes a token's row directly. The
twin of the best CUDA C design (TWIN: cupy.rows; K/V read once per GQA group, split-KV keeps SMs
busy, bytes in flight independent of the block size), so paged-vs-dense isolates the cost of the
block table. gqa.cu and dense.cu share pa::attend, so the twin does the same arithmetic in the same order.
Limits: as gqa (block sizes 1..256, head dims 32..256, float32/float16, any GQA ratio).
Design expectation: within a few percent of its paged twin at every block size (one 4-byte table
entry per 512 bytes of K/V row pair at block size 1, an L1 hit).
"""
from __future__ import annotations

import numpy as np

from sandbox import backends
from sandbox.check import gather_sequence

from . import common, gqa, rows

PATH = common.KERNEL_DIR / "dense.cu"
NAME = "cupy.dense"
LIMITS = gqa.LIMITS
TWIN = rows  # the paged design this baseline mirrors (bit for bit: tests/test_cupy_family.py)
ROW_MAPPED = TWIN is rows


def kernel_name(block_size: int, head_dim: int, tile: int, dtype) -> str:
    return f"dense_attention<{block_size}, {head_dim}, {tile}, {common.ctype(dtype)}, {str(ROW_MAPPED).lower()}>"


def contiguous_cache(cache: np.ndarray, block_tables: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
    """[num_seqs, max_context, num_kv_heads, head_dim]: each sequence's tokens in order, NaN past its end."""
    max_context = int(context_lens.max())
    out = np.full((len(context_lens), max_context) + cache.shape[2:], np.nan, dtype=cache.dtype)
    for s, n in enumerate(context_lens):
        out[s, :n] = gather_sequence(cache, block_tables[s], int(n))
    return out


def prepare(problem, backend: str, partition_size: int | None = None) -> common.Prepared:
    p = problem

    def make_args(scratch, partition, max_partitions):
        keys = contiguous_cache(p.key_cache, p.block_tables, p.context_lens)
        values = contiguous_cache(p.value_cache, p.block_tables, p.context_lens)
        uploaded = tuple(backends.to_device(np.ascontiguousarray(a), backend)
                         for a in (p.query, keys, values, p.context_lens))
        query, key_cache, value_cache, context_lens = uploaded
        args = (*scratch, query, key_cache, value_cache, context_lens, np.int32(keys.shape[1]),
                np.int32(p.num_heads), np.int32(p.num_kv_heads), np.float32(p.softmax_scale), np.int32(partition),
                np.int32(max_partitions))
        return args, uploaded

    return gqa.prepare_split_kv(NAME, PATH, kernel_name, p, backend, partition_size, make_args)


def compile_report(block_size: int, head_dim: int, dtype, arch: str) -> dict:
    """As gqa.compile_report: group 4 (TILE 4), partition 512; `kernels` adds the reduce."""
    tile = gqa.tile_for(gqa.REPORT_GROUP)
    return common.split_kv_report(PATH, kernel_name(block_size, head_dim, tile, dtype), head_dim, dtype, arch,
                                  gqa.dynamic_shared_bytes(head_dim, tile, 512),
                                  f"group {gqa.REPORT_GROUP} (tile {tile}), partition 512, contiguous cache; "
                                  "reduce kernel in 'kernels'")
