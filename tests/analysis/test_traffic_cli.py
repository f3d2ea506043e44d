"""python -m sandbox traffic: refusals (exit 2, one line, nothing written), the report, --csv / --json, exit 1."""
from __future__ import annotations

import csv
import json

import pytest

from sandbox import cli
from sandbox.analysis.traffic import metrics as M
from sandbox.analysis.traffic import variant as V

SHAPE = "2x64x4/2x64xfp16"  # the instantiations tests/analysis/test_traffic_variants.py builds too


@pytest.mark.parametrize("argv, message", [
    (["numpy.gather"], "numpy.gather has no GPU kernel"),
    (["cupy.nope"], "unknown variant 'cupy.nope'"),
    (["cupy.gqa", "--shape", "64x4096"], "is not SEQSxTOKENS"),
    (["cupy.gqa", "--device", "v100"], "--device v100: device must be one of h200, h100, gh200, h100-pcie, a100"),
    (["cupy.gqa", "--sample-seqs", "0"], "--sample-seqs: must be an integer in [1, 1e+06], got '0'"),
    (["cupy.gqa", "--json", "/nonexistent-folder/out.json"], "--json /nonexistent-folder/out.json: the folder"),
])
def test_refused_requests_exit_2_with_one_line_and_write_nothing(capsys, tmp_path, argv, message):
    try:
        status = cli.main(["traffic", *argv, "--csv", str(tmp_path / "t.csv")])
    except SystemExit as refused:  # the parser's refusals (numbers out of range)
        status = refused.code
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "t.csv").exists()


def test_report_csv_and_json(capsys, tmp_path):
    out_csv, out_json = tmp_path / "t.csv", tmp_path / "t.json"
    assert cli.main(["traffic", "cupy.gqa", "cupy.v1", "--shape", SHAPE, "--block-sizes", "16",
                     "--csv", str(out_csv), "--json", str(out_json), "--sites", "3"]) == 0
    text = capsys.readouterr().out
    assert "== cupy.gqa" in text and "== cupy.v1" in text and "MODEL (H200 SXM), not a measurement" in text
    assert "kernels/cupy_raw/codecs.cuh:" in text and "key_cache" in text and "bound by" in text
    assert "  assumes: device H200 SXM" in text and "read from its SASS" in text  # the model prints its assumptions
    assert "B spill stores/loads" in text and "per wait (SASS)" in text  # spills and loads in flight per kernel
    assert "% of achievable (the measured read stream)" in text and "% achievable" in text
    kernels = json.loads(out_json.read_text())[0]["model"]["kernels"]
    assert all(k["loads_in_flight_source"] == "sass" and k["loads_in_flight"] >= 1 for k in kernels)

    rows = list(csv.DictReader(out_csv.open()))
    assert [r["variant"] for r in rows] == ["cupy.gqa", "cupy.gqa", "cupy.v1"]  # gqa: partition + reduce
    assert set(M.METRICS) <= set(rows[0]) and int(rows[0][M.GLOBAL_LOAD_REQUESTS]) > 0
    results = json.loads(out_json.read_text())
    assert [r["variant"] for r in results] == ["cupy.gqa", "cupy.v1"] and results[0]["block_size"] == 16
    assert results[0]["metrics"] == {n: sum(int(r[n]) for r in rows[:2]) for n in M.METRICS}


def test_a_failing_point_is_reported_and_exits_1(capsys, monkeypatch):
    real = V.traffic

    def traffic(name, *args, **kwargs):
        if name == "cupy.v1":
            raise RuntimeError("it broke")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(V, "traffic", traffic)
    assert cli.main(["traffic", "cupy.v1", "cupy.gqa", "--shape", SHAPE, "--sites", "0"]) == 1
    text = capsys.readouterr().out
    assert "== cupy.v1 block size 16: FAILED: RuntimeError: it broke" in text and "== cupy.gqa" in text


def test_nothing_counted_exits_1(capsys):
    """Every point outside the variants' limits (block size 3: none declares it) counts nothing: a failure."""
    assert cli.main(["traffic", "cupy.v1", "cupy.gqa", "--shape", SHAPE, "--block-sizes", "3"]) == 1
    text = capsys.readouterr().out
    assert "== cupy.v1 block size 3: skipped" in text and "nothing counted" in text


def test_sensitivity_and_the_roofline(capsys, tmp_path):
    png = tmp_path / "roof.png"
    assert cli.main(["traffic", "cupy.gqa", "cupy.v1", "--shape", SHAPE, "--sites", "0", "--sensitivity",
                     "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert text.count("SENSITIVITY (us): model") == 2 and "latency +25%" in text and "copy stream" in text
    assert "SENSITIVITY of the verdict" in text and "block size 16:" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
