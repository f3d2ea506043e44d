"""numba.naive: v1, the reference ported as is: one CUDA thread per (sequence, query head).

Idea: each thread walks its sequence's blocks through the block table, token by token, with an
online softmax (running max and sum, float32) and a per-thread accumulator of head_dim floats.
Limits: block sizes 1..256 (any power of two, a runtime value); head dims up to 256 (declared:
32, 64, 80, 96, 112, 120, 128, 192, 256); float32 and float16 (math in float32); any GQA ratio.
Verdict: matches the reference on every problem the suites draw (simulator only; never run on a
GPU). Compiled for sm_90 (fp16): 64 registers, the accumulator in 1 KB of local memory per thread,
50% theoretical occupancy (register-limited). Design-level expectation, not a measurement: each
thread reads whole K/V rows alone (uncoalesced), every query head re-reads its KV head, and only
num_seqs*num_heads threads exist: far too few to fill a GPU. The baseline the others must beat.
"""
from __future__ import annotations

import math

from numba import cuda, float32

from sandbox.variant import Limits

from . import common
from .common import MAX_HEAD_DIM, NEG_INF, ZERO

LIMITS = Limits(head_dims=common.HEAD_DIMS)


@cuda.jit(device=True, inline="always")
def table_block(block_tables, seq, block, num_blocks):
    """Physical block of logical block `block` of sequence `seq`: the block table's entry."""
    return block_tables[seq, block]


@cuda.jit(device=True, inline="always")
def tokens_in_block(context_len, block, block_size):
    """Tokens of logical block `block` a sequence of context_len tokens holds (the last one may be partial)."""
    return min(block_size, context_len - block * block_size)


def make_body(physical_block=table_block, block_tokens=tokens_in_block):
    """The kernel body with its two paging decisions as device functions: the negative controls in
    kernels/wrong/ each replace exactly one of them with a flawed twin."""

    def naive_body(query, key_cache, value_cache, block_tables, context_lens, scale, out):
        """query/out [num_seqs, num_heads, head_dim]; one thread per (sequence, head) in a 1-D grid."""
        item = cuda.grid(1)
        num_seqs, num_heads, head_dim = query.shape
        if item >= num_seqs * num_heads:
            return
        seq = item // num_heads
        head = item % num_heads
        block_size = key_cache.shape[1]
        kv_head = head // (num_heads // key_cache.shape[2])
        context_len = context_lens[seq]

        acc = cuda.local.array(MAX_HEAD_DIM, float32)
        for d in range(head_dim):
            acc[d] = ZERO
        running_max = NEG_INF
        running_sum = ZERO
        for block in range((context_len + block_size - 1) // block_size):
            physical = physical_block(block_tables, seq, block, key_cache.shape[0])
            for offset in range(block_tokens(context_len, block, block_size)):
                logit = ZERO
                for d in range(head_dim):
                    logit += float32(query[seq, head, d]) * float32(key_cache[physical, offset, kv_head, d])
                logit *= scale
                new_max = max(running_max, logit)
                correction = math.exp(running_max - new_max)
                weight = math.exp(logit - new_max)
                running_sum = running_sum * correction + weight
                for d in range(head_dim):
                    acc[d] = acc[d] * correction + weight * float32(value_cache[physical, offset, kv_head, d])
                running_max = new_max
        inv_sum = float32(1.0) / running_sum
        for d in range(head_dim):
            out[seq, head, d] = acc[d] * inv_sum

    return naive_body


naive_body = make_body()
naive_kernel = cuda.jit(naive_body)


def launch_per_head(kernel, problem, name="numba.naive") -> common.Launch:
    """Launcher shared with the negative controls: one thread per (sequence, head), 1-D grid."""
    common.check_head_dim(name, problem.head_dim)
    args = common.decode_args(problem)
    out = cuda.device_array(problem.query.shape, problem.dtype)
    work = problem.num_seqs * problem.num_heads
    threads = common.launch_threads(work)
    return common.Launch(kernel, (work + threads - 1) // threads, threads, 0, args + (out,), out)


def prepare(problem, backend: str) -> common.Launch:
    return launch_per_head(naive_kernel, problem)


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str) -> dict:
    """Resources of the one kernel; threads as launched for REPRESENTATIVE (num_seqs*num_heads >= 128)."""
    signature = common.decode_signature(dtype, common.out_array(dtype))
    kernel = dict(name="naive", **common.kernel_resources(naive_body, signature, arch))
    return common.report([kernel], common.launch_threads(common.REPRESENTATIVE["num_heads"] * 8, simulated=False), 0)
