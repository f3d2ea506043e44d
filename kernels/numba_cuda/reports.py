"""Compile reports of the Numba kernels: compile_ptx + nvJitLink for sm_80/sm_90, without a GPU.

Needs numba.cuda in real mode (sandbox.analysis.resources calls through sandbox.devices.other_mode from a
simulator process). The signatures are the types Numba infers for C-contiguous device arrays.
"""
from __future__ import annotations

import functools
import re

import numba
from numba import cuda, float32, int32, types

from sandbox.analysis import compile_cache
from sandbox.analysis.ptx_link import link_ptx, parse_arch
from sandbox.problem.dtypes import FP8_DTYPES, NVFP4
from sandbox.variant import registry

from .codecs import dtype_name
from .device import SIMULATED
from .fingerprint import fingerprint
from .options import option_types

# The configuration compile_report() sizes its dynamic shared memory and threads for: a Llama-3-8B
# like decode step (32 query heads on 8 KV heads, head dim from the caller) at 4096 tokens of context.
REPRESENTATIVE = dict(context_len=4096, num_heads=32, num_kv_heads=8)
COMPILE_PATH = "numba compile_ptx -> nvJitLink"


def element_type(dtype):
    """The Numba type a kernel sees for a sandbox dtype (bfloat16 as uint16 bits, fp8 as uint8 codes)."""
    return {"float32": types.float32, "float16": types.float16, "bfloat16": types.uint16,
            "float8_e4m3fn": types.uint8, "float8_e5m2": types.uint8, "nvfp4": types.uint8}[dtype_name(dtype)]


def array(dtype, ndim):
    return types.Array(dtype, ndim, "C")


def report_dtypes(dtype, kv_dtype=None) -> tuple[str, str]:
    """compile_report's precision: dtype "bfloat16" or "float16:float8_e4m3fn" (query:cache), or
    dtype plus kv_dtype; the cache defaults to the query's dtype. Aliases (bf16, e4m3) work."""
    dtype = str(dtype)
    if ":" in dtype:
        if kv_dtype is not None:
            raise ValueError(f"give the cache dtype once: dtype={dtype!r} and kv_dtype={kv_dtype!r}")
        dtype, kv_dtype = dtype.split(":", 1)
    q = dtype_name(dtype)
    kv = q if kv_dtype is None else dtype_name(kv_dtype)
    if kv != q and kv not in FP8_DTYPES + (NVFP4,):
        raise ValueError(f"the cache must have the query's dtype ({q}), be fp8 ({', '.join(FP8_DTYPES)}) or {NVFP4}, "
                         f"got {kv}")
    return q, kv


def decode_signature(dtype, kv_dtype, *extra):
    """(query, key_cache, value_cache, block_tables, context_lens, scale, options (OptionArgs), *extra)."""
    q, kv = element_type(dtype), element_type(kv_dtype)
    return ((array(q, 3), array(kv, 4), array(kv, 4), array(int32, 2), array(int32, 1), float32)
            + (option_types(),) + tuple(extra))


def out_array(dtype, ndim=3):
    return array(element_type(dtype), ndim)


def lse_array():
    """The lse output every attention kernel takes: float32 [num_query_tokens, num_heads]."""
    return array(float32, 2)


@functools.lru_cache(maxsize=None)
def kernel_resources(pyfunc, signature: tuple, arch: str) -> dict:
    """Registers, static shared, local bytes and spills of one kernel, via compile_ptx + nvJitLink.

    Needs numba.cuda in real mode (no GPU needed). The code does not depend on block size or head
    dim (both are runtime values), so one compile per (kernel, signature, arch) serves every row; it is
    cached on disk (sandbox/analysis/compile_cache.py) under the function's content (fingerprint.py).
    """
    if SIMULATED:
        raise RuntimeError("compile_ptx is unavailable under the simulator: call through sandbox.analysis.resources")
    cc = parse_arch(arch)

    def build() -> dict:
        ptx, _ = cuda.compile_ptx(pyfunc, signature, cc=cc)
        info = link_ptx(ptx, arch)
        info["fp64_instructions"] = len(re.findall(r"\.f64\b", ptx))  # float64 math would be a typing slip
        info["shuffles"] = ptx.count("shfl.sync")  # > 0 where the GPU reduction path is compiled in
        return info

    print_ = fingerprint(pyfunc)
    if print_ is None:  # something it reaches has no stable content: compile every time
        return build()
    parts = ["numba", numba.__version__, _jitlink_version(), print_, str(signature), arch]
    return compile_cache.cached("numba-ptx", parts, build)


@functools.lru_cache(maxsize=None)
def _jitlink_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cuda-bindings")
    except PackageNotFoundError:
        return "unknown"


def report(kernels, threads_per_block: int, dynamic_shared_bytes: int, note: str = "") -> dict:
    """compile_report() dict for the main kernel, with `kernels` listing every kernel of the variant."""
    main = dict(kernels[0])
    out = {
        "registers": main["registers"],
        "static_shared_bytes": main["static_shared_bytes"],
        "dynamic_shared_bytes": int(dynamic_shared_bytes),
        "local_bytes": main["local_bytes"],
        "spill_stores": main["spill_stores"],
        "spill_loads": main["spill_loads"],
        "threads_per_block": int(threads_per_block),
        "path": COMPILE_PATH,
        "kernels": [dict(k) for k in kernels],
    }
    if note:
        out["note"] = note
    return out


def compile_reports(names, block_size: int = 16, head_dim: int = 128, dtype: str = "float16", arch: str = "sm_90",
                    kv_dtype: str | None = None, logit_options: bool | int = False) -> dict:
    """{name: compile_report(block_size, head_dim, dtype, arch, kv_dtype=..., logit_options=...)} for registered numba
    variants and cache writers, in this process (real mode: call through sandbox.devices.other_mode from a
    simulator process). Any precision the kernels take, e.g. dtype "bfloat16", kv_dtype "float8_e4m3fn"."""
    if SIMULATED:
        raise RuntimeError("compile_ptx is unavailable under the simulator: use sandbox.devices.other_mode.call_in_numba_mode")
    out = {}
    for name in names:
        entry = registry.get_cache_writer(name) if name in registry.CACHE_WRITERS else registry.get(name)
        kwargs = dict(kv_dtype=kv_dtype)
        if logit_options is not False and name not in registry.CACHE_WRITERS:
            kwargs["logit_options"] = logit_options
        out[name] = entry.module.compile_report(block_size, head_dim, dtype, arch, **kwargs)
    return out
