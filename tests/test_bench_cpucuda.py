"""Speed of the CPU executor's barriers: 16 blocks x 128 threads x 50 __syncthreads per launch.

The bar is 0.5 s per launch. `pytest` runs with --benchmark-disable (the body runs once, untimed);
time it with `pytest tests/test_bench_cpucuda.py --benchmark-enable`.
"""
from __future__ import annotations

import numpy as np
import pytest

from sandbox.cpucuda import CpuRawKernel

BARRIERS = r"""
extern "C" __global__ void barriers(float* out, int rounds) {
    __shared__ float s[128];
    float acc = 0.0f;
    for (int r = 0; r < rounds; ++r) {  // two barriers per round
        s[threadIdx.x] = (float)(threadIdx.x + r);
        __syncthreads();
        acc += s[(threadIdx.x + 1) % blockDim.x];
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
"""
BLOCKS, THREADS, ROUNDS = 16, 128, 25  # 50 __syncthreads per thread


@pytest.fixture(scope="module")
def workload():
    """(launch, check): one launch of the barrier workload and its validation against NumPy."""
    kernel = CpuRawKernel(BARRIERS, "barriers")
    out = np.zeros(BLOCKS * THREADS, np.float32)

    def launch():
        kernel(BLOCKS, THREADS, (out, np.int32(ROUNDS)))

    def check():
        t = np.arange(THREADS)
        expected = sum(((t + 1) % THREADS + r) for r in range(ROUNDS)).astype(np.float32)
        np.testing.assert_array_equal(out.reshape(BLOCKS, THREADS), np.tile(expected, (BLOCKS, 1)))

    kernel.compile()
    return launch, check


def test_barrier_workload_is_correct(workload):
    launch, check = workload
    launch()
    check()


@pytest.mark.benchmark(group="cpucuda")
def test_bench_barriers(benchmark, workload):
    launch, check = workload
    launch()  # validate, then time
    check()
    benchmark(launch)
