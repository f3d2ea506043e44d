"""sandbox.problem.kinds: decode and MLA as ProblemKind objects that answer where code would switch on a name."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import sandbox.commands.check  # noqa: F401  (the layers that attach their parts: the check command,
import sandbox.sweep.measure.run  # noqa: F401  the sweep; sandbox itself loads the runners and the traffic counter)
from sandbox import DecodeProblem, MLAProblem
from sandbox.problem import kinds
from sandbox.variant import registry

ROOT = pathlib.Path(__file__).resolve().parent.parent


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
        for role in ("prepare", "shape_data", "traffic_sample", "check", "error_key"):
            assert callable(kind.part(role)), (kind, role)
    with pytest.raises(ValueError, match="no 'summary_section' attached .*prepare"):
        kinds.DECODE.part("summary_section")
    with pytest.raises(ValueError, match="a 'prepare' is attached already"):
        kinds.DECODE.attach(prepare=lambda *a: None)
    kinds.DECODE.attach(prepare=kinds.DECODE.part("prepare"))  # the same one again is fine (a module reloaded)


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
