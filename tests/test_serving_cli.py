"""python -m sandbox serving: refusals before anything runs, the JSON and run folder, a trace's arrival
times, the paged-vs-contiguous claim at a small scale, exit statuses."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox import cli
from sandbox.serving import run as serving_run
from sandbox.serving.kv_paged import PagedKV

ROOT = Path(__file__).resolve().parent.parent
CPU_SWEEP = ROOT / "results" / "20261202T131641Z-sweep"      # the curated CPU run (tracked)


@pytest.fixture
def no_plots(monkeypatch):
    """Skip drawing (a second or more per run on the shared VM): one test below checks the PNGs."""
    import sandbox.serving.plots as plots
    monkeypatch.setattr(plots, "plot_all", lambda result, timelines, run_dir: [])


def call(argv, capsys):
    rc = cli.main(["serving", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv, message", [
    (["--rates", "0"], "--rates values must be finite and > 0, got 0.0"),
    (["--rates", "2,-1"], "--rates values must be finite and > 0, got -1.0"),
    (["--rates", "inf"], "--rates values must be finite and > 0, got inf"),
    (["--rates", "fast"], "--rates expects comma-separated numbers, got 'fast'"),
    (["--rates", ","], "--rates is empty"),
    (["--latency-bound", "0"], "--latency-bound values must be finite and > 0"),
    (["--seed", "-1"], "--seed must be an integer >= 0"),
    (["--model-gb", "inf"], "--model-gb must be a finite number > 0, got inf"),
    (["--budget-tokens", "100"], "a KV budget of at least --max-len (2048) tokens"),
    (["--num-requests", "0"], "--num-requests must be >= 1"),
    (["--max-batched-tokens", "100"], "--max-batched-tokens must be >= --max-num-seqs (256)"),
    (["--block-sizes", "0"], "--block-sizes values must be finite and >= 1"),
    (["--block-sizes", "16384"], "--block-sizes must be small enough"),
    (["--reserve", "max,huge"], "--reserve must be a list of max, pow2, oracle, got ['huge']"),
    (["--workload", "beam", "--widths", "0"], "--widths values must be finite and >= 1"),
    (["--workload", "shared-prompt", "--prefix-len", "4000"], "--prefix-len must be in 0..2046"),
    (["--swap-gbps", "0"], "--swap-gbps must be a finite number > 0"),
    (["--fixed-ms", "nan"], "--fixed-ms must be a finite number >= 0"),
    (["--beam-survival", "0"], "--beam-survival must be in (0, 1]"),
    (["--trace", "/nonexistent.csv"], "is not a readable file"),
    (["--step-cost", "roofline"], "--step-cost 'roofline': unknown source 'roofline'"),
    (["--step-cost", "model:numba.gqa"], "numba.gqa is not a CUDA C (cupy.*) variant"),
    (["--step-cost", "model", "--block-sizes", "24"], "--step-cost model: cupy.v1 does not support block_size=24"),
    (["--step-cost", f"sweep:{CPU_SWEEP}"], "CPU emulation"),
    (["--json", "/nonexistent/dir/out.json"], "--json must be a file in an existing folder"),
])
def test_bad_inputs_are_refused_by_name_and_nothing_is_written(tmp_path, capsys, argv, message):
    rc, out, err = call([*argv, "--results-dir", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_bad_trace_arrival_is_refused_with_its_line(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_len,output_len,arrival\n10,10,0\n10,10,soon\n")
    rc, _, err = call(["--trace", str(trace), "--results-dir", str(tmp_path / "r"), "--no-progress"], capsys)
    assert rc == 2 and "line 3: arrival must be a finite number of seconds >= 0, got 'soon'" in err
    assert not (tmp_path / "r").exists()


# 60 requests do not queue long enough for the default bound to part the allocators; 0.015 s/token does
SMALL = ["--num-requests", "60", "--rates", "1.5,6", "--latency-bound", "0.015", "--block-sizes", "16",
         "--reserve", "max", "--no-progress"]


def test_paged_sustains_a_higher_rate_and_the_json_has_the_contract(tmp_path, capsys):
    out_json = tmp_path / "out.json"
    rc, out, _ = call([*SMALL, "--results-dir", str(tmp_path / "r"), "--json", str(out_json)], capsys)
    assert rc == 0
    data = json.loads(out_json.read_text())
    paged, contiguous = data["allocators"]["paged-16"], data["allocators"]["contiguous-max"]
    assert paged["max_rate"] is not None and (contiguous["max_rate"] or 0) < paged["max_rate"]
    for p in paged["points"] + contiguous["points"]:
        assert {"rate", "throughput", "normalized_latency", "recomputed_tokens", "swapped_bytes",
                "prefix_hit_rate"} <= p.keys()
        assert p["requests"] == 60 and p["ok"]
    assert "Step time: analytic H200 roofline" in out and "Preemption cost" in out and "paged-16" in out
    run_dir = Path(data["run_dir"])
    assert sorted(f.name for f in run_dir.iterdir()) == ["latency_vs_rate.png", "memory.png", "meta.json",
                                                         "points.csv", "result.json", "timeline.csv"]
    assert len((run_dir / "points.csv").read_text().splitlines()) == 1 + 4
    assert (run_dir / "memory.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((run_dir / "meta.json").read_text())["seed"] == 0


def test_a_trace_arrival_column_sets_the_arrival_times(tmp_path, capsys, no_plots):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_len,output_len,arrival\n" + "".join(f"100,50,{t}\n" for t in (0, 100, 200)))
    argv = ["--trace", str(trace), "--block-sizes", "16", "--reserve", "max", "--no-progress"]
    rc, _, _ = call([*argv, "--results-dir", str(tmp_path / "a"), "--json", str(tmp_path / "a.json")], capsys)
    point = json.loads((tmp_path / "a.json").read_text())["allocators"]["paged-16"]["points"]
    assert rc == 0 and [p["rate"] for p in point] == [pytest.approx(2 / 200)]   # the trace's own rate
    alone = point[0]["normalized_latency"]
    # the same trace squeezed to 50 req/s: the three requests now overlap, so each one takes longer
    rc, _, _ = call([*argv, "--rates", "50", "--results-dir", str(tmp_path / "b"), "--json", str(tmp_path / "b.json")],
                    capsys)
    squeezed = json.loads((tmp_path / "b.json").read_text())["allocators"]["paged-16"]["points"][0]
    assert rc == 0 and squeezed["rate"] == 50 and squeezed["normalized_latency"] > alone
    assert squeezed["mean_running_seqs"] > point[0]["mean_running_seqs"]


def test_a_shared_system_prompt_is_served_from_the_prefix_cache(tmp_path, capsys, no_plots):
    argv = ["--workload", "shared-prompt", "--prefix-len", "128", "--num-requests", "60", "--rates", "40",
            "--block-sizes", "16", "--reserve", "oracle", "--no-progress", "--results-dir", str(tmp_path),
            "--json", str(tmp_path / "o.json")]
    rc, _, _ = call(argv, capsys)
    data = json.loads((tmp_path / "o.json").read_text())["allocators"]
    paged, oracle = data["paged-16"]["points"][0], data["contiguous-oracle"]["points"][0]
    assert rc == 0 and paged["prefix_hit_rate"] > 0.6 and paged["sharing_saved"] > 0.3
    assert oracle["prefix_hit_rate"] == 0 and oracle["sharing_saved"] == 0
    assert paged["tokens_share"] < oracle["tokens_share"]          # the shared prompt is held once


def test_a_failed_check_exits_1(tmp_path, capsys, monkeypatch, no_plots):
    monkeypatch.setattr(PagedKV, "leaked", lambda self: True)
    rc, out, _ = call([*SMALL, "--rates", "3", "--num-requests", "10", "--results-dir", str(tmp_path)], capsys)
    assert rc == 1 and "CHECK FAILED" in out and "paged-16@3" in out


def test_ctrl_c_exits_130(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(serving_run, "run_serving", interrupted)
    rc, _, err = call([*SMALL, "--results-dir", str(tmp_path)], capsys)
    assert rc == 130 and "interrupted" in err
