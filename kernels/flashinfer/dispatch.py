"""FlashInfer's decisions for a decode launch, as its C++ makes them (decode.cuh, scheduler.cuh, cascade.cuh).

    plan(head_dim, group, kv_itemsize) -> Plan        BatchDecodeWithPagedKVCacheDispatched's template arguments
    kernel_name(plan, dtype, soft_cap)                 the launcher's instantiation (decode.cu)
    split_plan(pages, num_kv_heads, block_size, plan, sms) -> Split | None   the planner's chunks (no CUDA graphs)
    merge_name(head_dim, dtype), merge_launch(...)    VariableLengthMergeStates's kernel and launch
    page_table(block_tables, context_lens, block_size) the CSR page table (kv_indptr, kv_indices, kv_last_page_len)
"""
from __future__ import annotations

import dataclasses

import numpy as np

from sandbox.analysis.occupancy import occupancy
from sandbox.variant import Unsupported

NAME = "flashinfer.decode"
HEAD_DIMS = (64, 128, 256)
GROUP_SIZES = (1, 2, 3, 4, 6, 8, 16)   # DISPATCH_GQA_GROUP_SIZE in the wheel's utils.cuh
NUM_STAGES_SMEM = 2                   # DISPATCH_COMPUTE_CAP_DECODE_NUM_STAGES_SMEM for sm_80 and later
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


# The planner (scheduler.cuh's BatchDecodeWithPagedKVCacheWorkEstimationDispatched) sizes its grid from the
# device's SMs and the kernel's occupancy. The registers are not known here (NVRTC cannot compile the headers,
# which include <iostream>): occupancy is taken at this count, beside the threads and shared memory the plan
# fixes. The device is the performance model's default (H200 SXM, 132 SMs), or the GPU that runs it.
ASSUMED_REGISTERS = 64
MERGE_THREADS = 128      # VariableLengthMergeStates: 128 threads, 4 shared-memory stages
MERGE_STAGES = 4


@dataclasses.dataclass(frozen=True)
class Split:
    """FlashInfer's split-KV plan: chunks of `chunk_pages` pages, one block per (chunk, KV head)."""

    chunk_pages: int
    request_indices: np.ndarray   # [padded_batch_size] int32: the sequence of each chunk
    kv_tile_indices: np.ndarray   # [padded_batch_size] int32: the chunk's index within its sequence
    o_indptr: np.ndarray          # [num_seqs + 1] int32: each sequence's first chunk


def split_plan(pages: np.ndarray, num_kv_heads: int, block_size: int, shape: Plan, sms: int) -> Split | None:
    """What FlashInfer's planner decides without CUDA graphs: None when the batch fills the grid (or chunks
    would not shorten any sequence), else the smallest chunk (at least 128 tokens) whose chunks fit it."""
    threads = shape.bdx * shape.bdy * shape.bdz
    per_sm = occupancy(ASSUMED_REGISTERS, shape.shared_bytes, threads, "sm_90").blocks_per_sm
    max_grid = max(per_sm, 1) * sms
    if len(pages) * num_kv_heads >= max_grid:
        return None
    low, high = max(128 // block_size, 1), int(pages.max(initial=0))
    while low < high:  # PartitionPagedKVCacheBinarySearchMinNumPagePerBatch
        mid = (low + high) // 2
        if int(sum(-(-int(n) // mid) for n in pages)) * num_kv_heads > max_grid:
            low = mid + 1
        else:
            high = mid
    return chunked(pages, low)


def chunked(pages: np.ndarray, chunk_pages: int) -> Split | None:
    """The chunks of `chunk_pages` pages (None when no sequence needs more than one)."""
    batch = len(pages)
    chunks = [-(-max(int(n), 1) // chunk_pages) for n in pages]
    if sum(chunks) == batch:
        return None
    request = np.repeat(np.arange(batch, dtype=np.int32), chunks)
    tiles = np.concatenate([np.arange(c, dtype=np.int32) for c in chunks])
    return Split(chunk_pages, request, tiles, np.concatenate([[0], np.cumsum(chunks)]).astype(np.int32))


def merge_name(head_dim: int, dtype: str) -> str:
    """FlashInfer's own merge kernel (cascade.cuh), launched as it is: its parameters are plain."""
    t = CTYPES[dtype]
    vec = max(16 // 2, head_dim // 32)
    bdx = head_dim // vec
    return (f"flashinfer::PersistentVariableLengthMergeStatesKernel<{vec}, {bdx}, {MERGE_THREADS // bdx}, "
            f"{MERGE_STAGES}, {t}, {t}, int32_t>")


def merge_launch(head_dim: int, itemsize: int, num_seqs: int, num_heads: int, sms: int):
    """(grid, block, shared bytes) of VariableLengthMergeStates: a persistent grid of at most 4 blocks per SM
    (its occupancy at 128 threads), no more than the (sequence, head) pairs need."""
    vec = max(16 // itemsize, head_dim // 32)
    bdx = head_dim // vec
    bdy = MERGE_THREADS // bdx
    shared = MERGE_STAGES * bdy * head_dim * itemsize + MERGE_THREADS * 4
    per_sm = min(4, -(-num_seqs * num_heads // sms))
    return (sms * per_sm,), (bdx, bdy), shared


def page_table(block_tables: np.ndarray, context_lens: np.ndarray, block_size: int):
    """FlashInfer's CSR page table: (kv_indptr [num_seqs + 1], kv_indices [pages], kv_last_page_len [num_seqs]),
    int32; a sequence's pages are its table's first ceil(len / block_size) entries."""
    pages = -(-context_lens.astype(np.int64) // block_size)
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    indices = np.concatenate([block_tables[i, :n] for i, n in enumerate(pages)] + [np.zeros(0, np.int32)])
    last = np.where(pages > 0, context_lens - (pages - 1) * block_size, 0).astype(np.int32)
    return indptr, indices.astype(np.int32), last
