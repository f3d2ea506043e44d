"""The model's figures quoted in README.md and docs/performance-model.md are the model's now: every table between
`<!-- model-table: NAME -->` markers equals what scripts/write_model_tables.py writes from the stored goal-shape
counts (docs/model-goal-shape.json), and those counts' censuses are what the kernels compile to now. A change to
the model, the device table or a kernel fails here until `python scripts/write_model_tables.py` runs."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from sandbox.analysis import model_check as MC

ROOT = Path(__file__).resolve().parents[2]


def _writer():
    spec = importlib.util.spec_from_file_location("write_model_tables", ROOT / "scripts" / "write_model_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


W = _writer()
COUNTS = json.loads(W.COUNTS.read_text())
PEER_COUNTS = json.loads(W.PEER_COUNTS.read_text())


def _tables(page: Path) -> dict:
    return {m.group("name"): m.group("body") for m in W._MARK.finditer(page.read_text())}


def test_every_page_has_its_tables():
    assert set(_tables(ROOT / "README.md")) == {"readme", "readme-check"}
    assert set(_tables(ROOT / "docs" / "performance-model.md")) == {"goal-shape", "devices", "model-check"}
    assert set(_tables(ROOT / "docs" / "peers.md")) == {"peers-goal-shape", "peers-published"}


@pytest.mark.parametrize("page, name", [("README.md", "readme"), ("docs/performance-model.md", "goal-shape"),
                                        ("docs/performance-model.md", "devices")])
def test_the_model_tables_are_the_model_applied_to_the_stored_counts(page, name):
    assert _tables(ROOT / page)[name] == W.TABLES[name](COUNTS), (
        f"{page}'s {name} table is stale: run python scripts/write_model_tables.py --tables-only")


def test_the_stored_counts_cover_every_cuda_c_variant_on_both_devices():
    from sandbox.variant import registry
    assert set(COUNTS) == set(W.DEVICES)
    for device in W.DEVICES:
        assert set(COUNTS[device]) == set(registry.variants("cupy"))
        for stored in COUNTS[device].values():
            assert all(k["loads_in_flight_source"] == "sass" for k in stored["kernels"])


def test_the_stored_censuses_are_what_the_kernels_compile_to_now():
    """Registers, occupancy and loads in flight of each stored kernel, from a fresh compile of the same
    instantiation (a one-sequence problem of the goal shape's heads, head dim, dtype and block size)."""
    from kernels.cupy_raw import common
    from sandbox.analysis import gpus
    from sandbox.analysis.traffic import variant as V
    from sandbox.commands.traffic import problem_for
    from sandbox.sweep import shapes
    from sandbox.variant import runner

    problem = problem_for(shapes.parse_any("1x4096x32/8x128xfp16"), W.BLOCK_SIZE, seed=0)
    arch = gpus.get("h200").arch
    stale = []
    for name, stored in COUNTS["h200"].items():
        with common.cpu_options(traffic=True):
            prepared, _ = runner.prepare(name, problem, "cpu", None)
        now = {}
        for kernel, _, block, _, shared in prepared.launches:
            census = V._cupy_census(kernel, block, shared, arch)
            now[kernel.name] = census
        for k in stored["kernels"]:
            fresh = next((c for n, c in now.items()
                          if n == k["name"] or k["name"].endswith(n) or n.endswith(k["name"])), None)
            if fresh is None:
                stale.append(f"{name}: kernel {k['name']} not launched now")
                continue
            for field in ("registers", "loads_in_flight", "loads_per_wait"):
                if fresh.get(field) != k[field]:
                    stale.append(f"{name} {k['name']}: {field} {k[field]} stored, {fresh.get(field)} now")
    assert not stale, "docs/model-goal-shape.json is stale (python scripts/write_model_tables.py): " + "; ".join(stale)


@pytest.mark.parametrize("name", ["peers-goal-shape", "peers-published"])
def test_the_peer_tables_are_the_model_applied_to_the_stored_counts(name):
    assert _tables(ROOT / "docs" / "peers.md")[name] == W.PEER_TABLES[name](COUNTS, PEER_COUNTS), (
        f"docs/peers.md's {name} table is stale: run python scripts/write_model_tables.py --tables-only")


def test_the_stored_peer_counts_cover_every_peer_variant_and_published_shape():
    assert set(PEER_COUNTS["goal"]) == set(PEER_COUNTS["published"]) == set(W.peer_variants())
    for name, by_shape in PEER_COUNTS["published"].items():
        assert set(by_shape) == {r.shape for r in W.published()}
        for stored in [PEER_COUNTS["goal"][name], *by_shape.values()]:
            assert all(k["loads_in_flight_source"] == "sass" for k in stored["kernels"])


def test_the_stored_peer_censuses_are_what_their_compiler_gives_now():
    """The peers' census (their family's own compile: nvcc for FlashInfer) of each stored goal-shape kernel, fresh."""
    from sandbox.analysis import gpus
    from sandbox.analysis.traffic import variant as V
    from sandbox.commands.traffic import problem_for
    from sandbox.sweep import shapes
    from sandbox.variant import registry, runner

    missing = W.peers_missing()
    if missing:
        pytest.skip(missing)
    problem = problem_for(shapes.parse_any("1x4096x32/8x128xfp16"), W.BLOCK_SIZE, seed=0)
    arch = gpus.get("h200").arch
    stale = []
    for name, stored in PEER_COUNTS["goal"].items():
        compiler = registry.get(name).family_plugin.census
        prepared, _ = runner.prepare(name, problem, "cpu", None)
        now = {kernel.name: V._cupy_census(kernel, block, shared, arch, compiler)
               for kernel, _, block, _, shared in prepared.launches}
        for k in stored["kernels"]:
            fresh = next((c for n, c in now.items() if n == k["name"]), None)
            if fresh is None:
                stale.append(f"{name}: kernel {k['name']} not launched now")
            elif "census_error" in fresh:  # nvcc missing here: nothing to compare with
                pytest.skip(f"{name}: {fresh['census_error']}")
            else:
                stale += [f"{name} {k['name']}: {field} {k[field]} stored, {fresh.get(field)} now"
                          for field in ("registers", "loads_in_flight", "loads_per_wait") if fresh.get(field) != k[field]]
    assert not stale, "docs/peers-goal-shape.json is stale (python scripts/write_model_tables.py --peers-only): " + (
        "; ".join(stale))


def test_the_model_check_table_quotes_the_default_rows():
    """The measured column and the rows are the default table's; two micro rows re-modelled here (every row: the
    deep tier's test_the_model_check_tables_are_the_model_now)."""
    body = _tables(ROOT / "docs" / "performance-model.md")["model-check"]
    lines = [line for line in body.splitlines() if line.startswith("| `")]
    rows = MC.read_table()
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == f"`{row.variant}`" and cells[1] == row.device and float(cells[5]) == row.measured_us
    from sandbox.commands.model_check import model_us
    for line, row in [(line, row) for line, row in zip(lines, rows) if row.micro][1:3]:
        assert float(line.split("|")[7]) == pytest.approx(model_us(row), abs=0.051)


def test_the_model_check_tables_are_the_model_now():
    points = W.check_rows()
    assert _tables(ROOT / "docs" / "performance-model.md")["model-check"] == W.check_table(points)
    assert _tables(ROOT / "README.md")["readme-check"] == W.check_line(points)
