"""Check kernel arguments against the kernel's C signature and pack them.

The signature comes from C++ (one NumPy type code per parameter, see
include/cpucuda_launch.h), so there is nothing to parse here. The rules are
CuPy's, made strict where a GPU would silently read garbage:

* a pointer parameter takes a C-contiguous NumPy array (passed by address,
  written in place) or None (NULL); a read-only array only for ``const T*``;
* a scalar parameter takes a NumPy scalar of exactly its C type
  (np.int32 for ``int``, np.float32 for ``float``, np.float16 for ``__half``,
  ml_dtypes.bfloat16 / float8_e4m3fn / float8_e5m2 for ``__nv_bfloat16`` /
  ``__nv_fp8_e4m3`` / ``__nv_fp8_e5m2``, np.complex64 for ``cuFloatComplex``
  (= ``float2``), np.complex128 for ``cuDoubleComplex`` (= ``double2``));
  a Python int is accepted for integer parameters when it fits (CuPy passes
  it as int64 and a GPU reads the low bytes), a Python float only for
  ``double``, a Python complex only for ``cuDoubleComplex``, a Python bool
  only for ``bool``.

Pointers are untyped, as in CuPy: any array's address passes, so arrays of
ml_dtypes.bfloat16 (or uint16 bit patterns) for ``__nv_bfloat16*``,
float8_e4m3fn/float8_e5m2 (or uint8) for ``__nv_fp8_e4m3*``/``__nv_fp8_e5m2*``/
``__nv_fp8_storage_t*``, complex64 for ``cuFloatComplex*``.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

# Type codes (include/cpucuda_launch.h): NumPy's, plus ml_dtypes' 'E' (bfloat16),
# '4' (float8_e4m3fn) and '5' (float8_e5m2).
_NUMPY_CODES = "?bBhHiIqQefdFD"
_ML_DTYPES_CODES = {"E": "bfloat16", "4": "float8_e4m3fn", "5": "float8_e5m2"}


@functools.lru_cache(maxsize=None)
def scalar_dtype(code: str) -> np.dtype:
    """The NumPy dtype a by-value parameter with this type code takes."""
    if code in _NUMPY_CODES:
        return np.dtype(code)
    try:
        import ml_dtypes
    except ImportError as exc:  # pragma: no cover - ml_dtypes is a dependency
        raise TypeError(f"parameters of this type take ml_dtypes.{_ML_DTYPES_CODES[code]} scalars: "
                        "install ml_dtypes") from exc
    return np.dtype(getattr(ml_dtypes, _ML_DTYPES_CODES[code]))


def _dtype_label(dtype: np.dtype) -> str:
    return f"ml_dtypes.{dtype.name}" if dtype.name in _ML_DTYPES_CODES.values() else f"np.{dtype.name}"


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


SLOT = 16  # bytes per argument slot: the largest by-value type (cuDoubleComplex), and its alignment


class Packed:
    """``void* args[]`` for the launcher, plus what must stay alive meanwhile.

    Each argument's bytes sit in a 16-byte, 16-byte-aligned slot, so a
    cuDoubleComplex (double2, aligned(16)) is read where the C++ side expects it.
    """

    def __init__(self, n: int):
        m = max(n, 1)
        self._raw = np.zeros(m * SLOT + SLOT, dtype=np.uint8)
        start = (-self._raw.ctypes.data) % SLOT
        self.slots = self._raw[start:start + m * SLOT]
        base = self.slots.ctypes.data
        self.argv = (ctypes.c_void_p * m)(*[base + SLOT * i for i in range(m)])
        self.arrays: list[np.ndarray | None] = [None] * n

    def set_pointer(self, i: int, address: int) -> None:
        self.slots[SLOT * i:SLOT * i + 8].view(np.uint64)[0] = address

    def set_scalar(self, i: int, value: np.generic) -> None:
        raw = np.asarray(value).reshape(1).view(np.uint8)
        self.slots[SLOT * i:SLOT * i + raw.size] = raw


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
            "(supported: pointers, bool, 8/16/32/64-bit integers, __half, __nv_bfloat16, __nv_fp8_e4m3, "
            "__nv_fp8_e5m2, float, double, cuFloatComplex/float2, cuDoubleComplex/double2)"
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
    dtype = scalar_dtype(p.code)
    label = _dtype_label(dtype)
    if isinstance(value, np.ndarray):
        raise TypeError(f"{where}: passed by value; expects {label}(...), got {_describe(value)}")
    if isinstance(value, np.generic):
        if value.dtype != dtype:
            raise TypeError(f"{where}: expects {label}, got {_describe(value)}; "
                            f"a GPU would misread its bytes")
        return value
    if isinstance(value, bool):
        if p.code != "?":
            raise TypeError(f"{where}: expects {label}, got {_describe(value)}")
        return np.bool_(value)
    if isinstance(value, int):
        if p.code not in "bBhHiIqQ":
            raise TypeError(f"{where}: expects {label}, got {_describe(value)}; CuPy would pass an "
                            "int64 whose bytes the kernel misreads")
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"{where}: {value} does not fit in {dtype.name}")
        return dtype.type(value)
    if isinstance(value, float):
        if p.code != "d":
            raise TypeError(f"{where}: expects {label}, got {_describe(value)}; CuPy would pass a "
                            "float64 whose bytes the kernel misreads")
        return np.float64(value)
    if isinstance(value, complex):
        if p.code != "D":
            raise TypeError(f"{where}: expects {label}, got {_describe(value)}; CuPy would pass a "
                            "complex128 whose bytes the kernel misreads")
        return np.complex128(value)
    raise TypeError(f"{where}: unsupported argument {_describe(value)}")


def buffer_ranges(items: list) -> tuple:
    """(ctypes uint64 array of (address, nbytes) pairs, count) of the array arguments, for cpucuda_set_buffers."""
    arrays = [it for it in items if isinstance(it, np.ndarray)]
    pairs = (ctypes.c_uint64 * max(2 * len(arrays), 1))(*[v for a in arrays for v in (a.ctypes.data, a.nbytes)])
    return pairs, len(arrays)


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
