"""Warp-level requests from one simulated block's element accesses, vectorised.

Input: the block's records, one per element access, ``(thread, epoch, site, address)`` in the order
the simulator's threads appended them (each thread's own records in program order, the threads
interleaved arbitrarily). A warp-level request is the lanes of one warp (thread // 32) executing
one site for the k-th time in one barrier epoch (the simulator has no warp operations, so a warp
only converges at a barrier). Grouping by that key, never by time, makes the result independent of
how the simulator interleaved the threads.

Per request: global accesses count their distinct 32-byte sectors (each with the mask of bytes
touched); shared accesses count wavefronts, the most distinct 4-byte words any one of the 32 banks
sees, against the ideal ceil(bytes / 128). The sector stream lists each global request's sectors
in a deterministic execution order: by epoch, warp, then the request's earliest position in its
lanes' program order.
"""
from __future__ import annotations

import numpy as np

from .raw import SECTOR_DTYPE, SITE_BLOCK_DTYPE

SECTOR_BYTES = 32
WORD_BYTES = 4
BANKS = 32
WAVEFRONT_BYTES = 128


def group_block(records: list, block: int, widths: np.ndarray, shared: np.ndarray, reads: np.ndarray,
                writes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, sectors) of one block.

    records  list of (thread, epoch, site, address) tuples
    widths   int64 [sites]: bytes per element access of each site
    shared   bool [sites]: the site accesses shared memory (else global)
    reads, writes  bool [sites]: the site loads / stores (an atomic does both)
    Returns SITE_BLOCK_DTYPE rows (one per site with requests, `site` = the record's site id) and the
    SECTOR_DTYPE stream of the block's global requests.
    """
    if not records:
        return np.zeros(0, SITE_BLOCK_DTYPE), np.zeros(0, SECTOR_DTYPE)
    rec = np.array(records, dtype=np.int64)
    thread, epoch, site, address = rec[:, 0], rec[:, 1], rec[:, 2], rec[:, 3]
    k = rank_within(thread, epoch, site)      # the k-th execution of the site by the thread in the epoch
    position = rank_within(thread, epoch)     # where in the thread's epoch it happened
    warp = thread // 32

    order = np.lexsort((k, site, epoch, warp))
    first = _group_starts(order, warp, epoch, site, k)
    request = np.empty(len(rec), np.int64)
    request[order] = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    r_site, r_epoch, r_warp, r_k = (a[order][starts] for a in (site, epoch, warp, k))
    r_lanes = np.diff(np.append(starts, len(rec)))
    r_position = np.minimum.reduceat(position[order], starts)
    r_bytes = r_lanes * widths[r_site]
    num_requests = len(starts)

    width = widths[site]
    in_shared = shared[site]
    g = np.flatnonzero(~in_shared)
    g_request, g_sector, g_mask = distinct_pieces(request[g], address[g], width[g], SECTOR_BYTES)
    r_sectors = np.bincount(g_request, minlength=num_requests)
    s = np.flatnonzero(in_shared)
    s_request, s_word, _ = distinct_pieces(request[s], address[s], width[s], WORD_BYTES)
    r_wavefronts = np.bincount(s_request * BANKS + s_word % BANKS,
                               minlength=num_requests * BANKS).reshape(num_requests, BANKS).max(axis=1)
    r_ideal = np.where(shared[r_site], -(-r_bytes // WAVEFRONT_BYTES), 0)

    rows = _rows_per_site(block, r_site, r_lanes, r_bytes, r_sectors, r_wavefronts, r_ideal, len(widths))
    rank = np.empty(num_requests, np.int64)
    rank[np.lexsort((r_k, r_site, r_position, r_warp, r_epoch))] = np.arange(num_requests)
    stream = np.lexsort((g_sector, rank[g_request]))
    sectors = np.zeros(len(stream), SECTOR_DTYPE)
    sectors["block"] = block
    sectors["sector"] = g_sector[stream]
    sectors["mask"] = g_mask[stream]
    sectors["read"] = reads[r_site[g_request[stream]]]
    sectors["write"] = writes[r_site[g_request[stream]]]
    return rows, sectors


def rank_within(*keys: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements (in array order) share all its keys."""
    order = np.lexsort(keys[::-1])  # stable: equal keys keep their array order
    first = _group_starts(order, *keys)
    index = np.arange(len(order))
    start = np.maximum.accumulate(np.where(first, index, 0))
    rank = np.empty(len(order), np.int64)
    rank[order] = index - start
    return rank


def _group_starts(order: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """bool [n]: element i of the sorted order starts a new group of equal keys."""
    first = np.zeros(len(order), bool)
    if len(order):
        first[0] = True
    for key in keys:
        ordered = key[order]
        first[1:] |= ordered[1:] != ordered[:-1]
    return first


def distinct_pieces(request: np.ndarray, address: np.ndarray, width: np.ndarray, piece: int):
    """The distinct (request, piece) pairs the accesses touch, pieces being `piece`-byte aligned
    units (sectors, or shared-memory words): (request, piece index, byte mask within the piece)."""
    first = address // piece
    count = (address + width - 1) // piece - first + 1
    which = np.repeat(np.arange(len(address)), count)
    index = first[which] + np.arange(len(which)) - np.repeat(np.cumsum(count) - count, count)
    lo = np.maximum(address[which], index * piece) - index * piece
    hi = np.minimum(address[which] + width[which], (index + 1) * piece) - index * piece
    mask = ((np.int64(1) << (hi - lo)) - 1) << lo
    req = request[which]
    order = np.lexsort((index, req))
    first_of = _group_starts(order, req, index)
    starts = np.flatnonzero(first_of)
    masks = np.bitwise_or.reduceat(mask[order], starts) if len(starts) else mask[:0]
    return req[order][starts], index[order][starts], masks.astype(np.uint32)


def _rows_per_site(block, r_site, r_lanes, r_bytes, r_sectors, r_wavefronts, r_ideal, num_sites):
    """Sum the requests of each site into one SITE_BLOCK_DTYPE row (sites without requests left out)."""
    def per_site(values):
        return np.bincount(r_site, weights=values, minlength=num_sites).astype(np.int64)

    requests = np.bincount(r_site, minlength=num_sites)
    used = np.flatnonzero(requests)
    rows = np.zeros(len(used), SITE_BLOCK_DTYPE)
    rows["block"] = block
    rows["site"] = used
    rows["requests"] = requests[used]
    for field, values in (("lanes", r_lanes), ("bytes", r_bytes), ("sectors", r_sectors),
                          ("wavefronts", r_wavefronts), ("ideal_wavefronts", r_ideal)):
        rows[field] = per_site(values)[used]
    return rows
