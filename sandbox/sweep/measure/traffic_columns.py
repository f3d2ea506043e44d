"""A sweep point's traffic columns: memory traffic counted on the CPU and the modelled time on a GPU.

    COLUMNS                             what every sweep.csv row carries (empty where nothing was counted)
    wanted(mode, first_shape, on_gpu, block_size)   whether a point gets them under --traffic MODE
    record(row, name, problem, device, config=None)   fills them in for one correct point

The columns are sandbox.analysis.traffic.variant.columns()'s (docs/performance-model.md): DRAM bytes,
ideal bytes, their ratio, global load sectors per request (all loads, and the K/V loads alone), shared
bank conflicts, the model's time, fraction of DRAM bandwidth and binding level on `device`; then
traffic_s (CPU seconds the count took) and traffic_note (why a point has none, or what to know: the
sampled sequences behind the counts, a simulator-only path).

Counted at correct points of variants with a kernel, on the CPU at every point under --traffic auto:
cupy.* on the CPU executor in traffic mode (about 0.3 wall seconds a point over the CPU preset, g++
building the instrumented instantiations included), numba.* under the Numba simulator's capture at a
GPU's thread count (1-2.3 CPU seconds a point at the CPU shapes); together about 2.5 minutes of the CPU
sweep. A GPU sweep has seconds per point of the presets' goal-sized shapes, where one count takes tens
of CPU seconds: there --traffic auto counts the first shape at block size 16 only (the goal's point,
its measured time beside the modelled one), the CUDA C variants only (numba.cuda is in real mode there).
Large problems count the blocks of SAMPLE_SEQS sequences (whole sharing groups) and scale, as
`sandbox traffic` does. A count that fails is a note, never a failed point: the point's correctness and
time stand.
"""
from __future__ import annotations

import time

from ...analysis import gpus
from ...analysis.traffic import variant as traffic_variant
from ...variant import registry, tunables

COLUMNS = [*traffic_variant.COLUMNS, "traffic_s", "traffic_note"]
MODES = ("auto", "all", "none")
# Sequences (whole groups sharing a prompt) whose blocks are counted when every sequence does the same
# work: a quarter of the blocks `sandbox traffic`'s default 8 counts (cupy.rows at the goal shape, block
# size 16: 22 CPU seconds at 8). The counts differ from the whole problem's only in the sectors of the
# per-sequence arrays smaller than a sector and in the partials a full L2 evicts before the reduce reads
# them (there 1.008x the ideal bytes counting 1 sequence, 1.012x counting 8).
SAMPLE_SEQS = 2
GPU_BLOCK_SIZE = 16  # the goals' block size: the one a GPU sweep's --traffic auto counts


def wanted(mode: str, first_shape: bool, on_gpu: bool = False, block_size: int | None = None) -> bool:
    """--traffic auto: every point on the CPU; on a GPU the sweep's first shape at block size 16 (block_size
    None: any); all: every point; none: no point. Points that cannot be counted say why (why_not)."""
    if mode not in MODES:
        raise ValueError(f"--traffic must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "none":
        return False
    if mode == "all" or not on_gpu:
        return True
    return first_shape and (block_size is None or block_size == GPU_BLOCK_SIZE)


def skipped_note(mode: str, name: str) -> str:
    """What traffic_note says at a point wanted() left out."""
    reason = why_not(name)
    if reason is not None:
        return reason
    if mode == "none":
        return "not counted (--traffic none)"
    return (f"not counted: a GPU sweep's --traffic auto counts its first shape at block size {GPU_BLOCK_SIZE} "
            f"(--traffic all counts every point)")


def why_not(name: str) -> str | None:
    """Why `name`'s points cannot be counted in this process (None: they can)."""
    try:
        variant = registry.get(name)
    except ValueError:  # an outside peer of the sweep (flashinfer.api): its launches are a library's, not a kernel here
        return "an outside peer: its kernels are launched by its own library, which the CPU capture cannot run"
    return variant.family_plugin.capture_unavailable()


def record(row: dict, name: str, problem, device: str = gpus.DEFAULT, config: dict | str | None = None) -> None:
    """Fill `row`'s COLUMNS from one count of `name` on `problem` (or say in traffic_note why not).

    The Numba variants' compile census (a real-mode compile in a child process per point) is left out:
    their model takes occupancy as unknown and says so."""
    reason = why_not(name)
    if reason is not None:
        row["traffic_note"] = reason
        return
    if isinstance(config, str):  # a sweep candidate's configuration travels as its label ("threads=64"; tune.py)
        config = tunables.parse(config) or None
    census = registry.get(name).family_plugin.census != "numba_ptx"  # a child process per point: too slow
    started = time.process_time()
    try:
        result = traffic_variant.traffic(name, problem, device, SAMPLE_SEQS, census=census, config=config)
    except Exception as exc:  # the point was checked and timed: a failed count is said, not fatal
        row["traffic_note"] = f"traffic count raised {type(exc).__name__}: {exc}"[:400]
        return
    finally:
        row["traffic_s"] = round(time.process_time() - started, 3)
    row.update(traffic_variant.summary(result))
    row["traffic_note"] = "; ".join(result["notes"])[:400]
