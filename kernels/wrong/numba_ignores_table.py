"""wrong.numba.ignores_table: numba.naive reading logical block b from physical block b (NEGATIVE CONTROL).

The flaw: `physical = block` instead of `block_tables[seq, block]`, as if the cache were contiguous
per sequence. Right only when the table is the identity, which the shared strategy never draws.
Must be rejected by tests/test_variants.py::test_property_test_rejects_negative_control.
"""
from __future__ import annotations

import math

from numba import cuda, float32

from kernels.numba_cuda import common, naive
from kernels.numba_cuda.common import MAX_HEAD_DIM, NEG_INF, ZERO

LIMITS = naive.LIMITS


def ignores_table_body(query, key_cache, value_cache, block_tables, context_lens, scale, out):
    item = cuda.grid(1)
    num_seqs, num_heads, head_dim = query.shape
    if item >= num_seqs * num_heads:
        return
    seq = item // num_heads
    head = item % num_heads
    block_size = key_cache.shape[1]
    kv_head = head // (num_heads // key_cache.shape[2])
    context_len = context_lens[seq]

    acc = cuda.local.array(MAX_HEAD_DIM, float32)
    for d in range(head_dim):
        acc[d] = ZERO
    running_max = NEG_INF
    running_sum = ZERO
    for block in range((context_len + block_size - 1) // block_size):
        # BUG: the logical block is used as the physical one (clamped only to stay in bounds)
        physical = min(block, key_cache.shape[0] - 1)
        for offset in range(min(block_size, context_len - block * block_size)):
            logit = ZERO
            for d in range(head_dim):
                logit += float32(query[seq, head, d]) * float32(key_cache[physical, offset, kv_head, d])
            logit *= scale
            new_max = max(running_max, logit)
            correction = math.exp(running_max - new_max)
            weight = math.exp(logit - new_max)
            running_sum = running_sum * correction + weight
            for d in range(head_dim):
                acc[d] = acc[d] * correction + weight * float32(value_cache[physical, offset, kv_head, d])
            running_max = new_max
    inv_sum = float32(1.0) / running_sum
    for d in range(head_dim):
        out[seq, head, d] = acc[d] * inv_sum


ignores_table_kernel = cuda.jit(ignores_table_body)


def prepare(problem, backend: str) -> common.Launch:
    return naive.launch_per_head(ignores_table_kernel, problem, "wrong.numba.ignores_table")
