"""A content fingerprint of a Python kernel function: what Numba compiles from it, for compile caches.

    fingerprint(fn) -> str | None   sha256 over the code of `fn` and of everything it reaches (None: a value
                                    with no stable content was reached, so the caller must not cache)

Reached: the bytecode, constants and names of the function and of its nested code, its closure cells,
the globals its code names (functions and Numba dispatchers recursively, through `py_func`; modules by
name, with their source file when it is one of the project's, since `module.helper` is reached by name;
numbers, strings, dtypes and Numba types by value). A kernel built by a factory
(make_body(tile, dtype, flags)) differs by its closure cells, so each instantiation has its own print.
"""
from __future__ import annotations

import hashlib
import types
from pathlib import Path

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parents[2]
_PLAIN = (int, float, bool, str, bytes, complex, type(None), np.dtype, np.generic)


def fingerprint(fn) -> str | None:
    h = hashlib.sha256()
    try:
        _feed(fn, h, set())
    except _Unstable:
        return None
    return h.hexdigest()


class _Unstable(Exception):
    """A reached value whose content is not known (an object whose repr is its address)."""


def _feed(value, h, seen: set) -> None:
    value = getattr(value, "py_func", value)  # a Numba dispatcher compiles its py_func
    if isinstance(value, _PLAIN):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, (tuple, list, frozenset)):
        h.update(f"{type(value).__name__}[{len(value)}](".encode())
        for item in (sorted(value, key=repr) if isinstance(value, frozenset) else value):
            _feed(item, h, seen)
        h.update(b")")
    elif isinstance(value, types.ModuleType):
        h.update(f"module:{value.__name__};".encode())
        source = getattr(value, "__file__", None)
        if source and Path(source).resolve().is_relative_to(PROJECT_ROOT):  # its attributes are reached by name
            h.update(Path(source).read_bytes())
    elif isinstance(value, types.FunctionType):
        if id(value) in seen:  # recursion: already fed
            h.update(f"again:{value.__qualname__};".encode())
            return
        seen.add(id(value))
        h.update(f"function:{value.__module__}.{value.__qualname__};".encode())
        _feed_code(value.__code__, value.__globals__, h, seen)
        for cell in value.__closure__ or ():
            _feed(cell.cell_contents, h, seen)
        _feed(value.__defaults__, h, seen)
        _feed(tuple(sorted((value.__kwdefaults__ or {}).items())), h, seen)
    elif isinstance(value, types.BuiltinFunctionType):
        h.update(f"builtin:{getattr(value, '__module__', '')}.{value.__qualname__};".encode())
    elif type(value).__module__.startswith("numba"):  # Numba types and typing objects: their str is their value
        text = str(value)
        if " at 0x" in text:
            raise _Unstable(text)
        h.update(f"numba:{type(value).__name__}:{text};".encode())
    elif isinstance(value, type):
        h.update(f"type:{value.__module__}.{value.__qualname__};".encode())
    else:
        text = repr(value)
        if " at 0x" in text or " object at " in text:
            raise _Unstable(text)
        h.update(f"{type(value).__module__}.{type(value).__qualname__}:{text};".encode())


def _feed_code(code: types.CodeType, globals_: dict, h, seen: set) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode() + repr(code.co_varnames).encode() + repr(code.co_freevars).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(const, globals_, h, seen)
        else:
            _feed(const, h, seen)
    for name in code.co_names:
        if name in globals_:
            h.update(f"global:{name}=".encode())
            _feed(globals_[name], h, seen)
