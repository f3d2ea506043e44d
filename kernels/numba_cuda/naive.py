"""numba.naive: v1, the reference ported as is: one CUDA thread per (sequence, query head).

Idea: each thread walks its sequence's blocks through the block table, token by token, with an
online softmax (running max and sum, float32) and a per-thread accumulator of head_dim floats.
Limits: any block size 1..4096 (a runtime value); head dims up to 512 (declared: 32, 64, 80, 96,
112, 120, 128, 192, 256, 512; the accumulator is a 2 KB local array at 512); queries float32, float16,
bfloat16 and caches of the query's dtype or fp8 (e4m3fn, e5m2, per tensor or per token and KV head),
math in float32; the options window, softcap, alibi, kv_scale, sinks, lse, kv_scales; any GQA ratio;
decode (one query token per sequence).
Precisions and options (codecs.py, options.py): one kernel per (query dtype, cache dtype, option
flags), made on first use; bfloat16 and fp8 arrive as their bits and are decoded by device functions.
k_scale is folded into the scale, v_scale multiplies the output and a window only moves the first
block and offset (blocks wholly before it are never looked up nor read), all runtime values;
the score modifiers (options.score_hook: soft-cap, ALiBi), the sink (options.finish: it joins the final denominator),
the lse output (options.log_sum_exp) and per-token scales (a logit times its slot's k scale, a weight
times its v scale) are compiled in only for the problems that use them.
Verdict: matches the reference on every problem the suites draw (simulator only; never run on a
GPU). Compiled for sm_90 (fp16): 64 registers, the accumulator in 1 KB of local memory per thread,
50% theoretical occupancy (register-limited). Design-level expectation, not a measurement: each
thread reads whole K/V rows alone (uncoalesced), every query head re-reads its KV head, and only
num_seqs*num_heads threads exist: far too few to fill a GPU. The baseline the others must beat.
"""
from __future__ import annotations

import functools
import math

from numba import cuda, float32

from . import codecs, device, launch, options, reports
from .device import MAX_HEAD_DIM, NEG_INF, ZERO
from .options import first_token

LIMITS = device.limits()
TUNABLES = {"threads": launch.THREADS}  # "auto" or threads per block (launch.launch_threads)


@cuda.jit(device=True, inline="always")
def table_block(block_tables, seq, block, num_blocks):
    """Physical block of logical block `block` of sequence `seq`: the block table's entry."""
    return block_tables[seq, block]


@cuda.jit(device=True, inline="always")
def tokens_in_block(context_len, block, block_size):
    """Tokens of logical block `block` a sequence of context_len tokens holds (the last one may be partial)."""
    return min(block_size, context_len - block * block_size)


def make_body(physical_block=table_block, block_tokens=tokens_in_block, dtype="float32", kv_dtype=None,
              flags=0):
    """The kernel body for (dtype, kv_dtype) with its two paging decisions as device functions: the
    negative controls in kernels/wrong/ each replace exactly one of them with a flawed twin."""
    load_q = codecs.DECODE[dtype]
    load_kv = codecs.DECODE[dtype if kv_dtype is None else kv_dtype]
    store = codecs.ENCODE[dtype]
    scored, score = options.score_hook(flags)
    use_sink = bool(flags & options.OPT_SINKS)
    use_lse = bool(flags & options.OPT_LSE)
    per_token = bool(flags & options.OPT_KV_SCALES)

    def naive_body(query, key_cache, value_cache, block_tables, context_lens, scale,
                   opts, out, lse):
        """query/out [num_seqs, num_heads, head_dim], lse float32 [num_seqs, num_heads] (written with OPT_LSE);
        one thread per (sequence, head) in a 1-D grid."""
        v_scale, window_left = opts.v_scale, opts.window_left
        item = cuda.grid(1)
        num_seqs, num_heads, head_dim = query.shape
        if item >= num_seqs * num_heads:
            return
        seq = item // num_heads
        head = item % num_heads
        block_size = key_cache.shape[1]
        num_kv_heads = key_cache.shape[2]
        kv_head = head // (num_heads // num_kv_heads)
        context_len = context_lens[seq]
        position = context_len - 1
        first = first_token(context_len, window_left)

        acc = cuda.local.array(MAX_HEAD_DIM, float32)
        for d in range(head_dim):
            acc[d] = ZERO
        running_max = NEG_INF
        running_sum = ZERO
        for block in range(first // block_size, (context_len + block_size - 1) // block_size):
            physical = physical_block(block_tables, seq, block, key_cache.shape[0])
            base = block * block_size
            for offset in range(max(0, first - base), block_tokens(context_len, block, block_size)):
                logit = ZERO
                for d in range(head_dim):
                    logit += load_q(query[seq, head, d]) * load_kv(key_cache[physical, offset, kv_head, d])
                weight_scale = float32(1.0)
                if per_token:  # fp8 scales of this (slot, KV head)
                    slot = (physical * block_size + offset) * num_kv_heads + kv_head
                    logit *= opts.k_scales[slot]
                    weight_scale = opts.v_scales[slot]
                logit *= scale
                if scored:
                    logit = score(logit, opts, position, base + offset, head, kv_head)
                new_max = max(running_max, logit)
                correction = math.exp(running_max - new_max)
                weight = math.exp(logit - new_max)
                running_sum = running_sum * correction + weight
                if per_token:
                    weight *= weight_scale
                for d in range(head_dim):
                    acc[d] = acc[d] * correction + weight * load_kv(value_cache[physical, offset, kv_head, d])
                running_max = new_max
        sink = opts.sinks[head] if use_sink else ZERO
        inv_sum = v_scale * options.finish(running_max, running_sum, sink, use_sink)
        for d in range(head_dim):
            out[seq, head, d] = store(acc[d] * inv_sum)
        if use_lse:
            lse[seq, head] = options.log_sum_exp(running_max, running_sum)

    return naive_body


def kernel_factory(physical_block=table_block, block_tokens=tokens_in_block):
    """(dtype, kv_dtype, flags) -> (python body, jitted kernel), each made once: the
    kernels of one body family (numba.naive's, or a negative control's)."""
    @functools.lru_cache(maxsize=None)
    def kernel_for(dtype: str, kv_dtype: str, flags: int = 0):
        body = make_body(physical_block, block_tokens, dtype, kv_dtype, flags)
        return body, cuda.jit(body)
    return kernel_for


kernel_for = kernel_factory()


def launch_per_head(kernels, problem, name="numba.naive", threads=launch.AUTO) -> launch.Launch:
    """Launcher shared with the negative controls: one thread per (sequence, head), 1-D grid.
    `kernels` is a kernel_factory(...) result; threads: the tunable (launch.launch_threads)."""
    launch.check_head_dim(name, problem.head_dim)
    work = problem.num_seqs * problem.num_heads
    threads = launch.launch_threads(work, threads=threads)
    grid = (work + threads - 1) // threads
    launch.check_launch(name, grid, threads)
    _, kernel = kernels(*options.kernel_key(problem))
    args = options.decode_args(problem)
    out, lse = launch.output_array(problem), launch.lse_array(problem)
    return launch.Launch(kernel, grid, threads, 0, args + (out, lse), out, name=name, out_dtype=problem.dtype,
                         lse=launch.returned_lse(problem, lse))


def prepare(problem, backend: str, threads=launch.AUTO) -> launch.Launch:
    return launch_per_head(kernel_for, problem, threads=threads)


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None = None,
                   logit_options: bool = False, threads=launch.AUTO) -> dict:
    """Resources of the one kernel; threads as launched for REPRESENTATIVE (num_seqs*num_heads >= 128) with
    the `threads` tunable.
    dtype "bfloat16", or "float16:float8_e4m3fn" / kv_dtype= for an fp8 cache; logit_options: the
    kernel built with soft-cap and ALiBi (default: the plain one)."""
    q, kv = reports.report_dtypes(dtype, kv_dtype)
    signature = reports.decode_signature(q, kv, reports.out_array(q), reports.lse_array())
    body, _ = kernel_for(q, kv, options.report_flags(logit_options))
    kernel = dict(name="naive", **reports.kernel_resources(body, signature, arch))
    work = reports.REPRESENTATIVE["num_heads"] * 8
    return reports.report([kernel], launch.launch_threads(work, simulated=False, threads=threads), 0)
