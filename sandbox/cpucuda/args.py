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

* a struct parameter (``'V'``: a trivially copyable class passed by value, such as
  a ``__grid_constant__`` Params) takes a :class:`Struct`: a NumPy structured
  dtype of the struct's size (``align=True`` gives C's layout) whose pointer
  fields (``np.uint64``) hold arrays. Every mode treats those arrays as it treats
  pointer arguments (:func:`expand`): ASan's child relocates them and writes
  its own addresses into the struct's bytes, racecheck and traffic know their
  bounds and name them ``argument i field 'f'`` / ``param.f``.

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
    size: int = 0                     # sizeof the parameter (what a Struct's dtype must match)
    label: str | None = None          # how messages name it (None: "argument i"); set for a struct's fields
    owner: tuple | None = None        # (argument index, field name) of a struct's pointer field (see expand)

    @property
    def is_pointer(self) -> bool:
        return self.code in "PC"

    def name(self, i: int) -> str:
        return self.label or f"argument {i}"


class Struct:
    """A struct argument passed by value: ``Struct(dtype, field=value, ...)``.

    dtype: a NumPy structured dtype laid out as the C struct (``np.dtype([...], align=True)``); its itemsize
    must be the struct's sizeof. A field given an array (or None: NULL) is a pointer: its dtype must be
    np.uint64. Other fields take values NumPy converts to the field's dtype; fields not given are zero.
    ``device_scalar()`` is the form CuPy's RawKernel takes on a GPU (a NumPy structured scalar whose pointer
    fields hold the device arrays' addresses), so one launcher builds the same Struct for both.
    """

    def __init__(self, dtype, **values):
        dtype = np.dtype(dtype)
        if dtype.names is None:
            raise TypeError(f"Struct: dtype must be a structured dtype (np.dtype([...], align=True)), got {dtype}")
        self.dtype = dtype
        self.value = np.zeros((), dtype)
        self.pointers: dict = {}  # field name -> array or None, in field order
        for name, v in values.items():
            if name not in dtype.names:
                raise TypeError(f"Struct: no field {name!r} (fields: {', '.join(dtype.names)})")
            if v is None or isinstance(v, np.ndarray) or hasattr(v, "__cuda_array_interface__"):
                if dtype.fields[name][0] != np.dtype(np.uint64):
                    raise TypeError(f"Struct field {name!r} holds a pointer: its dtype must be np.uint64, "
                                    f"got {dtype.fields[name][0]}")
                if isinstance(v, np.ndarray) and not v.flags.c_contiguous:
                    raise ValueError(f"Struct field {name!r}: the array is not C-contiguous")
                self.pointers[name] = v
            else:
                self.value[name] = v
        self.pointers = {n: self.pointers[n] for n in dtype.names if n in self.pointers}

    def fields(self) -> list:
        """[(field name, byte offset, array or None)] of the pointer fields."""
        return [(n, self.dtype.fields[n][1], a) for n, a in self.pointers.items()]

    def tobytes(self, addresses: dict) -> bytes:
        """The struct's bytes with each pointer field set to addresses[field] (a missing one: NULL)."""
        value = self.value.copy()
        for name in self.pointers:
            value[name] = addresses.get(name) or 0
        return value.tobytes()

    def device_scalar(self) -> np.void:
        """The struct for CuPy's RawKernel: pointer fields hold the device arrays' addresses."""
        value = self.value.copy()
        for name, a in self.pointers.items():
            value[name] = 0 if a is None else a.__cuda_array_interface__["data"][0]
        return value[()]


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
        self._structs: list[np.ndarray] = []  # kept alive while the launch runs

    def set_pointer(self, i: int, address: int) -> None:
        self.slots[SLOT * i:SLOT * i + 8].view(np.uint64)[0] = address

    def set_scalar(self, i: int, value: np.generic) -> None:
        raw = np.asarray(value).reshape(1).view(np.uint8)
        self.slots[SLOT * i:SLOT * i + raw.size] = raw

    def set_struct(self, i: int, data: bytes) -> None:
        """argv[i] points at a buffer of its own (a struct outgrows a slot), 16-byte aligned as a slot."""
        raw = np.zeros(len(data) + SLOT, dtype=np.uint8)
        start = (-raw.ctypes.data) % SLOT
        raw[start:start + len(data)] = np.frombuffer(data, dtype=np.uint8)
        self._structs.append(raw)
        self.argv[i] = raw.ctypes.data + start


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
    if p.code == "V":
        if not isinstance(value, Struct):
            raise TypeError(f"{where}: a struct passed by value; expects sandbox.cpucuda.Struct(dtype, field=...), "
                            f"got {_describe(value)}")
        if value.dtype.itemsize != p.size:
            raise TypeError(f"{where}: the struct is {p.size} bytes, the Struct's dtype {value.dtype.itemsize}; "
                            "a GPU would misread its fields (np.dtype([...], align=True) gives C's layout)")
        for name, _, arr in value.fields():
            if arr is not None and not isinstance(arr, np.ndarray):
                raise TypeError(f"{where}: field {name!r} holds {_describe(arr)}; the CPU takes NumPy arrays")
        return value
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


def expand(params: list, items: list) -> tuple[list, list]:
    """(params, items) with every Struct's pointer fields appended as arguments of their own (Param.owner says
    whose field; items None for NULL), so that each mode relocates, bounds and names them as pointer arguments.
    The kernel's own argv stays len(params) long: pack() writes the fields' addresses into the struct."""
    params_out, items_out = list(params), list(items)
    for i, (p, item) in enumerate(zip(params, items)):
        if isinstance(item, Struct):
            for name, _, arr in item.fields():
                params_out.append(Param("P", f"{p.ctype}::{name}", 8, f"argument {i} field {name!r}", (i, name)))
                items_out.append(arr)
    return params_out, items_out


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
        elif isinstance(item, Struct):
            packed.set_struct(i, item.tobytes({n: a.ctypes.data for n, _, a in item.fields() if a is not None}))
        else:
            packed.set_scalar(i, item)
    return packed
