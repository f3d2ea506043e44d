"""Racecheck mode: ThreadSanitizer with one TSan fiber per CUDA thread, in a child process.

The kernel is compiled with ``-fsanitize=thread -g -O1``. The runtime is not
instrumented, and the happens-before order TSan sees is exactly CUDA's
within a block (include/cpucuda_sched.h): ``__syncthreads`` orders every
thread of the block, warp operations order the lanes taking part (in strict
mode only ``__syncwarp`` does), atomics are atomics, and a block starts after
everything the previous block did. So TSan reports two accesses to one
address, at least one a write, by two threads of one block between the same
two barriers: a race on a GPU, whatever order the CPU happened to run them in.

Launches run in a persistent child, ``python -B -S -E _child.py`` (child.py), with
``LD_PRELOAD=$(g++ -print-file-name=libtsan.so)`` and
``TSAN_OPTIONS=atexit_sleep_ms=0 report_thread_leaks=0 halt_on_error=0 exitcode=66``;
the first report becomes a :class:`CpuKernelRaceError` naming the kernel,
the kind of race, the array (argument index, dtype and shape, or the
``__shared__`` variable), the block, both threads and both source lines.
Needs the compiler's TSan runtime (Debian: libtsan2).
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

from . import child as _child
from . import compiler as _compiler
from .errors import CpuKernelRaceError

EXITCODE = 66
_OPTIONS = f"atexit_sleep_ms=0 report_thread_leaks=0 halt_on_error=0 exitcode={EXITCODE} history_size=4"


def libtsan() -> str:
    return _child.runtime_library("libtsan.so", "libtsan2")


def _env() -> dict:
    options = _OPTIONS
    symbolizer = shutil.which("llvm-symbolizer")
    if symbolizer:
        options += f" external_symbolizer_path={symbolizer}"
    return {"TSAN_OPTIONS": options}


@dataclass
class Access:
    kind: str        # "read" or "write"
    atomic: bool
    size: int
    address: int
    thread: str      # "thread (x,y,z) of block (x,y,z)", or TSan's name when unknown
    where: str       # "file:line in function" of the innermost kernel frame


_REPORT = re.compile(r"WARNING: ThreadSanitizer: data race.*?(?=\n={10,}|\Z)", re.S)
_ACCESS = re.compile(r"^  (Previous )?(atomic |Atomic )?(read|Read|write|Write) of size (\d+) at (0x[0-9a-f]+) "
                     r"by (main thread|thread (T\d+))[^\n]*:\n((?:[ \t]+#\d+[^\n]*\n?)*)", re.M)
_FRAME = re.compile(r"^\s*#\d+ (.*?) (\S+?):(\d+)(?::\d+)? \(", re.M)
_THREAD = re.compile(r"^  Thread (T\d+) '([^']*)'", re.M)
_GLOBAL = re.compile(r"Location is global '([^']+)' of size (\d+) at (0x[0-9a-f]+)")
_HEAP = re.compile(r"Location is heap block of size (\d+) at (0x[0-9a-f]+)")
_BLOCK = re.compile(r" of block (\(\d+,\d+,\d+\))$")


def _explain_report(stderr: str, name: str, build, info) -> CpuKernelRaceError | None:
    # A plain access racing with an atomic one is not reported: CUDA's compare-and-swap idiom seeds its
    # loop with a plain read (`old = *address; do { ... atomicCAS ... }`), and polling a flag that
    # atomics write is common; both are harmless on a GPU.
    reports = [r for r in _REPORT.findall(stderr) if not re.search(r"^  (?:Previous )?[Aa]tomic ", r, re.M)]
    if not reports:
        return None
    message = explain(reports[0], name, build, info)
    if len(reports) > 1:
        message += f"\n({len(reports) - 1} more race report(s) in this launch)"
    return CpuKernelRaceError(message + "\n\n" + _trim(reports[0], build))


# The kernel works on the arena itself: bounds are ASan's business, and a copy would cost TSan a
# shadow update per byte. The arena is reused between launches, which is sound because every
# launch is ordered after the previous one (each block starts after the scheduler, which acquired
# everything the previous block did; a failed launch retires the child).
SANITIZER = _child.Sanitizer("ThreadSanitizer", libtsan, _env, _explain_report,
                             timeout_env="SANDBOX_CPUCUDA_RACECHECK_TIMEOUT", copy_buffers=False)


def launch(build, name, config, params, items, constants=None) -> None:
    """Run the launch under TSan in a child; copy written arrays back, raise on a race."""
    _child.launch(SANITIZER, build, name, config, params, items, constants)


def display_path(path: str, build) -> str:
    """The user's file as a message should name it: the cached copy of a `code` string is "<code>"."""
    if path == str(build.source_path):
        return _compiler.CODE_LABEL
    return path[2:] if path.startswith("./") else path


def _kernel_frame(stack: str, build) -> str:
    """'file:line in function' of the innermost frame outside the runtime headers (cub/cg included)."""
    runtime = str(_compiler.INCLUDE_DIR)
    frames = _FRAME.findall(stack)
    for fn, f, ln in frames:
        if not f.startswith(runtime):
            return f"{display_path(f, build)}:{ln} in {_short(fn)}"
    if frames:
        fn, f, ln = frames[0]
        return f"{display_path(f, build)}:{ln} in {_short(fn)}"
    return "an unknown line (no stack: see the report)"


def _short(function: str) -> str:
    """`void pa::attend<16, ...>(...)` -> `pa::attend<16, ...>`."""
    depth, out = 0, []
    for ch in function:
        if ch == "(" and depth == 0 and out:
            break
        depth += ch == "<"
        depth -= ch == ">"
        out.append(ch)
    text = "".join(out).strip()
    return text.split(" ")[-1] if " " in text and "<" not in text.split(" ")[0] else text


def _accesses(report: str, build) -> list[Access]:
    names = dict(_THREAD.findall(report))
    out = []
    for m in _ACCESS.finditer(report):
        tid = m.group(7)
        thread = names.get(tid, f"TSan thread {tid}") if tid else "the scheduler (main thread)"
        out.append(Access(m.group(3).lower(), bool(m.group(2)), int(m.group(4)), int(m.group(5), 16), thread,
                          _kernel_frame(m.group(8), build)))
    return out


def explain(report: str, name: str, build, info) -> str:
    """One readable sentence from a TSan data-race report (the report follows it in the error)."""
    acc = _accesses(report, build)
    if len(acc) < 2:
        return f"kernel {name!r}: data race (ThreadSanitizer; see the report)"
    now, before = acc[0], acc[1]
    kind = f"{now.kind}-after-{before.kind}"
    block_match = _BLOCK.search(now.thread)
    block = f" in block {block_match.group(1)}" if block_match else ""
    t_now, t_before = (_BLOCK.sub("", a.thread) for a in (now, before))
    target = _target(report, now.address, build, info)
    verb = {"read": "read", "write": "wrote"}
    return (f"kernel {name!r}: data race ({kind}) on {target}{block}: {t_now} {verb[now.kind]} {now.size} bytes at "
            f"{now.where}; {t_before} {verb[before.kind]} {before.size} bytes at {before.where}, with no barrier "
            f"between them (__syncthreads, a tile's sync, or __syncwarp within a warp)")


def _target(report: str, address: int, build, info) -> str:
    """The array the racy address lies in: an argument, a __shared__ variable or dynamic shared memory."""
    found = info.argument_at(address)
    if found is not None:
        bid, start = found
        i, arr = info.owners[bid]
        index = (address - start) // max(arr.itemsize, 1)
        return f"argument {i} ({arr.dtype}, shape {arr.shape}, element {index} of the flattened array)"
    m = _GLOBAL.search(report)
    if m:
        var, start = m.group(1), int(m.group(3), 16)
        base = var.split("::")[-1]  # function-scope storage is named "kernel::__cpucuda_shared_..."
        shared = next((src for gen, src in build.shared_names.items() if base.startswith(gen) or base == src), None)
        if shared:
            return f"__shared__ {shared} (byte offset {address - start})"
        return f"global variable {var} (byte offset {address - start})"
    m = _HEAP.search(report)
    if m:
        start = int(m.group(2), 16)
        if info.dynamic_shared and info.dynamic_shared[0] == start:
            names = ", ".join(dict.fromkeys(build.dynamic_names)) or "extern __shared__"
            return f"dynamic shared memory ({names}; byte offset {address - start})"
        return f"a {m.group(1)}-byte heap block (byte offset {address - start})"
    return f"address {address:#x}"


_RUNTIME_FRAME = re.compile(r"cpucuda_(?:sched|launch|fiber)\.h:|\(libffi|<null> <null>|libtsan\.so")


def _trim(report: str, build, limit: int = 40) -> str:
    """The report without the executor's own frames and the fibers' creation stacks."""
    text = report.split("\n  Thread T")[0].replace(str(build.source_path), _compiler.CODE_LABEL)
    lines = [ln for ln in text.splitlines() if ln.strip() and not _RUNTIME_FRAME.search(ln)]
    return "\n".join(lines[:limit])
