"""scripts/gpu-check's ncu step without a GPU: its refusals, its command line, and its reading of `ncu --csv`
logs written by hand in Nsight Compute's two layouts (details page: a row per metric; raw page: a row per
kernel with a units row)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sandbox.analysis.traffic import metrics as M
from sandbox.analysis.traffic import ncu

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check"

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def details_row(kid, kernel, metric, unit, value):
    return (f'"{kid}","4242","python3.11","127.0.0.1","{kernel}","1","7","(128, 1, 1)","(8, 16, 4)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


GQA = "void paged_attention_gqa<16, 128, 4, __half, true>(float *, float *, float *, const __half *, ...)"
REDUCE = "void pa::paged_attention_reduce<128, __half>(__half *, const float *, ...)"
DETAILS = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.11)",
    "launched cupy.rows block size 16",
    HEADER,
    details_row(0, "cupy_fill_kernel", "dram__bytes_write.sum", "byte", "1,024"),
    details_row(1, GQA, "dram__bytes_read.sum", "byte", "268,468,224"),
    details_row(1, GQA, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "8,392,704"),
    details_row(1, GQA, "gpu__time_duration.sum", "usecond", "61.60"),
    details_row(2, REDUCE, "dram__bytes_read.sum", "Kbyte", "1,100.50"),
    details_row(2, REDUCE, "gpu__time_duration.sum", "nsecond", "4,960"),
    "==PROF== Disconnected from process 4242",
])


def test_details_page_is_read_in_base_units_and_kernels_in_order():
    kernels = ncu.parse_csv(DETAILS)
    assert [k["id"] for k in kernels] == [0, 1, 2]
    gqa, reduce = kernels[1], kernels[2]
    assert gqa["metrics"]["dram__bytes_read.sum"] == 268468224
    assert gqa["metrics"]["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 8392704
    assert gqa["metrics"]["gpu__time_duration.sum"] == pytest.approx(61600)   # ns
    assert reduce["metrics"]["dram__bytes_read.sum"] == pytest.approx(1100500)
    assert reduce["metrics"]["gpu__time_duration.sum"] == 4960


def test_raw_page_with_its_units_row():
    text = "\n".join([
        '"ID","Kernel Name","dram__bytes_read.sum","gpu__time_duration.sum","launch__grid_size"',
        '"","","Mbyte","msecond",""',
        f'"0","{GQA}","268.47","0.0616","512"',
    ])
    (k,) = ncu.parse_csv(text)
    assert k["metrics"] == {"dram__bytes_read.sum": pytest.approx(268.47e6), "gpu__time_duration.sum": pytest.approx(61600)}
    assert ncu.parse_csv("==PROF== nothing profiled\n") == []


def test_profiled_kernels_are_matched_to_ours_by_name_in_launch_order():
    kernels = ncu.parse_csv(DETAILS)
    expected = ["paged_attention_gqa<16, 128, 4, __half, true>", "pa::paged_attention_reduce<128, __half>",
                "paged_attention_v1<16, 128, __half>"]
    found = ncu.match(kernels, expected)
    assert [k and k["id"] for k in found] == [1, 2, None]   # the fill kernel is not ours; v1 was not profiled
    assert ncu.kernel_key(REDUCE) == "pa::paged_attention_reduce<128,__half>"


def test_compare_lines_put_ours_beside_ncus_and_the_model_beside_the_measured_time():
    (gqa,) = [k for k in ncu.parse_csv(DETAILS) if k["id"] == 1]
    ours = dict(name="paged_attention_gqa<16, 128, 4, __half, true>", metrics=dict.fromkeys(M.METRICS, 0))
    ours["metrics"]["dram__bytes_read.sum"] = 268468224 * 2
    lines = ncu.compare_lines("cupy.rows block size 16", ours, gqa, model_us=57.0)
    (dram,) = [ln for ln in lines if "dram__bytes_read.sum" in ln]
    assert "536,936,448" in dram and "268,468,224" in dram and dram.split()[-1] == "2.000"
    assert lines[-1].strip() == "time: model 57.0 us, measured 61.6 us (model / measured 0.93)"
    assert ncu.compare_lines("x", ours, None, 1.0)[-1].strip() == "not in the ncu profile"


def test_the_command_asks_for_every_shared_metric_at_free_clocks():
    cmd = ncu.ncu_command("ncu", "python3", Path("/out/ncu.csv"))
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert set(metrics) == {m for m in M.METRICS if not m.startswith("sandbox__") and "tensor" not in m} | {ncu.TIME}
    for flag in ("--csv", "--print-units", "--clock-control", "--log-file"):
        assert flag in cmd
    assert cmd[cmd.index("--clock-control") + 1] == "none" and cmd[-2:] == ["sandbox.analysis.traffic.ncu", "--launch"]


def test_refusals_without_ncu_or_without_a_gpu(capsys, tmp_path, monkeypatch):
    assert ncu.main([str(tmp_path), "--ncu", ""]) == 3
    assert "ncu (Nsight Compute) not found" in capsys.readouterr().out
    monkeypatch.setattr("sandbox.devices.backends.gpu_present", lambda: False)
    assert ncu.main([str(tmp_path), "--ncu", "/usr/bin/true"]) == 3
    assert "no GPU" in capsys.readouterr().out and not (tmp_path / "ncu.csv").exists()


def test_gpu_check_runs_the_ncu_step_where_ncu_is_installed():
    text = SCRIPT.read_text()
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    assert '"$PY" -m sandbox.analysis.traffic.ncu "$OUTDIR"' in text and "== [3/3] ncu traffic check" in text
    assert "ncu (Nsight Compute) not installed" in text and "ncu_rc != 0" in text
