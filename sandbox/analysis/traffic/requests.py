"""Per-lane accesses grouped into warp-level requests, and what one request costs: sectors and wavefronts.

    global_request(addresses, widths) -> (sectors uint64 [k], masks uint32 [k])   one global request
    shared_request(addresses, widths) -> (wavefronts, ideal)                       one shared request
    group(records, sites) -> (site_block SITE_BLOCK_DTYPE [rows], sectors SECTOR_DTYPE [n])

A capture that sees each lane's accesses (the Numba simulator's) fills RECORD_DTYPE rows in execution
order and calls group(); the CPU executor does the same grouping in C (sandbox/cpucuda/traffic_recorder.cpp)
because its launches touch too many bytes for per-lane rows. Both follow raw.py's definitions:

  request   the lanes of one warp that execute one site for the k-th time since the warp last converged
            (RECORD_DTYPE's `epoch`: the capture bumps it at every barrier and full-warp warp operation);
  sectors   the distinct 32-byte pieces the lanes' bytes fall in; each with the mask of bytes touched;
  wavefronts  the most distinct 4-byte words any one of the 32 banks holds (bank = word % 32); the ideal
            is ceil(distinct bytes / 128), so a broadcast costs 1 and conflicts are never negative.
"""
from __future__ import annotations

import numpy as np

from sandbox.cpucuda.raw import SECTOR_DTYPE, SITE_BLOCK_DTYPE, Site

SECTOR_BYTES = 32
WORD_BYTES = 4
BANKS = 32
WAVEFRONT_BYTES = BANKS * WORD_BYTES

# One lane's access, in execution order. `address`: global, byte address with arrays at 256-byte aligned
# bases (as cudaMalloc places them); shared, the byte offset in the block's shared memory.
RECORD_DTYPE = np.dtype([
    ("block", np.int64),     # linear block index (blockIdx.x fastest)
    ("warp", np.int32),      # linear thread index // 32
    ("lane", np.int32),      # linear thread index % 32
    ("epoch", np.int64),     # how many times this warp converged before the access
    ("site", np.int32),      # index into the launch's list of Site
    ("address", np.uint64),
    ("width", np.int32),     # bytes (a vector type's full width: 16 for float4)
])


def _pieces(address: np.ndarray, width: np.ndarray, size: int):
    """Split byte ranges [address, address + width) into aligned `size`-byte pieces.

    Returns (index of the range each piece came from, piece number = byte // size, mask of its bytes).
    """
    first = address // size
    last = (address + width.astype(np.uint64) - 1) // size
    count = (last - first + 1).astype(np.int64)
    owner = np.repeat(np.arange(len(address)), count)
    step = np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)
    piece = first[owner] + step.astype(np.uint64)
    lo = np.maximum(address[owner], piece * size) - piece * size
    hi = np.minimum(address[owner] + width[owner].astype(np.uint64), (piece + 1) * size) - piece * size
    mask = ((np.uint64(1) << (hi - lo)) - np.uint64(1)) << lo
    return owner, piece, mask.astype(np.uint32)


def _merge(request: np.ndarray, piece: np.ndarray, mask: np.ndarray):
    """Distinct (request, piece) pairs with their masks OR-ed, sorted by request then piece."""
    order = np.lexsort((piece, request))
    request, piece, mask = request[order], piece[order], mask[order]
    new = np.ones(len(request), bool)
    new[1:] = (request[1:] != request[:-1]) | (piece[1:] != piece[:-1])
    starts = np.flatnonzero(new)
    return request[starts], piece[starts], np.bitwise_or.reduceat(mask, starts) if len(starts) else mask[:0]


_BITS_IN_NIBBLE = np.array([bin(v).count("1") for v in range(16)], np.int64)  # a word's byte mask has 4 bits


def _shared_costs(request: np.ndarray, address: np.ndarray, width: np.ndarray, num_requests: int):
    """(wavefronts, ideal) per request: most distinct words in one bank, ceil(distinct bytes / 128)."""
    owner, word, mask = _pieces(address, width, WORD_BYTES)
    req, word, mask = _merge(request[owner], word, mask)
    bank = (word % BANKS).astype(np.int64)
    per_bank = np.bincount(req * BANKS + bank, minlength=num_requests * BANKS).reshape(num_requests, BANKS)
    distinct_bytes = np.bincount(req, weights=_BITS_IN_NIBBLE[mask], minlength=num_requests)
    ideal = -(-distinct_bytes.astype(np.int64) // WAVEFRONT_BYTES)
    return per_bank.max(axis=1), ideal


def global_request(addresses, widths) -> tuple[np.ndarray, np.ndarray]:
    """The distinct 32-byte sectors one warp-level global request touches (sorted) and their byte masks."""
    address = np.asarray(addresses, np.uint64).ravel()
    width = np.broadcast_to(np.asarray(widths, np.int64), address.shape)
    owner, sector, mask = _pieces(address, width, SECTOR_BYTES)
    _, sector, mask = _merge(np.zeros(len(sector), np.int64), sector, mask)
    return sector, mask


def shared_request(addresses, widths) -> tuple[int, int]:
    """(wavefronts, ideal wavefronts) of one warp-level shared request; bank conflicts = the difference."""
    address = np.asarray(addresses, np.uint64).ravel()
    width = np.broadcast_to(np.asarray(widths, np.int64), address.shape)
    wavefronts, ideal = _shared_costs(np.zeros(len(address), np.int64), address, width, 1)
    return int(wavefronts[0]), int(ideal[0])


def _request_ids(records: np.ndarray):
    """Request index per record, and each request's first record (requests numbered in execution order)."""
    n = len(records)
    order = np.arange(n)
    # k: how many times this lane ran this site earlier in the same epoch
    by_lane = np.lexsort((order, records["site"], records["lane"], records["epoch"], records["warp"],
                          records["block"]))
    keys = [records[f][by_lane] for f in ("block", "warp", "epoch", "lane", "site")]
    start = np.ones(n, bool)
    start[1:] = np.any([k[1:] != k[:-1] for k in keys], axis=0)
    group_start = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    k = np.empty(n, np.int64)
    k[by_lane] = np.arange(n) - group_start
    by_request = np.lexsort((order, k, records["site"], records["epoch"], records["warp"], records["block"]))
    keys = [records[f][by_request] for f in ("block", "warp", "epoch", "site")] + [k[by_request]]
    start = np.ones(n, bool)
    start[1:] = np.any([a[1:] != a[:-1] for a in keys], axis=0)
    provisional = np.cumsum(start) - 1
    first = by_request[start]                  # first record of each request (lowest execution index)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    request = np.empty(n, np.int64)
    request[by_request] = rank[provisional]
    return request, np.sort(first)


def group(records: np.ndarray, sites: list[Site]) -> tuple[np.ndarray, np.ndarray]:
    """Per-lane RECORD_DTYPE rows (execution order) -> raw.py's per-(block, site) rows and sector stream."""
    if records.dtype != RECORD_DTYPE:
        raise ValueError(f"records must have RECORD_DTYPE, got {records.dtype}")
    if len(records) == 0:
        return np.zeros(0, SITE_BLOCK_DTYPE), np.zeros(0, SECTOR_DTYPE)
    if records["site"].min() < 0 or records["site"].max() >= len(sites):
        raise ValueError(f"records name sites outside 0..{len(sites) - 1}")
    request, first = _request_ids(records)
    nreq = len(first)
    req_site = records["site"][first]
    req_block = records["block"][first]
    is_shared = np.array([s.space == "shared" for s in sites])[req_site]
    address, width = records["address"], records["width"].astype(np.int64)
    lanes = np.bincount(request, minlength=nreq)
    nbytes = np.bincount(request, weights=width, minlength=nreq).astype(np.int64)

    glob = ~is_shared[request]
    owner, sector, mask = _pieces(address[glob], width[glob], SECTOR_BYTES)
    s_req, s_sector, s_mask = _merge(request[glob][owner], sector, mask)
    sectors_per_req = np.bincount(s_req, minlength=nreq)
    wavefronts = np.zeros(nreq, np.int64)
    ideal = np.zeros(nreq, np.int64)
    sh = ~glob
    if sh.any():
        w, i = _shared_costs(request[sh], address[sh], width[sh], nreq)
        wavefronts[is_shared], ideal[is_shared] = w[is_shared], i[is_shared]

    stream = np.zeros(len(s_req), SECTOR_DTYPE)
    stream["block"] = req_block[s_req]
    stream["sector"] = s_sector
    stream["mask"] = s_mask
    ops = np.array([s.op for s in sites])[req_site[s_req]]
    stream["write"] = ops != "load"
    stream["read"] = ops != "store"

    key = req_block * len(sites) + req_site
    uniq, row = np.unique(key, return_inverse=True)
    out = np.zeros(len(uniq), SITE_BLOCK_DTYPE)
    out["block"] = uniq // len(sites)
    out["site"] = uniq % len(sites)
    out["requests"] = np.bincount(row, minlength=len(uniq))
    for field, values in (("lanes", lanes), ("bytes", nbytes), ("sectors", sectors_per_req),
                          ("wavefronts", wavefronts), ("ideal_wavefronts", ideal)):
        out[field] = np.bincount(row, weights=values, minlength=len(uniq)).astype(np.int64)
    return out, stream
