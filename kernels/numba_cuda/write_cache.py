"""numba.write_cache: store new tokens' K/V in the paged cache: one thread block per token.

Idea: token i goes to slot slot_mapping[i] = block * block_size + offset; threads split the
num_kv_heads*head_dim elements of its K and V rows (coalesced); a slot < 0 (padding) is skipped.
Limits: any block size, head dim and number of KV heads; key/value float32, float16 or bfloat16.
A cache of their dtype stores them bit-exact (bfloat16 as its uint16 bits); an fp8 cache
(float8_e4m3fn, float8_e5m2) stores fp8(clip(x / k_scale or v_scale, +-max_finite)), rounded to
nearest even with subnormals, saturating, NaN kept NaN (codecs.make_fp8_encoder: integer
arithmetic on the float32 bits, the same code simulated and compiled), exactly
reference.write_cache. With per-token scales (WRITES "kv_scales") one thread per KV head of the
token finds its amax over the finite values, stores scale = amax / max_finite (1.0 for zeros) beside
the row and the codes fp8(x / scale); an NVFP4 cache (WRITES "nvfp4") takes one thread per (KV head,
group of 16): block scale e4m3(amax / 6) of y = x / tensor scale, codes e2m1(y / block scale), both
nearest even and saturating, two codes a byte (element 2i low). One kernel per (input dtype, cache
format, per-token scales), made on first use; the per-tensor scales are runtime arguments.
Verdict: exact against reference.write_cache on every case tests/kernels/test_cache_write.py and
tests/kernels/test_numba_write_cache.py draw (simulator).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types, uint8, uint32

from reference.formats import E2M1_MAX, NVFP4_GROUP
from sandbox.problem.dtypes import FP8_MAX_FINITE, NVFP4, kv_format

from . import codecs, launch, reports
from .device import ZERO

WRITES = ("kv_scales", "nvfp4")  # beyond per-tensor scales (sandbox.variant.cache_write.WRITER_FORMATS)


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


def make_per_token_body(dtype: str, cache_dtype: str):
    """fp8 with a scale per (token, KV head): one thread per KV head of the block's token finds the amax of its
    finite values, stores scale = amax / max_finite (1.0 for a row of zeros) and the codes fp8(x / scale)."""
    load = codecs.DECODE[dtype]
    encode = codecs.ENCODE_FP8[cache_dtype]
    limit = float32(FP8_MAX_FINITE[cache_dtype])

    @cuda.jit(device=True, inline="always")
    def write_row(cache, scales, row, token, block, offset, head):
        head_dim = row.shape[2]
        amax = ZERO
        for d in range(head_dim):
            x = load(row[token, head, d])
            if math.isfinite(x):
                amax = max(amax, abs(x))
        scale = amax / limit if amax > ZERO else float32(1.0)
        scales[block, offset, head] = scale
        for d in range(head_dim):
            cache[block, offset, head, d] = encode(load(row[token, head, d]), scale)

    def write_body(key_cache, value_cache, key, value, slot_mapping, k_scales, v_scales):
        """caches [num_blocks, block_size, num_kv_heads, head_dim] (fp8 codes); k_scales/v_scales float32
        [num_blocks, block_size, num_kv_heads]; key/value [num_tokens, num_kv_heads, head_dim]. Grid (num_tokens,)."""
        token = cuda.blockIdx.x
        slot = slot_mapping[token]
        if slot < 0:
            return
        block_size = key_cache.shape[1]
        block = slot // block_size
        offset = slot % block_size
        for head in range(cuda.threadIdx.x, key.shape[1], cuda.blockDim.x):
            write_row(key_cache, k_scales, key, token, block, offset, head)
            write_row(value_cache, v_scales, value, token, block, offset, head)

    return write_body


def make_nvfp4_body(dtype: str):
    """NVFP4 (reference.formats.quantize_nvfp4): one thread per (KV head, group of 16 values) of the block's
    token: y = x / tensor scale, block scale = e4m3(amax / 6) of the group's finite |y| (nearest even,
    saturating), codes e2m1(y / block scale) (nearest even, saturating at +-6; zeros where the block scale
    is 0; NaN as the reference stores it: code 8, or 0 with the sign bit set), element 2i in the low nibble."""
    load = codecs.DECODE[dtype]
    encode_scale = codecs.encode_e4m3
    decode_scale = codecs.e4m3_to_float32
    six = float32(E2M1_MAX)

    @cuda.jit(device=True, inline="always")
    def code_of(y, block_scale):
        negative = (codecs.float32_as_bits(y) >> uint32(31)) != uint32(0)
        if block_scale == ZERO:
            return uint8(0)
        if math.isnan(y):
            return uint8(0) if negative else uint8(8)
        return codecs.encode_e2m1(y / block_scale, negative)

    @cuda.jit(device=True, inline="always")
    def write_group(cache, block_scales, row, tensor_scale, token, block, offset, head, group):
        first = group * NVFP4_GROUP
        amax = ZERO
        for i in range(NVFP4_GROUP):
            y = load(row[token, head, first + i]) / tensor_scale
            if math.isfinite(y):
                amax = max(amax, abs(y))
        code = encode_scale(amax / six, float32(1.0))
        block_scales[block, offset, head, group] = code
        block_scale = decode_scale(code)
        for i in range(0, NVFP4_GROUP, 2):
            low = code_of(load(row[token, head, first + i]) / tensor_scale, block_scale)
            high = code_of(load(row[token, head, first + i + 1]) / tensor_scale, block_scale)
            cache[block, offset, head, (first + i) // 2] = uint8(low | (high << uint8(4)))

    def write_body(key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale, k_block_scales,
                   v_block_scales):
        """caches uint8 [num_blocks, block_size, num_kv_heads, head_dim // 2]; block scales e4m3 codes (uint8)
        [num_blocks, block_size, num_kv_heads, head_dim // 16]; key/value [num_tokens, num_kv_heads, head_dim];
        k_scale/v_scale the per-tensor scales. Grid (num_tokens,)."""
        token = cuda.blockIdx.x
        slot = slot_mapping[token]
        if slot < 0:
            return
        block_size = key_cache.shape[1]
        block = slot // block_size
        offset = slot % block_size
        groups = key.shape[2] // NVFP4_GROUP
        for i in range(cuda.threadIdx.x, key.shape[1] * groups, cuda.blockDim.x):
            write_group(key_cache, k_block_scales, key, k_scale, token, block, offset, i // groups, i % groups)
            write_group(value_cache, v_block_scales, value, v_scale, token, block, offset, i // groups, i % groups)

    return write_body


@functools.lru_cache(maxsize=None)
def kernel_for(dtype: str, cache_dtype: str, per_token: bool = False):
    """(python body, jitted kernel) for (key/value dtype, cache format, per-token scales), made once."""
    if cache_dtype == NVFP4:
        body = make_nvfp4_body(dtype)
    elif per_token:
        body = make_per_token_body(dtype, cache_dtype)
    else:
        body = make_body(dtype, cache_dtype)
    return body, cuda.jit(body)


class WriteLaunch:
    def __init__(self, key_cache, value_cache, key, value, slot_mapping, k_scale=1.0, v_scale=1.0, k_scales=None,
                 v_scales=None, k_block_scales=None, v_block_scales=None):
        self.cache_dtype = key_cache.dtype
        self.num_tokens = key.shape[0]
        fmt = kv_format(key_cache.dtype)
        per_token = k_scales is not None
        if fmt == NVFP4:
            work = key.shape[1] * (key.shape[2] // NVFP4_GROUP)
        elif per_token:
            work = key.shape[1]
        else:
            work = key.shape[1] * key.shape[2]
        threads = launch.launch_threads(work)
        if self.num_tokens:
            launch.check_launch("numba.write_cache", self.num_tokens, threads)
        self.key_cache = launch.upload(key_cache)  # device copies: the host inputs stay untouched
        self.value_cache = launch.upload(value_cache)
        self.scales = ()
        self.scale_dtypes = ()
        head = (self.key_cache, self.value_cache, launch.upload(key), launch.upload(value),
                launch.upload(np.asarray(slot_mapping, dtype=np.int64)))
        if fmt == NVFP4:
            self.scales = (launch.upload(k_block_scales), launch.upload(v_block_scales))
            self.scale_dtypes = (k_block_scales.dtype, v_block_scales.dtype)
            args = head + (np.float32(k_scale), np.float32(v_scale)) + self.scales
        elif per_token:
            self.scales = (launch.upload(k_scales), launch.upload(v_scales))
            self.scale_dtypes = (k_scales.dtype, v_scales.dtype)
            args = head + self.scales
        else:
            args = head + (np.float32(k_scale), np.float32(v_scale))
        _, kernel = kernel_for(key.dtype.name, fmt, per_token)
        self.kernel = (launch.Launch(kernel, self.num_tokens, threads, 0, args, None, name="numba.write_cache")
                       if self.num_tokens else None)

    def launch(self) -> None:
        if self.kernel is not None:
            self.kernel.launch()

    def result(self):
        """(key_cache, value_cache), then the scales the writer chose when it chose any (per-token or block)."""
        arrays = (self.key_cache, self.value_cache) + self.scales
        dtypes = (self.cache_dtype, self.cache_dtype) + self.scale_dtypes
        return tuple(a.copy_to_host() if d == np.uint8 else codecs.host_view(a.copy_to_host(), d)  # NVFP4: uint8
                     for a, d in zip(arrays, dtypes))


def prepare_write(key_cache, value_cache, key, value, slot_mapping, backend: str, k_scale=1.0, v_scale=1.0,
                  k_scales=None, v_scales=None, k_block_scales=None, v_block_scales=None) -> WriteLaunch:
    """k_scales/v_scales (per-token fp8) and k_block_scales/v_block_scales (NVFP4): the arrays beside the cache,
    returned by result() with the slots written."""
    return WriteLaunch(key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale, k_scales, v_scales,
                       k_block_scales, v_block_scales)


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None = None,
                   per_token: bool = False) -> dict:
    """Threads as launched for REPRESENTATIVE's KV heads at `head_dim`; no shared memory.
    dtype: key/value's ("bfloat16"), with "float16:float8_e4m3fn" / kv_dtype= for an fp8 cache ("nvfp4" for
    an NVFP4 cache); per_token: the fp8 writer that chooses a scale per token and KV head."""
    q, kv = reports.report_dtypes(dtype, kv_dtype)
    e, c = reports.element_type(q), reports.element_type(kv)
    f32, u8 = types.float32, types.uint8
    head = (reports.array(c, 4), reports.array(c, 4), reports.array(e, 3), reports.array(e, 3),
            reports.array(types.int64, 1))
    if kv == NVFP4:
        signature, work = head + (f32, f32, reports.array(u8, 4), reports.array(u8, 4)), head_dim // NVFP4_GROUP
    elif per_token:
        signature, work = head + (reports.array(f32, 3), reports.array(f32, 3)), 1
    else:
        signature, work = head + (f32, f32), head_dim
    body, _ = kernel_for(q, kv, per_token)
    kernel = dict(name="write_cache", **reports.kernel_resources(body, signature, arch))
    threads = launch.launch_threads(reports.REPRESENTATIVE["num_kv_heads"] * work, simulated=False)
    return reports.report([kernel], threads, 0)
