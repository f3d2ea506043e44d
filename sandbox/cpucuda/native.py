"""Small C++ helpers compiled once with g++ and cached beside the CPU executor's objects.

    compiled(source, output="so"|"o") -> Path    the shared object (or object file) built from `source`

Cached under the executor's cache folder (toolchain.cache_dir()) by a hash of the source (with the files it
includes with quotes from its own folder: source_bytes), the flags and the compiler's version; written to a
temporary name and renamed, so parallel processes never see half a file. The traffic and racecheck recorders
and the L2 model (sandbox.analysis.traffic.l2) are built here.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

from . import toolchain
from .errors import CpuCompileError

FLAGS = ("-O2", "-fPIC", "-std=c++17", "-fvisibility=hidden", "-w")


def source_bytes(source: Path) -> bytes:
    """The source's bytes and those of each file it includes with quotes from its own folder."""
    text = Path(source).read_bytes()
    local = [Path(source).parent / name.decode() for name in re.findall(rb'^#include "([^"]+)"', text, re.M)]
    return text + b"".join(p.read_bytes() for p in local if p.is_file())


def compiled(source: Path, output: str = "so") -> Path:
    if output not in ("so", "o"):
        raise ValueError(f"output must be 'so' or 'o', got {output!r}")
    source = Path(source)
    flags = list(FLAGS) + (["-shared"] if output == "so" else ["-c"])
    key = hashlib.sha256(repr((source_bytes(source), flags, toolchain.compiler_version())).encode()).hexdigest()[:24]
    root = toolchain.cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{source.stem}-{key}.{output}"
    if path.exists():
        return path
    fd, tmp = tempfile.mkstemp(dir=root, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        cmd = [toolchain.compiler(), *flags, str(source), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise CpuCompileError(f"g++ could not compile {source.name}:\n{done.stderr[-3000:]}")
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
