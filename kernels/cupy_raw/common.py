"""What the CUDA C launchers share: load a .cu, compile a configuration once, report resources.

    load_source(path) -> str                      the .cu with its local #include "..." inlined
    get_function(backend, path, expression, batch) -> kernel   cupy.RawKernel or the CPU executor's
    cpu_options(**options)                        context manager: executor options (tests: ASan, reverse order)
    compile_report(path, expression, arch, threads, dynamic_shared_bytes) -> dict

Modules are cached in-process per (backend, source, name expressions, executor options); the CPU
executor also caches its compiled .so files on disk. A launcher asks for one kernel and names a
`batch` of related instantiations to compile in the same module (e.g. every block size of one head
dim and dtype), so a test session compiles each batch once instead of once per configuration.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import pathlib
import re

import numpy as np

from sandbox import backends

KERNEL_DIR = pathlib.Path(__file__).resolve().parent
OPTIONS = ("-std=c++17",)
NUM_THREADS = 128     # pa::NUM_THREADS in common.cuh
NUM_WARPS = 4
# Dynamic shared memory every GPU grants without an opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize):
# 48 KiB on every architecture since sm_20, static and dynamic together.
SHARED_LIMIT_BYTES = 48 * 1024
CTYPES = {"float32": "float", "float16": "__half"}
POW2_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HEAD_DIMS = (32, 64, 80, 96, 128, 256)

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
_cpu_options: contextvars.ContextVar = contextvars.ContextVar("cupy_raw_cpu_options", default=())


def load_source(path) -> str:
    """Source of `path` with local `#include "file"` lines replaced by the file (once each, with #line).

    Inlining keeps `code` self-contained, so CuPy's and the executor's caches (keyed on the code)
    see header edits.
    """
    seen: set = set()
    root = KERNEL_DIR.parent.parent

    def shown(file: pathlib.Path) -> str:  # repo-relative in #line, so reports name the real file
        try:
            return file.relative_to(root).as_posix()
        except ValueError:
            return file.name

    def expand(file: pathlib.Path) -> str:
        file = file.resolve()
        if file in seen:
            return ""
        seen.add(file)
        lines = [f'#line 1 "{shown(file)}"']
        for number, line in enumerate(file.read_text().splitlines(), start=1):
            m = _INCLUDE.match(line)
            if m:
                lines.append(expand(file.parent / m.group(1)))
                lines.append(f'#line {number + 1} "{shown(file)}"')
            elif line.strip() != "#pragma once":
                lines.append(line)
        return "\n".join(lines)

    return expand(pathlib.Path(path)) + "\n"


@contextlib.contextmanager
def cpu_options(**options):
    """Pass options to the CPU executor's CpuRawModule for kernels fetched inside the block.

    E.g. `with cpu_options(asan=True): ...` or `cpu_options(thread_order="reverse")` (see
    sandbox/cpucuda/README.md). Ignored on a GPU.
    """
    token = _cpu_options.set(tuple(sorted({**dict(_cpu_options.get()), **options}.items())))
    try:
        yield
    finally:
        _cpu_options.reset(token)


@functools.lru_cache(maxsize=None)
def _module(backend: str, path: str, expressions: tuple, cpu_opts: tuple):
    code = load_source(path)
    extra = dict(cpu_opts) if backend != "gpu" else {}
    return backends.raw_module(backend, code, OPTIONS, list(expressions), **extra)


@functools.lru_cache(maxsize=None)
def _function(backend: str, path: str, expressions: tuple, cpu_opts: tuple, expression: str):
    return _module(backend, path, expressions, cpu_opts).get_function(expression)


def get_function(backend: str, path, expression: str, batch=()):
    """The kernel `expression` (e.g. "paged_attention_v1<16, 128, __half>") from the .cu at `path`.

    `batch`: further name expressions compiled in the same module (cached together).
    """
    batch = tuple(dict.fromkeys(batch))
    expressions = batch if expression in batch else (expression, *batch)  # one module per batch, whatever is asked
    return _function(backend, str(path), expressions, _cpu_options.get(), expression)


def ctype(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in CTYPES:
        raise ValueError(f"dtype {name} has no CUDA C type here; supported: {', '.join(CTYPES)}")
    return CTYPES[name]


def vec_elems(dtype) -> int:
    """Elements per 16-byte vector load."""
    return 16 // np.dtype(dtype).itemsize


@functools.lru_cache(maxsize=None)
def _compiled(path: str, expressions: tuple, arch: str):
    from sandbox import nvrtc
    return nvrtc.compile_cubin(load_source(path), expressions, arch=arch, options=OPTIONS, name=pathlib.Path(path).name)


def compile_report(path, expression: str, arch: str, threads_per_block: int, dynamic_shared_bytes: int,
                   extra_expressions=()) -> dict:
    """Static resources of kernel `expression` compiled NVRTC -> cubin for `arch` (sm_80, sm_90).

    Keys: registers, static_shared_bytes, dynamic_shared_bytes, local_bytes, spill_stores, spill_loads,
    threads_per_block, path, arch, kernel, image ((cubin, mangled name), for sandbox.sass).
    """
    arch = arch if str(arch).startswith("sm_") else f"sm_{arch}"
    compiled = _compiled(str(path), tuple(dict.fromkeys([expression, *extra_expressions])), arch)
    res = compiled.resources[expression]
    return dict(registers=res.registers, static_shared_bytes=res.static_shared_bytes,
                dynamic_shared_bytes=int(dynamic_shared_bytes), local_bytes=res.local_bytes,
                spill_stores=res.spill_stores, spill_loads=res.spill_loads,
                threads_per_block=threads_per_block, path="NVRTC -> cubin", arch=arch, kernel=expression,
                image=(compiled.cubin, compiled.lowered[expression]))


def split_kv_report(path, expression: str, head_dim: int, dtype, arch: str, dynamic_shared_bytes: int,
                    note: str) -> dict:
    """compile_report() of a split-KV variant: the attention kernel's numbers on top, and `kernels`
    listing it ("partition") and the reduce kernel ("reduce", shared memory for 8 partitions)."""
    reduce = reduce_name(head_dim, dtype)
    main = compile_report(path, expression, arch, NUM_THREADS, dynamic_shared_bytes, extra_expressions=[reduce])
    second = compile_report(path, reduce, arch, NUM_THREADS, 4 * 8, extra_expressions=[expression])
    fields = ("registers", "static_shared_bytes", "dynamic_shared_bytes", "local_bytes", "spill_stores",
              "spill_loads", "threads_per_block", "image")
    main["kernels"] = [dict(name="partition", **{f: main[f] for f in fields}),
                       dict(name="reduce", **{f: second[f] for f in fields})]
    main["note"] = note
    return main


def check_shared(name: str, dynamic_bytes: int, static_bytes: int, what: str) -> None:
    """Refuse a launch whose shared memory exceeds the no-opt-in limit, naming the bound."""
    if dynamic_bytes + static_bytes > SHARED_LIMIT_BYTES:
        raise ValueError(f"{name}: {what} needs {dynamic_bytes + static_bytes} bytes of shared memory "
                         f"({dynamic_bytes} dynamic + {static_bytes} static), over the {SHARED_LIMIT_BYTES}-byte limit")


def attend_static_shared_bytes(head_dim: int, tile: int) -> int:
    """Static shared memory of pa::attend (common.cuh): q tile + two [TILE][NUM_WARPS] reduction arrays."""
    return 4 * (tile * head_dim + 2 * tile * NUM_WARPS)


def attend_dynamic_floats(head_dim: int, tile: int, logits_stride: int) -> int:
    """Dynamic shared floats pa::attend needs: logits, later reused for the warps' partial outputs."""
    return max(tile * logits_stride, NUM_WARPS * tile * head_dim)


def partition_for(block_size: int, partition_size: int | None) -> int:
    """Split-KV partition in tokens: default 512 (the block size when that is larger); a given size must be
    a positive multiple of the block size (partitions start at block boundaries)."""
    if partition_size is None:
        return max(512, block_size)
    size = int(partition_size)
    if size < 1 or size % block_size:
        raise ValueError(f"partition_size {size} must be a positive multiple of block_size {block_size}")
    return size


class Prepared:
    """Launches (kernel, grid, block, args, shared_mem) run in order by launch(); result() downloads `out`."""

    def __init__(self, launches, out, keep=()):
        self.launches = launches
        self.out = out
        self.keep = keep  # device arrays the launches point at

    def launch(self) -> None:
        for kernel, grid, block, args, shared_mem in self.launches:
            kernel(grid, block, args, shared_mem=shared_mem)

    def result(self) -> np.ndarray:
        return np.asarray(backends.to_host(self.out))


def upload_problem(problem, backend):
    """(query, key_cache, value_cache, block_tables, context_lens) on the backend, C-contiguous."""
    p = problem
    return tuple(backends.to_device(np.ascontiguousarray(a), backend)
                 for a in (p.query, p.key_cache, p.value_cache, p.block_tables, p.context_lens))


def output_like(problem, backend):
    return backends.to_device(np.zeros(problem.query.shape, problem.dtype), backend)


def split_kv_scratch(problem, max_partitions: int, backend):
    """tmp_out [seqs, heads, parts, head_dim], max_logits and exp_sums [seqs, heads, parts], float32, NaN-filled:
    an entry the reduce reads without a partition having written it poisons the output."""
    p = problem
    stats = (p.num_seqs, p.num_heads, max_partitions)
    return tuple(backends.to_device(np.full(shape, np.nan, np.float32), backend)
                 for shape in (stats + (p.head_dim,), stats, stats))


def reduce_name(head_dim: int, dtype) -> str:
    return f"pa::paged_attention_reduce<{head_dim}, {ctype(dtype)}>"


REDUCE_STATIC_SHARED_BYTES = 4 * 2 * NUM_WARPS   # red[2][NUM_WARPS] in pa::paged_attention_reduce


def reduce_launch(name, kernel, problem, out, tmp_out, max_logits, exp_sums, context_lens, partition: int,
                  max_partitions: int):
    """The reduce kernel's launch tuple: grid (num_heads, num_seqs), max_partitions floats of shared memory."""
    shared = 4 * max_partitions
    check_shared(name, shared, REDUCE_STATIC_SHARED_BYTES, f"the reduce over {max_partitions} partitions")
    args = (out, tmp_out, max_logits, exp_sums, context_lens, np.int32(problem.num_heads),
            np.int32(max_partitions), np.int32(partition))
    return (kernel, (problem.num_heads, problem.num_seqs), (NUM_THREADS,), args, shared)
