"""NaN planted in a problem's data: the cases that hold every variant to "NaN is data".

A NaN in one query element, or in one cache element some query row reads, makes exactly the rows that
read it NaN in the reference (out and lse); every other row stays clean. A variant must do the same: a
max-reduction that skips NaN (fmaxf) followed by an "if the max is -inf, the row saw nothing" guard
silently turns such a row into zeros. `sandbox.checking.compare` counts a number where the reference
has NaN as a mismatch, so check_problem holds a variant to this.

The softmax scale, sinks and cache scales are parameters, not data: validation refuses non-finite ones
(a ValueError naming the argument) before any launch.

    plant_in_query(problem, row, head, dim) -> problem          DecodeProblem or MLAProblem
    plant_in_cache(problem, which, slot, kv_head, dim) -> problem
    read_slots(problem) -> int64 [n]                            cache slots some row reads
    cache_holds_nan(problem) -> bool                            whether the cache format has a NaN
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..problem.decode import DecodeProblem, _read_slots


def _nan_of(dtype) -> np.ndarray:
    return np.array(np.nan, dtype=np.float32).astype(dtype)


def _cache(problem, which: str) -> np.ndarray:
    if isinstance(problem, DecodeProblem):
        if which not in ("key", "value"):
            raise ValueError(f"which must be 'key' or 'value' for a decode problem, got {which!r}")
        return problem.key_cache if which == "key" else problem.value_cache
    if which != "latent":
        raise ValueError(f"which must be 'latent' for an MLA problem, got {which!r}")
    return problem.latent_cache


def cache_holds_nan(problem) -> bool:
    """Whether the problem's cache format can store NaN (floats and fp8 can; NVFP4 codes and MLA's fp8 records,
    uint8 bytes, cannot be planted element-wise)."""
    dtype = _cache(problem, "key" if isinstance(problem, DecodeProblem) else "latent").dtype
    return dtype.kind == "f" or (dtype.kind == "V" and bool(np.isnan(_nan_of(dtype).astype(np.float32))))


def read_slots(problem) -> np.ndarray:
    """Sorted distinct int64 cache slots (block * block_size + offset) that some query row reads."""
    if isinstance(problem, DecodeProblem):
        read = _read_slots(problem.block_tables, problem.context_lens, problem.first_read_tokens(),
                           problem.num_blocks, problem.block_size)
        return np.flatnonzero(read).astype(np.int64)
    return problem.read_slots()


def plant_in_query(problem, row: int, head: int, dim: int):
    """A copy of `problem` whose query[row, head, dim] is NaN (the other arrays shared, unchanged)."""
    query = problem.query.copy()
    query[row, head, dim] = _nan_of(query.dtype)
    return dataclasses.replace(problem, query=query)


def plant_in_cache(problem, which: str, slot: int, kv_head: int, dim: int):
    """A copy of `problem` whose cache element at `slot` (block * block_size + offset), KV head `kv_head`
    (decode; ignored for MLA's one latent row) and stored dim `dim` is NaN. which: "key" or "value"
    (decode), "latent" (MLA)."""
    cache = _cache(problem, which).copy()
    block, offset = divmod(int(slot), cache.shape[1])
    index = (block, offset, kv_head, dim) if isinstance(problem, DecodeProblem) else (block, offset, dim)
    cache[index] = _nan_of(cache.dtype)
    field = {"key": "key_cache", "value": "value_cache", "latent": "latent_cache"}[which]
    return dataclasses.replace(problem, **{field: cache})
