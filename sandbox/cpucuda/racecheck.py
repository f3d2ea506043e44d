"""Racecheck mode: a race checker built on CUDA's own ordering rules, in this process.

The kernel is compiled with g++'s ThreadSanitizer instrumentation (``-fsanitize=thread -g -O1``) to an
object file and linked with race_checker.cpp instead of libtsan (instrument.py, as traffic mode does),
so a launch runs in this process like a normal one. The runtime is not instrumented; the scheduler
tells the checker what orders memory in CUDA (include/cpucuda_sched.h, cpucuda_race.h):

* ``__syncthreads`` (and a block group's sync) ends the block's interval, in constant time: accesses
  of an earlier interval never race;
* within an interval, warp operations order the lanes taking part (shuffles, votes, ``__syncwarp``,
  cooperative-groups tile calls; in strict mode only ``__syncwarp``): a 32-lane vector clock per
  thread, joined at each operation's release, partial masks included;
* a tile barrier (``thread_block_tile<N>``, N = 64 ... 1024) orders the tile's threads;
* blocks run one after another, so only races within one block count.

Every access to the launch's arrays and shared memory is compared with the word's last write and
(for a write) with its readers of the interval, byte by byte (two halves of a word written by two
threads do not race). Atomics never race with atomics, and a plain access racing an atomic one is not
reported: CUDA's compare-and-swap idiom seeds its loop with a plain read (``old = *address; do { ...
atomicCAS ... }``), and polling a flag that atomics write is common; both are harmless on a GPU. libc
memcpy/memmove/memset called by the kernel count as its reads and writes (the linker's ``--wrap``).
A race raises :class:`CpuKernelRaceError` after the launch (whose written arrays come back), naming the
kernel, the kind of race, the array (argument index, dtype, shape and element, or the ``__shared__``
variable, dynamic shared memory, or a global ``__device__`` variable), the block, both threads and both
source lines (addr2line).
What the checker keeps per word, and its one approximation, are in race_checker.cpp's header.
"""
from __future__ import annotations

import ctypes
import functools
import re
import subprocess
from pathlib import Path

import numpy as np

from . import compiler as _compiler
from . import instrument as _instrument
from .errors import CpuKernelRaceError
from .traffic import _symbols

RECORDER = Path(__file__).resolve().parent / "race_checker.cpp"
COMPILE_FLAGS = ["-O2", "-g", "-DCPUCUDA_RACE=1", "-fsanitize=thread"]


def compile_flags() -> list[str]:
    """COMPILE_FLAGS plus the checker's hash, so a changed checker rebuilds every cached racecheck object."""
    return _instrument.compile_flags(COMPILE_FLAGS, RECORDER, "CPUCUDA_RACE_CHECKER")


class _Region(ctypes.Structure):  # race_checker.cpp's PyRegion
    _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64), ("target", ctypes.c_int64),
                ("readonly", ctypes.c_int64)]


class _Report(ctypes.Structure):  # race_checker.cpp's Report
    _fields_ = [("address", ctypes.c_uint64), ("region_lo", ctypes.c_uint64), ("target", ctypes.c_int32),
                ("shared", ctypes.c_int32), ("now_thread", ctypes.c_int32), ("before_thread", ctypes.c_int32),
                ("now_write", ctypes.c_int32), ("before_write", ctypes.c_int32), ("now_pc", ctypes.c_uint64),
                ("before_pc", ctypes.c_uint64), ("now_size", ctypes.c_int32), ("before_size", ctypes.c_int32),
                ("block", ctypes.c_int64), ("count", ctypes.c_int64)]


@functools.lru_cache(maxsize=None)
def _prepare(lib) -> None:
    lib.cpucuda_race_begin.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.cpucuda_race_end.argtypes = [ctypes.POINTER(_Report)]
    lib.cpucuda_race_end.restype = ctypes.c_int
    lib.cpucuda_race_same_value.argtypes = [ctypes.POINTER(_Report)]
    lib.cpucuda_race_same_value.restype = ctypes.c_int


def _regions(build, params, items):
    """One region per array argument, then one per global variable of the kernel's object (target -3). An array
    behind a pointer to const that no other argument overlaps is read-only (its reads are recorded only once
    something writes to it)."""
    arrays = [(i, it.ctypes.data, it.ctypes.data + it.nbytes) for i, it in enumerate(items)
              if isinstance(it, np.ndarray) and it.nbytes]
    variables = global_variables(build)
    regions = (_Region * max(len(arrays) + len(variables), 1))()
    for k, (i, lo, hi) in enumerate(arrays):
        writable = [(a, b) for j, a, b in arrays if j != i and params[j].code == "P"]
        readonly = params[i].code == "C" and not any(a < hi and lo < b for a, b in writable)
        regions[k] = _Region(lo, hi, i, int(readonly))
    for k, (_, address, size) in enumerate(variables, len(arrays)):
        regions[k] = _Region(address, address + size, -3, 0)
    return regions, len(arrays) + len(variables)


class _Named(list):
    """The launch's arrays with how messages name each (a struct's field: "argument 0 field 'k'")."""

    def __init__(self, items, names):
        super().__init__(items)
        self.names = names


class Session:
    """One racecheck launch: tell the checker the arrays before it, turn its report into an error after it."""

    def __init__(self, lib, build, kernel, params, items, grid, block):
        _prepare(lib)
        self.lib, self.build, self.kernel, self.items, self.grid, self.block = lib, build, kernel, items, grid, block
        self.items = _Named(items, [p.name(i) for i, p in enumerate(params)])
        self._regions, count = _regions(build, params, items)  # kept alive while the launch runs
        lib.cpucuda_race_begin(ctypes.addressof(self._regions), count)

    def end(self) -> CpuKernelRaceError | None:
        """The launch's first race as an error (None without one).

        Same-value write-after-writes (every writer stores the bytes already there: all lanes of a row
        storing one shared result) do not fail the launch; they are kept as findings (:func:`last_findings`).
        """
        report = _Report()
        found = self.lib.cpucuda_race_end(ctypes.byref(report))
        same = _Report()
        _LAST_FINDINGS.clear()
        if self.lib.cpucuda_race_same_value(ctypes.byref(same)):
            message = explain(same, self.kernel, self.build, self.items, self.grid, self.block)
            message = message.replace("data race (write-after-write)", "same-value race (write-after-write of "
                                      "identical bytes, benign on a GPU)", 1)
            if same.count > 1:
                message += f" ({same.count - 1} more same-value pair(s))"
            _LAST_FINDINGS.append(message)
        if not found:
            return None
        message = explain(report, self.kernel, self.build, self.items, self.grid, self.block)
        if report.count > 1:
            message += f"\n({report.count - 1} more race report(s) in this launch)"
        return CpuKernelRaceError(message)


_LAST_FINDINGS: list[str] = []


def last_findings() -> list[str]:
    """What the last racecheck launch in this process found that is not a failure (same-value races)."""
    return list(_LAST_FINDINGS)


def _index3(linear: int, dims) -> str:
    x, y = dims[0], dims[1]
    return f"({linear % x},{linear // x % y},{linear // (x * y)})"


def explain(report: _Report, name: str, build, items, grid, block) -> str:
    """One readable sentence: the kind, the array, the block, both threads and both source lines."""
    symbols = _symbols(build)
    now, before = ("write" if report.now_write else "read"), ("write" if report.before_write else "read")
    verb = {"read": "read", "write": "wrote"}

    def where(pc: int) -> str:
        file, line, function = symbols.frame(pc)
        return f"{file}:{line} in {_short(function)}"

    target = _target(report, build, items, symbols, symbols.frame(report.now_pc))
    return (f"kernel {name!r}: data race ({now}-after-{before}) on {target} in block {_index3(report.block, grid)}: "
            f"thread {_index3(report.now_thread, block)} {verb[now]} {report.now_size} bytes at "
            f"{where(report.now_pc)}; thread {_index3(report.before_thread, block)} {verb[before]} "
            f"{report.before_size} bytes at {where(report.before_pc)}, with no barrier between them "
            f"(__syncthreads, a tile's sync, or __syncwarp within a warp)")


def _target(report: _Report, build, items, symbols, frame) -> str:
    """The array the racy address lies in: an argument, a __shared__ variable or dynamic shared memory (named by
    the extern __shared__ declaration in scope at the racing line `frame`, else every one of the module's)."""
    offset = report.address - report.region_lo
    if report.target == -3:
        name = next(n for n, lo, _ in global_variables(build) if lo == report.region_lo)
        return f"global variable {name} (byte offset {offset})"
    if not report.shared:
        i = report.target
        arr = items[i]
        name = items.names[i] if isinstance(items, _Named) else f"argument {i}"
        return (f"{name} ({arr.dtype}, shape {arr.shape}, element {offset // max(arr.itemsize, 1)} of the "
                "flattened array)")
    if report.target == -2:
        in_scope = _dynamic_names_in_scope(build, frame) or dict.fromkeys(build.dynamic_names)
        names = ", ".join(in_scope) or "extern __shared__"
        return f"dynamic shared memory ({names}; byte offset {offset})"
    return f"__shared__ {symbols.shared_name(report.region_lo)} (byte offset {offset})"


# Writable data symbols that are not the kernel's variables: the runtime's and the checker's state, the
# compiler's and the C runtime's own (guard variables of function-scope statics, ...), and __shared__ storage
# (shared memory has its own regions; file-scope __shared__ arrays keep their source names).
_NOT_KERNEL_DATA = ("cpucuda::", "(anonymous namespace)::", "std::", "guard variable", "typeinfo", "vtable", "DW.ref.",
                    "__", "_GLOBAL_", "_DYNAMIC", "completed.")


@functools.lru_cache(maxsize=64)
def _data_symbols(so_path: str, shared: frozenset) -> tuple[tuple[str, int, int], ...]:
    """(demangled name, offset, size) of the object's writable data symbols that are the kernel's (nm), less the
    __shared__ arrays named in ``shared``."""
    out = subprocess.run(["nm", "-S", "-C", "--defined-only", so_path], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[2] in "bBdD" and int(parts[1], 16):
            name = parts[3]
            if not name.startswith(_NOT_KERNEL_DATA) and "__cpucuda_" not in name and name not in shared:
                found.append((name, int(parts[0], 16), int(parts[1], 16)))
    return tuple(found)


def global_variables(build) -> list[tuple[str, int, int]]:
    """(name, address, bytes) in this process of the kernel's global variables (``__device__``, statics)."""
    base = _symbols(build)._base
    shared = frozenset(build.shared_names) | frozenset(build.shared_names.values())
    return [(name, base + offset, size) for name, offset, size in _data_symbols(str(build.so_path), shared)]


_DYNAMIC_DECLARATION = re.compile(r"extern\s+__shared__[^;]*?\b(\w+)\s*\[\s*\]"  # as written
                                  r"|\b(\w+)\s*=\s*reinterpret_cast<[^;]*::cpucuda::dynamic_shared\(\)")  # rewritten


def _dynamic_names_in_scope(build, frame) -> list[str]:
    """The extern __shared__ names declared before the racing line whose braces still enclose it (the launched
    kernel's own view of dynamic shared memory; a module's other kernels declare theirs elsewhere); [] if the
    source cannot tell (the access sits in a function that received the pointer)."""
    file, line, _ = frame
    path = Path(build.source_path) if file == _compiler.CODE_LABEL else Path(file)
    if not path.is_absolute():
        path = _compiler.SOURCE_ROOT / path
    try:
        lines = path.read_text(errors="replace").splitlines()[:max(int(line), 0)]
    except OSError:
        return []
    # lowest = min(0, the lowest running count of braces opened minus closed, from just after the line being
    # looked at to the racing line): a declaration is in scope there exactly when no brace closed its block (0)
    lowest = 0
    for text in reversed(lines):
        for match in _DYNAMIC_DECLARATION.finditer(text):
            name = match.group(1) or match.group(2)
            if name in build.dynamic_names and lowest == 0:
                return [name]
        lowest = min(0, text.count("{") - text.count("}") + lowest)
    return []


def _short(function: str) -> str:
    """`void pa::attend<16, __half>(float*)` -> `pa::attend<16, __half>` (the return type and the parameters
    dropped at the top level only: spaces inside template arguments stay)."""
    depth, out = 0, []
    for ch in function:
        if ch == "(" and depth == 0 and out and out[-1] != " ":
            break
        depth += ch in "<("
        depth -= ch in ">)"
        out.append(ch)
    pieces, piece, depth = [], [], 0
    for ch in "".join(out).strip():
        depth += ch in "<("
        depth -= ch in ">)"
        if ch == " " and depth == 0:
            pieces.append("".join(piece))
            piece = []
        else:
            piece.append(ch)
    pieces.append("".join(piece))
    return pieces[-1] or function
