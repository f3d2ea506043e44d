"""Swap against recompute for one preempted sequence, by block size (the paper's Fig. 19a, from our costs).

A sequence of ``tokens`` KV tokens is preempted and later restored. Swapping moves its blocks out and back
(``cost.SwapCost``: whole blocks, so a partial last block moves whole; a latency per copy, 2 x layers copies per
block); recomputing prefills the tokens again at the step-time source's marginal prefill cost per token
(``prefill_token_time``), whatever the block size. Small blocks pay the per-copy latency many times, so swap's
time falls with the block size towards the bytes' time; ``crossing`` is the block size where swap becomes
the cheaper of the two (log-interpolated between the sizes around it), or None when one wins everywhere.
"""
from __future__ import annotations

import math

TOKENS = 1024
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def swap_vs_recompute(swap, cost, tokens: int = TOKENS, block_sizes=BLOCK_SIZES) -> dict:
    """{"tokens", "swap", "rows": [{block_size, blocks, swap_s, swap_latency_s, recompute_s}], "crossing"}."""
    recompute = tokens * cost.prefill_token_time()
    rows = []
    for bs in block_sizes:
        blocks = -(-tokens // bs)
        rows.append(dict(block_size=bs, blocks=blocks, swap_s=2 * swap.seconds(blocks, bs),
                         swap_latency_s=2 * blocks * swap.copies * swap.latency_s, recompute_s=recompute))
    return dict(tokens=tokens, swap=swap.describe(), rows=rows, crossing=_crossing(rows))


def _crossing(rows: list[dict]) -> float | None:
    """The block size where swap_s - recompute_s changes sign (interpolated in log2 of the block size)."""
    for a, b in zip(rows, rows[1:]):
        da, db = a["swap_s"] - a["recompute_s"], b["swap_s"] - b["recompute_s"]
        if da > 0 >= db or da <= 0 < db:
            frac = da / (da - db) if da != db else 0.0
            la, lb = math.log2(a["block_size"]), math.log2(b["block_size"])
            return 2 ** (la + frac * (lb - la))
    return None
