"""The serving simulator's speed: 10,000 ShareGPT-like requests on paged-16 (the real BlockManager) at
6 req/s, near its sustainable rate on the default 12 GB budget, so batches are large and preemptions
happen. Run with ``make bench`` (or ``pytest tests/bench/test_bench_serving.py --benchmark-enable -s``): the
time is printed and stored in extra_info; nothing asserts on it. Without --benchmark-enable (make test)
the same path runs once on 200 requests, as a check that it works.
"""
from __future__ import annotations

import time

from sandbox.serving.cost import AnalyticCost, ModelShape
from sandbox.serving.engine import Engine, EngineConfig
from sandbox.serving.kv_paged import PagedKV
from sandbox.serving.metrics import summarize
from sandbox.serving.workloads import WorkloadSpec, build_requests, count_requests, with_rate

SHAPE = ModelShape(40, 40, 128, 2)
BUDGET_TOKENS = 14_648               # 12 GB of a 13B model's fp16 KV, as python -m sandbox serving
RATE = 6.0


def test_simulate_10k_requests(benchmark):
    n = 200 if benchmark.disabled else 10_000
    requests = with_rate(build_requests(WorkloadSpec("sharegpt", n, 2048), seed=0), RATE)
    cost = AnalyticCost(SHAPE)
    engines, cpu = [], []

    def simulate():
        kv = PagedKV(BUDGET_TOKENS, 16, swap_blocks=0)
        t0 = time.process_time()
        engines.append(Engine(kv, cost, EngineConfig(SHAPE.kv_bytes_per_token), requests).run())
        cpu.append(time.process_time() - t0)

    benchmark.pedantic(simulate, rounds=1, iterations=1, warmup_rounds=0)
    engine = engines[-1]
    assert len(engine.done) == count_requests(requests) == n and not engine.kv.leaked()
    point = summarize(engine, RATE, 0.0)
    assert point["requests"] == n and point["preemptions"] >= 0
    if benchmark.stats is not None and not benchmark.disabled:
        seconds = benchmark.stats.stats.median
        tokens = sum(r.output_len for r in requests)
        benchmark.extra_info.update(requests=n, seconds=round(seconds, 2), cpu_seconds=round(cpu[-1], 2),
                                    steps=point["steps"], decode_tokens=tokens, preemptions=point["preemptions"])
        # CPU seconds beside wall seconds: on a shared machine the wall clock includes others' work
        print(f"\nserving simulator: {n} requests ({tokens:,} output tokens, {point['steps']:,} steps, "
              f"{point['preemptions']} preemptions) in {seconds:.1f} s wall, {cpu[-1]:.1f} s CPU "
              f"= {tokens / seconds / 1e3:.0f}k tokens/s")
