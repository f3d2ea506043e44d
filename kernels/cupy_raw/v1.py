"""cupy.v1: vLLM's v1 paged attention in CUDA C: one 128-thread block per (sequence, query head), whole context.

Idea: thread groups of max(32 / block_size, 1) lanes per token (a warp walks one cache block at a
time), 16-byte vector loads, warp shuffles for the dot products and reductions, logits in dynamic
shared memory; float32 accumulation (body: pa::attend in common.cuh).
Limits: block sizes 1..256 (powers of two); head dims 32, 64, 80, 96, 128, 256 (head_dim * itemsize
a multiple of 16 bytes); float32 and float16; max context = (48 KiB - static shared) / 4 bytes, about
12k tokens at head dim 128 (checked in prepare: use cupy.v2 beyond it).
Verdict: not measured on a GPU yet. Design expectation: near vLLM v1 when batch x heads fills the
GPU; idle SMs for few long sequences (v2's case); K/V read once per query head (gqa's case).
"""
from __future__ import annotations

import numpy as np

from sandbox.variant import Limits

from . import common

PATH = common.KERNEL_DIR / "v1.cu"
NAME = "cupy.v1"
LIMITS = Limits(block_sizes=common.POW2_BLOCK_SIZES, head_dims=common.HEAD_DIMS)
REPORT_CONTEXT = 4096   # compile_report's dynamic shared memory is for this context length


def kernel_name(block_size: int, head_dim: int, dtype) -> str:
    return f"paged_attention_v1<{block_size}, {head_dim}, {common.ctype(dtype)}>"


def max_context(head_dim: int) -> int:
    """Longest context whose logits fit in shared memory next to the static arrays."""
    return (common.SHARED_LIMIT_BYTES - common.attend_static_shared_bytes(head_dim, 1)) // 4


def dynamic_shared_bytes(head_dim: int, context: int) -> int:
    return 4 * common.attend_dynamic_floats(head_dim, 1, context)


def prepare(problem, backend: str) -> common.Prepared:
    return prepare_v1_shaped(NAME, PATH, kernel_name, problem, backend, problem.max_blocks_per_seq)


def prepare_v1_shaped(name, path, kernel_name_for, problem, backend: str, int_arg: int) -> common.Prepared:
    """Launch a kernel with v1's arguments and grid (also the wrong.cupy.* controls: int_arg is their 7th argument)."""
    p = problem
    longest = int(p.context_lens.max())
    if longest > max_context(p.head_dim):
        raise ValueError(f"{name} keeps all logits in shared memory: context length {longest} exceeds its bound of "
                         f"{max_context(p.head_dim)} tokens at head_dim {p.head_dim} "
                         f"({common.SHARED_LIMIT_BYTES} bytes of shared memory); use cupy.v2")
    shared = dynamic_shared_bytes(p.head_dim, longest)
    batch = [kernel_name_for(b, p.head_dim, p.dtype) for b in common.POW2_BLOCK_SIZES]
    kernel = common.get_function(backend, path, kernel_name_for(p.block_size, p.head_dim, p.dtype), batch)
    query, key_cache, value_cache, block_tables, context_lens = common.upload_problem(p, backend)
    out = common.output_like(p, backend)
    args = (out, query, key_cache, value_cache, block_tables, context_lens, np.int32(int_arg),
            np.int32(p.num_heads), np.int32(p.num_kv_heads), np.float32(p.softmax_scale), np.int32(longest))
    launch = (kernel, (p.num_heads, p.num_seqs), (common.NUM_THREADS,), args, shared)
    return common.Prepared([launch], out, keep=(query, key_cache, value_cache, block_tables, context_lens))


def compile_report(block_size: int, head_dim: int, dtype, arch: str) -> dict:
    """NVRTC -> cubin resources; dynamic shared memory for a context of REPORT_CONTEXT tokens."""
    report = common.compile_report(PATH, kernel_name(block_size, head_dim, dtype), arch, common.NUM_THREADS,
                                   dynamic_shared_bytes(head_dim, REPORT_CONTEXT))
    report["note"] = (f"dynamic shared for context {REPORT_CONTEXT}; grows 4 B/token up to {max_context(head_dim)} "
                      "tokens (48 KiB)")
    return report
