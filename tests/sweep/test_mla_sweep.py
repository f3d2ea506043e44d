"""The sweep's MLA shapes: parsing, paging the same tokens at every block size, and a run that races MLA variants
at MLA shapes only, with bytes and FLOPs per point in the summary."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from sandbox import cli
from sandbox.checking.mla_check import expected_mla
from sandbox.problem.mla import record as rec
from sandbox.sweep import mla_shapes, shapes
from sandbox.sweep.measure import run
from sandbox.sweep.report import mla_summary
def test_parse_mla_shapes_and_presets():
    s = mla_shapes.parse_mla_shape("mla:128x4096x128xbf16")
    assert (s.num_seqs, s.context_len, s.num_heads, s.dtype, s.fp8, s.topk, s.query_len) == \
        (128, 4096, 128, "bfloat16", False, 0, 1)
    sparse = mla_shapes.parse_mla_shape("mla:64x8192x16xbf16:fp8 topk=2048 q=2")
    assert sparse.name == "mla:64x8192x16xbf16:fp8 topk=2048 q=2" and sparse.kv_format == "fp8_record"
    assert mla_shapes.parse_mla_shape(sparse.name) == sparse
    assert mla_shapes.parse_mla_shape("mla:2x8x4").dtype == "bfloat16"
    mixed = shapes.parse_shapes("2x24x4/2x32xfp32 window=8,alibi,mla:2x16x2xfp16 topk=4,mla:1x8x1")
    assert [x.name for x in mixed] == ["2x24x4/2x32xfp32 window=8,alibi", "mla:2x16x2xfp16 topk=4", "mla:1x8x1xbf16"]
    assert shapes.expand(mixed, query_lens=(2,))[-1].name == "mla:1x8x1xbf16"  # decode additions leave MLA alone
    for bad, message in [("mla:2x8", "is not mla:"), ("mla:2x8x4xfp32", "bf16 or fp16"),
                         ("mla:2x8x4xbf16:e5m2", "fp8 \\(the 656-byte record\\)"), ("mla:2x8x4 topk=0", "topk must be"),
                         ("mla:2x8x4 window=3", "unknown word"), ("mla:2x8x4,alibi", "unknown word 'alibi'"),
                         ("mla:2x8x4 q=9", "more query rows")]:
        with pytest.raises(ValueError, match=message):
            shapes.parse_shapes(bad)
    assert "mla:128x4096x128xbf16" in shapes.GPU_SHAPES  # FlashMLA's headline shape
    assert sum(mla_shapes.is_mla(x) for x in shapes.CPU_SHAPES) == 1


@pytest.mark.parametrize("spec", ["mla:2x37x3xbf16 q=2", "mla:2x37x2xfp16:fp8 topk=16"])
def test_every_block_size_pages_the_same_tokens(spec):
    data = mla_shapes.MLAShapeData(mla_shapes.parse_mla_shape(spec), seed=3)
    want_out, want_lse = data.expected(1)
    for block_size in (1, 16, 64):
        problem = data.problem(block_size)
        out, lse = expected_mla(problem)  # the truth through the table, NaN in every slot no row reads
        np.testing.assert_allclose(out, want_out, atol=1e-12)
        np.testing.assert_allclose(lse, want_lse, atol=1e-12)
        rows = problem.latent_cache.reshape(-1, problem.latent_cache.shape[2])
        unread = np.setdiff1d(np.arange(len(rows)), problem.read_slots())
        values = rec.decode_records(rows[unread]) if problem.fp8 else rows[unread].astype(float)
        assert unread.size and np.isnan(values).all()


def test_sweep_races_mla_variants_at_mla_shapes_only(tmp_path, capsys):
    code = cli.main(["sweep", "--quick", "--backend", "cpu", "--variants", "numpy.gather,numpy.mla,cupy.mla",
                     "--shapes", "2x24x4/2x32xfp32,mla:2x24x17xbf16:fp8 topk=9", "--block-sizes", "1,16",
                     "--results-dir", str(tmp_path), "--no-progress", "--no-plots", "--no-resources"])
    out = capsys.readouterr().out
    assert code == 0, out
    (run_dir,) = tmp_path.iterdir()
    with open(run_dir / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    mla = [r for r in rows if r["problem"] == "mla"]
    assert {(r["variant"], r["shape"]) for r in rows if r["problem"] == "decode"} == {("numpy.gather", "2x24x4/2x32xfp32")}
    assert {r["variant"] for r in mla} == {"numpy.mla", "cupy.mla"} and len(mla) == 4
    for r in mla:
        assert r["status"] == "ok" and r["kv_dtype"] == "fp8_record" and r["head_dim"] == "576", r
        assert int(r["flops"]) == 2 * 17 * (576 + 512) * 2 * 9 and int(r["bytes"]) > 0
    assert "MLA points: bytes read and FLOPs per point" in out and "mla:2x24x17xbf16:fp8 topk=9" in out


def test_mla_variants_are_not_failed_for_lack_of_an_mla_shape(tmp_path):
    outcome = run.run_sweep(run.SweepConfig(variants=["numpy.gather", "numpy.mla"], block_sizes=(16,),
                                            shapes=shapes.parse_shapes("2x24x4/2x32xfp32"), backend="cpu",
                                            cpu_timing=run.timing.CPU_QUICK_TIMING, torch=False, resources=False,
                                            plots=False, progress=False, results_dir=tmp_path, quick=True))
    assert outcome.exit_code == 0 and outcome.without_ok == []
    assert {r["variant"] for r in outcome.rows} == {"numpy.gather"}


def test_the_model_names_the_binding_roof():
    # FlashMLA's headline shape on CUDA cores: 242 FLOP per byte, compute binds; the bytes alone bind a tiny shape.
    nbytes, flops = 128 * 4096 * 1152, 2 * 128 * 128 * 4096 * 1088
    seconds, roof = mla_summary.bound(nbytes, flops, mla_summary.H200_CUDA_CORE_FLOPS)
    assert roof == "compute" and seconds == pytest.approx(2.18e-3, rel=0.01)
    assert mla_summary.bound(nbytes, 1.0, mla_summary.H200_TENSOR_CORE_FLOPS)[1] == "memory"


def test_serving_fits_ignore_mla_rows(tmp_path):
    """sandbox.serving's GPU-sweep cost model fits decode rows; an MLA row (compute-bound, 576-wide) must not count."""
    from sandbox.serving.cost_sweep import load_fits

    fields = ["variant", "problem", "backend", "shape", "dtype", "kv_dtype", "options", "query_len", "group_size",
              "block_size", "status", "time_us", "bytes"]
    common = dict(backend="gpu", dtype="bfloat16", kv_dtype="bfloat16", options="", query_len=1, group_size=0,
                  block_size=64, status="ok")
    with open(tmp_path / "sweep.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerow(dict(common, variant="cupy.rows", problem="decode", shape="s", time_us=10, bytes=1_000_000))
        writer.writerow(dict(common, variant="cupy.mla", problem="mla", shape="mla:128x4096x128xbf16",
                             time_us=3000, bytes=600_000_000))
    fits, counts = load_fits(tmp_path, 2)
    assert counts == {64: 1} and fits[64][1] == pytest.approx(10 / 1_000_000)
