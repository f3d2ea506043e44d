"""flashinfer.decode: FlashInfer's paged decode kernel (BatchDecodeWithPagedKVCacheKernel's body), as a peer.

Idea: not ours. The kernel is FlashInfer's own, compiled from the headers the flashinfer-python wheel ships
(kernels/flashinfer/wheel.py finds them; nothing of FlashInfer is copied into this repository) behind a
small launcher of ours (decode.cu) that builds FlashInfer's BatchDecodeParams from flat arguments and
calls BatchDecodeWithPagedKVCacheDevice with FlashInfer's DefaultAttention, the template arguments picked
as FlashInfer's BatchDecodeWithPagedKVCacheDispatched picks them (dispatch.plan()): vec_size = max(16 B / elem,
head_dim / 32), bdx = head_dim / vec_size, bdy = the GQA group, bdz = max(128, bdx * bdy) / (bdx * bdy),
tile_size_per_bdx 4 for group 1 (2 for 1-byte caches) and 1 otherwise, two shared-memory stages (sm_80+).
The sandbox's block tables become FlashInfer's CSR page table (kv_indptr, kv_indices, kv_last_page_len);
its cache layout [num_blocks, block_size, num_kv_heads, head_dim] is FlashInfer's NHD already.
Limits: FlashInfer's decode dispatch: head dims 64, 128, 256; GQA groups 1, 2, 3, 4, 6, 8, 16 (with at most
1024 threads); any page size (a runtime divisor); float16 and bfloat16 queries with caches of the same
dtype; softcap (DefaultAttention's logits soft cap) and lse (FlashInfer's base-2 log-sum-exp, converted to
the natural log here). Split-KV as FlashInfer's planner (scheduler.cuh) decides it without CUDA graphs:
when the batch's blocks do not fill the grid, sequences are cut into chunks of at least 128 tokens and
FlashInfer's own PersistentVariableLengthMergeStatesKernel merges them (dispatch.split_plan(); TUNABLES split="off"
turns it off). Not offered: fp8 caches, sliding windows (blocks freed before the window leave -1 pages
that FlashInfer's loader would read), ALiBi and sinks.
On a GPU the same launcher, compiled by nvcc to a cubin for the GPU's architecture (census.py: the headers
include the C++ standard library, which NVRTC lacks), is loaded by CuPy's RawModule; not yet run on a GPU.
"""
from __future__ import annotations

import functools
import math
import tempfile
from pathlib import Path

import numpy as np

from sandbox.analysis import gpus
from sandbox.cpucuda import CpuCompileError
from sandbox.devices import backends
from sandbox.devices.grid import CheckedModule
from sandbox.variant import Limits, Unsupported
from sandbox.variant.cuda_launch import current_cpu_options, to_device

from . import census, wheel
from .dispatch import (ASSUMED_REGISTERS, HEAD_DIMS, NAME, NUM_STAGES_SMEM, chunked, kernel_name,  # noqa: F401
                       merge_launch, merge_name, page_table, plan, split_plan)

PATH = Path(__file__).resolve().with_suffix(".cu")
# split: "planner" splits long sequences into chunks and merges them as FlashInfer's planner decides; "off"
# runs one block per sequence and KV head (what FlashInfer does when its planner does not split).
TUNABLES = {"split": ("planner", "off")}
LIMITS = Limits(block_sizes=None, head_dims=HEAD_DIMS, dtypes=("float16", "bfloat16"), options=("softcap", "lse"))


def device_sms(backend: str) -> int:
    if backend == "gpu":
        import cupy
        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    return gpus.get(gpus.DEFAULT).sms


# On the CPU executor one g++ run compiles these groups (with and without the soft cap) for a head dim and dtype:
# parsing FlashInfer's headers is most of a compile (13 s for one instantiation at -O2, 19 s for eight).
BATCH_GROUPS = (1, 2, 4, 8)


def options() -> tuple[str, ...]:
    return ("-std=c++17",) + tuple(f"-I{d}" for d in wheel.locate().include_dirs)


def batch(head_dim: int, dtype: str, kv_itemsize: int) -> tuple[str, ...]:
    """The instantiations compiled together with any one of them on the CPU executor (and the merge)."""
    return tuple(kernel_name(plan(head_dim, g, kv_itemsize), dtype, cap) for g in BATCH_GROUPS
                 for cap in (False, True)) + (merge_name(head_dim, dtype),)


@functools.lru_cache(maxsize=None)
def _module(backend: str, expressions: tuple, cpu_options: tuple):
    return backends.raw_module(backend, PATH.read_text(), options(), list(expressions), **dict(cpu_options))


@functools.lru_cache(maxsize=None)
def _gpu_function(expression: str):
    """On a GPU: nvcc's cubin for this GPU's architecture (census.py; NVRTC cannot compile the headers), loaded
    by CuPy's RawModule and looked up by its mangled name."""
    import cupy
    arch = "sm_" + cupy.cuda.Device().compute_capability
    _, cubin, mangled = census.compile_one(PATH.read_text(), expression, arch, wheel.locate().include_dirs)
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    return CheckedModule(cupy.RawModule(path=f.name)).get_function(mangled)


def get_function(backend: str, expression: str, together=()):
    """The kernel `expression`; on the CPU compiled in one module with `together` (see BATCH_GROUPS)."""
    if backend == "gpu":
        try:
            return _gpu_function(expression)
        except census.NvccError as exc:
            raise Unsupported(f"{NAME}: {str(exc).splitlines()[0]}") from exc
    expressions = tuple(together) if expression in together else (expression,)
    try:
        return _module(backend, expressions, current_cpu_options()).get_function(expression)
    except CpuCompileError as exc:
        raise Unsupported(f"{NAME}: the executor cannot compile {wheel.locate().label}'s decode kernel: "
                          f"{str(exc).splitlines()[0]}") from exc


class Prepared:
    """FlashInfer's launches: the decode kernel, then (split-KV) its merge; result() returns out, lse() the
    natural-log log-sum-exp (problems with return_lse; FlashInfer writes it in base 2)."""

    def __init__(self, launches, out, lse, out_dtype, return_lse, backend="cpu", chunk_pages=0):
        self.launches = launches   # [(kernel, grid, block, args, shared_mem)], as kernels/cupy_raw's Prepared
        self.out, self.lse_device, self.out_dtype, self.return_lse = out, lse, out_dtype, return_lse
        self.backend, self.chunk_pages = backend, chunk_pages

    def subset(self, problem) -> "Prepared":
        """`problem` (some of this one's sequences: the traffic count's sample) prepared with this plan's
        chunks, not the plan its smaller batch would get: the counts then scale to this launch."""
        return prepare(problem, self.backend, chunk_pages=self.chunk_pages)

    def launch(self) -> None:
        for kernel, grid, block, args, shared in self.launches:
            kernel(grid, block, args, shared_mem=shared)

    def launch_parts(self):
        """[("partition", ...), ("reduce", ...)] when split (the sweep times each), else None."""
        if len(self.launches) < 2:
            return None
        def one(i):
            kernel, grid, block, args, shared = self.launches[i]
            return lambda: kernel(grid, block, args, shared_mem=shared)
        return [("partition", one(0)), ("reduce", one(1))]

    def result(self) -> np.ndarray:
        """[num_seqs, num_heads, head_dim] in the query's dtype."""
        return np.asarray(backends.to_host(self.out)).view(self.out_dtype)

    def lse(self) -> np.ndarray:
        """float32 [num_seqs, num_heads], natural log (FlashInfer's base-2 lse times ln 2)."""
        if not self.return_lse:
            raise ValueError("this launch computes no log-sum-exp: prepare it for a problem with return_lse=True")
        lse2 = np.asarray(backends.to_host(self.lse_device))
        return (lse2 * np.float32(math.log(2))).astype(np.float32)


def prepare(problem, backend: str, *, split: str = "planner", chunk_pages: int | None = None) -> Prepared:
    """Convert the block tables, plan as FlashInfer would (split: "planner" as its planner decides, "off"
    one block per sequence and KV head; chunk_pages: this chunking instead, 0 none: Prepared.subset),
    upload, compile FlashInfer's instantiation for the problem."""
    wheel.locate()  # a missing or other wheel: Unsupported with the reason, before any work
    p = problem
    dtype = np.dtype(p.dtype).name
    LIMITS.check(NAME, p, backend)
    kv_itemsize = np.dtype(p.kv_dtype).itemsize
    shape = plan(p.head_dim, p.num_heads // p.num_kv_heads, kv_itemsize)
    soft_cap = p.options.logits_soft_cap > 0
    together = batch(p.head_dim, dtype, kv_itemsize)
    kernel = get_function(backend, kernel_name(shape, dtype, soft_cap), together)
    indptr, indices, last = page_table(p.block_tables, p.context_lens, p.block_size)
    n, heads = p.num_seqs, p.num_heads
    sms = device_sms(backend)
    if chunk_pages is not None:
        chunks = chunked(np.diff(indptr), chunk_pages) if chunk_pages else None
    else:
        chunks = split_plan(np.diff(indptr), p.num_kv_heads, p.block_size, shape, sms) if split == "planner" else None
    request = chunks.request_indices if chunks else np.arange(n, dtype=np.int32)
    tiles = chunks.kv_tile_indices if chunks else np.zeros(n, np.int32)
    chunk_tokens = np.array([chunks.chunk_pages * p.block_size if chunks else 0], np.int32)
    padded = len(request)
    dev = [to_device(a, backend) for a in (p.query, p.key_cache, p.value_cache, indices, indptr, last, request,
                                           tiles, chunk_tokens)]
    out = to_device(np.zeros(p.query.shape, p.query.dtype), backend)
    lse = backends.to_device(np.full((n, heads), np.nan, np.float32), backend)
    lse_arg = lse if p.options.return_lse else None
    # split: the chunks' partial outputs and base-2 log-sum-exps, NaN-filled (an unwritten one poisons the merge)
    tmp_v = to_device(np.full((padded, heads, p.head_dim), np.nan, p.query.dtype), backend) if chunks else out
    tmp_s = backends.to_device(np.full((padded, heads), np.nan, np.float32), backend) if chunks else lse_arg
    args = (*dev, tmp_v, tmp_s, np.uint32(n), np.uint32(padded), np.uint32(heads), np.uint32(p.num_kv_heads),
            np.uint32(p.block_size), np.int32(-1), np.float32(p.options.logits_soft_cap),
            np.float32(p.softmax_scale), np.bool_(bool(chunks)))
    launches = [(kernel, (padded, p.num_kv_heads), shape.threads, args, shape.shared_bytes)]
    if chunks:
        merge = get_function(backend, merge_name(p.head_dim, dtype), together)
        grid, block, shared = merge_launch(p.head_dim, np.dtype(p.dtype).itemsize, n, heads, sms)
        o_indptr = to_device(chunks.o_indptr, backend)
        launches.append((merge, grid, block, (tmp_v, tmp_s, o_indptr, out, lse_arg, np.uint32(n), None,
                                              np.uint32(heads)), shared))
    return Prepared(launches, out, lse, p.query.dtype, p.options.return_lse, backend,
                    chunks.chunk_pages if chunks else 0)


# compile_report's shape: the goal shapes' GQA group (32 query heads over 8 KV heads), as the CUDA C variants'.
REPORT_GROUP = 4


def compile_report(block_size: int, head_dim: int, dtype, arch: str, split: str = "planner") -> dict:
    """Static resources of FlashInfer's decode kernel (GQA group 4; any block size is the same kernel) and of
    its merge kernel, compiled by nvcc (census.report). split: the tunable (the same kernels either way;
    without a split only the first runs)."""
    dtype = np.dtype(dtype).name
    if dtype not in LIMITS.dtypes:
        raise Unsupported(f"{NAME} does not support dtype={dtype} (supported: {', '.join(LIMITS.dtypes)})")
    shape = plan(head_dim, REPORT_GROUP, np.dtype(dtype).itemsize)  # Unsupported for another head dim
    return census.report(PATH.read_text(), wheel.locate(), shape, head_dim, dtype, arch)
