"""A curated run (a results/ folder committed as the README's evidence) must describe the code as it is: its
static rows (registers, shared memory, local memory, spills per variant) match what `resources` prints now.
A kernel change that moves them means the curated run is regenerated with it (`make sweep`, then force-add)."""
from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

from sandbox.analysis import resources
from sandbox.variant import registry

ROOT = Path(__file__).resolve().parents[2]
STATIC = ("registers", "static_shared_bytes", "local_bytes", "spill_stores", "spill_loads", "threads_per_block")
BLOCK_SIZE = 16  # one block size of every curated run: enough to catch a stale run, one compile per variant


def curated_resource_files() -> list[Path]:
    """resources.csv of every run folder git tracks (run folders are ignored unless curated)."""
    try:
        listed = subprocess.run(["git", "ls-files", "results/*/resources.csv"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: nothing is curated
        return []
    return [ROOT / name for name in listed]


def rows_at(path: Path) -> dict[str, dict]:
    with path.open(newline="") as f:
        return {r["variant"]: r for r in csv.DictReader(f)
                if int(r["block_size"]) == BLOCK_SIZE and r["dtype"] == "float16" and r["kv_dtype"] == "float16"
                and r["registers"] not in ("", None)}


@pytest.mark.parametrize("path", curated_resource_files(), ids=lambda p: p.parent.name)
def test_curated_static_rows_match_resources_now(path):
    recorded = rows_at(path)
    assert recorded, f"{path}: no float16 row at block size {BLOCK_SIZE}"
    known = set(registry.variants(problem=None) + registry.cache_writers())
    # the CUDA C rows: one NVRTC compile each (the Numba rows would need a real-mode child compiling every kernel)
    names = sorted(n for n in recorded if n in known and n.startswith("cupy."))
    now = {r["variant"]: r for r in resources.collect(names, block_sizes=(BLOCK_SIZE,), head_dim=int(
        next(iter(recorded.values()))["head_dim"]), dtype="float16") if "registers" in r}
    stale = [f"{name}: {column} {recorded[name][column]} in the run, {now[name][column]} now"
             for name in names if name in now for column in STATIC
             if column in recorded[name] and str(now[name][column]) != recorded[name][column]]
    missing = sorted(n for n in recorded if n.startswith("cupy.") and n not in now)
    assert not stale and not missing, (f"{path.parent.name} is stale (regenerate it with make sweep): "
                                       + "; ".join(stale + [f"{m}: no row now" for m in missing]))
