"""pytest-benchmark over the MLA variants x block sizes (test_bench_kernels.py's twin for registry kind "mla").

Every body checks out and lse against the truth before anything is timed. Under ``make test``
(``--benchmark-disable``) each body runs once at a tiny sparse fp8-record shape; ``make bench`` times them:
on a GPU at FlashMLA's headline shape (batch 128, 128 heads, 4096 tokens, bf16), each round launch +
synchronize after an L2 flush. extra_info holds bytes, FLOPs, GB/s and the backend (cpu-* rows are CPU
emulation, never GPU performance).
"""
from __future__ import annotations

import functools

import pytest

from sandbox.devices import backends
from sandbox.sweep import mla_shapes, shapes
from sandbox.sweep.measure import bandwidth
from sandbox.sweep.measure.run import backend_label
from sandbox.variant import registry
from sandbox.variant.mla import runner as mla_runner
from test_bench_kernels import ROUNDS, _gpu_sync_and_flush

ON_GPU = backends.gpu_present()
BLOCK_SIZES = shapes.DEFAULT_BLOCK_SIZES if ON_GPU else (1, 16, 256)
TIMED_SHAPE = "mla:128x4096x128xbf16" if ON_GPU else "mla:1x16x1xbf16:fp8 topk=8"
CHECK_SHAPE = "mla:1x8x1xbf16:fp8 topk=4"  # --benchmark-disable (make test): one correctness run, kept cheap


@functools.lru_cache(maxsize=2)
def _data(spec: str) -> mla_shapes.MLAShapeData:
    return mla_shapes.MLAShapeData(mla_shapes.parse_mla_shape(spec), seed=7)


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("name", registry.variants(problem="mla"))
def test_bench_mla(benchmark, name, block_size):
    variant = registry.get(name)
    resolved = variant.family_plugin.resolve("auto")
    if ON_GPU and resolved == "cpu":
        pytest.skip(f"{name} runs on the CPU only: not benchmarked on a GPU machine")
    data = _data(CHECK_SHAPE if benchmark.disabled else TIMED_SHAPE)
    problem = data.problem(block_size)
    prepared, resolved = mla_runner.prepare_mla(name, problem, resolved)
    prepared.launch()
    verdict = data.verdict(prepared, prepared.result(), block_size)
    assert verdict.ok, f"{name} on {problem.describe()}:\n{verdict.report}"

    synchronize, setup = _gpu_sync_and_flush(resolved)

    def call():
        prepared.launch()
        synchronize()

    benchmark.extra_info.update(bytes=problem.bytes_moved(), flops=problem.flops(), shape=data.shape.name,
                                block_size=block_size, backend=backend_label(variant.family, resolved))
    benchmark.pedantic(call, setup=setup, rounds=ROUNDS, iterations=1, warmup_rounds=3 if ON_GPU else 0)
    if benchmark.stats is not None and not benchmark.disabled:
        benchmark.extra_info["gbps"] = bandwidth.kernel_gbps(problem.bytes_moved(), benchmark.stats.stats.median)
