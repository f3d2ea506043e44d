"""AddressSanitizer mode: run one launch in a child process under ASan.

The kernel is compiled with ``-fsanitize=address -fno-omit-frame-pointer -g``
(the fiber switches are annotated for ASan in include/cpucuda_sched.h). The
child (``_child.py``, started by child.py) runs with ``LD_PRELOAD=$(g++ -print-file-name=libasan.so)``
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

import re
import shutil
import subprocess

from . import child as _child
from . import compiler as _compiler
from .errors import CpuKernelError, CpuKernelMemoryError

ASAN_OPTIONS = "detect_leaks=0:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0:symbolize=1"


def libasan() -> str:
    """Path of the ASan runtime that matches the compiler."""
    return _child.runtime_library("libasan.so", "libasan8, part of gcc")


def _explain_report(stderr: str, name: str, build, info) -> Exception | None:
    if "ERROR: AddressSanitizer" not in stderr:
        return None
    cls = CpuKernelError if re.search(r"AddressSanitizer: (FPE|ILL)", stderr) else CpuKernelMemoryError
    return cls(explain(stderr, name, build, info.addresses, info.owners))


def _env() -> dict:
    env = {"ASAN_OPTIONS": ASAN_OPTIONS}
    symbolizer = shutil.which("llvm-symbolizer")
    if symbolizer:
        env["ASAN_SYMBOLIZER_PATH"] = symbolizer
    return env


SANITIZER = _child.Sanitizer("AddressSanitizer", libasan, _env, _explain_report)


def launch(build, name, config, params, items, constants=None) -> None:
    """Run the launch under ASan in a child; copy written arrays back or raise."""
    _child.launch(SANITIZER, build, name, config, params, items, constants)


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
                owner, arr = owners[bid]
                return (f"{m.group(1)} bytes {m.group(2)} {owner} ({arr.dtype}, shape {arr.shape}, "
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
