"""pytest-benchmark over the registry x block sizes, and cache-write throughput over CACHE_WRITERS.

Every body checks its output against the reference before anything is timed. Under ``make test``
(``--benchmark-disable``) each body runs once: a correctness check at a tiny shape. ``make bench``
(``--benchmark-enable``) times them and saves the JSON in results/<UTC>-bench/bench.json; there,
on a GPU, each round is launch + device synchronize, after an L2 flush (+ synchronize) in the
untimed setup, at a serving shape; extra_info holds bytes, GB/s (1e9 bytes/s over the median)
and the backend (cpu-* rows are CPU emulation, never GPU performance).
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import reference
from sandbox.devices import backends
from sandbox.variant import registry, runner
from sandbox.checking.check import expected_output
from sandbox.checking.compare import assert_close
from sandbox.sweep import shapes
from sandbox.sweep.measure import bandwidth
from sandbox.sweep.measure.run import backend_label
from sandbox.problem.validate import validate_write_inputs

ON_GPU = backends.gpu_present()
BLOCK_SIZES = shapes.DEFAULT_BLOCK_SIZES if ON_GPU else (1, 16, 256)
TIMED_SHAPE = "32x1024x32/8x128xfp16" if ON_GPU else "1x20x2/1x64xfp16"  # tiny on the CPU: the simulator is slow
CHECK_SHAPE = "1x20x2/1x64xfp16"  # --benchmark-disable (make test): one correctness run, kept cheap
ROUNDS = 50 if ON_GPU else 3


def _shape_for(variant, benchmark) -> shapes.Shape:
    shape = shapes.parse_shape(CHECK_SHAPE if benchmark.disabled else TIMED_SHAPE)
    head_dims = variant.limits.head_dims
    if head_dims is not None and shape.head_dim not in head_dims:
        shape = shapes.Shape(shape.num_seqs, shape.context_len, shape.num_heads, shape.num_kv_heads, head_dims[0],
                             shape.dtype)
    return shape


@functools.lru_cache(maxsize=4)
def _tokens(shape: shapes.Shape):
    return shapes.make_tokens(shape, seed=7)


@functools.lru_cache(maxsize=2)
def _expected(shape: shapes.Shape):
    return expected_output(shapes.paged_problem(_tokens(shape), 16))


def _gpu_sync_and_flush(resolved: str):
    """(synchronize, setup) for pedantic: on a GPU the setup flushes the L2 and waits, outside the timing."""
    if resolved != "gpu":
        return (lambda: None), None
    from sandbox.sweep.measure import device
    flusher = device.L2Flusher(device.device_info().get("l2_cache_bytes"))

    def setup():
        flusher()
        device.synchronize_device()

    return device.synchronize_device, setup


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("name", registry.variants())
def test_bench_decode(benchmark, name, block_size):
    variant = registry.get(name)
    resolved = variant.family_plugin.resolve("auto")
    if ON_GPU and resolved == "cpu":
        pytest.skip(f"{name} runs on the CPU only: not benchmarked on a GPU machine")
    shape = _shape_for(variant, benchmark)
    problem = shapes.paged_problem(_tokens(shape), block_size)
    if not variant.limits.supports(problem, resolved):
        pytest.skip(f"{name} does not declare support for {problem.describe()}")
    # Inside its declared limits a refusal is a failure, not a skip.
    prepared, resolved = runner.prepare(name, problem, resolved)
    prepared.launch()
    assert_close(prepared.result(), _expected(shape), problem.dtype, f"{name} on {problem.describe()}")

    synchronize, setup = _gpu_sync_and_flush(resolved)

    def call():
        prepared.launch()
        synchronize()

    benchmark.extra_info.update(bytes=problem.bytes_moved(), shape=shape.name, block_size=block_size,
                                backend=backend_label(variant.family, resolved))
    benchmark.pedantic(call, setup=setup, rounds=ROUNDS, iterations=1, warmup_rounds=3 if ON_GPU else 0)
    if benchmark.stats is not None and not benchmark.disabled:
        benchmark.extra_info["gbps"] = bandwidth.kernel_gbps(problem.bytes_moved(), benchmark.stats.stats.median)


WRITE_TOKENS, WRITE_BLOCKS = (256, 4096) if ON_GPU else (12, 8)
WRITE_KV_HEADS, WRITE_HEAD_DIM = (8, 128) if ON_GPU else (2, 64)


@pytest.mark.parametrize("block_size", [16])
@pytest.mark.parametrize("name", registry.cache_writers())
def test_bench_cache_write(benchmark, name, block_size):
    writer = registry.get_cache_writer(name)
    resolved = registry.family(writer.family).resolve("auto")  # "auto" is always this process's numba mode
    rng = np.random.default_rng(5)
    shape = (WRITE_BLOCKS, block_size, WRITE_KV_HEADS, WRITE_HEAD_DIM)
    key_cache = rng.standard_normal(shape).astype(np.float16)
    value_cache = rng.standard_normal(shape).astype(np.float16)
    key = rng.standard_normal((WRITE_TOKENS,) + shape[2:]).astype(np.float16)
    value = rng.standard_normal((WRITE_TOKENS,) + shape[2:]).astype(np.float16)
    slots = rng.permutation(WRITE_BLOCKS * block_size)[:WRITE_TOKENS].astype(np.int64)
    slots[::7] = -1  # padding tokens are skipped
    validate_write_inputs(key_cache, value_cache, key, value, slots)
    prepared = writer.module.prepare_write(key_cache, value_cache, key, value, slots, resolved)
    prepared.launch()
    got_k, got_v = prepared.result()
    want_k, want_v = key_cache.copy(), value_cache.copy()
    reference.write_cache(want_k, want_v, key, value, slots)
    np.testing.assert_array_equal(got_k, want_k)
    np.testing.assert_array_equal(got_v, want_v)

    synchronize, setup = _gpu_sync_and_flush(resolved)

    def call():
        prepared.launch()
        synchronize()

    written = int((slots >= 0).sum())
    nbytes = 2 * 2 * written * WRITE_KV_HEADS * WRITE_HEAD_DIM * 2 + slots.nbytes  # K and V: read + write
    benchmark.extra_info.update(bytes=nbytes, tokens=written, backend=backend_label(writer.family, resolved))
    benchmark.pedantic(call, setup=setup, rounds=ROUNDS, iterations=1, warmup_rounds=3 if ON_GPU else 0)
    if benchmark.stats is not None and not benchmark.disabled:
        median = benchmark.stats.stats.median
        benchmark.extra_info.update(gbps=bandwidth.kernel_gbps(nbytes, median), tokens_per_s=written / median)
