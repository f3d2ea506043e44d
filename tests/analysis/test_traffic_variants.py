"""Traffic facts of the CUDA C variants on small problems (CPU executor, traffic mode).

Each fact is derived from the problem, not from a past run: K/V bytes from lengths and head sizes,
cupy.v1's over-read from the GQA group, a window's bytes from its blocks, cupy.cascade's saving from
sandbox.paging.cascade_plan. Problems are small enough for every byte to fit in L2, where the DRAM
bytes of an array are its distinct sectors.
"""
from __future__ import annotations

import numpy as np
import pytest

import sandbox
from sandbox.analysis.traffic import count, variant as V
from sandbox.paging import cascade_plan
from sandbox.problem.decode import DecodeProblem

LENS = [100, 64, 33, 128]   # one partial last block, one exact, one of 33 = 2 x 16 + 1, one full table


def private(**kw):
    args = dict(num_seqs=4, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, context_lens=LENS,
                dtype="float16", share_prefix=False)
    return DecodeProblem.random(3, **{**args, **kw})


def kv_bytes(problem, tokens=None) -> int:
    """K and V bytes of `tokens` token rows (default: every token read) for every KV head."""
    if tokens is None:
        tokens = int((problem.context_lens - problem.first_read_tokens()).sum())
    return 2 * tokens * problem.num_kv_heads * problem.head_dim * problem.kv_dtype.itemsize


def kv_sites(result, op="load"):
    return [s for k in result["kernels"] for s in k["sites"]
            if s["op"] == op and s["space"] == "global" and s["target"] in ("key_cache", "value_cache")]


def kv_requested_bytes(result) -> int:
    return 32 * sum(s["sectors"] for s in kv_sites(result))


def capture(name, problem):
    """The variant's RawLaunches (traffic mode, every block)."""
    from kernels.cupy_raw import common
    from sandbox.cpucuda import traffic_capture
    from sandbox.variant import runner

    with common.cpu_options(traffic=True):
        prepared, _ = runner.prepare(name, problem, "cpu")
    with traffic_capture() as launches:
        prepared.launch()
    return launches


def distinct_bytes(launches, targets) -> int:
    """Bytes of the distinct sectors the launches touch in the arrays named `targets`."""
    sectors = set()
    for raw in launches:
        for name, (base, size) in raw.arrays.items():
            if name in targets:
                s = raw.sectors["sector"]
                sectors |= set(s[(s >= base // 32) & (s < (base + size + 31) // 32)].tolist())
    return 32 * len(sectors)


def test_a_gqa_aware_variant_reads_every_kv_byte_once_from_dram():
    problem = private()
    launches = capture("cupy.gqa", problem)
    assert distinct_bytes(launches, ("key_cache", "value_cache")) == kv_bytes(problem)
    call = count(launches, "h200")
    every = distinct_bytes(launches, {n for r in launches for n in r.arrays})
    assert call.metrics["dram__bytes_read.sum"] <= every  # L2 holds the problem: no byte is read twice
    assert call.metrics["dram__bytes_read.sum"] >= kv_bytes(problem)


def test_v1_requests_group_times_the_kv_sectors_and_gqa_once():
    problem = private()
    group = problem.num_heads // problem.num_kv_heads
    v1 = sandbox.traffic("cupy.v1", problem, census=False)
    gqa = sandbox.traffic("cupy.gqa", problem, census=False)
    assert kv_requested_bytes(gqa) == kv_bytes(problem)
    assert kv_requested_bytes(v1) == group * kv_bytes(problem)
    # the group's query heads are neighbouring blocks: L2 serves the repeats, DRAM sees each byte once
    assert abs(v1["metrics"]["dram__bytes_read.sum"] - gqa["metrics"]["dram__bytes_read.sum"]) < kv_bytes(problem) // 10


def test_a_window_reads_only_its_blocks_bytes():
    window = 40
    problem = private(window_left=window)
    launches = capture("cupy.gqa", problem)
    read = distinct_bytes(launches, ("key_cache", "value_cache"))
    first = problem.first_read_tokens()
    window_tokens = int((problem.context_lens - first).sum())
    bs = problem.block_size
    window_blocks = int(sum(-(-int(n) // bs) - int(f) // bs for n, f in zip(problem.context_lens, first)))
    assert kv_bytes(problem, window_tokens) <= read <= kv_bytes(problem, window_blocks * bs)
    assert read < kv_bytes(problem, int(problem.context_lens.sum()))


def test_cascade_reads_a_shared_prefix_once_per_group():
    problem = DecodeProblem.shared(5, num_groups=2, group_size=3, prefix_len=48, suffix_lens=[5, 9, 1, 16, 3, 7],
                                   num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, dtype="float32")
    plan = cascade_plan.plan(problem.block_tables, problem.context_lens, problem.block_size)
    assert [len(g.seqs) for g in plan] == [3, 3] and all(g.prefix_blocks == 3 for g in plan)
    token_bytes = 2 * problem.num_kv_heads * problem.head_dim * problem.kv_dtype.itemsize
    saved = cascade_plan.prefix_bytes_saved(plan, problem.block_size, token_bytes)
    multi = sandbox.traffic("cupy.multi", problem, census=False)
    cascade = sandbox.traffic("cupy.cascade", problem, census=False)
    assert kv_requested_bytes(multi) == kv_bytes(problem)
    assert kv_requested_bytes(multi) - kv_requested_bytes(cascade) == saved
    # the ideal counts each shared prefix block once, as the cascade reads it (no kernel needs less from DRAM)
    assert multi["ideal_bytes"] == cascade["ideal_bytes"] == problem.bytes_moved() - saved
    assert cascade["metrics"]["dram__bytes_read.sum"] >= kv_bytes(problem) - saved


def test_the_uncoalesced_negative_control_is_flagged_by_its_sectors_per_request():
    problem = private(num_seqs=2, context_lens=[128, 70])
    bad = sandbox.traffic("wrong.cupy.uncoalesced_k", problem, census=False)
    (k_load,) = [s for s in kv_sites(bad) if s["target"] == "key_cache"]
    assert k_load["sectors_per_request"] == k_load["lanes_per_request"] > 16     # every lane its own sector
    assert k_load["bytes_per_request"] == 2 * k_load["lanes_per_request"]        # for 2 bytes
    good = sandbox.traffic("cupy.v1", problem, census=False)
    (v1_load,) = [s for s in kv_sites(good) if s["target"] == "key_cache"]
    assert v1_load["bytes_per_request"] / (32 * v1_load["sectors_per_request"]) == 1.0
    assert k_load["bytes_per_request"] / (32 * k_load["sectors_per_request"]) <= 1 / 15


def test_sampled_sequences_scale_to_the_exact_counts():
    problem = private(context_lens=[96, 96, 96, 96])
    exact = sandbox.traffic("cupy.gqa", problem, sample_seqs=None, census=False)
    sampled = sandbox.traffic("cupy.gqa", problem, sample_seqs=2, census=False)
    assert sampled["scale"] == 2 and exact["scale"] == 1 and "counts scaled x2" in sampled["notes"][0]
    dram = ("dram__bytes_read.sum", "dram__bytes_write.sum")
    assert {k: v for k, v in sampled["metrics"].items() if k not in dram} == \
        {k: v for k, v in exact["metrics"].items() if k not in dram}
    # per-sequence arrays smaller than a sector (context_lens, table rows) share sectors across sequences: a
    # sampled half scaled x2 counts those few sectors twice
    for key in dram:
        assert 0 <= sampled["metrics"][key] - exact["metrics"][key] <= 8 * 32
    assert [k["grid"] for k in sampled["kernels"]] == [k["grid"] for k in exact["kernels"]]
    assert sampled["kernels"][0]["counted_grid"][1] == 2


def test_uneven_sequences_are_never_sampled():
    problem = private()
    counted, scale, note = V.sample(problem, 2)
    assert counted is problem and scale == 1 and "do not all do the same work" in note


def test_result_shape_and_refusals(monkeypatch):
    problem = private(num_seqs=1, context_lens=[40])
    r = sandbox.traffic("cupy.rows", problem, census=False)
    assert set(r) >= {"metrics", "kernels", "ideal_bytes", "model", "scale", "notes"}
    assert r["ideal_bytes"] == problem.bytes_moved()
    assert set(r["model"]) >= {"time_us", "fraction_of_dram_bw", "bound", "assumptions"}
    assert [k["name"].split("<")[0] for k in r["kernels"]] == ["paged_attention_gqa", "pa::paged_attention_reduce"]
    assert set(V.summary(r)) == set(V.COLUMNS)
    with pytest.raises(ValueError, match="numpy.gather has no GPU kernel"):
        sandbox.traffic("numpy.gather", problem)
    import builtins
    real_import = builtins.__import__

    def no_numba_sim(name, *args, **kwargs):
        if name.endswith("numba_sim") or (args and args[2] and "numba_sim" in args[2]):
            raise ImportError("simulated absence")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_numba_sim)
    with pytest.raises(RuntimeError, match="Numba traffic capture not available"):
        sandbox.traffic("numba.gqa", problem)


def test_numba_variants_go_to_the_simulators_capture(monkeypatch):
    """numba.* dispatches to sandbox.analysis.traffic.numba_sim.capture() (a stand-in here: the real one is
    the Numba side's), launching the prepared variant inside it and counting what it yields."""
    import contextlib
    import sys
    import types

    from sandbox.analysis import traffic as T

    site = T.Site("kernels/numba_cuda/gqa.py", 40, (), "load", "global", "key_cache")
    rows = np.zeros(1, T.SITE_BLOCK_DTYPE)
    rows[0] = (0, 0, 1, 32, 512, 16, 0, 0)
    sectors = np.zeros(16, T.SECTOR_DTYPE)
    sectors["sector"], sectors["mask"], sectors["read"] = np.arange(16), 0xFFFFFFFF, True
    seen = []

    @contextlib.contextmanager
    def capture(**options):  # represent=, as the real one takes, when numba_sample is there
        launches = []
        yield launches
        seen.append("launched")
        launches.append(T.RawLaunch("gqa_kernel", (1, 1, 1), (32, 1, 1), [site], rows, sectors))

    stand_in = types.SimpleNamespace(capture=capture)
    monkeypatch.setitem(sys.modules, "sandbox.analysis.traffic.numba_sim", stand_in)
    monkeypatch.setattr(T, "numba_sim", stand_in, raising=False)  # `from . import` reads the package first
    problem = private(num_seqs=1, context_lens=[16], dtype="float32")
    r = sandbox.traffic("numba.gqa", problem, census=False)
    assert seen == ["launched"] and [k["name"] for k in r["kernels"]] == ["gqa_kernel"]
    assert r["metrics"]["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 16
    assert r["metrics"]["dram__bytes_read.sum"] == 512 and V.summary(r)["kv_sectors_per_request"] == 16
