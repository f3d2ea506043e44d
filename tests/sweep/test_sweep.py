"""The sweep on the CPU: statistics and units, shapes, one point's check-then-time, an end-to-end
--quick run into a temporary results root, wrong and crashing variants, interruption, plots, goals.
GPU-only code (events, L2 flush, device copy) is kept small and is exercised by scripts/gpu-check.
"""
from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from sandbox.devices import backends
from sandbox import cli
from sandbox.variant import registry
from sandbox.checking.check import expected_output
from sandbox.commands import sweep as sweep_cmd
from sandbox.sweep import shapes
from sandbox.sweep.measure import bandwidth, device, run, static_resources, timing
from sandbox.sweep.report import goals, plots, summary
from sandbox.variant import Limits, Unsupported
from sandbox.variant import runner as variant_runner
import sandbox

import kernels.numpy_gather as gather

TINY = "2x24x4/2x32xfp32"
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None  # optional on a bare GPU machine


# ---------------------------------------------------------------- statistics, units, timing

def test_stats_median_and_quartiles():
    s = timing.Stats.from_samples([5, 1, 3, 2, 4])
    assert (s.median, s.q1, s.q3, s.min, s.repeats) == (3, 2, 4, 1, 5)
    assert s.iqr == 2
    one = timing.Stats.from_samples([7.0])
    assert one.median == one.q1 == one.q3 == 7.0 and one.iqr == 0
    with pytest.raises(ValueError):
        timing.Stats.from_samples([])


class FakeTimer:
    """Returns scripted durations and advances a fake clock by them."""

    def __init__(self, durations):
        self.durations = list(durations)
        self.now = 0.0
        self.calls = 0

    def clock(self):
        return self.now

    def time(self, fn):
        fn()
        self.calls += 1
        d = self.durations.pop(0) if len(self.durations) > 1 else self.durations[0]
        self.now += d
        return d


def test_measure_warms_up_by_time_then_flushes_before_every_timed_call():
    timer = FakeTimer([1 / 64])
    flushes, launches = [], []
    config = timing.TimingConfig(warmup_s=0.05, budget_s=0.1, min_repeats=3, max_repeats=50)
    stats = timing.measure(lambda: launches.append(1), timer, config, flush=lambda: flushes.append(1), clock=timer.clock)
    warmups = 4  # calls until 0.05 s have passed
    assert stats.repeats == 7 and stats.median == 1 / 64  # 7 / 64 s >= the 0.1 s budget
    assert len(launches) == warmups + 7 and len(flushes) == len(launches)
    config = timing.TimingConfig(warmup_s=0.0, budget_s=10.0, min_repeats=3, max_repeats=20)
    assert timing.measure(lambda: None, FakeTimer([1.0]), config).repeats == 10
    config = timing.TimingConfig(warmup_s=0.0, budget_s=0.1, min_repeats=3, max_repeats=20)
    assert timing.measure(lambda: None, FakeTimer([1.0]), config).repeats == 3


def test_measure_without_warmup_repeats_until_the_budget_and_no_flush_when_disabled():
    timer = FakeTimer([2.0, 1.0, 3.0])
    flushes = []
    stats = timing.measure(lambda: None, timer, timing.CPU_TIMING, flush=lambda: flushes.append(1))
    assert stats.repeats == 1 and not flushes  # one 2 s call spends the 0.3 s budget
    stats = timing.measure(lambda: None, FakeTimer([0.2, 0.15]), timing.CPU_TIMING)
    assert stats.repeats == 2  # 0.2 s after one call: a second, and 0.35 s spends the budget
    stats = timing.measure(lambda: None, FakeTimer([0.05, 0.01, 0.03]), timing.CPU_TIMING)
    assert stats.repeats == 3 and stats.median == pytest.approx(0.03)  # 0.09 s after 3 calls: the max
    timer = FakeTimer([1.5, 0.001])  # a slow first call does not starve a fast kernel of samples
    config = timing.TimingConfig(warmup_s=0, budget_s=1.0, min_repeats=1, max_repeats=50)
    assert timing.measure(lambda: None, timer, config).repeats == 1
    timer = FakeTimer([0.001])
    assert timing.measure(lambda: None, timer, config).repeats == 50


def test_prior_samples_count_toward_the_budget_and_the_repeats():
    timer = FakeTimer([0.1])
    stats = timing.measure(lambda: None, timer, timing.CPU_TIMING, prior=(2.0,))
    assert stats.repeats == 1 and stats.median == 2.0 and timer.calls == 0  # the correctness launch spent it
    stats = timing.measure(lambda: None, timer, timing.CPU_TIMING, prior=(0.1,))
    assert stats.repeats == 3 and timer.calls == 2  # 0.1 s prior: two more calls reach the 3-call cap
    assert timing.measure(lambda: None, timer, timing.CPU_TIMING, prior=(1.0,) * 9).repeats == 3  # capped too


def test_only_launches_that_compile_nothing_are_their_own_first_sample():
    assert run.first_launch_is_a_sample("numba", "cpu") and run.first_launch_is_a_sample("numpy", "cpu")
    assert not run.first_launch_is_a_sample("cupy", "cpu")  # the executor builds the kernel at its first launch
    assert not run.first_launch_is_a_sample("numba", "gpu") and not run.first_launch_is_a_sample("cupy", "gpu")


def test_wall_clock_timer_synchronizes_inside_the_timed_region():
    ticks = iter([10.0, 10.5])
    order = []
    timer = timing.WallClockTimer(synchronize=lambda: order.append("sync"), clock=lambda: next(ticks))
    assert timer.time(lambda: order.append("launch")) == 0.5
    assert order == ["launch", "sync"]


def test_bandwidth_units():
    assert bandwidth.copy_gbps(10**9, 1.0) == 2.0  # read + write
    assert bandwidth.kernel_gbps(3 * 10**9, 0.5) == 6.0
    with pytest.raises(ValueError):
        bandwidth.kernel_gbps(1, 0)
    host = bandwidth.host_copy_bandwidth(1 << 20, repeats=2)
    assert host.gbps > 0 and host.nbytes == 1 << 20 and "host" in host.method
    assert host.as_dict()["convention"].startswith("2 * nbytes")


def test_flush_is_at_least_twice_the_l2_and_256_mib():
    assert device.flush_bytes(60 * 2**20) == 256 * 2**20     # H200: 2 x 60 MB < 256 MiB
    assert device.flush_bytes(200 * 2**20) == 400 * 2**20
    assert device.flush_bytes(None) == 256 * 2**20


def test_device_info_is_empty_without_a_gpu_and_complete_with_one():
    from sandbox.devices.backends import gpu_present
    info = device.device_info()
    if not gpu_present():
        assert info == {}
        return
    assert info["name"] and info["multiprocessors"] > 0 and info["l2_cache_bytes"] > 0, info
    assert info["total_memory_bytes"] > 2**30 and "." in info["compute_capability"], info


@pytest.mark.gpu
def test_gpu_timing_primitives_on_the_device():
    """What a GPU sweep measures with, on the real device: copy bandwidth, L2 flush, both event timers."""
    copy = bandwidth.gpu_copy_bandwidth(64 * 2**20, repeats=3)
    assert 10 < copy.gbps < 20_000 and copy.repeats == 3, copy
    read = bandwidth.gpu_read_bandwidth(64 * 2**20, repeats=3)
    assert 10 < read.gbps < 20_000 and read.kind == "read" and read.nbytes == 64 * 2**20, read
    flush = device.L2Flusher(device.device_info().get("l2_cache_bytes"))
    assert flush.nbytes >= device.MIN_FLUSH_BYTES and [kind for kind, _ in flush.passes] == ["write", "read"]
    flush()
    import cupy
    x = cupy.ones(2**24, dtype=cupy.float32)
    for timer in (timing.CupyEventTimer(), timing.NumbaEventTimer()):
        stats = timing.measure(lambda: x.sum(), timer, timing.GPU_QUICK_TIMING, flush=flush)
        assert 0 < stats.median < 0.1 and stats.repeats >= timing.GPU_QUICK_TIMING.min_repeats, (timer, stats)
    device.synchronize_device()
    device.free_device_memory()


@pytest.mark.gpu
def test_torch_sdpa_peer_matches_the_reference_where_torch_sees_the_gpu():
    from sandbox.sweep.measure import peers
    if not peers.torch_available():
        pytest.skip("PyTorch with CUDA is not importable here (the sandbox never requires it)")
    from sandbox.checking.compare import assert_close
    from sandbox.problem import DecodeProblem
    problem = sandbox.DecodeProblem.random(12, num_seqs=3, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16,
                                   context_lens=[5, 40, 33], dtype="float16")  # unequal lengths: the mask path
    prepared = peers.TorchSdpa().prepare(problem, "gpu")
    prepared.launch()
    assert_close(prepared.result(), expected_output(problem), problem.dtype, "torch.sdpa")


# ---------------------------------------------------------------- shapes and problems

def test_parse_shape_and_presets():
    s = shapes.parse_shape("64x4096x32/8x128xfp16")
    assert (s.num_seqs, s.context_len, s.num_heads, s.num_kv_heads, s.head_dim, s.dtype) == (64, 4096, 32, 8, 128, "float16")
    assert s.name == "64x4096x32/8x128xfp16" and shapes.parse_shape("2x3x4/2x8").dtype == "float16"
    assert shapes.parse_shape("2x3x4/2x8xfloat32").name == "2x3x4/2x8xfp32"
    assert [x.name for x in shapes.parse_shapes("cpu-quick,2x40x4/2x64xfp16,2x8x2/1x32")] == \
        ["2x40x4/2x64xfp16", "2x8x2/1x32xfp16"]
    for bad in ("64x4096", "2x3x5/2x8", "2x3x4/2x8xint8", "2x3x4/2x8xe4m3", "2x3x4/2x8xbf16:fp16", "0x3x4/2x8"):
        with pytest.raises(ValueError):
            shapes.parse_shapes(bad)
    assert shapes.GOAL_SHAPE in shapes.GPU_SHAPES


@pytest.mark.parametrize("block_size", [1, 7, 16, 64])
def test_every_block_size_pages_the_same_tokens(block_size):
    tokens = shapes.make_tokens(shapes.parse_shape("3x50x4/2x16xfp32"), seed=3)
    problem = shapes.paged_problem(tokens, block_size)
    reference_problem = shapes.paged_problem(tokens, 50)
    np.testing.assert_array_equal(expected_output(problem), expected_output(reference_problem))
    # The sweep's truth comes from the contiguous tokens: equal to the reference through the table.
    np.testing.assert_allclose(shapes.expected_output(tokens), expected_output(problem), rtol=1e-12, atol=1e-12)
    for s in range(3):  # the paged cache holds exactly the tokens, in table order
        for t in (0, block_size - 1, 49):
            if t < 50:
                np.testing.assert_array_equal(
                    problem.key_cache[problem.block_tables[s, t // block_size], t % block_size], tokens.keys[s, t])
    assert problem.block_size == block_size and (problem.context_lens == 50).all()
    used = np.zeros(problem.num_blocks, dtype=bool)
    used[problem.block_tables.ravel()] = True
    assert np.isnan(problem.key_cache[~used]).all()                 # spare blocks are NaN
    if block_size > 1:
        assert not np.array_equal(problem.block_tables.ravel(), np.arange(problem.block_tables.size))
    if 50 % block_size:
        assert np.isnan(problem.value_cache[problem.block_tables[0, -1], 50 % block_size:]).all()
    assert problem.bytes_moved() == 2 * 3 * 50 * 2 * 16 * 4 + 2 * problem.query.nbytes + \
        3 * -(-50 // block_size) * 4 + 3 * 4


# ---------------------------------------------------------------- fake variants for the sweep

def _fake_module(monkeypatch, name, result=None, prepare_error=None, limits=None, parts=None):
    """Register a numpy-family variant `name` whose output is `result(problem, correct_output)`;
    `parts(inner)` -> launch_parts() list, when given."""
    module = types.ModuleType(f"fake_sweep_{name.replace('.', '_')}")
    module.LIMITS = limits or Limits(block_sizes=None, backends=("cpu",))

    class Prepared:
        def __init__(self, problem):
            self.problem, self.inner = problem, gather.prepare(problem, "cpu")

        def launch(self):
            self.inner.launch()

        def result(self):
            out = self.inner.result()
            return result(self.problem, out) if result else out

    if parts is not None:
        Prepared.launch_parts = lambda self: parts(self.inner)

    def prepare(problem, backend):
        if prepare_error:
            raise prepare_error
        return Prepared(problem)

    module.prepare = prepare
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(registry.VARIANTS, name, module.__name__)


def sweep(tmp_path, *args, hook=None, monkeypatch=None):
    """Run the sweep command in-process into tmp_path; returns (exit code, run folder, rows)."""
    parser = cli.build_parser()
    backend = [] if "--backend" in args else ["--backend", "cpu"]  # CPU emulation, also on a GPU machine
    quick = [] if "--quick" in args else ["--quick"]  # short timing, small copy-bandwidth buffer
    ns = parser.parse_args(["sweep", "--results-dir", str(tmp_path), "--no-progress", *quick, *backend, *args])
    config = sweep_cmd.build_config(ns)
    outcome = run.run_sweep(config, point_hook=hook)
    with open(outcome.run_dir / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return outcome, rows


# ---------------------------------------------------------------- end to end

def test_quick_sweep_end_to_end(tmp_path, capsys):
    code = cli.main(["sweep", "--quick", "--backend", "cpu", "--variants", "numpy.gather", "--results-dir", str(tmp_path),
                     "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.endswith("-sweep")
    names = {p.name for p in run_dir.iterdir()}
    assert {"sweep.csv", "meta.json", "goals.json", "summary.txt"} <= names
    if HAVE_MATPLOTLIB:
        assert {"time_vs_block_size.png", "gbps_vs_block_size.png"} <= names
    with open(run_dir / "sweep.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    required = {"variant", "family", "block_size", "backend", "correct", "max_abs_err", "time_us", "gbps",
                "fraction_of_copy_bw", "paging_overhead", "iqr_us", "repeats", "status", "note", "shape",
                "num_seqs", "context_len", "num_heads", "num_kv_heads", "head_dim", "dtype", "timing"}
    assert required <= set(reader.fieldnames)
    assert len(rows) == len(shapes.CPU_QUICK_SHAPES) * len(shapes.QUICK_CPU_BLOCK_SIZES)
    for row in rows:
        assert row["status"] == "ok" and row["correct"] == "True" and row["backend"] == "cpu-numpy"
        assert row["timing"] == "cpu-emulation"
        assert float(row["time_us"]) > 0 and int(row["repeats"]) >= 1
        assert float(row["gbps"]) == pytest.approx(int(row["bytes"]) / float(row["time_us"]) / 1e3)
        assert 0 < float(row["fraction_of_copy_bw"]) and row["paging_overhead"] == ""
        assert 0 < float(row["fraction_of_read_bw"])
    meta = json.loads((run_dir / "meta.json").read_text())
    for key in ("gpu", "cpu", "packages", "git", "command", "seed", "copy_bandwidth", "start_utc", "end_utc", "goals"):
        assert key in meta, key
    assert meta["timing"] == "cpu-emulation" and meta["interrupted"] is False
    assert meta["command"] and meta["config"]["variants"] == ["numpy.gather"]  # command: this process's argv
    assert {"numpy", "numba", "numba-cuda", "cupy", "cuda-bindings"} <= set(meta["packages"])
    assert meta["copy_bandwidth"]["gbps"] > 0 and meta["read_bandwidth"]["gbps"] > 0
    assert "Read bandwidth (host memory (CPU)):" in out
    g = json.loads((run_dir / "goals.json").read_text())
    assert [c["status"] for c in g["checks"]] == ["not measured (no GPU)"] * 3
    assert "CPU EMULATION" in out and "not measured (no GPU)" in out and "numpy.gather" in out


def test_wrong_variant_is_recorded_wrong_never_timed_and_fails_the_run(tmp_path, monkeypatch):
    _fake_module(monkeypatch, "numpy.zeros", result=lambda p, out: np.zeros_like(out))
    outcome, rows = sweep(tmp_path, "--quick", "--variants", "numpy.gather,numpy.zeros", "--no-plots")
    wrong = [r for r in rows if r["variant"] == "numpy.zeros"]
    assert wrong and all(r["status"] == "wrong" and r["correct"] == "False" and r["time_us"] == "" for r in wrong)
    assert all("differ beyond" in r["note"] for r in wrong)
    assert all(r["status"] == "ok" for r in rows if r["variant"] == "numpy.gather")
    assert outcome.exit_code == 1
    assert "POINT(S) WRONG" in outcome.summary and "WRONG" in (outcome.run_dir / "summary.txt").read_text()


def test_a_wrong_outside_peer_is_shown_but_only_our_variants_decide_the_exit_status(tmp_path):
    peer = dict(variant="torch.sdpa", family="torch", status="wrong")
    ours = dict(variant="cupy.rows", family="cupy", status="wrong")
    assert run.SweepOutcome(tmp_path, [peer], False, {}, "").exit_code == 0
    assert run.SweepOutcome(tmp_path, [peer, ours], False, {}, "").failed == [ours]


def test_unsupported_and_crashing_variants_are_recorded_not_raised(tmp_path, monkeypatch):
    _fake_module(monkeypatch, "numpy.toolong", prepare_error=Unsupported("context too long for shared memory"))
    _fake_module(monkeypatch, "numpy.crash", prepare_error=RuntimeError("boom"))
    _fake_module(monkeypatch, "numpy.buggy", prepare_error=ValueError("operands could not be broadcast"))
    _fake_module(monkeypatch, "numpy.bs16", limits=Limits(block_sizes=(16,), backends=("cpu",)))
    outcome, rows = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "1,16",
                          "--variants", "numpy.toolong,numpy.crash,numpy.buggy,numpy.bs16", "--no-plots")
    by = {(r["variant"], r["block_size"]): r for r in rows}
    assert by[("numpy.toolong", "1")]["status"] == "unsupported"
    assert "too long for shared memory" in by[("numpy.toolong", "1")]["note"]
    assert by[("numpy.crash", "16")]["status"] == "error" and "boom" in by[("numpy.crash", "16")]["note"]
    # A bare ValueError from prepare is a bug in the variant, not a refusal: an error, and the run fails.
    assert by[("numpy.buggy", "1")]["status"] == "error"
    assert "prepare raised ValueError: operands could not be broadcast" in by[("numpy.buggy", "1")]["note"]
    assert by[("numpy.bs16", "1")]["status"] == "unsupported" and "block_size=1" in by[("numpy.bs16", "1")]["note"]
    assert by[("numpy.bs16", "16")]["status"] == "ok"
    assert outcome.exit_code == 1  # the crash


def test_paging_overhead_against_the_dense_baseline(tmp_path, monkeypatch):
    _fake_module(monkeypatch, "numpy.paged")
    outcome, rows = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "4,8", "--variants", "numpy.paged,numpy.gather",
                          "--dense", "numpy.gather", "--no-plots")
    assert outcome.exit_code == 0
    assert [r["variant"] for r in rows[:2]] == ["numpy.gather", "numpy.paged"]  # the baseline runs first
    for r in rows:
        if r["variant"] == "numpy.paged":
            assert float(r["paging_overhead"]) == pytest.approx(float(r["time_us"]) / float(r["dense_time_us"]))
        else:
            assert r["paging_overhead"] == ""
    assert "Paging overhead (time / numpy.gather" in outcome.summary


def test_interrupted_sweep_keeps_its_rows(tmp_path):
    seen = []

    def hook(row):
        seen.append(row)
        if len(seen) == 2:
            raise KeyboardInterrupt

    outcome, rows = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "1,2,4,8", "--variants", "numpy.gather",
                          "--no-plots", hook=hook)
    assert outcome.interrupted and outcome.exit_code == 130
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    meta = json.loads((outcome.run_dir / "meta.json").read_text())
    assert meta["interrupted"] is True and meta["points"]["ok"] == 2
    text = (outcome.run_dir / "summary.txt").read_text()
    assert text.count("INTERRUPTED: the run was stopped") == 2  # at the top and at the bottom


def test_a_second_ctrl_c_during_clean_up_still_writes_the_summary(tmp_path, monkeypatch):
    def hook(row):
        raise KeyboardInterrupt  # the first Ctrl-C, after the first point

    def slow_plots(*args, **kwargs):
        raise KeyboardInterrupt  # the second, while the plots are drawn

    monkeypatch.setattr(plots, "write_all", slow_plots)
    outcome, rows = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "1,2", "--variants", "numpy.gather", hook=hook)
    assert outcome.interrupted and outcome.exit_code == 130 and len(rows) == 1
    assert "INTERRUPTED: the run was stopped" in (outcome.run_dir / "summary.txt").read_text()
    assert json.loads((outcome.run_dir / "meta.json").read_text())["interrupted"] is True


def test_time_budget_records_the_rest_as_skipped(tmp_path):
    outcome, rows = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "1,2", "--variants", "numpy.gather",
                          "--max-seconds", "1e-9", "--no-plots")
    assert [r["status"] for r in rows] == ["skipped", "skipped"] and outcome.exit_code == 0
    assert "--max-seconds" in rows[0]["note"]


def test_cli_rejects_bad_arguments(capsys):
    assert cli.main(["sweep", "--variants", "numpy.nope"]) == 2
    assert "unknown variant 'numpy.nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--block-sizes", "0,16"])
    assert cli.main(["sweep", "--shapes", "2x3x5/2x8"]) == 2
    assert cli.main(["sweep", "--list-shapes"]) == 0
    assert "gpu-quick" in capsys.readouterr().out


def test_variant_selection_by_family_and_glob():
    assert sweep_cmd.select_variants(None) == registry.variants(problem=None)  # decode and MLA
    assert sweep_cmd.select_variants("numpy") == registry.variants("numpy", problem=None)
    assert sweep_cmd.select_variants("numpy.g*,numpy.gather") == ["numpy.gather"]
    with pytest.raises(ValueError, match="matches no registered variant"):
        sweep_cmd.select_variants("nothing.*")


def test_backend_labels():
    assert run.backend_label("numba", "cpu") == "cpu-sim"
    assert run.backend_label("cupy", "cpu") == "cpu-executor"
    assert run.backend_label("numpy", "cpu") == "cpu-numpy"
    assert run.backend_label("cupy", "gpu") == "gpu"


# ---------------------------------------------------------------- synthetic GPU rows: goals, summary, plots

def gpu_row(variant, block_size, time_us, shape=shapes.GOAL_SHAPE, status="ok", copy_gbps=4000.0, nbytes=10**9):
    row = dict.fromkeys(run.COLUMNS)
    row.update(variant=variant, family=variant.split(".")[0], backend="gpu", timing="cuda-events", shape=shape,
               block_size=block_size, status=status, note="", correct=status == "ok")
    if status == "ok":
        gbps = nbytes / (time_us * 1e-6) / 1e9
        row.update(time_us=time_us, q1_us=time_us * 0.98, q3_us=time_us * 1.02, iqr_us=time_us * 0.04, gbps=gbps,
                   bytes=nbytes, repeats=100, fraction_of_copy_bw=gbps / copy_gbps)
    return row


def synthetic_gpu_rows(paged_bs16_us=280.0):
    rows = []
    for bs in shapes.DEFAULT_BLOCK_SIZES:
        dense = gpu_row("cupy.dense", bs, 270.0)
        rows.append(dense)
        for name, t in (("cupy.v2", paged_bs16_us if bs == 16 else 275.0 + (200 if bs == 1 else 0)),
                        ("numba.block", 400.0)):
            r = gpu_row(name, bs, t)
            run.add_paging_overhead(r, {}, "cupy.dense")
            r["paging_overhead"] = t / 270.0
            r["dense_time_us"] = 270.0
            rows.append(r)
    rows.append(gpu_row("numba.split", 16, None, status="wrong"))
    rows.append(gpu_row("torch.sdpa", None, 300.0))
    return rows


def test_goals_pass_and_fail_on_synthetic_gpu_rows():
    report = goals.evaluate(synthetic_gpu_rows(280.0), True, "cupy.dense")
    by = {c["id"]: c for c in report["checks"]}
    assert by["copy_bw_fraction"]["passed"] and by["copy_bw_fraction"]["measured"] == pytest.approx(
        10**9 / 280e-6 / 1e9 / 4000, rel=1e-3)
    assert by["paging_overhead"]["passed"] and by["block_size_8_vs_128"]["passed"]
    slow = goals.evaluate(synthetic_gpu_rows(600.0), True, "cupy.dense")
    by = {c["id"]: c for c in slow["checks"]}
    assert by["copy_bw_fraction"]["status"] == "FAIL" and by["paging_overhead"]["status"] == "FAIL"
    assert "bs16" in by["paging_overhead"]["detail"]
    none = goals.evaluate([r for r in synthetic_gpu_rows() if r["variant"] != "cupy.dense"], True, "cupy.dense")
    assert none["checks"][1]["status"].startswith("not measured")
    assert all(c["status"] == "not measured (no GPU)" for c in goals.evaluate([], False, "cupy.dense")["checks"])


def test_summary_and_plots_from_synthetic_gpu_rows(tmp_path):
    pytest.importorskip("matplotlib")
    rows = synthetic_gpu_rows()
    rows += [gpu_row("cupy.v2", bs, 100.0, shape="32x1024x32/8x128xfp16") for bs in (8, 16)]
    copy = bandwidth.CopyBandwidth(4000.0, 2**30, 5.4e-4, 10, "test")
    report = goals.evaluate(rows, True, "cupy.dense")
    resources = [dict(variant=v, block_size=bs, registers=40 + bs // 8, shared_bytes=1024 * bs, spill_stores=0,
                      spill_loads=8 * (bs == 256), occupancy=1.0 / (1 + bs / 64)) for v in ("cupy.v1", "numba.block")
                 for bs in shapes.DEFAULT_BLOCK_SIZES]
    text = summary.render(rows, copy, True, {"name": "NVIDIA H200"}, report, "cupy.dense", resources)
    assert "GPU NVIDIA H200" in text and "CPU EMULATION" not in text
    assert "WRONG" in text and "numba.split" in text and "[PASS]" in text
    assert "Paging overhead (time / cupy.dense" in text
    assert "Static resources (sm_90" in text and "40r/98%" in text and "72r/20% spill8B" in text
    written = plots.write_all(tmp_path, rows, resources, copy, True, {"name": "NVIDIA H200"}, print)
    assert written == ["time_vs_block_size.png", "gbps_vs_block_size.png", "paging_overhead.png", "resources.png"]
    for name in written:
        assert (tmp_path / name).stat().st_size > 10_000


def test_static_resources_written_when_the_module_exists(tmp_path, monkeypatch):
    fake = types.ModuleType("sandbox.analysis.resources")
    calls = []

    def collect_many(variants=None, configs=(), head_dim=128, arch="sm_90", images=False, progress=None):
        calls.append((variants, configs, head_dim, arch, images))
        return [dict(variant=v, block_size=b, dtype=d, kv_dtype=kv or d, registers=32)
                for sizes, d, kv in configs for v in variants for b in sizes]

    fake.collect_many = collect_many
    monkeypatch.setitem(sys.modules, "sandbox.analysis.resources", fake)
    rows, note = static_resources.collect_into(tmp_path, ["numpy.gather"], (1, 16))
    assert note == "" and len(rows) == 4
    # float16 at every block size; bfloat16 and an e4m3 cache at block size 16 only (compile time)
    assert calls == [(["numpy.gather"], [((1, 16), "float16", None), ((16,), "bfloat16", None),
                                         ((16,), "float16", "float8_e4m3fn")], 128, "sm_90", True)]
    assert (tmp_path / "resources.csv").read_text().splitlines()[0] == "variant,block_size,dtype,kv_dtype,registers"
    static_resources.collect_into(tmp_path, ["numpy.gather"], (8, 32))  # no 16: the first block size
    assert calls[-1][1][1:] == [((8,), "bfloat16", None), ((8,), "float16", "float8_e4m3fn")]
    fake.collect_many = lambda **kw: (_ for _ in ()).throw(RuntimeError("no nvrtc"))
    rows, note = static_resources.collect_into(tmp_path, ["numpy.gather"], (1,))
    assert rows == [] and "no nvrtc" in note


def test_sweep_csv_values_round_trip_through_compare_loader(tmp_path):
    from sandbox.sweep.report import diff
    outcome, _ = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "2", "--variants", "numpy.gather", "--no-plots")
    (row,) = diff.load_rows(outcome.run_dir)
    assert row["block_size"] == 2 and row["correct"] is True and math.isfinite(row["time_us"])


# ---------------------------------------------------------------- the GPU control flow, with the device faked

def test_gpu_sweep_control_flow_with_a_faked_device(tmp_path, monkeypatch):
    """Everything a GPU sweep does except the device calls: labels, flushes, goals, dense baseline, CPU-only refusal."""
    from sandbox.devices import backends
    from sandbox.sweep.measure import meta
    flushes = []

    class FakeFlusher:
        def __init__(self, l2_bytes):
            assert l2_bytes == 60 * 2**20
            self.nbytes = device.flush_bytes(l2_bytes)

        def __call__(self):
            flushes.append(1)

    real_resolve = backends.resolve
    monkeypatch.setattr(backends, "gpu_present", lambda: True)
    monkeypatch.setattr(backends, "resolve", lambda b, f, **kw: "gpu" if f == "cupy" else real_resolve(b, f, **kw))
    monkeypatch.setattr(device, "L2Flusher", FakeFlusher)
    monkeypatch.setattr(device, "device_info", lambda ordinal=0: {"name": "Fake H200", "l2_cache_bytes": 60 * 2**20})
    monkeypatch.setattr(device, "free_device_memory", lambda: None)
    monkeypatch.setattr(meta.device, "runtime_version", lambda: "13.0")
    monkeypatch.setattr(bandwidth, "gpu_copy_bandwidth",
                        lambda: bandwidth.CopyBandwidth(4000.0, 2**30, 5.4e-4, 10, "fake"))
    monkeypatch.setattr(bandwidth, "gpu_read_bandwidth",
                        lambda: bandwidth.CopyBandwidth(4400.0, 2**30, 2.4e-4, 10, "fake", "read"))
    monkeypatch.setattr(timing, "gpu_timer", lambda: timing.WallClockTimer())
    gpu_limits = Limits(block_sizes=None, backends=("gpu", "cpu"))
    _fake_module(monkeypatch, "cupy.fakedense", limits=gpu_limits)
    _fake_module(monkeypatch, "cupy.fakepaged", limits=gpu_limits)

    outcome, rows = sweep(tmp_path, "--backend", "auto", "--shapes", TINY, "--block-sizes", "8,16,128", "--budget-ms", "1",
                          "--variants", "numpy.gather,cupy.fakepaged,cupy.fakedense", "--dense", "cupy.fakedense")
    assert outcome.exit_code == 0, outcome.summary
    by = {(r["variant"], r["block_size"]): r for r in rows}
    assert by[("numpy.gather", "8")]["status"] == "unsupported" and "CPU only" in by[("numpy.gather", "8")]["note"]
    paged = by[("cupy.fakepaged", "16")]
    assert paged["backend"] == "gpu" and paged["timing"] == "cuda-events" and paged["status"] == "ok"
    assert float(paged["paging_overhead"]) > 0 and float(paged["fraction_of_copy_bw"]) > 0
    assert float(paged["fraction_of_read_bw"]) == pytest.approx(float(paged["gbps"]) / 4400.0)
    timed = sum(int(r["repeats"]) for r in rows if r["status"] == "ok")
    assert len(flushes) >= timed  # an L2 flush before every timed call (and every warm-up call)
    meta_json = json.loads((outcome.run_dir / "meta.json").read_text())
    assert meta_json["timing"] == "cuda-events" and meta_json["gpu"]["name"] == "Fake H200"
    checks = {c["id"]: c for c in meta_json["goals"]["checks"]}
    assert checks["copy_bw_fraction"]["status"].startswith("not measured (no correct paged GPU point at 64x4096")
    assert checks["paging_overhead"]["measured"] is not None and checks["block_size_8_vs_128"]["measured"] is not None
    assert "GPU Fake H200" in outcome.summary and "CPU EMULATION" not in outcome.summary
    assert not HAVE_MATPLOTLIB or {"time_vs_block_size.png", "gbps_vs_block_size.png", "paging_overhead.png"} <= \
        {p.name for p in outcome.run_dir.iterdir()}


# Where each negative control's flaw lives (default: a plain decode shape): the sweep's own shapes and
# options reach it, so the sweep rejects every registered control.
NEGATIVE_CONTROL_POINTS = {
    "wrong.cupy.window_off_by_one": ("2x40x4/2x64xfp32", "--options", "window=16"),
    "wrong.cupy.softcap_before_scale": ("2x40x4/2x64xfp32", "--options", "softcap=5"),
    "wrong.cupy.alibi_flipped": ("2x40x4/2x64xfp32", "--options", "alibi"),
    "wrong.cupy.causal_off_by_one": ("2x40x4/2x64xfp32 q=4",),
    "wrong.numba.causal_off_by_one": ("2x40x4/2x64xfp32 q=4",),
    "wrong.cupy.cascade_partial_block": ("4x40x4/2x64xfp32 shared=2",),  # 40 = 2 full blocks of 16 + 8 tokens
    "wrong.numba.split_sink_per_partition": ("1x520x2/1x32xfp32", "--options", "sinks"),  # 2 partitions of 512
}
# Controls whose flaw lies in what the sweep does not draw: its truth is one contiguous-token output per shape
# (no lse, no per-slot scales). tests/kernels/test_variants.py rejects them on the property tests' problems.
SWEEP_CANNOT_REACH = {
    "wrong.cupy.lse_base2": "the sweep checks the output, not the log-sum-exp",
    "wrong.cupy.neighbour_head_scale": "the sweep has no per-token scales (they belong to slots, not tokens)",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.skip(reason=SWEEP_CANNOT_REACH[n]))
                                  if n in SWEEP_CANNOT_REACH else n for n in registry.variants("wrong")])
def test_registered_negative_controls_are_recorded_wrong(tmp_path, name):
    shape, *extra = NEGATIVE_CONTROL_POINTS.get(name, ("2x40x4/2x64xfp32",))
    outcome, rows = sweep(tmp_path, "--backend", "auto", "--shapes", shape, *extra, "--block-sizes", "16",
                          "--variants", name, "--no-plots", "--no-resources")
    (row,) = rows
    assert row["status"] == "wrong" and row["correct"] == "False" and row["time_us"] == "", row
    assert outcome.exit_code == 1


@pytest.mark.skipif(backends.gpu_present(), reason="checks the refusal on a machine without a GPU")
def test_gpu_check_refuses_without_a_gpu_and_says_what_is_missing(tmp_path):
    """scripts/gpu-check lists every missing prerequisite and runs nothing (exit 3) where there is no GPU."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check"
    done = subprocess.run([str(script), str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHON=sys.executable))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "missing prerequisites (nothing was run)" in done.stdout and "nvidia-smi / the NVIDIA driver" in done.stdout
    assert (tmp_path / "out" / "gpu-check.log").read_text().count("missing prerequisites") == 1
    assert not (tmp_path / "out" / "results").exists()


# ---------------------------------------------------------------- exit codes, refusals, read ceiling, launch_parts

def test_a_variant_with_no_ok_point_fails_the_run(tmp_path, monkeypatch, capsys):
    _fake_module(monkeypatch, "numpy.d96", limits=Limits(block_sizes=None, head_dims=(96,), backends=("cpu",)))
    outcome, rows = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "1,16", "--variants", "numpy.gather,numpy.d96",
                          "--no-plots")
    assert [r["status"] for r in rows if r["variant"] == "numpy.d96"] == ["unsupported", "unsupported"]
    assert outcome.without_ok == ["numpy.d96"] and outcome.exit_code == 1
    assert "NO CORRECT POINT for 1 selected variant(s)" in outcome.summary and "numpy.d96" in outcome.summary
    assert json.loads((outcome.run_dir / "meta.json").read_text())["variants_without_ok"] == ["numpy.d96"]
    # skipped for time is not "nothing supports it"; a CPU-only variant left out of a GPU sweep neither
    assert run.variants_without_ok([dict(variant="a", status="skipped")], ["a"]) == []
    assert run.variants_without_ok([dict(variant="a", status="unsupported")], ["a"], {"a"}) == []


@pytest.mark.parametrize("text", ["0", "16,5000", "16,x"])
def test_block_sizes_outside_1_to_4096_are_refused_by_the_parser(tmp_path, capsys, text):
    with pytest.raises(SystemExit) as stop:
        cli.main(["sweep", "--results-dir", str(tmp_path / "r"), "--no-progress", "--backend", "cpu",
                  "--block-sizes", text])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --block-sizes:" in err and repr(text) in err
    assert not (tmp_path / "r").exists()


def test_any_block_size_in_range_is_swept(tmp_path):
    """61 and 528 (non-powers of two, a block larger than the context) run; a power-of-two variant refuses them."""
    outcome, rows = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "61,528", "--variants", "numpy.gather",
                          "--no-plots", "--no-resources")
    assert [(r["block_size"], r["status"], r["correct"]) for r in rows] == [("61", "ok", "True"), ("528", "ok", "True")]
    config = sweep_cmd.build_config(cli.build_parser().parse_args(["sweep", "--backend", "cpu"]))
    with pytest.raises(ValueError, match="block sizes must be integers in 1..4096"):
        run.validate(dataclasses.replace(config, block_sizes=(5000,)))  # a config built without the parser


def test_backend_gpu_without_a_gpu_is_refused_before_a_run_folder_exists(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(backends, "gpu_present", lambda: False)
    code = cli.main(["sweep", "--results-dir", str(tmp_path / "r"), "--no-progress", "--backend", "gpu"])
    err = capsys.readouterr().err
    assert code == 2 and "--backend gpu: no NVIDIA GPU was found here" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_results_dir_that_is_a_file_or_cannot_be_created_is_one_line_exit_2(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for root in (a_file, a_file / "below"):
        code = cli.main(["sweep", "--results-dir", str(root), "--no-progress", "--backend", "cpu", "--quick",
                         "--variants", "numpy.gather"])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"error: --results-dir {root}: cannot create a run folder there"), err
        assert err.count("\n") == 1 and "Traceback" not in err


def test_launch_parts_are_checked_then_timed_alone_beside_the_time_per_call(tmp_path, monkeypatch):
    def two_parts(inner):
        return [("partition", inner.launch), ("reduce", lambda: None)]

    _fake_module(monkeypatch, "numpy.split2", parts=two_parts)
    outcome, rows = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "4", "--variants", "numpy.split2,numpy.gather",
                          "--no-plots")
    by = {r["variant"]: r for r in rows}
    assert by["numpy.split2"]["status"] == "ok"
    assert float(by["numpy.split2"]["partition_us"]) > 0
    assert by["numpy.split2"]["parts_us"].startswith("partition=") and " reduce=" in by["numpy.split2"]["parts_us"]
    assert by["numpy.gather"]["parts_us"] == "" and by["numpy.gather"]["partition_us"] == ""  # no launch_parts: absent
    assert "Kernels alone (launch_parts" in outcome.summary
    assert "both launches and the host gap between them" in outcome.summary


def test_launch_parts_that_do_not_compute_the_output_are_wrong(tmp_path, monkeypatch):
    state = {}

    def parts(inner):
        return [("partition", lambda: state.update(cleared=True))]

    def result(problem, out):
        return np.zeros_like(out) if state.pop("cleared", False) else out

    _fake_module(monkeypatch, "numpy.badparts", parts=parts, result=result)
    outcome, rows = sweep(tmp_path, "--shapes", TINY, "--block-sizes", "4", "--variants", "numpy.badparts", "--no-plots")
    (row,) = rows
    assert row["status"] == "wrong" and "launch_parts() run in order differs" in row["note"]
    assert outcome.exit_code == 1


def test_the_l2_flush_ends_with_a_read_of_a_second_buffer_of_at_least_twice_the_l2():
    order = []
    flusher = device.L2Flusher(60 * 2**20, write_pass=lambda: order.append("write"),
                               read_pass=lambda: order.append("read"))
    flusher()
    assert order == ["write", "read"]
    assert [kind for kind, _ in flusher.passes][-1] == "read"
    assert flusher.nbytes >= 2 * 60 * 2**20


def test_flush_passes_use_two_separate_buffers_of_the_flush_size(monkeypatch):
    """The default passes, with CuPy faked: a zero-fill of one buffer, then the read kernel over another."""
    made, launches = [], []

    class FakeArray:
        def __init__(self, n, dtype=None):
            self.n = n
            made.append(self)

        def fill(self, value):
            launches.append(("fill", self, value))

    fake = types.SimpleNamespace(
        uint8="uint8", uint32="uint32", empty=FakeArray, ones=FakeArray, zeros=FakeArray,
        RawKernel=lambda code, name: (lambda grid, block, args: launches.append(("read", args[0], int(args[1])))),
        cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(attributes={"MultiProcessorCount": 132})))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    flusher = device.L2Flusher(60 * 2**20)
    flusher()
    (kind1, written, value), (kind2, read, n16) = launches
    assert (kind1, value, kind2) == ("fill", 0, "read")
    assert written is not read and written.n == read.n == flusher.nbytes == device.flush_bytes(60 * 2**20)
    assert n16 * 16 == flusher.nbytes


def test_read_bandwidth_beside_copy_and_the_goal_uses_the_stricter(tmp_path):
    host = bandwidth.host_read_bandwidth(1 << 20, repeats=2)
    assert host.gbps > 0 and host.kind == "read" and host.as_dict()["convention"].startswith("nbytes / seconds")
    assert bandwidth.read_gbps(10**9, 0.5) == 2.0
    rows = synthetic_gpu_rows(280.0)
    copy_fraction = 10**9 / 280e-6 / 1e9 / 4000
    for r in rows:
        if r["status"] == "ok":
            r["fraction_of_read_bw"] = r["gbps"] / 4200.0  # reads faster than it copies: the stricter ceiling
    by = {c["id"]: c for c in goals.evaluate(rows, True, "cupy.dense")["checks"]}
    assert by["copy_bw_fraction"]["measured"] == pytest.approx(copy_fraction * 4000 / 4200, rel=1e-3)
    assert "(stricter: read)" in by["copy_bw_fraction"]["detail"]
    for r in rows:
        if r["status"] == "ok":
            r["fraction_of_read_bw"] = r["gbps"] / 3000.0
    by = {c["id"]: c for c in goals.evaluate(rows, True, "cupy.dense")["checks"]}
    assert by["copy_bw_fraction"]["measured"] == pytest.approx(copy_fraction, rel=1e-3)
    assert "(stricter: copy)" in by["copy_bw_fraction"]["detail"]


def test_tune_partition_records_a_refusal_as_unsupported_and_goes_on():
    spec = importlib.util.spec_from_file_location("tune_partition", Path(__file__).resolve().parents[2] /
                                                  "scripts" / "tune_partition.py")
    tune_partition = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune_partition)
    tokens = shapes.make_tokens(shapes.parse_shape(TINY), 0)
    problem = shapes.paged_problem(tokens, 4)
    expected = shapes.expected_output(tokens)

    def prepare(name, partition):
        if partition == 2048:
            raise Unsupported(f"{name}: tile 8 x 2048 tokens needs 65536 bytes of shared memory (48 KiB max)")
        if partition == 1024:
            raise RuntimeError("boom")
        inner = gather.prepare(problem, "cpu")
        wrong = partition == 512
        return types.SimpleNamespace(launch=inner.launch,
                                     result=lambda: inner.result() * (0 if wrong else 1))

    rows = list(tune_partition.tune(problem, expected, ["cupy.a", "cupy.b"], [256, 512, 1024, 2048],
                                    lambda fn: timing.Stats.from_samples([1e-5]), prepare=prepare))
    assert [(r["variant"], r["partition"], r["status"]) for r in rows] == [
        (v, p, s) for v in ("cupy.a", "cupy.b")
        for p, s in ((256, "ok"), (512, "wrong"), (1024, "error"), (2048, "unsupported"))]
    assert "needs 65536 bytes" in rows[3]["note"] and rows[0]["stats"].median == 1e-5


@pytest.mark.parametrize("name", registry.variants())
def test_every_variant_answers_the_launch_parts_protocol(name):
    """The sweep iterates launch_parts() at every point: absent, [] (one kernel) or (name, callable) pairs, never
    None (flashinfer.decode's unsplit plan once returned None and errored every point of the sweep)."""
    problem = sandbox.DecodeProblem.random(seed=0, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                                   max_context_len=40, dtype="float16")
    family = registry.family(registry.get(name).family)
    try:
        prepared, _ = variant_runner.prepare(name, problem, family.resolve("auto"))
    except Unsupported as exc:
        pytest.skip(f"{name} does not take this problem: {exc}")
    parts = run.launch_parts(prepared)
    assert isinstance(parts, list) and all(callable(fn) for _, fn in parts)
