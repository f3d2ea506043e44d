"""Objects compiled for real GPUs (NVRTC cubins with their ptxas logs) cached on disk, like the executor's
g++ objects, so `resources`, `sass`, the sweep's static rows and the tests compile an instantiation once.

    cached(kind, key_parts, build, types=()) -> value   the value stored under sha256(key_parts), else build(), stored

The key holds everything that changes the result (the whole source text, the name expressions, every
option NVRTC receives, the target and NVRTC's version), so an edited kernel is a new entry. An entry is
plain data, never a pickle: JSON of dicts, lists, strings, numbers, tuples, bytes (base64: the cubin) and
the dataclasses named in `types` (by class name, rebuilt field by field; nothing else is ever
constructed). It is written to a temporary name and renamed into place with its digest beside it
(sandbox.cpucuda.cache_entry), so parallel processes never read half a file and a damaged entry is rebuilt
with a one-line warning. A value that is not plain data is returned uncached (one warning per kind).
Folder: ``$SANDBOX_GPU_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/paged-attention-sandbox/<kind>``, else
``~/.cache/paged-attention-sandbox/<kind>``; ``SANDBOX_GPU_COMPILE_CACHE=off`` compiles every time; a
folder others can write is refused (cache_entry.UnsafeCacheFolder).
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Callable, TypeVar

from ..cpucuda import cache_entry

T = TypeVar("T")
VERSION = "gpu-compile-2"  # 2: JSON entries with a digest (1 was pickle)
_UNCACHEABLE_WARNED: set[str] = set()


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


def to_plain(value, types=()):
    """`value` as JSON-able data; TypeError for anything but plain data and the dataclasses in `types`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        return {"__tuple__": [to_plain(v, types) for v in value]}
    if isinstance(value, list):
        return [to_plain(v, types) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("a cached dict needs string keys")
        if any(k.startswith("__") and k.endswith("__") for k in value):
            raise TypeError("a cached dict's keys may not look like the entry's own tags (__name__)")
        return {k: to_plain(v, types) for k, v in value.items()}
    if type(value) in types:
        return {"__dataclass__": type(value).__name__,
                "fields": {f.name: to_plain(getattr(value, f.name), types) for f in dataclasses.fields(value)}}
    raise TypeError(f"{type(value).__name__} is not plain data")


def from_plain(data, types=()):
    """The value to_plain(value, types) described; ValueError for a tag or class it does not know."""
    if isinstance(data, list):
        return [from_plain(v, types) for v in data]
    if not isinstance(data, dict):
        return data
    if "__bytes__" in data:
        return base64.b64decode(data["__bytes__"], validate=True)
    if "__tuple__" in data:
        return tuple(from_plain(v, types) for v in data["__tuple__"])
    if "__dataclass__" in data:
        by_name = {t.__name__: t for t in types}
        if data["__dataclass__"] not in by_name:
            raise ValueError(f"unknown class {data['__dataclass__']!r} in a cache entry")
        return by_name[data["__dataclass__"]](**{k: from_plain(v, types) for k, v in data["fields"].items()})
    return {k: from_plain(v, types) for k, v in data.items()}


def _load(path: Path, types):
    """The entry's value, or None when it is absent or damaged (then rebuilt)."""
    if not cache_entry.verified(path, "GPU compile cache entry"):
        return None
    try:
        return (from_plain(json.loads(path.read_text(encoding="utf-8"))["value"], types),)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # written by another version of the code
        print(f"warning: GPU compile cache entry {path} cannot be read ({type(exc).__name__}); rebuilding it",
              file=sys.stderr, flush=True)
        return None


def cached(kind: str, key_parts, build: Callable[[], T], types=()) -> T:
    folder = cache_dir(kind)
    if folder is None:
        return build()
    folder = cache_entry.checked_folder(folder)
    path = folder / f"{key(key_parts)}.json"
    found = _load(path, tuple(types))
    if found is not None:
        return found[0]
    value = build()
    try:
        text = json.dumps({"version": VERSION, "kind": kind, "value": to_plain(value, tuple(types))})
    except TypeError as exc:
        if kind not in _UNCACHEABLE_WARNED:
            _UNCACHEABLE_WARNED.add(kind)
            print(f"warning: GPU compile cache: {kind} values are not plain data ({exc}); not cached "
                  "(pass their dataclasses as types=)", file=sys.stderr, flush=True)
        return value
    cache_entry.write_atomic(path, text.encode("utf-8"))
    return value
