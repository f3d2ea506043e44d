"""Triton's interpreter on NumPy without torch: the adapter between a @triton.jit kernel and memory.Memory.

Triton 3.9's interpreter (`TRITON_INTERPRET=1`) runs a kernel's Python body on NumPy, one program after
another, but its GridExecutor copies arguments to the host through torch (`untyped_storage()`, `new_empty`,
`set_`). Our arguments are host memory already (memory.Pointer: a virtual address and a Triton dtype), so
that copy and the copy back are pass-throughs here, and the interpreter's raw loads and stores go to
memory.Memory, which checks every address against the argument it belongs to.

A kernel module keeps its @triton.jit functions (what `triton.compile` needs for the census and what a
GPU launch needs), so the interpreter's flag is not read at import: `interpreted(jit_function)` makes
the interpreted twin on demand, with every @triton.jit function the body calls replaced by its own
interpreted twin.
"""
from __future__ import annotations

import contextlib
import types

import numpy as np
import triton
import triton.language as tl
from triton.runtime import interpreter
from triton.runtime.interpreter import GridExecutor, InterpretedFunction, InterpreterError, interpreter_builder
from triton.runtime.jit import JITFunction

from .memory import Memory, OutOfBounds

_PLAIN_DOT = type(interpreter_builder).create_dot
_MISSING = object()

TESTED_TRITON = "3.9.0"  # the interpreter internals this adapter replaces (pyproject pins it)
if triton.__version__ != TESTED_TRITON:
    raise ImportError(f"kernels/triton's interpreter adapter replaces Triton {TESTED_TRITON}'s internals; "
                      f"Triton {triton.__version__} is installed (pip install triton=={TESTED_TRITON})")


class AdapterRefusal(RuntimeError):
    """An interpreter operation the NumPy-backed adapter does not route (atomics): refused, never run on raw memory."""


class _HostArgsExecutor(GridExecutor):
    """GridExecutor whose arguments already live on the host: nothing to copy there or back."""

    def _init_args_hst(self, args_dev, kwargs):
        return args_dev, kwargs

    def _restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        return None


_TWINS: dict = {}


def interpreted(kernel: JITFunction) -> InterpretedFunction:
    """The interpreter's twin of a @triton.jit function, its callees' twins in its globals (made once)."""
    if kernel in _TWINS:
        return _TWINS[kernel]
    fn = kernel.fn
    scope = dict(fn.__globals__)
    clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__annotations__ = dict(fn.__annotations__)
    twin = _TWINS[kernel] = InterpretedFunction(clone)
    for name, value in list(scope.items()):
        if isinstance(value, JITFunction):
            scope[name] = interpreted(value)
    return twin


def _language_objects() -> list:
    """Everything the interpreter's _patch_lang may change: triton.language's modules and classes."""
    core = tl.core
    return [tl, core, tl.math, tl.standard, core.tensor, core.tensor_descriptor_base, core.dtype,
            getattr(tl, "condition", core.tensor)]


@contextlib.contextmanager
def _language_twins():
    """triton.language's own @jit functions (tl.zeros, tl.cdiv, tl.sum, ...) as interpreted twins for one launch:
    what importing triton under TRITON_INTERPRET=1 would have made them, and the interpreter's flag on.

    Everything is put back afterwards, so the same process still compiles for a GPU: the interpreter patches the
    language at each device-function call and never restores that (under TRITON_INTERPRET=1 nothing compiles)."""
    snapshot = [(obj, dict(vars(obj))) for obj in _language_objects()]
    for module in (tl, tl.standard, tl.math):
        for name, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                setattr(module, name, interpreted(value))
    flag = triton.knobs.runtime.interpret
    triton.knobs.runtime.interpret = True
    try:
        yield
    finally:
        triton.knobs.runtime.interpret = flag
        for obj, saved in snapshot:
            for name in [n for n in vars(obj) if n not in saved]:
                delattr(obj, name)
            for name, value in saved.items():
                if vars(obj).get(name, _MISSING) is not value:
                    setattr(obj, name, value)


@contextlib.contextmanager
def _memory_ops(memory: Memory):
    """Route the interpreter's loads and stores through `memory` for the duration of one launch."""
    backend = interpreter._interpreter
    saved = backend.load, backend.store, interpreter_builder.set_grid_idx

    def set_grid_idx(x, y, z):
        memory.program = (x, y, z)
        saved[2](x, y, z)

    class Backend:
        load = staticmethod(memory.load)
        store = staticmethod(memory.store)

        def __getattr__(self, name):  # atomics would touch raw addresses: none of our kernels uses them
            raise AdapterRefusal(f"{memory.variant}: the CPU adapter routes loads and stores only; {name} would touch "
                                 "raw addresses, so it is refused")

    interpreter._interpreter = Backend()
    interpreter_builder.set_grid_idx = set_grid_idx
    interpreter_builder.create_dot = _dot
    interpreter._convert_float = _convert_float_keeping_specials
    try:
        yield
    finally:
        interpreter._interpreter = backend
        interpreter._convert_float = _PLAIN_CONVERT
        del interpreter_builder.set_grid_idx, interpreter_builder.create_dot


def _convert_float_keeping_specials(input, input_dtype, output_dtype, rounding_mode):
    """3.9's interpreter widens fp8 by its bit fields alone: e4m3fn's NaN (S.1111.111) and e5m2's NaN and
    infinities (S.11111.xx) come out as finite numbers. A GPU's conversion keeps them (NaN is data: a NaN cache
    element reaches exactly the rows that read it), so here too."""
    output = _PLAIN_CONVERT(input, input_dtype, output_dtype, rounding_mode)
    if input_dtype not in (tl.float8e4nv, tl.float8e5) or output_dtype not in _SPECIAL_BITS:
        return output
    bits = np.frombuffer(np.ascontiguousarray(input).tobytes(), dtype=np.uint8).reshape(input.shape)
    nan_bits, inf_bits, sign_bit = _SPECIAL_BITS[output_dtype]
    output = output.astype(output.dtype, copy=True)
    sign = np.where(bits & 0x80, sign_bit, 0).astype(output.dtype)
    if input_dtype == tl.float8e4nv:
        output[(bits & 0x7F) == 0x7F] = nan_bits
    else:
        special = (bits & 0x7C) == 0x7C
        output[special & ((bits & 0x03) != 0)] = nan_bits
        infinite = special & ((bits & 0x03) == 0)
        output[infinite] = inf_bits | sign[infinite]
    return output


_PLAIN_CONVERT = interpreter._convert_float
# output dtype -> (a quiet NaN, +inf, the sign bit) as its bits
_SPECIAL_BITS = {tl.float32: (0x7FC00000, 0x7F800000, 0x80000000), tl.float16: (0x7E00, 0x7C00, 0x8000),
                 tl.bfloat16: (0x7FC0, 0x7F80, 0x8000)}


def _dot(a, b, d, input_precision, max_num_imprecise_acc):
    """tl.dot: 3.9's interpreter multiplies bfloat16 operands as their raw uint16 bits; widen them first (a GPU
    multiplies bf16 exactly into its float32 accumulator, as float32 products do here)."""
    operands = []
    for x in (a, b):
        if x.dtype.scalar == tl.bfloat16 or (x.dtype.primitive_bitwidth == 8 and x.dtype.is_floating()):
            x = interpreter.TensorHandle(interpreter._convert_float(x.data, x.dtype.scalar, tl.float32, None)
                                         .view(np.float32), tl.float32)
        operands.append(x)
    return _PLAIN_DOT(interpreter_builder, *operands, d, input_precision, max_num_imprecise_acc)


def run(kernel: JITFunction, grid: tuple, memory: Memory, *args, **constexprs) -> None:
    """Interpret `kernel` over `grid` (up to 3 dims) with `args` (memory.Pointer for arrays, Python numbers)
    and its constexpr keywords. An OutOfBounds access is raised as such (not wrapped)."""
    twin = interpreted(kernel)
    executor = _HostArgsExecutor(twin.rewrite(), twin.arg_names, tuple(grid))
    with _language_twins(), _memory_ops(memory):
        try:
            executor(*args, **constexprs)
        except InterpreterError as exc:
            if isinstance(exc.__cause__, OutOfBounds):
                raise exc.__cause__ from None
            raise
