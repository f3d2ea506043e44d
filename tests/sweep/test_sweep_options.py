"""The sweep's precisions, options, query lengths and shared prompts (issues #11 and #14): shape strings,
the command line's refusals, the paged problems, the recorded columns, unsupported points, the cascade
summary (with fake cupy.cascade / cupy.multi), compare's keys, the goals' shapes, and the static
resources of other precisions. Sweeps run numpy.gather and fakes at tiny shapes only.
"""
from __future__ import annotations

import csv
import sys
import types

import numpy as np
import pytest

from sandbox import cli
from sandbox.problem import dtypes
from sandbox.problem.option_tokens import parse_option_tokens
from sandbox.variant import registry
from sandbox.analysis import resources
from sandbox.checking.check import expected_output
from sandbox.commands import resources as resources_cmd, sweep as sweep_cmd
from sandbox.sweep import shapes
from sandbox.sweep.measure import run
from sandbox.sweep.report import diff, goals, summary
from sandbox.variant import Limits, Unsupported

from test_sweep import _fake_module, gpu_row, sweep

import kernels.numpy_gather as gather

SMALL = "2x24x4/2x32xfp16"


# ---------------------------------------------------------------- shape strings and the command line

def test_option_words_read_back_in_table_order():
    assert parse_option_tokens("sinks,alibi,window=8").text == "window=8,alibi,sinks"
    assert parse_option_tokens("") == shapes.NO_OPTIONS and not shapes.NO_OPTIONS


@pytest.mark.parametrize("text, fields", [
    ("64x4096x32/8x128xbf16", dict(dtype="bfloat16", kv_dtype="bfloat16")),
    ("64x4096x32/8x128xbf16:e4m3", dict(dtype="bfloat16", kv_dtype="float8_e4m3fn")),
    ("64x4096x32/8x128xfp16:e5m2", dict(dtype="float16", kv_dtype="float8_e5m2")),
    ("64x4096x32/8x128xfp32:fp32", dict(dtype="float32", kv_dtype="float32")),
    ("32x1024x32/8x128xfp16 q=4", dict(query_len=4, group_size=0, prefix_len=0)),
    ("64x2048x32/8x128xfp16 shared=8", dict(group_size=8, prefix_len=2048, query_len=1)),
    ("2x64x4/2x64xfp16:e4m3 q=2 shared=2 window=16,softcap=30,alibi,kscale=0.5,vscale=2",
     dict(query_len=2, group_size=2, options="window=16,softcap=30,alibi,kscale=0.5,vscale=2")),
    ("2x64x4/2x64xfp16 window=8,sinks", dict(options="window=8,sinks")),
    ("2x64x4/2x64xfp16 shared=2 sinks=-1.5", dict(group_size=2, options="sinks=-1.5")),
])
def test_shape_strings_name_dtypes_cache_query_tokens_sharing_and_options(text, fields):
    shape = shapes.parse_shape(text)
    columns = shape.columns()
    for key, value in fields.items():
        assert columns[key] == value, (key, columns)
    assert shapes.parse_shape(shape.name) == shape  # the name reads back
    assert shapes.parse_shapes(f"{shape.name},{SMALL}") == [shape, shapes.parse_shape(SMALL)]
    assert shape.name == text.replace(":fp32", "")  # the cache's dtype only when it is not the query's


@pytest.mark.parametrize("bad", ["2x8x2/1x32xe4m3", "2x8x2/1x32xfp16:bf16", "2x8x2/1x32xfp16:int8",
                                 "4x8x2/1x32xfp16 shared=1", "6x8x2/1x32xfp16 shared=4", "2x8x2/1x32xfp16 q=9",
                                 "2x8x2/1x32xfp16 q=x", "2x8x2/1x32xfp16 window=-3", "2x8x2/1x32xfp16 tile=4"])
def test_bad_shape_strings_are_refused(bad):
    with pytest.raises(ValueError, match="shape"):
        shapes.parse_shapes(bad)


def test_expand_adds_query_lengths_shared_prompts_and_options_to_every_shape():
    base = shapes.parse_shapes(f"{SMALL},2x24x4/2x32xbf16:e4m3")
    out = shapes.expand(base, query_lens=(1, 4), shared_prefix=40, group_size=2,
                        options=parse_option_tokens("window=8,alibi"))
    names = [s.name for s in out]
    assert names[:4] == ["2x24x4/2x32xfp16 window=8,alibi", "2x24x4/2x32xfp16 q=4 window=8,alibi",
                         "2x40x4/2x32xfp16 shared=2 window=8,alibi", "2x40x4/2x32xfp16 q=4 shared=2 window=8,alibi"]
    assert len(out) == 8 and all(s.options.text == "window=8,alibi" for s in out)
    assert shapes.expand(base) == base
    one = shapes.expand(shapes.parse_shapes("3x24x4/2x32"), shared_prefix=16)  # default groups of 8, at least one
    assert one[1].num_seqs == 8 and one[1].group_size == 8 and one[1].prefix_len == 16
    with pytest.raises(ValueError, match="--group-size needs --shared-prefix"):
        shapes.expand(base, group_size=4)


def test_default_presets_race_bf16_fp8_multi_query_and_shared_prompts():
    cpu = shapes.default_shapes(on_gpu=False, quick=False)
    assert any(s.dtype == "bfloat16" for s in cpu) and any(dtypes.is_fp8(s.kv_dtype) for s in cpu)
    assert any(s.query_len > 1 for s in cpu) and any(s.group_size for s in cpu)
    gpu = {s.name for s in shapes.default_shapes(on_gpu=True, quick=False)}
    assert {"64x4096x32/8x128xfp16", "64x4096x32/8x128xbf16", "64x4096x32/8x128xfp16:e4m3",
            "64x2048x32/8x128xfp16 shared=8"} <= gpu  # parallel sampling: 8 groups of 8, 2048-token prompt
    assert any(shapes.parse_shape(n).query_len > 1 for n in gpu if not n.startswith("mla:"))
    assert any(n.startswith("mla:") for n in gpu)  # the latent-attention race is in the GPU preset too
    assert shapes.GOAL_SHAPE == shapes.GPU_SHAPES[0]


@pytest.mark.parametrize("args, message", [
    (("--options", "window=abc"), "--options 'window=abc': window must be an integer >= 0"),
    (("--options", "softcap=-1"), "--options 'softcap=-1': softcap must be a positive finite number"),
    (("--options", "kscale=0"), "kscale must be a positive finite number"),
    (("--options", "tile=4"), "unknown option 'tile'"),
    (("--options", "alibi=3"), "alibi takes no value"),
    (("--options", "window=4,window=5"), "window given twice"),
    (("--options", "sinks=abc"), "sinks takes a finite number (every head's sink), or no value, got sinks=abc"),
    (("--query-lens", "1,0"), "--query-lens '1,0': query tokens per sequence must be whole numbers >= 1"),
    (("--shared-prefix", "0"), "--shared-prefix: must be an integer in [1, 1e+07], got '0'"),
    (("--shared-prefix", "64", "--group-size", "1"), "--group-size: must be an integer in [2, 4096], got '1'"),
    (("--group-size", "4",), "--group-size needs --shared-prefix"),
    (("--shapes", "2x8x2/1x32xfp16:bf16"), "cache dtype must be the query's (fp16), an fp8 format"),
])
def test_bad_options_are_one_line_exit_2_before_a_run_folder(tmp_path, capsys, args, message):
    try:
        code = cli.main(["sweep", "--results-dir", str(tmp_path / "r"), "--no-progress", "--backend", "cpu", *args])
    except SystemExit as refused:  # the parser's refusals (numbers out of range)
        code = refused.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- the paged problems

@pytest.mark.parametrize("text", ["3x50x4/2x16xbf16:e4m3 window=20", "3x50x4/2x16xfp16:e5m2 q=3 softcap=5,alibi",
                                  "2x50x4/2x16xfp32 q=4 window=6,kscale=0.5,vscale=2,sinks",
                                  "3x50x4/2x16xbf16:e4m3 sinks=1.5"])
@pytest.mark.parametrize("block_size", [1, 16])
def test_precision_and_option_shapes_page_the_same_tokens_and_free_blocks_before_the_window(text, block_size):
    shape = shapes.parse_shape(text)
    tokens = shapes.make_tokens(shape, seed=5)
    problem = shapes.paged_problem(tokens, block_size)
    assert problem.dtype.name == shape.dtype and problem.kv_dtype.name == shape.kv_dtype
    assert problem.max_query_len == shape.query_len
    assert problem.options.window_left == shape.options.get("window", -1)
    assert (problem.options.alibi_slopes is not None) == bool(shape.options.get("alibi"))
    default = dtypes.default_kv_scale(shape.kv_dtype)
    assert (problem.options.k_scale, problem.options.v_scale) == (shape.options.get("kscale", default),
                                                                  shape.options.get("vscale", default))
    # the truth from the contiguous tokens is the reference's through the block table
    np.testing.assert_allclose(shapes.expected_output(tokens), expected_output(problem), rtol=1e-12, atol=1e-12)
    first = tokens.first_read()
    if shape.options.get("window", -1) >= 0:
        assert first > 0 and (problem.block_tables[:, : first // block_size] == -1).all()
    if first % block_size:  # the window's first block: the slots before the window are NaN, never read
        before = problem.key_cache[problem.block_tables[0, first // block_size], first % block_size - 1]
        assert np.isnan(before.astype(np.float32)).all()
    kv_bytes = 2 * shape.num_seqs * (shape.context_len - first) * 2 * 16 * dtypes.dtype(shape.kv_dtype).itemsize
    assert problem.bytes_moved() - kv_bytes < kv_bytes  # the cache at its own element size, the window's tokens


def test_shared_prompt_problems_share_blocks_with_the_same_lengths_at_every_block_size():
    shape = shapes.parse_shape("4x40x2/1x16xfp16 shared=2")
    lens = None
    for block_size in (1, 16):
        problem = shapes.shared_problem(shape, block_size, seed=3)
        assert problem.num_seqs == 4 and problem.max_query_len == 1
        if lens is not None:
            np.testing.assert_array_equal(problem.context_lens, lens)
        lens = problem.context_lens
        assert ((lens > 40) & (lens <= 40 + shapes.SUFFIX_MAX)).all()
        full = 40 // block_size
        assert (problem.block_tables[0, :full] == problem.block_tables[1, :full]).all()  # forked: one prompt
        assert not (problem.block_tables[0, :full] == problem.block_tables[2, :full]).any()


# ---------------------------------------------------------------- sweeps: columns, unsupported points

def _columns(rows, *names):
    return [tuple(r[n] for n in names) for r in rows]


def test_sweep_records_dtypes_query_lengths_and_unsupported_points(tmp_path, monkeypatch):
    _fake_module(monkeypatch, "numpy.fp16decode")  # Limits(): float32/float16, no fp8, no options, decode only
    outcome, rows = sweep(tmp_path, "--shapes", f"{SMALL},2x24x4/2x32xbf16:e4m3", "--query-lens", "4",
                          "--block-sizes", "4,16", "--variants", "numpy.gather,numpy.fp16decode",
                          "--no-plots", "--no-resources")
    assert set(run.COLUMNS) == set(rows[0]) and {"kv_dtype", "options", "query_len", "prefix_len", "group_size"} \
        <= set(rows[0])
    assert sorted(set(_columns(rows, "shape", "dtype", "kv_dtype", "query_len"))) == sorted([
        (SMALL, "float16", "float16", "1"), ("2x24x4/2x32xfp16 q=4", "float16", "float16", "4"),
        ("2x24x4/2x32xbf16:e4m3", "bfloat16", "float8_e4m3fn", "1"),
        ("2x24x4/2x32xbf16:e4m3 q=4", "bfloat16", "float8_e4m3fn", "4")])
    assert all(r["status"] == "ok" for r in rows if r["variant"] == "numpy.gather")
    fake = {(r["shape"], r["block_size"]): r for r in rows if r["variant"] == "numpy.fp16decode"}
    assert fake[(SMALL, "4")]["status"] == "ok"
    assert fake[("2x24x4/2x32xfp16 q=4", "16")]["status"] == "unsupported"
    assert "query_len=4" in fake[("2x24x4/2x32xfp16 q=4", "16")]["note"]
    assert "dtype=bfloat16" in fake[("2x24x4/2x32xbf16:e4m3", "4")]["note"]
    q4 = next(r for r in rows if r["variant"] == "numpy.gather" and r["query_len"] == "4")
    assert int(q4["bytes"]) > int(next(r for r in rows if r["variant"] == "numpy.gather")["bytes"])
    fp8 = next(r for r in rows if r["variant"] == "numpy.gather" and r["kv_dtype"] == "float8_e4m3fn"
               and r["query_len"] == "1" and r["block_size"] == "4")
    fp16 = next(r for r in rows if r["variant"] == "numpy.gather" and r["shape"] == SMALL and r["block_size"] == "4")
    assert int(fp8["bytes"]) < int(fp16["bytes"])  # a cache of one byte per element
    assert outcome.exit_code == 0
    assert "numpy.fp16decode x2 at bs 4,16: numpy.fp16decode does not support query_len=4" in outcome.summary


def test_sweep_applies_options_and_adds_shared_prompt_points(tmp_path, monkeypatch):
    _fake_module(monkeypatch, "numpy.plain", limits=Limits(block_sizes=None, backends=("cpu",), max_query_len=None,
                                                           options=("window",)))
    outcome, rows = sweep(tmp_path, "--shapes", SMALL, "--options", "window=8,softcap=30,alibi,kscale=0.5",
                          "--shared-prefix", "16", "--group-size", "2", "--block-sizes", "16",
                          "--variants", "numpy.gather,numpy.plain", "--no-plots", "--no-resources")
    by = {(r["variant"], r["shape"]): r for r in rows}
    opts = "window=8,softcap=30,alibi,kscale=0.5"
    shared = by[("numpy.gather", f"2x16x4/2x32xfp16 shared=2 {opts}")]
    assert shared["status"] == "ok" and (shared["group_size"], shared["prefix_len"], shared["options"]) == ("2", "16", opts)
    assert by[("numpy.gather", f"{SMALL} {opts}")]["status"] == "ok"
    refused = by[("numpy.plain", f"{SMALL} {opts}")]
    assert refused["status"] == "unsupported" and "does not support option=softcap" in refused["note"]  # the first in table order
    assert outcome.exit_code == 1 and outcome.without_ok == ["numpy.plain"]  # nothing it could take


# ---------------------------------------------------------------- the cascade summary

def _fake_pair(monkeypatch, cascade_bytes=None):
    """cupy.multi / cupy.cascade stand-ins (numpy.gather inside); the cascade's prepared object counts
    cascade_bytes(problem) through bytes_moved()."""
    limits = Limits(block_sizes=None, backends=("cpu", "gpu"), max_query_len=None)
    _fake_module(monkeypatch, "cupy.multi", limits=limits)
    _fake_module(monkeypatch, "cupy.cascade", limits=limits)
    module = sys.modules["fake_sweep_cupy_cascade"]
    inner_prepare = module.prepare

    def prepare(problem, backend):
        prepared = inner_prepare(problem, backend)
        if cascade_bytes is not None:
            prepared.bytes_moved = lambda: cascade_bytes(problem)
        return prepared

    monkeypatch.setattr(module, "prepare", prepare)


def test_cascade_points_count_the_prepared_bytes_and_the_summary_shows_the_speed_up(tmp_path, monkeypatch):
    _fake_pair(monkeypatch, cascade_bytes=lambda problem: problem.bytes_moved() // 2)
    outcome, rows = sweep(tmp_path, "--shapes", "4x32x4/2x32xfp16 shared=2", "--block-sizes", "16",
                          "--variants", "cupy.multi,cupy.cascade", "--backend", "cpu", "--no-plots", "--no-resources")
    by = {r["variant"]: r for r in rows}
    assert by["cupy.cascade"]["status"] == by["cupy.multi"]["status"] == "ok"
    assert int(by["cupy.cascade"]["bytes"]) * 2 in (int(by["cupy.multi"]["bytes"]), int(by["cupy.multi"]["bytes"]) - 1)
    assert "Cascade on shared prompts" in outcome.summary
    lines = outcome.summary.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("Cascade on shared prompts"))
    line = lines[start + 2]
    speedup = float(by["cupy.multi"]["time_us"]) / float(by["cupy.cascade"]["time_us"])
    assert f"{speedup:.2f}x" in line and " 0.50" in line


def test_a_bytes_moved_that_is_not_a_count_is_an_error(tmp_path, monkeypatch):
    _fake_pair(monkeypatch, cascade_bytes=lambda problem: -1)
    outcome, rows = sweep(tmp_path, "--shapes", "4x32x4/2x32xfp16 shared=2", "--block-sizes", "16",
                          "--variants", "cupy.cascade", "--backend", "cpu", "--no-plots", "--no-resources")
    (row,) = rows
    assert row["status"] == "error" and "bytes_moved() must return a positive int" in row["note"]


def test_cascade_table_from_stubbed_rows():
    shape = "64x2048x32/8x128xfp16 shared=8"

    def row(variant, bs, time_us, nbytes, status="ok"):
        r = gpu_row(variant, bs, time_us, shape=shape, status=status, nbytes=nbytes)
        r.update(group_size=8, prefix_len=2048, query_len=1)
        return r

    rows = [row("cupy.multi", 16, 400.0, 4 * 10**8), row("cupy.cascade", 16, 100.0, 10**8),
            row("cupy.multi", 32, 380.0, 4 * 10**8), row("cupy.cascade", 32, None, None, status="wrong"),
            gpu_row("cupy.multi", 16, 50.0), gpu_row("cupy.cascade", 16, 60.0)]  # not shared: not in the table
    lines = summary.cascade_table(rows)
    assert lines[0].startswith("Cascade on shared prompts")
    body = lines[2:]
    assert len(body) == 2
    assert "4.00x" in body[0] and "400" in body[0] and "100" in body[0] and "0.25" in body[0]
    assert "WRONG" in body[1] and "x" not in body[1].split("gpu")[1].replace("cupy.multi", "").replace(
        "cupy.cascade", "")
    assert summary.cascade_table([gpu_row("cupy.multi", 16, 50.0)]) == []


# ---------------------------------------------------------------- goals and compare

def test_goals_leave_out_shared_prompt_and_multi_query_shapes():
    rows = []
    for shape, q, g in ((shapes.GOAL_SHAPE, 1, 0), ("64x2048x32/8x128xfp16 shared=8", 1, 8),
                        ("32x1024x32/8x128xfp16 q=4", 4, 0)):
        for bs in (8, 16, 128):
            slow = 1.0 if g == 0 and q == 1 else 3.0  # the excluded shapes would fail both goals
            dense, paged = gpu_row("cupy.dense", bs, 100.0, shape=shape), gpu_row("cupy.rows", bs, 101.0 * (
                slow if bs == 8 or g else 1.0), shape=shape)
            for r in (dense, paged):
                r.update(query_len=q, group_size=g)
            rows += [dense, paged]
    by = {c["id"]: c for c in goals.evaluate(rows, True, "cupy.dense")["checks"]}
    assert by["paging_overhead"]["passed"] and by["block_size_8_vs_128"]["passed"], by
    assert "shared" not in by["paging_overhead"]["detail"] and "q=4" not in by["block_size_8_vs_128"]["detail"]


def _write_csv(path, rows):
    path.mkdir()
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path / "sweep.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_compare_keys_points_on_the_new_columns_and_reads_old_runs_with_defaults(tmp_path):
    old = dict(variant="cupy.rows", shape=SMALL, block_size=16, backend="gpu", status="ok", time_us=10.0,
               dtype="float16")
    new = dict(old, kv_dtype="float16", options="", query_len=1, prefix_len=0, group_size=0, time_us=20.0)
    other = dict(new, query_len=4, time_us=10.0)  # same shape name, another point
    report = diff.compare_runs(_write_csv(tmp_path / "a", [old]), _write_csv(tmp_path / "b", [new, other]))
    assert len(report.ratios) == 1 and report.ratios[0][3] == pytest.approx(2.0)
    assert len(report.only_b) == 1 and report.exit_code == 1  # the regression
    fp8 = dict(new, kv_dtype="float8_e4m3fn", time_us=10.0)
    assert not diff.compare_runs(tmp_path / "a", _write_csv(tmp_path / "c", [fp8])).shared


def test_static_changes_match_precisions_and_read_old_files_as_float16(tmp_path):
    def write(folder, rows):
        folder.mkdir()
        with open(folder / "resources.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    a = dict(variant="cupy.v1", block_size=16, dtype="float16", registers=40)
    write(tmp_path / "a", [a])
    write(tmp_path / "b", [dict(a, kv_dtype="float16", registers=48), dict(a, dtype="bfloat16", kv_dtype="bfloat16",
                                                                          registers=60)])
    assert diff.static_changes(tmp_path / "a", tmp_path / "b") == ["cupy.v1 bs=16: registers 40 -> 48"]
    write(tmp_path / "c", [dict(a, kv_dtype="float16", registers=48), dict(a, dtype="bfloat16", kv_dtype="bfloat16",
                                                                          registers=64)])
    assert diff.static_changes(tmp_path / "b", tmp_path / "c") == ["cupy.v1 bs=16 bf16: registers 60 -> 64"]


# ---------------------------------------------------------------- static resources of other precisions

def _report_module(monkeypatch, name, compile_report):
    module = types.ModuleType(f"fake_report_{name.replace('.', '_')}")
    module.LIMITS = Limits(dtypes=dtypes.QUERY_DTYPES, kv_dtypes=dtypes.FP8_DTYPES)
    module.compile_report = compile_report
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(registry.VARIANTS, name, module.__name__)


REPORT = dict(registers=40, static_shared_bytes=0, dynamic_shared_bytes=0, local_bytes=0, spill_stores=0,
              spill_loads=0, threads_per_block=128)


def test_resources_pass_kv_dtype_only_when_given_and_old_signatures_are_not_supported(monkeypatch):
    calls = []

    def new(block_size, head_dim, dtype, arch, kv_dtype=None):
        calls.append((dtype, kv_dtype))
        if kv_dtype == "float8_e5m2":
            raise Unsupported("no e5m2 kernel")
        return dict(REPORT, registers=48 if kv_dtype else 40)

    def old(block_size, head_dim, dtype, arch):
        calls.append(("old", dtype))
        return dict(REPORT)

    _report_module(monkeypatch, "cupy.newsig", new)
    _report_module(monkeypatch, "cupy.oldsig", old)
    names = ["cupy.newsig", "cupy.oldsig"]
    rows = resources._collect_many_here(names, [((16,), "bfloat16", None), ((16,), "float16", "float8_e4m3fn"),
                                                ((16,), "float16", "float8_e5m2")], 128, "sm_90")
    assert [(r["variant"], r["dtype"], r["kv_dtype"], r.get("registers")) for r in rows] == [
        ("cupy.newsig", "bfloat16", "bfloat16", 40), ("cupy.oldsig", "bfloat16", "bfloat16", 40),
        ("cupy.newsig", "float16", "float8_e4m3fn", 48), ("cupy.oldsig", "float16", "float8_e4m3fn", None),
        ("cupy.newsig", "float16", "float8_e5m2", None), ("cupy.oldsig", "float16", "float8_e5m2", None)]
    assert calls == [("bfloat16", None), ("old", "bfloat16"), ("float16", "float8_e4m3fn"), ("float16", "float8_e5m2")]
    assert "compile_report takes no kv_dtype" in rows[3]["skipped"] and "no e5m2 kernel" in rows[4]["skipped"]
    assert resources_cmd.not_supported_line(rows) == "not supported at this precision (no row): cupy.oldsig, cupy.newsig"
    assert "bfloat16" in resources.DTYPES


def test_resources_and_sass_commands_take_bf16_and_fp8_and_refuse_the_rest(monkeypatch, capsys):
    seen = []

    def collect(variants, block_sizes, head_dim, dtype, arch, progress=None, kv_dtype=None, **kw):
        seen.append((dtype, kv_dtype))
        return [dict(variant="cupy.v1", family="cupy", block_size=16, dtype=dtype, kv_dtype=kv_dtype or dtype,
                     arch=arch, head_dim=head_dim, skipped="kv_dtype float8_e5m2 not supported: ...")]

    monkeypatch.setattr(resources, "collect", collect)
    assert cli.main(["resources", "--variants", "cupy.v1", "--block-sizes", "16", "--dtype", "bf16",
                     "--kv-dtype", "e5m2"]) == 0
    out = capsys.readouterr().out
    assert seen == [("bfloat16", "float8_e5m2")]
    assert "sm_90, bfloat16, cache float8_e5m2" in out and "not supported at this precision (no row): cupy.v1" in out
    for args, message in ((["--dtype", "e4m3"], "--dtype e4m3: dtype must be one of float32, float16, bfloat16"),
                          (["--kv-dtype", "int8"], "--kv-dtype int8: unknown dtype 'int8'"),
                          (["--kv-dtype", "bf16"], "--kv-dtype bf16: kv_dtype must be the query's dtype or one of")):
        for command in ("resources", "sass"):
            assert cli.main([command, "--variants", "cupy.v1", *args]) == 2
            err = capsys.readouterr().err
            assert message in err and err.count("\n") == 1, err


def test_other_precisions_are_compiled_in_a_full_sweep_not_with_quick(tmp_path, monkeypatch):
    from sandbox.sweep.measure import static_resources
    calls = []
    monkeypatch.setattr(static_resources, "collect_into",
                        lambda run_dir, names, block_sizes, extra=None, progress=False: calls.append(tuple(extra))
                        or ([], ""))
    for quick in (["--quick"], []):
        ns = cli.build_parser().parse_args(["sweep", "--results-dir", str(tmp_path), "--no-progress", "--backend",
                                            "cpu", "--shapes", SMALL, "--block-sizes", "16", "--variants",
                                            "numpy.gather", "--no-plots", "--max-repeats", "1", *quick])
        run.run_sweep(sweep_cmd.build_config(ns))
    assert calls == [(), static_resources.EXTRA_PRECISIONS]
