"""Memory-waste study: the worked example, hand-checked simulations, the CLI and its run folder."""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sandbox.memory import cli, distributions, sharing, simulate
from sandbox.memory.example import render_seed_example, run_seed_example

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--num-requests", "80", "--sharing-requests", "12", "--budget-tokens", "6000", "--max-len", "1024",
         "--no-progress"]


def parse(argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def run_cli(argv, capsys):
    rc = cli.main(parse(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """One small default-shaped study through the CLI's JSON output (shared by several tests)."""
    root = tmp_path_factory.mktemp("results")
    args = parse(SMALL + ["--json", "--results-dir", str(root)])
    from sandbox.memory.study import run_study
    return run_study(cli.config_from_args(args), results_root=root, show_progress=False)


# ---- the worked example -------------------------------------------------------------------------
def test_seed_example_numbers():
    ex = run_seed_example()
    assert ex["num_tokens"] == 10 and ex["block_size"] == 4
    assert ex["paged"]["blocks"] == 3 and ex["paged"]["wasted_slots"] == 2
    assert ex["contiguous"] == {"reserved": 16, "wasted_slots": 6}
    assert ex["paged"]["blocks_content"] == [["I", "love", "teaching", "AI"], ["and", "Machine", "Learning", "at"],
                                             ["Outcome", "School", None, None]]
    table = ex["paged"]["block_table"]
    assert len(set(table)) == 3 and table != sorted(range(table[0], table[0] + 3))   # not one contiguous run
    picture = render_seed_example(ex)
    for text in ("| I ", "| Outcome ", "logical 2 -> physical", "2 wasted", "6 wasted"):
        assert text in picture


def test_seed_example_json_through_cli(capsys):
    rc, out, _ = run_cli(["--example", "seed", "--json"], capsys)
    data = json.loads(out)
    assert rc == 0
    assert data["paged"]["blocks"] == 3 and data["paged"]["wasted_slots"] == 2
    assert data["contiguous"]["reserved"] == 16 and data["contiguous"]["wasted_slots"] == 6


def test_seed_example_through_python_m_sandbox():
    proc = subprocess.run([sys.executable, "-m", "sandbox", "memory", "--example", "seed", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"blocks": 3, "wasted_slots": 2}.items() <= data["paged"].items()


# ---- simulations checked by hand ----------------------------------------------------------------
def test_one_request_by_hand():
    # prompt 3, output 2: step 1 holds 4 tokens, step 2 holds 5.
    paged = simulate.simulate_paged([3], [2], budget_tokens=8, block_size=4, max_len=8)
    assert paged.steps == 2 and paged.finished == 1
    assert paged.utilization == pytest.approx((4 + 5) / (4 + 8))
    assert paged.external_waste == 0 and paged.max_concurrent_requests == 1
    contiguous = simulate.simulate_contiguous([3], [2], budget_tokens=8, max_len=8)
    assert contiguous.utilization == pytest.approx(9 / 16)
    oracle = simulate.simulate_contiguous([3], [2], budget_tokens=8, max_len=8, reserve="oracle")
    assert oracle.utilization == pytest.approx(9 / 10)
    assert oracle.budget_utilization == pytest.approx(9 / 16)


def test_external_fragmentation_is_counted():
    # budget 10, max_len 4 reserved per request: 2 fit, 2 slots are a hole no waiting request fits in.
    r = simulate.simulate_contiguous([1, 1, 1], [3, 3, 3], budget_tokens=10, max_len=4)
    assert r.max_concurrent_requests == 2 and r.steps == 6
    # steps 1-3: request 3 waits, hole of 2 (of 10) is external waste; steps 4-6: nobody waits
    assert r.external_waste == pytest.approx(3 * 2 / (6 * 10))
    paged = simulate.simulate_paged([1, 1, 1], [3, 3, 3], budget_tokens=10, block_size=1, max_len=4)
    assert paged.finished == 3 and paged.max_concurrent_requests == 3 and paged.external_waste == 0


def test_first_fit_arena():
    a = simulate.FirstFitArena(10)
    assert [a.alloc(3), a.alloc(3), a.alloc(3)] == [0, 3, 6]
    assert a.alloc(2) == -1
    a.free(3, 3)
    assert a.free_below(4) == 4 and a.alloc(4) == -1 and a.alloc(2) == 3
    a.free(0, 3)
    a.free(6, 3)
    a.free(3, 2)
    assert (a.starts, a.lengths) == ([0], [10])


def test_paged_preempts_and_still_finishes_everything():
    prompts, outputs = [8] * 6, [40] * 6
    r = simulate.simulate_paged(prompts, outputs, budget_tokens=64, block_size=4, max_len=48)
    assert r.finished == 6 and r.preemptions > 0 and not r.hit_step_cap and r.utilization <= 1


def test_step_cap():
    r = simulate.simulate_paged([4] * 3, [50] * 3, budget_tokens=64, block_size=4, max_len=64, max_steps=5)
    assert r.steps == 5 and r.hit_step_cap and r.finished == 0


def test_budget_from_model_13b():
    assert simulate.budget_from_model(0.8192, 40, 40, 128, 2) == 1000   # 819,200 bytes per token


# ---- distributions ------------------------------------------------------------------------------
@pytest.mark.parametrize("name, prompt_mean, output_mean", [("sharegpt", 161, 338), ("alpaca", 19, 58),
                                                             ("uniform", 161, 338)])
def test_distribution_means_and_bounds(name, prompt_mean, output_mean):
    p, o = distributions.sample_lengths(name, 40_000, 2048, np.random.default_rng(3))
    assert p.min() >= 1 and o.min() >= 1 and (p + o).max() <= 2048
    assert p.mean() == pytest.approx(prompt_mean, rel=0.05)
    assert o.mean() == pytest.approx(output_mean, rel=0.05)


def test_unknown_distribution():
    with pytest.raises(ValueError, match="unknown distribution 'x'; choose one of sharegpt"):
        distributions.sample_lengths("x", 3, 100, np.random.default_rng(0))


# ---- the study ----------------------------------------------------------------------------------
def test_study_result_shape_and_claims(study):
    c, paged = study["contiguous"], study["paged"]
    assert [r["block_size"] for r in paged] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    for r in [c, *study["contiguous_variants"], *paged]:
        for key in ("utilization", "internal_waste", "external_waste", "budget_utilization"):
            assert 0 <= r[key] <= 1, (key, r)
        assert r["max_concurrent_requests"] >= 1 and r["finished"] == 80
    assert all(r["utilization"] > c["utilization"] for r in paged)
    assert all(r["max_concurrent_requests"] > c["max_concurrent_requests"] for r in paged)
    waste = {r["block_size"]: r["internal_waste"] for r in paged}
    assert waste[1] == 0
    assert 0 < waste[2] < waste[16] < waste[256]
    assert all(b >= a - 0.01 for a, b in zip(list(waste.values()), list(waste.values())[1:]))


def test_sharing_saves_memory(study):
    share = study["sharing"]
    assert [r["width"] for r in share["parallel"]] == [2, 4, 8] == [r["width"] for r in share["beam"]]
    assert all(r["saved"] > 0 for r in share["parallel"] + share["beam"])
    assert all(b["saved"] > p["saved"] for p, b in zip(share["parallel"], share["beam"]))


def test_run_folder(study):
    run_dir = Path(study["run_dir"])
    with open(run_dir / "memory.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["allocator"] for r in rows] == ["contiguous"] * 3 + ["paged"] * 9
    assert rows[0]["reserve"] == "max" and rows[3]["block_size"] == "1"
    with open(run_dir / "sharing.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 6
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["seed"] == 0 and meta["args"]["num_requests"] == 80 and meta["budget_tokens"] == 6000
    assert (run_dir / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_json_is_pure_and_summary_readable(tmp_path, capsys):
    argv = SMALL + ["--results-dir", str(tmp_path), "--block-sizes", "1,16", "--quick", "--num-requests", "30"]
    rc, out, err = run_cli(argv + ["--json"], capsys)
    data = json.loads(out)
    assert rc == 0 and "run folder" in err and data["run_dir"] in err
    assert [r["block_size"] for r in data["paged"]] == [1, 16] and data["meta"]["seed"] == 0
    assert {"contiguous", "paged", "sharing"} <= data.keys()
    rc, out, _ = run_cli(argv + ["--seed", "5"], capsys)
    assert rc == 0 and "seed 5" in out and "contiguous" in out and "beam search" in out
    assert len(list(tmp_path.iterdir())) == 2


def test_trace_input(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("prompt_len,output_len\n" + "".join(f"{10 + i},{20 + 3 * i}\n" for i in range(25)))
    rc, out, _ = run_cli(SMALL + ["--trace", str(trace), "--json", "--results-dir", str(tmp_path / "r")], capsys)
    data = json.loads(out)
    assert rc == 0 and data["meta"]["lengths"]["num_requests"] == 25
    assert data["meta"]["workload"] == "trace trace.csv"
    assert all(r["finished"] == 25 for r in data["paged"])


@pytest.mark.parametrize("content, message", [
    ("a,b\n1,2\n", "needs a header with columns prompt_len,output_len"),
    ("prompt_len,output_len\n1,x\n", "line 2: prompt_len and output_len must be integers"),
    ("prompt_len,output_len\n1000,100\n", "line 2: need prompt_len >= 1"),
    ("prompt_len,output_len\n", "has no requests"),
])
def test_bad_trace(tmp_path, capsys, content, message):
    trace = tmp_path / "t.csv"
    trace.write_text(content)
    rc, _, err = run_cli(SMALL + ["--trace", str(trace), "--results-dir", str(tmp_path)], capsys)
    assert rc == 2 and message in err
    assert not any(p.is_dir() for p in tmp_path.iterdir())     # no run folder for a bad run


@pytest.mark.parametrize("argv, message", [
    (["--budget-tokens", "100"], "must hold at least one request of --max-len 1024"),
    (["--num-requests", "0"], "--num-requests must be >= 1"),
    (["--model-gb", "-1", "--budget-tokens", "6000"], None),
    (["--trace", "/nonexistent/x.csv"], "is not a readable file"),
    (["--block-sizes", "8192"], "block size 8192"),
])
def test_bad_arguments(tmp_path, capsys, argv, message):
    if message is None:            # mutually exclusive options: argparse exits
        with pytest.raises(SystemExit):
            parse(argv)
        return
    rc, _, err = run_cli(SMALL + ["--results-dir", str(tmp_path)] + argv, capsys)
    assert rc == 2 and "error:" in err and message in err


@pytest.mark.parametrize("argv", [["--block-sizes", "a,b"], ["--block-sizes", "0"], ["--distribution", "x"],
                                  ["--distribution", "alpaca", "--trace", "t.csv"]])
def test_argparse_rejects(argv, capsys):
    with pytest.raises(SystemExit):
        parse(argv)
    assert "error" in capsys.readouterr().err


def test_bad_model_shape(tmp_path, capsys):
    rc, _, err = run_cli(["--model-gb", "0", "--results-dir", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2 and "--model-gb must be > 0" in err
    rc, _, err = run_cli(["--head-dim", "0", "--results-dir", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2 and "--head-dim must be >= 1" in err


def test_sharing_by_hand():
    # prompt 20 (1 full block + 4 tokens), two samples of 1 token, block size 16.
    r = sharing.parallel_sampling([20], [[1, 1]], 16)
    assert (r.blocks_with_sharing, r.blocks_without_sharing, r.copies) == (3, 4, 1)
    assert r.saved == pytest.approx(0.25)
    beam = sharing.beam_search([20], [30], 4, 16, np.random.default_rng(0))
    assert 0 < beam.saved < 1 and beam.blocks_without_sharing == sum(4 * -(-(20 + s) // 16) for s in range(1, 31))


def test_fp8_cache_budgets_twice_the_tokens_of_float16():
    fp16 = cli.config_from_args(parse(["--model-gb", "12"]))
    fp8 = cli.config_from_args(parse(["--model-gb", "12", "--kv-dtype", "e4m3"]))
    bf16 = cli.config_from_args(parse(["--model-gb", "12", "--kv-dtype", "bf16"]))
    assert fp8.budget_tokens == 2 * fp16.budget_tokens and bf16.budget_tokens == fp16.budget_tokens
    assert "e4m3 cache" in fp8.budget_note and "409,600 bytes/token" in fp8.budget_note
    with pytest.raises(SystemExit):
        parse(["--kv-dtype", "e4m3", "--dtype-bytes", "1"])
