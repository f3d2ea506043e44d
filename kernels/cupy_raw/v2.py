"""cupy.v2: v1 plus split-KV: each (sequence, head) is cut into partitions of 512 tokens, one block each,
and a second kernel combines them with log-sum-exp rescaling (vLLM's v2).

Idea: more blocks for few long sequences, and shared memory bounded by the partition, not the
context. Partition size: default 512, a multiple of the block size (the block size when it is larger);
the result does not depend on it. Partitions start at the window's start with a sliding window (0
without), so a window's grid holds only its own partitions; those past a sequence's end return at once
and are never read.
Limits: as v1 (block sizes 1..256, head dims 32..256, float32/float16/bfloat16 queries, caches of the
query's dtype or fp8 e4m3fn/e5m2, every option: KERNEL_SUPPORT) with no context bound.
Template: paged_attention_v2<BLOCK_SIZE, HEAD_DIM, T, C = T, OPTS = 0> (query type, cache type, pa::OPT_*
bitmask; OPTS = 0 is the plain kernel, unchanged machine code) and pa::paged_attention_reduce<HEAD_DIM, T,
WINDOW = false>. prepare() returns launch() (both kernels) and launch_partition() (the first alone).
Verdict: not measured on a GPU yet. Design expectation: beats v1 when num_seqs x num_heads is small
next to the SM count and contexts are long; a little slower than v1 for short contexts (extra
reduce launch and float32 partial outputs).
"""
from __future__ import annotations

import numpy as np

from sandbox.variant import Limits

from . import common

PATH = common.KERNEL_DIR / "v2.cu"
NAME = "cupy.v2"
LIMITS = Limits(block_sizes=common.POW2_BLOCK_SIZES, head_dims=common.HEAD_DIMS, **common.SUPPORT)
TUNABLES = {"threads": common.ATTEND_THREADS}  # the partition kernel's threads per block, the default first


def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0,
                threads: int = common.NUM_THREADS) -> str:
    return f"paged_attention_v2<{block_size}, {head_dim}, {common.type_args(dtype, kv_dtype, flags, threads)}>"


def dynamic_shared_bytes(head_dim: int, partition: int, threads: int = common.NUM_THREADS) -> int:
    return 4 * common.attend_dynamic_floats(head_dim, 1, partition, threads)


def prepare(problem, backend: str, partition_size: int | None = None, *,
            threads: int = common.NUM_THREADS) -> common.SplitKVPrepared:
    p = problem
    partition = common.partition_for(p.block_size, partition_size)
    shared = dynamic_shared_bytes(p.head_dim, partition, threads)
    common.check_shared(NAME, shared, common.attend_static_shared_bytes(p.head_dim, 1, threads),
                        f"partition_size {partition} with {threads} threads")
    max_partitions = -(-int(common.tokens_read(p).max()) // partition)
    flags = common.option_flags(p)
    reduce_expression = common.reduce_name(p.head_dim, p.dtype, window=bool(flags & common.OPT_WINDOW), flags=flags)
    flags &= ~common.MERGE_FLAGS  # sinks and lse are the reduce's: the partition kernel is built without them
    expression = kernel_name(p.block_size, p.head_dim, p.dtype, p.kv_dtype, flags, threads)
    plain = flags == 0 and p.kv_dtype == p.dtype and threads == common.NUM_THREADS
    batch = common.cpu_batch([kernel_name(b, p.head_dim, p.dtype, p.kv_dtype, flags, threads)
                              for b in common.POW2_BLOCK_SIZES], expression, plain) + [reduce_expression]
    kernel = common.get_function(backend, PATH, expression, batch)
    reduce = common.get_function(backend, PATH, reduce_expression, batch)
    query, key_cache, value_cache, block_tables, context_lens = common.upload_problem(p, backend)
    tmp_out, max_logits, exp_sums = common.split_kv_scratch(p, max_partitions, backend)
    out = common.output_like(p, backend)
    options = common.option_args(p, backend)
    lse = common.lse_output(p, backend)
    args = (tmp_out, max_logits, exp_sums, query, key_cache, value_cache, block_tables, context_lens,
            np.int32(p.max_blocks_per_seq), np.int32(p.num_heads), np.int32(p.num_kv_heads),
            common.kernel_scale(p), np.int32(partition), np.int32(max_partitions), *options)
    launches = [(kernel, (p.num_heads, p.num_seqs, max_partitions), (threads,), args, shared),
                common.reduce_launch(NAME, reduce, p, out, tmp_out, max_logits, exp_sums, context_lens, partition,
                                     max_partitions, lse, options)]
    return common.SplitKVPrepared(launches, out, keep=(query, key_cache, value_cache, block_tables, context_lens,
                                                       tmp_out, max_logits, exp_sums, *options), out_dtype=p.dtype,
                                  lse=lse if p.options.return_lse else None)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kv_dtype=None, flags: int = 0,
                   threads: int = common.NUM_THREADS) -> dict:
    """NVRTC -> cubin resources of the attention kernel (partition 512, `threads` threads) on top; `kernels`
    adds the reduce."""
    return common.split_kv_report(PATH, kernel_name(block_size, head_dim, dtype, kv_dtype, flags, threads), head_dim,
                                  dtype, arch, dynamic_shared_bytes(head_dim, 512, threads),
                                  "partition kernel (P=512) shown; reduce kernel in 'kernels'",
                                  window=bool(flags & common.OPT_WINDOW), threads=threads)
