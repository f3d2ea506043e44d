"""Kernel families as plug-ins (sandbox/variant/family.py, docs/adding-a-family.md): every registered family
loads and names itself, every variant belongs to one, and a new family is one package plus one registration,
with nothing else edited: run, checked, counted and checked under the executor's modes like cupy.*.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import reference
import sandbox
from sandbox.commands.check import backend_for
from sandbox.problem import DecodeProblem
from sandbox.variant import registry
from sandbox.variant.family import CAPTURES, CENSUSES, RUNTIMES, Family

# A package a newcomer writes: its FAMILY, and a variant that launches cupy.v1's kernel through the harness.
NEW_FAMILY = '''
from sandbox.variant.family import Family

FAMILY = Family("peer", runtime="cuda_c", capture="executor", census="nvrtc", summary="a peer library's CUDA C")
'''
NEW_VARIANT = '''
"""peer.v1: the peer library's decode kernel (here cupy.v1's .cu, loaded through the harness)."""
from kernels.cupy_raw.v1 import LIMITS, prepare  # noqa: F401
'''


def test_every_family_loads_and_every_variant_belongs_to_one():
    for name in registry.FAMILIES:
        family = registry.family(name)
        assert family.name == name and family.runtime in RUNTIMES
        assert family.capture in (None, *CAPTURES) and family.census in (None, *CENSUSES)
    names = registry.variants(problem=None) + registry.variants("wrong", problem=None) + registry.cache_writers()
    for name in names:
        variant = registry.get_cache_writer(name) if name in registry.CACHE_WRITERS else registry.get(name)
        assert variant.family in registry.FAMILIES, name
        assert variant.family_plugin is registry.family(variant.family)


def test_unknown_family_and_bad_declarations_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown kernel family 'triton2'; valid names: numpy, numba, cupy"):
        registry.family("triton2")
    with pytest.raises(ValueError, match="runtime must be one of host, cuda_c, numba, got 'opencl'"):
        Family("x", runtime="opencl", capture=None, census=None)
    with pytest.raises(ValueError, match="capture must be one of executor, numba_simulator, got 'ncu'"):
        Family("x", runtime="host", capture="ncu", census=None)


def test_what_each_family_decides():
    numpy, numba, cupy = (registry.family(n) for n in ("numpy", "numba", "cupy"))
    assert numpy.resolve("auto") == "cpu" and numpy.capture_unavailable() == "no kernel: NumPy gathers on the host"
    with pytest.raises(ValueError, match="numpy.\\* variants: they run on the CPU only"):
        numpy.resolve("gpu")
    assert cupy.executor_modes and not numba.executor_modes and not numpy.executor_modes
    assert cupy.first_launch_compiles("cpu") and not numba.first_launch_compiles("cpu")
    assert numba.first_launch_compiles("gpu") and not numpy.first_launch_compiles("cpu")
    assert not cupy.needs_other_process("cpu") and not numpy.needs_other_process("cpu")


@pytest.fixture
def new_family(tmp_path, monkeypatch):
    """A family package written to tmp_path, importable from there, registered with one line each."""
    package = tmp_path / "peer_kernels"
    package.mkdir()
    (package / "__init__.py").write_text(NEW_FAMILY)
    (package / "v1.py").write_text(NEW_VARIANT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.FAMILIES, "peer", "peer_kernels")   # the family's registration
    monkeypatch.setitem(registry.VARIANTS, "peer.v1", "peer_kernels.v1")  # its variant's
    yield
    for module in ("peer_kernels", "peer_kernels.v1"):
        sys.modules.pop(module, None)


def test_a_new_family_is_one_package_and_one_registration(new_family):
    problem = DecodeProblem.random(29, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                                   context_lens=[5, 33], dtype="float16")
    assert "peer.v1" in sandbox.variants("peer") and registry.get("peer.v1").family_plugin.name == "peer"
    out = sandbox.run_problem("peer.v1", problem, backend="cpu")
    expected = reference.paged_attention(problem.query, problem.key_cache, problem.value_cache,
                                         problem.block_tables, problem.context_lens, problem.softmax_scale)
    np.testing.assert_allclose(out.astype(np.float64), expected, atol=2e-3, rtol=1e-3)
    # counted like cupy.*: the executor's capture, with no edit to the traffic driver
    counted = sandbox.traffic("peer.v1", problem, census=False)
    assert counted["metrics"]["dram__bytes_read.sum"] > 0 and len(counted["kernels"]) == 1
    # the executor's checking modes apply (check --asan / --racecheck run it on the CPU)
    assert backend_for("peer.v1", "peer", "auto", ["racecheck"]) == "cpu"
