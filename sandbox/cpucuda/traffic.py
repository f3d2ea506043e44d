"""Traffic mode: every global and shared memory access of a launch counted as a GPU's warps would make it.

    CpuRawKernel(..., traffic=True), modes(traffic=True) or SANDBOX_CPUCUDA_TRAFFIC=1, then
    last_traffic(device="h200") -> sandbox.analysis.traffic.Traffic   .metrics, .blocks, .sites
    last_raw() -> RawLaunch                                        what the counts were made from (raw.py)
    set_counter(count)                                             the counting core registers itself here
    with capture() as launches: ...                                 every traffic launch inside, as RawLaunch,
                                                                    arrays at one virtual address each

The kernel is compiled with g++'s ThreadSanitizer instrumentation (COMPILE_FLAGS) to an object file and
linked with traffic_recorder.cpp instead of libtsan, so it runs in this process, as in normal mode.
The recorder groups the lanes' accesses into warp-level requests in C and hands back raw.py's
per-(block, site) rows and sector stream; this module names the sites (addr2line: file:line through
inlined calls, and the chain of out-of-line calls) and the arrays (the kernel's parameter names, the
__shared__ variables' names), and places every array at a 256-byte aligned virtual address (as
cudaMalloc would), the same one for an array in every launch of a capture().
Blocks and threads run in launch order (thread_order is ignored). Traffic mode cannot share a launch
with ASan or racecheck: they need the instrumentation for themselves.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import subprocess
from pathlib import Path

import numpy as np

from . import compiler as _compiler
from . import instrument as _instrument
from . import source as _source
from .raw import SECTOR_DTYPE, SITE_BLOCK_DTYPE, RawLaunch, Site

RECORDER = Path(__file__).resolve().parent / "traffic_recorder.cpp"
COMPILE_FLAGS = [
    "-O2", "-g", "-DCPUCUDA_TRAFFIC=1", "-fsanitize=thread",
    # keep a vector-type access one access of its full width (float4, the kernels' 16-byte packs) and
    # stop g++ from merging, vectorising or turning loops into memset/memcpy the recorder cannot see
    "-fno-tree-sra", "-fno-tree-vectorize", "-fno-store-merging", "-fno-tree-loop-distribute-patterns",
    # keep each source line's accesses at their own instructions (sites), not merged with a look-alike's
    "-fno-crossjumping", "-fno-tree-tail-merge",
]


def compile_flags() -> list[str]:
    """COMPILE_FLAGS plus the recorder's hash, so a changed recorder rebuilds every cached traffic object."""
    return _instrument.compile_flags(COMPILE_FLAGS, RECORDER, "CPUCUDA_TRAFFIC_RECORDER")
ALIGN = 256
_VIRTUAL_START = 1 << 40
_UNSEEN_WHAT = ("memcpy", "memmove", "memset")
_ATTRIBUTES = ("__launch_bounds__", "__attribute__", "alignas", "__align__")


# ---------------------------------------------------------------- the recorder's tables (traffic_recorder.cpp)

class _Region(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64), ("vbase", ctypes.c_uint64), ("target", ctypes.c_int64)]


class _Results(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("sites", "chains", "rows", "sectors", "mma_inst", "mma_flops",
                                               "unseen", "regions")] + \
               [(n, ctypes.c_int64) for n in ("nsites", "nchains", "nrows", "nsectors", "nblocks", "nunseen",
                                              "nregions")]


_SITE = np.dtype([("pc", np.uint64), ("chain", np.int32), ("region", np.int32), ("kind", np.int32),
                  ("shared", np.int32)])
_CHAIN = np.dtype([("parent", np.int32), ("pad", np.int32), ("pc", np.uint64)])
_UNSEEN = np.dtype([("pc", np.uint64), ("bytes", np.int64), ("calls", np.int64), ("what", np.int32),
                    ("pad", np.int32)])
_REGION = np.dtype([("lo", np.uint64), ("hi", np.uint64), ("vbase", np.uint64), ("target", np.int32),
                    ("shared", np.int32)])
_KINDS = ("load", "store", "atomic")


def _copy(address, count, dtype) -> np.ndarray:
    if not count:
        return np.zeros(0, dtype)
    buf = (ctypes.c_char * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(buf, dtype).copy()


@functools.lru_cache(maxsize=None)
def _prepare(lib) -> None:
    lib.cpucuda_traffic_begin.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    lib.cpucuda_traffic_results.argtypes = [ctypes.POINTER(_Results)]


# ---------------------------------------------------------------- captures

class Capture:
    """Virtual addresses for a variant call's arrays: an array keeps one address in every launch."""

    def __init__(self):
        self.launches: list = []
        self._spans: list[tuple[int, int, int]] = []  # (real lo, real hi, virtual lo)
        self._next = _VIRTUAL_START

    def virtual(self, lo: int, nbytes: int) -> int:
        hi = lo + nbytes
        for a, b, v in self._spans:
            if a <= lo and hi <= b:  # a view inside an array already placed
                return v + (lo - a)
        v = self._next
        self._spans.append((lo, hi, v))
        self._next = -(-(v + max(nbytes, 1)) // ALIGN) * ALIGN + ALIGN  # a gap: no sector is shared
        return v


_captures: list[Capture] = []
_last: dict = {}
_counter: dict = {}  # "count": the counting core's count(), see set_counter


@contextlib.contextmanager
def capture():
    """Collect the RawLaunch of every traffic launch in the block (list, launch order)."""
    cap = Capture()
    _captures.append(cap)
    try:
        yield cap.launches
    finally:
        _captures.remove(cap)


class Session:
    """One traffic launch: tell the recorder the arrays before it, read its tables after it."""

    def __init__(self, lib, build, kernel, items, grid, block, params=()):
        _prepare(lib)
        self.lib, self.build, self.kernel, self.grid, self.block = lib, build, kernel, grid, block
        self.capture = _captures[-1] if _captures else Capture()
        regions = (_Region * max(len(items), 1))()
        self.names = list(_param_names(str(build.source_path), kernel))
        fields = [p.owner for p in params if p.owner is not None]  # a struct's pointer fields (args.expand)
        if fields:  # after the parameters, named "params.k"
            real = len(params) - len(fields)
            self.names = (self.names + [f"argument {i}" for i in range(len(self.names), real)])[:real]
            self.names += [f"{self.names[i]}.{field}" for i, field in fields]
        self.arrays = {}  # target name -> (virtual base, bytes)
        for i, item in enumerate(items):
            if isinstance(item, np.ndarray) and item.nbytes:
                lo = item.ctypes.data
                base = self.capture.virtual(lo, item.nbytes)
                regions[i] = _Region(lo, lo + item.nbytes, base, i)
                self.arrays[self.names[i] if i < len(self.names) else f"argument {i}"] = (base, item.nbytes)
        num_blocks = int(np.prod(grid))
        lib.cpucuda_traffic_begin(ctypes.addressof(regions), len(items), num_blocks)

    def end(self) -> None:
        self.lib.cpucuda_traffic_end()

    def collect(self):
        """The launch as a RawLaunch (also appended to the enclosing capture() and kept for last_traffic())."""
        res = _Results()
        self.lib.cpucuda_traffic_results(ctypes.byref(res))
        sites = _copy(res.sites, res.nsites, _SITE)
        chains = _copy(res.chains, res.nchains, _CHAIN)
        rows = _copy(res.rows, res.nrows, SITE_BLOCK_DTYPE)
        sectors = _copy(res.sectors, res.nsectors, SECTOR_DTYPE)
        unseen = _copy(res.unseen, res.nunseen, _UNSEEN)
        regions = _copy(res.regions, res.nregions, _REGION)
        counters = {"smsp__inst_executed_pipe_tensor.sum": _copy(res.mma_inst, res.nblocks, np.dtype(np.int64)),
                    "sandbox__tensor_flops.sum": _copy(res.mma_flops, res.nblocks, np.dtype(np.int64))}
        self.lib.cpucuda_traffic_release()
        names = _symbols(self.build)
        site_list = [names.site(s, chains, self._target(regions[s["region"]], names)) for s in sites]
        notes = [f"libc {_UNSEEN_WHAT[u['what']]} at {names.where(int(u['pc']))} moved {int(u['bytes'])} bytes of "
                 f"kernel memory in {int(u['calls'])} call(s): not in these counts (the instrumentation cannot "
                 "see inside libc)" for u in unseen]
        raw = RawLaunch(self.kernel, tuple(self.grid), tuple(self.block), site_list, rows, sectors, notes, counters,
                        arrays=self.arrays)
        self.capture.launches.append(raw)
        _last["raw"] = raw
        return raw

    def _target(self, region, names) -> str:
        if not region["shared"]:
            i = int(region["target"])
            return self.names[i] if i < len(self.names) else f"argument {i}"
        if region["target"] == -2:
            return "+".join(dict.fromkeys(self.build.dynamic_names)) or "extern __shared__"
        return names.shared_name(int(region["lo"]))


def last_raw():
    """The RawLaunch of this process's last traffic launch (None before the first)."""
    return _last.get("raw")


def set_counter(count) -> None:
    """Register `count(launches, device) -> CallTraffic`, what last_traffic() counts with.

    The counting core (sandbox.analysis.traffic) sits above the executor and registers itself when imported
    (importing sandbox does, so sandbox.cpucuda.last_traffic always has it): the executor produces the raw
    records and never imports what models them."""
    _counter["count"] = count


def last_traffic(device="h200"):
    """The last traffic launch counted alone (a cold L2 of `device`): .metrics, .blocks, .sites, .notes."""
    raw = last_raw()
    if raw is None:
        raise RuntimeError("no traffic launch yet: launch a kernel with traffic=True, inside "
                           "sandbox.cpucuda.modes(traffic=True), or with SANDBOX_CPUCUDA_TRAFFIC=1")
    if "count" not in _counter:
        raise RuntimeError("no traffic counter registered: import sandbox.analysis.traffic (importing sandbox does)")
    return _counter["count"]([raw], device).launches[0]


# ---------------------------------------------------------------- names: parameters, shared arrays, lines

@functools.lru_cache(maxsize=256)
def _param_names(source_path: str, kernel: str) -> list[str]:
    return param_names(Path(source_path).read_text(errors="replace"), kernel)


def param_names(code: str, kernel: str) -> list[str]:
    """The parameter names of __global__ `kernel` ("ns::k<16, float>" -> k's), [] when not found."""
    base = re.sub(r"<.*", "", kernel).split("::")[-1].strip()
    tokens = _source.tokenize(code)
    for i, tok in enumerate(tokens):
        if tok.text != "__global__":
            continue
        j = i
        while j < len(tokens) and tokens[j].text != "(":
            j += 1
        name = next((t.text for t in reversed(tokens[i:j]) if t.kind == "word"), None)
        # __launch_bounds__(...) comes before the name: skip to the parenthesis after the name
        while j < len(tokens) and name in _ATTRIBUTES:
            depth = 0
            while True:
                depth += tokens[j].text == "("
                depth -= tokens[j].text == ")"
                j += 1
                if depth == 0:
                    break
            k = j
            while k < len(tokens) and tokens[k].text != "(":
                k += 1
            name = next((t.text for t in reversed(tokens[j:k]) if t.kind == "word"), None)
            j = k
        if name != base:
            continue
        params, depth, current = [], 0, []
        for t in tokens[j + 1:]:
            if t.text in "(<[" and t.kind == "punct":
                depth += 1
            elif t.text in ")>]" and t.kind == "punct":
                if depth == 0 and t.text == ")":
                    params.append(current)
                    break
                depth -= 1
            elif t.text == "," and depth == 0:
                params.append(current)
                current = []
                continue
            current.append(t)
        if any(t.text == "(" for p in params for t in p):
            return []  # a macro's parameter list (`k(PARAMS(x))`): unreadable without the preprocessor
        return [next((t.text for t in reversed(p) if t.kind == "word"), f"argument {k}")
                for k, p in enumerate(params)]
    return []


_SYMBOLS: dict = {}


def _symbols(build) -> "_Symbols":
    """One symbol table per build: addr2line's answers are kept across launches."""
    key = str(build.so_path)
    if key not in _SYMBOLS:
        _SYMBOLS[key] = _Symbols(build)
    return _SYMBOLS[key]


class _Symbols:
    """addr2line and nm over one traffic build: sites' file:line chains, __shared__ variables' names."""

    def __init__(self, build):
        self.build = build
        self.path = str(build.so_path)
        self._lines: dict[int, list[tuple[str, int]]] = {}
        self._functions: dict[int, list[str]] = {}  # the function of each of _lines' frames

    def _frames(self, pcs) -> None:
        todo = sorted({int(p) for p in pcs} - set(self._lines))
        if not todo:
            return
        out = subprocess.run(["addr2line", "-e", self.path, "-i", "-f", "-C", "-a", *[hex(p - 1) for p in todo]],
                             capture_output=True, text=True).stdout
        current, function = None, "??"
        for line in out.splitlines():
            if line.startswith("0x"):
                current = int(line, 16) + 1
                self._lines[current], self._functions[current] = [], []
            elif current is not None and len(self._functions[current]) == len(self._lines[current]):
                function = line  # -f: each frame's function, then its file:line
                self._functions[current].append(function)
            elif current is not None:
                file, _, rest = line.rpartition(":")
                number = re.match(r"\d+", rest)
                self._lines[current].append((self._file(file), int(number.group()) if number else 0))
        for p in todo:
            self._lines.setdefault(p, [("??", 0)])
            self._functions.setdefault(p, ["??"])

    def _file(self, file: str) -> str:
        """The file as the kernel's own #line names it: "<code>" for a code string, repository-relative paths."""
        if file == str(self.build.source_path):
            return _compiler.CODE_LABEL
        if os.path.isabs(file) and not self._runtime(file):
            rel = os.path.relpath(file)
            return file if rel.startswith("..") else rel
        return file

    def _runtime(self, file: str) -> bool:
        return file.startswith(str(_compiler.INCLUDE_DIR))

    def site(self, s, chains, target: str):
        pcs = [int(s["pc"])]
        c = int(s["chain"])
        while c >= 0:
            pcs.append(int(chains[c]["pc"]))
            c = int(chains[c]["parent"])
        self._frames(pcs)
        frames = [f for pc in pcs for f in self._lines[pc] if not self._runtime(f[0])]
        if not frames:
            frames = self._lines[pcs[0]][:1]
        (file, line), rest = frames[0], frames[1:]
        return Site(file, line, tuple(f"{f}:{n}" for f, n in rest), _KINDS[int(s["kind"])],
                    "shared" if s["shared"] else "global", target)

    def where(self, pc: int) -> str:
        self._frames([pc])
        frames = [f for f in self._lines[pc] if not self._runtime(f[0])] or self._lines[pc]
        return f"{frames[0][0]}:{frames[0][1]}"

    def frame(self, pc: int) -> tuple[str, int, str]:
        """(file, line, function) of the innermost frame at `pc` outside the runtime headers (else the innermost)."""
        self._frames([pc])
        frames = list(zip(self._lines[pc], self._functions[pc]))
        (file, line), function = next((f for f in frames if not self._runtime(f[0][0])), frames[0])
        return file, line, function

    @functools.cached_property
    def _shared_symbols(self) -> dict[int, str]:
        """Offset in the object -> source name of every static __shared__ array (nm's local symbols)."""
        out = subprocess.run(["nm", "-C", self.path], capture_output=True, text=True).stdout
        found = {}
        for line in out.splitlines():
            parts = line.split(None, 2)
            if len(parts) == 3:
                last = parts[2].split("::")[-1]  # function-scope storage: "kernel<...>(...)::__cpucuda_shared_..."
                name = self.build.shared_names.get(last)
                if name is None and last in self.build.shared_names.values():
                    name = last                  # file-scope __shared__ keep their own names
                if name is not None:
                    found[int(parts[0], 16)] = name
        return found

    @functools.cached_property
    def _base(self) -> int:
        return _load_base(self.path)

    def shared_name(self, address: int) -> str:
        return self._shared_symbols.get(address - self._base, "__shared__")


def _load_base(path: str) -> int:
    """Where the dynamic loader placed `path` in this process (from /proc/self/maps)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(path):
                start, _, rest = line.partition("-")
                offset = int(line.split()[2], 16)
                return int(start, 16) - offset
    return 0
