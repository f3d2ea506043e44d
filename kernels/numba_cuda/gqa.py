"""numba.gqa: v4, one thread block per (sequence, KV head) computing every query head of its group.

Idea (one, over v2): a K row and a V row are read once per group (num_heads/num_kv_heads query
heads) instead of once per query head; the context is walked in chunks with an online softmax per
head (chunk max, rescale), so shared memory is bounded by the group and chunk, not the context.
Limits: any block size 1..4096 (runtime); head dims up to 512 (declared as numba.naive); queries
float32, float16, bfloat16 and caches of the query's dtype or fp8 (e4m3fn, e5m2, per tensor or per
token), math in float32; the options as numba.naive (window, softcap, alibi, kv_scale, sinks, lse,
kv_scales); decode only; any context length; group sizes whose shared memory fits 48 KB (refused by
prepare() before launch otherwise, Unsupported: e.g. group 32 at head_dim 256, group 16 at 512). A thread keeps the dot products of a tile
of min(8, next pow2 of group) heads in registers (the tile is a compile-time constant, one kernel
per tile); groups above 8 re-read K/V once per tile.
Precisions and options as numba.naive (codecs.py, options.py): one kernel per (tile, query dtype,
cache dtype, option flags); the chunk walk starts at the window's start (blocks before it are
never looked up nor read); the score modifiers (ALiBi, ...) see each head's index in phase A.
Verdict: matches the reference on every problem the suites draw (simulator only; never run on a
GPU). Compiled for sm_90 (fp16, group 4): 120 registers, so 25% theoretical occupancy
(register-limited; a launch bound could trade registers for spills - not tried). Design-level expectation, not a measurement:
K/V bytes from memory drop by the GQA ratio against numba.block (4x for 32/8 heads), but only
num_seqs*num_kv_heads blocks run, the per-chunk softmax statistics are a serial loop of one thread
per head, and each chunk of 128 tokens costs three barriers.
"""
from __future__ import annotations

import functools
import math

from numba import cuda, float32

from sandbox.variant import Unsupported

from . import codecs, device, launch, options, reports
from .device import NEG_INF, ZERO
from .options import first_token

LIMITS = device.limits()
TUNABLES = {"threads": launch.THREADS}  # "auto" or threads per block (launch.launch_threads)
GROUP_TILE = 8  # query heads whose dot products / accumulators one thread keeps in registers
SHARED_LIMIT = 48 * 1024  # dynamic shared bytes a block gets without an opt-in


def make_body(tile: int, dtype: str = "float32", kv_dtype: str = "float32", flags: int = 0):
    """The kernel body with `tile` (query heads per register tile), the dtypes and the score
    modifiers (options.score_hook) fixed at compile time."""
    scored, score = options.score_hook(flags)
    load_q = codecs.DECODE[dtype]
    load_kv = codecs.DECODE[kv_dtype]
    store = codecs.ENCODE[dtype]
    use_sink = bool(flags & options.OPT_SINKS)
    use_lse = bool(flags & options.OPT_LSE)
    per_token = bool(flags & options.OPT_KV_SCALES)

    def gqa_body(query, key_cache, value_cache, block_tables, context_lens, scale,
                 opts, chunk, out, lse):
        """Grid (num_seqs, num_kv_heads). Dynamic shared float32, rows padded to whole tiles (gp):
        q[gp, head_dim] (scaled), p[gp, chunk] (logits, then weights), acc[slices, gp, head_dim],
        running max[gp], running sum[gp], correction[gp]. Pad rows stay zero. lse float32 [num_seqs,
        num_heads] (written with OPT_LSE).
        """
        v_scale, window_left = opts.v_scale, opts.window_left
        seq = cuda.blockIdx.x
        kv_head = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        threads = cuda.blockDim.x
        num_heads, head_dim = query.shape[1], query.shape[2]
        block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
        group = num_heads // num_kv_heads
        padded = (group + tile - 1) // tile * tile
        head0 = kv_head * group
        context_len = context_lens[seq]
        position = context_len - 1
        first = first_token(context_len, window_left)
        slices = max(1, threads // head_dim)  # token slices of phase C when threads outnumber head_dim
        lanes = threads // slices
        my_slice = tid // lanes
        lane = tid % lanes

        sh = cuda.shared.array(0, float32)
        p_at = padded * head_dim
        acc_at = p_at + padded * chunk
        max_at = acc_at + slices * padded * head_dim
        sum_at = max_at + padded
        corr_at = sum_at + padded
        for i in range(tid, corr_at + padded, threads):
            sh[i] = ZERO
        cuda.syncthreads()
        for i in range(tid, group * head_dim, threads):
            sh[i] = load_q(query[seq, head0 + i // head_dim, i % head_dim]) * scale
        for g in range(tid, group, threads):
            sh[max_at + g] = NEG_INF
        cuda.syncthreads()

        dots = cuda.local.array(tile, float32)
        accs = cuda.local.array(tile, float32)
        for chunk_start in range(first, context_len, chunk):
            n = min(chunk, context_len - chunk_start)
            # A: the logits of every head of the group, each K row read once per tile of heads.
            for i in range(tid, n, threads):
                t = chunk_start + i
                physical = block_tables[seq, t // block_size]
                offset = t % block_size
                for g0 in range(0, group, tile):
                    for j in range(tile):
                        dots[j] = ZERO
                    for d in range(head_dim):
                        k = load_kv(key_cache[physical, offset, kv_head, d])
                        for j in range(tile):
                            dots[j] += sh[(g0 + j) * head_dim + d] * k
                    if per_token:  # this (slot, KV head)'s K scale
                        k_token = opts.k_scales[(physical * block_size + offset) * num_kv_heads + kv_head]
                        for j in range(tile):
                            dots[j] *= k_token
                    for j in range(min(tile, group - g0)):
                        logit = dots[j]
                        if scored:
                            logit = score(logit, opts, position, t, head0 + g0 + j, kv_head)
                        sh[p_at + (g0 + j) * chunk + i] = logit
            cuda.syncthreads()
            # B: per head, the chunk's max, the rescale of what came before, weights and their sum.
            for g in range(tid, group, threads):
                row = p_at + g * chunk
                old_max = sh[max_at + g]
                new_max = old_max
                for i in range(n):
                    new_max = max(new_max, sh[row + i])
                chunk_sum = ZERO
                for i in range(n):
                    weight = math.exp(sh[row + i] - new_max)
                    sh[row + i] = weight
                    chunk_sum += weight
                correction = math.exp(old_max - new_max)  # exp(-inf) = 0 on the first chunk
                sh[sum_at + g] = sh[sum_at + g] * correction + chunk_sum
                sh[max_at + g] = new_max
                sh[corr_at + g] = correction
            cuda.syncthreads()
            # C: rescale and accumulate weights x V, each V row read once per tile of heads.
            if my_slice < slices:
                for d in range(lane, head_dim, lanes):
                    for g0 in range(0, group, tile):
                        base = acc_at + (my_slice * padded + g0) * head_dim + d
                        for j in range(tile):
                            accs[j] = sh[base + j * head_dim] * sh[corr_at + g0 + j]
                        for i in range(my_slice, n, slices):
                            t = chunk_start + i
                            physical = block_tables[seq, t // block_size]
                            v = load_kv(value_cache[physical, t % block_size, kv_head, d])
                            if per_token:
                                v *= opts.v_scales[(physical * block_size + t % block_size) * num_kv_heads + kv_head]
                            for j in range(tile):
                                accs[j] += sh[p_at + (g0 + j) * chunk + i] * v
                        for j in range(tile):
                            sh[base + j * head_dim] = accs[j]
            cuda.syncthreads()

        for i in range(tid, group * head_dim, threads):
            g = i // head_dim
            d = i % head_dim
            total = ZERO
            for s in range(slices):
                total += sh[acc_at + (s * padded + g) * head_dim + d]
            sink = opts.sinks[head0 + g] if use_sink else ZERO
            out[seq, head0 + g, d] = store(total * v_scale * options.finish(sh[max_at + g], sh[sum_at + g], sink,
                                                                            use_sink))
        if use_lse:
            for g in range(tid, group, threads):
                lse[seq, head0 + g] = options.log_sum_exp(sh[max_at + g], sh[sum_at + g])

    return gqa_body


def tile_for(group: int) -> int:
    """Heads per register tile: the group rounded up to a power of two, at most GROUP_TILE."""
    return min(GROUP_TILE, launch.next_pow2(group))


@functools.lru_cache(maxsize=None)
def kernel_for(tile: int, dtype: str = "float32", kv_dtype: str = "float32", flags: int = 0):
    """(python function, jitted kernel) with `tile`, the dtypes and the option flags compiled in, made once."""
    body = make_body(tile, dtype, kv_dtype, flags)
    return body, cuda.jit(body)


def shared_bytes(group: int, head_dim: int, chunk: int, threads: int) -> int:
    tile = tile_for(group)
    padded = -(-group // tile) * tile
    slices = max(1, threads // head_dim)
    return 4 * (padded * head_dim + padded * chunk + slices * padded * head_dim + 3 * padded)


def launch_shape(group: int, head_dim: int, longest: int, simulated=None, threads=launch.AUTO) -> tuple[int, int, int]:
    """(threads, chunk, shared bytes): chunk = threads tokens, halved until shared memory fits; threads: the
    tunable (launch.launch_threads)."""
    threads = launch.launch_threads(max(longest, head_dim), simulated, threads)
    chunk = threads
    while shared_bytes(group, head_dim, chunk, threads) > SHARED_LIMIT and chunk > 1:
        chunk //= 2
    size = shared_bytes(group, head_dim, chunk, threads)
    if size > SHARED_LIMIT:
        raise Unsupported(f"numba.gqa needs {size} bytes of shared memory for a group of {group} query heads at "
                         f"head_dim {head_dim}; the limit is {SHARED_LIMIT} bytes")
    return threads, chunk, size


def prepare(problem, backend: str, threads=launch.AUTO) -> launch.Launch:
    p = problem
    launch.check_head_dim("numba.gqa", p.head_dim)
    group = p.num_heads // p.num_kv_heads
    threads, chunk, size = launch_shape(group, p.head_dim, int(launch.tokens_read(p).max()), threads=threads)
    grid = (p.num_seqs, p.num_kv_heads)
    launch.check_launch("numba.gqa", grid, threads)
    _, kernel = kernel_for(tile_for(group), *options.kernel_key(p))
    args = options.decode_args(p) + (chunk,)
    out, lse = launch.output_array(p), launch.lse_array(p)
    return launch.Launch(kernel, grid, threads, size, args + (out, lse), out, name="numba.gqa", out_dtype=p.dtype,
                         lse=launch.returned_lse(p, lse))


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None = None,
                   logit_options: bool = False, threads=launch.AUTO) -> dict:
    """Dynamic shared memory for REPRESENTATIVE's group of 4 (32/8 heads) at context 4096, with the threads
    (and so the chunk) the `threads` tunable launches.
    dtype "bfloat16", or "float16:float8_e4m3fn" / kv_dtype= for an fp8 cache; logit_options: the
    kernel built with soft-cap and ALiBi (default: the plain one)."""
    from numba import types

    q, kv = reports.report_dtypes(dtype, kv_dtype)
    rep = reports.REPRESENTATIVE
    group = rep["num_heads"] // rep["num_kv_heads"]
    threads, chunk, size = launch_shape(group, head_dim, rep["context_len"], simulated=False, threads=threads)
    signature = reports.decode_signature(q, kv, types.int64, reports.out_array(q), reports.lse_array())
    body, _ = kernel_for(tile_for(group), q, kv, options.report_flags(logit_options))
    kernel = dict(name="gqa", **reports.kernel_resources(body, signature, arch))
    return reports.report([kernel], threads, size, note=f"group {group} (tile {tile_for(group)}), chunk {chunk} tokens")
