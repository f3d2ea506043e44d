"""Check kernel arguments against the kernel's C signature and pack them.

The signature comes from C++ (one NumPy type code per parameter, see
include/cpucuda_launch.h), so there is nothing to parse here. The rules are
CuPy's, made strict where a GPU would silently read garbage:

* a pointer parameter takes a C-contiguous NumPy array (passed by address,
  written in place) or None (NULL); a read-only array only for ``const T*``;
* a scalar parameter takes a NumPy scalar of exactly its C type
  (np.int32 for ``int``, np.float32 for ``float``, np.float16 for ``__half``);
  a Python int is accepted for integer parameters when it fits (CuPy passes
  it as int64 and a GPU reads the low bytes), a Python float only for
  ``double``, a Python bool only for ``bool``.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

_SCALAR_DTYPES = {c: np.dtype(c) for c in "?bBhHiIqQefd"}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its type code and its C type for messages."""

    code: str
    ctype: str

    @property
    def is_pointer(self) -> bool:
        return self.code in "PC"


def parse_type_name(pretty: str) -> str:
    """Pull ``T`` out of g++'s ``... type_name() [with T = float4]``."""
    marker = "[with T = "
    i = pretty.find(marker)
    if i < 0:
        return pretty
    j = pretty.find(";", i)
    return pretty[i + len(marker):(j if j >= 0 else len(pretty) - 1)]


class Packed:
    """``void* args[]`` for the launcher, plus what must stay alive meanwhile."""

    def __init__(self, n: int):
        self.slots = np.zeros(max(n, 1), dtype=np.uint64)
        base = self.slots.ctypes.data
        self.argv = (ctypes.c_void_p * max(n, 1))(*[base + 8 * i for i in range(max(n, 1))])
        self.arrays: list[np.ndarray | None] = [None] * n

    def set_pointer(self, i: int, address: int) -> None:
        self.slots[i] = address

    def set_scalar(self, i: int, value: np.generic) -> None:
        raw = np.asarray(value).reshape(1).view(np.uint8)
        self.slots.view(np.uint8)[8 * i:8 * i + raw.size] = raw


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"a NumPy array ({value.dtype}, shape {value.shape})"
    if isinstance(value, np.generic):
        return f"np.{value.dtype.name} scalar"
    return f"{type(value).__name__} {value!r}"[:80]


def convert(kernel: str, params: list[Param], args) -> list:
    """Validate ``args`` for ``params``; return one item per parameter.

    Items are an ndarray (pointer), None (NULL pointer) or a NumPy scalar of
    the exact C type. Raises TypeError or ValueError naming the parameter.
    """
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"kernel {kernel!r}: args must be a tuple, got {type(args).__name__}")
    if len(args) != len(params):
        sig = ", ".join(p.ctype for p in params)
        raise TypeError(f"kernel {kernel!r} takes {len(params)} argument(s) ({sig}), got {len(args)}")
    return [_convert_one(kernel, i, p, a) for i, (p, a) in enumerate(zip(params, args))]


def _convert_one(kernel: str, i: int, p: Param, value):
    where = f"kernel {kernel!r} argument {i} ({p.ctype})"
    if p.code == "x":
        raise TypeError(
            f"{where}: this executor cannot pass parameters of type {p.ctype!r} by value "
            "(supported: pointers, bool, 8/16/32/64-bit integers, __half, float, double)"
        )
    if p.is_pointer:
        if value is None:
            return None
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{where}: expects a NumPy array (passed as a pointer), got {_describe(value)}")
        if not value.flags.c_contiguous:
            raise ValueError(f"{where}: the array is not C-contiguous; the kernel sees raw memory, "
                             "pass np.ascontiguousarray(...)")
        if p.code == "P" and not value.flags.writeable:
            raise ValueError(f"{where}: the array is read-only but the parameter is not a pointer to const")
        return value
    dtype = _SCALAR_DTYPES[p.code]
    if isinstance(value, np.ndarray):
        raise TypeError(f"{where}: passed by value; expects np.{dtype.name}(...), got {_describe(value)}")
    if isinstance(value, np.generic):
        if value.dtype != dtype:
            raise TypeError(f"{where}: expects np.{dtype.name}, got {_describe(value)}; "
                            f"a GPU would misread its bytes")
        return value
    if isinstance(value, bool):
        if p.code != "?":
            raise TypeError(f"{where}: expects np.{dtype.name}, got {_describe(value)}")
        return np.bool_(value)
    if isinstance(value, int):
        if dtype.kind not in "iu":
            raise TypeError(f"{where}: expects np.{dtype.name}, got {_describe(value)}; CuPy would pass an "
                            "int64 whose bytes the kernel reads as a float")
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"{where}: {value} does not fit in {dtype.name}")
        return dtype.type(value)
    if isinstance(value, float):
        if p.code != "d":
            raise TypeError(f"{where}: expects np.{dtype.name}, got {_describe(value)}; CuPy would pass a "
                            "float64 whose bytes the kernel misreads")
        return np.float64(value)
    raise TypeError(f"{where}: unsupported argument {_describe(value)}")


def pack(items: list) -> Packed:
    """Build ``void* args[]`` for converted items (see :func:`convert`)."""
    packed = Packed(len(items))
    for i, item in enumerate(items):
        if item is None:
            packed.set_pointer(i, 0)
        elif isinstance(item, np.ndarray):
            packed.arrays[i] = item
            packed.set_pointer(i, item.ctypes.data)
        else:
            packed.set_scalar(i, item)
    return packed
