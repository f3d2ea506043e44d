"""Run launches in a persistent child process under a sanitizer runtime (ASan).

A sanitizer-built shared object cannot be loaded into this Python process (its runtime must
come first: LD_PRELOAD), and an ASan error aborts the process, so such launches run in a
child, ``python -B -S -E _child.py``, one per sanitizer, that stays alive between launches:
it keeps the libraries loaded with their fibers, so a launch costs a message each way instead
of a process start, imports, and fiber creation. Arrays travel through an arena, a file both
processes map (in /dev/shm where there is one), instead of pickles: the parent copies them in,
the child copies each into a malloc of exactly its size, launches on those, and the arrays the
kernel may write (non-const pointers) are copied back into the caller's in place.

The child is replaced by a fresh one after any launch that failed, reported, or ended it: a
sanitizer reports each distinct problem once per process, and an abandoned launch leaves its
fibers mid-kernel. A :class:`Sanitizer` says how to start the runtime and how to turn its
report on stderr into an exception (asan.py).
"""
from __future__ import annotations

import atexit
import functools
import mmap
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import _abi, toolchain
from . import args as _args
from .errors import CpuKernelError, CpuKernelMemoryError

CHILD = Path(__file__).resolve().parent / "_child.py"
_ALIGN = 256  # offset alignment of arrays in the arena (cudaMalloc's)
_START_TIMEOUT = 120.0


@dataclass
class Sanitizer:
    """How to run a child under one sanitizer and read its reports."""

    name: str                   # "AddressSanitizer"
    preload: Callable[[], str]  # path of the runtime to LD_PRELOAD
    env: Callable[[], dict]     # extra environment (ASAN_OPTIONS, ...)
    # (stderr, kernel name, build, Launch) -> an exception for a report, or None when there is none
    explain: Callable
    timeout_env: str = "SANDBOX_CPUCUDA_ASAN_TIMEOUT"


@dataclass
class Launch:
    """What the parent knows about a child launch, for reading its reports."""

    addresses: dict = field(default_factory=dict)  # buffer id -> (address in the child, nbytes)
    owners: dict = field(default_factory=dict)     # buffer id -> (how messages name it, the caller's array)


@functools.lru_cache(maxsize=None)
def runtime_library(filename: str, package: str) -> str:
    """Path of a sanitizer runtime (``libasan.so``) that matches the compiler."""
    try:
        out = subprocess.run([toolchain.compiler(), f"-print-file-name={filename}"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise CpuKernelError(f"cannot locate {filename} with {toolchain.compiler()}: {exc}") from exc
    if not os.path.isabs(out) or not os.path.exists(out):
        raise CpuKernelError(f"{filename} not found: install the compiler's sanitizer runtime (Debian: {package})")
    return out


def _buffers(params, items):
    """Map arrays to child buffers; identical arrays share one, overlaps are refused. A struct's pointer fields
    (args.expand) get buffers as pointer arguments do; the child writes their addresses into the struct."""
    params, items = _args.expand(params, items)
    ranges: list[tuple[int, int, int]] = []  # (start, end, buffer id)
    arrays, writable, owners, buffer_of = {}, set(), {}, {}
    for i, (p, item) in enumerate(zip(params, items)):
        if not isinstance(item, np.ndarray):
            continue
        start, end = item.ctypes.data, item.ctypes.data + item.nbytes
        bid = next((b for s, e, b in ranges if (s, e) == (start, end)), None)
        if bid is None:
            if any(s < end and start < e for s, e, _ in ranges):
                raise ValueError(f"{p.name(i)}: a sanitizer launch cannot pass arrays that partly overlap "
                                 "another argument")
            bid = len(ranges)
            ranges.append((start, end, bid))
            arrays[bid] = item
            owners[bid] = (p.name(i), item)
        if p.code == "P":
            writable.add(bid)
        buffer_of[i] = bid
    arg_specs = []
    for i, item in enumerate(items[:len(params) - sum(p.owner is not None for p in params)]):
        if item is None:
            arg_specs.append(("null", None))
        elif isinstance(item, np.ndarray):
            arg_specs.append(("buffer", buffer_of[i]))
        elif isinstance(item, _args.Struct):
            field_at = {q.owner: j for j, q in enumerate(params) if q.owner is not None}
            fields = [(offset, buffer_of.get(field_at[(i, name)])) for name, offset, _ in item.fields()]
            arg_specs.append(("struct", (item.tobytes({}), fields)))
        else:
            arg_specs.append(("value", np.asarray(item).tobytes()))
    return arg_specs, arrays, writable, owners


class _Arena:
    """A file mapped by this process and the child; arrays are copied in at 256-byte aligned offsets."""

    def __init__(self, size: int):
        self.size = max(size, mmap.PAGESIZE)
        fd, self.path = tempfile.mkstemp(prefix=f"cpucuda-arena-{os.getpid()}-", dir=self._folder(self.size))
        os.ftruncate(fd, self.size)
        self.map = mmap.mmap(fd, self.size)
        os.close(fd)
        self.bytes = np.frombuffer(self.map, dtype=np.uint8)
        self.linked = True

    @staticmethod
    def _folder(size: int) -> str | None:
        """/dev/shm when it has room to spare (containers often give it 64 MiB: a full one would end the
        process with SIGBUS at the first write), else the temporary folder."""
        try:
            st = os.statvfs("/dev/shm")
            if os.access("/dev/shm", os.W_OK) and st.f_bavail * st.f_frsize >= 2 * size:
                return "/dev/shm"
        except OSError:
            pass
        return None

    @staticmethod
    def layout(arrays: dict) -> tuple[dict, int]:
        offsets, end = {}, 0
        for bid, arr in arrays.items():
            offsets[bid] = (end, arr.nbytes)
            end += -(-arr.nbytes // _ALIGN) * _ALIGN
        return offsets, end

    def unlink(self) -> None:
        """Once the child has mapped the file, its name is no longer needed (nothing leaks if we die)."""
        if self.linked:
            Path(self.path).unlink(missing_ok=True)
            self.linked = False

    def close(self) -> None:
        self.unlink()
        del self.bytes
        self.map.close()


class _Server:
    """One child process serving launches for one sanitizer."""

    def __init__(self, sanitizer: Sanitizer):
        self.sanitizer = sanitizer
        self.pid = os.getpid()
        self.arena: _Arena | None = None
        self.logs = tempfile.TemporaryDirectory(prefix="cpucuda-child-")
        self.out_path, self.err_path = (os.path.join(self.logs.name, n) for n in ("stdout", "stderr"))
        self._start()

    def _start(self) -> None:
        cmd_r, self.cmd_w = os.pipe()
        self.reply_r, reply_w = os.pipe()
        env = dict(os.environ, LD_PRELOAD=self.sanitizer.preload(), **self.sanitizer.env())
        # -B: no __pycache__ in the package (-E would ignore PYTHONDONTWRITEBYTECODE); -S: fast start.
        cmd = [sys.executable, "-B", "-S", "-E", str(CHILD), str(cmd_r), str(reply_w)]
        with open(self.out_path, "ab") as out, open(self.err_path, "ab") as err:  # O_APPEND: truncated per launch
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                         pass_fds=(cmd_r, reply_w))
        os.close(cmd_r)
        os.close(reply_w)
        _abi.send(self.cmd_w, {"ping": True})
        if self._receive(time.monotonic() + _START_TIMEOUT) is None:
            stderr = self._read(self.err_path)
            self.close()
            raise CpuKernelError(f"the {self.sanitizer.name} child process did not start (exit "
                                 f"{self.proc.returncode}):\n{stderr[-4000:]}")

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def _receive(self, deadline: float):
        """The next message from the child; None if it exited or the deadline passed (then it is killed)."""
        chunks, need, header = [], _abi.MESSAGE_HEADER.size, None
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.reply_r], [], [], left)[0]:
                self.proc.kill()
                self.proc.wait()
                self.timed_out = True
                return None
            chunk = os.read(self.reply_r, need)
            if not chunk:
                self.proc.wait()
                return None
            chunks.append(chunk)
            need -= len(chunk)
            if need == 0:
                data = b"".join(chunks)
                if header is not None:
                    return _abi.pickle.loads(data)
                header, need, chunks = data, _abi.MESSAGE_HEADER.unpack(data)[0], []

    def _read(self, path: str) -> str:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")

    def _truncate(self) -> None:
        for path in (self.out_path, self.err_path):
            os.truncate(path, 0)

    def run(self, job: dict, arrays: dict, timeout: float):
        """(first message, final reply or None, stdout, stderr) of one launch; arrays are copied into the arena."""
        offsets, size = _Arena.layout(arrays)
        if arrays and (self.arena is None or self.arena.size < size):
            if self.arena is not None:
                self.arena.close()
            self.arena = _Arena(max(size, 2 * (self.arena.size if self.arena else 0)))
        for bid, arr in arrays.items():
            start, n = offsets[bid]
            self.arena.bytes[start:start + n] = arr.reshape(-1).view(np.uint8)
        job = dict(job, buffers=offsets,
                   arena=self.arena.path if self.arena else "", arena_size=self.arena.size if self.arena else 0)
        self._truncate()
        self.timed_out = False
        deadline = time.monotonic() + timeout
        _abi.send(self.cmd_w, job)
        first = self._receive(deadline)
        reply = self._receive(deadline) if first is not None else None
        if reply is not None and self.arena is not None:
            self.arena.unlink()
        return first, reply, self._read(self.out_path), self._read(self.err_path)

    def copy_back(self, placed) -> None:
        """Copy ((offset, nbytes), array) pairs from the arena into the arrays."""
        for (start, n), arr in placed:
            arr.reshape(-1).view(np.uint8)[:] = self.arena.bytes[start:start + n]

    def close(self) -> None:
        if self.pid != os.getpid():
            return  # a forked copy: the child belongs to the parent process
        for fd in ("cmd_w", "reply_r"):
            if getattr(self, fd, None) is not None:
                os.close(getattr(self, fd))
                setattr(self, fd, None)
        try:
            self.proc.wait(timeout=5)  # EOF on its command pipe ends the child
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.arena is not None:
            self.arena.close()
            self.arena = None


_SERVERS: dict[str, _Server] = {}
_LOCK = threading.Lock()  # one launch at a time: the child serves one


def _server(sanitizer: Sanitizer) -> _Server:
    server = _SERVERS.get(sanitizer.name)
    if server is None or not server.alive():
        if server is not None:
            server.close()
        server = _SERVERS[sanitizer.name] = _Server(sanitizer)
    return server


def _retire(sanitizer: Sanitizer) -> None:
    server = _SERVERS.pop(sanitizer.name, None)
    if server is not None:
        server.close()


@atexit.register
def _close_all() -> None:
    for name in list(_SERVERS):
        _SERVERS.pop(name).close()


def launch(sanitizer: Sanitizer, build, name, config: tuple, params, items, constants=None) -> None:
    """Run the launch in the child under ``sanitizer``; copy written arrays back or raise.

    ``config``: the arguments of ``_abi.make_config``. ``constants``: name ->
    bytes of __constant__ variables set from Python (CpuRawModule.get_global).
    """
    arg_specs, arrays, writable, owners = _buffers(params, items)
    job = {"lib": str(build.so_path), "entry": build.entries[name], "args": arg_specs, "writable": writable,
           "config": tuple(config), "constants": dict(constants or {})}
    timeout = float(os.environ.get(sanitizer.timeout_env, "600"))
    with _LOCK:
        server = _server(sanitizer)
        first, reply, stdout, stderr = server.run(job, arrays, timeout)
        if reply is not None:  # the child survived: the arrays the kernel wrote come back, before any report
            server.copy_back(_written(arrays, writable))
        timed_out = server.timed_out
        if reply is None or reply["rc"] or "WARNING: " in stderr or "ERROR: " in stderr:
            _retire(sanitizer)  # a fresh child for the next launch (see the module docstring)
    if stdout:  # the kernel's printf
        sys.stdout.write(stdout)
    if timed_out:
        raise CpuKernelError(f"kernel {name!r}: the {sanitizer.name} launch did not finish within {timeout:.0f} s "
                             f"({sanitizer.timeout_env})")
    info = Launch(addresses=dict(first["addresses"]) if first else {}, owners=owners)
    report = sanitizer.explain(stderr, name, build, info)
    if reply is None:
        if report is not None:
            raise report
        raise CpuKernelError(f"kernel {name!r}: the {sanitizer.name} child process failed:\n" + stderr[-4000:])
    if report is not None:
        raise report
    if stderr.strip():
        sys.stderr.write(stderr)
    if reply["rc"]:
        cls = CpuKernelMemoryError if reply["rc"] == 2 else CpuKernelError
        raise cls(f"kernel {name!r}: {reply['error']}")


def _written(arrays: dict, writable) -> list:
    """((offset, nbytes), caller's array) of each array the kernel may write."""
    offsets, _ = _Arena.layout(arrays)
    return [(offsets[bid], arrays[bid]) for bid in writable]
