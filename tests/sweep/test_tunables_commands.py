"""Tunables through every command: a copied variant with its own thread count runs through check, resources, the
traffic profiler and `sweep --tune` with its own configuration; the Numba variants launch a configured thread
count as it is (simulated too); a bad --config is refused, exit 2, before anything runs or is written."""
from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sandbox
from sandbox import cli
from sandbox.checking.check import check_problem
from sandbox.devices.backends import numba_simulated
from sandbox.problem import DecodeProblem
from sandbox.sweep import shapes as shapes_mod
from sandbox.sweep.measure.run import SweepConfig, run_sweep
from sandbox.sweep.measure.timing import TimingConfig
from sandbox.variant import Unsupported, registry, runner

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("numba", "cupy")


def _copy_with_threads(folder: Path, family: str) -> tuple[str, str]:
    """The family's README template copied as a newcomer would (as {family}_mine64), its default thread count
    changed to 64; (registry name, module name)."""
    module = f"{family}_mine64"
    text = (TEMPLATES / f"{family}_mine.py").read_text().replace(f'"{family}.mine', f'"{family}.mine64')
    text = text.replace('TUNABLES = {"threads": (32, 64, 128)}', 'TUNABLES = {"threads": (64, 32)}')
    text = text.replace("threads=32", "threads=64")
    assert text.count("threads=64") == 2 and '(64, 32)' in text, "the template's tunable lines moved"
    (folder / f"{module}.py").write_text(text)
    if family == "cupy":
        shutil.copy(TEMPLATES / "cupy_mine.cu", folder / f"{module}.cu")
    return f"{family}.mine64", module


@pytest.fixture(params=FAMILIES)
def copied(request, tmp_path, monkeypatch):
    name, module = _copy_with_threads(tmp_path, request.param)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.VARIANTS, name, module)
    yield name
    sys.modules.pop(module, None)


def _small(seed=0, block_size=4, head_dim=16):
    return DecodeProblem.random(seed, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=head_dim, block_size=block_size,
                                max_context_len=20, dtype="float32")


def _threads(prepared) -> int:
    """Threads per block a prepared launch will run: a Numba Launch's, or a CUDA C Prepared's first launch's."""
    return prepared.threads if hasattr(prepared, "threads") else prepared.launches[0][2][0]


@pytest.mark.skipif(not numba_simulated(), reason="the simulated launch sizes")
def test_numba_variants_launch_the_configured_thread_count_under_the_simulator():
    problem = _small(head_dim=32)
    from kernels.numba_cuda import launch

    for name in ("numba.naive", "numba.block", "numba.gqa", "numba.multi"):
        assert "threads" in sandbox.tunables(name), name
        configured, _ = runner.prepare(name, problem, "cpu", {"threads": 64})
        assert configured.threads == 64, name
        auto, _ = runner.prepare(name, problem, "cpu")
        assert auto.threads <= launch.SIM_MAX_THREADS, name
    split, _ = runner.prepare("numba.split", problem, "cpu", {"threads": 32, "partition_size": 256})
    assert split.partition.threads == 32 and split.partition_size == 256
    with pytest.raises(Unsupported, match=r"threads=48: a Numba variant launches whole warps"):
        launch.block_threads(48)
    with pytest.raises(Unsupported, match=r"numba.block does not support threads=48 \(allowed: auto, 32, 64"):
        runner.prepare("numba.block", problem, "cpu", {"threads": 48})
    result = check_problem("numba.block", problem, "cpu", {"threads": 32})  # 32 Python threads a block: correct
    assert result.ok, result.error or result.comparison.report


def test_copied_variant_runs_check_and_traffic_with_its_own_thread_count(copied):
    name = copied
    assert sandbox.tunables(name) == {"threads": (64, 32)}
    if registry.get(name).family == "cupy" or numba_simulated():  # prepared here (Numba: in its mode)
        assert _threads(runner.prepare(name, _small(), "cpu")[0]) == 64
        assert _threads(runner.prepare(name, _small(), "cpu", {"threads": 32})[0]) == 32
    for seed, block_size in enumerate((1, 5)):
        result = check_problem(name, _small(seed, block_size), "cpu", {"threads": 32})
        assert result.ok, result.error or result.comparison.report
    if numba_simulated() or registry.get(name).family == "cupy":  # the Numba capture runs under the simulator
        for config, threads in ((None, 64), ({"threads": 32}, 32)):
            counted = sandbox.traffic(name, _small(), census=False, config=config)
            assert counted["config"] == f"threads={threads}"
            assert [tuple(k["block"]) for k in counted["kernels"]] == [(threads, 1, 1)]


def test_copied_variants_resources_report_their_configured_threads(tmp_path):
    """`resources NAME [--config threads=32]` for both copies in one real-mode process (Numba's compile_ptx;
    NVRTC for CUDA C), the copies registered there."""
    copies = dict(_copy_with_threads(tmp_path, family) for family in FAMILIES)
    calls = [["resources", name, "--block-sizes", "16", "--dtype", "fp32", "--json"] + config
             for name in copies for config in ([], ["--config", "threads=32"])]
    script = (f"from sandbox.variant import registry; registry.VARIANTS.update({copies!r}); from sandbox import cli; "
              f"codes = [(cli.main(argv), print('=' * 8))[0] for argv in {calls!r}]; "
              "raise SystemExit(max(codes))")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    outputs = [json.loads(text)[0] for text in done.stdout.split("=" * 8)[:-1]]
    for name, (default, configured) in zip(copies, (outputs[:2], outputs[2:])):
        assert default["variant"] == configured["variant"] == name
        assert default["threads_per_block"] == 64 and default["config"] == "threads=64"
        assert configured["threads_per_block"] == 32 and configured["config"] == "threads=32"
        assert default["registers"] == configured["registers"] > 0  # the same code, launched differently


@pytest.mark.skipif(not numba_simulated(), reason="--tune ranks by the traffic model on the CPU (Numba capture)")
def test_copied_variant_sweep_tune_records_its_best_configuration_and_tuned_reads_it(copied, tmp_path):
    name = copied
    fast = TimingConfig(warmup_s=0.0, budget_s=0.0, min_repeats=1, max_repeats=1)
    shape = shapes_mod.parse_shape("2x24x4/2x32xfp32")
    base = dict(variants=[name], block_sizes=(4,), shapes=[shape], backend="cpu", cpu_timing=fast, torch=False,
                quick=True, resources=False, plots=False, progress=False, results_dir=tmp_path / "runs",
                dense_baseline="")
    tuned_run = run_sweep(SweepConfig(**base, tune=True))
    assert tuned_run.exit_code == 0, tuned_run.summary
    recorded = json.loads((tuned_run.run_dir / "tuned.json").read_text())
    assert recorded["objective"] == "model_time_us"
    (point,) = recorded["points"]
    assert (point["variant"], point["shape"], point["block_size"]) == (name, shape.name, 4)
    assert [r["config"] for r in point["ranked"]] == [{"threads": 64}, {"threads": 32}]
    best = min(point["ranked"], key=lambda r: r["score"])
    assert point["config"] == best["config"]
    (row,) = tuned_run.rows
    assert row["status"] == "ok" and row["config"] == f"threads={best['config']['threads']}"
    again = run_sweep(SweepConfig(**dict(base, block_sizes=(4, 5)), tuned=tuned_run.run_dir))
    by_size = {r["block_size"]: r for r in again.rows}
    assert by_size[4]["config"] == row["config"]
    assert by_size[5]["config"] == "threads=64" and "no tuned configuration" in by_size[5]["note"]


@pytest.mark.parametrize("argv, message", [
    (["check", "numba.naive", "--config", "threads=48"], "numba.naive does not support threads=48 (allowed: auto, 32"),
    (["check", "numba.naive", "--config", "warps=2"], "numba.naive has no tunable 'warps' (its tunables: threads)"),
    (["resources", "numba.naive", "--config", "threads=48"], "does not support threads=48"),
    (["resources", "--config", "threads=64"], "--config: name the variants it is for"),
    (["traffic", "numba.naive", "--config", "partition_size=256"], "numba.naive has no tunable 'partition_size'"),
    (["sweep", "--variants", "numba.split", "--config", "partition_size=300"], "allowed: auto, 256, 512"),
    (["sweep", "--variants", "numba.naive", "--tune", "--config", "threads=64"], "give one of --tune, --tuned"),
])
def test_a_bad_config_is_refused_before_anything_runs(argv, message, tmp_path, capsys):
    out_file = tmp_path / "out.json"
    extra = {"traffic": ["--json", str(out_file)], "sweep": ["--results-dir", str(tmp_path / "runs")]}
    assert cli.main(argv + extra.get(argv[0], [])) == 2
    assert message in capsys.readouterr().err
    assert not out_file.exists() and not (tmp_path / "runs").exists()


def test_tune_on_a_gpu_ranks_by_gpu_time_and_disqualifies_a_wrong_output():
    """sweep --tune's GPU ranking (sandbox/sweep/measure/tune.py) with a stand-in variant, timer and reference: the
    fastest correct configuration wins; a faster one with a wrong output is recorded as refused."""
    import types

    from sandbox.sweep.measure import tune
    from sandbox.sweep.measure.run import Candidate

    module = types.ModuleType("fake_gpu_variant")
    module.TUNABLES = {"threads": (128, 64, 256)}
    seconds = {128: 3e-6, 64: 1e-6, 256: 0.5e-6}

    class Prepared:
        def __init__(self, threads):
            self.threads = threads

        def launch(self):
            pass

        def result(self):
            return self.threads

    class Timer:
        def time(self, fn):
            return seconds[fn.__self__.threads]

    data = types.SimpleNamespace(problem=lambda block_size: "problem",
                                 verdict=lambda prepared, got, block_size: types.SimpleNamespace(
                                     ok=got != 256, report="3 of 8 elements off\n..."))
    env = types.SimpleNamespace(timer_for=lambda family, resolved: Timer(), flush=None)
    candidate = Candidate("cupy.fake", "cupy", types.SimpleNamespace(check=lambda *args: None), prepare=None,
                          prepare_with=lambda problem, backend, config: Prepared(config["threads"]))
    fast = TimingConfig(warmup_s=0.0, budget_s=0.0, min_repeats=1, max_repeats=1)
    best, ranked, note = tune.explore_point(candidate, module, data, 16, "gpu", env, fast)
    assert best == {"threads": 64} and note == "tuned over 3 configurations: threads=64 wins at 1.00 us GPU"
    assert [r.get("score") for r in ranked] == [pytest.approx(3.0), pytest.approx(1.0), None]
    assert ranked[2]["refused"].startswith("RuntimeError: wrong output with threads=256: 3 of 8 elements off")
