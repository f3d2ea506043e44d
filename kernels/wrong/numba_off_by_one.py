"""wrong.numba.off_by_one: numba.naive that drops the last token of the last block (NEGATIVE CONTROL).

The flaw: the token count of a block is `context_len - block * block_size - 1` when that is smaller
than block_size, a classic fencepost slip; every other block is whole. A context of one token
gets no token at all (0/0 = NaN). Must be rejected by
tests/test_variants.py::test_property_test_rejects_negative_control.
"""
from __future__ import annotations

import math

from numba import cuda, float32

from kernels.numba_cuda import common, naive
from kernels.numba_cuda.common import MAX_HEAD_DIM, NEG_INF, ZERO

LIMITS = naive.LIMITS


def off_by_one_body(query, key_cache, value_cache, block_tables, context_lens, scale, out):
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
        physical = block_tables[seq, block]
        for offset in range(min(block_size, context_len - block * block_size - 1)):  # BUG: - 1
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


off_by_one_kernel = cuda.jit(off_by_one_body)


def prepare(problem, backend: str) -> common.Launch:
    return naive.launch_per_head(off_by_one_kernel, problem, "wrong.numba.off_by_one")
