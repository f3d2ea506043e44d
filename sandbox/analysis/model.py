"""The performance model: a kernel's time on a GPU from its counted traffic (docs/performance-model.md).

    predict(kernels, device="h200") -> dict   time_us, fraction_of_dram_bw (of nominal), fraction_of_achievable
                                              (of the measured read stream), bound, assumptions, levels, kernels
    Kernel(name, metrics, num_blocks, threads_per_block, blocks_per_sm, loads_in_flight, flops, loads_source,
           loads_per_wait)

Each kernel gets one time per level; its time is the largest of them plus its fixed costs, and the kernels of
a call run one after another:

  dram      DRAM bytes (read + written) / the measured read stream (never the datasheet's figure)
  l2        L2 sectors x 32 / L2 bandwidth
  l1_shared the busiest SM's L1 and shared-memory wavefronts (global sectors / 4 + shared wavefronts)
            at one per clock; the busiest SM runs ceil(blocks / SMs) blocks (waves and tail)
  latency   Little's law with queueing, per block slot of the busiest SM: each block waits
            (its warps' load requests / loads per wait) memory latencies and pays the block overhead; the
            latency is the idle DRAM latency + queue x rho / (1 - rho), rho = the DRAM bandwidth this gives /
            the read stream (solved for the fixed point), the L2's idle latency for the share of loaded bytes
            that L2 serves (loaded bytes beyond the DRAM reads); the slots run ceil(blocks there / resident)
            rounds
  blocks    blocks / the GPU's block launch rate
  fp32      CUDA-core FLOPs (the attention math) / FP32 rate, spread over the SMs like the blocks
  tensor    tensor-core FLOPs (counted MMAs) / tensor rate, spread the same way

Fixed costs per kernel: the launch (back to back in a stream) and, for a kernel bound by a bandwidth, the
ramp-up (one idle DRAM latency before the first bytes arrive; the latency level already holds it). So the
time is never below any level's bytes / bandwidth, and DRAM is never modelled faster than measured.
"""
from __future__ import annotations

import dataclasses
import math

from . import gpus
from .traffic import metrics as M

LEVELS = ("dram", "l2", "l1_shared", "latency", "blocks", "fp32", "tensor")
BANDWIDTH_LEVELS = ("dram", "l2", "l1_shared", "fp32", "tensor")
# What the model takes when a kernel's SASS cannot be read (the Numba simulator's capture without a census):
# one load per wait, as if each load's use followed it at once.
ASSUMED_LOADS_IN_FLIGHT = 1
_GLOBAL_SECTORS = [M.REQUEST_METRICS[(op, "global")][1] for op in ("load", "store", "atomic")]
_SHARED_WAVEFRONTS = [M.REQUEST_METRICS[(op, "shared")][1] for op in ("load", "store", "atomic")]
_RHO_MAX = 0.999  # the queue's utilisation never reaches 1 (the latency would be infinite)


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str
    metrics: dict               # the whole grid's counts (metrics.METRICS keys)
    num_blocks: int
    threads_per_block: int
    blocks_per_sm: int | None   # occupancy (None: unknown, taken as the warp-slot limit)
    loads_in_flight: int = ASSUMED_LOADS_IN_FLIGHT  # independent global loads back to back (the SASS reading)
    flops: float = 0.0          # CUDA-core FLOPs
    loads_source: str = "assumed"  # "sass" (sandbox.analysis.loads_in_flight) or why it was assumed
    loads_per_wait: float | None = None  # global loads per latency waited (None: loads_in_flight)

    @property
    def per_wait(self) -> float:
        return float(self.loads_per_wait if self.loads_per_wait is not None else self.loads_in_flight)


def _latency(k: Kernel, gpu: gpus.GPU, busiest: int, resident_blocks: int, load_scale: float = 1.0,
             per_wait_delta: float = 0.0) -> float:
    """The latency level (seconds): rounds x (block overhead + waits x queued latency), see the module docstring."""
    blocks = max(k.num_blocks, 1)
    rounds = math.ceil(busiest / resident_blocks)
    requests = k.metrics[M.GLOBAL_LOAD_REQUESTS]
    if not requests:
        return rounds * gpu.block_overhead_s
    warps_per_block = math.ceil(k.threads_per_block / 32)
    per_wait = max(k.per_wait + per_wait_delta, min(k.per_wait, 1.0))  # a what-if never goes below one per wait
    waits_per_block = requests / blocks / (warps_per_block * per_wait)
    bytes_per_block = k.metrics[M.GLOBAL_LOAD_SECTORS] * 32 / blocks
    slots = min(blocks, gpu.sms) * resident_blocks   # block slots busy at once, GPU-wide
    # Loads whose sectors L2 holds (another block read them first) wait the L2's latency and do not queue at DRAM.
    from_dram = min(1.0, k.metrics[M.DRAM_READ] / (bytes_per_block * blocks)) if bytes_per_block else 1.0
    idle = (from_dram * gpu.dram_latency_s + (1 - from_dram) * gpu.l2_latency_s) * load_scale

    def bandwidth(latency: float) -> float:
        return slots * bytes_per_block / (gpu.block_overhead_s + waits_per_block * latency)

    def queued(latency: float) -> float:
        rho = min(bandwidth(latency) * from_dram / gpu.read_bytes_per_s, _RHO_MAX)
        return idle + from_dram * gpu.queue_latency_s * rho / (1 - rho)

    lo, hi = idle, idle + gpu.queue_latency_s / (1 - _RHO_MAX)
    for _ in range(60):  # queued() falls as the latency grows: bisect latency = queued(latency)
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if queued(mid) > mid else (lo, mid)
    return rounds * (gpu.block_overhead_s + waits_per_block * hi)


def _levels(k: Kernel, gpu: gpus.GPU, latency_scale: float = 1.0, per_wait_delta: float = 0.0,
            dram_bytes_per_s: float | None = None) -> dict:
    m = k.metrics
    blocks = max(k.num_blocks, 1)
    busiest = math.ceil(blocks / gpu.sms)          # blocks the busiest SM runs
    spread = busiest * gpu.sms / blocks            # >= 1: the tail's share of a whole-chip rate
    warps_per_block = math.ceil(k.threads_per_block / 32)
    resident = max(1, min(k.blocks_per_sm or 64 // warps_per_block, busiest))
    wavefronts = sum(m[n] for n in _GLOBAL_SECTORS) / 4 + sum(m[n] for n in _SHARED_WAVEFRONTS)
    return dict(
        dram=(m[M.DRAM_READ] + m[M.DRAM_WRITE]) / (dram_bytes_per_s or gpu.read_bytes_per_s),
        l2=sum(m[n] for n in M.L2_METRICS.values()) * 32 / gpu.l2_bytes_per_s,
        l1_shared=wavefronts / blocks * busiest / gpu.clock_hz,
        latency=_latency(k, gpu, busiest, resident, latency_scale, per_wait_delta),
        blocks=blocks / gpu.block_rate_per_s,
        fp32=k.flops / gpu.fp32_flops_per_s * spread,
        tensor=m["sandbox__tensor_flops.sum"] / gpu.tensor_flops_per_s * spread,
    )


def kernel_time(levels: dict, gpu: gpus.GPU) -> tuple[float, str, float]:
    """(seconds, binding level, ramp seconds) of one kernel from its levels, with its fixed costs."""
    bound = max(levels, key=levels.get)
    ramp = gpu.dram_latency_s if bound in BANDWIDTH_LEVELS and levels[bound] > 0 else 0.0
    return levels[bound] + ramp + gpu.launch_s, bound, ramp


def predict(kernels: list[Kernel], device="h200", *, latency_scale: float = 1.0, per_wait_delta: float = 0.0,
            dram_bytes_per_s: float | None = None) -> dict:
    """The modelled time of a call's kernels (run one after another) on `device`.

    latency_scale, per_wait_delta, dram_bytes_per_s: what-ifs for `traffic --sensitivity` (the DRAM latency
    scaled, loads per wait moved, another DRAM ceiling such as the copy stream); the defaults are the model.
    """
    gpu = gpus.get(device)
    rows, total = [], 0.0
    for k in kernels:
        levels = _levels(k, gpu, latency_scale, per_wait_delta, dram_bytes_per_s)
        seconds, bound, ramp = kernel_time(levels, gpu)
        total += seconds
        rows.append(dict(name=k.name, time_us=seconds * 1e6, bound=bound, loads_in_flight=k.loads_in_flight,
                         loads_per_wait=round(k.per_wait, 3), loads_in_flight_source=k.loads_source,
                         ramp_us=ramp * 1e6, launch_us=gpu.launch_s * 1e6,
                         levels_us={n: v * 1e6 for n, v in levels.items()}))
    dram = sum(k.metrics[M.DRAM_READ] + k.metrics[M.DRAM_WRITE] for k in kernels)
    longest = max(rows, key=lambda r: r["time_us"]) if rows else None
    return dict(
        time_us=total * 1e6,
        fraction_of_dram_bw=(dram / total) / gpu.dram_bytes_per_s if total else 0.0,
        fraction_of_achievable=(dram / total) / gpu.read_bytes_per_s if total else 0.0,
        bound=longest["bound"] if longest else "none",
        levels_us={n: sum(r["levels_us"][n] for r in rows) for n in LEVELS},
        kernels=rows,
        assumptions=assumptions(gpu, kernels),
    )


def assumptions(gpu: gpus.GPU, kernels: list[Kernel]) -> list[str]:
    """What the model takes for granted, in words a reader can check."""
    out = [
        f"device {gpu.describe()}",
        f"DRAM ceiling {gpu.read_bytes_per_s / 1e12:.2f} TB/s, the measured read stream "
        f"({gpu.sources['read_bytes_per_s']}); nominal {gpu.dram_bytes_per_s / 1e12:.2f} TB/s",
        f"DRAM latency {gpu.dram_latency_s * 1e9:.0f} ns idle + {gpu.queue_latency_s * 1e9:.0f} ns x rho / (1 - rho) "
        f"as the memory system fills, {gpu.block_overhead_s * 1e9:.0f} ns per block, launch "
        f"{gpu.launch_s * 1e6:.2f} us per kernel (back to back in a stream); L2 bandwidth "
        f"{gpu.l2_bytes_per_s / 1e12:.1f} TB/s is not published by NVIDIA (see sandbox/analysis/gpus.py)",
        "each level runs at its peak and the levels overlap perfectly: a kernel takes its slowest level's time",
        "blocks spread evenly: the busiest SM runs ceil(blocks / SMs) of them, each with the average block's counts",
        "L1 keeps nothing between requests: every requested sector goes to L2 (an upper bound on L2 traffic)",
    ]
    for k in kernels:
        if k.blocks_per_sm is None:
            out.append(f"{k.name}: occupancy unknown (no compile census): taken as 64 warps per SM")
        if k.loads_source == "sass":
            out.append(f"{k.name}: {k.loads_in_flight} global loads back to back, {k.per_wait:.2f} per wait "
                       "(read from its SASS)")
        else:
            out.append(f"{k.name}: {k.per_wait:g} global load per wait assumed ({k.loads_source})")
    return out
