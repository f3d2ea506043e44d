"""numba.write_cache: store new tokens' K/V in the paged cache: one thread block per token.

Idea: token i goes to slot slot_mapping[i] = block * block_size + offset; threads split the
num_kv_heads*head_dim elements of its K and V rows (coalesced); a slot < 0 (padding) is skipped.
Limits: any block size, head dim and number of KV heads; float32 and float16 (copied bit-exact).
Verdict: exact against reference.write_cache on every case tests/test_cache_write.py draws (simulator).
"""
from __future__ import annotations

import numpy as np
from numba import cuda, types

from . import common


def write_body(key_cache, value_cache, key, value, slot_mapping):
    """caches [num_blocks, block_size, num_kv_heads, head_dim]; key/value [num_tokens, num_kv_heads,
    head_dim]; slot_mapping [num_tokens] int64. Grid (num_tokens,)."""
    token = cuda.blockIdx.x
    slot = slot_mapping[token]
    if slot < 0:
        return
    block_size = key_cache.shape[1]
    block = slot // block_size
    offset = slot % block_size
    num_kv_heads, head_dim = key.shape[1], key.shape[2]
    for i in range(cuda.threadIdx.x, num_kv_heads * head_dim, cuda.blockDim.x):
        head = i // head_dim
        d = i % head_dim
        key_cache[block, offset, head, d] = key[token, head, d]
        value_cache[block, offset, head, d] = value[token, head, d]


write_kernel = cuda.jit(write_body)


class WriteLaunch:
    def __init__(self, key_cache, value_cache, key, value, slot_mapping):
        self.key_cache = common.upload(key_cache)  # device copies: the host inputs stay untouched
        self.value_cache = common.upload(value_cache)
        self.num_tokens = key.shape[0]
        args = (self.key_cache, self.value_cache, common.upload(key), common.upload(value),
                common.upload(np.asarray(slot_mapping, dtype=np.int64)))
        threads = common.launch_threads(key.shape[1] * key.shape[2])
        self.kernel = common.Launch(write_kernel, self.num_tokens, threads, 0, args, None) if self.num_tokens else None

    def launch(self) -> None:
        if self.kernel is not None:
            self.kernel.launch()

    def result(self):
        return self.key_cache.copy_to_host(), self.value_cache.copy_to_host()


def prepare_write(key_cache, value_cache, key, value, slot_mapping, backend: str) -> WriteLaunch:
    return WriteLaunch(key_cache, value_cache, key, value, slot_mapping)


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str) -> dict:
    """Threads as launched for REPRESENTATIVE's KV heads at `head_dim`; no shared memory."""
    e = common.element_type(dtype)
    signature = (common.array(e, 4), common.array(e, 4), common.array(e, 3), common.array(e, 3),
                 common.array(types.int64, 1))
    kernel = dict(name="write_cache", **common.kernel_resources(write_body, signature, arch))
    threads = common.launch_threads(common.REPRESENTATIVE["num_kv_heads"] * head_dim, simulated=False)
    return common.report([kernel], threads, 0)
