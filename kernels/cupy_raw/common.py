"""What the CUDA C launchers share: load a .cu, compile a configuration once, pass the options, report resources.

    load_source(path) -> str                      the .cu with its local #include "..." inlined
    get_function(backend, path, expression, batch) -> kernel   cupy.RawKernel or the CPU executor's
    cpu_options(**options)                        context manager: executor options (tests: ASan, reverse order)
    compile_report(path, expression, arch, threads, dynamic_shared_bytes) -> dict
    option_flags(problem) -> int                  the pa::OPT_* bitmask a problem needs (template argument)
    option_args(problem, backend) -> tuple        v_scale, soft_cap, alibi_slopes, window_left (kernel arguments)

Modules are cached in-process per (backend, source, name expressions, executor options); the CPU
executor also caches its compiled .so files on disk. On the CPU executor a launcher may name a
`batch` of related instantiations to compile in the same module (e.g. every block size of one head
dim and dtype): g++ pays its fixed cost once per batch. On a GPU only the requested kernel is
compiled (NVRTC's cost is per instantiation, and a batch would cost every request the whole batch).

Precisions and options (see common.cuh): a kernel is a template over the query's type T, the
cache's type C (T, or fp8) and OPTS, a bitmask of the options compiled in; OPTS = 0 (no option
in use) is the plain kernel, unchanged machine code. k_scale is folded into the softmax scale.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import pathlib
import re

import numpy as np

from sandbox.devices import backends
from sandbox.variant import Unsupported

KERNEL_DIR = pathlib.Path(__file__).resolve().parent
OPTIONS = ("-std=c++17",)
NUM_THREADS = 128     # pa::NUM_THREADS in common.cuh
NUM_WARPS = 4
# Dynamic shared memory every GPU grants without an opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize):
# 48 KiB on every architecture since sm_20, static and dynamic together.
SHARED_LIMIT_BYTES = 48 * 1024
CTYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16",
          "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2"}
# pa::OPT_* in common.cuh: the options compiled into a kernel (its OPTS template argument).
OPT_WINDOW, OPT_SOFTCAP, OPT_ALIBI, OPT_VSCALE = 1, 2, 4, 8
# The same-size unsigned type a GPU upload sees for the dtypes CuPy does not know (ml_dtypes').
_RAW_VIEW = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}
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
            else:  # `#pragma once` becomes a blank line, so every later line keeps its number
                lines.append("" if line.strip() == "#pragma once" else line)
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

    `batch`: on the CPU executor, further name expressions compiled in the same module (cached
    together); ignored on a GPU, where the module holds `expression` alone.
    """
    if backend == "gpu":
        return _function(backend, str(path), (expression,), (), expression)
    batch = tuple(dict.fromkeys(batch))
    expressions = batch if expression in batch else (expression, *batch)  # one module per batch, whatever is asked
    return _function(backend, str(path), expressions, _cpu_options.get(), expression)


def ctype(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in CTYPES:
        raise Unsupported(f"dtype {name} has no CUDA C type here; supported: {', '.join(CTYPES)}")
    return CTYPES[name]


def type_args(dtype, kv_dtype=None, flags: int = 0) -> str:
    """Template arguments for (query dtype, cache dtype, option flags): "__half", or "__half, __nv_fp8_e4m3, 5".

    The plain case (cache of the query's dtype, no options) names the kernel as before options existed
    (the template's defaults), so its name expression, caches and reports do not change.
    """
    kv = np.dtype(dtype) if kv_dtype is None else np.dtype(kv_dtype)
    if kv == np.dtype(dtype) and not flags:
        return ctype(dtype)
    return f"{ctype(dtype)}, {ctype(kv)}, {int(flags)}"


def option_flags(problem) -> int:
    """The pa::OPT_* bitmask `problem` needs: one bit per option in use (k_scale needs none: it is in the scale)."""
    o = problem.options
    return ((OPT_WINDOW if o.window_left >= 0 else 0) | (OPT_SOFTCAP if o.logits_soft_cap > 0 else 0)
            | (OPT_ALIBI if o.alibi_slopes is not None else 0) | (OPT_VSCALE if o.v_scale != 1.0 else 0))


def kernel_scale(problem) -> np.float32:
    """The kernels' `scale` argument: softmax scale times k_scale (dequantized K = key * k_scale)."""
    return np.float32(problem.softmax_scale * problem.options.k_scale)


def option_args(problem, backend) -> tuple:
    """(v_scale, soft_cap, alibi_slopes, window_left): the kernels' trailing arguments. Options not in use
    pass neutral values (never read: their code is not compiled in); alibi_slopes is then a 1-float array."""
    o = problem.options
    slopes = o.alibi_slopes if o.alibi_slopes is not None else np.zeros(1, np.float32)
    window = min(int(o.window_left), 2**31 - 1)
    return (np.float32(o.v_scale), np.float32(o.logits_soft_cap),
            backends.to_device(np.ascontiguousarray(slopes, dtype=np.float32), backend), np.int32(window))


def tokens_read(problem) -> np.ndarray:
    """int64 [num_seqs]: tokens each sequence's query reads (its context, or its window)."""
    return problem.context_lens.astype(np.int64) - problem.first_read_tokens()


def cpu_batch(names, expression: str, plain: bool):
    """The batch a launcher asks for: `names` (e.g. every block size) for a plain kernel, else the
    requested instantiation alone: with a dtype pair and option bits in the template, a batch of
    option kernels would rarely be used again."""
    return list(names) if plain else [expression]


def vec_elems(dtype) -> int:
    """Elements per 16-byte vector load."""
    return 16 // np.dtype(dtype).itemsize


@functools.lru_cache(maxsize=None)
def _compiled(path: str, expressions: tuple, arch: str):
    from sandbox.analysis import nvrtc
    return nvrtc.compile_cubin(load_source(path), expressions, arch=arch, options=OPTIONS, name=pathlib.Path(path).name)


def compile_report(path, expression: str, arch: str, threads_per_block: int, dynamic_shared_bytes: int,
                   extra_expressions=()) -> dict:
    """Static resources of kernel `expression` compiled NVRTC -> cubin for `arch` (sm_80, sm_90).

    Keys: registers, static_shared_bytes, dynamic_shared_bytes, local_bytes, spill_stores, spill_loads,
    threads_per_block, path, arch, kernel, image ((cubin, mangled name), for sandbox.analysis.sass).
    """
    arch = arch if str(arch).startswith("sm_") else f"sm_{arch}"
    # sorted: a two-kernel report asks (main, [second]) then (second, [main]); one NVRTC run serves both
    compiled = _compiled(str(path), tuple(sorted({expression, *extra_expressions})), arch)
    res = compiled.resources[expression]
    return dict(registers=res.registers, static_shared_bytes=res.static_shared_bytes,
                dynamic_shared_bytes=int(dynamic_shared_bytes), local_bytes=res.local_bytes,
                spill_stores=res.spill_stores, spill_loads=res.spill_loads,
                threads_per_block=threads_per_block, path="NVRTC -> cubin", arch=arch, kernel=expression,
                image=(compiled.cubin, compiled.lowered[expression]))


def split_kv_report(path, expression: str, head_dim: int, dtype, arch: str, dynamic_shared_bytes: int,
                    note: str, window: bool = False) -> dict:
    """compile_report() of a split-KV variant: the attention kernel's numbers on top, and `kernels`
    listing it ("partition") and the reduce kernel ("reduce", shared memory for 8 partitions)."""
    reduce = reduce_name(head_dim, dtype, window)
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
        raise Unsupported(f"{name}: {what} needs {dynamic_bytes + static_bytes} bytes of shared memory "
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
    """Launches (kernel, grid, block, args, shared_mem) run in order by launch(); result() downloads `out`
    (in `out_dtype`: a GPU holds bfloat16 as raw uint16)."""

    def __init__(self, launches, out, keep=(), out_dtype=None):
        self.launches = launches
        self.out = out
        self.keep = keep  # device arrays the launches point at
        self.out_dtype = out_dtype

    def launch(self) -> None:
        for kernel, grid, block, args, shared_mem in self.launches:
            kernel(grid, block, args, shared_mem=shared_mem)

    def result(self) -> np.ndarray:
        out = np.asarray(backends.to_host(self.out))
        return out if self.out_dtype is None else out.view(self.out_dtype)


class SplitKVPrepared(Prepared):
    """A split-KV variant's two launches: the partition kernel, then the reduce (sandbox.variant.limits's launch_parts)."""

    def _run(self, i: int) -> None:
        kernel, grid, block, args, shared_mem = self.launches[i]
        kernel(grid, block, args, shared_mem=shared_mem)

    def launch_partition(self) -> None:
        """The partition kernel alone (what launch() does minus the reduce): for timing it on its own."""
        self._run(0)

    def launch_reduce(self) -> None:
        """The reduce alone: combines what the last launch_partition() wrote."""
        self._run(1)

    def launch_parts(self):
        """[("partition", launch_partition), ("reduce", launch_reduce)]: launch() one kernel at a time."""
        return [("partition", self.launch_partition), ("reduce", self.launch_reduce)]


def to_device(array: np.ndarray, backend):
    """C-contiguous copy on the backend; on a GPU, dtypes CuPy lacks (bfloat16, fp8) go as raw bits."""
    array = np.ascontiguousarray(array)
    if backend == "gpu" and array.dtype.name in _RAW_VIEW:
        array = array.view(_RAW_VIEW[array.dtype.name])
    return backends.to_device(array, backend)


def upload_problem(problem, backend):
    """(query, key_cache, value_cache, block_tables, context_lens) on the backend, C-contiguous."""
    p = problem
    return tuple(to_device(a, backend) for a in (p.query, p.key_cache, p.value_cache, p.block_tables, p.context_lens))


def output_like(problem, backend):
    return to_device(np.zeros(problem.query.shape, problem.dtype), backend)


def split_kv_scratch(problem, max_partitions: int, backend):
    """tmp_out [seqs, heads, parts, head_dim], max_logits and exp_sums [seqs, heads, parts], float32, NaN-filled:
    an entry the reduce reads without a partition having written it poisons the output."""
    p = problem
    stats = (p.num_seqs, p.num_heads, max_partitions)
    return tuple(backends.to_device(np.full(shape, np.nan, np.float32), backend)
                 for shape in (stats + (p.head_dim,), stats, stats))


def reduce_name(head_dim: int, dtype, window: bool = False) -> str:
    """The reduce kernel for a head dim and output dtype; window: partitions start at the window's start."""
    return f"pa::paged_attention_reduce<{head_dim}, {ctype(dtype)}{', true' if window else ''}>"


REDUCE_STATIC_SHARED_BYTES = 4 * 2 * NUM_WARPS   # red[2][NUM_WARPS] in pa::paged_attention_reduce


def reduce_launch(name, kernel, problem, out, tmp_out, max_logits, exp_sums, context_lens, partition: int,
                  max_partitions: int):
    """The reduce kernel's launch tuple: grid (num_heads, num_seqs), max_partitions floats of shared memory."""
    shared = 4 * max_partitions
    check_shared(name, shared, REDUCE_STATIC_SHARED_BYTES, f"the reduce over {max_partitions} partitions")
    window = min(int(problem.options.window_left), 2**31 - 1)
    args = (out, tmp_out, max_logits, exp_sums, context_lens, np.int32(problem.num_heads),
            np.int32(max_partitions), np.int32(partition), np.int32(window))
    return (kernel, (problem.num_heads, problem.num_seqs), (NUM_THREADS,), args, shared)
