"""The L2 model: a fully associative LRU of 32-byte sectors, cold when a variant's call starts.

    dram_bytes(streams, num_blocks, capacity_bytes) -> [(dram_read int64 [blocks], dram_write int64 [blocks]), ...]

`streams` are the launches' sector streams (raw.SECTOR_DTYPE, blocks in launch order), fed in order
through one cache, so a kernel finds what the previous one left (a split-KV reduce reads the partition
kernel's partial sums from L2). Reads miss to DRAM in whole sectors; stores never read DRAM (L2 keeps
a byte mask per sector) and a written sector reaches DRAM when it is evicted or, at the end of the call,
by the flush. DRAM bytes are charged to blocks: reads to the block that missed, writes to the block that
first dirtied the sector. The loop runs in compiled code (l2.cpp, built once with g++ and cached).
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from sandbox.cpucuda import native
from sandbox.cpucuda.raw import SECTOR_DTYPE

SECTOR_BYTES = 32
_SOURCE = Path(__file__).with_name("l2.cpp")
_I64P = ctypes.POINTER(ctypes.c_int64)


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    if SECTOR_DTYPE.itemsize != 22:  # l2.cpp's packed Row mirrors the dtype
        raise RuntimeError(f"SECTOR_DTYPE changed ({SECTOR_DTYPE.itemsize} bytes): update l2.cpp's Row")
    lib = ctypes.CDLL(str(native.compiled(_SOURCE)))
    lib.l2_new.restype = ctypes.c_void_p
    lib.l2_new.argtypes = [ctypes.c_int64]
    lib.l2_free.argtypes = [ctypes.c_void_p]
    lib.l2_feed.restype = ctypes.c_int64
    lib.l2_feed.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, _I64P, _I64P]
    lib.l2_flush.argtypes = [ctypes.c_void_p, _I64P]
    return lib


def dram_bytes(streams, num_blocks, capacity_bytes: int):
    """Per launch, DRAM bytes read and written per block: int64 arrays [num_blocks[i]]."""
    if len(streams) != len(num_blocks):
        raise ValueError("dram_bytes needs one num_blocks per stream")
    capacity = int(capacity_bytes) // SECTOR_BYTES
    if capacity < 1:
        raise ValueError(f"capacity_bytes must hold at least one {SECTOR_BYTES}-byte sector, got {capacity_bytes}")
    offsets = np.concatenate([[0], np.cumsum(num_blocks)]).astype(np.int64)
    read = np.zeros(int(offsets[-1]), np.int64)
    write = np.zeros(int(offsets[-1]), np.int64)
    lib = _lib()
    cache = lib.l2_new(capacity)
    try:
        for stream, base, blocks in zip(streams, offsets, num_blocks):
            stream = np.ascontiguousarray(stream)
            if stream.dtype != SECTOR_DTYPE:
                raise ValueError(f"a sector stream must have SECTOR_DTYPE, got {stream.dtype}")
            if len(stream) and (stream["block"].min() < 0 or stream["block"].max() >= blocks):
                raise ValueError(f"a sector stream names blocks outside 0..{blocks - 1}")
            lib.l2_feed(cache, stream.ctypes.data, len(stream), int(base), read.ctypes.data_as(_I64P),
                        write.ctypes.data_as(_I64P))
        lib.l2_flush(cache, write.ctypes.data_as(_I64P))
    finally:
        lib.l2_free(cache)
    return [(read[a:b], write[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
