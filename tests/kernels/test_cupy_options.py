"""The CUDA C family's precisions and attention options: bfloat16 queries, fp8 caches, k/v scales,
soft-cap, ALiBi and sliding windows on cupy.v1/v2/gqa/rows/dense; windows that skip (and never look up) the
blocks before them; fp8 cache writes; the negative controls for the options; GPU builds of one instantiation;
#line numbers after `#pragma once`; launch_partition of the split-KV variants.

Each test reuses a few instantiations per variant (the executor compiles one per dtype pair and option
bitmask; the g++ cache on disk keeps them across runs).
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import reference
import sandbox
from kernels.cupy_raw import common, dense, gqa, rows, v1, v2
from kernels.cupy_raw import write_cache as cupy_write_cache
from sandbox.devices import backends
from sandbox.analysis import nvrtc
from sandbox.variant import cuda_launch, registry
from sandbox.checking.check import check_problem, expected_output
from sandbox.checking.compare import assert_close
from sandbox.problem import DecodeProblem
from sandbox.variant import KERNEL_SUPPORT
from sandbox.variant.runner import outputs

ATTENTION = {"cupy.v1": v1, "cupy.v2": v2, "cupy.gqa": gqa, "cupy.rows": rows, "cupy.dense": dense}
SPLIT_KV = ("cupy.v2", "cupy.gqa", "cupy.rows", "cupy.dense")
CONTROLS = {  # negative control -> the option whose rule it breaks, as DecodeProblem.random keywords
    "wrong.cupy.window_off_by_one": dict(window_left=21),
    "wrong.cupy.softcap_before_scale": dict(logits_soft_cap=5.0),
    "wrong.cupy.alibi_flipped": dict(alibi_slopes="paper"),
}
EVERY_OPTION = dict(k_scale=0.5, v_scale=3.0, logits_soft_cap=5.0, alibi_slopes="random")
BLOCK = 8


def _assert_ok(name, problem):
    result = check_problem(name, problem, "cpu")
    assert result.error is None, f"{name} raised on {problem}: {result.error}"
    assert result.comparison.ok, f"{name} is wrong on {problem}:\n{result.comparison.report}"


def _run(module, problem, partition_size=None, **cpu_options):
    with common.cpu_options(**cpu_options):
        kwargs = {} if partition_size is None else dict(partition_size=partition_size)
        prepared = module.prepare(problem, "cpu", **kwargs)
        prepared.launch()
        return outputs(prepared, problem)


WINDOW = 11


def _window_problems():
    """Every option at once (float32). One window of WINDOW + 1 tokens starting, per sequence, at a block
    boundary, one past it, and before the context (window longer than it: no skip), plus context 1; then a
    window of the last token alone. Blocks wholly before a window are freed (-1) and their slots NaN. A GQA
    group of 3 (a partly used tile); extreme logits in one, so the soft-cap bites."""
    lens = [WINDOW + 1 + 2 * BLOCK, WINDOW + 1 + 3 * BLOCK + 1, WINDOW - 2, 1]
    for seed, window in enumerate((WINDOW, 0)):
        yield DecodeProblem.random(3100 + seed, num_seqs=4, num_heads=6, num_kv_heads=2, head_dim=64,
                                   block_size=BLOCK, context_lens=lens, window_left=window,
                                   extreme_logits=seed == 0, **EVERY_OPTION)


def test_every_variant_declares_full_support_and_keeps_its_shapes():
    for name, module in ATTENTION.items():
        limits = module.LIMITS
        # gqa's template (gqa.cu, rows.cuh's path) also reads NVFP4; v1 and v2 do not
        kv_dtypes = common.SUPPORT["kv_dtypes"] + (("nvfp4",) if module in (gqa, rows, dense) else ())
        assert (limits.dtypes, limits.kv_dtypes, limits.options) == (
            common.SUPPORT["dtypes"], kv_dtypes, common.SUPPORT["options"]), name
        assert set(KERNEL_SUPPORT["options"]) < set(common.SUPPORT["options"])
        any_block_size = name in ("cupy.rows", "cupy.dense")  # row-mapped: a runtime block size
        assert limits.block_sizes == (None if any_block_size else common.POW2_BLOCK_SIZES), name
        assert limits.head_dims == common.HEAD_DIMS, name
    for name in CONTROLS:
        assert registry.get(name).limits == v1.LIMITS


def test_kernel_names_keep_the_plain_instantiation():
    """The plain case (cache of the query's dtype, no option) is named by the template's defaults alone."""
    assert v1.kernel_name(16, 128, "float16") == "paged_attention_v1<16, 128, __half>"
    assert v2.kernel_name(1, 64, "bfloat16", "float8_e4m3fn", 5) == \
        "paged_attention_v2<1, 64, __nv_bfloat16, __nv_fp8_e4m3, 5>"
    assert gqa.kernel_name(16, 128, 4, "float16") == "paged_attention_gqa<16, 128, 4, __half, false>"
    assert rows.kernel_name(8, 80, 2, "float32", "float8_e5m2", 15) == \
        "paged_attention_gqa<8, 80, 2, float, true, __nv_fp8_e5m2, 15>"
    assert dense.kernel_name(8, 64, 4, "float32", flags=1) == "dense_attention<8, 64, 4, float, true, float, 1>"
    assert common.reduce_name(64, "bfloat16", window=True) == "pa::paged_attention_reduce<64, __nv_bfloat16, true>"


def test_option_flags_follow_the_options_in_use():
    plain = DecodeProblem.random(1, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=64, block_size=BLOCK,
                                 context_lens=[9], k_scale=0.5)
    assert common.option_flags(plain) == 0 and common.kernel_scale(plain) == np.float32(0.5 / 8)
    p = DecodeProblem.random(1, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=64, block_size=BLOCK,
                             context_lens=[9], window_left=3, alibi_slopes="paper", v_scale=2.0)
    assert common.option_flags(p) == common.OPT["OPT_WINDOW"] | common.OPT["OPT_ALIBI"] | common.OPT["OPT_VSCALE"]


# ---- options and precisions against the reference ------------------------------------------------------------

@pytest.mark.parametrize("name", list(ATTENTION))
def test_every_option_with_windows_that_free_their_blocks_under_asan(name):
    """All options at once (float32), under AddressSanitizer: the freed (-1) entries before each window are
    never looked up and their NaN slots never read (any stray access raises). Split-KV variants also run with
    partitions of one block, so a window starts partitions in the middle of blocks and several partitions merge."""
    module = ATTENTION[name]
    for problem in _window_problems():
        for s, first in enumerate(problem.first_read_tokens()):
            assert (problem.block_tables[s, :first // BLOCK] == -1).all()
        for partition in (None, BLOCK) if name in SPLIT_KV else (None,):
            got = _run(module, problem, partition, asan=True)
            assert_close(got, expected_output(problem), problem.dtype, f"{name} partition {partition} on {problem}")


def _bf16_e4m3_problem():
    return DecodeProblem.random(3200, num_seqs=3, num_heads=8, num_kv_heads=2, head_dim=80, block_size=BLOCK,
                                context_lens=[4 * BLOCK + 5, 2 * BLOCK, 1], dtype="bfloat16",
                                kv_dtype="float8_e4m3fn", k_scale=0.5 / 448, v_scale=2.0 / 448,
                                window_left=2 * BLOCK + 1, logits_soft_cap=30.0, alibi_slopes="paper")


@pytest.mark.parametrize("name", list(ATTENTION))
def test_bfloat16_queries_with_an_e4m3_cache_and_every_option(name):
    """bfloat16 query/output, e4m3 cache (k/v scales 1/448 and more), head dim 80: 5 fp8 vectors per row (lanes
    per V row not a power of two)."""
    _assert_ok(name, _bf16_e4m3_problem())


@pytest.mark.parametrize("name", list(ATTENTION))
def test_float16_queries_with_an_e5m2_cache_and_no_option_kernel(name):
    """An e5m2 cache whose k_scale (folded into the softmax scale) is the only option: the OPTS = 0 kernel
    with an fp8 cache; values over e5m2's whole range, subnormals included."""
    problem = DecodeProblem.random(3300, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64, block_size=BLOCK,
                                   context_lens=[3 * BLOCK + 1, 7], dtype="float16", kv_dtype="float8_e5m2",
                                   v_scale=1.0)
    assert common.option_flags(problem) == 0 and problem.options.k_scale == 1 / 57344
    _assert_ok(name, problem)


@pytest.mark.parametrize("option", [dict(window_left=BLOCK + 2), dict(logits_soft_cap=1.0, extreme_logits=True),
                                    dict(alibi_slopes="random"), dict(v_scale=0.25, k_scale=3.0)],
                         ids=["window", "softcap", "alibi", "kv_scale"])
def test_each_option_alone(option):
    """One option bit per kernel (cupy.v1: the option code is options.cuh's, shared by every variant)."""
    problem = DecodeProblem.random(3400, num_seqs=3, num_heads=4, num_kv_heads=2, head_dim=64, block_size=BLOCK,
                                   context_lens=[6 * BLOCK + 3, BLOCK, 2], **option)
    assert bin(common.option_flags(problem)).count("1") == 1
    _assert_ok("cupy.v1", problem)


def test_v1_bound_counts_the_window_not_the_context():
    """v1 keeps the logits of the tokens it reads: a window lets a context past its bound run."""
    bound = v1.max_context(64)
    problem = DecodeProblem.random(3500, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=64, block_size=256,
                                   context_lens=[bound + 300], dtype="float16", nan_fill=False)
    with pytest.raises(sandbox.Unsupported, match=f"context length {bound + 300} exceeds its bound of {bound}"):
        v1.prepare(problem, "cpu")
    windowed = DecodeProblem.random(3500, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=64, block_size=256,
                                    context_lens=[bound + 300], dtype="float16", window_left=40)
    prepared = v1.prepare(windowed, "cpu")
    assert prepared.launches[0][-1] == 4 * max(41, 4 * 64)  # shared memory for the 41 tokens it reads


def test_shared_memory_refusals_are_unsupported():
    problem = DecodeProblem.random(3501, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=64, block_size=16,
                                   context_lens=[20])
    with pytest.raises(sandbox.Unsupported, match="over the 49152-byte limit"):
        v2.prepare(problem, "cpu", partition_size=16384)


# ---- split-KV: the partition kernel alone --------------------------------------------------------------------

@pytest.mark.parametrize("name", SPLIT_KV)
def test_launch_partition_then_reduce_is_launch(name):
    problem = _bf16_e4m3_problem()
    prepared = ATTENTION[name].prepare(problem, "cpu", partition_size=BLOCK)
    assert [part for part, _ in prepared.launch_parts()] == ["partition", "reduce"]
    prepared.launch_partition()
    prepared.launch_reduce()
    parts = prepared.result().copy()
    prepared.launch()
    np.testing.assert_array_equal(parts, prepared.result())
    assert_close(parts, expected_output(problem), problem.dtype, name)


# ---- negative controls ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CONTROLS))
def test_negative_control_is_rejected_on_its_option(name):
    problem = DecodeProblem.random(3600, num_seqs=3, num_heads=4, num_kv_heads=2, head_dim=64, block_size=BLOCK,
                                   context_lens=[5 * BLOCK + 3, 4 * BLOCK, 3 * BLOCK + 1], **CONTROLS[name])
    assert set(problem.options.features) <= set(registry.get(name).limits.options)
    result = check_problem(name, problem, "cpu")
    assert result.error is None and not result.comparison.ok, f"{name} should be wrong on {problem}"
    assert check_problem("cupy.v1", problem, "cpu").ok  # the same problem, right in the control's twin


def test_window_control_stays_in_bounds_under_asan():
    """Its extra token may open a freed block (-1): read as block 0, so the control is wrong, never out of bounds."""
    problem = DecodeProblem.random(3601, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=64, block_size=BLOCK,
                                   context_lens=[5 * BLOCK, 3 * BLOCK], window_left=2 * BLOCK - 1)
    assert problem.first_read_tokens()[0] % BLOCK == 0 and problem.block_tables[0, 2] == -1
    module = registry.get("wrong.cupy.window_off_by_one").module
    got = _run(module, problem, asan=True)
    assert not np.allclose(got, expected_output(problem), atol=1e-3, equal_nan=False)


# ---- cache writes ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_write_cache_every_pair_is_exact(dtype):
    """Inputs of each dtype into a cache of that dtype (bits) and into e4m3/e5m2 caches (x / scale, nearest
    even, saturated, NaN kept): NaN, +-inf, values past the largest finite fp8, tiny values; rows of 16-byte
    vectors and odd rows."""
    rng = np.random.default_rng(7)
    for cache_dtype, (kv_heads, head_dim) in itertools.product([dtype, "float8_e4m3fn", "float8_e5m2"],
                                                               [(2, 16), (1, 5)]):
        x = (rng.standard_normal((6, kv_heads, head_dim)) * 300).astype(np.float32)
        x[0, 0, :5] = [np.nan, np.inf, -np.inf, 1e-30, -465.0]
        x[1, 0, :4] = [460.0, -70000.0, 464.0, 61000.0]
        with np.errstate(over="ignore"):
            key, value = x.astype(dtype), (x[::-1] * 0.5).astype(dtype)
        cache = np.full((3, 4, kv_heads, head_dim), np.nan, np.float32).astype(cache_dtype)
        slots = np.array([11, -1, 0, 5, 3, 7])
        expected_k, expected_v = cache.copy(), cache.copy()
        reference.write_cache(expected_k, expected_v, key, value, slots, k_scale=0.5, v_scale=2.0)
        prepared = cupy_write_cache.prepare_write(cache, cache.copy(), key, value, slots, "cpu", k_scale=0.5,
                                                  v_scale=2.0)
        prepared.launch()
        got_k, got_v = prepared.result()
        assert got_k.dtype == expected_k.dtype
        for got, expected in ((got_k, expected_k), (got_v, expected_v)):
            np.testing.assert_array_equal(got.astype(np.float32), expected.astype(np.float32),
                                          err_msg=f"{dtype} -> {cache_dtype}, row {kv_heads}x{head_dim}")


# ---- GPU builds: one instantiation per module; real CUDA for sm_80 and sm_90 -----------------------------------

def test_gpu_modules_hold_only_the_requested_kernel(monkeypatch):
    """On backend "gpu" each request compiles its own kernel, not a batch of every block size."""
    built = []

    class FakeModule:
        def __init__(self, expressions):
            self.expressions = expressions

        def get_function(self, expression):
            assert expression in self.expressions
            return lambda *args, **kwargs: None

    def fake_raw_module(backend, code, options=(), name_expressions=None, **cpu):
        built.append((backend, tuple(name_expressions)))
        return FakeModule(name_expressions)

    monkeypatch.setattr(backends, "raw_module", fake_raw_module)
    monkeypatch.setattr(backends, "to_device", lambda array, backend: array)
    cuda_launch._module.cache_clear()
    cuda_launch._function.cache_clear()
    try:
        problem = DecodeProblem.random(3700, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                                       context_lens=[20, 3], window_left=5)
        for module in (v1, v2, rows):
            module.prepare(problem, "gpu")
        assert built == [("gpu", (v1.kernel_name(16, 64, "float32", None, 1),)),
                         ("gpu", (v2.kernel_name(16, 64, "float32", None, 1),)),
                         ("gpu", (common.reduce_name(64, "float32", window=True),)),
                         ("gpu", (rows.kernel_name(16, 64, 2, "float32", None, 1),)),
                         ("gpu", (common.reduce_name(64, "float32", window=True),))]
        built.clear()
        common.get_function("cpu", v1.PATH, v1.kernel_name(1, 64, "float32"),
                            [v1.kernel_name(b, 64, "float32") for b in (1, 2)])
        assert built == [("cpu", (v1.kernel_name(1, 64, "float32"), v1.kernel_name(2, 64, "float32")))]
    finally:
        cuda_launch._module.cache_clear()
        cuda_launch._function.cache_clear()


@pytest.mark.parametrize("arch", nvrtc.ARCHS)
def test_precisions_and_options_compile_for_gpu_targets(arch):
    """Real CUDA headers (cuda_bf16.h, cuda_fp8.h; software fp8 conversion on sm_80): bfloat16 and fp8 with every
    option, and the fp8 cache writer."""
    plain_fp8 = v1.kernel_name(16, 128, "float16", "float8_e4m3fn", 0)
    programs = {
        v1.PATH: [v1.kernel_name(16, 128, "bfloat16", "float8_e4m3fn", 15), v1.kernel_name(1, 80, "float32",
                                                                                         "float8_e5m2", 3)]
        + ([plain_fp8] if arch == "sm_90" else []),
        cupy_write_cache.PATH: [cupy_write_cache.fp8_kernel_name("bfloat16", "float8_e4m3fn", True),
                                cupy_write_cache.fp8_kernel_name("float32", "float8_e5m2", False)],
    }
    for path, expressions in programs.items():
        compiled = nvrtc.compile_cubin(common.load_source(path), expressions, arch=arch, options=common.OPTIONS)
        for expr in expressions:
            res = compiled.resources[expr]
            assert 0 < res.registers <= 128 and res.spill_stores == 0, (expr, res)
        if path == v1.PATH and arch == "sm_90":  # 16 fp8 values per load: 128-bit loads for K and V
            from sandbox.analysis import sass
            try:
                sass.nvdisasm_path()
            except sass.SassError as exc:  # nvdisasm missing: tests/analysis/test_sass.py says so too
                pytest.skip(f"no disassembler: {exc}")
            census = sass.census(sass.function_sass(compiled.cubin, compiled.lowered[plain_fp8]))
            assert census.vector_loads >= 2 and census.local == 0 and census.fp64 == 0, census.as_row()


# ---- #line numbers -----------------------------------------------------------------------------------------------

def test_inlined_source_maps_every_line_to_its_file_and_number():
    """Walk load_source's output as the preprocessor does (#line directives): every line must be the line its
    mapping names, in the headers after `#pragma once` too (the pragma leaves a blank line); only the option
    prelude comes before the first mapping."""
    root = common.KERNEL_DIR.parent.parent
    prelude = common.option_prelude()  # generated from the option table, before the first #line
    for path in (v1.PATH, registry.get("wrong.cupy.alibi_flipped").module.PATH):
        file, number, checked = None, 0, 0
        source = common.load_source(path)
        assert source.startswith(prelude) and source[len(prelude):].startswith("#line 1 ")
        for line in source[len(prelude):].splitlines():
            m = re.match(r'#line (\d+) "([^"]+)"$', line)
            if m:
                number, file = int(m.group(1)), m.group(2)
                continue
            actual = (root / file).read_text().splitlines()
            original = actual[number - 1]
            assert line == original or (original.strip() == "#pragma once" and line == ""), (file, number, line)
            number += 1
            checked += 1
        assert checked > 400


def test_compiler_errors_name_the_right_line_of_a_header(tmp_path):
    """A header with `#pragma once` and an error on a known line: g++ (through the executor) names that line."""
    header = tmp_path / "header.cuh"
    header.write_text("// a header\n#pragma once\n\n__device__ int fine() { return 1; }\n"
                      "__device__ int broken() { return undeclared_name; }  // line 5\n")
    main = tmp_path / "main.cu"
    main.write_text('#include "header.cuh"\n__global__ void k(int* out) { out[0] = fine() + broken(); }\n')
    code = common.load_source(main)
    from sandbox.cpucuda import CpuRawModule
    from sandbox.cpucuda.errors import CpuCompileError
    with pytest.raises(CpuCompileError) as error:
        CpuRawModule(code=code, options=common.OPTIONS, name_expressions=["k"]).get_function("k")(
            (1,), (1,), (np.zeros(1, np.int32),))
    assert re.search(r"header\.cuh:5:\d+: error: .undeclared_name. was not declared", str(error.value)), \
        str(error.value)[:2000]
