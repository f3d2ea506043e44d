"""Attention options in the Numba kernels: their arguments (in the option table's order), the per-logit hook,
and what a kernel is specialised on.

Every attention kernel takes, after (query, key_cache, value_cache, block_tables, context_lens):
    scale    float32: the softmax scale times the table's scale factors (k_scale: scale * (q . k * k_scale))
    options  OptionArgs: the table's kernel arguments (sandbox.problem.options.KERNEL_ARGS), in table order
             (window_left int32, soft_cap float32, alibi_slopes float32 [num_heads], v_scale float32, sinks float32
             [num_heads], k_scales/v_scales float32 and k_block_scales/v_block_scales uint8, flattened per slot);
             an option not in use passes a neutral value its code never reads.
A window and v_scale are read at run time (a window only moves the first token read, v_scale multiplies
the output once); every other option is compiled in only when a problem uses it: kernels are specialised
on (query dtype, cache dtype, the option flags outside RUNTIME_FLAGS), so plain problems run the plain
code. score_hook(flags) is the per-logit step (the table's score modifiers: soft-cap, then ALiBi, ...) a
kernel is built with, given the logit's whole context (positions and heads); finish() and
log_sum_exp() turn a softmax's running (max, sum) into the output's factor (the sink joins the denominator
there, once) and the log-sum-exp a kernel built with OPT_LSE writes to its lse output.
"""
from __future__ import annotations

import collections
import functools
import math

import numpy as np
from numba import cuda, float32, int32, types

from sandbox.problem.options import KERNEL_ARGS, KERNEL_FLAGS, SCORE_HOOKS

from .device import NEG_INF, ZERO
from .launch import upload

OPT = dict(KERNEL_FLAGS)
OPT_WINDOW, OPT_SOFTCAP, OPT_ALIBI, OPT_VSCALE = (OPT[n] for n in ("OPT_WINDOW", "OPT_SOFTCAP", "OPT_ALIBI",
                                                                   "OPT_VSCALE"))
OPT_SINKS, OPT_LSE, OPT_KV_SCALES, OPT_NVFP4 = (OPT[n] for n in ("OPT_SINKS", "OPT_LSE", "OPT_KV_SCALES", "OPT_NVFP4"))
# Options the Numba kernels read as runtime values: kernels are not specialised on these bits.
RUNTIME_FLAGS = OPT_WINDOW | OPT_VSCALE

OptionArgs = collections.namedtuple("OptionArgs", [arg.name for arg in KERNEL_ARGS])
# The Numba type of each C type a kernel argument of the table may have.
NUMBA_TYPES = {"float": float32, "int": int32, "const float*": types.Array(float32, 1, "C"),
               "const unsigned char*": types.Array(types.uint8, 1, "C")}


@cuda.jit(device=True, inline="always")
def first_token(context_len, window_left):
    """The first token a decode query at position context_len - 1 reads (the window's start)."""
    if window_left < 0:
        return 0
    return max(0, context_len - 1 - window_left)


def score_hook(flags: int):
    """(scored, hook): the device function (s, opts, q_pos, kv_pos, q_head, kv_head) -> s a kernel built with
    `flags` applies to each scaled logit s of query position q_pos and head q_head, token kv_pos and KV head
    kv_head: every score modifier of the option table whose bit is in `flags`, in table order (soft-cap, then
    ALiBi, ...: each row's ScoreHook.numba); scored is False when there is none (the hook is then the
    identity and a kernel need not call it: under the simulator each call is a Python call per logit)."""
    hooks = tuple(hook.numba for (_, bit), hook in SCORE_HOOKS if flags & bit)
    return bool(hooks), _chain(hooks)


@functools.lru_cache(maxsize=None)
def _chain(hooks: tuple):
    """One inlined device function applying `hooks` (plain Python functions) in order."""
    if not hooks:
        @cuda.jit(device=True, inline="always")
        def identity(s, opts, q_pos, kv_pos, q_head, kv_head):
            return s
        return identity
    first, rest = cuda.jit(device=True, inline="always")(hooks[0]), _chain(hooks[1:])

    @cuda.jit(device=True, inline="always")
    def hook(s, opts, q_pos, kv_pos, q_head, kv_head):
        return rest(first(s, opts, q_pos, kv_pos, q_head, kv_head), opts, q_pos, kv_pos, q_head, kv_head)
    return hook


@cuda.jit(device=True, inline="always")
def finish(top, total, sink, use_sink):
    """What a softmax's accumulator is multiplied by: 1 / total, or with a sink (use_sink, compile-time)
    c / (total * c + exp(sink - m)) with m = max(top, sink), c = exp(top - m) (no overflow for any sink).
    top/total: the running max and sum of exp(s_t - top) over the tokens; no token (top -inf, total 0)
    gives 0 with a sink (and the accumulator is 0 too)."""
    if use_sink:
        m = max(top, sink)
        c = math.exp(top - m)
        return c / (total * c + math.exp(sink - m))
    return float32(1.0) / total


@cuda.jit(device=True, inline="always")
def log_sum_exp(top, total):
    """log sum_t exp(s_t) = top + log(total), natural log over the tokens only; -inf without a token, NaN
    for a NaN total."""
    if not total <= ZERO:
        return top + math.log(total)
    return NEG_INF


def kernel_flags(problem) -> int:
    """The option flags an attention kernel is specialised on for `problem`."""
    return problem.options.kernel_flags() & ~RUNTIME_FLAGS


def kernel_key(problem) -> tuple[str, str, int]:
    """(query dtype name, cache format, specialised option flags): what an attention kernel is built for
    (the format is the cache dtype's name, or "nvfp4")."""
    return problem.dtype.name, problem.kv_format, kernel_flags(problem)


def report_flags(logit_options) -> int:
    """compile_report's `logit_options`: True, the kernel built with soft-cap and ALiBi; False, the plain one;
    an int, those option flags (the specialised ones: RUNTIME_FLAGS are dropped)."""
    if isinstance(logit_options, bool):
        return OPT_SOFTCAP | OPT_ALIBI if logit_options else 0
    return int(logit_options) & ~RUNTIME_FLAGS


def option_types():
    """The Numba type of OptionArgs (for compile_ptx signatures)."""
    return types.NamedTuple([NUMBA_TYPES[arg.ctype] for arg in KERNEL_ARGS], OptionArgs)


def option_args(problem) -> OptionArgs:
    """The problem's kernel option values, arrays uploaded."""
    return OptionArgs(*(upload(v) if isinstance(v, np.ndarray) else v for v in problem.options.kernel_values()))


def decode_args(problem) -> tuple:
    """Device (query, key_cache, value_cache, block_tables, context_lens), the float32 scale, then OptionArgs:
    the first arguments of every attention kernel."""
    p = problem
    scale = np.float32(p.softmax_scale * p.options.scale_factor())
    return (upload(p.query), upload(p.key_cache), upload(p.value_cache), upload(p.block_tables),
            upload(p.context_lens), scale, option_args(p))
