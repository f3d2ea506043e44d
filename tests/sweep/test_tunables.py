"""Tunables: a variant's declared kernel parameters, resolved, refused and passed to prepare."""
from __future__ import annotations

import types

import numpy as np
import pytest

import sandbox
from sandbox.variant import Unsupported, registry, tunables


def fake_module(**table):
    module = types.ModuleType("fake_variant")
    module.TUNABLES = table
    module.seen = []

    def prepare(problem, backend, **config):
        module.seen.append(config)
        return config

    module.prepare = prepare
    return module


def test_defaults_grid_and_describe():
    module = fake_module(threads=(128, 64), partition_size=(512, 256, 1024))
    assert tunables.declared(module) == {"threads": (128, 64), "partition_size": (512, 256, 1024)}
    assert tunables.defaults(module) == {"threads": 128, "partition_size": 512}
    grid = tunables.grid(module)
    assert len(grid) == 6 and grid[0] == {"threads": 128, "partition_size": 512}
    assert {tuple(sorted(c.items())) for c in grid} == {(("partition_size", p), ("threads", t))
                                                        for t in (128, 64) for p in (512, 256, 1024)}
    assert tunables.describe(grid[-1]) == "threads=64,partition_size=1024"
    assert tunables.grid(types.ModuleType("plain")) == [{}]


def test_resolve_fills_defaults_and_refuses_by_name():
    module = fake_module(threads=(128, 64))
    assert tunables.resolve("numba.x", module, {"threads": 64}) == {"threads": 64}
    assert tunables.resolve("numba.x", module, None) == {"threads": 128}
    with pytest.raises(ValueError, match=r"numba.x has no tunable 'warps' \(its tunables: threads\)") as err:
        tunables.resolve("numba.x", module, {"warps": 2})
    assert not isinstance(err.value, Unsupported)
    with pytest.raises(Unsupported, match=r"numba.x does not support threads=96 \(allowed: 128, 64\)"):
        tunables.resolve("numba.x", module, {"threads": 96})


def test_parse():
    assert tunables.parse("threads=64, partition_size=256,mode=fast,x=0.5") == dict(
        threads=64, partition_size=256, mode="fast", x=0.5)
    assert tunables.parse("") == {}
    for bad, message in (("threads", "NAME=VALUE"), ("threads=1,threads=2", "given twice"), ("=3", "NAME=VALUE")):
        with pytest.raises(ValueError, match=message):
            tunables.parse(bad)


def test_variant_prepare_passes_the_configuration(monkeypatch):
    module = fake_module(threads=(32, 16))
    variant = registry.Variant("numba.fake", module)
    assert variant.prepare(None, "cpu") == {"threads": 32}
    assert variant.prepare(None, "cpu", {"threads": 16}) == {"threads": 16}
    plain = types.ModuleType("plain")
    plain.prepare = lambda problem, backend: "plain"  # a variant without tunables keeps its two-argument prepare
    assert registry.Variant("numpy.plain", plain).prepare(None, "cpu") == "plain"


def test_every_registered_variant_declares_valid_tunables():
    for name in sandbox.variants(problem=None) + sandbox.variants("wrong", problem=None):  # decode and MLA
        table = sandbox.tunables(name)
        for parameter, values in table.items():
            assert isinstance(parameter, str) and values, f"{name}: tunable {parameter!r} declares no values"
            assert len(set(values)) == len(values), f"{name}: tunable {parameter!r} repeats a value"


def test_run_refuses_an_undeclared_tunable_before_any_launch():
    p = sandbox.DecodeProblem.random(seed=0, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, block_size=4,
                                     max_context_len=5)
    with pytest.raises(ValueError, match="numpy.gather has no tunable 'threads'"):
        sandbox.run("numpy.gather", *p.arrays(), backend="cpu", config={"threads": 64})
    np.testing.assert_allclose(sandbox.run("numpy.gather", *p.arrays(), backend="cpu", config={}).astype(np.float64),
                               sandbox.run("numpy.gather", *p.arrays(), backend="cpu").astype(np.float64))
