"""Run one launch in a child process under a sanitizer runtime (ASan or TSan).

A sanitizer-built shared object cannot be loaded into this Python process
(the runtime must come first: LD_PRELOAD), and an ASan error aborts the
process, so each such launch runs in ``python -B -S -E _child.py``. The child
copies every array into a malloc of exactly its size, launches, and sends
back the arrays the kernel may write (non-const pointers); they are copied
into the caller's arrays in place. A :class:`Sanitizer` says how to start
the runtime and how to turn its report on stderr into an exception
(asan.py, racecheck.py).
"""
from __future__ import annotations

import functools
import os
import pickle
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import CpuKernelError, CpuKernelMemoryError

CHILD = Path(__file__).resolve().parent / "_child.py"


@dataclass
class Sanitizer:
    """How to run a child under one sanitizer and read its reports."""

    name: str                   # "AddressSanitizer"
    preload: Callable[[], str]  # path of the runtime to LD_PRELOAD
    env: Callable[[], dict]     # extra environment (ASAN_OPTIONS, TSAN_OPTIONS, ...)
    # (stderr, kernel name, build, Launch) -> an exception for a report, or None when there is none
    explain: Callable
    timeout_env: str = "SANDBOX_CPUCUDA_ASAN_TIMEOUT"


@dataclass
class Launch:
    """What the parent knows about a child launch, for reading its reports."""

    addresses: dict = field(default_factory=dict)  # buffer id -> (address in the child, nbytes)
    owners: dict = field(default_factory=dict)     # buffer id -> (argument index, the caller's array)
    dynamic_shared: tuple | None = None            # (address, nbytes) of dynamic shared memory in the child


@functools.lru_cache(maxsize=None)
def runtime_library(filename: str, package: str) -> str:
    """Path of a sanitizer runtime (``libasan.so``, ``libtsan.so``) that matches the compiler."""
    from . import compiler as _compiler

    try:
        out = subprocess.run([_compiler.compiler(), f"-print-file-name={filename}"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise CpuKernelError(f"cannot locate {filename} with {_compiler.compiler()}: {exc}") from exc
    if not os.path.isabs(out) or not os.path.exists(out):
        raise CpuKernelError(f"{filename} not found: install the compiler's sanitizer runtime (Debian: {package})")
    return out


def _buffers(params, items):
    """Map arrays to child buffers; identical arrays share one, overlaps are refused."""
    ranges: list[tuple[int, int, int]] = []  # (start, end, buffer id)
    arg_specs, buffers, writable, owners = [], {}, set(), {}
    for i, (p, item) in enumerate(zip(params, items)):
        if item is None:
            arg_specs.append(("null", None))
        elif isinstance(item, np.ndarray):
            start, end = item.ctypes.data, item.ctypes.data + item.nbytes
            bid = next((b for s, e, b in ranges if (s, e) == (start, end)), None)
            if bid is None:
                if any(s < end and start < e for s, e, _ in ranges):
                    raise ValueError(f"argument {i}: a sanitizer launch cannot pass arrays that partly overlap "
                                     "another argument")
                bid = len(ranges)
                ranges.append((start, end, bid))
                buffers[bid] = item.tobytes()
                owners[bid] = (i, item)
            if p.code == "P":
                writable.add(bid)
            arg_specs.append(("buffer", bid))
        else:
            arg_specs.append(("value", np.asarray(item).tobytes()))
    return arg_specs, buffers, writable, owners


def _run(cmd, env, timeout, name, sanitizer):
    try:
        return subprocess.run(cmd, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CpuKernelError(f"kernel {name!r}: the {sanitizer.name} launch did not finish within {timeout:.0f} s "
                             f"({sanitizer.timeout_env})") from None


def launch(sanitizer: Sanitizer, build, name, config: tuple, params, items, constants=None) -> None:
    """Run the launch in a child under ``sanitizer``; copy written arrays back or raise.

    ``config``: the arguments of ``_abi.make_config``. ``constants``: name ->
    bytes of __constant__ variables set from Python (CpuRawModule.get_global).
    """
    arg_specs, buffers, writable, owners = _buffers(params, items)
    job = {"lib": str(build.so_path), "entry": build.entries[name], "args": arg_specs, "buffers": buffers,
           "writable": writable, "config": tuple(config), "constants": dict(constants or {})}
    env = dict(os.environ, LD_PRELOAD=sanitizer.preload(), **sanitizer.env())
    timeout = float(os.environ.get(sanitizer.timeout_env, "600"))
    with tempfile.TemporaryDirectory(prefix="cpucuda-child-") as tmp:
        inp, out, ptrs = (os.path.join(tmp, n) for n in ("in.pkl", "out.pkl", "ptrs.txt"))
        with open(inp, "wb") as f:
            pickle.dump(job, f, protocol=pickle.HIGHEST_PROTOCOL)
        # -B: no __pycache__ in the package (-E would ignore PYTHONDONTWRITEBYTECODE); -S: fast start.
        cmd = [sys.executable, "-B", "-S", "-E", str(CHILD), inp, out, ptrs]
        proc = _run(cmd, env, timeout, name, sanitizer)
        if b"unexpected memory mapping" in proc.stderr:
            # GCC 12's TSan cannot handle vm.mmap_rnd_bits=32 (some hosts): rerun without address randomisation.
            proc = _run(["setarch", platform.machine(), "-R", *cmd], env, timeout, name, sanitizer)
        if proc.stdout:  # the kernel's printf
            sys.stdout.write(proc.stdout.decode(errors="replace"))
        stderr = proc.stderr.decode(errors="replace")
        result = None
        if os.path.exists(out):
            with open(out, "rb") as f:
                result = pickle.load(f)
        info = Launch(owners=owners)
        _read_ptrs(ptrs, info)
    report = sanitizer.explain(stderr, name, build, info)
    if result is None:
        if report is not None:
            raise report
        raise CpuKernelError(f"kernel {name!r}: the {sanitizer.name} child process failed (exit {proc.returncode}):\n"
                             + stderr[-4000:])
    for bid, data in result["buffers"].items():
        _, arr = owners[bid]
        arr.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    if report is not None:
        raise report
    if stderr.strip():
        sys.stderr.write(stderr)
    if result["rc"]:
        cls = CpuKernelMemoryError if result["rc"] == 2 else CpuKernelError
        raise cls(f"kernel {name!r}: {result['error']}")


def _read_ptrs(path, info: Launch) -> None:
    if not os.path.exists(path):
        return
    for line in open(path):
        parts = line.split()
        if parts[0] == "dyn":
            info.dynamic_shared = (int(parts[1]), int(parts[2]))
        else:
            bid, addr, n = (int(x) for x in parts)
            info.addresses[bid] = (addr, n)
