"""Decode attention time measured by a GPU sweep (``python -m sandbox sweep``), fitted per block size.

From ``RUN/sweep.csv`` (columns: ``sandbox.sweep.measure.run.COLUMNS``) the rows that count are correct
(``status`` ok) GPU timings (``backend`` gpu, CUDA events) of plain decode shapes: one query token,
no attention options, no shared prefix, a KV dtype of the simulated model's width. At each shape and
block size the fastest variant stands for the engine's kernel; per block size a least-squares line
``time_us = a + bytes / (bw * 1e3)`` (bw in GB/s; through the origin when there is one shape, or when
the intercept comes out negative) gives one layer's attention time from the KV bytes it reads. A
contiguous layout (block size 0) uses the largest block size measured.
"""
from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

from sandbox.memory.budget import ModelShape
from sandbox.serving.cost import AnalyticCost, StepBatch
from sandbox.errors import RefusedRequest

_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept us, slope us/byte) of time against bytes; see the module docstring."""
    x = np.array([p[0] for p in points])
    t = np.array([p[1] for p in points])
    if len(set(x.tolist())) >= 2:
        slope, intercept = np.polyfit(x, t, 1)
        if intercept >= 0 and slope > 0:
            return float(intercept), float(slope)
    return 0.0, float((t * x).sum() / (x * x).sum())


def load_fits(run_dir: Path, kv_dtype_bytes: int) -> tuple[dict[int, tuple[float, float]], dict[int, int]]:
    """{block_size: (a_us, b_us_per_byte)} and {block_size: shapes fitted}; ValueError when unusable."""
    path = Path(run_dir) / "sweep.csv"
    if not path.is_file():
        raise RefusedRequest(f"--step-cost sweep:{run_dir}: no sweep.csv there (a run folder of "
                             "python -m sandbox sweep)")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    backends = sorted({r.get("backend") or "?" for r in rows})
    gpu = [r for r in rows if r.get("backend") == "gpu" and r.get("status") == "ok"]
    if not gpu:
        raise RefusedRequest(f"--step-cost sweep:{run_dir}: no correct GPU rows (backends here: "
                             f"{', '.join(backends)}); cpu-sim / cpu-executor / cpu-numpy rows are CPU emulation, "
                             "whose times are a simulator's wall clock, not GPU times: run python -m sandbox sweep on "
                             "a GPU or use --step-cost analytic")
    best: dict[tuple[int, str], tuple[float, float]] = {}
    for r in gpu:
        plain = (r.get("query_len") in ("", "1") and not r.get("options") and r.get("group_size") in ("", "0")
                 and r.get("problem") in (None, "", "decode")  # an MLA row (sweep.csv's problem column) is no decode
                 and _ITEMSIZE.get(r.get("kv_dtype") or r.get("dtype"), -1) == kv_dtype_bytes)
        if not plain or not r.get("block_size") or not r.get("time_us") or not r.get("bytes"):
            continue
        key = (int(r["block_size"]), r["shape"])
        point = (float(r["bytes"]), float(r["time_us"]))
        if key not in best or point[1] < best[key][1]:
            best[key] = point
    by_size: dict[int, list] = defaultdict(list)
    for (bs, _), point in best.items():
        by_size[bs].append(point)
    if not by_size:
        raise RefusedRequest(f"--step-cost sweep:{run_dir}: no plain decode GPU rows with a {kv_dtype_bytes}-byte KV "
                             "dtype (one query token, no options, no shared prefix)")
    return {bs: _fit(p) for bs, p in sorted(by_size.items())}, {bs: len(p) for bs, p in by_size.items()}


class SweepCost(AnalyticCost):
    """Decode attention from a GPU sweep's fits; linear and prefill parts analytic."""

    def __init__(self, run_dir, shape: ModelShape, fixed_ms: float | None = None, overhead_ms: float = 0.0):
        super().__init__(shape, fixed_ms, overhead_ms)
        self.run_dir = Path(run_dir)
        self.fits, counts = load_fits(self.run_dir, shape.kv_dtype_bytes)
        fits = "; ".join(f"bs {bs}: {a:.1f} us + bytes / {1e-3 / b:,.0f} GB/s ({counts[bs]} shapes)"
                         for bs, (a, b) in self.fits.items())
        self.source = f"GPU sweep {self.run_dir} (decode attention per layer, {fits}); rest {self.source}"

    def check_block_sizes(self, block_sizes) -> None:
        missing = [bs for bs in block_sizes if bs not in self.fits]
        if missing:
            raise RefusedRequest(f"--step-cost sweep:{self.run_dir} has GPU fits for block sizes "
                                 f"{', '.join(map(str, self.fits))} only; --block-sizes asks for "
                                 f"{', '.join(map(str, missing))}")

    def decode_time(self, b: StepBatch) -> float:
        if not b.decode_tokens:
            return 0.0
        a_us, slope = self.fits[b.block_size] if b.block_size else self.fits[max(self.fits)]
        layer_bytes = (b.decode_context + b.decode_tokens) * self.shape.kv_bytes_per_token / self.shape.num_layers
        return self.shape.num_layers * (a_us + slope * layer_bytes) * 1e-6
