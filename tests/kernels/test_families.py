"""Kernel families as plug-ins (sandbox/variant/family.py, docs/adding-a-family.md): every registered family
loads and names itself, every variant belongs to one, and a new family is one package plus one registration,
with nothing else edited: run, checked, counted and checked under the executor's modes like cupy.*.
"""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

import reference
import sandbox
from sandbox.commands.check import backend_for
from sandbox.sweep.measure.run import backend_label
from sandbox.problem import DecodeProblem
from sandbox.variant import registry
from sandbox.variant.family import CAPTURES, CENSUSES, RUNTIMES, Family

# A package a newcomer writes: its FAMILY, and a variant that launches cupy.v1's kernel through the harness.
NEW_FAMILY = '''
from sandbox.variant.family import Family

FAMILY = Family("peer", runtime="gpu_or_cpu", capture="executor", census="nvrtc", summary="a peer library's CUDA C",
                cpu_label="cpu-executor", executor_modes=True, compiles_at_first_launch=True)
'''
NEW_VARIANT = '''
"""peer.v1: the peer library's decode kernel (here cupy.v1's .cu, loaded through the harness)."""
from kernels.cupy_raw.v1 import LIMITS, prepare  # noqa: F401
'''


def test_every_family_loads_and_every_variant_belongs_to_one():
    for name in registry.FAMILIES:
        family = registry.family(name)
        assert family.name == name and family.runtime in RUNTIMES
        assert family.capture in (None, *CAPTURES) or callable(family.capture)
        assert family.census in (None, *CENSUSES) or callable(family.census)
    names = (registry.variants(problem=None) + registry.variants("wrong", problem=None) + registry.cache_writers()
             + list(registry.MICRO_VARIANTS))
    for name in names:
        variant = registry.get_cache_writer(name) if name in registry.CACHE_WRITERS else registry.get(name)
        assert variant.family in registry.FAMILIES, name
        assert variant.family_plugin is registry.family(variant.family)


def test_unknown_family_and_bad_declarations_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown kernel family 'triton2'; valid names: numpy, numba, cupy"):
        registry.family("triton2")
    with pytest.raises(ValueError, match="runtime must be one of host, gpu_or_cpu, numba, got 'opencl'"):
        Family("x", runtime="opencl", capture=None, census=None)
    with pytest.raises(ValueError, match="capture must be one of executor, numba_simulator, a function or None"):
        Family("x", runtime="host", capture="ncu", census=None)
    with pytest.raises(ValueError, match="census must be one of nvrtc, numba_ptx, compile_report, got 'ptxas'"):
        Family("x", runtime="host", capture=None, census="ptxas")


def test_what_each_family_decides():
    numpy, numba, cupy = (registry.family(n) for n in ("numpy", "numba", "cupy"))
    assert numpy.resolve("auto") == "cpu" and numpy.capture_unavailable() == "no kernel: NumPy gathers on the host"
    with pytest.raises(ValueError, match="numpy.\\* variants: they run on the CPU only"):
        numpy.resolve("gpu")
    assert cupy.executor_modes and not numba.executor_modes and not numpy.executor_modes
    assert cupy.first_launch_compiles("cpu") and not numba.first_launch_compiles("cpu")
    assert numba.first_launch_compiles("gpu") and not numpy.first_launch_compiles("cpu")
    assert not cupy.needs_other_process("cpu") and not numpy.needs_other_process("cpu")
    assert [f.label("cpu") for f in (numpy, numba, cupy)] == ["cpu-numpy", "cpu-sim", "cpu-executor"]
    assert {f.label("gpu") for f in (numpy, numba, cupy)} == {"gpu"}


def test_the_micro_family_is_cuda_c_counted_on_the_executor():
    """micro.* (the micro problem kind, model-check's stream kernels) is CUDA C counted like cupy.*, but nothing
    checks it: the executor's checking modes are not its."""
    micro = registry.get("micro.read").family_plugin
    assert micro is registry.family("micro") and micro.name == "micro"
    assert micro.capture == "executor" and micro.census == "nvrtc" and micro.capture_unavailable() is None
    assert not micro.executor_modes and micro.label("cpu") == "cpu-executor"


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
    # the executor's checking modes apply (check --asan / --racecheck run it on the CPU); the sweep labels it
    assert backend_for("peer.v1", "peer", "auto", ["racecheck"]) == "cpu"
    assert backend_label("peer", "cpu") == "cpu-executor" and backend_label("torch", "gpu") == "gpu"


def test_a_family_may_bring_its_own_capture(new_family, monkeypatch):
    """A capture function in the family's FAMILY is what sandbox.traffic calls (the Triton family's way)."""
    from sandbox.analysis import traffic as T

    site = T.Site("peer_kernels/v1.cu", 1, (), "load", "global", "key_cache")
    rows = np.zeros(1, T.SITE_BLOCK_DTYPE)
    rows[0] = (0, 0, 1, 32, 128, 4, 0, 0)
    sectors = np.zeros(4, T.SECTOR_DTYPE)
    sectors["sector"], sectors["mask"], sectors["read"] = np.arange(4), 0xFFFFFFFF, True
    calls = []

    def capture(name, problem, counted, census, config, device, kind):
        calls.append((name, counted is problem, census, kind))
        launch = T.RawLaunch("peer_kernel", (1, 1, 1), (32, 1, 1), [site], rows, sectors)
        return [launch], [(1, 1, 1)], [dict(census_error="not asked for", threads_per_block=32)]

    own = Family("peer", runtime="host", capture=capture, census=None)
    monkeypatch.setattr(importlib.import_module("peer_kernels"), "FAMILY", own)
    problem = DecodeProblem.random(30, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, block_size=8,
                                   context_lens=[8], dtype="float32")
    counted = sandbox.traffic("peer.v1", problem, census=False)
    assert calls == [("peer.v1", True, False, "decode")]
    assert [k["name"] for k in counted["kernels"]] == ["peer_kernel"]
    assert counted["metrics"]["dram__bytes_read.sum"] == 128
