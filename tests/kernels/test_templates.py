"""The variant templates (tests/templates/; docs/adding-a-variant.md includes them verbatim), pasted as a
newcomer pastes them: written to a folder of their own, imported from there, registered under a new name.
Each must pass the shared suite's and its family's registry-walking checks and `check`, declaring only what it
supports: a refusal inside its declared Limits fails, outside them it is skipped with the reason.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from _pytest.outcomes import Skipped

import test_cupy_family
import test_numba_family
import test_variants
from sandbox.checking.check import check_problem
from sandbox.commands.check import problems_for
from sandbox.problem import DecodeProblem
from sandbox.variant import registry

TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "templates"
# registry name -> (module name, the files a newcomer copies)
TEMPLATES = {
    "numpy.mine": ("numpy_mine", ["numpy_mine.py"]),
    "numba.mine": ("numba_mine", ["numba_mine.py"]),
    "cupy.mine": ("cupy_mine", ["cupy_mine.py", "cupy_mine.cu"]),
    "triton.mine": ("triton_mine", ["triton_mine.py"]),
}
# Families whose every problem is slow on a CPU (a simulator, an interpreter): fewer examples, no edge-case walk.
SLOW_FAMILIES = ("numba", "triton")
# The Numba simulator runs every thread in Python: the template's problems stay small there.
SMALL_NUMBA = dict(head_dims=(16, 32), max_tokens=48, max_num_seqs=2, max_kv_heads=2, max_query_tokens=4,
                   max_multiply_adds=20_000)


@pytest.fixture
def pasted(tmp_path, monkeypatch):
    """Every template copied to tmp_path, importable from there, and registered (VARIANTS, for this test only)."""
    for module, files in TEMPLATES.values():
        for name in files:
            shutil.copy(TEMPLATE_DIR / name, tmp_path / name)
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, (module, _) in TEMPLATES.items():
        monkeypatch.setitem(registry.VARIANTS, name, module)
    yield tmp_path
    for module, _ in TEMPLATES.values():
        sys.modules.pop(module, None)


def _run_or_skip(test, *args) -> str:
    """Run one of the suites' test functions; a declared refusal (pytest.skip) is reported, not raised."""
    try:
        test(*args)
    except Skipped as skip:
        return f"skipped: {skip}"
    return "ran"


def test_each_template_is_a_complete_variant_module(pasted):
    for name, (module, _) in TEMPLATES.items():
        variant = registry.get(name)
        assert Path(variant.module.__file__).parent == pasted, "imported from the pasted copy"
        doc = variant.module.__doc__
        assert doc.startswith(name + ":") and all(word in doc for word in ("Idea:", "Limits:", "Verdict:")), name
        assert callable(variant.module.prepare) and variant.limits is variant.module.LIMITS


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_template_passes_the_shared_suite(pasted, name, monkeypatch):
    if registry.get(name).family == "numba":
        monkeypatch.setitem(test_variants.FAMILY_SHAPES, "numba", SMALL_NUMBA)
    test_variants.test_variant_refuses_what_it_does_not_declare_before_launch(name)
    test_variants.test_run_rejects_out_of_range_table_entries(name)
    test_variants.property_test(name, max_examples=4 if registry.get(name).family in SLOW_FAMILIES else 10)()
    if registry.get(name).family not in SLOW_FAMILIES:  # their edge cases reach 1024-token contexts
        test_variants.test_variant_matches_reference_on_edge_cases(name)


def test_numba_template_passes_the_numba_family_checks(pasted):
    name = "numba.mine"
    outcomes = {"block sizes": _run_or_skip(test_numba_family.test_every_block_size_with_context_traps, name),
                "window": _run_or_skip(test_numba_family.test_window_never_touches_the_blocks_before_it, name)}
    with pytest.MonkeyPatch.context() as patch:  # the test poisons np.empty and undoes it itself
        outcomes["racing allocations"] = _run_or_skip(
            test_numba_family.test_variants_with_racing_allocations_and_nan_poisoned_memory, patch, name)
    for case in test_numba_family.OPTION_CASES:
        outcomes[case] = _run_or_skip(test_numba_family.test_each_option_matches_the_reference, name, case)
    assert outcomes["racing allocations"] == "ran" and outcomes["kv_scale_fp32"] == "ran", outcomes
    assert outcomes["window"].startswith("skipped: numba.mine does not support dtype=bfloat16"), outcomes
    assert outcomes["alibi_paper_bf16"].startswith("skipped:"), outcomes


def test_cuda_c_template_declaring_float32_passes_the_cuda_c_family_checks(pasted):
    name = "cupy.mine"
    test_cupy_family.test_reversed_thread_order_gives_identical_results(name)
    for mode in test_cupy_family.CPU_MODES:
        test_cupy_family.test_cuda_c_variant_under_each_executor_mode(name, mode)


@pytest.mark.parametrize("name", ["numpy.mine", "cupy.mine"])
def test_template_passes_check(pasted, name):
    """What `python -m sandbox check NAME` runs: edge cases and random problems inside the declared limits."""
    problems = problems_for(registry.get(name), seed=0, num_random=2)
    assert problems
    for label, problem in problems:
        result = check_problem(name, problem, "cpu")
        assert result.ok, f"{label}: {result.error or result.comparison.report}"


def test_numba_template_passes_check_on_small_problems(pasted):
    """check_problem on small problems (the simulator's cost), at block sizes 1, 3 and 16, one sequence at
    its table's capacity and k/v scales."""
    for seed, block_size in enumerate((1, 3, 16)):
        problem = DecodeProblem.random(seed, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=16,
                                       block_size=block_size, max_context_len=24, dtype="float16",
                                       k_scale=0.5, v_scale=2.0)
        result = check_problem("numba.mine", problem, "cpu")
        assert result.ok, result.error or result.comparison.report


def test_triton_template_passes_check_on_small_problems(pasted):
    """check_problem at block sizes 1, 3 and 16, a GQA group of 2, k/v scales, both declared dtypes."""
    for seed, (block_size, dtype) in enumerate(((1, "float32"), (3, "float16"), (16, "float16"))):
        problem = DecodeProblem.random(seed, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=40,
                                       block_size=block_size, max_context_len=40, dtype=dtype, k_scale=0.5,
                                       v_scale=2.0)
        result = check_problem("triton.mine", problem, "cpu", config={"num_warps": 2})
        assert result.ok, result.error or result.comparison.report


def test_the_docs_include_every_template_verbatim():
    """docs/adding-a-variant.md shows exactly the files this test runs (scripts/write_template_docs.py rewrites it)."""
    sys.path.insert(0, str(TEMPLATE_DIR.parent.parent / "scripts"))
    try:
        import write_template_docs
    finally:
        sys.path.pop(0)
    doc = write_template_docs.DOC.read_text()
    shown = {m["name"] for m in write_template_docs.BLOCK.finditer(doc)}
    assert shown == {name for _, files in TEMPLATES.values() for name in files}
    assert write_template_docs.rendered(doc) == doc, "run scripts/write_template_docs.py: a template changed"
