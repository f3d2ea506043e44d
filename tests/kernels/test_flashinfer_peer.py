"""flashinfer.decode, the FlashInfer peer, beyond the shared suite (tests/kernels/test_variants.py walks it with the
registry): the page-table conversion, FlashInfer's dispatch of template arguments, a missing or other wheel
reported unavailable with its reason, head dims 128 and 256, and the CPU executor's checking modes (ASan,
racecheck with FlashInfer's same-value lse stores as findings, reversed thread order, both poisons)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kernels.flashinfer import decode, wheel
from sandbox.checking.check import check_problem
from sandbox.cpucuda import modes, racecheck
from sandbox.problem import DecodeProblem
from sandbox.variant import Unsupported
from sandbox.variant.runner import run_problem

installed = pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None,
                               reason="flashinfer-python is not installed (make setup installs it)")


def test_page_table_is_flashinfers_csr_form():
    tables = np.array([[5, 2, -1], [7, -1, -1], [1, 3, 4]], np.int32)
    indptr, indices, last = decode.page_table(tables, np.array([17, 16, 33], np.int32), 16)
    assert indptr.tolist() == [0, 2, 3, 6]
    assert indices.tolist() == [5, 2, 7, 1, 3, 4]
    assert last.tolist() == [1, 16, 1]


@pytest.mark.parametrize("head_dim, group, itemsize, want", [
    (128, 1, 2, (8, 16, 1, 8, 4)),     # 128 threads as 16 x 1 x 8, four tokens per thread row and stage
    (128, 4, 2, (8, 16, 4, 2, 1)),
    (64, 8, 2, (8, 8, 8, 2, 1)),
    (256, 16, 2, (8, 32, 16, 1, 1)),   # 512 threads
    (128, 1, 1, (16, 8, 1, 16, 2)),    # a 1-byte cache: 16 elements per 16-byte vector
])
def test_plan_is_flashinfers_dispatch(head_dim, group, itemsize, want):
    p = decode.plan(head_dim, group, itemsize)
    assert (p.vec_size, p.bdx, p.bdy, p.bdz, p.tile_size_per_bdx) == want
    kv = 2 * decode.NUM_STAGES_SMEM * p.tile_size_per_bdx * group * p.bdz * head_dim * itemsize
    threads = p.bdx * p.bdy * p.bdz
    assert p.shared_bytes == max(kv, p.bdz * group * head_dim * 4) + max(8 * p.tile_size_per_bdx * threads,
                                                                         8 * group * p.bdz)


@pytest.mark.parametrize("head_dim, group, reason", [(96, 1, "head_dim=96"), (128, 5, "GQA group of 5"),
                                                     (256, 32, "GQA group of 32")])
def test_what_flashinfer_does_not_dispatch_is_unsupported(head_dim, group, reason):
    with pytest.raises(Unsupported, match=reason):
        decode.plan(head_dim, group, 2)


def test_a_missing_wheel_is_one_line_and_unsupported(monkeypatch):
    wheel.locate.cache_clear()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    try:
        with pytest.raises(Unsupported, match=r"^flashinfer-python is not installed \(make setup installs "
                                              r"flashinfer-python==0\.7\.4 without its dependencies\)$"):
            wheel.locate()
        problem = DecodeProblem.random(1, num_seqs=1, num_heads=2, num_kv_heads=2, head_dim=64, dtype="float16")
        with pytest.raises(Unsupported, match="flashinfer-python is not installed"):
            run_problem("flashinfer.decode", problem, "cpu")
    finally:
        monkeypatch.undo()
        wheel.locate.cache_clear()


def test_another_wheel_version_is_refused_with_the_version(monkeypatch):
    wheel.locate.cache_clear()
    monkeypatch.setattr(wheel.importlib.metadata, "version", lambda name: "0.1.0")
    if importlib.util.find_spec("flashinfer") is None:
        pytest.skip("flashinfer-python is not installed")
    try:
        with pytest.raises(Unsupported, match=r"flashinfer-python 0\.1\.0 is installed; the sandbox's launcher is "
                                              r"written for 0\.7\.4"):
            wheel.locate()
    finally:
        monkeypatch.undo()
        wheel.locate.cache_clear()


@installed
@pytest.mark.parametrize("head_dim, heads, kv_heads, dtype", [(128, 8, 2, "float16"), (256, 2, 2, "bfloat16")])
def test_head_dims_128_and_256(head_dim, heads, kv_heads, dtype):
    problem = DecodeProblem.random(31, num_seqs=2, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                                   block_size=16, context_lens=[49, 16], dtype=dtype)
    result = check_problem("flashinfer.decode", problem, "cpu")
    assert result.error is None and result.ok, f"{problem}: {result.error or result.comparison}"


def _problem(long: int = 21, **options) -> DecodeProblem:
    # GQA 4 (bdy 4, bdz 2: sync_state merges the two thread slices), a partial last page, a one-token sequence;
    # long=300: the planner cuts the first sequence into 3 chunks and FlashInfer's merge kernel joins them
    return DecodeProblem.random(23, num_seqs=3, num_heads=4, num_kv_heads=1, head_dim=64, block_size=8,
                                context_lens=[long, 1, 16], dtype="float16", **options)


def test_split_plan_is_flashinfers_planner():
    shape = decode.plan(64, 4, 2)
    assert decode.split_plan(np.array([3, 1, 2]), 1, 8, shape, sms=132) is None       # chunks >= 16 pages
    split = decode.split_plan(np.array([38, 1, 2]), 1, 8, shape, sms=132)
    assert split.chunk_pages == 16 and split.request_indices.tolist() == [0, 0, 0, 1, 2]
    assert split.kv_tile_indices.tolist() == [0, 1, 2, 0, 0] and split.o_indptr.tolist() == [0, 3, 4, 5]
    assert decode.split_plan(np.array([38] * 200), 8, 8, shape, sms=132) is None        # the batch fills the grid
    from sandbox.analysis.occupancy import occupancy
    grid = occupancy(decode.ASSUMED_REGISTERS, shape.shared_bytes, 128, "sm_90").blocks_per_sm   # one SM
    tight = decode.split_plan(np.array([4000, 4000]), 1, 1, shape, sms=1)  # the smallest chunk that fits the grid
    chunks = -(-4000 // tight.chunk_pages)
    assert 2 * chunks <= grid < 2 * -(-4000 // (tight.chunk_pages - 1))
    assert len(tight.request_indices) == 2 * chunks


@installed
@pytest.mark.parametrize("mode, long", [(dict(asan=True), 21), (dict(asan=True), 300), (dict(poison="finite"), 300),
                                        (dict(poison="nan"), 300)],
                         ids=["asan", "asan-split", "poison-finite", "poison-nan"])
def test_clean_and_right_under_the_executor_modes(mode, long):
    """long=300: split, the decode kernel then the merge (each an ASan build of its own: the split case is in
    the deep tier)."""
    problem = _problem(long=long)
    assert len(decode.prepare(problem, "cpu").launches) == (2 if long == 300 else 1)
    with modes(**mode):
        result = check_problem("flashinfer.decode", problem, "cpu")
    assert result.error is None and result.ok, f"{mode}: {result.error or result.comparison}"


@installed
def test_racecheck_reports_the_same_value_lse_stores_as_findings():
    """Every lane of a row stores its head's log-sum-exp to one address (decode.cuh's `lse[...] = st.get_lse()`
    under `if (tz == 0)`): a write-after-write of identical bytes, a finding about the peer, not a failure."""
    problem = _problem(return_lse=True)
    with modes(racecheck=True):
        result = check_problem("flashinfer.decode", problem, "cpu")
    assert result.error is None and result.ok, result.error or result.comparison
    (finding,) = racecheck.last_findings()
    assert "same-value race (write-after-write of identical bytes" in finding and "decode.cuh" in finding


@installed
def test_reversed_thread_order_gives_identical_results():
    forward = run_problem("flashinfer.decode", _problem(long=300), "cpu")
    with modes(order="reverse"):
        backward = run_problem("flashinfer.decode", _problem(long=300), "cpu")
    np.testing.assert_array_equal(backward, forward)


def test_pyproject_pins_the_wheel_the_launcher_supports():
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    pinned = re.search(r'^requirements = \["flashinfer-python==([\d.]+)"\]', text, re.M)
    assert pinned and pinned.group(1) == wheel.SUPPORTED[0]


def test_the_sweep_marks_the_peer_and_its_failures_never_fail_the_sweep(monkeypatch):
    from pathlib import Path
    from sandbox.sweep.measure import run
    from sandbox.variant.registry import labelled
    wheel.locate.cache_clear()
    try:
        if importlib.util.find_spec("flashinfer") is not None:
            assert labelled("flashinfer.decode") == f"flashinfer.decode (peer: FlashInfer {wheel.SUPPORTED[0]})"
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
        wheel.locate.cache_clear()
        assert labelled("flashinfer.decode").startswith("flashinfer.decode (peer: FlashInfer unavailable: "
                                                           "flashinfer-python is not installed")
    finally:
        monkeypatch.undo()
        wheel.locate.cache_clear()
    assert labelled("cupy.rows") == "cupy.rows" and labelled("torch.sdpa") == "torch.sdpa"
    rows = [dict(variant="flashinfer.decode", family="flashinfer", status="wrong"),
            dict(variant="cupy.rows", family="cupy", status="ok")]
    outcome = run.SweepOutcome(Path("."), rows, False, {}, "")
    assert outcome.failed == [] and outcome.exit_code == 0
    unsupported = [dict(variant="flashinfer.decode", family="flashinfer", status="unsupported")]
    assert run.variants_without_ok(unsupported, ["flashinfer.decode"]) == []


@installed
def test_compile_report_is_nvccs_census_of_both_kernels():
    from kernels.flashinfer import census
    try:
        census.nvcc()
    except census.NvccError as exc:
        pytest.skip(str(exc))
    report = decode.compile_report(16, 64, "float16", "sm_90")
    assert report["path"] == "nvcc -> cubin" and report["arch"] == "sm_90"
    partition, merge = report["kernels"]
    assert (partition["name"], merge["name"]) == ("partition", "reduce")
    assert 0 < partition["registers"] <= 255 and partition["threads_per_block"] == 128
    assert partition["dynamic_shared_bytes"] == decode.plan(64, decode.REPORT_GROUP, 2).shared_bytes
    cubin, mangled = partition["image"]
    assert cubin[:4] == b"\x7fELF" and "sandbox_fi6decode" in mangled


@installed
def test_a_sampled_traffic_count_keeps_the_whole_batchs_split():
    """The planner splits a small batch more finely than a large one: the traffic count's sample of a batch
    must run the whole batch's chunks, or its scaled counts describe another launch."""
    shape = dict(num_heads=32, num_kv_heads=8, head_dim=64, block_size=16, dtype="float16")
    whole = DecodeProblem.random(4, num_seqs=64, context_lens=[600] * 64, **shape)   # 38 pages per sequence
    prepared = decode.prepare(whole, "cpu")   # prepared, never launched: 64 x 8 blocks x 5 min-size chunks overfill
    assert prepared.chunk_pages > 8 and len(prepared.launches) == 2   # the grid, so the chunks grow
    part = DecodeProblem.random(4, num_seqs=2, context_lens=[600] * 2, **shape)
    assert decode.prepare(part, "cpu").chunk_pages == 8                  # alone: the smallest chunks
    sub = prepared.subset(part)
    assert sub.chunk_pages == prepared.chunk_pages
    assert sub.launches[0][1][0] == 2 * -(-38 // prepared.chunk_pages)
    sub.launch()
    from sandbox.checking.check import expected_output
    from sandbox.checking.compare import assert_close
    assert_close(sub.result(), expected_output(part), part.dtype, "subset")


def test_check_says_a_missing_wheel_once_and_a_peers_failures_are_findings(monkeypatch, capsys):
    from sandbox import cli
    wheel.locate.cache_clear()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flashinfer" else real(name, *a))
    try:
        assert cli.main(["check", "flashinfer.decode"]) == 0
        out = capsys.readouterr().out
        assert out.splitlines() == ["SKIP  flashinfer.decode            unavailable: flashinfer-python is not installed "
                                    "(make setup installs flashinfer-python==0.7.4 without its dependencies)"]
    finally:
        monkeypatch.undo()
        wheel.locate.cache_clear()
    if real("flashinfer") is None:
        return
    # every problem "wrong": printed as the peer's findings with the rebuild call, exit status 0
    from sandbox.commands import check as command
    monkeypatch.setattr(command, "run_checks", lambda name, variant, backend, args, config: [
        ("planted", DecodeProblem.random(7, num_seqs=1, num_heads=2, num_kv_heads=2, head_dim=64),
         type("R", (), dict(ok=False, comparison=None, error="planted failure"))())])
    assert cli.main(["check", "flashinfer.decode"]) == 0
    out = capsys.readouterr().out
    assert "FAIL  flashinfer.decode" in out and "(peer: FlashInfer 0.7.4: findings about it, not failures" in out
    assert "problem=DecodeProblem.random(seed=7" in out and "planted failure" in out


def test_flashinfer_api_peer_joins_only_where_it_can_run_and_says_why_not(monkeypatch):
    from sandbox.sweep.measure import peers, traffic_columns
    assert peers.flashinfer_api_missing(False) == "no GPU"
    assert peers.peers(on_gpu=False) == []
    assert peers.unavailable(on_gpu=False) == ["flashinfer.api (FlashInfer through its own Python API) not raced: "
                                               "no GPU"]
    assert peers.unavailable(on_gpu=False, enabled=False) == []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert peers.flashinfer_api_missing(True).startswith("torch is not installed")
    api = peers.FlashInferApi()
    assert api.family in ("torch",) and not api.per_shape and api.limits.backends == ("gpu",)
    assert traffic_columns.why_not(api.name).startswith("an outside peer")
