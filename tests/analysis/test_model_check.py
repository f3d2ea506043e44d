"""model-check: the published table, micro.read counted and modelled, the command's outputs and refusals, and the
device table's fitted figures held equal to the fit that produced them."""
from __future__ import annotations

import csv
import importlib.util
import json
import math
from pathlib import Path

import pytest

import sandbox
from sandbox.analysis import gpus, model_check as MC
from sandbox.cli import main as cli
from sandbox.errors import RefusedRequest
from sandbox.problem.micro import MicroReadProblem

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


def _fit_module():
    spec = importlib.util.spec_from_file_location("fit_queueing", ROOT / "scripts" / "fit_queueing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_default_table_has_sourced_micro_and_marked_decode_rows():
    rows = MC.read_table()
    assert len(rows) >= 8 and all(len(r.source) > 30 for r in rows)
    micro = [r for r in rows if r.micro]
    decode = [r for r in rows if not r.micro]
    assert len(micro) >= 8 and {r.device for r in micro} >= {"gh200", "h100-pcie"}
    own = [r for r in decode if r.variant == "flashinfer.decode"]   # the peer's published figures, its own kernel
    assert len(own) >= 3 and all("FlashInfer's own kernel" in r.source and "measured_us = " in r.source
                                 for r in own)
    assert all("nearest variant" in r.source for r in decode if r not in own)  # another implementation: marked
    assert all(set(r.config) == {"threads", "blocks_per_sm", "vector_bytes", "loads"} for r in micro)


def test_the_fitted_figures_are_the_fit():
    """gpus.py's queueing term and block overhead are what scripts/fit_queueing.py computes from the table."""
    queue, block = _fit_module().fit()
    for name in ("h200", "h100", "gh200", "h100-pcie", "a100"):
        assert (gpus.get(name).queue_latency_s, gpus.get(name).block_overhead_s) == (queue, block)


@pytest.mark.parametrize("cells, message", [
    ({"device": "v100"}, "line 2: device must be one of"),
    ({"config": "threads"}, "line 2: config 'threads': expected NAME=VALUE"),
    ({"measured_us": "-3"}, "measured_us must be a finite number > 0"),
    ({"measured_us": "nan"}, "measured_us must be a finite number > 0"),
    ({"block_size": "16"}, "block_size must be empty for a micro.* row"),
    ({"source": " "}, "source must name where"),
])
def test_bad_rows_are_refused_with_their_place(tmp_path, cells, message):
    row = dict(source="a benchmark somewhere, run 1", device="gh200", variant="micro.read", shape=str(GIB),
               block_size="", config="threads=256;blocks_per_sm=2", measured_us="1000")
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=MC.COLUMNS)
        w.writeheader()
        w.writerow(dict(row, **cells))
    with pytest.raises(RefusedRequest, match=message):
        MC.read_table(path)


def test_a_wrong_header_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("source,device,variant\nx,h200,micro.read\n")
    with pytest.raises(RefusedRequest, match="the header must be source,device,variant,shape"):
        MC.read_table(path)


def test_micro_read_is_counted_once_per_block_and_scaled():
    r = sandbox.traffic("micro.read", MicroReadProblem(GIB), device="gh200",
                        config=dict(threads=256, blocks_per_sm=4, vector_bytes=16, loads=4))
    (k,) = r["kernels"]
    assert r["scale"] == GIB / (256 * 4 * 16) and k["grid"] == (GIB // (256 * 4 * 16), 1, 1)
    assert r["metrics"]["dram__bytes_read.sum"] == GIB  # every byte once
    assert k["blocks_per_sm"] == 4 and k["dynamic_shared_bytes"] >= 1024  # the spoiler forces 4 resident blocks
    km = r["model"]["kernels"][0]
    assert (km["loads_in_flight"], km["loads_in_flight_source"]) == (4, "sass")
    assert r["model"]["fraction_of_achievable"] <= 1


def test_micro_read_refuses_an_occupancy_that_does_not_fit():
    with pytest.raises(RefusedRequest, match="blocks_per_sm=4 with threads=1024 does not fit"):
        sandbox.traffic("micro.read", MicroReadProblem(GIB), device="h200", config=dict(threads=1024, blocks_per_sm=4))
    with pytest.raises(RefusedRequest, match="total_bytes must be an integer in 1.."):
        sandbox.traffic("micro.read", MicroReadProblem(0), device="h200")


def test_model_check_writes_points_json_and_a_run_folder(tmp_path, monkeypatch, capsys):
    rows = [r.as_dict() for r in MC.read_table() if r.micro and r.device == "gh200"][1:3]
    table = tmp_path / "t.csv"
    with table.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=MC.COLUMNS)
        w.writeheader()
        w.writerows(rows)
    monkeypatch.setattr("sandbox.commands.model_check.new_run_dir",
                        lambda kind: (tmp_path / kind).mkdir() or tmp_path / kind)
    out = tmp_path / "mc.json"
    assert cli(["model-check", "--table", str(table), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data) == {"points", "median_abs_error"}
    assert [set(p) for p in data["points"]] == [set(MC.POINT_KEYS)] * 2
    for p in data["points"]:
        assert p["error"] == pytest.approx(p["model_us"] / p["measured_us"] - 1, abs=1e-3)
        assert abs(p["error"]) < 0.15
    assert data["median_abs_error"] == pytest.approx(sum(abs(p["error"]) for p in data["points"]) / 2)
    written = list(csv.DictReader((tmp_path / "model-check" / "points.csv").open()))
    assert len(written) == 2 and written[0]["model_us"]
    text = capsys.readouterr().out
    assert "median |error|: micro rows" in text


def test_model_check_refusals_exit_2_before_writing(tmp_path, capsys):
    assert cli(["model-check", "--table", str(tmp_path / "missing.csv")]) == 2
    assert cli(["model-check", "--json", str(tmp_path / "no" / "x.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_median_abs_error():
    assert MC.median_abs_error([dict(error=-0.1), dict(error=0.3), dict(error=None), dict(error=0.2)]) == 0.2
    assert MC.median_abs_error([]) is None
    assert math.isclose(MC.error(110, 100), 0.1)


def test_the_default_micro_rows_are_within_15_percent():
    """The goal: median |error| <= 15% over the default table's micro rows (about a second a row)."""
    from sandbox.commands.model_check import model_us
    rows = [r for r in MC.read_table() if r.micro]
    errors = [abs(MC.error(model_us(r), r.measured_us)) for r in rows]
    assert sorted(errors)[len(errors) // 2] <= 0.15, errors
