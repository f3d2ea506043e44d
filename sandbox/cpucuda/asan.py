"""AddressSanitizer mode: run one launch in a child process under ASan.

The kernel is compiled with ``-fsanitize=address -fno-omit-frame-pointer -g``
(the fiber switches are annotated for ASan in include/cpucuda_sched.h). The
child (``_asan_child.py``) runs with ``LD_PRELOAD=$(g++ -print-file-name=libasan.so)``
and ``ASAN_OPTIONS=detect_leaks=0``, copies every array into a malloc of
exactly its size (so a one-past-the-end access is caught), launches, and
sends back the arrays the kernel may write; they are copied into the
caller's arrays in place. When ASan stops the child, its report becomes a
``CpuKernelMemoryError`` naming the kernel, the kind of error, the source file
and line, and the argument whose bounds were crossed; the parent survives.

Symbolisation: ASan uses ``llvm-symbolizer`` if it is on PATH (Debian:
``apt-get install llvm``); GCC's libasan can also symbolise by itself from the
-g debug info. If frames still come back as ``(lib.so+0x...)``, ``addr2line``
(binutils) is tried; failing that the raw report is shown.
"""
from __future__ import annotations

import functools
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from . import compiler as _compiler
from .errors import CpuKernelError, CpuKernelMemoryError

CHILD = Path(__file__).resolve().parent / "_asan_child.py"
ASAN_OPTIONS = "detect_leaks=0:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0:symbolize=1"


@functools.lru_cache(maxsize=None)
def libasan() -> str:
    """Path of the ASan runtime that matches the compiler."""
    try:
        out = subprocess.run([_compiler.compiler(), "-print-file-name=libasan.so"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise CpuKernelError(f"cannot locate libasan.so with {_compiler.compiler()}: {exc}") from exc
    if not os.path.isabs(out) or not os.path.exists(out):
        raise CpuKernelError("libasan.so not found: install the compiler's ASan runtime (Debian: libasan8, part of gcc)")
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
                    raise ValueError(f"argument {i}: ASan mode cannot pass arrays that partly overlap another argument")
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


def launch(build, name, grid, block, shared_mem, stack, reverse, params, items) -> None:
    """Run the launch under ASan in a child; copy written arrays back or raise."""
    arg_specs, buffers, writable, owners = _buffers(params, items)
    job = {"lib": str(build.so_path), "entry": build.entries[name], "args": arg_specs, "buffers": buffers,
           "writable": writable, "config": (grid, block, shared_mem, stack, reverse)}
    env = dict(os.environ, LD_PRELOAD=libasan(), ASAN_OPTIONS=ASAN_OPTIONS)
    symbolizer = shutil.which("llvm-symbolizer")
    if symbolizer:
        env["ASAN_SYMBOLIZER_PATH"] = symbolizer
    timeout = float(os.environ.get("SANDBOX_CPUCUDA_ASAN_TIMEOUT", "600"))
    with tempfile.TemporaryDirectory(prefix="cpucuda-asan-") as tmp:
        inp, out, ptrs = (os.path.join(tmp, n) for n in ("in.pkl", "out.pkl", "ptrs.txt"))
        with open(inp, "wb") as f:
            pickle.dump(job, f, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            proc = subprocess.run([sys.executable, "-S", "-E", str(CHILD), inp, out, ptrs], env=env,
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CpuKernelError(f"kernel {name!r}: the ASan launch did not finish within {timeout:.0f} s "
                                 "(SANDBOX_CPUCUDA_ASAN_TIMEOUT)") from None
        if proc.stdout:  # the kernel's printf
            sys.stdout.write(proc.stdout.decode(errors="replace"))
        stderr = proc.stderr.decode(errors="replace")
        if os.path.exists(out):
            with open(out, "rb") as f:
                result = pickle.load(f)
            addresses = {}
        else:
            result = None
            addresses = _read_ptrs(ptrs)
    if result is None:
        if "ERROR: AddressSanitizer" in stderr:
            cls = CpuKernelError if re.search(r"AddressSanitizer: (FPE|ILL)", stderr) else CpuKernelMemoryError
            raise cls(explain(stderr, name, build, addresses, owners))
        raise CpuKernelError(f"kernel {name!r}: the ASan child process failed (exit {proc.returncode}):\n"
                             + stderr[-4000:])
    if stderr.strip():
        sys.stderr.write(stderr)
    for bid, data in result["buffers"].items():
        _, arr = owners[bid]
        arr.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    if result["rc"]:
        cls = CpuKernelMemoryError if result["rc"] == 2 else CpuKernelError
        raise cls(f"kernel {name!r}: {result['error']}")


def _read_ptrs(path) -> dict[int, tuple[int, int]]:
    table = {}
    if os.path.exists(path):
        for line in open(path):
            bid, addr, n = (int(x) for x in line.split())
            table[bid] = (addr, n)
    return table


_FRAME = re.compile(r"^\s*#(\d+) 0x[0-9a-f]+ in (.+?) (/\S+?):(\d+)(?::\d+)?\s*$", re.M)
_RAW_FRAME = re.compile(r"^\s*#(\d+) 0x[0-9a-f]+ +(?:in (.+?) +)?\((/\S+?)\+(0x[0-9a-f]+)\)", re.M)


def explain(report: str, name: str, build, addresses, owners) -> str:
    """One readable paragraph from an ASan report (the raw report follows it)."""
    head = re.search(r"ERROR: AddressSanitizer: ([\w-]+)", report)
    kind = head.group(1) if head else "error"
    access = re.search(r"(READ|WRITE) of size (\d+) at (0x[0-9a-f]+)", report)
    first_stack = report.split("\n\n")[0]
    where = _kernel_frame(first_stack, build)
    parts = [f"kernel {name!r}: AddressSanitizer: {kind}"]
    if access:
        parts.append(f"{access.group(1).lower()} of {access.group(2)} bytes")
    parts[-1] += f" at {where}" if where else " (no source line: see the report)"
    thread = re.search(r"cpucuda: the faulting CUDA thread is (.+)", report)
    if thread:
        parts[-1] += f", {thread.group(1)}"
    target = _target(report, addresses, owners, build)
    if target:
        parts[-1] += f"; {target}"
    return " ".join(parts) + "\n\n" + _trim(report)


def _kernel_frame(stack: str, build) -> str | None:
    """'file:line in function' of the innermost frame outside the runtime headers."""
    runtime = str(_compiler.INCLUDE_DIR)
    frames = [(fn, f, int(ln)) for _, fn, f, ln in _FRAME.findall(stack)]
    if not frames:
        frames = _addr2line(stack)
    for fn, f, ln in frames:
        if not f.startswith(runtime):
            return f"{f}:{ln} in {fn}"
    return None


def _addr2line(stack: str) -> list[tuple[str, str, int]]:
    tool = shutil.which("addr2line")
    if not tool:
        return []
    frames = []
    for _, _, lib, offset in _RAW_FRAME.findall(stack):
        if not lib.endswith(".so") or "libasan" in lib:
            continue
        out = subprocess.run([tool, "-f", "-C", "-e", lib, offset], capture_output=True, text=True).stdout.split("\n")
        if len(out) >= 2 and ":" in out[1] and not out[1].startswith("??"):
            f, _, ln = out[1].rpartition(":")
            ln = ln.split()[0]
            if ln.isdigit():
                frames.append((out[0], f, int(ln)))
    return frames


def _target(report: str, addresses, owners, build) -> str | None:
    """Which argument (or shared array) the bad address belongs to, if known."""
    m = re.search(r"is located (\d+) bytes (to the left of|to the right of|inside of|after|before) "
                  r"(\d+)-byte region \[(0x[0-9a-f]+),", report)
    if m:
        start = int(m.group(4), 16)
        for bid, (addr, n) in addresses.items():
            if addr == start:
                i, arr = owners[bid]
                return (f"{m.group(1)} bytes {m.group(2)} argument {i} ({arr.dtype}, shape {arr.shape}, "
                        f"{arr.nbytes} bytes)")
        return f"{m.group(1)} bytes {m.group(2)} a {m.group(3)}-byte heap block (dynamic shared memory?)"
    globals_ = re.findall(r"is located (\d+) bytes (to the left of|to the right of|inside of|after|before) "
                          r"global variable '([^']+)'", report)
    for dist, rel, var in globals_:  # ASan lists neighbours on both sides: prefer a __shared__ array
        shared = next((src for gen, src in build.shared_names.items() if var.startswith(gen)), None)
        if shared:
            return f"{dist} bytes {rel} __shared__ {shared}"
    if globals_:
        dist, rel, var = globals_[0]
        return f"{dist} bytes {rel} global variable {var}"
    return None


def _trim(report: str, limit: int = 40) -> str:
    report = report.split("Shadow bytes around")[0]  # the shadow dump helps nobody here
    lines = [ln for ln in report.splitlines() if ln.strip()]
    return "\n".join(lines[:limit])
