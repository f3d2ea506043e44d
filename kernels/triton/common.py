"""Device functions every Triton variant shares: the option table's per-logit step and the softmax's finish.

The option flags arrive as constexprs (SOFTCAP, ALIBI, SINKS, LSE, KV_SCALES: the specialised bits of
sandbox.problem.options.KERNEL_FLAGS), so a plain problem compiles the plain code; a window and v_scale
are runtime values (a window only moves the first token read, v_scale multiplies the output once).
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tanh(x):
    """tanh through exp (no libdevice call, so the interpreter and both GPUs run the same formula); exp of a
    non-positive number only, so nothing overflows."""
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def adjust_logits(s, soft_cap, slope, distance, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
    """The option table's per-logit step on scaled logits s: soft-cap c * tanh(s / c), then + slope * (t - p)."""
    if SOFTCAP:
        s = soft_cap * tanh(s / soft_cap)
    if ALIBI:
        s = s + slope * distance.to(tl.float32)
    return s


@triton.jit
def first_token(position, window_left):
    """The first token a query at `position` reads: the window's start, 0 without a window (window_left < 0)."""
    return tl.where(window_left < 0, 0, tl.maximum(position - window_left, 0))


@triton.jit
def finish_factor(top, total, sink, SINKS: tl.constexpr):
    """What the accumulator is multiplied by: 1 / total, or with a sink c / (total c + exp(sink - m)),
    m = max(top, sink), c = exp(top - m): the sink joins the denominator once, without overflow."""
    if SINKS:
        m = tl.maximum(top, sink)
        c = tl.exp(top - m)
        factor = c / (total * c + tl.exp(sink - m))
    else:
        factor = 1.0 / total
    return factor


@triton.jit
def log_sum_exp(top, total):
    """log sum_t exp(s_t) = top + log(total) over the tokens only; -inf without a token; a NaN total stays NaN
    (`total <= 0` is false for NaN: NaN is data, as in the CUDA C variants' options.cuh)."""
    return tl.where(total <= 0.0, float("-inf"), top + tl.log(tl.where(total <= 0.0, 1.0, total)))
