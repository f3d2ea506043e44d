"""cupy.write_cache: the slot-mapping cache write in CUDA C (vLLM's reshape_and_cache, canonical layout).

Idea: one thread block per new token writes its [num_kv_heads, head_dim] rows of K and V to cache row
slot_mapping[i] (= block * block_size + offset); slot < 0 is skipped. A cache of the inputs' dtype
(float32, float16, bfloat16) gets the bits as they are, 16 bytes at a time when the row allows; an
fp8 cache (e4m3fn, e5m2) gets fp8(clip(x / scale, +-max_finite)) rounded to nearest even, NaN kept
(__nv_cvt_float2_to_fp8x2 with __NV_SATFINITE; k_scale for K, v_scale for V), reading 16-byte
vectors of the inputs. Exact against reference.write_cache for every pair.
Per-token fp8 scales (k_scales/v_scales given): a warp per KV head takes the amax of the token's finite
values, stores scale = amax / max finite (1 for zeros) beside the row and quantizes x / scale the same way.
NVFP4 (a uint8 cache with k_block_scales/v_block_scales): a thread per group of 16 values stores the e4m3
block scale e4m3(amax(|x / tensor scale|) / 6) and the e2m1 codes of x / (tensor scale * block scale), both
rounded to nearest even and saturated, packed two per byte (element 2i low). Both exact against
reference.write_cache.
Limits: any block size, head dim, number of KV heads; inputs float32/float16/bfloat16; caches of the
inputs' dtype, fp8 (per-tensor or per-token scales) or NVFP4 (head dim a multiple of 16).
Verdict: not measured on a GPU yet. Design expectation: bandwidth-bound copy; negligible next to attention.
"""
from __future__ import annotations

import numpy as np

from sandbox.devices import backends
from sandbox.problem import dtypes

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


def fp8_kernel_name(dtype, cache_dtype, vec: bool) -> str:
    return f"write_cache_fp8<{common.ctype(dtype)}, {common.ctype(cache_dtype)}, {str(vec).lower()}>"


# On the CPU executor every quantizing kernel compiles in one module (small kernels: g++'s fixed cost dominates).
FP8_BATCH = [fp8_kernel_name(t, f, vec) for t in dtypes.QUERY_DTYPES for f in dtypes.FP8_DTYPES for vec in (True, False)]


def fp8_vector(row_elems: int, dtype) -> bool:
    """Whether write_cache_fp8 reads 16-byte vectors (16 / itemsize values) of a row of row_elems values."""
    return row_elems % (16 // np.dtype(dtype).itemsize) == 0


class _Prepared:
    def __init__(self, launch, key_cache, value_cache, cache_dtype, scales=()):
        self.launch_args = launch
        self.key_cache, self.value_cache = key_cache, value_cache
        self.cache_dtype = cache_dtype
        self.scales = scales  # [(device array, host dtype, shape)] written beside the caches

    def launch(self) -> None:
        kernel, grid, block, args = self.launch_args
        if grid[0]:  # no tokens: nothing to launch (a grid of 0 blocks is invalid)
            kernel(grid, block, args)

    def result(self):
        """(key_cache, value_cache), then the scales written beside them (k, v) when there are any."""
        caches = tuple(np.asarray(backends.to_host(c)).view(self.cache_dtype) for c in (self.key_cache, self.value_cache))
        return caches + tuple(np.asarray(backends.to_host(a)).view(dtype).reshape(shape) for a, dtype, shape in self.scales)


TOKEN_BATCH = [f"write_cache_fp8_token<{common.ctype(t)}, {common.ctype(f)}>" for t in dtypes.QUERY_DTYPES
               for f in dtypes.FP8_DTYPES]
NVFP4_BATCH = [f"write_cache_nvfp4<{common.ctype(t)}>" for t in dtypes.QUERY_DTYPES]
WRITES = ("kv_scales", "nvfp4")  # beyond per-tensor scales (sandbox.variant.cache_write.WRITER_FORMATS)


def prepare_write(key_cache, value_cache, key, value, slot_mapping, backend: str, k_scale=1.0,
                  v_scale=1.0, k_scales=None, v_scales=None, k_block_scales=None, v_block_scales=None) -> _Prepared:
    """key_cache/value_cache [num_blocks, block_size, num_kv_heads, head_dim]; key/value [num_tokens, num_kv_heads,
    head_dim]; slot_mapping [num_tokens] (any integer type). k_scale/v_scale: an fp8 cache stores x / scale
    (ignored for a cache of the inputs' dtype). k_scales/v_scales (float32 [num_blocks, block_size, num_kv_heads],
    fp8 caches): per-token scales, chosen by the writer; k_block_scales/v_block_scales (float8_e4m3fn [...,
    head_dim // 16]) beside a uint8 NVFP4 cache [..., head_dim // 2]: the block scales it chooses. The inputs
    are copied, not modified; result() returns the caches, then these scales."""
    row_elems = key.shape[1] * key.shape[2]
    num_tokens = key.shape[0]
    dev = [common.to_device(np.array(a, order="C"), backend) for a in (key_cache, value_cache, key, value)]
    slots = backends.to_device(np.ascontiguousarray(slot_mapping, dtype=np.int64), backend)
    if k_block_scales is not None:  # NVFP4: a thread per group of 16 values
        groups = row_elems // 16
        bs = [backends.to_device(np.array(a, order="C").view(np.uint8), backend) for a in (k_block_scales, v_block_scales)]
        name = f"write_cache_nvfp4<{common.ctype(key.dtype)}>"
        kernel = common.get_function(backend, PATH, name, NVFP4_BATCH)
        args = (*dev, slots, np.int32(groups), np.float32(k_scale), np.float32(v_scale), *bs)
        launch = (kernel, (num_tokens,), (threads_for(groups),), args)
        return _Prepared(launch, dev[0], dev[1], key_cache.dtype,
                         [(b, k_block_scales.dtype, k_block_scales.shape) for b in bs])
    if k_scales is not None:  # per-token fp8 scales: a warp per KV head
        sc = [backends.to_device(np.array(a, order="C", dtype=np.float32), backend) for a in (k_scales, v_scales)]
        name = f"write_cache_fp8_token<{common.ctype(key.dtype)}, {common.ctype(key_cache.dtype)}>"
        kernel = common.get_function(backend, PATH, name, TOKEN_BATCH)
        args = (*dev, slots, np.int32(key.shape[1]), np.int32(key.shape[2]), *sc)
        launch = (kernel, (num_tokens,), (32 * min(key.shape[1], 8),), args)
        return _Prepared(launch, dev[0], dev[1], key_cache.dtype, [(a, np.float32, k_scales.shape) for a in sc])
    if dtypes.is_fp8(key_cache.dtype):
        vec = fp8_vector(row_elems, key.dtype)
        name = fp8_kernel_name(key.dtype, key_cache.dtype, vec)
        kernel = common.get_function(backend, PATH, name, FP8_BATCH)
        steps = row_elems // (16 // key.dtype.itemsize) if vec else row_elems
        args = (*dev, slots, np.int32(row_elems), np.float32(k_scale), np.float32(v_scale))
        launch = (kernel, (num_tokens,), (threads_for(steps),), args)
    else:
        # The arrays go in with their own dtype: the kernel sees their bytes as rows of row_units U's.
        unit, unit_type = copy_unit(row_elems * key.dtype.itemsize)
        row_units = row_elems * key.dtype.itemsize // unit
        kernel = common.get_function(backend, PATH, f"write_cache<{unit_type}>", [f"write_cache<{t}>" for _, t in UNITS])
        args = (*dev, slots, np.int32(row_units))
        launch = (kernel, (num_tokens,), (threads_for(row_units),), args)
    return _Prepared(launch, dev[0], dev[1], key_cache.dtype)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, num_kv_heads: int = 8,
                   cache_dtype=None) -> dict:
    """NVRTC -> cubin resources for rows of num_kv_heads x head_dim (block size does not matter);
    cache_dtype: an fp8 format for the quantizing kernel (None: a cache of `dtype`)."""
    row_elems = num_kv_heads * head_dim
    if cache_dtype is not None and dtypes.is_fp8(cache_dtype):
        vec = fp8_vector(row_elems, dtype)
        steps = row_elems // (16 // np.dtype(dtype).itemsize) if vec else row_elems
        return common.compile_report(PATH, fp8_kernel_name(dtype, cache_dtype, vec), arch, threads_for(steps), 0)
    row_bytes = row_elems * np.dtype(dtype).itemsize
    unit, unit_type = copy_unit(row_bytes)
    return common.compile_report(PATH, f"write_cache<{unit_type}>", arch, threads_for(row_bytes // unit), 0)
