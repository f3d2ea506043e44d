"""Attention options in the Numba kernels: the runtime arguments, the per-logit hook, the kernel key.

Every attention kernel takes, after (query, key_cache, value_cache, block_tables, context_lens):
    scale float32 (the softmax scale times k_scale), then OptionArgs.values(), in this order:
    v_scale float32, window_left int32 (-1: off), softcap float32 (0: off),
    alibi float32 [num_heads] (a 1-element dummy when off), use_alibi int32 (0/1).
k_scale is folded into the scale (scale * (q . k * k_scale) = (scale * k_scale) * (q . k)), v_scale
multiplies the output once, a window only moves the first token read (0 without one), and soft-cap and
ALiBi are a uniform branch per logit (apply_options) in a kernel built with them: each kernel also
exists without soft-cap and ALiBi (no_logit_options), so plain problems run the plain code. Kernels
are thus specialised on (query dtype, cache dtype, logit options on/off): kernel_key().
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32, types

from .device import ZERO
from .launch import upload


@cuda.jit(device=True, inline="always")
def first_token(context_len, window_left):
    """The first token a decode query at position context_len - 1 reads (the window's start)."""
    if window_left < 0:
        return 0
    return max(0, context_len - 1 - window_left)


@cuda.jit(device=True, inline="always")
def apply_options(logit, softcap, slope, use_alibi, distance):
    """cap * tanh(logit / cap) when softcap > 0, then + slope * distance (t - position) with ALiBi."""
    if softcap > ZERO:
        logit = softcap * math.tanh(logit / softcap)
    if use_alibi:
        logit += slope * float32(distance)
    return logit


@cuda.jit(device=True, inline="always")
def no_logit_options(logit, softcap, slope, use_alibi, distance):
    """apply_options of a kernel built without soft-cap and ALiBi: the logit as it is."""
    return logit


def logit_options(enabled: bool):
    """The logit hook a kernel is built with: apply_options, or (options off) no_logit_options."""
    return apply_options if enabled else no_logit_options


def uses_logit_options(problem) -> bool:
    """Whether the problem needs the kernel built with soft-cap / ALiBi."""
    o = problem.options
    return o.logits_soft_cap > 0 or o.alibi_slopes is not None


def option_types():
    """The Numba types of OptionArgs.values() (for compile_ptx signatures)."""
    return (float32, int32, float32, types.Array(float32, 1, "C"), int32)


class OptionArgs:
    """The host side of the options: the scale with k_scale folded in, and the runtime arguments."""

    def __init__(self, problem):
        o = problem.options
        self.scale = np.float32(problem.softmax_scale * o.k_scale)
        self.v_scale = np.float32(o.v_scale)
        self.window_left = np.int32(o.window_left)
        self.softcap = np.float32(o.logits_soft_cap)
        self.use_alibi = np.int32(o.alibi_slopes is not None)
        slopes = o.alibi_slopes if o.alibi_slopes is not None else np.zeros(1, np.float32)
        self.alibi = upload(np.asarray(slopes, dtype=np.float32))

    def values(self) -> tuple:
        return (self.v_scale, self.window_left, self.softcap, self.alibi, self.use_alibi)


def decode_args(problem):
    """Device (query, key_cache, value_cache, block_tables, context_lens), the float32 scale (softmax
    scale x k_scale), then OptionArgs.values(): the first arguments of every attention kernel."""
    p = problem
    options = OptionArgs(p)
    return (upload(p.query), upload(p.key_cache), upload(p.value_cache), upload(p.block_tables),
            upload(p.context_lens), options.scale) + options.values()


def kernel_key(problem) -> tuple[str, str, bool]:
    """(query dtype name, cache dtype name, logit options on): what an attention kernel is specialised on."""
    return problem.dtype.name, problem.kv_dtype.name, uses_logit_options(problem)
