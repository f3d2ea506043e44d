"""Softmax attention of one query head over a range of tokens [start, end), logits in shared memory.

numba.block runs it over everything a sequence reads; numba.split over one partition of that. The
three steps, each a device function, with the block-wide reductions between them left to the caller
(they need the block's scratch and barriers):

    score_tokens(...)   -> this thread's max logit      logits[t - start] = adjusted q.K[t]
    exponentiate(...)   -> this thread's sum of weights  logits[i] = exp(logits[i] - top)
    weigh_values(...)   -> sum_t logits[t - start] * V[t, d] for one d, walking whole cache blocks

Threads stride over tokens (score, exponentiate) and over head_dim (weigh) by `tid`/`threads`, which
the kernel passes in: the functions never touch numba.cuda, so the simulator calls them directly
(sandbox/devices/numba_poison.py) and on a GPU they inline into the kernel.
"""
from __future__ import annotations

import functools
import math

from numba import cuda

from .common import NEG_INF, ZERO


@functools.lru_cache(maxsize=None)
def make(load_kv, adjust):
    """(score_tokens, exponentiate, weigh_values) for a cache decoder (common.DECODE[kv_dtype]) and
    a logit adjustment (common.logit_options(...)), made once per pair."""

    @cuda.jit(device=True, inline="always")
    def score_tokens(q, key_cache, block_tables, seq, kv_head, start, end, position, softcap, slope, use_alibi,
                     logits, tid, threads):
        """q: float32 [>= head_dim] (scaled); logits: float32 [>= end - start]. Returns this thread's max."""
        block_size, head_dim = key_cache.shape[1], key_cache.shape[3]
        local_max = NEG_INF
        for t in range(start + tid, end, threads):
            physical = block_tables[seq, t // block_size]
            offset = t % block_size
            logit = ZERO
            for d in range(head_dim):
                logit += q[d] * load_kv(key_cache[physical, offset, kv_head, d])
            logit = adjust(logit, softcap, slope, use_alibi, t - position)
            logits[t - start] = logit
            local_max = max(local_max, logit)
        return local_max

    @cuda.jit(device=True, inline="always")
    def exponentiate(logits, count, top, tid, threads):
        """logits[:count] become exp(logit - top); returns this thread's share of their sum."""
        local_sum = ZERO
        for i in range(tid, count, threads):
            weight = math.exp(logits[i] - top)
            logits[i] = weight
            local_sum += weight
        return local_sum

    @cuda.jit(device=True, inline="always")
    def weigh_values(weights, value_cache, block_tables, seq, kv_head, d, start, end):
        """sum over t in [start, end) of weights[t - start] * V[t, kv_head, d], one cache block at a time."""
        block_size = value_cache.shape[1]
        acc = ZERO
        t = start
        while t < end:
            block = t // block_size
            physical = block_tables[seq, block]
            first = t - block * block_size
            count = min(block_size - first, end - t)
            for i in range(count):
                acc += weights[t - start + i] * load_kv(value_cache[physical, first + i, kv_head, d])
            t += count
        return acc

    return score_tokens, exponentiate, weigh_values
