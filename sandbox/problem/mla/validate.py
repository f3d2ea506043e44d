"""Validation of MLA inputs (sandbox.run_mla and MLAProblem): every failure names the argument and the bound.

What a valid sparse index is (the rule, stated once): indices[row, k] is -1 (invalid: skipped) or a
slot `block * block_size + offset` of the paged cache (DeepSeek V3.2 / FlashMLA address the cache
directly) that holds a token the row may see under the dense rule: token t <= p of the row's own
sequence (p = L_s - q_s + j, its position), so slot = block_tables[s, t // block_size] * block_size
+ t % block_size. A row's valid indices are distinct; their order is free; -1 may repeat and sit
anywhere. So a sparse row reads a subset of what its dense twin reads, never another sequence's token,
never a future one, never a slot past a sequence's last token.
"""
from __future__ import annotations

import math

import numpy as np

from . import record as rec
from ..validate import _check_array, _check_query_start, _require, dtype_text
from ...errors import RefusedRequest

MLA_QUERY_DTYPES = ("bfloat16", "float16")


def validate_mla_inputs(query, latent_cache, block_tables, context_lens, scale=None, query_start=None,
                        indices=None) -> None:
    """Raise ValueError (naming the argument, index and bound) unless the inputs form a valid MLA problem.

    query [total_q, num_heads, 576] bfloat16 | float16; latent_cache [num_blocks, block_size, 576] of
    the query's dtype, or uint8 [num_blocks, block_size, 656] fp8 records; block_tables [num_seqs,
    max_blocks_per_seq] int32; context_lens [num_seqs] int32; query_start None or int32 [num_seqs + 1];
    indices None (dense) or int32 [total_q, topk] (module docstring).
    """
    _check_array("query", query, 3)
    _check_array("latent_cache", latent_cache, 3)
    _check_array("block_tables", block_tables, 2)
    _check_array("context_lens", context_lens, 1)
    _require(query.dtype.name in MLA_QUERY_DTYPES,
             f"query.dtype must be one of {MLA_QUERY_DTYPES}, got {query.dtype.name}")
    _require(query.shape[2] == rec.LATENT_DIMS,
             f"query must have {rec.LATENT_DIMS} dims per head (512 latent + 64 RoPE), got shape {query.shape}")
    if latent_cache.dtype == np.uint8:
        _require(latent_cache.shape[2] == rec.RECORD_BYTES,
                 f"latent_cache of uint8 fp8 records must have {rec.RECORD_BYTES} bytes per token, "
                 f"got shape {latent_cache.shape}")
    else:
        _require(latent_cache.dtype == query.dtype,
                 f"latent_cache.dtype must be the query's ({query.dtype.name}) or uint8 (fp8 records), "
                 f"got {latent_cache.dtype.name}")
        _require(latent_cache.shape[2] == rec.LATENT_DIMS,
                 f"latent_cache must have {rec.LATENT_DIMS} dims per token, got shape {latent_cache.shape}")
    for name, arr in (("block_tables", block_tables), ("context_lens", context_lens)):
        _require(arr.dtype == np.int32, f"{name}.dtype must be int32, got {dtype_text(arr.dtype)}")

    num_seqs = context_lens.shape[0]
    total_q, num_heads = query.shape[:2]
    num_blocks, block_size = latent_cache.shape[:2]
    _require(num_seqs >= 1, f"context_lens must hold at least one sequence, got shape {context_lens.shape}")
    _require(num_heads >= 1, f"query must have num_heads >= 1, got shape {query.shape}")
    _require(num_blocks >= 1 and block_size >= 1,
             f"latent_cache must have num_blocks >= 1 and block_size >= 1, got shape {latent_cache.shape}")
    if query_start is None:
        _require(total_q == num_seqs, f"query has {total_q} rows, expected num_seqs = {num_seqs} (from context_lens); "
                                      "pass query_start for several query tokens per sequence")
    _require(block_tables.shape[0] == num_seqs,
             f"block_tables has {block_tables.shape[0]} rows, expected num_seqs = {num_seqs} (from context_lens)")
    max_blocks = block_tables.shape[1]
    _require(max_blocks >= 1, f"block_tables must have at least one column, got shape {block_tables.shape}")
    capacity = max_blocks * block_size
    bad = np.flatnonzero((context_lens < 1) | (context_lens > capacity))
    if bad.size:
        s = int(bad[0])
        raise RefusedRequest(f"context_lens[{s}] = {int(context_lens[s])} is out of range [1, {capacity}] "
                             f"(max_blocks_per_seq {max_blocks} x block_size {block_size})")
    query_lens = (np.ones(num_seqs, dtype=np.int64) if query_start is None
                  else _check_query_start(query_start, num_seqs, total_q, context_lens))
    if scale is not None:
        _require(isinstance(scale, (int, float, np.floating, np.integer)) and math.isfinite(float(scale))
                 and float(scale) != 0.0, f"scale must be a finite non-zero number, got {scale!r}")

    end_block = (context_lens.astype(np.int64) + block_size - 1) // block_size
    read = np.arange(max_blocks)[None, :] < end_block[:, None]
    out_of_range = read & ((block_tables < 0) | (block_tables >= num_blocks))
    if out_of_range.any():
        s, i = (int(x) for x in np.argwhere(out_of_range)[0])
        raise RefusedRequest(f"block_tables[{s}, {i}] = {int(block_tables[s, i])} is out of range for {num_blocks} blocks")
    if indices is not None:
        _check_indices(indices, block_tables, context_lens, query_lens, block_size, num_blocks)


def row_positions(context_lens: np.ndarray, query_lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sequence int64 [total_q], position int64 [total_q]) of every query row: p = L_s - q_s + j."""
    seqs = np.repeat(np.arange(len(context_lens)), query_lens)
    starts = np.concatenate([[0], np.cumsum(query_lens)])[:-1]
    j = np.arange(int(np.sum(query_lens))) - np.repeat(starts, query_lens)
    return seqs, context_lens.astype(np.int64)[seqs] - np.asarray(query_lens, np.int64)[seqs] + j


def token_slots(block_table: np.ndarray, context_len: int, block_size: int) -> np.ndarray:
    """int64 [context_len]: the cache slot of each token 0..context_len-1 of one sequence."""
    t = np.arange(context_len)
    return block_table[t // block_size].astype(np.int64) * block_size + t % block_size


def _check_indices(indices, block_tables, context_lens, query_lens, block_size: int, num_blocks: int) -> None:
    total_q = int(np.sum(query_lens))
    _check_array("indices", indices, 2)
    _require(indices.dtype == np.int32, f"indices.dtype must be int32, got {dtype_text(indices.dtype)}")
    _require(indices.shape[0] == total_q,
             f"indices has {indices.shape[0]} rows, expected one per query row ({total_q})")
    _require(indices.shape[1] >= 1, f"indices must have topk >= 1 columns, got shape {indices.shape}")
    below = np.argwhere(indices < -1)
    if below.size:
        r, k = (int(x) for x in below[0])
        raise RefusedRequest(f"indices[{r}, {k}] = {int(indices[r, k])}: an index is -1 (invalid) or a cache slot "
                             f"block * block_size + offset >= 0")
    seqs, positions = row_positions(context_lens, query_lens)
    num_slots = num_blocks * block_size
    for s in range(len(context_lens)):
        rows = np.flatnonzero(seqs == s)
        # first[slot]: the first token of sequence s stored at `slot` (num_slots + 1 where none is)
        first = np.full(num_slots + 1, np.iinfo(np.int64).max, np.int64)
        slots = token_slots(block_tables[s], int(context_lens[s]), block_size)
        np.minimum.at(first, slots, np.arange(len(slots)))
        mine = indices[rows].astype(np.int64)
        valid = mine >= 0
        seen = first[np.minimum(mine, num_slots)]  # slots past the cache land on the sentinel
        bad = np.argwhere(valid & (seen > positions[rows][:, None]))
        if bad.size:
            i, k = (int(x) for x in bad[0])
            r, slot = int(rows[i]), int(mine[i, k])
            where = (f"slot {slot} is past the cache's {num_slots} slots" if slot >= num_slots else
                     f"slot {slot} (block {slot // block_size}, offset {slot % block_size}) "
                     + ("holds no token of sequence " + str(s) if seen[i, k] > 2**62
                        else f"holds token {int(seen[i, k])} of sequence {s}, after the row's position"))
            raise RefusedRequest(f"indices[{r}, {k}] = {slot}: a valid index must be the slot of a token t <= "
                                 f"{int(positions[r])} (the row's position) of sequence {s}; {where}")
        ordered = np.sort(mine, axis=1)
        twice = np.argwhere((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0))
        if twice.size:
            i, k = (int(x) for x in twice[0])
            r, slot = int(rows[i]), int(ordered[i, k])
            at = np.flatnonzero(indices[r] == slot).tolist()
            raise RefusedRequest(f"indices[{r}] holds slot {slot} more than once (at columns {at}): "
                                 "valid indices of a row must be distinct")
