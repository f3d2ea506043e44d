"""triton.naive: v1 in Triton, the reference's loop over the block table: one program per (sequence, query head).

Idea: each program loads its query row, then walks its sequence's blocks through the block table, one
whole block of K (a [block, head_dim] tile) per step, with an online softmax (running max and sum, float32).
Limits: any block size 1..4096 (the tile is the next power of two, masked), head dims 32..256 (HEAD_DIMS in
launch.py), any GQA ratio, queries float32/float16/bfloat16, caches of the query's dtype or fp8 (e4m3fn,
e5m2; per tensor or per token and KV head), the options window, softcap, alibi, kv_scale, sinks, lse,
kv_scales; decode only (one query token per sequence). Tunables: num_warps, num_stages.
Verdict: matches the reference on every problem the suites draw (the interpreter on a CPU). Design-level
expectation, not a measurement: every query head re-reads its KV head's blocks (GQA ratio x the ideal K/V
bytes) and num_seqs x num_heads programs are too few to fill a GPU at small batch.
"""
from __future__ import annotations

import sys

import triton
import triton.language as tl

from . import census, launch
from .common import adjust_logits, finish_factor, first_token, log_sum_exp

LIMITS = launch.limits(max_query_len=1)
TUNABLES = {"num_warps": launch.NUM_WARPS, "num_stages": launch.NUM_STAGES}


@triton.jit
def naive_kernel(query, key_cache, value_cache, block_tables, context_lens, out, lse,
                 scale, window_left, soft_cap, alibi_slopes, v_scale, sinks, k_scales, v_scales,
                 num_heads, num_kv_heads, max_blocks, block_size, head_dim,
                 BLOCK: tl.constexpr, HEAD: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
                 SINKS: tl.constexpr, LSE: tl.constexpr, KV_SCALES: tl.constexpr):
    """query/out [num_seqs, num_heads, head_dim], caches [num_blocks, block_size, num_kv_heads, head_dim],
    lse float32 [num_seqs, num_heads]; grid (num_seqs, num_heads); BLOCK, HEAD: block_size, head_dim rounded
    up to powers of two."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // (num_heads // num_kv_heads)
    context_len = tl.load(context_lens + seq)
    position = context_len - 1
    first = first_token(position, window_left)
    dims = tl.arange(0, HEAD)
    dim_ok = dims < head_dim
    q = tl.load(query + (seq * num_heads + head) * head_dim + dims, mask=dim_ok, other=0.0).to(tl.float32)
    slope = tl.load(alibi_slopes + head) if ALIBI else 0.0
    offsets = tl.arange(0, BLOCK)
    top = tl.full([], float("-inf"), tl.float32)
    total = tl.zeros([], tl.float32)
    acc = tl.zeros([HEAD], tl.float32)
    for block in range(first // block_size, tl.cdiv(context_len, block_size)):
        physical = tl.load(block_tables + seq * max_blocks + block).to(tl.int64)
        tokens = block * block_size + offsets
        live = (offsets < block_size) & (tokens >= first) & (tokens < context_len)
        slots = physical * block_size + offsets
        rows = (slots * num_kv_heads + kv_head) * head_dim
        tile_mask = live[:, None] & dim_ok[None, :]
        k = tl.load(key_cache + rows[:, None] + dims[None, :], mask=tile_mask, other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1)
        if KV_SCALES:
            s = s * tl.load(k_scales + slots * num_kv_heads + kv_head, mask=live, other=0.0)
        s = adjust_logits(s * scale, soft_cap, slope, tokens - position, SOFTCAP, ALIBI)
        s = tl.where(live, s, float("-inf"))
        new_top = tl.maximum(top, tl.max(s, axis=0))
        correction = tl.exp(top - new_top)
        weights = tl.exp(s - new_top)
        total = total * correction + tl.sum(weights, axis=0)
        if KV_SCALES:
            weights = weights * tl.load(v_scales + slots * num_kv_heads + kv_head, mask=live, other=0.0)
        v = tl.load(value_cache + rows[:, None] + dims[None, :], mask=tile_mask, other=0.0).to(tl.float32)
        acc = acc * correction + tl.sum(weights[:, None] * v, axis=0)
        top = new_top
    sink = tl.load(sinks + head) if SINKS else 0.0
    acc = acc * (v_scale * finish_factor(top, total, sink, SINKS))
    tl.store(out + (seq * num_heads + head) * head_dim + dims, acc.to(out.dtype.element_ty), mask=dim_ok)
    if LSE:
        tl.store(lse + seq * num_heads + head, log_sum_exp(top, total))


def calls(problem, args: tuple, num_warps: int, num_stages: int = launch.NUM_STAGES[0]) -> list[launch.Call]:
    """The one kernel call for `problem` with the decode arguments `args`."""
    p = problem
    shape = (p.num_heads, p.num_kv_heads, p.max_blocks_per_seq, p.block_size, p.head_dim)
    constexprs = dict(BLOCK=launch.next_power_of_two(p.block_size), HEAD=launch.next_power_of_two(p.head_dim),
                      **launch.option_constexprs(p))
    return [launch.Call("naive", naive_kernel, (p.num_seqs, p.num_heads), args + shape, constexprs, num_warps,
                        num_stages)]


def prepare(problem, backend: str, num_warps: int = launch.NUM_WARPS[0],
            num_stages: int = launch.NUM_STAGES[0]) -> launch.Launch:
    args, values = launch.decode_arguments("triton.naive", problem, backend)
    return launch.Launch("triton.naive", problem, args, calls(problem, values, num_warps, num_stages))


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None = None,
                   num_warps: int = launch.NUM_WARPS[0], num_stages: int = launch.NUM_STAGES[0]) -> dict:
    """Registers, shared memory and spills of the kernel compiled by Triton for `arch` (kernels/triton/census.py)."""
    return census.compile_report(sys.modules[__name__], block_size, head_dim, dtype, arch, kv_dtype, num_warps=num_warps,
                                 num_stages=num_stages)
