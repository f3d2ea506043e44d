"""One suite for every registered variant, of every family: property tests against the reference,
fixed edge cases, declared limits refused before launch, and negative controls rejected.

Nothing here names a variant: a new one is picked up from the registry.
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from sandbox.variant import registry
from sandbox.checking import nan_inputs
from sandbox.checking.check import check_problem, edge_block_sizes, edge_case_problems, expected_output, option_edge_cases
from sandbox.problem.dtypes import FP8_DTYPES, QUERY_DTYPES
from sandbox.problem import options
from sandbox.problem.options import FEATURES
from sandbox.problem import DecodeProblem
from sandbox.problem.strategies import problems_for
from sandbox.variant import Unsupported

# Shapes per family: the Numba simulator (a Python thread per CUDA thread) and the CPU executor are
# slow, so their problems stay small; the strategy still reaches every edge case within them.
# max_query_tokens bounds the query rows of multi-token draws; max_multiply_adds rejects the rare simulated draw
# (about 1 in 10; the median draw has 40k) whose work alone would take most of the test's time.
FAMILY_SHAPES = {
    "numpy": dict(head_dims=(32, 64, 128), max_tokens=520, max_num_seqs=3, max_kv_heads=2),
    "numba": dict(head_dims=(32, 64, 80, 128), max_tokens=160, max_num_seqs=3, max_kv_heads=2, max_query_tokens=12,
                  max_multiply_adds=200_000),
    "cupy": dict(head_dims=(32, 64, 80, 128), max_tokens=520, max_num_seqs=3, max_kv_heads=2, max_query_tokens=32),
    # Triton's interpreter: one NumPy program at a time (about 1 ms per tile step), tiles of whole blocks.
    "triton": dict(head_dims=(32, 64, 80, 128), max_tokens=260, max_num_seqs=3, max_kv_heads=2, max_query_tokens=12),
    # FlashInfer's headers cost a g++ run ~10 s per head dim and dtype (kernels/flashinfer/decode.py batches the
    # GQA groups): one head dim here; tests/kernels/test_flashinfer_peer.py runs 128 and 256
    "flashinfer": dict(head_dims=(64,), max_tokens=520, max_num_seqs=3, max_kv_heads=2),
}
# Examples per family under the "ci" profile (None: the profile's own); other profiles scale them
# (HYPOTHESIS_PROFILE=thorough draws 20x as many).
FAMILY_EXAMPLES = {"numpy": None, "numba": 3, "cupy": 5, "triton": 4, "flashinfer": 4}
# The simulator pays for every problem: there the fixed edge cases run in the first declared dtype.
# The executor compiles each option instantiation alone (g++, ~2 s cold): both families run the brief
# set of option cases (the property test draws every dtype and option).
SIMULATED_FAMILIES = ("numba", "triton")
# Families whose own files walk the block sizes with the context-length traps (1, k*bs, k*bs + 1): Numba's
# test_every_block_size_with_context_traps (every power of two) and test_block_sizes_that_are_not_powers_of_two
# (1, 3, 61, 528). Their fixed cases here skip the per-block-size problems, which would repeat those in the
# simulator; the GQA, extreme-logit, shared-prefix and option cases stay.
BLOCK_SIZES_WALKED_ELSEWHERE = ("numba",)
# The fixed cases' head dim: 64, but 32 in the simulator, whose cost grows with the threads a head dim
# launches (a third less time; the property tests draw 32..128 and the family files test 96..512).
EDGE_HEAD_DIMS = {"numba": 32, "triton": 32}
COMPILED_FAMILIES = ("cupy", "flashinfer")
BRIEF_OPTION_FAMILIES = ("numba", "cupy", "triton", "flashinfer")


def family_examples(family: str) -> int | None:
    examples = FAMILY_EXAMPLES[family]
    if examples is None:
        return None
    scale = settings.default.max_examples / settings.get_profile("ci").max_examples
    return max(1, round(examples * scale))


def strategy_for(variant):
    """The shared strategy within the variant's declared limits (dtypes, fp8 caches, options, query lengths)."""
    return problems_for(variant.limits, **FAMILY_SHAPES[variant.family])


def assert_matches_reference(name: str, problem: DecodeProblem, backend: str = "auto") -> None:
    result = check_problem(name, problem, backend)
    assert result.error is None, f"{name} raised on {result.problem}: {result.error}"
    peer = registry.get(name).family_plugin.peer_label()  # Family.peer: "peer: <project> <version>", else None
    if peer and not result.comparison.ok:  # another project's kernel: a wrong answer is a finding about it
        warnings.warn(f"{name} ({peer}) is wrong on {result.problem}:\n{result.comparison.report}")
        return
    assert result.comparison.ok, f"{name} is wrong on {result.problem}:\n{result.comparison.report}"


def property_test(name: str, **overrides):
    variant = registry.get(name)
    examples = family_examples(variant.family)
    extra = {"max_examples": examples} if examples else {}
    extra.update(overrides)

    @settings(**extra)
    @given(problem=strategy_for(variant))
    def matches_reference(problem):
        assert_matches_reference(name, problem)

    return matches_reference


@pytest.mark.parametrize("name", registry.variants())
def test_variant_matches_reference_on_random_problems(name):
    property_test(name)()


@pytest.mark.parametrize("name", registry.variants())
def test_variant_matches_reference_on_edge_cases(name):
    variant = registry.get(name)
    limits = variant.limits
    wanted = EDGE_HEAD_DIMS.get(variant.family, 64)
    head_dim = wanted if limits.head_dims is None or wanted in limits.head_dims else limits.head_dims[0]
    block_sizes = () if variant.family in BLOCK_SIZES_WALKED_ELSEWHERE else edge_block_sizes(limits)
    # The simulator pays for every problem and the executor compiles every (dtype, block size) alone: the
    # fixed cases run in the first declared dtype there (the property test draws every dtype).
    first_only = variant.family in SIMULATED_FAMILIES + COMPILED_FAMILIES
    for dtype in limits.dtypes[:1] if first_only else limits.dtypes:
        for label, problem in edge_case_problems(head_dim, dtype, block_sizes):
            if limits.supports(problem):  # the fixed cases' own shapes (a GQA group of 8, block size 8) may step outside
                assert_matches_reference(name, problem)
    for label, problem in option_edge_cases(limits, head_dim, brief=variant.family in BRIEF_OPTION_FAMILIES):
        assert_matches_reference(name, problem)


# Examples of the NaN property per family under the "ci" profile (scaled like FAMILY_EXAMPLES).
NAN_EXAMPLES = {"numpy": 3, "numba": 1, "cupy": 1, "triton": 1, "flashinfer": 1}


def draw_planted_nan(draw, problem: DecodeProblem) -> DecodeProblem:
    """`problem` with one NaN in its data: a query element, or a key or value element some row reads."""
    places = ["query"] + (["key", "value"] if nan_inputs.cache_holds_nan(problem) else [])
    place = draw(st.sampled_from(places))
    if place == "query":
        return nan_inputs.plant_in_query(problem, draw(st.integers(0, problem.query.shape[0] - 1)),
                                         draw(st.integers(0, problem.num_heads - 1)),
                                         draw(st.integers(0, problem.head_dim - 1)))
    return nan_inputs.plant_in_cache(problem, place, draw(st.sampled_from(list(nan_inputs.read_slots(problem)))),
                                     draw(st.integers(0, problem.num_kv_heads - 1)),
                                     draw(st.integers(0, problem.key_cache.shape[3] - 1)))


@pytest.mark.parametrize("name", registry.variants())
def test_variant_propagates_nan_to_exactly_the_rows_that_read_it(name):
    """NaN is data: a NaN query or read cache element makes exactly the reference's NaN rows NaN (out and lse),
    every other row clean (compare counts a number where NaN is due as wrong)."""
    variant = registry.get(name)
    scale = settings.default.max_examples / settings.get_profile("ci").max_examples

    @settings(max_examples=max(1, round(NAN_EXAMPLES[variant.family] * scale)))
    @given(problem=strategy_for(variant), data=st.data())
    def nan_is_data(problem, data):
        planted = draw_planted_nan(data.draw, problem)
        expected = expected_output(planted)
        out = expected[0] if isinstance(expected, tuple) else expected
        assert np.isnan(out).any(), "the planted NaN reaches no row of the reference: the case tests nothing"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the simulator computes with the NaN as the GPU does
            assert_matches_reference(name, planted)

    nan_is_data()
    # and always one whole query row NaN (every logit of a head: what a NaN-skipping max turns into zeros) and one
    # read key, on the first fixed edge case (the instantiation the edge-case test compiles anyway)
    limits = variant.limits
    wanted = EDGE_HEAD_DIMS.get(variant.family, 64)
    head_dim = wanted if limits.head_dims is None or wanted in limits.head_dims else limits.head_dims[0]
    block_sizes = edge_block_sizes(limits)[:1] if variant.family not in BLOCK_SIZES_WALKED_ELSEWHERE else ()
    fixed = [p for _, p in edge_case_problems(head_dim, limits.dtypes[0], block_sizes) if limits.supports(p)][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert_matches_reference(name, nan_inputs.plant_in_query(fixed, 0, 0, 0))
        assert_matches_reference(name, nan_inputs.plant_in_cache(fixed, "key", int(nan_inputs.read_slots(fixed)[-1]),
                                                                 0, 0))


def test_scale_and_sinks_are_parameters_refused_when_not_finite():
    """Non-finite softmax scale or sinks are refused before launch, naming the argument (they are not data)."""
    from sandbox import run_problem
    problem = DecodeProblem.random(4, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, block_size=16,
                                   max_context_len=20)
    with pytest.raises(ValueError, match="scale must be a finite"):
        run_problem("numpy.gather", dataclasses.replace(problem, scale=float("nan")))
    with pytest.raises(ValueError, match=r"sinks\[1\] = nan is not finite"):
        run_problem("numpy.gather", dataclasses.replace(problem, options=dataclasses.replace(
            problem.options, sinks=np.array([0.5, np.nan], np.float32))))


@pytest.mark.parametrize("name", registry.variants())
def test_variant_refuses_what_it_does_not_declare_before_launch(name):
    limits = registry.get(name).limits
    unsupported = []
    if limits.block_sizes is not None:
        unsupported.append(("block_size", dict(block_size=3)))
    if limits.head_dims is not None:
        unsupported.append(("head_dim", dict(head_dim=max(limits.head_dims) + 8)))
    for dtype in set(QUERY_DTYPES) - set(limits.dtypes):
        unsupported.append(("dtype", dict(dtype=dtype)))
    for kv_dtype in set(FP8_DTYPES) - set(limits.kv_dtypes):
        unsupported.append(("kv_dtype", dict(kv_dtype=kv_dtype, dtype=limits.dtypes[0])))
    for feature in set(FEATURES) - set(limits.options):
        example = options.row(feature).example  # an example beside a format the variant lacks is refused for that
        if example.get("kv_dtype", limits.kv_dtypes[0] if limits.kv_dtypes else None) in (None, *limits.kv_dtypes):
            unsupported.append(("option", dict(example, dtype=limits.dtypes[0])))
    if limits.max_query_len is not None:
        unsupported.append(("query_len", dict(query_lens=limits.max_query_len + 1, dtype=limits.dtypes[0])))
    for what, kwargs in unsupported:
        shape = dict(num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=64, block_size=16, max_context_len=20)
        shape.update(kwargs)
        problem = DecodeProblem.random(5, **shape)
        with pytest.raises(Unsupported, match=f"{name} does not support {what}="):
            check_and_raise(name, problem)


def check_and_raise(name, problem):
    from sandbox import run_problem
    return run_problem(name, problem)


@pytest.mark.parametrize("name", registry.variants())
def test_run_rejects_out_of_range_table_entries(name):
    problem = DecodeProblem.random(9, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=64, block_size=16, max_context_len=40)
    problem.block_tables[1, 0] = problem.num_blocks + 100
    with pytest.raises(ValueError, match=r"block_tables\[1, 0\] = \d+ is out of range"):
        check_and_raise(name, problem)


@pytest.mark.parametrize("name", registry.variants("wrong"))
def test_property_test_rejects_negative_control(name):
    """The suite above must fail on every deliberately broken variant (no shrinking: we only need the verdict)."""
    test = property_test(name, phases=[Phase.explicit, Phase.generate], max_examples=40)
    with pytest.raises(AssertionError, match="is wrong on|raised on"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the simulated controls compute NaN/inf on purpose
        test()


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n in registry.variants() if registry.get(n).limits.backends != ("cpu",)])
def test_variant_on_gpu_matches_reference_at_serving_shape(name):
    problem = DecodeProblem.random(11, num_seqs=8, num_heads=32, num_kv_heads=8, head_dim=128, block_size=16,
                                   max_context_len=2048, dtype="float16")
    if registry.get(name).limits.supports(problem):
        assert_matches_reference(name, problem, backend="gpu")


def test_registry_lists_families_and_rejects_unknown_names():
    assert "numpy.gather" in registry.variants() and registry.variants("numpy") == ["numpy.gather"]
    assert not set(registry.variants()) & set(registry.variants("wrong"))
    with pytest.raises(ValueError, match="unknown variant 'nope'; valid names: .*numpy.gather"):
        registry.get("nope")
    assert np.all([registry.get(n).family in registry.FAMILIES for n in registry.variants() + registry.variants("wrong")])
