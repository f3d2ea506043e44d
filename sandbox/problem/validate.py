"""Input validation shared by sandbox.run and DecodeProblem: every failure names the argument and the bound."""
from __future__ import annotations

import math

import numpy as np

from .dtypes import FP8_DTYPES, NVFP4, QUERY_DTYPES, kv_format
from .option_schema import Context
from .options import PLAIN, AttentionOptions
from ..errors import RefusedRequest

SUPPORTED_DTYPES = QUERY_DTYPES
CACHE_DTYPES = QUERY_DTYPES + FP8_DTYPES
QUANTIZED = f"one of {', '.join(FP8_DTYPES)} or uint8 (nvfp4: two e2m1 codes per byte)"
# Tokens per cache block: any integer in 1..MAX_BLOCK_SIZE is a valid problem (hybrid models in vLLM use
# blocks of 528, 2112 and 4192 tokens; FlashMLA's tests 2, 61, 69, 576). A variant that needs powers of
# two declares them in its Limits.
MAX_BLOCK_SIZE = 4096
POW2_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# What the strategy and check draw for a variant that takes any block size (Limits.block_sizes None): the
# powers of two and as many sizes that are not (FlashAttention 3 takes 1, 2, 3 or 19; FlashMLA's tests use
# 2, 61, 69; hybrid models in vLLM use blocks of 528 and 2112 tokens). Any size in 1..4096 is valid.
OTHER_BLOCK_SIZES = (3, 5, 19, 61, 69, 100, 528, 2112)
ANY_BLOCK_SIZES = POW2_BLOCK_SIZES + OTHER_BLOCK_SIZES


def check_block_size(block_size, name: str = "block_size") -> int:
    """block_size as an int; ValueError naming it unless it is an integer in [1, MAX_BLOCK_SIZE]."""
    ok = isinstance(block_size, (int, np.integer)) and not isinstance(block_size, bool)
    if not ok or not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise RefusedRequest(f"{name} must be an integer in [1, {MAX_BLOCK_SIZE}], got {block_size!r}")
    return int(block_size)


def dtype_text(dtype: np.dtype) -> str:
    """The dtype's name, with its byte order when it is not the machine's (">i4" is not int32 here)."""
    return dtype.name if dtype.isnative else f"{dtype.name} in non-native byte order ({dtype.str})"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise RefusedRequest(message)


def _check_array(name: str, value, ndim: int) -> None:
    _require(isinstance(value, np.ndarray), f"{name} must be a NumPy array, got {type(value).__name__}")
    _require(value.ndim == ndim, f"{name} must have {ndim} dimensions, got shape {value.shape}")


def _check_query_start(query_start, num_seqs: int, total_q: int, context_lens) -> np.ndarray:
    """query lengths [num_seqs] from query_start int32 [num_seqs + 1] (FlashAttention's cu_seqlens_q)."""
    _check_array("query_start", query_start, 1)
    _require(query_start.dtype == np.int32, f"query_start.dtype must be int32, got {dtype_text(query_start.dtype)}")
    _require(query_start.shape[0] == num_seqs + 1,
             f"query_start has {query_start.shape[0]} entries, expected num_seqs + 1 = {num_seqs + 1} (from context_lens)")
    _require(int(query_start[0]) == 0, f"query_start[0] must be 0, got {int(query_start[0])}")
    _require(int(query_start[-1]) == total_q,
             f"query_start[{num_seqs}] = {int(query_start[-1])} must equal the query's {total_q} rows")
    lens = np.diff(query_start.astype(np.int64))
    bad = np.flatnonzero((lens < 1) | (lens > context_lens))
    if bad.size:
        s = int(bad[0])
        raise RefusedRequest(f"query_start[{s + 1}] - query_start[{s}] = {int(lens[s])} query tokens for sequence {s}: "
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
    key_cache/value_cache [num_blocks, block_size, num_kv_heads, head_dim] of the query's dtype or fp8, or
    uint8 [..., head_dim // 2] (NVFP4, with its block scales among the options);
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
    _require(key_cache.dtype.name in CACHE_DTYPES or key_cache.dtype == np.uint8,
             f"key_cache.dtype must be the query's dtype ({query.dtype.name}) or {QUANTIZED}, got {key_cache.dtype.name}")
    _require(value_cache.dtype == key_cache.dtype,
             f"value_cache.dtype must equal key_cache.dtype ({key_cache.dtype.name}), got {value_cache.dtype.name}")
    fmt = kv_format(key_cache.dtype)
    _require(key_cache.dtype == query.dtype or fmt in FP8_DTYPES or fmt == NVFP4,
             f"key_cache.dtype {key_cache.dtype.name} with query.dtype {query.dtype.name} is not allowed: "
             f"the cache must have the query's dtype or be {QUANTIZED}")
    _require(value_cache.shape == key_cache.shape,
             f"value_cache.shape {value_cache.shape} must equal key_cache.shape {key_cache.shape}")
    for name, arr in (("block_tables", block_tables), ("context_lens", context_lens)):
        _require(arr.dtype == np.int32, f"{name}.dtype must be int32, got {dtype_text(arr.dtype)}")

    num_seqs = context_lens.shape[0]
    total_q, num_heads, head_dim = query.shape
    num_blocks, block_size, num_kv_heads, cache_head_dim = key_cache.shape
    _require(num_seqs >= 1, f"context_lens must hold at least one sequence, got shape {context_lens.shape}")
    _require(num_heads >= 1 and head_dim >= 1, f"query must have num_heads >= 1 and head_dim >= 1, got shape {query.shape}")
    _require(num_blocks >= 1 and block_size >= 1 and num_kv_heads >= 1,
             f"key_cache must have num_blocks, block_size, num_kv_heads >= 1, got shape {key_cache.shape}")
    _require(block_size <= MAX_BLOCK_SIZE,
             f"key_cache block_size (shape[1]) must be in [1, {MAX_BLOCK_SIZE}], got {block_size}")
    if fmt == NVFP4:
        _require(2 * cache_head_dim == head_dim,
                 f"an NVFP4 key_cache's last axis ({cache_head_dim} bytes) must be query head_dim // 2 = "
                 f"{head_dim / 2:g} (two e2m1 codes per byte)")
    else:
        _require(cache_head_dim == head_dim, f"key_cache head_dim {cache_head_dim} must equal query head_dim {head_dim}")
    _require(num_heads % num_kv_heads == 0,
             f"num_heads ({num_heads}, from query) must be a multiple of num_kv_heads ({num_kv_heads}, from key_cache)")
    tables = block_tables.shape[0]
    if query_start is None and total_q == tables != num_seqs:  # query and block_tables agree: context_lens is off
        raise RefusedRequest(f"context_lens has {num_seqs} entries, expected num_seqs = {tables} (the rows of query "
                             "and of block_tables)")
    if query_start is not None and tables != num_seqs and np.ndim(query_start) == 1 and tables == len(query_start) - 1:
        raise RefusedRequest(f"context_lens has {num_seqs} entries, expected num_seqs = {tables} (the rows of "
                             "block_tables, and query_start's entries - 1)")
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
        raise RefusedRequest(f"context_lens[{s}] = {int(context_lens[s])} is out of range [1, {capacity}] "
                             f"(max_blocks_per_seq {max_blocks_per_seq} x block_size {block_size})")
    query_lens = (np.ones(num_seqs, dtype=np.int64) if query_start is None
                  else _check_query_start(query_start, num_seqs, total_q, context_lens))

    if scale is not None:
        _require(isinstance(scale, (int, float, np.floating, np.integer)) and math.isfinite(float(scale)) and float(scale) != 0.0,
                 f"scale must be a finite non-zero number, got {scale!r}")
    _require(isinstance(options, AttentionOptions), f"options must be an AttentionOptions, got {type(options).__name__}")
    options.validate(Context(num_heads=num_heads, head_dim=head_dim, kv_format=fmt,
                             cache_slots=(num_blocks, block_size, num_kv_heads)))

    first_block = first_read_tokens(context_lens, query_lens, options.window_left) // block_size
    end_block = (context_lens.astype(np.int64) + block_size - 1) // block_size
    columns = np.arange(max_blocks_per_seq)[None, :]
    read = (columns >= first_block[:, None]) & (columns < end_block[:, None])
    out_of_range = read & ((block_tables < 0) | (block_tables >= num_blocks))
    if out_of_range.any():
        s, i = (int(x) for x in np.argwhere(out_of_range)[0])
        where = " (it holds tokens inside the window)" if options.window_left >= 0 and block_tables[s, i] < 0 else ""
        raise RefusedRequest(f"block_tables[{s}, {i}] = {int(block_tables[s, i])} is out of range for {num_blocks} blocks{where}")


def validate_write_inputs(key_cache, value_cache, key, value, slot_mapping, k_scale=1.0, v_scale=1.0, *,
                          k_scales=None, v_scales=None, k_block_scales=None, v_block_scales=None) -> None:
    """Raise ValueError unless the inputs form a valid cache write.

    key_cache/value_cache [num_blocks, block_size, num_kv_heads, head_dim] (NVFP4: uint8 [..., head_dim // 2]);
    key/value [num_tokens, num_kv_heads, head_dim] of the caches' dtype, or of any query dtype for a quantized
    cache; slot_mapping [num_tokens] integer, each slot < 0 (skipped) or < num_blocks * block_size. Per-token
    scales k_scales/v_scales float32 [num_blocks, block_size, num_kv_heads] (fp8 caches, written with the
    codes; exclusive with k_scale/v_scale != 1); NVFP4 block scales k_block_scales/v_block_scales
    float8_e4m3fn [num_blocks, block_size, num_kv_heads, head_dim // 16], written with the codes.
    """
    _check_array("key_cache", key_cache, 4)
    _check_array("value_cache", value_cache, 4)
    _check_array("key", key, 3)
    _check_array("value", value, 3)
    _check_array("slot_mapping", slot_mapping, 1)
    _require(key_cache.dtype.name in CACHE_DTYPES or key_cache.dtype == np.uint8,
             f"key_cache.dtype must be one of {CACHE_DTYPES} or uint8 (nvfp4), got {key_cache.dtype.name}")
    _require(value_cache.dtype == key_cache.dtype,
             f"value_cache.dtype must equal key_cache.dtype ({key_cache.dtype.name}), got {value_cache.dtype.name}")
    _require(value.dtype == key.dtype, f"value.dtype must equal key.dtype ({key.dtype.name}), got {value.dtype.name}")
    fmt = kv_format(key_cache.dtype)
    if fmt in FP8_DTYPES or fmt == NVFP4:
        _require(key.dtype.name in SUPPORTED_DTYPES,
                 f"key.dtype must be one of {SUPPORTED_DTYPES} for a quantized cache ({fmt}), got {key.dtype.name}")
    else:
        _require(key.dtype == key_cache.dtype, f"key.dtype must equal key_cache.dtype ({key_cache.dtype.name}), got {key.dtype.name}")
    _require(value_cache.shape == key_cache.shape,
             f"value_cache.shape {value_cache.shape} must equal key_cache.shape {key_cache.shape}")
    _require(value.shape == key.shape, f"value.shape {value.shape} must equal key.shape {key.shape}")
    head_dim = key.shape[2]
    stored = (key.shape[1], head_dim // 2) if fmt == NVFP4 else key.shape[1:]
    _require(tuple(stored) == key_cache.shape[2:] and (fmt != NVFP4 or head_dim % 2 == 0),
             f"key.shape[1:] {key.shape[1:]} must match key_cache's (num_kv_heads, head_dim"
             f"{' // 2' if fmt == NVFP4 else ''}) {key_cache.shape[2:]}")
    num_blocks, block_size, num_kv_heads = key_cache.shape[:3]
    AttentionOptions(k_scale=k_scale, v_scale=v_scale, k_scales=k_scales, v_scales=v_scales,
                     k_block_scales=k_block_scales, v_block_scales=v_block_scales).validate(
        Context(head_dim=head_dim, kv_format=fmt, cache_slots=(num_blocks, block_size, num_kv_heads)))
    _require(slot_mapping.dtype.kind in "iu", f"slot_mapping.dtype must be an integer type, got {slot_mapping.dtype.name}")
    _require(slot_mapping.shape[0] == key.shape[0],
             f"slot_mapping has {slot_mapping.shape[0]} entries, expected num_tokens = {key.shape[0]} (from key)")
    num_slots = key_cache.shape[0] * key_cache.shape[1]
    bad = np.flatnonzero(slot_mapping >= num_slots)
    if bad.size:
        i = int(bad[0])
        raise RefusedRequest(f"slot_mapping[{i}] = {int(slot_mapping[i])} is out of range for {num_slots} slots "
                             f"({key_cache.shape[0]} blocks x block_size {key_cache.shape[1]})")
    used = slot_mapping[slot_mapping >= 0]
    if np.unique(used).size != used.size:
        values, counts = np.unique(used, return_counts=True)
        raise RefusedRequest(f"slot_mapping writes slot {int(values[counts > 1][0])} more than once (the result would depend on thread order)")
