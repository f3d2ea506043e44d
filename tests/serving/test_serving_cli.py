"""python -m sandbox serving: refusals before anything runs, the JSON and run folder, a trace's arrival
times, the paged-vs-contiguous claim at a small scale, exit statuses."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sandbox import cli
from sandbox.commands import serving as serving_command
from sandbox.serving.kv_paged import PagedKV

ROOT = Path(__file__).resolve().parents[2]


def curated_sweep() -> Path:
    """The curated `make sweep` run (tracked by git; its name changes when it is regenerated), made on the CPU."""
    try:
        listed = subprocess.run(["git", "ls-files", "results/*-sweep/sweep.csv"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: nothing is curated
        listed = []
    return (ROOT / listed[0]).parent if listed else ROOT / "results" / "no-curated-sweep"


CPU_SWEEP = curated_sweep()


@pytest.fixture
def no_plots(monkeypatch):
    """Skip drawing (a second or more per run on the shared VM): one test below checks the PNGs."""
    import sandbox.serving.plots as plots
    monkeypatch.setattr(plots, "plot_all", lambda result, timelines, run_dir: [])


def call(argv, capsys):
    rc = cli.main(["serving", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


# argparse refuses these (numbers.real / numbers.integer / block_size_list): exit 2 with the flag named
@pytest.mark.parametrize("argv, message", [
    (["--rates", "0"], "argument --rates: must be a number in (0, 100000], got '0'"),
    (["--rates", "2,-1"], "argument --rates: must be a number in (0, 100000], got '-1'"),
    (["--rates", "inf"], "argument --rates: must be a finite number, got 'inf'"),
    (["--rates", "1e308"], "argument --rates: must be a number in (0, 100000], got '1e308'"),
    (["--rates", "fast"], "argument --rates: must be a number, got 'fast'"),
    (["--rates", ","], "argument --rates: must list at least one number"),
    (["--latency-bound", "0"], "argument --latency-bound: must be a number in (0, 1000]"),
    (["--latency-bound", "1e308"], "argument --latency-bound: must be a number in (0, 1000]"),
    (["--think-time", "1e308"], "argument --think-time: must be a number in [0, 100000]"),
    (["--swap-gb", "1e308"], "argument --swap-gb: must be a number in [0, 100000]"),
    (["--params-b", "1e308"], "argument --params-b: must be a number in (0, 100000]"),
    (["--seed", "-1"], "argument --seed: must be an integer in [0, "),
    (["--seeds", "0"], "argument --seeds: must be an integer in [1, 100]"),
    (["--model-gb", "inf"], "argument --model-gb: must be a finite number, got 'inf'"),
    (["--model-gb", "1e12"], "argument --model-gb: must be a number in (0, 1e+06]"),
    (["--num-requests", "0"], "argument --num-requests: must be an integer in [1, 1e+06]"),
    (["--max-len", "1"], "argument --max-len: must be an integer in [2, 1e+06]"),
    (["--block-sizes", "0"], "block sizes must be integers in 1..4096"),
    (["--workload", "beam", "--widths", "0"], "argument --widths: must be an integer in [1, 16]"),
    (["--swap-gbps", "0"], "argument --swap-gbps: must be a number in (0, 10000]"),
    (["--fixed-ms", "nan"], "argument --fixed-ms: must be a finite number, got 'nan'"),
    (["--beam-survival", "0"], "argument --beam-survival: must be a number in (0, 1]"),
])
def test_bad_numbers_are_refused_by_the_parser(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as refused:
        cli.main(["serving", *argv, "--results-dir", str(tmp_path), "--no-progress"])
    assert refused.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--budget-tokens", "100"], "a KV budget of at least --max-len (2048) tokens"),
    (["--model-gb", "900000"], "--model-gb: a KV budget of 1,098,632,812 tokens is more than the simulators hold"),
    (["--num-requests", "1000000"], "--num-requests x --seeds x --max-len: 1,000,000 requests"),
    (["--max-batched-tokens", "100"], "--max-batched-tokens must be >= --max-num-seqs (256)"),
    (["--block-sizes", "4096", "--budget-tokens", "3000"], "--block-sizes must be small enough"),
    (["--reserve", "max,huge"], "--reserve must be a list of max, pow2, oracle, static, got ['huge']"),
    (["--workload", "shared-prompt", "--prefix-len", "4000"], "--prefix-len must be in 0..2046"),
    (["--trace", "/nonexistent.csv"], "is not a readable file"),
    (["--step-cost", "roofline"], "--step-cost 'roofline': unknown source 'roofline'"),
    (["--step-cost", "model:numba.gqa"], "numba.gqa is not a CUDA C (cupy.*) variant"),
    (["--step-cost", "model", "--block-sizes", "24"], "--step-cost model: cupy.v1 does not support block_size=24"),
    pytest.param(["--step-cost", f"sweep:{CPU_SWEEP}"], "CPU emulation",
                 marks=pytest.mark.skipif(not CPU_SWEEP.is_dir(), reason="no curated sweep run is tracked")),
    (["--kernel", "cupy.v1", "--step-cost", "model"], "--kernel must be used with --step-cost analytic"),
    (["--kernel", "nosuch"], "--kernel nosuch at block size 16"),
    (["--json", "/nonexistent/dir/out.json"], "--json must be a file in an existing folder"),
    (["--max-len", "2"], "--max-len must be >= 3 for sharegpt-like lengths"),
])
def test_bad_inputs_are_refused_by_name_and_nothing_is_written(tmp_path, capsys, argv, message):
    rc, out, err = call([*argv, "--results-dir", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_results_dir_that_is_a_file_is_refused(tmp_path, capsys):
    afile = tmp_path / "f"
    afile.write_text("")
    rc, out, err = call(["--results-dir", str(afile), "--no-progress"], capsys)
    assert rc == 2 and f"--results-dir {str(afile)!r} is not a folder" in err and afile.read_text() == ""


def test_a_non_utf8_trace_is_refused_with_its_name(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"prompt_len,output_len\n\xff\xfe,3\n")
    rc, _, err = call(["--trace", str(trace), "--results-dir", str(tmp_path / "r"), "--no-progress"], capsys)
    assert rc == 2 and "is not UTF-8 text" in err and not (tmp_path / "r").exists()


def test_bad_trace_arrival_is_refused_with_its_line(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_len,output_len,arrival\n10,10,0\n10,10,soon\n")
    rc, _, err = call(["--trace", str(trace), "--results-dir", str(tmp_path / "r"), "--no-progress"], capsys)
    assert rc == 2 and "line 3: arrival must be a finite number of seconds >= 0, got 'soon'" in err
    assert not (tmp_path / "r").exists()


# 60 requests do not queue long enough for the default bound to part the allocators; 0.015 s/token does
SMALL = ["--num-requests", "60", "--rates", "1.5,6", "--latency-bound", "0.015", "--block-sizes", "16",
         "--reserve", "max", "--seeds", "2", "--no-progress"]


def test_paged_sustains_a_higher_rate_and_the_json_has_the_contract(tmp_path, capsys):
    out_json = tmp_path / "out.json"
    rc, out, _ = call([*SMALL, "--results-dir", str(tmp_path / "r"), "--json", str(out_json)], capsys)
    assert rc == 0
    data = json.loads(out_json.read_text())
    paged, contiguous = data["allocators"]["paged-16"], data["allocators"]["contiguous-max"]
    assert paged["max_rate"] is not None and (contiguous["max_rate"] or 0) < paged["max_rate"]
    for entry in (paged, contiguous):
        knees = entry["max_rate_by_seed"]
        assert len(knees) == 2 and entry["max_rate"] == pytest.approx(sum(knees) / 2)
        low, high = entry["max_rate_ci"]
        assert low <= entry["max_rate"] <= high
        assert {p["seed"] for p in entry["points"]} == {0, 1}
    # 60 requests never queue long enough for paged to miss 0.015 s/token: the search doubles the grid's top
    # six times (6 -> 384 req/s) and reports a lower bound, marked, not a measurement
    assert paged["max_rate_censored"] is True and paged["max_rate"] == 384
    assert contiguous["max_rate_censored"] is False and ">=384.00" in out
    (ratio,) = data["ratios"]
    assert (ratio["paged"], ratio["baseline"], ratio["censored"]) == ("paged-16", "contiguous-max", True)
    assert ratio["ratio_by_seed"] == pytest.approx([384 / k for k in contiguous["max_rate_by_seed"]])
    for p in paged["points"] + contiguous["points"]:
        assert {"rate", "throughput", "normalized_latency", "recomputed_tokens", "swapped_bytes",
                "prefix_hit_rate", "measured_requests"} <= p.keys()
        assert p["requests"] == 60 and p["measured_requests"] == 54 and p["ok"]
    assert "Step time: analytic H200 SXM roofline" in out and "Preemption cost" in out and "paged-16" in out
    run_dir = Path(data["run_dir"])
    assert sorted(f.name for f in run_dir.iterdir()) == ["latency_vs_rate.png", "memory.png", "meta.json",
                                                         "points.csv", "result.json", "swap.png", "timeline.csv"]
    points = len(paged["points"]) + len(contiguous["points"])
    assert len((run_dir / "points.csv").read_text().splitlines()) == 1 + points
    assert (run_dir / "memory.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((run_dir / "meta.json").read_text())["seed"] == 0


def test_a_trace_arrival_column_sets_the_arrival_times(tmp_path, capsys, no_plots):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_len,output_len,arrival\n" + "".join(f"100,50,{t}\n" for t in (0, 100, 200)))
    argv = ["--trace", str(trace), "--block-sizes", "16", "--reserve", "max", "--seeds", "1", "--no-progress"]
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
    monkeypatch.setattr(serving_command, "run_serving", interrupted)
    rc, _, err = call([*SMALL, "--results-dir", str(tmp_path)], capsys)
    assert rc == 130 and "interrupted" in err


def test_each_kernel_curve_serves_the_paged_block_sizes_and_best_is_the_models_fastest(tmp_path, capsys,
                                                                                      monkeypatch):
    """--kernel twice: a block-size curve per kernel (paged only), 'best' resolved by the model at the run's shape.
    A fake traffic model keeps it cheap: "slow" pays 3x at block size 1, "flat" the same at every block size."""
    from sandbox.serving import kernel_time, run
    from sandbox.serving.plots import plot_block_size

    def fake(name, block_size, context, shape):
        return {"slow": 3.0 if block_size == 1 else 1.0, "flat": 0.9}.get(name, 5.0) * context

    monkeypatch.setattr(run, "KernelTable", lambda *a: kernel_time.KernelTable(*a, time_us=fake))
    monkeypatch.setattr(serving_command, "best_variant",
                        lambda shape: kernel_time.best_variant(shape, ("slow", "flat", "other"), time_us=fake))
    monkeypatch.setattr("sandbox.serving.plots.plot_all", lambda result, timelines, run_dir: [])
    trace = tmp_path / "t.csv"                # its own arrival times: one point per allocator, no search
    trace.write_text("prompt_len,output_len,arrival\n" + "".join(f"100,40,{t / 10}\n" for t in range(6)))
    argv = ["--kernel", "slow", "--kernel", "best", "--block-sizes", "1,16", "--reserve", "oracle", "--trace",
            str(trace), "--seeds", "1", "--no-progress", "--results-dir", str(tmp_path), "--json", str(tmp_path / "k.json")]
    rc, _, err = call(argv, capsys)
    result = json.loads((tmp_path / "k.json").read_text())
    assert rc == 0, err
    assert sorted(result["allocators"]) == ["contiguous-oracle", "paged-1", "paged-1 [flat]", "paged-16",
                                           "paged-16 [flat]"]
    assert result["meta"]["kernel"] == "slow" and result["meta"]["kernel_curves"] == ["flat"]
    lat = {name: e["points"][0]["normalized_latency"] for name, e in result["allocators"].items()}
    assert lat["paged-1"] > lat["paged-1 [flat]"]              # the slow kernel's small-block penalty, only there
    assert plot_block_size(result, tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
    rc, _, err = call(["--kernel", "slow", "--kernel", "slow", "--results-dir", str(tmp_path / "x")], capsys)
    assert rc == 2 and "a different curve each time" in err and not (tmp_path / "x").exists()
