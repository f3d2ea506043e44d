"""Cost of traffic mode against a normal launch: cupy.rows, 4 sequences x 512 tokens, GQA 2, head dim 64.

The bar is 10x a normal launch (make bench: `pytest tests/bench/test_bench_traffic.py --benchmark-enable`);
`pytest` runs the body once, untimed, and checks that traffic mode computes what a normal launch does.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from kernels.cupy_raw import common
from sandbox.cpucuda import last_traffic_raw
from sandbox.problem.decode import DecodeProblem
from sandbox.variant import runner

BAR = 10.0


@pytest.fixture(scope="module")
def workload():
    problem = DecodeProblem.random(1, num_seqs=4, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                                   context_lens=[512] * 4, dtype="float16", share_prefix=False)
    # Both builds at the executor's default -O2 (conftest.py lowers normal builds to -O0 for the suite's
    # compile time; the traffic build has no such variable): the ratio compares like with like.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SANDBOX_CPUCUDA_OPT", "-O2")
        normal, _ = runner.prepare("cupy.rows", problem, "cpu")
        with common.cpu_options(traffic=True):
            traffic, _ = runner.prepare("cupy.rows", problem, "cpu")
    return normal, traffic


def test_traffic_mode_computes_what_a_normal_launch_does(workload):
    normal, traffic = workload
    normal.launch()
    traffic.launch()
    np.testing.assert_array_equal(np.asarray(traffic.result()), np.asarray(normal.result()))
    assert last_traffic_raw().kernel.startswith("pa::paged_attention_reduce")


@pytest.mark.benchmark(group="traffic")
def test_bench_normal_launch(benchmark, workload):
    normal, _ = workload
    benchmark(normal.launch)


@pytest.mark.benchmark(group="traffic")
def test_bench_traffic_launch_costs_at_most_10x_a_normal_one(benchmark, workload):
    normal, traffic = workload
    traffic.launch()  # warm: the traffic build and its symbols are loaded
    benchmark(traffic.launch)
    if benchmark.enabled:  # timed runs only: the bar against the median of normal launches
        times = []
        for _ in range(5):
            start = time.perf_counter()
            normal.launch()
            times.append(time.perf_counter() - start)
        assert benchmark.stats.stats.median <= BAR * statistics.median(times)
