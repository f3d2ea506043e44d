#!/usr/bin/env python3
"""Fit the model's queueing term and block overhead to the GH200 stream sweep (sandbox/analysis/gpus.py's
queue_latency_s and block_overhead_s), and print them: `python scripts/fit_queueing.py`.

The points are the default model-check table's gh200 micro.read rows at 2 blocks per SM (gpu-benches' gpu-stream,
256 / 512 / 1024 / 2048 threads per SM). Each is modelled as the model models it (sandbox.analysis.model.predict on
the counts micro.read's kernel produces: one 8-byte load per thread, 8 sectors per warp request, every byte from
DRAM), with candidate figures in place of the table's; the pair with the least squared relative error wins (a
grid, refined three times). tests/analysis/test_model_check.py holds the table's figures equal to this fit.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.analysis import gpus, model, model_check  # noqa: E402
from sandbox.analysis.traffic import metrics as M  # noqa: E402


def stream_kernel(total_bytes: int, threads: int, blocks_per_sm: int) -> model.Kernel:
    """micro.read's counts for one 8-byte load per thread (what the executor counts, written out)."""
    elements = math.ceil(total_bytes / 8)
    blocks = math.ceil(elements / threads)
    warps = blocks * math.ceil(threads / 32)
    m = M.zero()
    m[M.DRAM_READ] = blocks * threads * 8
    m[M.GLOBAL_LOAD_REQUESTS] = warps
    m[M.GLOBAL_LOAD_SECTORS] = warps * 8
    m["lts__t_sectors_op_read.sum"] = warps * 8
    return model.Kernel("micro_read<8, 1>", m, blocks, threads, blocks_per_sm, 1, 0.0, "sass", 1.0)


def points(table=model_check.DEFAULT_TABLE, device: str = "gh200") -> list[tuple[model.Kernel, float]]:
    rows = [r for r in model_check.read_table(table) if r.device == device and r.variant == "micro.read"
            and r.config.get("blocks_per_sm") == 2 and r.config.get("loads") == 1]
    return [(stream_kernel(int(r.shape), r.config["threads"], 2), r.measured_us) for r in rows]


def cost(gpu: gpus.GPU, data) -> float:
    return sum((model.predict([k], gpu)["time_us"] / measured - 1) ** 2 for k, measured in data)


def fit(device: str = "gh200") -> tuple[float, float]:
    """(queue_latency_s, block_overhead_s) rounded to 3 significant digits."""
    base, data = gpus.get(device), points(device=device)
    queue, block, span = 100e-9, 200e-9, 100e-9
    for _ in range(4):
        grid = [(queue + span * i / 10, block + span * j / 10) for i in range(-10, 11) for j in range(-10, 11)]
        grid = [(q, b) for q, b in grid if q > 0 and b >= 0]
        queue, block = min(grid, key=lambda qb: cost(dataclasses.replace(base, queue_latency_s=qb[0],
                                                                         block_overhead_s=qb[1]), data))
        span /= 10
    return float(f"{queue:.3g}"), float(f"{block:.3g}")


if __name__ == "__main__":
    queue, block = fit()
    print(f"queue_latency_s = {queue:.3g}  block_overhead_s = {block:.3g}  (gpus.py has "
          f"{gpus.get('gh200').queue_latency_s:.3g} and {gpus.get('gh200').block_overhead_s:.3g})")
