"""cupy.v1: vLLM's v1 paged attention in CUDA C: one 128-thread block per (sequence, query head), whole context.

Idea: thread groups of max(32 / block_size, 1) lanes per token (a warp walks one cache block at a
time), 16-byte vector loads, warp shuffles for the dot products and reductions, logits in dynamic
shared memory; float32 accumulation (body: pa::attend in attend.cuh).
Limits: block sizes 1..256 (powers of two); head dims 32, 64, 80, 96, 112, 128, 192, 256, 512; queries in
float32, float16 or bfloat16; caches of the query's dtype or fp8 (e4m3fn, e5m2: 16 values per 16-byte load,
dequantized in pairs to float; per-tensor or per-token scales); every option (common.SUPPORT): k_scale
(folded into the softmax scale), v_scale, soft-cap, ALiBi, sliding window (only the window's blocks are
looked up and loaded), learned sinks, return_lse, per-token fp8 scales (kv_scales). Threads per block:
TUNABLES["threads"] (128, 64, 256). Max
tokens read per sequence = (48 KiB - static shared) / 4 bytes, about 12k at head dim 128 (checked in
prepare: use cupy.v2 beyond it; a window bounds it).
Template: paged_attention_v1<BLOCK_SIZE, HEAD_DIM, T, C = T, OPTS = 0>: T the query's type, C the
cache's, OPTS the pa::OPT_* bitmask of the options in use (common.option_flags); OPTS = 0 is the
plain kernel, with no option code compiled in.
Verdict: not measured on a GPU yet. Design expectation: near vLLM v1 when batch x heads fills the
GPU; idle SMs for few long sequences (v2's case); K/V read once per query head (gqa's case).
"""
from __future__ import annotations

import functools

import numpy as np

from sandbox.variant import Limits, Unsupported

from . import common

PATH = common.KERNEL_DIR / "v1.cu"
NAME = "cupy.v1"
LIMITS = Limits(block_sizes=common.POW2_BLOCK_SIZES, head_dims=common.HEAD_DIMS, **common.SUPPORT)
REPORT_CONTEXT = 4096   # compile_report's dynamic shared memory is for this context length
TUNABLES = {"threads": common.ATTEND_THREADS}  # threads per block, the default first (sandbox.variant.tunables)


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0,
                threads: int = common.NUM_THREADS) -> str:
    return f"paged_attention_v1<{block_size}, {head_dim}, {common.type_args(dtype, kv_dtype, flags, threads)}>"


def max_context(head_dim: int, threads: int = common.NUM_THREADS) -> int:
    """Most tokens a sequence may read (context, or window) for its logits to fit in shared memory."""
    return (common.SHARED_LIMIT_BYTES - common.attend_static_shared_bytes(head_dim, 1, threads)) // 4


def dynamic_shared_bytes(head_dim: int, context: int, threads: int = common.NUM_THREADS) -> int:
    return 4 * common.attend_dynamic_floats(head_dim, 1, context, threads)


def prepare(problem, backend: str, *, threads: int = common.NUM_THREADS) -> common.Prepared:
    return prepare_v1_shaped(NAME, PATH, functools.partial(kernel_name, threads=threads), problem, backend,
                             problem.max_blocks_per_seq, threads=threads)


def prepare_v1_shaped(name, path, kernel_name_for, problem, backend: str, int_arg: int,
                      extra_tokens: int = 0, threads: int = common.NUM_THREADS) -> common.Prepared:
    """Launch a kernel with v1's arguments and grid (also the wrong.cupy.* controls: int_arg is their 7th argument).

    kernel_name_for(block_size, head_dim, dtype, kv_dtype, flags) names the instantiation (for `threads`
    threads per block); extra_tokens: logits room for tokens a control reads beyond the contract's.
    """
    p = problem
    longest = int(common.tokens_read(p).max()) + extra_tokens
    bound = max_context(p.head_dim, threads)
    if longest > bound:
        raise Unsupported(f"{name} keeps all logits in shared memory: context length {longest} exceeds its bound of "
                          f"{bound} tokens at head_dim {p.head_dim} "
                          f"({common.SHARED_LIMIT_BYTES} bytes of shared memory); use cupy.v2")
    shared = dynamic_shared_bytes(p.head_dim, longest, threads)
    common.check_shared(name, shared, common.attend_static_shared_bytes(p.head_dim, 1, threads), f"{threads} threads")
    flags = common.option_flags(p)
    expression = kernel_name_for(p.block_size, p.head_dim, p.dtype, p.kv_dtype, flags)
    batch = common.cpu_batch([kernel_name_for(b, p.head_dim, p.dtype, p.kv_dtype, flags)
                              for b in common.POW2_BLOCK_SIZES], expression,
                             plain=flags == 0 and p.kv_dtype == p.dtype and threads == common.NUM_THREADS)
    kernel = common.get_function(backend, path, expression, batch)
    query, key_cache, value_cache, block_tables, context_lens = common.upload_problem(p, backend)
    out = common.output_like(p, backend)
    options = common.option_args(p, backend)
    lse = common.lse_output(p, backend)
    args = (out, query, key_cache, value_cache, block_tables, context_lens, np.int32(int_arg),
            np.int32(p.num_heads), np.int32(p.num_kv_heads), common.kernel_scale(p), np.int32(longest), lse, *options)
    launch = (kernel, (p.num_heads, p.num_seqs), (threads,), args, shared)
    return common.Prepared([launch], out, keep=(query, key_cache, value_cache, block_tables, context_lens, *options),
                           out_dtype=p.dtype, lse=lse if p.options.return_lse else None)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kv_dtype=None, flags: int = 0,
                   threads: int = common.NUM_THREADS) -> dict:
    """NVRTC -> cubin resources of the `threads`-thread kernel; dynamic shared memory for a context of
    REPORT_CONTEXT tokens."""
    report = common.compile_report(PATH, kernel_name(block_size, head_dim, dtype, kv_dtype, flags, threads), arch,
                                   threads, dynamic_shared_bytes(head_dim, REPORT_CONTEXT, threads))
    report["note"] = (f"dynamic shared for context {REPORT_CONTEXT}; grows 4 B/token up to "
                      f"{max_context(head_dim, threads)} tokens (48 KiB)")
    return report
