"""The recording half of the Numba simulator's traffic capture: traced arrays and source sites.

A TracedArray stands in for a kernel's device array (or a shared array) inside a simulated launch:
every element read, write or atomic appends one record ``(thread, barrier epoch, site, view, index)``
to the launch's current block; at the block's end Views computes the addresses, vectorised, and the
core's requests.group turns the records into warp-level requests.

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
        self.known = {}               # raw key -> site id
        self._by_instruction = {}     # normalised key -> site id
        self._callers = {}            # id(frame) -> (frame, caller_key(frame)) for device-function frames
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

    def lookup(self, frame, target_op: int) -> int:
        """The site id of the access `frame` is making now; target_op = target << 2 | op."""
        code = frame.f_code
        if code is self.kernel_code:
            key = (frame.f_lasti << 24) | target_op  # an int: the cheapest key to hash
        else:  # a device function: its callers' offsets stay put while it runs, so walk them once per call
            callers = self._callers.get(id(frame))
            if callers is None or callers[0] is not frame:
                callers = self._callers[id(frame)] = (frame, self._caller_key(frame))
            key = (callers[1], id(code), frame.f_lasti, target_op)
        site = self.known.get(key)
        if site is None:
            site = self._miss(key, frame, target_op)
        return site

    def new_block(self) -> None:
        """Forget the frames of the last block's device-function calls (held only to keep ids unique)."""
        self._callers.clear()

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

    def _caller_key(self, frame) -> tuple:
        """(code id, offset) of each frame that led to `frame`, innermost first, up to the kernel's."""
        return tuple((id(f.f_code), f.f_lasti) for f in list(self._frames(frame))[1:])

    def _miss(self, key, frame, target_op) -> int:
        frames = list(self._frames(frame))
        instruction = tuple((id(f.f_code), instruction_start(f.f_code, f.f_lasti)) for f in frames) + (target_op,)
        with self._lock:
            site = self._by_instruction.get(instruction)
            if site is None:
                site = self._by_instruction[instruction] = len(self.sites)
                chain = tuple(f"{source_name(f.f_code.co_filename)}:{f.f_lineno}" for f in frames[1:])
                target, op = target_op >> 2, target_op & 3
                self.sites.append((source_name(frames[0].f_code.co_filename), frames[0].f_lineno, chain,
                                   OP_NAMES[op], target, tuple(f.f_code for f in frames)))
            self.known[key] = site
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


class Views:
    """The array views a launch's traced arrays index, by number: (target, base address, strides, shape).

    An access records its view's number and its raw index; addresses are computed for a whole block
    at once (addresses()), which costs a fraction of doing the arithmetic in Python per access.
    """

    def __init__(self):
        self._ids = {}
        self.entries = []
        self._lock = threading.Lock()

    def index(self, target: int, base: int, array: np.ndarray) -> int:
        key = (target, base, array.shape, array.strides)
        view = self._ids.get(key)
        if view is None:
            with self._lock:
                view = self._ids.get(key)
                if view is None:
                    view = self._ids[key] = len(self.entries)
                    self.entries.append((target, int(base), np.array(array.strides, np.int64),
                                         np.array(array.shape, np.int64)))
        return view

    def addresses(self, view: np.ndarray, idx: tuple, target_name) -> np.ndarray:
        """int64 [n]: the fake address of access i, element idx[i] of view view[i]. An index must be one
        integer per dimension (negative ones wrap, as in Numba); anything else is refused here."""
        out = np.empty(len(view), np.int64)
        order = np.argsort(view, kind="stable")
        bounds = np.flatnonzero(np.diff(view[order])) + 1
        for members in np.split(order, bounds) if len(order) else ():
            target, base, strides, dims = self.entries[view[members[0]]]
            raw = [idx[i] for i in members.tolist()]
            try:
                ix = np.array(raw, np.int64).reshape(len(members), -1)
                if ix.shape[1] != len(dims):
                    raise ValueError
            except (TypeError, ValueError):
                bad = next((r for r in raw if not is_element_index(r, len(dims))), raw[0])
                raise TypeError(f"traffic capture: {target_name(target)}[{bad!r}] is not an element access "
                                f"(one integer per dimension, {len(dims)} here)") from None
            ix = np.where(ix < 0, ix + dims, ix)
            out[members] = base + ix @ strides
        return out


def is_element_index(index, ndim: int) -> bool:
    """Whether `index` names one element of an ndim-dimensional array (one integer per dimension)."""
    parts = index if type(index) is tuple else (index,)
    return len(parts) == ndim and all(isinstance(p, (int, np.integer)) for p in parts)


class TracedArray:
    """A kernel's view of an array whose element accesses are recorded (global or shared).

    Indexing with integers (one per dimension) reads or writes one element and records it; fewer
    integers, or slices, give a traced view. Other attributes come from the wrapped ndarray.
    """

    __slots__ = ("_ary", "_base", "_view", "_recorder", "_target", "_load", "_store", "_atomic",
                 "shape", "ndim", "size", "dtype")

    def __init__(self, array: np.ndarray, base: int, recorder, target: int):
        from numba.cuda.simulator.cudadrv.devicearray import FakeShape

        self._ary = array
        self._base = int(base)
        self._view = recorder.views.index(target, base, array)
        self._recorder = recorder
        self._target = target
        self._load, self._store, self._atomic = (target << 2) | LOAD, (target << 2) | STORE, (target << 2) | ATOMIC
        self.shape = FakeShape(array.shape)  # as the simulator's device arrays: no negative indexing
        self.ndim, self.size, self.dtype = array.ndim, array.size, array.dtype

    def __getitem__(self, idx):
        value = self._ary[idx]
        if type(value) is _ndarray:
            return self._subview(value)
        self._recorder.record(_getframe(1), self._load, self._view, idx)
        return value

    def __setitem__(self, idx, value):
        self._ary[idx] = value
        self._recorder.record(_getframe(1), self._store, self._view, idx)

    def _subview(self, value: np.ndarray) -> "TracedArray":
        if not np.may_share_memory(value, self._ary):
            raise TypeError(f"traffic capture: {self._recorder.target_name(self._target)} indexed with arrays "
                            "(a copy, not an element access)")
        base = self._base + data_address(value) - data_address(self._ary)
        return TracedArray(value, base, self._recorder, self._target)

    def __len__(self):
        return len(self._ary)

    def __getattr__(self, name):
        return getattr(self._ary, name)

    def __repr__(self):
        return f"TracedArray({self._recorder.target_name(self._target)}, shape={self._ary.shape}, dtype={self.dtype})"


_STORES = {"STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL"}


def stored_name(code, offset: int) -> str | None:
    """The variable the call at `offset` stores its result in (`sh = cuda.shared.array(...)` -> "sh")."""
    for ins in dis.get_instructions(code):
        if ins.offset > offset and ins.opname not in ("CACHE", "PRECALL"):
            return ins.argval if ins.opname in _STORES else None
    return None
