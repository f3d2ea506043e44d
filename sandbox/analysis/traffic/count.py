"""From raw captures to Nsight Compute's metrics: per launch, per block, per site, and for a variant's call.

    count(launches, device="h200") -> CallTraffic    the L2 model spans the launches, in order
    CallTraffic.metrics                              the launches summed (metrics.METRICS keys)
    CallTraffic.launches[i] -> Traffic               .metrics, .blocks (one dict per block, launch order,
                                                     summing to .metrics), .sites (one row per site), .notes

A site row: file, line, chain, op, space, target, simulator_only; requests, lanes_per_request, bytes_per_request;
global: sectors, sectors_per_request; shared: wavefronts, wavefronts_per_request,
ideal_wavefronts_per_request, bank_conflicts.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import gpus
from . import l2, metrics as M
from sandbox.cpucuda.raw import COUNTERS, OPS, RawLaunch


@dataclasses.dataclass
class Traffic:
    """One launch's counts. `block_metrics` is structured, one int64 field per metric, [num_blocks]."""

    kernel: str
    grid: tuple
    block: tuple
    block_metrics: np.ndarray
    sites: list
    notes: list

    @property
    def metrics(self) -> dict:
        return {name: int(self.block_metrics[name].sum()) for name in M.METRICS}

    @property
    def blocks(self) -> list:
        """One dict of metrics per block, in launch order (blockIdx.x fastest)."""
        return [dict(zip(M.METRICS, map(int, row))) for row in self.block_metrics.tolist()]

    @property
    def num_blocks(self) -> int:
        return len(self.block_metrics)


@dataclasses.dataclass
class CallTraffic:
    """A variant call: its launches in order, counted with one L2 model across them."""

    device: gpus.GPU
    launches: list

    @property
    def metrics(self) -> dict:
        total = M.zero()
        for launch in self.launches:
            for name, value in launch.metrics.items():
                total[name] += value
        return total

    @property
    def notes(self) -> list:
        return list(dict.fromkeys(n for launch in self.launches for n in launch.notes))


BLOCK_DTYPE = np.dtype([(name, np.int64) for name in M.METRICS])


def _site_rows(raw: RawLaunch) -> list:
    """One row per distinct Site: instructions the compiler duplicated (an unrolled loop's copies) share one."""
    table = raw.site_block
    groups: dict = {}
    for index, site in enumerate(raw.sites):
        groups.setdefault(site, []).append(index)
    rows = []
    for site, indices in groups.items():
        mine = table[np.isin(table["site"], indices)]
        requests = int(mine["requests"].sum())
        if not requests:
            continue
        row = dict(file=site.file, line=site.line, chain=list(site.chain), op=site.op, space=site.space,
                   target=site.target, simulator_only=site.simulator_only, requests=requests,
                   lanes_per_request=float(mine["lanes"].sum()) / requests,
                   bytes_per_request=float(mine["bytes"].sum()) / requests)
        if site.space == "global":
            sectors = int(mine["sectors"].sum())
            row.update(sectors=sectors, sectors_per_request=sectors / requests)
        else:
            wavefronts, ideal = int(mine["wavefronts"].sum()), int(mine["ideal_wavefronts"].sum())
            row.update(wavefronts=wavefronts, wavefronts_per_request=wavefronts / requests,
                       ideal_wavefronts_per_request=ideal / requests, bank_conflicts=wavefronts - ideal)
        rows.append(row)
    return rows


def _block_metrics(raw: RawLaunch, dram_read: np.ndarray, dram_write: np.ndarray) -> np.ndarray:
    n = raw.num_blocks
    out = np.zeros(n, BLOCK_DTYPE)
    table = raw.site_block
    if len(table) and (table["block"].min() < 0 or table["block"].max() >= n):
        raise ValueError(f"{raw.kernel}: site_block names blocks outside 0..{n - 1}")
    if len(table) and (table["site"].min() < 0 or table["site"].max() >= len(raw.sites)):
        raise ValueError(f"{raw.kernel}: site_block names sites outside 0..{len(raw.sites) - 1}")
    site_op = np.array([s.op for s in raw.sites] or [""])[table["site"]]
    site_space = np.array([s.space for s in raw.sites] or [""])[table["site"]]

    def per_block(mask, values):
        return np.bincount(table["block"][mask], weights=values[mask], minlength=n).astype(np.int64)

    for op in OPS:
        for space in ("global", "shared"):
            requests, cost, conflicts = M.REQUEST_METRICS[(op, space)]
            mask = (site_op == op) & (site_space == space)
            out[requests] = per_block(mask, table["requests"])
            if space == "global":
                out[cost] = per_block(mask, table["sectors"])
                out[M.L2_METRICS[op]] = out[cost]
            else:
                out[cost] = per_block(mask, table["wavefronts"])
                out[conflicts] = out[cost] - per_block(mask, table["ideal_wavefronts"])
    out[M.DRAM_READ] = dram_read
    out[M.DRAM_WRITE] = dram_write
    for name in COUNTERS:
        if name in raw.counters:
            out[name] = np.asarray(raw.counters[name], np.int64)
    return out


def count(launches: list[RawLaunch], device="h200") -> CallTraffic:
    """Count a variant call's launches (in launch order) for `device`'s L2 (sandbox.analysis.gpus)."""
    gpu = gpus.get(device)
    dram = l2.dram_bytes([r.sectors for r in launches], [r.num_blocks for r in launches], gpu.l2_bytes)
    out = []
    for r, (read, write) in zip(launches, dram):
        if r.represented_by is not None:  # blocks that did not run take their representative's DRAM bytes
            read, write = read[r.represented_by], write[r.represented_by]
        out.append(Traffic(r.kernel, tuple(r.grid), tuple(r.block), _block_metrics(r, read, write), _site_rows(r),
                           list(r.notes)))
    return CallTraffic(gpu, out)
