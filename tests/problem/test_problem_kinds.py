"""sandbox.problem.kinds: decode and MLA as ProblemKind objects that answer where code would switch on a name."""
from __future__ import annotations

import copy
import pathlib
import re

import numpy as np
import pytest
from hypothesis import given, settings

import sandbox.commands.check  # noqa: F401  (the layers that attach their parts: the check command,
import sandbox.problem.mla.strategies  # noqa: F401  the hypothesis strategies,
import sandbox.problem.strategies  # noqa: F401
import sandbox.sweep.measure.run  # noqa: F401  the sweep; sandbox itself loads the runners and the traffic counter)
from sandbox import DecodeProblem, MLAProblem
from sandbox.problem import kinds
from sandbox.sweep import shapes
from sandbox.sweep.measure.run import shape_kind
from sandbox.variant import registry

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_each_variant_solves_its_limits_kind():
    for name in registry.variants(problem=None) + registry.variants("wrong", problem=None):
        variant = registry.get(name)
        assert variant.kind in kinds.CHECKED and variant.problem == variant.kind.name, name
    assert registry.PROBLEMS == ("decode", "mla")
    assert registry.get("cupy.mla").kind is kinds.MLA and registry.get("cupy.v1").kind is kinds.DECODE


def test_kinds_by_name_and_by_problem():
    decode = DecodeProblem.random(3, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=32, max_context_len=20)
    mla = MLAProblem.random(4, num_seqs=1, num_heads=2, block_size=16, context_lens=[9])
    assert kinds.of(decode) is kinds.DECODE and kinds.of(mla) is kinds.MLA
    assert kinds.named("mla") is kinds.MLA and kinds.MLA.fixed_head_dim == 576
    with pytest.raises(ValueError, match="unknown problem kind 'prefill'; known: decode, mla, micro"):
        kinds.named("prefill")
    with pytest.raises(ValueError, match="not a problem of a known kind: ndarray"):
        kinds.of(np.zeros(3))
    out, lse = kinds.DECODE.reference(decode)
    assert out.shape == decode.query.shape and lse.shape == decode.query.shape[:2]
    out, lse = kinds.MLA.reference(mla)
    assert out.shape[:2] == lse.shape == mla.query.shape[:2]
    assert registry.get("micro.read").kind is kinds.MICRO
    with pytest.raises(ValueError, match="problem kind 'micro' has no reference"):
        kinds.MICRO.reference(None)


def test_a_kind_names_what_is_attached_and_refuses_a_second_implementation():
    for kind in kinds.CHECKED:
        for role in ("prepare", "shape_data", "traffic_sample", "check", "error_key", "summary_section"):
            assert callable(kind.part(role)), (kind, role)
    with pytest.raises(ValueError, match="no 'prepare' attached .*limits"):
        kinds.MICRO.part("prepare")
    with pytest.raises(ValueError, match="a 'prepare' is attached already"):
        kinds.DECODE.attach(prepare=lambda *a: None)
    with pytest.raises(ValueError, match="unknown role.* summary; roles: limits, prepare"):
        kinds.DECODE.attach(summary=lambda rows: [])
    kinds.DECODE.attach(prepare=kinds.DECODE.part("prepare"))  # the same one again is fine (a module reloaded)


def test_decode_and_mla_answer_every_role_through_the_same_interface():
    """The whole interface, each role attached by its own layer (ROLES), for both instances."""
    for kind in kinds.CHECKED:
        missing = [role for role in kinds.ROLES if role not in kind.parts]
        assert not missing, (kind, missing)
        for name in registry.variants(problem=kind.name):
            assert isinstance(registry.get(name).limits, kind.limits), name
    assert kinds.MICRO.limits is registry.get("micro.read").limits.__class__


_ONE_VARIANT = {"decode": "numpy.gather", "mla": "numpy.mla"}


@pytest.mark.parametrize("kind", kinds.CHECKED, ids=lambda k: k.name)
def test_a_kinds_strategies_draw_valid_problems_inside_a_variants_limits(kind):
    limits = registry.get(_ONE_VARIANT[kind.name]).limits

    @settings(max_examples=4, derandomize=True, deadline=None)
    @given(kind.strategies(limits, max_num_seqs=2))
    def draws(problem):
        assert isinstance(problem, kind.problem) and kind.validate(problem) is problem
        assert limits.supports(problem)

    draws()


@pytest.mark.parametrize("kind", kinds.CHECKED, ids=lambda k: k.name)
def test_a_kinds_sampler_prepared_variant_and_reference_meet_through_the_lse_protocol(kind):
    shape = dict(num_seqs=2, num_heads=2, context_lens=[5, 17], block_size=16)
    if kind is kinds.DECODE:
        shape.update(num_kv_heads=1, head_dim=32, return_lse=True)
    problem = kind.random(11, **shape)
    prepared, _ = kind.part("prepare")(_ONE_VARIANT[kind.name], problem, "cpu", None)
    prepared.launch()
    out, lse = kind.outputs(prepared)
    want_out, want_lse = kind.reference(problem)
    assert lse.dtype == np.float32 and lse.shape == want_lse.shape == out.shape[:2]
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.astype(np.float64), want_out, rtol=2e-2, atol=2e-2)
    beyond = copy.copy(problem)
    beyond.context_lens = np.array([5, 33], dtype=np.int32)  # 2 blocks of 16 per sequence hold 32 tokens
    with pytest.raises(ValueError, match=re.escape("context_lens[1] = 33 is out of range [1, 32]")):
        kind.validate(beyond)
    other = kinds.MLA if kind is kinds.DECODE else kinds.DECODE
    with pytest.raises(ValueError, match=f"problem kind '{other.name}' validates a {other.problem.__name__}"):
        other.validate(problem)
    with pytest.raises(ValueError, match="has no sampler"):
        kinds.MICRO.random(1)


def test_each_kind_parses_its_own_shapes_and_refuses_the_others():
    written = {kinds.DECODE: "2x40x4/2x64xfp16", kinds.MLA: "mla:2x24x4xbf16:fp8 topk=9"}
    for kind, text in written.items():
        grammar = kind.shape_grammar
        assert grammar.matches(text) and not any(k.shape_grammar.matches(text) for k in kinds.CHECKED if k is not kind)
        assert shape_kind(grammar.parse(text)) == kind.name and shapes.parse_any(text) == grammar.parse(text)
    with pytest.raises(ValueError, match=re.escape(kinds.MLA.shape_grammar.format)):
        kinds.MLA.shape_grammar.parse("mla:2x24")


def test_summary_sections_and_check_problems_come_from_the_kind():
    row = dict(problem="mla", status="ok", flops=2e9, bytes=1e8, time_us=100.0, shape="mla:2x24x4xbf16",
               block_size=16, variant="numpy.mla", backend="cpu", gbps=1.0)
    assert kinds.MLA.summary_section([row])[0].startswith("MLA points: bytes read and FLOPs")
    assert kinds.MLA.summary_section([dict(row, problem="decode")]) == []
    assert kinds.DECODE.summary_section([row]) == []  # no shared-prefix point: no cascade table
    for kind in kinds.CHECKED:
        variant = registry.get(_ONE_VARIANT[kind.name])
        problems = kind.check_problems(variant, 5, 2)
        assert problems and all(isinstance(p, kind.problem) and variant.limits.supports(p) for _, p in problems)
        assert sum(label.startswith("random#") for label, _ in problems) == 2
        assert all(isinstance(kind.error_key(p), str) for _, p in problems)


def test_no_string_switch_on_the_kind_outside_the_problem_package():
    switch = re.compile(r"""[!=]= ["'](mla|decode)["']""")
    found = []
    for path in sorted((ROOT / "sandbox").rglob("*.py")):
        if path.parent.name == "problem":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if switch.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}")
    assert not found, found
