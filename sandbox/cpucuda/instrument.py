"""What the two instrumented modes share: g++'s ThreadSanitizer instrumentation feeding a recorder of ours.

Traffic (traffic.py, traffic_recorder.cpp) and racecheck (racecheck.py, race_checker.cpp) compile the
kernel with ``-fsanitize=thread`` but link no libtsan: the recorder, compiled once without
instrumentation, defines ``__tsan_readN`` / ``__tsan_writeN`` / ``__tsan_func_entry`` ... (the shared
part in tsan_entry_points.h) and the scheduler's hooks (include/cpucuda_hooks.h and the mode's own),
and the linker's ``--wrap`` sends the kernel's libc memcpy/memmove/memset through it (the
instrumentation cannot see inside libc). Launches run in this process, as in normal mode.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from . import native, toolchain

WRAPPED = ("memcpy", "memmove", "memset")


def compile_flags(base: list[str], recorder: Path, macro: str) -> list[str]:
    """``base`` plus ``-D<macro>=0x<the recorder's hash>``: a changed recorder (or tsan_entry_points.h, which it
    includes) rebuilds every object that links it."""
    digest = hashlib.sha256(native.source_bytes(recorder)).hexdigest()[:16]
    return list(base) + [f"-D{macro}=0x{digest}"]


def build_steps(command: list[str], output: str, recorder: Path) -> list[list[str]]:
    """The compile command as two steps: the instrumented object, then a link with ``recorder``.

    Linking without -fsanitize keeps libtsan out; -z defs turns an entry point the recorder lacks into
    a link error; --wrap sends the kernel's libc memcpy/memset/memmove calls through the recorder.
    """
    obj = output + ".o"
    compile_step = [a if a != output else obj for a in command if a != "-shared"] + ["-c"]
    recorder_object = native.compiled(recorder, output="o")  # built once and cached
    link = [toolchain.compiler(), "-shared", "-fPIC", obj, str(recorder_object), "-o", output, "-Wl,-z,defs",
            "-Wl," + ",".join(f"--wrap={f}" for f in WRAPPED)]
    return [compile_step, link]
