"""Input validation shared by sandbox.run and DecodeProblem: every failure names the argument and the bound."""
from __future__ import annotations

import math

import numpy as np

from .dtypes import FP8_DTYPES, QUERY_DTYPES
from .options import PLAIN, AttentionOptions

SUPPORTED_DTYPES = QUERY_DTYPES
CACHE_DTYPES = QUERY_DTYPES + FP8_DTYPES


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _check_array(name: str, value, ndim: int) -> None:
    _require(isinstance(value, np.ndarray), f"{name} must be a NumPy array, got {type(value).__name__}")
    _require(value.ndim == ndim, f"{name} must have {ndim} dimensions, got shape {value.shape}")


def _check_query_start(query_start, num_seqs: int, total_q: int, context_lens) -> np.ndarray:
    """query lengths [num_seqs] from query_start int32 [num_seqs + 1] (FlashAttention's cu_seqlens_q)."""
    _check_array("query_start", query_start, 1)
    _require(query_start.dtype == np.int32, f"query_start.dtype must be int32, got {query_start.dtype.name}")
    _require(query_start.shape[0] == num_seqs + 1,
             f"query_start has {query_start.shape[0]} entries, expected num_seqs + 1 = {num_seqs + 1} (from context_lens)")
    _require(int(query_start[0]) == 0, f"query_start[0] must be 0, got {int(query_start[0])}")
    _require(int(query_start[-1]) == total_q,
             f"query_start[{num_seqs}] = {int(query_start[-1])} must equal the query's {total_q} rows")
    lens = np.diff(query_start.astype(np.int64))
    bad = np.flatnonzero((lens < 1) | (lens > context_lens))
    if bad.size:
        s = int(bad[0])
        raise ValueError(f"query_start[{s + 1}] - query_start[{s}] = {int(lens[s])} query tokens for sequence {s}: "
                         f"must be in [1, context_lens[{s}] = {int(context_lens[s])}]")
    return lens


def first_read_tokens(context_lens: np.ndarray, query_lens: np.ndarray, window_left: int) -> np.ndarray:
    """int64 [num_seqs]: the first token any query token of each sequence reads (0 without a window)."""
    if window_left < 0:
        return np.zeros(len(context_lens), dtype=np.int64)
    first_position = context_lens.astype(np.int64) - query_lens
    return np.maximum(first_position - window_left, 0)


def validate_decode_inputs(query, key_cache, value_cache, block_tables, context_lens, scale=None,
                           options: AttentionOptions = PLAIN, query_start=None) -> None:
    """Raise ValueError (naming the argument, index and bound) unless the inputs form a valid problem.

    query [num_seqs, num_heads, head_dim] (or [total_q, ...] with query_start int32 [num_seqs + 1]);
    key_cache/value_cache [num_blocks, block_size, num_kv_heads, head_dim] of the query's dtype or fp8;
    block_tables [num_seqs, max_blocks_per_seq] int32; context_lens [num_seqs] int32.
    A table entry may be -1 (or anything) only for blocks no query token reads: past the last
    block, or wholly before the window of the sequence's first query token.
    """
    _check_array("query", query, 3)
    _check_array("key_cache", key_cache, 4)
    _check_array("value_cache", value_cache, 4)
    _check_array("block_tables", block_tables, 2)
    _check_array("context_lens", context_lens, 1)

    _require(query.dtype.name in SUPPORTED_DTYPES,
             f"query.dtype must be one of {SUPPORTED_DTYPES}, got {query.dtype.name}")
    _require(key_cache.dtype.name in CACHE_DTYPES,
             f"key_cache.dtype must be the query's dtype ({query.dtype.name}) or one of {FP8_DTYPES}, got {key_cache.dtype.name}")
    _require(value_cache.dtype == key_cache.dtype,
             f"value_cache.dtype must equal key_cache.dtype ({key_cache.dtype.name}), got {value_cache.dtype.name}")
    _require(key_cache.dtype == query.dtype or key_cache.dtype.name in FP8_DTYPES,
             f"key_cache.dtype {key_cache.dtype.name} with query.dtype {query.dtype.name} is not allowed: "
             f"the cache must have the query's dtype or be fp8 ({', '.join(FP8_DTYPES)})")
    _require(value_cache.shape == key_cache.shape,
             f"value_cache.shape {value_cache.shape} must equal key_cache.shape {key_cache.shape}")
    for name, arr in (("block_tables", block_tables), ("context_lens", context_lens)):
        _require(arr.dtype == np.int32, f"{name}.dtype must be int32, got {arr.dtype.name}")

    num_seqs = context_lens.shape[0]
    total_q, num_heads, head_dim = query.shape
    num_blocks, block_size, num_kv_heads, cache_head_dim = key_cache.shape
    _require(num_seqs >= 1, f"context_lens must hold at least one sequence, got shape {context_lens.shape}")
    _require(num_heads >= 1 and head_dim >= 1, f"query must have num_heads >= 1 and head_dim >= 1, got shape {query.shape}")
    _require(num_blocks >= 1 and block_size >= 1 and num_kv_heads >= 1,
             f"key_cache must have num_blocks, block_size, num_kv_heads >= 1, got shape {key_cache.shape}")
    _require(cache_head_dim == head_dim, f"key_cache head_dim {cache_head_dim} must equal query head_dim {head_dim}")
    _require(num_heads % num_kv_heads == 0,
             f"num_heads ({num_heads}, from query) must be a multiple of num_kv_heads ({num_kv_heads}, from key_cache)")
    if query_start is None:
        _require(total_q == num_seqs, f"query has {total_q} rows, expected num_seqs = {num_seqs} (from context_lens); "
                                      "pass query_start for several query tokens per sequence")
    _require(block_tables.shape[0] == num_seqs,
             f"block_tables has {block_tables.shape[0]} rows, expected num_seqs = {num_seqs} (from context_lens)")
    max_blocks_per_seq = block_tables.shape[1]
    _require(max_blocks_per_seq >= 1, f"block_tables must have at least one column, got shape {block_tables.shape}")

    capacity = max_blocks_per_seq * block_size
    bad = np.flatnonzero((context_lens < 1) | (context_lens > capacity))
    if bad.size:
        s = int(bad[0])
        raise ValueError(f"context_lens[{s}] = {int(context_lens[s])} is out of range [1, {capacity}] "
                         f"(max_blocks_per_seq {max_blocks_per_seq} x block_size {block_size})")
    query_lens = (np.ones(num_seqs, dtype=np.int64) if query_start is None
                  else _check_query_start(query_start, num_seqs, total_q, context_lens))

    if scale is not None:
        _require(isinstance(scale, (int, float, np.floating, np.integer)) and math.isfinite(float(scale)) and float(scale) != 0.0,
                 f"scale must be a finite non-zero number, got {scale!r}")
    _require(isinstance(options, AttentionOptions), f"options must be an AttentionOptions, got {type(options).__name__}")
    options.validate(num_heads)

    first_block = first_read_tokens(context_lens, query_lens, options.window_left) // block_size
    end_block = (context_lens.astype(np.int64) + block_size - 1) // block_size
    columns = np.arange(max_blocks_per_seq)[None, :]
    read = (columns >= first_block[:, None]) & (columns < end_block[:, None])
    out_of_range = read & ((block_tables < 0) | (block_tables >= num_blocks))
    if out_of_range.any():
        s, i = (int(x) for x in np.argwhere(out_of_range)[0])
        where = " (it holds tokens inside the window)" if options.window_left >= 0 and block_tables[s, i] < 0 else ""
        raise ValueError(f"block_tables[{s}, {i}] = {int(block_tables[s, i])} is out of range for {num_blocks} blocks{where}")


def validate_write_inputs(key_cache, value_cache, key, value, slot_mapping, k_scale=1.0, v_scale=1.0) -> None:
    """Raise ValueError unless the inputs form a valid cache write.

    key_cache/value_cache [num_blocks, block_size, num_kv_heads, head_dim]; key/value
    [num_tokens, num_kv_heads, head_dim] of the caches' dtype, or of any query dtype for an fp8
    cache; slot_mapping [num_tokens] integer, each slot < 0 (skipped) or < num_blocks * block_size.
    """
    _check_array("key_cache", key_cache, 4)
    _check_array("value_cache", value_cache, 4)
    _check_array("key", key, 3)
    _check_array("value", value, 3)
    _check_array("slot_mapping", slot_mapping, 1)
    _require(key_cache.dtype.name in CACHE_DTYPES,
             f"key_cache.dtype must be one of {CACHE_DTYPES}, got {key_cache.dtype.name}")
    _require(value_cache.dtype == key_cache.dtype,
             f"value_cache.dtype must equal key_cache.dtype ({key_cache.dtype.name}), got {value_cache.dtype.name}")
    _require(value.dtype == key.dtype, f"value.dtype must equal key.dtype ({key.dtype.name}), got {value.dtype.name}")
    if key_cache.dtype.name in FP8_DTYPES:
        _require(key.dtype.name in SUPPORTED_DTYPES,
                 f"key.dtype must be one of {SUPPORTED_DTYPES} for an fp8 cache, got {key.dtype.name}")
    else:
        _require(key.dtype == key_cache.dtype, f"key.dtype must equal key_cache.dtype ({key_cache.dtype.name}), got {key.dtype.name}")
    AttentionOptions(k_scale=k_scale, v_scale=v_scale).validate()
    _require(value_cache.shape == key_cache.shape,
             f"value_cache.shape {value_cache.shape} must equal key_cache.shape {key_cache.shape}")
    _require(value.shape == key.shape, f"value.shape {value.shape} must equal key.shape {key.shape}")
    _require(key.shape[1:] == key_cache.shape[2:],
             f"key.shape[1:] {key.shape[1:]} must equal key_cache's (num_kv_heads, head_dim) {key_cache.shape[2:]}")
    _require(slot_mapping.dtype.kind in "iu", f"slot_mapping.dtype must be an integer type, got {slot_mapping.dtype.name}")
    _require(slot_mapping.shape[0] == key.shape[0],
             f"slot_mapping has {slot_mapping.shape[0]} entries, expected num_tokens = {key.shape[0]} (from key)")
    num_slots = key_cache.shape[0] * key_cache.shape[1]
    bad = np.flatnonzero(slot_mapping >= num_slots)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"slot_mapping[{i}] = {int(slot_mapping[i])} is out of range for {num_slots} slots "
                         f"({key_cache.shape[0]} blocks x block_size {key_cache.shape[1]})")
    used = slot_mapping[slot_mapping >= 0]
    if np.unique(used).size != used.size:
        values, counts = np.unique(used, return_counts=True)
        raise ValueError(f"slot_mapping writes slot {int(values[counts > 1][0])} more than once (the result would depend on thread order)")
