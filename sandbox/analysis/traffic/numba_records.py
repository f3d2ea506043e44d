"""Numba capture's per-block arithmetic: records in an interleaving-independent order, and the rows of
represented blocks (pure NumPy, no simulator)."""
from __future__ import annotations

import numpy as np

from .numba_traced import Views
from sandbox.cpucuda.raw import SITE_BLOCK_DTYPE
from .requests import RECORD_DTYPE


def block_records(records: list, block: int, widths: np.ndarray, views: Views, target_name) -> np.ndarray:
    """One block's (thread, epoch, site, view, index) tuples as RECORD_DTYPE rows, in an execution
    order that does not depend on how the simulator interleaved its threads: by epoch, warp, the
    access's place in its thread's program order within the epoch, lane."""
    out = np.zeros(len(records), RECORD_DTYPE)
    if not records:
        return out
    thread, epoch, site, view, idx = zip(*records)
    thread, epoch, site = (np.array(c, np.int64) for c in (thread, epoch, site))
    by_thread = np.lexsort((epoch, thread))  # stable: a thread's records keep their program order
    first = np.ones(len(records), bool)
    first[1:] = (thread[by_thread][1:] != thread[by_thread][:-1]) | (epoch[by_thread][1:] != epoch[by_thread][:-1])
    index = np.arange(len(records))
    position = np.empty(len(records), np.int64)
    position[by_thread] = index - np.maximum.accumulate(np.where(first, index, 0))
    out["block"] = block
    out["warp"], out["lane"] = thread // 32, thread % 32
    out["epoch"], out["site"] = epoch, site
    out["address"] = views.addresses(np.array(view, np.int64), idx, target_name)
    out["width"] = widths[site]
    return out[np.lexsort((out["lane"], position, out["warp"], epoch))]


def spread_rows(rows: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Rows for every block: each represented block gets a copy of its representative's rows."""
    order = np.argsort(rows["block"], kind="stable")
    rows = rows[order]
    bounds = np.searchsorted(rows["block"], np.arange(len(blocks) + 1))
    take = np.concatenate([np.arange(bounds[r], bounds[r + 1]) for r in blocks]) if len(blocks) else []
    out = rows[np.asarray(take, np.int64)]
    out["block"] = np.repeat(np.arange(len(blocks)), np.diff(bounds)[blocks])
    return out


def merge_rows(rows: np.ndarray) -> np.ndarray:
    """One row per (block, site), sums of the rows that share them, ordered by block then site."""
    if not len(rows):
        return rows
    order = np.lexsort((rows["site"], rows["block"]))
    rows = rows[order]
    first = np.ones(len(rows), bool)
    first[1:] = (rows["block"][1:] != rows["block"][:-1]) | (rows["site"][1:] != rows["site"][:-1])
    starts = np.flatnonzero(first)
    out = rows[starts].copy()
    for field in SITE_BLOCK_DTYPE.names[2:]:
        out[field] = np.add.reduceat(rows[field], starts)
    return out
