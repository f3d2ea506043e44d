"""wrong.triton.skips_first_token: triton.naive whose first token read is one too late (NEGATIVE CONTROL).

The flaw: the window's start (and, without a window, token 0) is `first_token(...) + 1`, a fencepost slip
in the helper that moves the first token; a context of one token gets no token at all (0/0 = NaN).
Everything else is triton.naive's kernel: the same source, compiled with this module's helper in its
globals, every precision and option included.
Must be rejected by tests/kernels/test_variants.py::test_property_test_rejects_negative_control.
"""
from __future__ import annotations

import dataclasses
import types

import triton
import triton.language as tl

from kernels.triton import launch, naive

LIMITS = naive.LIMITS


@triton.jit
def first_token_plus_one(position, window_left):
    return tl.where(window_left < 0, 0, tl.maximum(position - window_left, 0)) + 1  # BUG: + 1


def _with_helper(kernel, **helpers):
    """`kernel`'s source with some of the functions it calls replaced (its module's globals, copied)."""
    fn = kernel.fn
    scope = dict(fn.__globals__, **helpers)
    return triton.jit(types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__))


flawed_kernel = _with_helper(naive.naive_kernel, first_token=first_token_plus_one)


def prepare(problem, backend: str) -> launch.Launch:
    args, values = launch.decode_arguments("wrong.triton.skips_first_token", problem, backend)
    calls = [dataclasses.replace(call, kernel=flawed_kernel) for call in naive.calls(problem, values, 4)]
    return launch.Launch("wrong.triton.skips_first_token", problem, args, calls)
