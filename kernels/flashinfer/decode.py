"""flashinfer.decode: FlashInfer's paged decode kernel (BatchDecodeWithPagedKVCacheKernel's body), as a peer.

Idea: not ours. The kernel is FlashInfer's own, compiled from the headers the flashinfer-python wheel ships
(kernels/flashinfer/wheel.py finds them; nothing of FlashInfer is copied into this repository) behind a
small launcher of ours (decode.cu) that builds FlashInfer's BatchDecodeParams from flat arguments and
calls BatchDecodeWithPagedKVCacheDevice with FlashInfer's DefaultAttention, the template arguments picked
as FlashInfer's BatchDecodeWithPagedKVCacheDispatched picks them (plan()): vec_size = max(16 B / elem,
head_dim / 32), bdx = head_dim / vec_size, bdy = the GQA group, bdz = max(128, bdx * bdy) / (bdx * bdy),
tile_size_per_bdx 4 for group 1 (2 for 1-byte caches) and 1 otherwise, two shared-memory stages (sm_80+).
The sandbox's block tables become FlashInfer's CSR page table (kv_indptr, kv_indices, kv_last_page_len);
its cache layout [num_blocks, block_size, num_kv_heads, head_dim] is FlashInfer's NHD already.
Limits: FlashInfer's decode dispatch: head dims 64, 128, 256; GQA groups 1, 2, 3, 4, 6, 8, 16 (with at most
1024 threads); any page size (a runtime divisor); float16 and bfloat16 queries with caches of the same
dtype; softcap (DefaultAttention's logits soft cap) and lse (FlashInfer's base-2 log-sum-exp, converted to
the natural log here). Not offered: split-KV and its merge (FlashInfer's planner splits long sequences
across blocks, then runs VariableLengthMergeStates; here every sequence is one block per KV head, as
FlashInfer runs when its planner does not split), fp8 caches, sliding windows (blocks freed before the
window leave -1 pages that FlashInfer's loader would read), ALiBi and sinks.
On a GPU the same launcher goes through CuPy's RawModule (nvcc when on PATH: the headers include
<iostream>, which NVRTC lacks); not yet run on a GPU here.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import shutil
from pathlib import Path

import numpy as np

from sandbox.devices import backends
from sandbox.variant import Limits, Unsupported

from . import wheel

NAME = "flashinfer.decode"
PATH = Path(__file__).resolve().with_suffix(".cu")
HEAD_DIMS = (64, 128, 256)
GROUP_SIZES = (1, 2, 3, 4, 6, 8, 16)   # DISPATCH_GQA_GROUP_SIZE in the wheel's utils.cuh
NUM_STAGES_SMEM = 2                   # DISPATCH_COMPUTE_CAP_DECODE_NUM_STAGES_SMEM for sm_80 and later
LIMITS = Limits(block_sizes=None, head_dims=HEAD_DIMS, dtypes=("float16", "bfloat16"), options=("softcap", "lse"))
CTYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16"}


@dataclasses.dataclass(frozen=True)
class Plan:
    """FlashInfer's launch for one problem: template arguments, block shape and dynamic shared memory."""

    vec_size: int
    bdx: int
    bdy: int
    bdz: int
    tile_size_per_bdx: int
    shared_bytes: int

    @property
    def threads(self) -> tuple[int, int, int]:
        return self.bdx, self.bdy, self.bdz


def plan(head_dim: int, group: int, kv_itemsize: int) -> Plan:
    """The template arguments BatchDecodeWithPagedKVCacheDispatched instantiates (decode.cuh), or Unsupported."""
    if head_dim not in HEAD_DIMS:
        raise Unsupported(f"{NAME} does not support head_dim={head_dim} (FlashInfer's decode: {HEAD_DIMS})")
    if group not in GROUP_SIZES:
        raise Unsupported(f"{NAME} does not support a GQA group of {group} (FlashInfer dispatches {GROUP_SIZES})")
    vec_size = max(16 // kv_itemsize, head_dim // 32)
    bdx = head_dim // vec_size
    threads = max(128, bdx * group)
    if threads > 1024:
        raise Unsupported(f"{NAME}: head_dim {head_dim} with a GQA group of {group} needs {threads} threads per "
                          "block (CUDA allows 1024)")
    bdz = threads // (bdx * group)
    tile = (2 if kv_itemsize == 1 else 4) if group == 1 else 1
    kv_bytes = max(2 * NUM_STAGES_SMEM * tile * group * bdz * head_dim * kv_itemsize, bdz * group * head_dim * 4)
    offsets = max(tile * threads * 8, 2 * group * bdz * 4)   # size_t page offsets, or the m/d pairs of sync_state
    return Plan(vec_size, bdx, group, bdz, tile, kv_bytes + offsets)


def kernel_name(p: Plan, dtype: str, soft_cap: bool) -> str:
    t = CTYPES[dtype]
    return (f"sandbox_fi::decode<{NUM_STAGES_SMEM}, {p.tile_size_per_bdx}, {p.vec_size}, {p.bdx}, {p.bdy}, {p.bdz}, "
            f"{str(soft_cap).lower()}, false, {t}, {t}>")


def page_table(block_tables: np.ndarray, context_lens: np.ndarray, block_size: int):
    """FlashInfer's CSR page table: (kv_indptr [num_seqs + 1], kv_indices [pages], kv_last_page_len [num_seqs]),
    int32; a sequence's pages are its table's first ceil(len / block_size) entries."""
    pages = -(-context_lens.astype(np.int64) // block_size)
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    indices = np.concatenate([block_tables[i, :n] for i, n in enumerate(pages)] + [np.zeros(0, np.int32)])
    last = np.where(pages > 0, context_lens - (pages - 1) * block_size, 0).astype(np.int32)
    return indptr, indices.astype(np.int32), last


# On the CPU executor one g++ run compiles these groups (with and without the soft cap) for a head dim and dtype:
# parsing FlashInfer's headers is most of a compile (13 s for one instantiation at -O2, 19 s for eight).
BATCH_GROUPS = (1, 2, 4, 8)


def options() -> tuple[str, ...]:
    return ("-std=c++17",) + tuple(f"-I{d}" for d in wheel.locate().include_dirs)


def batch(head_dim: int, dtype: str, kv_itemsize: int) -> tuple[str, ...]:
    """The instantiations compiled together with any one of them on the CPU executor."""
    return tuple(kernel_name(plan(head_dim, g, kv_itemsize), dtype, cap) for g in BATCH_GROUPS for cap in (False, True))


@functools.lru_cache(maxsize=None)
def _module(backend: str, expressions: tuple, cpu_options: tuple):
    code = PATH.read_text()
    if backend != "gpu":
        return backends.raw_module(backend, code, options(), list(expressions), **dict(cpu_options))
    import cupy
    from sandbox.devices.grid import CheckedModule
    compiler = "nvcc" if shutil.which("nvcc") else "nvrtc"  # the headers include <iostream>: NVRTC has none
    return CheckedModule(cupy.RawModule(code=code, options=options(), name_expressions=list(expressions),
                                        backend=compiler))


def get_function(backend: str, expression: str, together=()):
    """The kernel `expression`; on the CPU compiled in one module with `together` (see BATCH_GROUPS)."""
    from kernels.cupy_raw.common import _cpu_options
    from sandbox.cpucuda import CpuCompileError
    expressions = (expression,) if backend == "gpu" or expression not in together else tuple(together)
    cpu = () if backend == "gpu" else _cpu_options.get()
    try:
        return _module(backend, expressions, cpu).get_function(expression)
    except CpuCompileError as exc:
        raise Unsupported(f"{NAME}: the executor cannot compile {wheel.locate().label}'s decode kernel: "
                          f"{str(exc).splitlines()[0]}") from exc


class Prepared:
    """One launch of FlashInfer's kernel; result() returns out (and the natural-log lse with return_lse)."""

    def __init__(self, kernel, grid, block, args, shared_bytes, out, lse, out_dtype, return_lse):
        self.kernel, self.grid, self.block, self.args, self.shared_bytes = kernel, grid, block, args, shared_bytes
        self.out, self.lse, self.out_dtype, self.return_lse = out, lse, out_dtype, return_lse

    def launch(self) -> None:
        self.kernel(self.grid, self.block, self.args, shared_mem=self.shared_bytes)

    def result(self):
        out = np.asarray(backends.to_host(self.out)).view(self.out_dtype)
        if not self.return_lse:
            return out
        lse2 = np.asarray(backends.to_host(self.lse))
        return out, (lse2 * np.float32(math.log(2))).astype(np.float32)


def prepare(problem, backend: str) -> Prepared:
    """Convert the block tables, upload, compile FlashInfer's instantiation for the problem."""
    from kernels.cupy_raw.common import to_device
    wheel.locate()  # a missing or other wheel: Unsupported with the reason, before any work
    p = problem
    dtype = np.dtype(p.dtype).name
    LIMITS.check(NAME, p, backend)
    shape = plan(p.head_dim, p.num_heads // p.num_kv_heads, np.dtype(p.kv_dtype).itemsize)
    soft_cap = p.options.logits_soft_cap > 0
    kv_itemsize = np.dtype(p.kv_dtype).itemsize
    kernel = get_function(backend, kernel_name(shape, dtype, soft_cap), batch(p.head_dim, dtype, kv_itemsize))
    indptr, indices, last = page_table(p.block_tables, p.context_lens, p.block_size)
    n = p.num_seqs
    dev = [to_device(a, backend) for a in (p.query, p.key_cache, p.value_cache, indices, indptr, last,
                                           np.arange(n, dtype=np.int32), np.zeros(n, np.int32),
                                           np.zeros(1, np.int32))]
    out = to_device(np.zeros(p.query.shape, p.query.dtype), backend)
    lse = backends.to_device(np.full((n, p.num_heads), np.nan, np.float32), backend)
    args = (*dev, out, lse if p.options.return_lse else None, np.uint32(n), np.uint32(n), np.uint32(p.num_heads),
            np.uint32(p.num_kv_heads), np.uint32(p.block_size), np.int32(-1),
            np.float32(p.options.logits_soft_cap), np.float32(p.softmax_scale), False)
    return Prepared(kernel, (n, p.num_kv_heads), shape.threads, args, shape.shared_bytes, out, lse, p.query.dtype,
                    p.options.return_lse)
