"""cupy.write_cache: the slot-mapping cache write in CUDA C (vLLM's reshape_and_cache, canonical layout).

Idea: one thread block per new token copies its [num_kv_heads, head_dim] rows of K and V to cache row
slot_mapping[i] (= block * block_size + offset), 16 bytes at a time when the row allows; slot < 0 is
skipped. It moves bits, so it is exact for float32 and float16.
Limits: any block size, head dim, number of KV heads; float32 and float16.
Verdict: not measured on a GPU yet. Design expectation: bandwidth-bound copy; negligible next to attention.
"""
from __future__ import annotations

import numpy as np

from sandbox import backends

from . import common

PATH = common.KERNEL_DIR / "write_cache.cu"
NAME = "cupy.write_cache"
UNITS = ((16, "uint4"), (4, "unsigned int"), (2, "unsigned short"))  # copy unit bytes -> CUDA type
MAX_THREADS = 256


def copy_unit(row_bytes: int) -> tuple[int, str]:
    """The widest unit (bytes, CUDA type) that divides a token row."""
    return next((size, name) for size, name in UNITS if row_bytes % size == 0)


def threads_for(row_units: int) -> int:
    return min(MAX_THREADS, -(-row_units // 32) * 32)


class _Prepared:
    def __init__(self, launch, key_cache, value_cache):
        self.launch_args = launch
        self.key_cache, self.value_cache = key_cache, value_cache

    def launch(self) -> None:
        kernel, grid, block, args = self.launch_args
        if grid[0]:  # no tokens: nothing to launch (a grid of 0 blocks is invalid)
            kernel(grid, block, args)

    def result(self):
        return tuple(np.asarray(backends.to_host(c)) for c in (self.key_cache, self.value_cache))


def prepare_write(key_cache, value_cache, key, value, slot_mapping, backend: str) -> _Prepared:
    """key_cache/value_cache [num_blocks, block_size, num_kv_heads, head_dim]; key/value [num_tokens, num_kv_heads,
    head_dim]; slot_mapping [num_tokens] (any integer type). The inputs are copied, not modified."""
    row_bytes = key.shape[1] * key.shape[2] * key.dtype.itemsize
    unit, unit_type = copy_unit(row_bytes)
    row_units = row_bytes // unit
    num_tokens = key.shape[0]
    # The arrays go in with their own dtype: the kernel sees their bytes as rows of row_units U's.
    dev = [backends.to_device(np.array(a, order="C"), backend) for a in (key_cache, value_cache, key, value)]
    slots = backends.to_device(np.ascontiguousarray(slot_mapping, dtype=np.int64), backend)
    kernel = common.get_function(backend, PATH, f"write_cache<{unit_type}>", [f"write_cache<{t}>" for _, t in UNITS])
    args = (*dev, slots, np.int32(row_units))
    launch = (kernel, (num_tokens,), (threads_for(row_units),), args)
    return _Prepared(launch, dev[0], dev[1])


def compile_report(block_size: int, head_dim: int, dtype, arch: str, num_kv_heads: int = 8) -> dict:
    """NVRTC -> cubin resources for rows of num_kv_heads x head_dim (block size does not matter)."""
    row_bytes = num_kv_heads * head_dim * np.dtype(dtype).itemsize
    unit, unit_type = copy_unit(row_bytes)
    return common.compile_report(PATH, f"write_cache<{unit_type}>", arch, threads_for(row_bytes // unit), 0)
