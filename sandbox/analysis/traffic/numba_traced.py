"""The recording half of the Numba simulator's traffic capture: traced arrays and source sites.

A TracedArray stands in for a kernel's device array (or a shared array) inside a simulated launch:
every element read, write or atomic appends one record ``(thread, barrier epoch, site, address)``
to the launch's current block; numba_group turns a block's records into warp-level requests.

Sites. A site is one bytecode instruction of the kernel, or of a device function together with the
calls that led to it (innermost first), the way nvcc's inlining makes each call site its own code
on a GPU. It is found from the calling frames: (code, instruction offset) of the frame that
indexed the array and of each calling frame up to the kernel's, skipping the simulator's own
frames. CPython 3.11 specialises instructions as they run (BINARY_SUBSCR becomes
BINARY_SUBSCR_GETITEM for a Python __getitem__ after a few executions), and a specialised
instruction reports an offset inside its inline cache: offsets are normalised to the start of the
instruction holding them, else one site would split into two mid-launch.

Addresses. Every global array (the root buffer of a kernel argument) gets a fake base address,
256-byte aligned like cudaMalloc's, fixed for the whole capture (so two launches of one variant see
the same K/V sectors); views keep their byte offset from the root. A shared array's address is its
byte offset in its own buffer (every request reads one array): where an array starts does not change
a request's wavefronts as long as it starts on a 4-byte word, since a shift by whole words only
rotates the banks (arrays of 1- and 2-byte elements are assumed word-aligned).
"""
from __future__ import annotations

import bisect
import dis
import os
import sys
import threading
from pathlib import Path

import numpy as np

LOAD, STORE, ATOMIC = 0, 1, 2
OP_NAMES = ("load", "store", "atomic")
GLOBAL_ALIGN = 256
_getframe = sys._getframe
_current_thread = threading.current_thread
_ndarray = np.ndarray
REPO_ROOT = Path(__file__).resolve().parents[3]


def source_name(filename: str) -> str:
    """A source file as a report names it: relative to the repository when inside it."""
    try:
        return Path(filename).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return filename


def root_of(array: np.ndarray) -> np.ndarray:
    """The ndarray that owns the memory `array` views (the last ndarray in its .base chain)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def data_address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


class GlobalAddresses:
    """Fake device addresses: each root buffer gets a 256-byte aligned base, kept for the capture.

    The roots are held here so that no buffer is freed and its id reused while the capture runs.
    """

    def __init__(self):
        self._bases = {}  # id(root) -> (root, fake base)
        self._next = 1 << 20

    def base_of(self, array: np.ndarray) -> int:
        """The fake address of `array`'s first element."""
        root = root_of(array)
        entry = self._bases.get(id(root))
        if entry is None:
            entry = self._bases[id(root)] = (root, self._next)
            self._next += -(-max(root.nbytes, 1) // GLOBAL_ALIGN) * GLOBAL_ALIGN
        return entry[1] + data_address(array) - data_address(root)


class Target:
    """What a site accesses: a kernel argument or a shared array, by name."""

    __slots__ = ("name", "space", "width")

    def __init__(self, name: str, space: str, width: int):
        self.name, self.space, self.width = name, space, width


class SiteTable:
    """(calling frames, target, op) -> site id, for one launch of one kernel.

    `sites[i]` is (file, line, chain, op, target index, codes): codes are the code objects on the
    way (to mark simulator-only device functions). Lookups come from every simulated thread at
    once; a miss takes the lock.
    """

    def __init__(self, kernel_code, machinery):
        self.kernel_code = kernel_code
        self._machinery = machinery   # id(code) -> bool: a frame of the simulator or of this capture
        self._raw = {}                # raw key -> site id
        self._by_instruction = {}     # normalised key -> site id
        self.sites = []
        self.targets = []
        self._target_ids = {}
        self._lock = threading.Lock()

    def target(self, name: str, space: str, width: int, key=None) -> int:
        """The index of a target; `key` tells apart two targets of one name (default: name, space, width)."""
        key = (name, space, width) if key is None else key
        with self._lock:
            index = self._target_ids.get(key)
            if index is None:
                index = self._target_ids[key] = len(self.targets)
                self.targets.append(Target(name, space, width))
            return index

    def lookup(self, frame, target_op) -> int:
        code = frame.f_code
        if code is self.kernel_code:
            key = (id(code), frame.f_lasti, target_op)
        else:
            key = self._raw_key(frame, target_op)
        site = self._raw.get(key)
        if site is None:
            site = self._miss(key, frame, target_op)
        return site

    def _frames(self, frame):
        """The frames from the access up to the kernel's, without the simulator's own."""
        kernel_code, machinery = self.kernel_code, self._machinery
        f = frame
        while f is not None:
            code = f.f_code
            if code is kernel_code:
                yield f
                return
            skip = machinery.get(id(code))
            if skip is None:
                skip = machinery[id(code)] = is_machinery(code)
            if not skip:
                yield f
            f = f.f_back

    def _raw_key(self, frame, target_op):
        parts = []
        for f in self._frames(frame):
            parts.append(id(f.f_code))
            parts.append(f.f_lasti)
        parts.append(target_op)
        return tuple(parts)

    def _miss(self, key, frame, target_op) -> int:
        frames = list(self._frames(frame))
        instruction = tuple((id(f.f_code), instruction_start(f.f_code, f.f_lasti)) for f in frames) + (target_op,)
        with self._lock:
            site = self._by_instruction.get(instruction)
            if site is None:
                site = self._by_instruction[instruction] = len(self.sites)
                chain = tuple(f"{source_name(f.f_code.co_filename)}:{f.f_lineno}" for f in frames[1:])
                target, op = target_op
                self.sites.append((source_name(frames[0].f_code.co_filename), frames[0].f_lineno, chain,
                                   OP_NAMES[op], target, tuple(f.f_code for f in frames)))
            self._raw[key] = site
        return site


_INSTRUCTION_STARTS = {}


def instruction_start(code, offset: int) -> int:
    """The offset of the instruction holding byte `offset` (which may point into its inline cache)."""
    starts = _INSTRUCTION_STARTS.get(code)
    if starts is None:
        starts = _INSTRUCTION_STARTS[code] = [i.offset for i in dis.get_instructions(code)]
    return starts[max(0, bisect.bisect_right(starts, offset) - 1)]


_SIMULATOR_DIR = None


def is_machinery(code) -> bool:
    """Whether a frame belongs to the simulator or to the capture (not to kernel code)."""
    global _SIMULATOR_DIR
    if _SIMULATOR_DIR is None:
        import numba.cuda.simulator as simulator
        _SIMULATOR_DIR = os.path.dirname(simulator.__file__) + os.sep
    name = code.co_filename
    return (name.startswith(_SIMULATOR_DIR) or name.endswith(os.path.join("devices", "numba_poison.py"))
            or os.path.dirname(name) == os.path.dirname(__file__) and os.path.basename(name).startswith("numba_")
            or name.endswith("contextlib.py"))


class TracedArray:
    """A kernel's view of an array whose element accesses are recorded (global or shared).

    Indexing with integers (one per dimension) reads or writes one element and records it; fewer
    integers, or slices, give a traced view. Other attributes come from the wrapped ndarray.
    """

    __slots__ = ("_ary", "_base", "_strides", "_dims", "_recorder", "_target", "_load", "_store", "_atomic",
                 "shape", "ndim", "size", "dtype")

    def __init__(self, array: np.ndarray, base: int, recorder, target: int):
        from numba.cuda.simulator.cudadrv.devicearray import FakeShape

        self._ary = array
        self._base = np.int64(base)  # int64 arithmetic: an int32 index times a stride must not wrap
        self._strides = tuple(np.int64(s) for s in array.strides)
        self._dims = array.shape
        self._recorder = recorder
        self._target = target
        self._load, self._store, self._atomic = (target, LOAD), (target, STORE), (target, ATOMIC)
        self.shape = FakeShape(array.shape)  # as the simulator's device arrays: no negative indexing
        self.ndim, self.size, self.dtype = array.ndim, array.size, array.dtype

    def _offset(self, idx):
        """The fake address of element `idx` (a full integer index; negative indices wrap as Numba's)."""
        address = self._base
        try:
            if type(idx) is tuple:
                if len(idx) != len(self._dims):
                    raise TypeError
                for i, stride, dim in zip(idx, self._strides, self._dims):
                    address += (i + dim if i < 0 else i) * stride
            else:
                if len(self._dims) != 1:
                    raise TypeError
                address += (idx + self._dims[0] if idx < 0 else idx) * self._strides[0]
        except TypeError:
            raise TypeError(f"traffic capture: {self._recorder.target_name(self._target)}[{idx!r}] is not an "
                            f"element access (one integer per dimension, {len(self._dims)} here)") from None
        return address

    def __getitem__(self, idx):
        value = self._ary[idx]
        if type(value) is _ndarray:
            return self._view(value)
        self._recorder.record(_getframe(1), self._load, self._offset(idx))
        return value

    def __setitem__(self, idx, value):
        address = self._offset(idx)
        self._ary[idx] = value
        self._recorder.record(_getframe(1), self._store, address)

    def atomic_address(self, idx):
        return self._offset(idx)

    def _view(self, value: np.ndarray) -> "TracedArray":
        if not np.may_share_memory(value, self._ary):
            raise TypeError(f"traffic capture: {self._recorder.target_name(self._target)} indexed with arrays "
                            "(a copy, not an element access)")
        base = int(self._base) + data_address(value) - data_address(self._ary)
        return TracedArray(value, base, self._recorder, self._target)

    def __len__(self):
        return len(self._ary)

    def __getattr__(self, name):
        return getattr(self._ary, name)

    def __repr__(self):
        return f"TracedArray({self._recorder.target_name(self._target)}, shape={self._dims}, dtype={self.dtype})"
