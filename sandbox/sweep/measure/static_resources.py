"""Static resources per variant x block size (registers, shared memory, spills, occupancy), via sandbox.analysis.resources,
and the census of the same cubins' machine code (global loads by width, local memory, ...), via sandbox.analysis.sass.

Compiled for the GPU goal configuration (head dim 128, float16, sm_90) at every block size of the sweep,
whatever its shapes: these numbers describe the H200 kernels even when the sweep itself runs on the CPU.
The other precisions the GPU default races (EXTRA_PRECISIONS: bfloat16, and float16 with an e4m3 cache)
are compiled at block size 16 only (the goal block size; the sweep's first block size without it): each
precision costs one compilation of every kernel, so a full grid for each would triple the compile time;
a --quick sweep compiles float16 only.
"""
from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path

from sandbox import progress as progress_mod
from sandbox.analysis import sass
from sandbox.analysis.gpus import DEFAULT_ARCH

HEAD_DIM, DTYPE, ARCH = 128, "float16", DEFAULT_ARCH
EXTRA_PRECISIONS = (("bfloat16", None), ("float16", "float8_e4m3fn"))
EXTRA_BLOCK_SIZE = 16


def configs(block_sizes, dtype: str = DTYPE, extra=EXTRA_PRECISIONS) -> list[tuple]:
    """[(block sizes, dtype, kv_dtype)]: the whole grid in `dtype`, then each extra precision at one block size."""
    block_sizes = tuple(block_sizes)
    one = (EXTRA_BLOCK_SIZE if EXTRA_BLOCK_SIZE in block_sizes else block_sizes[0],)
    return [(block_sizes, dtype, None)] + [(one, d, kv) for d, kv in extra if (d, kv) != (dtype, None)]


def write_csv(path: Path, rows: list[dict]) -> None:
    """All keys of all rows, in first-seen order."""
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:  # nested values (a multi-kernel variant's `kernels`) go in as JSON
            writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict, tuple)) else v for k, v in row.items()})


def collect_into(run_dir: Path, names, block_sizes, head_dim: int = HEAD_DIM, dtype: str = DTYPE,
                 arch: str = ARCH, extra=EXTRA_PRECISIONS, progress: bool = False) -> tuple[list[dict], str]:
    """(rows, note): rows (every precision of configs(); `dtype` and `kv_dtype` columns) also written to
    run_dir/resources.csv, their SASS census to run_dir/sass.csv; note says why either is missing, if so.
    progress: a bar on stderr counting the compiles and the census (the sweep's static phase)."""
    planned = configs(block_sizes, dtype, extra)
    steps = sum(len(sizes) for sizes, _, _ in planned) * len(list(names)) + 1  # each (variant, size, precision), census
    with progress_mod.bar(steps, "static resources", enabled=progress, unit="compile") as bar:
        def step(what: str) -> None:
            bar.set_postfix_str(what, refresh=False)
            bar.update()

        return _collect_into(run_dir, names, planned, head_dim, arch, step)


def _collect_into(run_dir: Path, names, planned, head_dim: int, arch: str, step) -> tuple[list[dict], str]:
    try:
        resources = importlib.import_module("sandbox.analysis.resources")
    except ModuleNotFoundError as exc:
        if exc.name != "sandbox.analysis.resources":
            return [], f"note: sandbox.analysis.resources could not be imported ({exc}); resources.csv skipped"
        return [], "note: sandbox.analysis.resources is not available here: static resources (resources.csv) skipped"
    try:
        rows = resources.collect_many(variants=list(names), configs=planned, head_dim=head_dim, arch=arch,
                                      images=True, progress=step)
    except Exception as exc:  # a compiler missing or failing must not lose the measured sweep
        return [], f"note: static resources failed ({type(exc).__name__}: {exc}); resources.csv skipped"
    compiled = [dict(r) for r in rows]
    rows = [{k: v for k, v in r.items() if k != "images"} for r in compiled]
    if not rows:
        return [], "note: sandbox.analysis.resources reported nothing for these variants"
    write_csv(Path(run_dir) / "resources.csv", rows)
    step("SASS census (nvdisasm)")
    return rows, _write_census(Path(run_dir) / "sass.csv", [r for r in compiled if "images" in r])


def _write_census(path: Path, compiled: list[dict]) -> str:
    """sass.csv from rows that carry their cubins; a note instead when nvdisasm is missing or fails."""
    if not compiled:
        return ""
    try:
        write_csv(path, sass.census_rows(compiled))
    except Exception as exc:  # the census is extra evidence: never lose the sweep for it
        return f"note: SASS census failed ({type(exc).__name__}: {exc}); sass.csv skipped"
    return ""
