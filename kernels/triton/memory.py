"""A launch's device memory on the CPU: each array argument gets its own window of a virtual address space.

The Triton interpreter turns every pointer into plain integers (base + offset * element size) and would
read and write those addresses raw. Here `data_ptr()` returns a virtual address instead: argument i
lives at (2 i + 2) << 40 and owns the window of 2^41 bytes around it, so any address, even one a
negative offset moved below its base, names the argument it was computed from. Loads and stores
(`load`, `store`) translate each active lane's address to a byte offset in that argument and refuse
one outside it (`OutOfBounds`: the variant, the argument, the program id, the first offending element)
before touching anything: no raw memory is ever read or written, so nothing out of bounds ever happens.
A recorder (`Memory.recorder`) sees every access as (argument, byte offsets [shape], mask [shape]).
"""
from __future__ import annotations

import dataclasses

import numpy as np

WINDOW_BITS = 41


class OutOfBounds(IndexError):
    """A Triton kernel addressed memory outside the argument its pointer was derived from."""


@dataclasses.dataclass
class Buffer:
    """One array argument: name, flat bytes (uint8 view of a C-contiguous array) and its virtual base."""
    name: str
    array: np.ndarray
    base: int

    @property
    def bytes(self) -> np.ndarray:
        return self.array.reshape(-1).view(np.uint8)


class Pointer:
    """What the interpreter receives for an array argument: data_ptr() (a virtual address) and the Triton dtype."""

    def __init__(self, address: int, dtype):
        self.address, self.dtype = address, dtype

    def data_ptr(self) -> int:
        return self.address


class Memory:
    """The virtual address space of one interpreted launch of variant `variant`."""

    def __init__(self, variant: str):
        self.variant = variant
        self.buffers: list[Buffer] = []
        self.program = (0, 0, 0)
        self.recorder = None  # callable(buffer, offsets, mask, is_store, itemsize) or None

    def pointer(self, name: str, array: np.ndarray, dtype) -> Pointer:
        """Register a C-contiguous host array as argument `name`; the kernel sees a pointer to its first element."""
        if not array.flags.c_contiguous:
            raise ValueError(f"{self.variant}: argument {name} must be C-contiguous")
        base = (2 * len(self.buffers) + 2) << (WINDOW_BITS - 1)
        self.buffers.append(Buffer(name, array, base))
        return Pointer(base, dtype)

    def _locate(self, addresses: np.ndarray, mask: np.ndarray, itemsize: int, verb: str):
        """(buffer, int64 byte offsets [shape]) of the active addresses; OutOfBounds for any outside it."""
        active = addresses[mask].astype(np.uint64)
        if active.size == 0:
            return None, None
        windows = ((active + np.uint64(1 << (WINDOW_BITS - 1))) >> np.uint64(WINDOW_BITS)).astype(np.int64) - 1
        index = int(windows[0])
        if not 0 <= index < len(self.buffers) or np.any(windows != index):
            self._refuse(verb, "an address outside every argument" if not 0 <= index < len(self.buffers)
                         else f"one access spanning {sorted(set(int(w) for w in windows))} arguments")
        buffer = self.buffers[index]
        offsets = addresses.astype(np.uint64).astype(np.int64) - np.int64(buffer.base)
        size = buffer.bytes.size
        bad = mask & ((offsets < 0) | (offsets + itemsize > size) | (offsets % itemsize != 0))
        if np.any(bad):
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            element = int(offsets[where]) / itemsize
            self._refuse(verb, f"argument {buffer.name} at element {element:g} (lane {where} of the access), "
                               f"outside its {size // itemsize} elements")
        return buffer, offsets

    def _refuse(self, verb: str, what: str):
        raise OutOfBounds(f"{self.variant}: out-of-bounds {verb} of {what}, program id {self.program}")

    def load(self, addresses: np.ndarray, mask: np.ndarray, other: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """The interpreter's masked load: element values of `dtype` (masked lanes take `other`)."""
        dtype = np.dtype(dtype)
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), addresses.shape)
        out = np.array(np.broadcast_to(other, addresses.shape), dtype=dtype)
        buffer, offsets = self._locate(addresses, mask, dtype.itemsize, "load")
        if buffer is None:
            return out
        picked = offsets[mask][:, None] + np.arange(dtype.itemsize)
        out[mask] = buffer.bytes[picked].reshape(-1).view(dtype)
        if self.recorder is not None:
            self.recorder(buffer, offsets, mask, False, dtype.itemsize)
        return out

    def store(self, addresses: np.ndarray, values: np.ndarray, mask: np.ndarray) -> None:
        """The interpreter's masked store of `values` (their own dtype) at the active addresses."""
        values = np.ascontiguousarray(np.broadcast_to(values, addresses.shape))
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), addresses.shape)
        buffer, offsets = self._locate(addresses, mask, values.dtype.itemsize, "store")
        if buffer is None:
            return
        picked = offsets[mask][:, None] + np.arange(values.dtype.itemsize)
        buffer.bytes[picked.reshape(-1)] = values[mask].reshape(-1).view(np.uint8)
        if self.recorder is not None:
            self.recorder(buffer, offsets, mask, True, values.dtype.itemsize)
