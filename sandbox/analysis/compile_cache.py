"""Objects compiled for real GPUs (NVRTC cubins with their ptxas logs) cached on disk, like the executor's
g++ objects, so `resources`, `sass`, the sweep's static rows and the tests compile an instantiation once.

    cached(kind, key_parts, build) -> value   the value stored under sha256(key_parts), else build(), stored

The key holds everything that changes the result (the whole source text, the name expressions, every
option NVRTC receives, the target and NVRTC's version), so an edited kernel is a new entry; entries are
written to a temporary name and renamed into place, so parallel processes never read half a file, and
one that cannot be read is rebuilt. Folder: ``$SANDBOX_GPU_COMPILE_CACHE``, else
``$XDG_CACHE_HOME/paged-attention-sandbox/<kind>``, else ``~/.cache/paged-attention-sandbox/<kind>``;
``SANDBOX_GPU_COMPILE_CACHE=off`` compiles every time.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")
VERSION = "gpu-compile-1"


def cache_dir(kind: str) -> Path | None:
    """Where `kind`'s entries live; None when caching is off."""
    env = os.environ.get("SANDBOX_GPU_COMPILE_CACHE")
    if env == "off":
        return None
    if env:
        return Path(env) / kind
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "paged-attention-sandbox" / kind


def key(parts) -> str:
    """sha256 of the JSON of `parts` (strings, numbers, lists: whatever decides the result)."""
    return hashlib.sha256(json.dumps([VERSION, parts], sort_keys=True).encode()).hexdigest()[:32]


def cached(kind: str, key_parts, build: Callable[[], T]) -> T:
    folder = cache_dir(kind)
    if folder is None:
        return build()
    path = folder / f"{key(key_parts)}.pickle"
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        pass  # absent, or written by another version of the code: rebuilt below
    value = build()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return value
