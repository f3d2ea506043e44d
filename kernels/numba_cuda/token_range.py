"""Softmax attention of one query head over a range of tokens [start, end), logits in shared memory.

numba.block runs it over everything a sequence reads; numba.split over one partition of that. The
three steps, each a device function, with the block-wide reductions between them left to the caller
(they need the block's scratch and barriers):

    score_tokens(...)   -> this thread's max logit      logits[t - start] = adjusted q.K[t]
    exponentiate(...)   -> this thread's sum of weights  logits[i] = exp(logits[i] - top)
    weigh_values(...)   -> sum_t logits[t - start] * V[t, d] for one d, walking whole cache blocks

With per-token fp8 scales, a logit is multiplied by its slot's k scale and a weight by its v scale.

Threads stride over tokens (score, exponentiate) and over head_dim (weigh) by `tid`/`threads`, which
the kernel passes in: the functions never touch numba.cuda, so the simulator calls them directly
(sandbox/devices/numba_poison.py) and on a GPU they inline into the kernel.
"""
from __future__ import annotations

import functools
import math

from numba import cuda

from .device import NEG_INF, ZERO


@functools.lru_cache(maxsize=None)
def make(load_kv, score_hook, per_token: bool = False):
    """(score_tokens, exponentiate, weigh_values) for a cache decoder (codecs.DECODE[kv_dtype]), a score
    hook (options.score_hook(flags): (scored, hook)) and whether K/V rows carry fp8 scales per (slot, KV head) (per_token:
    k_scales/v_scales float32, flattened as (physical * block_size + offset) * num_kv_heads + kv_head; unread
    otherwise), made once per triple."""
    scored, score = score_hook

    @cuda.jit(device=True, inline="always")
    def score_tokens(q, key_cache, block_tables, seq, head, kv_head, start, end, position, opts, logits, tid,
                     threads, k_scales):
        """q: float32 [>= head_dim] (scaled) of query head `head` at `position`; opts: OptionArgs;
        logits: float32 [>= end - start]. Returns this thread's max."""
        block_size, num_kv_heads, head_dim = key_cache.shape[1], key_cache.shape[2], key_cache.shape[3]
        local_max = NEG_INF
        for t in range(start + tid, end, threads):
            physical = block_tables[seq, t // block_size]
            offset = t % block_size
            logit = ZERO
            for d in range(head_dim):
                logit += q[d] * load_kv(key_cache[physical, offset, kv_head, d])
            if per_token:
                logit *= k_scales[(physical * block_size + offset) * num_kv_heads + kv_head]
            if scored:
                logit = score(logit, opts, position, t, head, kv_head)
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
    def weigh_values(weights, value_cache, block_tables, seq, kv_head, d, start, end, v_scales):
        """sum over t in [start, end) of weights[t - start] * V[t, kv_head, d], one cache block at a time."""
        block_size, num_kv_heads = value_cache.shape[1], value_cache.shape[2]
        acc = ZERO
        t = start
        while t < end:
            block = t // block_size
            physical = block_tables[seq, block]
            first = t - block * block_size
            count = min(block_size - first, end - t)
            if per_token:
                scales_at = (physical * block_size + first) * num_kv_heads + kv_head
                for i in range(count):
                    acc += (weights[t - start + i] * v_scales[scales_at + i * num_kv_heads]
                            * load_kv(value_cache[physical, first + i, kv_head, d]))
            else:
                for i in range(count):
                    acc += weights[t - start + i] * load_kv(value_cache[physical, first + i, kv_head, d])
            t += count
        return acc

    return score_tokens, exponentiate, weigh_values
