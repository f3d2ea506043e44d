"""What this family's launchers share beyond the harness: common.cuh's template arguments, options and shapes.

    type_args(dtype, kv_dtype, flags, threads)    template arguments; threads (TUNABLES) named when not 128
    option_flags(problem) -> int                  the pa::OPT_* bitmask a problem needs (template argument)
    option_args(problem, backend) -> tuple        the option table's kernel arguments, in table order
    kernel_scale(problem), tokens_read(problem)   the softmax scale with k_scale folded in; tokens each query reads
    upload_problem, output_like, lse_output, split_kv_scratch   the kernels' arrays on the backend
    attend_* / row_* / partition_for / reduce_*   common.cuh's shared-memory sizes, row mapping and split-KV reduce

How a CUDA C variant is loaded, compiled, launched and reported is the harness's, for every CUDA C family
(sandbox/variant/cuda_source.py: option_prelude, load_source, ctype; sandbox/variant/cuda_launch.py:
get_function, cpu_options, Prepared, check_shared, compile_report); the names are imported here, so a
launcher reads `common.get_function(...)` as before.

Precisions and options (see codecs.cuh, options.cuh): a kernel is a template over the query's type T, the
cache's type C (T, or fp8) and OPTS, a bitmask of the options compiled in; OPTS = 0 (no option
in use) is the plain kernel, whose option code is not compiled. k_scale is folded into the softmax scale.
Split-KV variants build their partition kernels without sinks and lse (MERGE_FLAGS go to the reduce or
merge kernel). An NVFP4 cache (uint8) has the C type pa::Nvfp4.
"""
from __future__ import annotations

import pathlib

import numpy as np

from sandbox.devices import backends
from sandbox.problem.options import KERNEL_ARGS, KERNEL_FLAGS
from sandbox.variant import KERNEL_SUPPORT, Unsupported  # noqa: F401  (launchers raise common.Unsupported)
from sandbox.variant.cuda_launch import (OPTIONS, SHARED_LIMIT_BYTES, Prepared, SplitKVPrepared,  # noqa: F401
                                         check_shared, compile_report, cpu_options, get_function, to_device)
from sandbox.variant.cuda_source import CTYPES, ctype, load_source, option_prelude  # noqa: F401

KERNEL_DIR = pathlib.Path(__file__).resolve().parent
NUM_THREADS = 128     # pa::NUM_THREADS in warp.cuh: the default threads per block, and the reduce kernels'
NUM_WARPS = 4
# Threads per block pa::attend is correct for (the THREADS template argument; TUNABLES["threads"], default first).
ATTEND_THREADS = (128, 64, 256)
# pa::OPT_* (option_prelude): the options compiled into a kernel (its OPTS template argument), from the table.
OPT = dict(KERNEL_FLAGS)
OPT_WINDOW = OPT["OPT_WINDOW"]  # the reduce kernels' window (partitions start at the window's start)
# What a split-KV variant's reduce (or merge) finishes, never its partitions (pa::MERGE_FLAGS): the sink
# joins the merged denominator once, and the log-sum-exp is the merged range's.
MERGE_FLAGS = OPT["OPT_SINKS"] | OPT["OPT_LSE"]
POW2_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# What the CUDA C attention variants implement (Limits(**SUPPORT)): the kernels' common support, learned
# sinks, the log-sum-exp as an output and fp8 scales per token and KV head.
SUPPORT = dict(KERNEL_SUPPORT, options=KERNEL_SUPPORT["options"] + ("sinks", "lse", "kv_scales"))
HEAD_DIMS = (32, 64, 80, 96, 112, 128, 192, 256, 512)


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


def attend_static_shared_bytes(head_dim: int, tile: int, threads: int = NUM_THREADS) -> int:
    """Static shared memory of pa::attend (attend.cuh): q tile + two [TILE][threads / 32] reduction arrays."""
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
