"""The performance model: a kernel's time on a GPU from its counted traffic (docs/performance-model.md).

    predict(kernels, device="h200") -> dict   time_us, fraction_of_dram_bw, bound, assumptions, levels, kernels
    Kernel(name, metrics, num_blocks, threads_per_block, blocks_per_sm, loads_in_flight, flops)

Each kernel gets one time per level; its time is the largest of them plus a launch cost, and the kernels
of a call run one after another:

  dram      DRAM bytes (read + written) / DRAM bandwidth
  l2        L2 sectors x 32 / L2 bandwidth
  l1_shared the busiest SM's L1 and shared-memory wavefronts (global sectors / 4 + shared wavefronts)
            at one per clock; the busiest SM runs ceil(blocks / SMs) blocks (waves and tail)
  latency   Little's law: the busiest SM's global-load bytes / (bytes it keeps in flight / DRAM latency),
            bytes in flight = resident warps x loads in flight per warp x bytes per load request
  fp32      CUDA-core FLOPs (the attention math) / FP32 rate, spread over the SMs like the blocks
  tensor    tensor-core FLOPs (counted MMAs) / tensor rate, spread the same way

So the time is never below any level's bytes / bandwidth. The call is bound by the level that sets the
time of its longest kernel.
"""
from __future__ import annotations

import dataclasses
import math

from . import gpus
from .traffic import metrics as M

LEVELS = ("dram", "l2", "l1_shared", "latency", "fp32", "tensor")
# Global load requests a warp keeps in flight when a variant declares none (its module's LOADS_IN_FLIGHT):
# one, as if every load's use followed it at once. A variant that issues several loads before using
# them (cupy.rows: 8 vectors per lane) says so in LOADS_IN_FLIGHT.
DEFAULT_LOADS_IN_FLIGHT = 1
_GLOBAL_SECTORS = [M.REQUEST_METRICS[(op, "global")][1] for op in ("load", "store", "atomic")]
_SHARED_WAVEFRONTS = [M.REQUEST_METRICS[(op, "shared")][1] for op in ("load", "store", "atomic")]


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str
    metrics: dict               # the whole grid's counts (metrics.METRICS keys)
    num_blocks: int
    threads_per_block: int
    blocks_per_sm: int | None   # occupancy (None: unknown, taken as the warp-slot limit)
    loads_in_flight: int = DEFAULT_LOADS_IN_FLIGHT
    flops: float = 0.0          # CUDA-core FLOPs
    loads_declared: bool = False  # loads_in_flight came from the variant's LOADS_IN_FLIGHT


def _levels(k: Kernel, gpu: gpus.GPU) -> dict:
    m = k.metrics
    blocks = max(k.num_blocks, 1)
    busiest = math.ceil(blocks / gpu.sms)          # blocks the busiest SM runs
    spread = busiest * gpu.sms / blocks            # >= 1: the tail's share of a whole-chip rate
    warps_per_block = math.ceil(k.threads_per_block / 32)
    resident = min(k.blocks_per_sm or 64 // warps_per_block, busiest) * warps_per_block
    wavefronts = sum(m[n] for n in _GLOBAL_SECTORS) / 4 + sum(m[n] for n in _SHARED_WAVEFRONTS)
    load_requests = m[M.GLOBAL_LOAD_REQUESTS]
    load_bytes = m[M.GLOBAL_LOAD_SECTORS] * 32
    latency = 0.0
    if load_requests:
        in_flight = resident * k.loads_in_flight * load_bytes / load_requests
        latency = (load_bytes / blocks * busiest) / (in_flight / gpu.dram_latency_s)
    return dict(
        dram=(m[M.DRAM_READ] + m[M.DRAM_WRITE]) / gpu.dram_bytes_per_s,
        l2=sum(m[n] for n in M.L2_METRICS.values()) * 32 / gpu.l2_bytes_per_s,
        l1_shared=wavefronts / blocks * busiest / gpu.clock_hz,
        latency=latency,
        fp32=k.flops / gpu.fp32_flops_per_s * spread,
        tensor=m["sandbox__tensor_flops.sum"] / gpu.tensor_flops_per_s * spread,
    )


def predict(kernels: list[Kernel], device="h200") -> dict:
    """The modelled time of a call's kernels (run one after another) on `device`."""
    gpu = gpus.get(device)
    rows, total = [], 0.0
    for k in kernels:
        levels = _levels(k, gpu)
        bound = max(levels, key=levels.get)
        seconds = levels[bound] + gpu.launch_s
        total += seconds
        rows.append(dict(name=k.name, time_us=seconds * 1e6, bound=bound, loads_in_flight=k.loads_in_flight,
                         levels_us={n: v * 1e6 for n, v in levels.items()}))
    dram = sum(k.metrics[M.DRAM_READ] + k.metrics[M.DRAM_WRITE] for k in kernels)
    longest = max(rows, key=lambda r: r["time_us"]) if rows else None
    return dict(
        time_us=total * 1e6,
        fraction_of_dram_bw=(dram / total) / gpu.dram_bytes_per_s if total else 0.0,
        bound=longest["bound"] if longest else "none",
        levels_us={n: sum(r["levels_us"][n] for r in rows) for n in LEVELS},
        kernels=rows,
        assumptions=assumptions(gpu, kernels),
    )


def assumptions(gpu: gpus.GPU, kernels: list[Kernel]) -> list[str]:
    """What the model takes for granted, in words a reader can check."""
    out = [
        f"device {gpu.describe()}",
        f"DRAM latency {gpu.dram_latency_s * 1e9:.0f} ns, launch cost {gpu.launch_s * 1e6:.1f} us per kernel; "
        f"L2 bandwidth {gpu.l2_bytes_per_s / 1e12:.1f} TB/s is not published by NVIDIA (see sandbox/analysis/gpus.py)",
        "each level runs at its peak and the levels overlap perfectly: a kernel takes its slowest level's time",
        "blocks spread evenly: the busiest SM runs ceil(blocks / SMs) of them, each with the average block's counts",
        "L1 keeps nothing between requests: every requested sector goes to L2 (an upper bound on L2 traffic)",
    ]
    for k in kernels:
        if k.blocks_per_sm is None:
            out.append(f"{k.name}: occupancy unknown (no compile census): taken as 64 warps per SM")
        if k.loads_declared:
            out.append(f"{k.name}: {k.loads_in_flight} global load requests in flight per warp (the variant's "
                       "LOADS_IN_FLIGHT)")
        else:
            out.append(f"{k.name}: {k.loads_in_flight} global load request in flight per warp (the default; "
                       "the variant declares no LOADS_IN_FLIGHT)")
    return out
