"""The sweep's traffic columns and the model: recorded per point, ranked in the summary, beside the measured time
on a GPU (a fake measured CSV), modelled goal statuses, the model's plot."""
from __future__ import annotations

import csv
import importlib.util
import json

import pytest

from sandbox.results import CsvAppender
from sandbox.sweep import shapes
from sandbox.sweep.measure import run, traffic_columns
from sandbox.sweep.report import diff, goals, plots, summary
from test_sweep import gpu_row, sweep

HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
GOAL = shapes.GOAL_SHAPE


def test_a_cpu_sweep_records_the_traffic_columns_at_every_point_of_both_families(tmp_path):
    outcome, rows = sweep(tmp_path, "--shapes", "2x24x4/2x32xfp16,1x8x2/1x32xfp16", "--block-sizes", "16",
                          "--no-plots", "--no-resources", "--variants", "cupy.gqa,numba.gqa,numpy.gather")
    assert outcome.exit_code == 0
    second = {r["variant"]: r for r in rows if r["shape"] == "1x8x2/1x32xfp16"}
    assert float(second["cupy.gqa"]["model_time_us"]) > 0 and float(second["numba.gqa"]["model_time_us"]) > 0
    by = {r["variant"]: r for r in rows if r["shape"] == "2x24x4/2x32xfp16"}
    gqa = by["cupy.gqa"]
    # 2 seqs x 24 tokens x 2 KV heads x 32 dims x 2 bytes, K and V: every byte read once (it all fits in L2)
    kv = 2 * 2 * 24 * 2 * 32 * 2
    assert int(gqa["ideal_bytes"]) > kv and int(gqa["dram_bytes"]) >= kv
    assert float(gqa["bytes_over_ideal"]) == pytest.approx(int(gqa["dram_bytes"]) / int(gqa["ideal_bytes"]))
    assert float(gqa["model_time_us"]) > 0 and gqa["model_bound"] in ("dram", "l2", "l1_shared", "latency", "fp32")
    assert 0 < float(gqa["model_fraction_of_bw"]) <= 1 and float(gqa["kv_sectors_per_request"]) > 0
    assert float(gqa["traffic_s"]) > 0
    # numba.gqa serves the group from one block per KV head as cupy.gqa does: the same K/V bytes reach DRAM
    assert int(by["numba.gqa"]["dram_bytes"]) >= kv and float(by["numba.gqa"]["model_time_us"]) > 0
    assert by["numpy.gather"]["model_time_us"] == "" and "no kernel" in by["numpy.gather"]["traffic_note"]
    text = outcome.summary
    assert text.index("MODEL (H200), not a measurement") < text.index(summary.EMULATION_HEADING)
    checks = json.loads((outcome.run_dir / "goals.json").read_text())["checks"]
    assert [c["status"] for c in checks] == ["not measured (no GPU)"] * 3
    assert checks[0]["modelled_status"].startswith("not modelled") and GOAL in checks[0]["modelled_status"]


def test_the_mla_points_are_counted_in_both_families(tmp_path):
    outcome, rows = sweep(tmp_path, "--shapes", "mla:1x16x1xbf16", "--block-sizes", "16", "--no-plots",
                          "--no-resources", "--variants", "cupy.mla,numba.mla")
    assert outcome.exit_code == 0
    by = {r["variant"]: r for r in rows}
    for name in ("cupy.mla", "numba.mla"):
        row = by[name]
        assert float(row["model_time_us"]) > 0 and float(row["kv_sectors_per_request"]) > 0, name  # latent rows
        assert int(row["ideal_bytes"]) == int(by["cupy.mla"]["ideal_bytes"])
    # both read every latent row once: the same bytes reach DRAM (within the query's sectors)
    assert abs(int(by["numba.mla"]["dram_bytes"]) - int(by["cupy.mla"]["dram_bytes"])) <= 1024


def test_sweep_tune_ranks_an_mla_variants_grid_by_the_model(tmp_path):
    outcome, rows = sweep(tmp_path, "--shapes", "mla:1x40x1xbf16", "--block-sizes", "16", "--no-plots",
                          "--no-resources", "--variants", "cupy.mla", "--tune")
    assert outcome.exit_code == 0
    (point,) = json.loads((outcome.run_dir / "tuned.json").read_text())["points"]
    assert [r["config"]["partition_size"] for r in point["ranked"]] == [512, 256, 1024]
    assert all(r["score"] > 0 for r in point["ranked"])
    assert point["config"] == min(point["ranked"], key=lambda r: r["score"])["config"]
    assert rows[0]["config"] == f"partition_size={point['config']['partition_size']}"
    # the defect once met: a tuned point kept its model columns (the configuration travels as text)
    assert float(rows[0]["model_time_us"]) > 0 and "raised" not in rows[0]["traffic_note"]
    assert f"partition_size={point['config']['partition_size']} wins at" in rows[0]["note"]  # the winner is said


def test_a_configuration_given_as_its_label_keeps_the_model_columns():
    """sweep --config / --tune hand the point's configuration over as its text label."""
    problem = shapes.paged_problem(shapes.make_tokens(shapes.parse_shape("2x24x4/2x32xfp16"), 0), 16)
    row = {}
    traffic_columns.record(row, "cupy.gqa", problem, "h200", "threads=64")
    assert float(row["model_time_us"]) > 0 and row["model_loads_source"] == "sass", row.get("traffic_note")
    default = {}
    traffic_columns.record(default, "cupy.gqa", problem, "h200", None)
    assert default["model_time_us"] != row["model_time_us"]  # its own census: another occupancy


def test_traffic_modes_and_refusals():
    small = shapes.parse_shape("2x24x4/2x32xfp16")
    assert traffic_columns.wanted("auto", first_shape=False, block_size=8)  # the CPU counts every point
    assert traffic_columns.wanted("auto", True, on_gpu=True, block_size=16)
    assert not traffic_columns.wanted("auto", True, on_gpu=True, block_size=8)  # a GPU: the goal's point only
    assert not traffic_columns.wanted("auto", False, on_gpu=True, block_size=16)
    assert traffic_columns.wanted("all", False, on_gpu=True, block_size=8)
    assert not traffic_columns.wanted("none", first_shape=True)
    assert "block size 16" in traffic_columns.skipped_note("auto", "cupy.gqa")
    assert "no kernel" in traffic_columns.skipped_note("auto", "numpy.gather")
    with pytest.raises(ValueError, match="--traffic must be one of auto, all, none"):
        run.validate(run.SweepConfig(["cupy.gqa"], (16,), [small], traffic="some"))
    with pytest.raises(ValueError, match="--model-device v100: device must be one of h200, h100, gh200, h100-pcie, a100"):
        run.validate(run.SweepConfig(["cupy.gqa"], (16,), [small], model_device="v100"))


def modelled_row(variant, block_size, model_us, shape=GOAL, time_us=None, fraction=0.5, backend="cpu-executor"):
    """A correct point with traffic columns; time_us given: a GPU point (measured)."""
    row = gpu_row(variant, block_size, time_us or 1000.0, shape=shape)
    if time_us is None:
        row.update(backend=backend, timing="cpu-emulation")
    row.update(model_time_us=model_us, model_fraction_of_bw=fraction, model_bound="dram", bytes_over_ideal=1.01,
               kv_sectors_per_request=16.0, load_sectors_per_request=9.9, bank_conflicts=0, dram_bytes=10**9,
               ideal_bytes=99 * 10**7, model_flops=4 * 10**9)
    return row


def test_the_cpu_summary_ranks_by_the_model_and_keeps_emulation_times_after_it():
    rows = [modelled_row("cupy.v1", 16, 900.0), modelled_row("cupy.rows", 16, 240.0, fraction=0.9),
            modelled_row("cupy.v1", 128, 800.0), modelled_row("cupy.rows", 128, 850.0)]
    report = goals.evaluate(rows, False, "cupy.dense")
    text = summary.render(rows, None, False, None, report, "cupy.dense")
    model_at = text.index("MODEL (H200), not a measurement: modelled time per call")
    assert model_at < text.index(summary.EMULATION_HEADING) < text.index("Time per call (us, median")
    table = text[model_at:text.index("Best by the model")].splitlines()
    ranked = [line.split()[0] for line in table if line.startswith("  cupy.")]
    assert ranked == ["cupy.rows", "cupy.v1"]  # by the best modelled time: 240 us against 800 us
    assert "240.0*" in text and "800.0*" in text and "900.0*" not in text
    assert "[not measured (no GPU)]" in text and "MODEL, not a measurement: [PASS] 0.9" in text


def test_modelled_goals_beside_the_measured_ones():
    rows = [modelled_row("cupy.rows", 16, 240.0, fraction=0.9), modelled_row("cupy.dense", 16, 235.0),
            modelled_row("cupy.rows", 8, 260.0), modelled_row("cupy.rows", 128, 230.0),
            modelled_row("cupy.v1", 16, 200.0, fraction=0.6)]  # fastest by the model at bs16
    by = {c["id"]: c for c in goals.evaluate(rows, False, "cupy.dense")["checks"]}
    assert by["copy_bw_fraction"]["status"] == "not measured (no GPU)"
    assert by["copy_bw_fraction"]["modelled_status"] == "FAIL" and by["copy_bw_fraction"]["modelled"] == 0.6
    assert "cupy.v1" in by["copy_bw_fraction"]["modelled_detail"]
    assert by["paging_overhead"]["modelled"] == pytest.approx(200 / 235, abs=1e-4)
    assert by["paging_overhead"]["modelled_status"] == "PASS"
    assert by["block_size_8_vs_128"]["modelled"] == pytest.approx(260 / 230, abs=1e-4)
    assert by["block_size_8_vs_128"]["modelled_status"] == "FAIL"
    empty = goals.evaluate([], False, "cupy.dense")["checks"]
    assert all(c["modelled_status"].startswith("not modelled") and c["modelled"] is None for c in empty)


def test_a_gpu_summary_prints_measured_beside_modelled_with_the_error_from_a_measured_csv(tmp_path):
    rows = [modelled_row("cupy.rows", 16, 250.0, time_us=200.0), modelled_row("cupy.v1", 16, 450.0, time_us=500.0),
            gpu_row("cupy.v2", 16, 300.0)]  # measured, no traffic counted: not in the comparison
    with CsvAppender(tmp_path / "sweep.csv", run.COLUMNS) as out:
        for r in rows:
            out.write(r)
    loaded = diff.load_rows(tmp_path)
    assert loaded[0]["model_time_us"] == 250.0 and loaded[0]["dram_bytes"] == 10**9
    text = summary.render(loaded, None, True, {"name": "NVIDIA H200"}, goals.evaluate(loaded, True, "cupy.dense"),
                          "cupy.dense")
    section = text[text.index("Measured vs modelled"):]
    assert "median |error| 17.5%" in section  # +25% and -10%
    lines = {line.split()[0]: line for line in section.splitlines()[2:4]}
    assert "200.0" in lines["cupy.rows"] and "250.0" in lines["cupy.rows"] and "+25.0%" in lines["cupy.rows"]
    assert "-10.0%" in lines["cupy.v1"] and "cupy.v2" not in section.split("MODEL (H200)")[0]
    assert text.index("Time per call") < text.index("Measured vs modelled") < text.index("MODEL (H200)")


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="matplotlib is not installed")
def test_the_model_plot_is_headed_as_a_model_and_ranks_its_legend(tmp_path):
    rows = [modelled_row("cupy.v1", bs, 900.0 / bs ** 0.1) for bs in (1, 16, 128)]
    rows += [modelled_row("cupy.rows", bs, 250.0) for bs in (1, 16, 128)]
    written = plots.write_all(tmp_path, rows, [], None, False, None, print)
    assert "model_time_vs_block_size.png" in written and "roofline_h200.png" in written
    roof = plots.roofline_of(rows, "h200")  # one point per variant, its best block size
    assert [t.get_text().split(":")[0] for t in roof.legends[0].get_texts()][-2:] == ["cupy.v1 bs128", "cupy.rows bs1"]
    assert roof.axes[0].get_title().startswith("MODEL (H200 SXM), not a measurement")
    fig = plots.model_figure(rows, "h200")
    assert fig._suptitle.get_text().startswith("MODEL (H200), not a measurement")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0].startswith("cupy.rows") and labels[1].startswith("cupy.v1")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title, legend = fig._suptitle.get_window_extent(renderer), fig.legends[0].get_window_extent(renderer)
    for box in (title, legend):
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1  # nothing cut off
    assert not title.overlaps(legend)


# ---------------------------------------------------------------- plot layout: legend inside, no blank band, titles once

def _many_variants_rows():
    names = [f"cupy.v{i}" for i in range(14)]
    return [modelled_row(n, bs, 100.0 + 10 * i, shape=shape) for i, n in enumerate(names) for bs in (1, 16, 256)
            for shape in (GOAL, "2x300x4/2x64xfp16", "1x64x8/2x64xbf16:e4m3", "2x24x2/1x64xfp16 shared=2")]


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="matplotlib is not installed")
def test_the_legend_fits_in_the_figure_and_no_blank_band_sits_under_the_title():
    rows = _many_variants_rows()
    fig = plots._panels(rows, "GB/s", "Achieved bandwidth vs block size\nCPU EMULATION", plots.gbps_value,
                        ceiling=26.1, ceiling_label="host memcpy bandwidth 26.1 GB/s (a long label at the end)")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    (legend,) = fig.legends
    lb = legend.get_window_extent(renderer)
    assert box.x0 <= lb.x0 and lb.x1 <= box.x1 and box.y0 <= lb.y0 and lb.y1 <= box.y1, (lb, box)
    assert len(legend.get_texts()) == 15
    title = fig._suptitle.get_window_extent(renderer)
    top = max(ax.get_tightbbox(renderer).y1 for ax in fig.axes if ax.get_visible())
    assert 0 <= title.y0 - top < 0.25 * fig.dpi  # the panels start under the title: no band of blank space
    panels = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible()]
    assert min(p.y0 for p in panels) >= lb.y1  # and the legend sits below them, not over them


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="matplotlib is not installed")
def test_resource_panel_titles_name_a_column_once_and_equal_lines_stay_apart():
    rows = [dict(variant=v, block_size=bs, registers=96, static_shared_bytes=10240, dynamic_shared_bytes=0,
                 occupancy=0.3125, spill_stores=0, spill_loads=0) for v in ("cupy.multi", "cupy.cascade")
            for bs in (1, 16, 256)]
    fig = plots.resource_figure(rows)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles[0] == "registers" and "registers (registers)" not in titles
    assert "shared (static_shared_bytes + dynamic_shared_bytes)" in titles
    for title in titles:
        words = title.replace("(", " ").replace(")", " ").replace("+", " ").split()
        assert len(words) == len(set(words)), title
    ax = fig.axes[0]
    (a, b) = ax.get_lines()
    assert a.get_ydata().tolist() == b.get_ydata().tolist()      # the same registers
    assert all(xa != xb for xa, xb in zip(a.get_xdata(), b.get_xdata()))  # drawn side by side
    assert a.get_linestyle() != b.get_linestyle() or a.get_marker() != b.get_marker()
    assert "none" in (a.get_markerfacecolor(), b.get_markerfacecolor())   # one hollow: the other shows through


def test_traffic_columns_count_the_configuration_the_point_ran(tmp_path):
    """--config reaches the traffic count as a configuration (it once arrived as its label string)."""
    outcome, rows = sweep(tmp_path, "--shapes", "1x8x2/1x32xfp16", "--block-sizes", "16", "--no-plots",
                          "--no-resources", "--variants", "cupy.gqa", "--config", "threads=64")
    assert outcome.exit_code == 0 and rows[0]["config"] == "threads=64"
    assert float(rows[0]["model_time_us"]) > 0, rows[0]["traffic_note"]
