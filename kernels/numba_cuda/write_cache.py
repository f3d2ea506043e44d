"""numba.write_cache: store new tokens' K/V in the paged cache: one thread block per token.

Idea: token i goes to slot slot_mapping[i] = block * block_size + offset; threads split the
num_kv_heads*head_dim elements of its K and V rows (coalesced); a slot < 0 (padding) is skipped.
Limits: any block size, head dim and number of KV heads; key/value float32, float16 or bfloat16.
A cache of their dtype stores them bit-exact (bfloat16 as its uint16 bits); an fp8 cache
(float8_e4m3fn, float8_e5m2) stores fp8(clip(x / k_scale or v_scale, +-max_finite)), rounded to
nearest even with subnormals, saturating, NaN kept NaN (codecs.make_fp8_encoder: integer
arithmetic on the float32 bits, the same code simulated and compiled), exactly
reference.write_cache. One kernel per (input dtype, cache dtype), made on first use; the scales
are runtime arguments (unused when the cache has the inputs' dtype).
Verdict: exact against reference.write_cache on every case tests/test_cache_write.py draws (simulator).
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, types

from . import codecs, launch, reports


@cuda.jit(device=True, inline="always")
def store_as_is(x, scale):
    return x


def make_store(dtype: str, cache_dtype: str):
    """Device function (element of key/value, scale) -> element of the cache."""
    if cache_dtype not in codecs.ENCODE_FP8:
        return store_as_is
    load = codecs.DECODE[dtype]
    encode = codecs.ENCODE_FP8[cache_dtype]

    @cuda.jit(device=True, inline="always")
    def store_fp8(x, scale):
        return encode(load(x), scale)

    return store_fp8


def make_body(dtype: str, cache_dtype: str):
    store = make_store(dtype, cache_dtype)

    def write_body(key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale):
        """caches [num_blocks, block_size, num_kv_heads, head_dim]; key/value [num_tokens, num_kv_heads,
        head_dim]; slot_mapping [num_tokens] int64; k_scale/v_scale float32. Grid (num_tokens,)."""
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
            key_cache[block, offset, head, d] = store(key[token, head, d], k_scale)
            value_cache[block, offset, head, d] = store(value[token, head, d], v_scale)

    return write_body


@functools.lru_cache(maxsize=None)
def kernel_for(dtype: str, cache_dtype: str):
    """(python body, jitted kernel) for (key/value dtype, cache dtype), made once."""
    body = make_body(dtype, cache_dtype)
    return body, cuda.jit(body)


class WriteLaunch:
    def __init__(self, key_cache, value_cache, key, value, slot_mapping, k_scale=1.0, v_scale=1.0):
        self.cache_dtype = key_cache.dtype
        self.num_tokens = key.shape[0]
        threads = launch.launch_threads(key.shape[1] * key.shape[2])
        if self.num_tokens:
            launch.check_launch("numba.write_cache", self.num_tokens, threads)
        self.key_cache = launch.upload(key_cache)  # device copies: the host inputs stay untouched
        self.value_cache = launch.upload(value_cache)
        args = (self.key_cache, self.value_cache, launch.upload(key), launch.upload(value),
                launch.upload(np.asarray(slot_mapping, dtype=np.int64)), np.float32(k_scale), np.float32(v_scale))
        _, kernel = kernel_for(key.dtype.name, key_cache.dtype.name)
        self.kernel = (launch.Launch(kernel, self.num_tokens, threads, 0, args, None, name="numba.write_cache")
                       if self.num_tokens else None)

    def launch(self) -> None:
        if self.kernel is not None:
            self.kernel.launch()

    def result(self):
        return (codecs.host_view(self.key_cache.copy_to_host(), self.cache_dtype),
                codecs.host_view(self.value_cache.copy_to_host(), self.cache_dtype))


def prepare_write(key_cache, value_cache, key, value, slot_mapping, backend: str, k_scale=1.0, v_scale=1.0) -> WriteLaunch:
    return WriteLaunch(key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale)


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None = None) -> dict:
    """Threads as launched for REPRESENTATIVE's KV heads at `head_dim`; no shared memory.
    dtype: key/value's ("bfloat16"), with "float16:float8_e4m3fn" / kv_dtype= for an fp8 cache."""
    q, kv = reports.report_dtypes(dtype, kv_dtype)
    e, c = reports.element_type(q), reports.element_type(kv)
    signature = (reports.array(c, 4), reports.array(c, 4), reports.array(e, 3), reports.array(e, 3),
                 reports.array(types.int64, 1), types.float32, types.float32)
    body, _ = kernel_for(q, kv)
    kernel = dict(name="write_cache", **reports.kernel_resources(body, signature, arch))
    threads = launch.launch_threads(reports.REPRESENTATIVE["num_kv_heads"] * head_dim, simulated=False)
    return reports.report([kernel], threads, 0)
