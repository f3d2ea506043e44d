"""What the CUDA C launchers share: load a .cu, compile a configuration once, pass the options, report resources.

    load_source(path) -> str                      the .cu with its local #include "..." inlined
    get_function(backend, path, expression, batch) -> kernel   cupy.RawKernel or the CPU executor's
    cpu_options(**options)                        context manager: executor options (tests: ASan, reverse order)
    compile_report(path, expression, arch, threads, dynamic_shared_bytes) -> dict
    option_flags(problem) -> int                  the pa::OPT_* bitmask a problem needs (template argument)
    option_args(problem, backend) -> tuple        the option table's kernel arguments, in table order
    lse_output(problem, backend)                  the kernels' `float* lse` output (return_lse) or a placeholder
    type_args(dtype, kv_dtype, flags, threads)    template arguments; threads (TUNABLES) named when not 128

Modules are cached in-process per (backend, source, name expressions, executor options); the CPU
executor also caches its compiled .so files on disk. On the CPU executor a launcher may name a
`batch` of related instantiations to compile in the same module (e.g. every block size of one head
dim and dtype): g++ pays its fixed cost once per batch. On a GPU only the requested kernel is
compiled (NVRTC's cost is per instantiation, and a batch would cost every request the whole batch).

Precisions and options (see common.cuh): a kernel is a template over the query's type T, the
cache's type C (T, or fp8) and OPTS, a bitmask of the options compiled in; OPTS = 0 (no option
in use) is the plain kernel, whose option code is not compiled. The option table
(sandbox/problem/option_table.py) is the one definition of the bits and of the option arguments:
load_source puts option_prelude() in front of every .cu (pa::OPT_* constants, pa::OptionArgs,
PA_OPTION_PARAMS for a kernel's parameter list, PA_OPTION_ARGS to gather them), so NVRTC's and the
executor's caches, keyed on the code, see a change of the table. k_scale is folded into the softmax scale.
Split-KV variants build their partition kernels without sinks and lse (MERGE_FLAGS go to the reduce or
merge kernel). An NVFP4 cache (uint8) has the C type pa::Nvfp4.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import pathlib
import re

import numpy as np

from sandbox.analysis import nvrtc
from sandbox.devices import backends
from sandbox.problem.options import KERNEL_ARGS, KERNEL_FLAGS
from sandbox.variant import KERNEL_SUPPORT, Unsupported

KERNEL_DIR = pathlib.Path(__file__).resolve().parent
OPTIONS = ("-std=c++17",)
NUM_THREADS = 128     # pa::NUM_THREADS in common.cuh: the default threads per block, and the reduce kernels'
NUM_WARPS = 4
# Threads per block pa::attend is correct for (the THREADS template argument; TUNABLES["threads"], default first).
ATTEND_THREADS = (128, 64, 256)
# Dynamic shared memory every GPU grants without an opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize):
# 48 KiB on every architecture since sm_20, static and dynamic together.
SHARED_LIMIT_BYTES = 48 * 1024
CTYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16",
          "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2",
          "uint8": "pa::Nvfp4"}  # uint8: an NVFP4 cache's packed e2m1 pairs (common.cuh)
# pa::OPT_* (option_prelude): the options compiled into a kernel (its OPTS template argument), from the table.
OPT = dict(KERNEL_FLAGS)
OPT_WINDOW = OPT["OPT_WINDOW"]  # the reduce kernels' window (partitions start at the window's start)
# What a split-KV variant's reduce (or merge) finishes, never its partitions (pa::MERGE_FLAGS): the sink
# joins the merged denominator once, and the log-sum-exp is the merged range's.
MERGE_FLAGS = OPT["OPT_SINKS"] | OPT["OPT_LSE"]
# The same-size unsigned type a GPU upload sees for the dtypes CuPy does not know (ml_dtypes').
_RAW_VIEW = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}
POW2_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# What the CUDA C attention variants implement (Limits(**SUPPORT)): the kernels' common support, learned
# sinks, the log-sum-exp as an output and fp8 scales per token and KV head.
SUPPORT = dict(KERNEL_SUPPORT, options=KERNEL_SUPPORT["options"] + ("sinks", "lse", "kv_scales"))
HEAD_DIMS = (32, 64, 80, 96, 112, 128, 192, 256, 512)

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
_cpu_options: contextvars.ContextVar = contextvars.ContextVar("cupy_raw_cpu_options", default=())


def option_prelude() -> str:
    """The CUDA C the option table defines, put in front of every .cu by load_source:

        namespace pa { enum : int { OPT_WINDOW = 1, ... };  struct OptionArgs { int window_left; ... }; }
        #define PA_OPTION_PARAMS int window_left, ...        (a kernel's option parameters, in table order)
        #define PA_OPTION_ARGS pa::OptionArgs{window_left, ...}  (those parameters gathered)
    """
    def param(arg):
        restrict = " __restrict__" if arg.ctype.endswith("*") else ""
        return f"{arg.ctype}{restrict} {arg.name}"

    bits = ", ".join(f"{name} = {bit}" for name, bit in KERNEL_FLAGS)
    members = " ".join(f"{arg.ctype} {arg.name};" for arg in KERNEL_ARGS)
    return "\n".join([
        "// Generated from the option table (sandbox/problem/option_table.py) by kernels/cupy_raw/common.py.",
        f"namespace pa {{ enum : int {{ {bits} }}; struct OptionArgs {{ {members} }}; }}",
        f"#define PA_OPTION_PARAMS {', '.join(param(a) for a in KERNEL_ARGS)}",
        f"#define PA_OPTION_ARGS pa::OptionArgs{{{', '.join(a.name for a in KERNEL_ARGS)}}}",
        ""])


def load_source(path) -> str:
    """option_prelude(), then the source of `path` with local `#include "file"` lines replaced by the file
    (once each, with #line).

    Inlining keeps `code` self-contained, so CuPy's and the executor's caches (keyed on the code)
    see header and option-table edits.
    """
    seen: set = set()
    root = KERNEL_DIR.parent.parent

    def shown(file: pathlib.Path) -> str:  # in #line, so reports name the real file: repo-relative, else absolute
        try:
            return file.relative_to(root).as_posix()
        except ValueError:
            return file.as_posix()

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

    return option_prelude() + expand(pathlib.Path(path)) + "\n"


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


def type_args(dtype, kv_dtype=None, flags: int = 0, threads: int = NUM_THREADS) -> str:
    """Template arguments for (query dtype, cache dtype, option flags, threads per block): "__half",
    "__half, __nv_fp8_e4m3, 5", or "__half, __half, 0, 64".

    The plain case (cache of the query's dtype, no options, the default thread count) names the kernel by
    the template's defaults alone, so every plain instantiation has one name expression (one cache entry,
    one report); the thread count is named only when it is not the default.
    """
    kv = np.dtype(dtype) if kv_dtype is None else np.dtype(kv_dtype)
    if threads != NUM_THREADS:
        return f"{ctype(dtype)}, {ctype(kv)}, {int(flags)}, {int(threads)}"
    if kv == np.dtype(dtype) and not flags:
        return ctype(dtype)
    return f"{ctype(dtype)}, {ctype(kv)}, {int(flags)}"


def option_flags(problem) -> int:
    """The pa::OPT_* bitmask `problem` needs: the flag of every option in use (k_scale needs none: it is in the scale)."""
    return problem.options.kernel_flags()


def kernel_scale(problem) -> np.float32:
    """The kernels' `scale` argument: softmax scale times the table's scale factors (k_scale: K = key * k_scale)."""
    return np.float32(problem.softmax_scale * problem.options.scale_factor())


def option_args(problem, backend, replace=None) -> tuple:
    """PA_OPTION_PARAMS' values: the option table's kernel arguments in table order, arrays on the backend.
    Options not in use pass neutral values (never read: their code is not compiled in). replace: {argument
    name: value} passed instead of the table's (e.g. per-slot arrays in another cache layout)."""
    values = list(problem.options.kernel_values())
    for name, value in (replace or {}).items():
        values[[arg.name for arg in KERNEL_ARGS].index(name)] = value
    return tuple(backends.to_device(np.ascontiguousarray(v), backend) if isinstance(v, np.ndarray) else v
                 for v in values)


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
                    note: str, window: bool = False, threads: int = NUM_THREADS) -> dict:
    """compile_report() of a split-KV variant: the attention kernel's numbers on top (launched with
    `threads` threads), and `kernels` listing it ("partition") and the reduce kernel ("reduce", 128
    threads, shared memory for 8 partitions)."""
    reduce = reduce_name(head_dim, dtype, window)
    main = compile_report(path, expression, arch, threads, dynamic_shared_bytes, extra_expressions=[reduce])
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


def attend_static_shared_bytes(head_dim: int, tile: int, threads: int = NUM_THREADS) -> int:
    """Static shared memory of pa::attend (common.cuh): q tile + two [TILE][threads / 32] reduction arrays."""
    return 4 * (tile * head_dim + 2 * tile * (threads // 32))


def attend_dynamic_floats(head_dim: int, tile: int, logits_stride: int, threads: int = NUM_THREADS) -> int:
    """Dynamic shared floats pa::attend needs: logits, later reused for the warps' partial outputs."""
    return max(tile * logits_stride, (threads // 32) * tile * head_dim)


def row_mapped_block(block_size: int) -> int:
    """The BLOCK_SIZE template argument of a row-mapped kernel (cupy.rows, cupy.dense): the block size when it
    is a power of two up to 256 (index arithmetic by shifts), else 0 (pa::PagedKV<0>: one instantiation for
    every other block size, taken at run time)."""
    return block_size if block_size in POW2_BLOCK_SIZES else 0


def row_partition_for(partition_size: int | None) -> int:
    """A row-mapped variant's split-KV partition in tokens: default 512 whatever the block size (its threads
    find every token row on their own, so a partition may start inside a block); a given size must be >= 1."""
    size = 512 if partition_size is None else int(partition_size)
    if size < 1:
        raise ValueError(f"partition_size must be >= 1, got {size}")
    return size


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
    (in `out_dtype`: a GPU holds bfloat16 as raw uint16), and with `lse` (return_lse) returns (out, lse)."""

    def __init__(self, launches, out, keep=(), out_dtype=None, lse=None):
        self.launches = launches
        self.out = out
        self.keep = keep  # device arrays the launches point at
        self.out_dtype = out_dtype
        self.lse_device = lse  # float32 [num_query_tokens, num_heads] on the device, or None

    def launch(self) -> None:
        for kernel, grid, block, args, shared_mem in self.launches:
            kernel(grid, block, args, shared_mem=shared_mem)

    def result(self):
        out = np.asarray(backends.to_host(self.out))
        out = out if self.out_dtype is None else out.view(self.out_dtype)
        if self.lse_device is None:
            return out
        return out, np.asarray(backends.to_host(self.lse_device))


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


def lse_output(problem, backend):
    """The kernels' `lse` argument: float32 [num_query_tokens, num_heads] NaN-filled (a row no kernel writes
    poisons the result) with return_lse, else a one-float placeholder (never written: OPT_LSE is off)."""
    shape = (problem.query.shape[0], problem.num_heads) if problem.options.return_lse else (1,)
    return backends.to_device(np.full(shape, np.nan, np.float32), backend)


def split_kv_scratch(problem, max_partitions: int, backend):
    """tmp_out [seqs, heads, parts, head_dim], max_logits and exp_sums [seqs, heads, parts], float32, NaN-filled:
    an entry the reduce reads without a partition having written it poisons the output."""
    p = problem
    stats = (p.num_seqs, p.num_heads, max_partitions)
    return tuple(backends.to_device(np.full(shape, np.nan, np.float32), backend)
                 for shape in (stats + (p.head_dim,), stats, stats))


def reduce_name(head_dim: int, dtype, window: bool = False, flags: int = 0) -> str:
    """The reduce kernel for a head dim and output dtype; window: partitions start at the window's start;
    flags: the problem's option bits (the reduce takes MERGE_FLAGS of them: sinks, lse)."""
    merge = int(flags) & MERGE_FLAGS
    if merge:
        return f"pa::paged_attention_reduce<{head_dim}, {ctype(dtype)}, {str(bool(window)).lower()}, {merge}>"
    return f"pa::paged_attention_reduce<{head_dim}, {ctype(dtype)}{', true' if window else ''}>"


REDUCE_STATIC_SHARED_BYTES = 4 * 2 * NUM_WARPS   # red[2][NUM_WARPS] in pa::paged_attention_reduce


def reduce_launch(name, kernel, problem, out, tmp_out, max_logits, exp_sums, context_lens, partition: int,
                  max_partitions: int, lse, options):
    """The reduce kernel's launch tuple: grid (num_heads, num_seqs), max_partitions floats of shared memory;
    lse: lse_output(); options: option_args() (the sinks, the window)."""
    shared = 4 * max_partitions
    check_shared(name, shared, REDUCE_STATIC_SHARED_BYTES, f"the reduce over {max_partitions} partitions")
    args = (out, tmp_out, max_logits, exp_sums, context_lens, np.int32(problem.num_heads),
            np.int32(max_partitions), np.int32(partition), lse, *options)
    return (kernel, (problem.num_heads, problem.num_seqs), (NUM_THREADS,), args, shared)
