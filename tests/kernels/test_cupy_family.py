"""The CUDA C family beyond the shared suite: compiled for real GPUs (NVRTC, sm_80/sm_90); on the CPU
executor, every CUDA C variant of the registry (and the cupy cache writer) free of out-of-bounds accesses
(AddressSanitizer), of data races (racecheck), independent of thread order and right under both
shared-memory poisons; independent of the split-KV partition size, and the dense twin equal to the paged
kernel it mirrors (on every available backend).

Correctness against the reference on random problems lives in tests/kernels/test_variants.py and
tests/kernels/test_cache_write.py (they walk the registry).
"""
from __future__ import annotations


import numpy as np
import pytest

import reference
from kernels.cupy_raw import common, dense, gqa, rows, v1, v2
from kernels.cupy_raw import write_cache as cupy_write_cache
from kernels.wrong.cupy_controls import ignores_table as cupy_ignores_table, off_by_one as cupy_off_by_one
from sandbox.devices import backends
from sandbox.analysis import nvrtc
from sandbox.variant import registry
from sandbox.checking.check import check_problem, expected_output
from sandbox.checking.compare import assert_close, compare
from sandbox.cpucuda import last_poison, modes
from sandbox.problem import DecodeProblem
from sandbox.variant.runner import run_problem
from sandbox.variant.runner import outputs

from declared import within

ATTENTION = {"cupy.v1": v1, "cupy.v2": v2, "cupy.gqa": gqa, "cupy.rows": rows, "cupy.dense": dense}
WRONG = {"wrong.cupy.ignores_table": cupy_ignores_table, "wrong.cupy.off_by_one": cupy_off_by_one}
SPLIT_KV = {"cupy.v2": v2, "cupy.gqa": gqa, "cupy.rows": rows, "cupy.dense": dense}
# The CPU executor's checks walk the registry, so a new CUDA C variant is checked without editing this file.
CUDA_C = registry.variants("cupy") + [n for n in registry.variants("wrong") if registry.get(n).family == "cupy"]
CUDA_C_WRITERS = registry.cache_writers("cupy")
# Backends the backend-independent properties run on: the CPU executor always, a GPU when there is one.
BACKENDS = ["cpu"] + (["gpu"] if backends.gpu_present() else [])


def test_family_is_registered():
    assert set(ATTENTION) <= set(registry.variants("cupy"))
    assert set(WRONG) <= set(registry.variants("wrong"))
    assert "cupy.write_cache" in registry.cache_writers("cupy")
    for name in ATTENTION:
        assert registry.get(name).module is ATTENTION[name]


# ---- compiled for real GPUs ---------------------------------------------------------------------

# Per .cu: instantiations spanning its template space (thread-group sizes 32, 2 and 1; vector counts
# below, at and above a warp; GQA tiles 1 and 8; both dtypes), compiled as one NVRTC program.
def _expressions():
    out = {
        v1.PATH: [v1.kernel_name(1, 80, "float32"), v1.kernel_name(16, 128, "float16"),
                  v1.kernel_name(256, 256, "float32")],
        v2.PATH: [v2.kernel_name(2, 96, "float16"), v2.kernel_name(64, 32, "float32"),
                  common.reduce_name(128, "float16")],
        gqa.PATH: [gqa.kernel_name(16, 128, 8, "float16"), gqa.kernel_name(32, 64, 1, "float32"),
                   rows.kernel_name(1, 128, 4, "float16"), rows.kernel_name(256, 256, 8, "float32"),
                   rows.kernel_name(8, 80, 2, "float16"), common.reduce_name(64, "float32")],
        dense.PATH: [dense.kernel_name(16, 128, 4, "float16"), dense.kernel_name(128, 80, 2, "float32"),
                     common.reduce_name(80, "float32")],
        cupy_write_cache.PATH: [f"write_cache<{t}>" for _, t in cupy_write_cache.UNITS]
        + cupy_write_cache.TOKEN_BATCH[:1] + cupy_write_cache.NVFP4_BATCH[-1:],
        cupy_ignores_table.PATH: [cupy_ignores_table.kernel_name(16, 128, "float16")],
        cupy_off_by_one.PATH: [cupy_off_by_one.kernel_name(8, 64, "float32")],
    }
    return out


@pytest.mark.parametrize("arch", nvrtc.ARCHS)
@pytest.mark.parametrize("path", list(_expressions()), ids=lambda p: p.name)
def test_every_cu_compiles_for_gpu_targets(path, arch):
    expressions = _expressions()[path]
    compiled = nvrtc.compile_cubin(common.load_source(path), expressions, arch=arch, options=common.OPTIONS)
    assert compiled.cubin[:4] == b"\x7fELF", "NVRTC should return a cubin (ELF)"
    for expr in expressions:
        res = compiled.resources[expr]
        assert 0 < res.registers <= 255, (expr, res)
        assert res.static_shared_bytes < common.SHARED_LIMIT_BYTES, (expr, res)


@pytest.mark.parametrize("arch", nvrtc.ARCHS)
@pytest.mark.parametrize("name", list(ATTENTION) + ["cupy.write_cache"])
def test_compile_report_at_block_size_16(name, arch):
    module = ATTENTION.get(name, cupy_write_cache)
    report = module.compile_report(16, 128, "float16", arch)
    assert set(report) >= {"registers", "static_shared_bytes", "dynamic_shared_bytes", "local_bytes", "spill_stores",
                           "spill_loads", "threads_per_block", "path"}
    assert report["path"] == "NVRTC -> cubin" and report["arch"] == arch
    assert 0 < report["registers"] <= 255
    if name in ATTENTION:
        # The launchers' shared-memory bound uses this formula: it must match what ptxas reports.
        tile = 1 if name in ("cupy.v1", "cupy.v2") else gqa.tile_for(gqa.REPORT_GROUP)
        assert report["static_shared_bytes"] == common.attend_static_shared_bytes(128, tile)
        assert report["threads_per_block"] == common.NUM_THREADS
        assert report["static_shared_bytes"] + report["dynamic_shared_bytes"] <= common.SHARED_LIMIT_BYTES


def test_ptxas_log_parsing():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1kILi16EfEvPT0_' for 'sm_90'
ptxas info    : Function properties for _Z1kILi16EfEvPT0_
ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 544 bytes smem
"""
    res = nvrtc.parse_ptxas_log(log)["_Z1kILi16EfEvPT0_"]
    assert (res.registers, res.static_shared_bytes, res.local_bytes, res.spill_stores, res.spill_loads) == (40, 544, 24, 8, 12)


def test_load_source_inlines_local_headers_once():
    code = common.load_source(v1.PATH)
    assert '#include "common.cuh"' not in code and "namespace pa" in code and "paged_attention_v1" in code
    assert code.count("struct alignas(16) Pack16") == 1
    assert "#include <cuda_fp16.h>" in code  # system headers are left to the compiler
    wrong = common.load_source(cupy_ignores_table.PATH)
    assert "namespace pa" in wrong and '#include "' not in wrong


# ---- on the CPU executor: bounds, thread order, partitions, twins --------------------------------

def _problems():
    """A handful of small problems reaching the bounds: context 1, k*bs and k*bs + 1, the table at capacity
    (entries past a sequence's end are -1), block sizes 1, 16 and 256, a GQA group of 3 (a partly
    used tile), head dims 64 and 80, both dtypes, NaN in every unused slot."""
    return [
        DecodeProblem.random(41, num_seqs=3, num_heads=3, num_kv_heads=1, head_dim=80, block_size=1,
                             context_lens=[1, 7, 40], dtype="float32"),
        DecodeProblem.random(42, num_seqs=3, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                             context_lens=[16, 33, 1], dtype="float16"),
        DecodeProblem.random(43, num_seqs=2, num_heads=8, num_kv_heads=1, head_dim=64, block_size=256,
                             context_lens=[257, 3], dtype="float16"),
    ]


def _run(module, problem, partition_size=None, backend="cpu", **cpu_options):
    with common.cpu_options(**cpu_options):
        kwargs = {} if partition_size is None else dict(partition_size=partition_size)
        prepared = module.prepare(problem, backend, **kwargs)
        prepared.launch()
        return outputs(prepared, problem)


def test_cpu_options_reach_the_executor():
    p = _problems()[0]
    name = v1.kernel_name(p.block_size, p.head_dim, p.dtype)
    batch = [v1.kernel_name(b, p.head_dim, p.dtype) for b in common.POW2_BLOCK_SIZES]
    with common.cpu_options(asan=True, thread_order="reverse"):
        kernel = common.get_function("cpu", v1.PATH, name, batch)
    assert kernel.asan is True and kernel.thread_order == "reverse"
    assert common.get_function("cpu", v1.PATH, name, batch) is not kernel


def test_registry_walk_covers_the_family():
    assert set(ATTENTION) <= set(CUDA_C) and set(WRONG) <= set(CUDA_C)
    assert "cupy.write_cache" in CUDA_C_WRITERS


# ---- every CUDA C variant under the executor's checking modes (CPU only) ---------------------------

# Each mode is switched process-wide (sandbox.cpucuda.modes: the SANDBOX_CPUCUDA_* variables), so the
# kernels the launchers build through sandbox.devices.backends.raw_module run in it without any option passing.
CPU_MODES = {
    "asan": dict(asan=True),
    "racecheck": dict(racecheck=True),
    "poison-nan": dict(poison="nan"),
    "poison-finite": dict(poison="finite"),
}


@pytest.mark.parametrize("mode", list(CPU_MODES))
@pytest.mark.parametrize("name", CUDA_C)
def test_cuda_c_variant_under_each_executor_mode(name, mode):
    """ASan: no out-of-bounds access; racecheck: no data race; both poisons: right results (reads of
    unwritten shared memory would show). Negative controls must run clean of crashes, stray accesses and
    races on the first problem (block size 1, a partly used GQA tile, float32); whether the comparison
    catches them is tests/kernels/test_variants.py's job (some controls are wrong only with options)."""
    wrong = name.startswith("wrong.")
    problems = within(name, _problems())
    for problem in problems if not wrong else problems[:1]:
        with modes(**CPU_MODES[mode]):
            result = check_problem(name, problem, "cpu")
        assert result.error is None, f"{name} in mode {mode} on {problem}: {result.error}"
        if not wrong:
            assert result.ok, f"{name} in mode {mode} on {problem}: {result.comparison} ({last_poison()})"


@pytest.mark.parametrize("name", [n for n in CUDA_C if not n.startswith("wrong.")])
def test_reversed_thread_order_gives_identical_results(name):
    """Threads (and blocks) in reverse order: a missing barrier would change the result."""
    for problem in within(name, _problems()):
        forward = run_problem(name, problem, "cpu")
        with modes(order="reverse"):
            backward = run_problem(name, problem, "cpu")
        np.testing.assert_array_equal(backward, forward)


@pytest.mark.parametrize("mode", ["asan", "racecheck", "order-reverse", "poison-finite"])
@pytest.mark.parametrize("writer", CUDA_C_WRITERS)
def test_cache_writer_under_each_executor_mode(writer, mode):
    module = registry.get_cache_writer(writer).module
    switch = dict(order="reverse") if mode == "order-reverse" else CPU_MODES[mode]
    rng = np.random.default_rng(7)
    for dtype, head_dim, kv_heads in (("float16", 8, 1), ("float32", 6, 3), ("float16", 3, 1)):
        cache = np.full((3, 4, kv_heads, head_dim), np.nan, dtype)
        key = rng.standard_normal((5, kv_heads, head_dim)).astype(dtype)
        value = rng.standard_normal((5, kv_heads, head_dim)).astype(dtype)
        slots = np.array([11, -1, 0, 5, 3])
        expected_k, expected_v = cache.copy(), cache.copy()
        reference.write_cache(expected_k, expected_v, key, value, slots)
        with modes(**switch):
            prepared = module.prepare_write(cache, cache.copy(), key, value, slots, "cpu")
            prepared.launch()
            got_k, got_v = prepared.result()
        np.testing.assert_array_equal(got_k, expected_k)
        np.testing.assert_array_equal(got_v, expected_v)


# ---- backend-independent properties (every available backend) ----------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(ATTENTION))
def test_head_dims_beyond_the_shared_strategy(name, backend):
    """Head dims 96 (12 or 24 vectors: partly idle lanes) and 256 (more vectors than a warp has lanes)."""
    for seed, head_dim, dtype, block_size, ratio in ((61, 96, "float16", 8, 1), (62, 256, "float32", 32, 2)):
        problem = DecodeProblem.random(seed, num_seqs=2, num_heads=2 * ratio, num_kv_heads=2, head_dim=head_dim,
                                       block_size=block_size, context_lens=[block_size * 3 + 1, 2], dtype=dtype)
        assert_close(_run(ATTENTION[name], problem, backend=backend), expected_output(problem), problem.dtype,
                     f"{name} on {problem} ({backend})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_cache_with_no_tokens_launches_nothing(backend):
    cache = np.full((2, 4, 1, 8), np.nan, np.float16)
    empty = np.zeros((0, 1, 8), np.float16)
    prepared = cupy_write_cache.prepare_write(cache, cache.copy(), empty, empty, np.zeros(0, np.int64), backend)
    prepared.launch()
    got_k, _ = prepared.result()
    assert np.isnan(got_k).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(SPLIT_KV))
def test_split_kv_result_does_not_depend_on_partition_size(name, backend):
    """One sequence spans many partitions while the others leave most grid slots empty (context 1, 5):
    empty partitions never write and the reduce never reads them (the scratch is NaN-filled)."""
    module = SPLIT_KV[name]
    problem = DecodeProblem.random(51, num_seqs=3, num_heads=4, num_kv_heads=2, head_dim=64, block_size=8,
                                   context_lens=[300, 1, 5], dtype="float32")
    expected = expected_output(problem)
    results = {}
    for partition in (8, 16, 24, 64, 296, 304, 512, 1024):
        results[partition] = _run(module, problem, partition_size=partition, backend=backend)
        assert_close(results[partition], expected, problem.dtype, f"{name} with partition_size {partition}")
    base = results[512]
    for partition, got in results.items():
        np.testing.assert_allclose(got, base, rtol=1e-5, atol=1e-6, err_msg=f"partition_size {partition} vs 512")


def test_partition_size_must_be_a_multiple_of_the_block_size():
    problem = DecodeProblem.random(52, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=64, block_size=16,
                                   context_lens=[40], dtype="float32")
    for bad in (24, 8, 0):
        with pytest.raises(ValueError, match=f"partition_size {bad} must be a positive multiple of block_size 16"):
            v2.prepare(problem, "cpu", partition_size=bad)
    assert common.partition_for(256, None) == 512 and common.partition_for(1024, None) == 1024


@pytest.mark.parametrize("backend", BACKENDS)
def test_dense_twin_equals_the_paged_kernel_bit_for_bit(backend):
    """cupy.dense is its twin (cupy.rows) without the block table: same arithmetic in the same order."""
    assert dense.TWIN is rows and registry.get("cupy.rows").module is rows
    for problem in _problems():
        np.testing.assert_array_equal(_run(dense, problem, backend=backend), _run(dense.TWIN, problem, backend=backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_and_gqa_compute_the_same_function_at_every_block_size(backend):
    """Two thread mappings of one algorithm: equal to rounding, from block size 1 (a lookup per token) to 256."""
    for block_size in (1, 2, 8, 32, 256):
        problem = DecodeProblem.random(60 + block_size, num_seqs=3, num_heads=8, num_kv_heads=2, head_dim=80,
                                       block_size=block_size, context_lens=[1, 2 * block_size + 3, 300],
                                       dtype="float16")
        got = _run(rows, problem, backend=backend)
        assert_close(got, expected_output(problem), problem.dtype, f"rows bs{block_size}")
        np.testing.assert_allclose(got.astype(np.float32), _run(gqa, problem, backend=backend).astype(np.float32),
                                   rtol=2e-3, atol=2e-3)


def test_dense_cache_is_the_gathered_sequence_with_nan_padding():
    p = _problems()[1]
    keys = dense.contiguous_cache(p.key_cache, p.block_tables, p.context_lens)
    assert keys.shape == (p.num_seqs, int(p.context_lens.max()), p.num_kv_heads, p.head_dim)
    for s, n in enumerate(p.context_lens):
        for t in range(n):
            np.testing.assert_array_equal(keys[s, t], p.key_cache[p.block_tables[s, t // p.block_size], t % p.block_size])
        assert np.isnan(keys[s, n:]).all()


def test_gqa_tile_covers_any_group():
    assert [gqa.tile_for(g) for g in (1, 2, 3, 4, 5, 8, 9, 16)] == [1, 2, 4, 4, 8, 8, 8, 8]
    # A group of 16 takes two blocks per KV head; a group of 6 one block with 2 idle head slots.
    for group in (6, 16):
        problem = DecodeProblem.random(53, num_seqs=2, num_heads=group, num_kv_heads=1, head_dim=64, block_size=32,
                                       context_lens=[70, 33], dtype="float32")
        assert_close(_run(gqa, problem), expected_output(problem), problem.dtype, f"gqa group {group}")


def test_v1_refuses_contexts_beyond_shared_memory_before_launch():
    bound = v1.max_context(64)
    assert bound * 4 + common.attend_static_shared_bytes(64, 1) <= common.SHARED_LIMIT_BYTES
    problem = DecodeProblem.random(54, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=64, block_size=256,
                                   context_lens=[bound + 1], dtype="float16", nan_fill=False)
    with pytest.raises(ValueError, match=rf"cupy.v1 keeps all logits in shared memory: context length {bound + 1} "
                                         rf"exceeds its bound of {bound} tokens"):
        v1.prepare(problem, "cpu")


def test_limits_are_declared():
    for name, module in ATTENTION.items():  # rows and dense (row-mapped) take any block size, the others powers of two
        assert module.LIMITS.block_sizes == (None if name in ("cupy.rows", "cupy.dense") else common.POW2_BLOCK_SIZES)
        assert set(module.LIMITS.head_dims) >= {32, 64, 80, 96, 128, 256}
        assert {"float32", "float16"} <= set(module.LIMITS.dtypes)
    for name in WRONG:
        assert registry.get(name).limits == v1.LIMITS


@pytest.mark.parametrize("name", list(ATTENTION))
def test_registers_stay_bounded_when_one_lane_holds_a_whole_row(name):
    """Block size >= 32 gives one lane per token (a whole K row): K is loaded in chunks of 8 vectors,
    so registers do not grow with the block size (before: 168-255 registers and KBs of spills at
    block size >= 32). ptxas still spills a few bytes in some configurations at 64-80 registers."""
    for block_size in (16, 32, 256):
        report = ATTENTION[name].compile_report(block_size, 128, "float16", "sm_90")
        assert report["registers"] <= 128 and report["spill_stores"] <= 16, (block_size, report)
