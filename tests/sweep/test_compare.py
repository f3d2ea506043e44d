"""python -m sandbox compare RUN_A RUN_B on synthetic run folders: ratios, regressions, wrong points, exit codes."""
from __future__ import annotations

import pytest

from sandbox import cli
from sandbox.results import CsvAppender
from sandbox.sweep.report import diff
from sandbox.sweep.measure.run import COLUMNS

SHAPE = "64x4096x32/8x128xfp16"


def point(variant, block_size, time_us, status="ok", backend="gpu", shape=SHAPE, note=""):
    row = dict.fromkeys(COLUMNS, "")
    row.update(variant=variant, family=variant.split(".")[0], backend=backend, shape=shape, block_size=block_size,
               status=status, correct={"ok": True, "wrong": False}.get(status, ""), note=note,
               timing="cuda-events" if backend == "gpu" else "cpu-emulation",
               time_us="" if time_us is None else time_us)
    return row


def make_run(folder, rows):
    folder.mkdir(parents=True)
    with CsvAppender(folder / "sweep.csv", COLUMNS) as out:
        for r in rows:
            out.write(r)
    return folder


BASE = [point("cupy.v1", 16, 100.0), point("cupy.v1", 32, 200.0), point("numba.block", 16, 300.0),
        point("numba.split", 16, 50.0), point("cupy.old", 16, 10.0), point("torch.sdpa", "", 90.0)]


def test_identical_runs_pass(tmp_path, capsys):
    a = make_run(tmp_path / "a", BASE)
    b = make_run(tmp_path / "b", BASE)
    assert cli.main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "6 points timed in both runs" in out and "OK: no regression" in out


def test_regression_beyond_threshold_is_flagged_and_fails(tmp_path, capsys):
    a = make_run(tmp_path / "a", BASE)
    b_rows = [dict(r) for r in BASE]
    b_rows[0]["time_us"] = 115.0   # +15%: a regression at the default 10%
    b_rows[1]["time_us"] = 205.0   # +2.5%: noise
    b_rows[2]["time_us"] = 150.0   # 2x faster
    b = make_run(tmp_path / "b", b_rows)
    report = diff.compare_runs(a, b)
    assert [r[0] for r in report.regressions] == [("cupy.v1", SHAPE, 16, "gpu")]
    assert report.regressions[0][3] == pytest.approx(1.15)
    assert [r[0][0] for r in report.improvements] == ["numba.block"]
    assert report.exit_code == 1
    assert cli.main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "FAIL: 1 regression(s)" in out
    assert cli.main(["compare", str(a), str(b), "--threshold", "0.2"]) == 0  # 15% is within 20%


def test_turned_wrong_fails_still_wrong_is_listed(tmp_path):
    a_rows = [dict(r) for r in BASE] + [point("wrong.x", 16, None, status="wrong")]
    b_rows = [dict(r) for r in BASE] + [point("wrong.x", 16, None, status="wrong", note="1 of 9 elements differ")]
    b_rows[3] = point("numba.split", 16, None, status="wrong", note="12 of 4096 elements differ")
    report = diff.compare_runs(make_run(tmp_path / "a", a_rows), make_run(tmp_path / "b", b_rows))
    assert [k[0] for k, *_ in report.turned_wrong] == ["numba.split"]
    assert [k[0] for k, *_ in report.still_wrong] == ["wrong.x"]
    assert report.exit_code == 1
    text = report.render()
    assert "TURNED WRONG" in text and "12 of 4096" in text


def test_points_in_one_run_only_and_status_changes_are_listed(tmp_path):
    b_rows = [r for r in BASE if r["variant"] != "cupy.old"] + [point("cupy.new", 16, 5.0)]
    b_rows = [dict(r) for r in b_rows]
    b_rows[1] = point("cupy.v1", 32, None, status="unsupported", note="shared memory")
    report = diff.compare_runs(make_run(tmp_path / "a", BASE), make_run(tmp_path / "b", b_rows))
    assert report.only_a == [("cupy.old", SHAPE, 16, "gpu")]
    assert report.only_b == [("cupy.new", SHAPE, 16, "gpu")]
    assert report.status_changes == [(("cupy.v1", SHAPE, 32, "gpu"), "ok", "unsupported")]
    assert report.exit_code == 0
    text = report.render()
    assert "only in A: 1" in text and "only in B: 1" in text and "ok -> unsupported" in text


def test_backend_is_part_of_the_key_and_cpu_runs_are_labelled(tmp_path):
    a = make_run(tmp_path / "a", [point("cupy.v1", 16, 100.0, backend="cpu-executor")])
    b = make_run(tmp_path / "b", [point("cupy.v1", 16, 100.0, backend="gpu")])
    report = diff.compare_runs(a, b)
    assert not report.ratios and len(report.only_a) == len(report.only_b) == 1
    assert report.cpu_emulation and "CPU-emulation" in report.render()


def test_csv_path_accepted_and_bad_paths_fail_clearly(tmp_path, capsys):
    a = make_run(tmp_path / "a", BASE)
    assert cli.main(["compare", str(a / "sweep.csv"), str(a)]) == 0
    assert cli.main(["compare", str(a), str(tmp_path / "missing")]) == 2
    assert "not a sweep run folder" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "sweep.csv").write_text("a,b\n1,2\n")
    assert cli.main(["compare", str(a), str(bad)]) == 2
    with pytest.raises(SystemExit) as refused:  # the parser's refusal: one line, exit 2
        cli.main(["compare", str(a), str(a), "--threshold", "-1"])
    assert refused.value.code == 2


def test_static_code_changes_are_listed_but_do_not_decide_the_exit(tmp_path, capsys):
    a = make_run(tmp_path / "a", BASE)
    b = make_run(tmp_path / "b", BASE)
    header = "variant,kernel,block_size,instructions,vector_loads,global_loads,local\n"
    (a / "sass.csv").write_text(header + "cupy.rows,partition,16,2720,16,128b:16 32b:11,0\n"
                                         "cupy.rows,reduce,16,768,0,32b:71,0\ncupy.v1,main,16,1192,13,128b:13,0\n")
    (b / "sass.csv").write_text(header + "cupy.rows,partition,16,2500,8,128b:8 32b:11,4\n"
                                         "cupy.rows,reduce,16,768,0,32b:71,0\ncupy.v1,main,16,1100,13,128b:13,0\n")
    (a / "resources.csv").write_text("variant,block_size,registers,occupancy\ncupy.rows,16,96,0.3125\n")
    (b / "resources.csv").write_text("variant,block_size,registers,occupancy\ncupy.rows,16,80,0.375\n")
    assert cli.main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "static code changed (resources.csv / sass.csv, sm_90): 3 kernel(s)" in out
    assert "  cupy.rows bs=16: registers 96 -> 80, occupancy 0.3125 -> 0.375" in out
    assert ("  cupy.rows [partition] bs=16: instructions 2720 -> 2500, vector_loads 16 -> 8, "
            "global_loads 128b:16 32b:11 -> 128b:8 32b:11, local 0 -> 4") in out
    assert "  cupy.v1 bs=16: instructions 1192 -> 1100" in out and "reduce" not in out
    assert "OK: no regression" in out
    (b / "sass.csv").unlink()  # one run without the census: nothing to compare there, no error
    assert diff.compare_runs(a, b).static_changes == ["cupy.rows bs=16: registers 96 -> 80, occupancy 0.3125 -> 0.375"]


# ---------------------------------------------------------------- exit codes that mean what they say

def test_a_run_with_only_the_header_fails_instead_of_ok(tmp_path, capsys):
    a = make_run(tmp_path / "a", BASE)
    b = make_run(tmp_path / "b", [])
    assert cli.main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "no points (only the header)" in err and str(b / "sweep.csv") in err and "OK" not in err


def _truncate(csv_path, keep_lines, cut_last_line_at=None):
    lines = csv_path.read_text().splitlines(keepends=True)[:keep_lines]
    if cut_last_line_at is not None:
        lines[-1] = lines[-1][:cut_last_line_at]
    csv_path.write_text("".join(lines))


@pytest.mark.parametrize("keep_lines, where", [(2, "line 2"), (len(BASE) + 1, f"line {len(BASE) + 1}")])
def test_a_truncated_first_or_last_row_fails_naming_the_file_and_line(tmp_path, capsys, keep_lines, where):
    a = make_run(tmp_path / "a", BASE)
    b = make_run(tmp_path / "b", BASE)
    _truncate(b / "sweep.csv", keep_lines, cut_last_line_at=25)  # a writer killed mid-row
    assert cli.main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(b / "sweep.csv") in err and where in err and "truncated" in err


def test_an_unparsable_row_or_an_ok_row_without_time_fails(tmp_path, capsys):
    a = make_run(tmp_path / "a", BASE)
    rows = [dict(r) for r in BASE]
    rows[2]["time_us"] = "12.5.3"
    b = make_run(tmp_path / "b", rows)
    assert cli.main(["compare", str(a), str(b)]) == 2
    assert "line 4: unparsable value" in capsys.readouterr().err
    rows = [dict(r) for r in BASE]
    rows[1]["time_us"] = ""
    c = make_run(tmp_path / "c", rows)
    assert cli.main(["compare", str(a), str(c)]) == 2
    assert "line 3: an ok point (cupy.v1 bs=32) without a time" in capsys.readouterr().err
    rows = [dict(r) for r in BASE]
    rows[0]["status"] = "fine"
    d = make_run(tmp_path / "d", rows)
    assert cli.main(["compare", str(a), str(d)]) == 2
    assert "unknown status 'fine'" in capsys.readouterr().err


def test_runs_that_share_no_point_fail(tmp_path, capsys):
    a = make_run(tmp_path / "a", [point("cupy.v1", 16, 100.0, backend="cpu-executor")])
    b = make_run(tmp_path / "b", [point("cupy.v1", 16, 100.0, backend="gpu")])
    assert cli.main(["compare", str(a), str(b)]) == 1
    assert "FAIL: the runs share no point" in capsys.readouterr().out
    same_status = [point("cupy.v1", 16, None, status="unsupported")]  # shared, nothing timed: not a failure
    assert diff.compare_runs(make_run(tmp_path / "c", same_status), make_run(tmp_path / "d", same_status)).exit_code == 0


def test_an_interrupted_or_unfinished_run_is_warned_about(tmp_path, capsys):
    a = make_run(tmp_path / "a", BASE)
    b = make_run(tmp_path / "b", BASE)
    (a / "meta.json").write_text('{"interrupted": true, "end_utc": "x"}')
    (b / "meta.json").write_text('{"start_utc": "x"}')
    assert cli.main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"warning: run A ({a}) interrupted: its points are partial" in out
    assert f"warning: run B ({b}) did not finish" in out
    (b / "meta.json").write_text('{"interrupted": false, "end_utc": "x"}')
    assert diff.compare_runs(a, b).warnings == [f"run A ({a}) interrupted: its points are partial"]


# ---------------------------------------------------------------- CPU runs: the model decides, emulation times are noise

def cpu_point(variant, block_size, time_us, model_us=None, dram=None, conflicts=0):
    row = point(variant, block_size, time_us, backend="cpu-executor")
    if model_us is not None:
        row.update(model_time_us=model_us, dram_bytes=dram, bank_conflicts=conflicts, model_bound="dram",
                   kv_sectors_per_request=16.0, load_sectors_per_request=9.5)
    return row


CPU_BASE = [cpu_point("cupy.v1", 16, 9000.0, 12.5, 40960), cpu_point("cupy.gqa", 16, 8000.0, 10.0, 36864),
            cpu_point("numba.gqa", 16, 400000.0)]


def test_cpu_emulation_times_are_noise_unless_cpu_times(tmp_path, capsys):
    a = make_run(tmp_path / "a", CPU_BASE)
    rows = [dict(r) for r in CPU_BASE]
    rows[0]["time_us"] = 18000.0   # 2x slower emulation: a busy machine, not the code
    rows[2]["time_us"] = 900000.0
    b = make_run(tmp_path / "b", rows)
    assert cli.main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "noise" in out and "REGRESSION" not in out and "slower (noise: CPU emulation)" in out
    assert "MODEL, not a measurement: 2 points modelled in both runs, 0 changed" in out
    assert cli.main(["compare", str(a), str(b), "--cpu-times"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "FAIL: 2 regression(s), 0 modelled regression(s)" in out


def test_a_modelled_regression_fails_and_the_changed_counts_are_listed(tmp_path, capsys):
    a = make_run(tmp_path / "a", CPU_BASE)
    rows = [dict(r) for r in CPU_BASE]
    rows[1].update(model_time_us=12.0, dram_bytes=49152, bank_conflicts=256)   # +20% modelled: more bytes read
    rows[0].update(model_time_us=12.6)                                         # +0.8%: within the threshold
    b = make_run(tmp_path / "b", rows)
    report = diff.compare_runs(a, b)
    assert [t[0][0] for t in report.model_regressions] == ["cupy.gqa"] and report.regressions == []
    assert report.model_regressions[0][3] == pytest.approx(1.2) and report.exit_code == 1
    assert report.traffic_changes == [(("cupy.gqa", SHAPE, 16, "cpu-executor"),
                                       "dram_bytes 36864 -> 49152, bank_conflicts 0 -> 256")]
    assert cli.main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "MODEL, not a measurement: 2 points modelled in both runs, 2 changed" in out
    assert "traffic counts changed: 1 point(s)" in out and "FAIL: 0 regression(s), 1 modelled regression(s)" in out
    assert cli.main(["compare", str(a), str(b), "--threshold", "0.25"]) == 0
