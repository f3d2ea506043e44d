"""The executor's toolchain: which g++, its version, where objects are cached, where g++ runs.

    compiler() -> str             SANDBOX_CPUCUDA_CXX, else "g++"
    compiler_version() -> str     the first line of `g++ --version` (part of every cache key)
    cache_dir() -> Path           $SANDBOX_CPUCUDA_CACHE, else $XDG_CACHE_HOME or ~/.cache, /paged-attention-sandbox/cpucuda
    SOURCE_ROOT, INCLUDE_DIR      the repository root (g++'s working folder), the runtime headers

Everything that builds native code for the executor (compiler.py, pch.py, native.py) reads these here, so
no module of the executor reaches into another's private helpers.
"""
from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from .errors import CpuCompileError

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # g++ runs here, so #line and addr2line name repo paths


def cache_dir() -> Path:
    """Where compiled objects live (outside the repository)."""
    env = os.environ.get("SANDBOX_CPUCUDA_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "paged-attention-sandbox" / "cpucuda"


def compiler() -> str:
    return os.environ.get("SANDBOX_CPUCUDA_CXX", "g++")


@functools.lru_cache(maxsize=None)
def compiler_version() -> str:
    try:
        out = subprocess.run([compiler(), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise CpuCompileError(f"cannot run {compiler()!r} (g++ is needed to run CUDA C on the CPU): {exc}") from exc
    return out.splitlines()[0] if out else "unknown"
