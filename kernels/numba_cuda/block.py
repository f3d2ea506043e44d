"""numba.block: v2, one thread block per (sequence, query head): threads share the context.

Idea (one, over v1): threads split the tokens, keep every logit in dynamic shared memory, take the
block-wide max and sum as reductions, then split head_dim for the weighted sum of V (coalesced).
Limits: any block size 1..4096 (runtime); head dims up to 512 (declared as numba.naive; the staged
query is 2 KB of static shared); queries float32, float16, bfloat16 and caches of the query's dtype or
fp8 (e4m3fn, e5m2, per tensor or per token), math in float32; the options as numba.naive (window,
softcap, alibi, kv_scale, sinks, lse, kv_scales); any GQA ratio; decode only; at most
MAX_CONTEXT_LEN = 8192 tokens read per sequence (32 KB of float32 logits, inside the 48 KB a
block gets without an opt-in): the context, or what a sliding window keeps of it, refused by
prepare() before any launch (Unsupported).
Precisions and options as numba.naive (codecs.py, options.py): one kernel per (query dtype, cache
dtype, option flags); logits live at index t - first (the window's start), so shared
memory is sized by the tokens read and blocks before the window are never looked up nor read.
Verdict: matches the reference on every problem the suites draw (simulator only; never run on a
GPU). Compiled for sm_90 (fp16): 64 registers, 1152 B static (256-float query) + 16 KB dynamic shared at 4096
tokens, no local memory, 50% theoretical occupancy (register-limited). Design-level expectation,
not a measurement: num_seqs*num_heads blocks instead of threads and coalesced V reads, but each
thread still reads whole K rows alone and every query head re-reads its KV head.
"""
from __future__ import annotations

import functools

from numba import cuda, float32

from sandbox.variant import Unsupported

from . import codecs, device, launch, options, reports, token_range
from .device import MAX_HEAD_DIM, ZERO
from .options import first_token
from .reductions import REDUCE_SCRATCH, block_max, block_sum

LIMITS = device.limits()
TUNABLES = {"threads": launch.THREADS}  # "auto" or threads per block (launch.launch_threads)
MAX_CONTEXT_LEN = 8192


def make_body(dtype: str, kv_dtype: str, flags: int = 0):
    load_q = codecs.DECODE[dtype]
    load_kv = codecs.DECODE[kv_dtype]
    store = codecs.ENCODE[dtype]
    use_sink = bool(flags & options.OPT_SINKS)
    use_lse = bool(flags & options.OPT_LSE)
    score_tokens, exponentiate, weigh_values = token_range.make(load_kv, options.score_hook(flags), bool(flags & options.OPT_KV_SCALES))

    def block_body(query, key_cache, value_cache, block_tables, context_lens, scale,
                   opts, out, lse):
        """Grid (num_seqs, num_heads); dynamic shared: float32 logits[padded max tokens read]; lse float32
        [num_seqs, num_heads] (written with OPT_LSE)."""
        v_scale, window_left = opts.v_scale, opts.window_left
        seq = cuda.blockIdx.x
        head = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        threads = cuda.blockDim.x
        num_heads, head_dim = query.shape[1], query.shape[2]
        kv_head = head // (num_heads // key_cache.shape[2])
        context_len = context_lens[seq]
        position = context_len - 1
        first = first_token(context_len, window_left)
        q = cuda.shared.array(MAX_HEAD_DIM, float32)
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        logits = cuda.shared.array(0, float32)

        for d in range(tid, head_dim, threads):
            q[d] = load_q(query[seq, head, d]) * scale
        cuda.syncthreads()

        local_max = score_tokens(q, key_cache, block_tables, seq, head, kv_head, first, context_len, position, opts,
                                 logits, tid, threads, opts.k_scales)
        top = block_max(local_max, scratch)
        local_sum = exponentiate(logits, context_len - first, top, tid, threads)
        total = block_sum(local_sum, scratch)  # its barrier publishes the weights
        sink = opts.sinks[head] if use_sink else ZERO
        inv_sum = v_scale * options.finish(top, total, sink, use_sink)
        for d in range(tid, head_dim, threads):
            acc = weigh_values(logits, value_cache, block_tables, seq, kv_head, d, first, context_len, opts.v_scales)
            out[seq, head, d] = store(acc * inv_sum)
        if use_lse and tid == 0:
            lse[seq, head] = options.log_sum_exp(top, total)

    return block_body


@functools.lru_cache(maxsize=None)
def kernel_for(dtype: str, kv_dtype: str, flags: int = 0):
    """(python body, jitted kernel) for (query dtype, cache dtype, option flags), made once."""
    body = make_body(dtype, kv_dtype, flags)
    return body, cuda.jit(body)


def logits_bytes(max_tokens: int, block_size: int) -> int:
    """Dynamic shared memory: one float32 per token read of the longest sequence, padded to whole blocks."""
    return 4 * (-(-max_tokens // block_size) * block_size)


def check_context(problem) -> int:
    """The most tokens a sequence reads; Unsupported beyond MAX_CONTEXT_LEN."""
    longest = int(launch.tokens_read(problem).max())
    if longest > MAX_CONTEXT_LEN:
        raise Unsupported(f"numba.block keeps every logit in shared memory and supports context_len <= "
                          f"{MAX_CONTEXT_LEN} tokens read (the context, or its sliding window); got {longest} "
                          f"(max context_lens = {int(problem.context_lens.max())})")
    return longest


def prepare(problem, backend: str, threads=launch.AUTO) -> launch.Launch:
    p = problem
    launch.check_head_dim("numba.block", p.head_dim)
    longest = check_context(p)
    threads = launch.launch_threads(max(longest, p.head_dim), threads=threads)
    grid = (p.num_seqs, p.num_heads)
    launch.check_launch("numba.block", grid, threads)
    _, kernel = kernel_for(*options.kernel_key(p))
    args = options.decode_args(p)
    out, lse = launch.output_array(p), launch.lse_array(p)
    shared = logits_bytes(longest, p.block_size)
    return launch.Launch(kernel, grid, threads, shared, args + (out, lse), out, name="numba.block", out_dtype=p.dtype,
                         lse=launch.returned_lse(p, lse))


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None = None,
                   logit_options: bool = False, threads=launch.AUTO) -> dict:
    """Dynamic shared memory for REPRESENTATIVE's context of 4096 tokens (16 KB + padding), threads as the
    `threads` tunable launches them.
    dtype "bfloat16", or "float16:float8_e4m3fn" / kv_dtype= for an fp8 cache; logit_options: the
    kernel built with soft-cap and ALiBi (default: the plain one)."""
    q, kv = reports.report_dtypes(dtype, kv_dtype)
    signature = reports.decode_signature(q, kv, reports.out_array(q), reports.lse_array())
    body, _ = kernel_for(q, kv, options.report_flags(logit_options))
    kernel = dict(name="block", **reports.kernel_resources(body, signature, arch))
    context = reports.REPRESENTATIVE["context_len"]
    return reports.report([kernel], launch.launch_threads(context, simulated=False, threads=threads),
                         logits_bytes(context, block_size),
                         note=f"dynamic shared for context {context}; grows 4 B/token up to {MAX_CONTEXT_LEN}")
