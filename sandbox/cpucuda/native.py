"""Small C++ helpers compiled once with g++ and cached beside the CPU executor's objects.

    compiled(source, output="so"|"o") -> Path    the shared object (or object file) built from `source`

Cached under the executor's cache folder (toolchain.cache_dir()) by a hash of the source (with the files it
includes with quotes from its own folder: source_bytes), the flags and the compiler's version; written to a
temporary name and renamed, so parallel processes never see half a file, with a digest checked before use (a
damaged entry is rebuilt; cache_entry.py). The traffic and racecheck recorders and the L2 model
(sandbox.analysis.traffic.l2) are built here.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

from . import cache_entry, toolchain
from .errors import CpuCompileError

VERSION = "native-2"  # 2: entries carry a digest (sandbox.cpucuda.cache_entry)
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
    text = repr((VERSION, source_bytes(source), flags, toolchain.compiler_version()))
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    path = cache_entry.checked_folder(toolchain.cache_dir()) / f"{source.stem}-{key}.{output}"
    if cache_entry.verified(path, "compiled helper"):
        return path
    root = path.parent
    fd, tmp = tempfile.mkstemp(dir=root, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        cmd = [toolchain.compiler(), *flags, str(source), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise CpuCompileError(f"g++ could not compile {source.name}:\n{done.stderr[-3000:]}")
        cache_entry.install(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
