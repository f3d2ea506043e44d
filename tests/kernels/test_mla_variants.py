"""One suite for every registered MLA variant: property tests against the reference (out and lse), fixed edge
cases, the entry point sandbox.run_mla, refusals before launch, and the negative controls rejected.

Nothing here names a variant: the MLA variants are the registry's variants(problem="mla").
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from hypothesis import Phase, assume, given, settings
from hypothesis import strategies as st

import sandbox
from sandbox.checking import nan_inputs
from sandbox.checking.mla_check import check_mla_problem, expected_mla, mla_edge_cases
from sandbox.problem import DecodeProblem, MLAProblem
import sandbox.problem.mla.strategies  # noqa: F401  (attaches kinds.MLA.strategies)
from sandbox.variant import Unsupported, registry
from sandbox.variant.mla.limits import MLALimits

MLA = registry.variants(problem="mla")
WRONG_MLA = registry.variants("wrong", problem="mla")
# Shapes per family: the Numba simulator pays several microseconds per multiply-add (a latent row is 576 + 512
# per head and token), so its problems stay tiny; the CPU executor takes serving-like heads (two tiles of 16).
FAMILY_SHAPES = {
    "numpy": dict(max_tokens=300, max_heads=4),
    "numba": dict(max_tokens=20, max_num_seqs=2, max_heads=2, max_query_tokens=3, max_topk=8, max_multiply_adds=25_000),
    "cupy": dict(max_tokens=300, max_heads=18, max_query_tokens=8),
}
FAMILY_EXAMPLES = {"numpy": None, "numba": 5, "cupy": 10}   # under the "ci" profile; others scale them
EDGE_CASES = {"numpy": dict(), "numba": dict(num_heads=1, block_sizes=(1, 4), max_tokens=9, brief=True), "cupy": dict(num_heads=5)}


def examples(family: str) -> dict:
    n = FAMILY_EXAMPLES[family]
    if n is None:
        return {}
    return {"max_examples": max(1, round(n * settings.default.max_examples / settings.get_profile("ci").max_examples))}


def assert_matches_reference(name: str, problem: MLAProblem) -> None:
    result = check_mla_problem(name, problem)
    assert result.error is None, f"{name} raised on {result.problem}: {result.error}"
    assert result.comparison.ok, f"{name} is wrong on {result.problem}:\n{result.comparison.report}"


def property_test(name: str, **overrides):
    variant = registry.get(name)

    @settings(**{**examples(variant.family), **overrides})
    @given(problem=variant.kind.strategies(variant.limits, **FAMILY_SHAPES[variant.family]))
    def matches_reference(problem):
        assert_matches_reference(name, problem)

    return matches_reference


def test_the_registry_knows_the_mla_variants_apart():
    assert set(MLA) >= {"numpy.mla", "numba.mla", "cupy.mla"} and len(WRONG_MLA) >= 2
    assert not set(MLA) & set(registry.variants()), "decode suites never meet an MLA variant"
    assert all(isinstance(registry.get(n).limits, MLALimits) for n in MLA + WRONG_MLA)
    assert set(registry.variants(problem=None)) == set(registry.variants()) | set(MLA)
    with pytest.raises(ValueError, match="unknown problem kind 'prefill'"):
        registry.variants(problem="prefill")


@pytest.mark.parametrize("name", MLA)
def test_mla_variant_matches_reference_on_random_problems(name):
    property_test(name)()


@pytest.mark.parametrize("name", MLA)
def test_mla_variant_matches_reference_on_edge_cases(name):
    variant = registry.get(name)
    for label, problem in mla_edge_cases(variant.limits, **EDGE_CASES[variant.family]):
        assert_matches_reference(name, problem)


NAN_EXAMPLES = {"numpy": 3, "numba": 1, "cupy": 1}   # the NaN property's examples under the "ci" profile


def draw_planted_nan(draw, problem: MLAProblem) -> MLAProblem:
    """`problem` with one NaN in its data: a query element of a row that reads a token, or a latent element some
    row reads (float caches; fp8 records are bytes)."""
    rows = np.flatnonzero(problem.tokens_per_row() > 0)
    slots = nan_inputs.read_slots(problem) if nan_inputs.cache_holds_nan(problem) else np.array([], np.int64)
    assume(len(rows) > 0)  # a sparse draw where every index is invalid reads nothing: no row can turn NaN
    places = ["query"] + (["latent"] if len(slots) else [])
    if draw(st.sampled_from(places)) == "query":
        return nan_inputs.plant_in_query(problem, int(draw(st.sampled_from(list(rows)))),
                                         draw(st.integers(0, problem.num_heads - 1)),
                                         draw(st.integers(0, problem.query.shape[2] - 1)))
    return nan_inputs.plant_in_cache(problem, "latent", draw(st.sampled_from(list(slots))), 0,
                                     draw(st.integers(0, problem.latent_cache.shape[2] - 1)))


@pytest.mark.parametrize("name", MLA)
def test_mla_variant_propagates_nan_to_exactly_the_rows_that_read_it(name):
    """NaN is data: a NaN query or read latent element makes exactly the reference's NaN rows NaN (out and lse);
    every other row stays clean."""
    variant = registry.get(name)
    n = NAN_EXAMPLES[variant.family]

    @settings(max_examples=max(1, round(n * settings.default.max_examples / settings.get_profile("ci").max_examples)))
    @given(problem=variant.kind.strategies(variant.limits, **FAMILY_SHAPES[variant.family]), data=st.data())
    def nan_is_data(problem, data):
        planted = draw_planted_nan(data.draw, problem)
        assert np.isnan(expected_mla(planted)[0]).any(), "the planted NaN reaches no row: the case tests nothing"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            assert_matches_reference(name, planted)

    nan_is_data()


@pytest.mark.parametrize("name", WRONG_MLA)
def test_property_test_rejects_mla_negative_control(name):
    """The suite above must fail on every deliberately broken MLA variant (no shrinking: only the verdict)."""
    test = property_test(name, phases=[Phase.explicit, Phase.generate], max_examples=20)
    with pytest.raises(AssertionError, match="is wrong on|raised on"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        test()


@pytest.mark.parametrize("name", WRONG_MLA)
def test_negative_control_fails_a_fixed_edge_case(name):
    """Each control's flaw is caught by a named edge case too, not only by some random draw."""
    limits = registry.get(name).limits
    assert any(not check_mla_problem(name, problem).ok
               for _, problem in mla_edge_cases(limits, num_heads=2, block_sizes=(16,)))


def test_run_mla_takes_strided_inputs_and_returns_out_and_lse():
    p = MLAProblem.random(21, num_seqs=2, num_heads=3, context_lens=[5, 40], block_size=16, query_lens=[2, 3],
                          topk=6, kv_format="fp8_record")
    wide = np.zeros(p.query.shape[:2] + (2 * 576,), p.query.dtype)
    wide[:, :, ::2] = p.query
    out, lse = sandbox.run_mla("numpy.mla", wide[:, :, ::2], p.latent_cache, p.block_tables, p.context_lens,
                               query_start=p.query_start, indices=p.indices, return_lse=True)
    assert out.shape == (5, 3, 512) and out.dtype == p.dtype and out.flags.c_contiguous
    assert lse.shape == (5, 3) and lse.dtype == np.float32
    plain = sandbox.run_mla("numpy.mla", *p.arrays(), **p.kwargs())
    np.testing.assert_array_equal(plain, out)


@pytest.mark.parametrize("name", MLA)
def test_every_index_invalid_gives_zero_and_minus_inf_and_one_index_gives_its_value(name):
    p = MLAProblem.random(22, num_seqs=2, num_heads=2, context_lens=[3, 9], block_size=4, topk=5, valid_counts=[0, 1])
    out, lse = sandbox.run_mla(name, *p.arrays(), **p.kwargs(), return_lse=True)
    assert (out[0] == 0).all() and np.isneginf(lse[0]).all()
    slot = int(p.indices[1][p.indices[1] >= 0][0])
    value = p.latent_cache.reshape(-1, 576)[slot, :512]
    np.testing.assert_array_equal(out[1], np.broadcast_to(value, (2, 512)))
    logit = p.query[1].astype(np.float64) @ p.latent_cache.reshape(-1, 576)[slot].astype(np.float64) / 24
    np.testing.assert_allclose(lse[1], logit, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", MLA)
def test_mla_variant_refuses_before_launch(name):
    p = MLAProblem.random(23, num_seqs=2, num_heads=2, context_lens=[3, 9], block_size=4, topk=2)
    with pytest.raises(ValueError, match=r"indices\[0\] holds slot \d+ more than once"):
        sandbox.run_mla(name, *p.arrays(), query_start=None, indices=np.full((2, 2), p.indices.max(), np.int32))
    with pytest.raises(ValueError, match=rf"{name} solves mla problems \(sandbox.run_mla\), not decode"):
        sandbox.run_problem(name, DecodeProblem.random(1, num_seqs=1, max_context_len=8))


def test_decode_variants_are_refused_by_run_mla_and_limits_are_enforced():
    p = MLAProblem.random(24, num_seqs=1, num_heads=2, context_lens=[5], block_size=4, topk=3)
    with pytest.raises(ValueError, match=r"numpy.gather solves decode problems \(sandbox.run\), not mla; mla "
                                         r"variants: numpy.mla"):
        sandbox.run_mla_problem("numpy.gather", p)
    limits = MLALimits(block_sizes=(16,), dtypes=("float16",), kv_formats=(), modes=("dense",), max_query_len=1)
    with pytest.raises(Unsupported, match="x does not support block_size=4"):
        limits.check("x", p)
    bf16 = MLAProblem.random(25, num_seqs=1, num_heads=2, context_lens=[5], block_size=16)
    fp16 = MLAProblem.random(26, num_seqs=1, num_heads=2, context_lens=[5], block_size=16, dtype="float16",
                             kv_format="fp8_record", topk=2, query_lens=[2])
    for what, problem, limits_ in [
            ("dtype=bfloat16", bf16, limits),
            ("kv_format=fp8_record", fp16, limits),
            ("mode=sparse", fp16, dataclasses.replace(limits, kv_formats=("fp8_record",))),
            ("query_len=2", fp16, dataclasses.replace(limits, kv_formats=("fp8_record",), modes=("dense", "sparse")))]:
        with pytest.raises(Unsupported, match=f"x does not support {what}"):
            limits_.check("x", problem)
    with pytest.raises(Unsupported, match="solves MLA problems"):
        limits.check("x", DecodeProblem.random(1, num_seqs=1, max_context_len=8))


@pytest.mark.parametrize("name", [n for n in MLA if registry.get(n).tunables])
def test_every_declared_tunable_configuration_matches_the_reference(name):
    """Split-KV partitions of each declared size (several per row, so the merge runs); an undeclared value refused."""
    from sandbox.checking.mla_check import compare_mla, expected_mla
    from sandbox.variant import tunables
    from sandbox.variant.mla.runner import prepare_mla

    module = registry.get(name).module
    problems = (MLAProblem.random(30, num_seqs=2, num_heads=2, context_lens=[1100, 300], block_size=64),
                MLAProblem.random(31, num_seqs=1, num_heads=3, context_lens=[900], block_size=16, topk=1030,
                                  kv_format="fp8_record", valid_counts=[700]))
    if registry.get(name).family == "numba":  # threads per block, simulated: every thread a Python thread
        problems = (MLAProblem.random(30, num_seqs=2, num_heads=2, context_lens=[9, 3], block_size=4),)
    for problem in problems:
        want = expected_mla(problem)
        for config in tunables.grid(module):
            prepared, _ = prepare_mla(name, problem, "cpu", config)
            prepared.launch()
            verdict = compare_mla(prepared.result(), prepared.lse(), *want, problem.dtype)
            assert verdict.ok, f"{name} {config} on {problem.describe()}:\n{verdict.report}"
        parameter = next(iter(module.TUNABLES))
        with pytest.raises(Unsupported, match=f"{name} does not support {parameter}=0"):
            sandbox.run_mla(name, *problem.arrays(), **problem.kwargs(), backend="cpu", config={parameter: 0})


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n in MLA if registry.get(n).limits.backends != ("cpu",)])
def test_mla_variant_on_gpu_matches_reference_at_serving_shape(name):
    for kwargs in (dict(), dict(kv_format="fp8_record", topk=2048)):
        problem = MLAProblem.random(32, num_seqs=4, num_heads=128, max_context_len=4096, block_size=64, **kwargs)
        result = check_mla_problem(name, problem, backend="gpu")
        assert result.error is None and result.comparison.ok, (result.error, result.comparison)


def test_mla_kernels_compile_for_real_gpus_without_spills_and_load_rows_in_16_byte_vectors():
    """compile_report of every MLA variant that has one (bf16 queries over fp8 records at sm_90, in one real-mode
    child): rows for head dim 576, no spills nor float64; the CUDA C kernels load rows with LDG.128."""
    from sandbox.analysis import resources, sass

    names = [n for n in MLA if hasattr(registry.get(n).module, "compile_report")]
    rows = resources.collect(names, block_sizes=(64,), head_dim=128, dtype="bfloat16", arch="sm_90",
                             kv_dtype="float8_e4m3fn", images=True)
    assert [r["variant"] for r in rows] == names and all(r["head_dim"] == 576 for r in rows)
    for row in rows:
        assert "error" not in row and "skipped" not in row, row
        for kernel in row.get("kernels", [row]):
            assert 0 < kernel["registers"] <= 255 and kernel["spill_stores"] == kernel["spill_loads"] == 0, row
    census = {(r["variant"], r["kernel"]): r for r in sass.census_rows(rows)}
    assert all(c["fp64"] == 0 and c["local"] == 0 for c in census.values()), census
    cuda_c = [c for (variant, kernel), c in census.items() if registry.get(variant).family == "cupy" and
              kernel == "partition"]
    assert cuda_c and all(c["vector_loads"] > 0 for c in cuda_c)  # the latent rows come in 16-byte loads
