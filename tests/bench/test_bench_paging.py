"""append_slot throughput: 64 decoding sequences, block size 16, pools of 1e3 and 1e6 blocks.

The bar is 1 million calls per second at both pool sizes (no per-call work that grows with the
pool). Run with ``pytest tests/bench/test_bench_paging.py --benchmark-enable``; the rate is printed and
stored in the benchmark's extra_info as ``calls_per_s``.
"""
from __future__ import annotations

import pytest

from sandbox.paging import BlockManager

NUM_SEQS = 64
BLOCK_SIZE = 16
STEPS = 224                      # 64 sequences x 15 blocks = 960 blocks: fits the 1e3 pool
CALLS = NUM_SEQS * STEPS


@pytest.mark.parametrize("num_blocks", [1_000, 1_000_000])
def test_append_slot_throughput(benchmark, num_blocks):
    m = BlockManager(num_blocks, BLOCK_SIZE)
    seqs = list(range(NUM_SEQS))

    def setup():
        for s in seqs:
            if s in m:
                m.free(s)
            m.allocate(s, 1)

    def decode():
        append = m.append_slot
        for _ in range(STEPS):
            for s in seqs:
                append(s)

    benchmark.pedantic(decode, setup=setup, rounds=30, iterations=1, warmup_rounds=1)
    assert all(m.num_tokens(s) == 1 + STEPS for s in seqs)
    assert m.num_used_blocks == NUM_SEQS * -(-(1 + STEPS) // BLOCK_SIZE)
    if benchmark.stats is not None and not benchmark.disabled:
        rate = CALLS / benchmark.stats.stats.median
        benchmark.extra_info["calls_per_s"] = round(rate)
        print(f"\nappend_slot, {num_blocks} blocks: {rate / 1e6:.2f} M calls/s (median of 30 rounds)")
        assert rate >= 1e6, f"append_slot too slow: {rate:.0f} calls/s < 1e6 with {num_blocks} blocks"
