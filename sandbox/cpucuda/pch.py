"""A precompiled runtime header (``cpucuda_runtime.h.gch``) per compiler, flag set and header contents.

Parsing the runtime headers (and the libstdc++ headers they pull in) is a fixed cost of every
g++ run; GCC can load them from a precompiled header instead. A ``.gch`` is valid only for the
flags it was built with (optimisation level, sanitizer, -fPIC, ... and the macros its headers
test), so there is one per mode and flag set, in its own folder of the cache:

    <cache>/pch/<key>/cpucuda_runtime.h.gch

where the key hashes the compiler's version, the runtime folder (its path: debug info and
``__builtin_FILE()`` name it) and every header in it, and the flags. The user's ``-D``/``-U``
options enter the key only when the runtime headers mention the macro (``-DTILE=16`` shares the
plain header; ``-DNDEBUG`` gets its own). g++ is given ``-I <that folder>`` ahead of the runtime
folder: it finds the ``.gch`` where it would have found the header, checks that the build's
flags still match, and falls back to the header text if not, so a stale or mismatched ``.gch``
costs time, never correctness.

Built once, under an exclusive lock (parallel pytest-xdist workers wait for the first) into a
temporary file renamed into place, its digest beside it; a damaged ``.gch`` is rebuilt (cache_entry.py).
``SANDBOX_CPUCUDA_PCH=0`` turns it off.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from . import cache_entry
from .toolchain import SOURCE_ROOT

PCH_VERSION = "cpucuda-pch-2"  # 2: the .gch carries a digest (cache_entry.py)
HEADER = "cpucuda_runtime.h"
_LINK_ONLY = ("-shared", "-Wl,")


def enabled() -> bool:
    """``SANDBOX_CPUCUDA_PCH`` unset or 1: use precompiled headers; 0: compile the headers' text every time."""
    value = os.environ.get("SANDBOX_CPUCUDA_PCH", "1").lower()
    if value not in ("0", "1", "false", "true", "no", "yes", "off", "on", ""):
        raise ValueError(f"SANDBOX_CPUCUDA_PCH={value!r}: use 1 (precompiled runtime header) or 0 (none)")
    return value not in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=None)
def _runtime_words(include_dir: str, fingerprint: str) -> frozenset:
    """Every identifier the runtime headers mention (``fingerprint`` keys the cache on their contents)."""
    words: set[str] = set()
    for path in Path(include_dir).rglob("*"):
        if path.is_file():
            words.update(re.findall(r"[A-Za-z_]\w*", path.read_text(errors="replace")))
    return frozenset(words)


def _macro(flag: str) -> str | None:
    m = re.match(r"-[DU]([A-Za-z_]\w*)", flag)
    return m.group(1) if m else None


def relevant_flags(flags: list[str], user_defines: list[str], include_dir: Path, fingerprint: str) -> list[str]:
    """The compile flags a ``.gch`` must be built with: ``flags`` without link-only options, plus the
    user's -D/-U of macros the runtime headers mention (the others cannot change the header)."""
    words = _runtime_words(str(include_dir), fingerprint)
    compile_flags = [f for f in flags if not f.startswith(_LINK_ONLY)]
    return compile_flags + [f for f in user_defines if _macro(f) in words]


def include_flags(cxx: str, version: str, flags: list[str], user_defines: list[str], include_dir: Path,
                  fingerprint: str, cache: Path) -> list[str]:
    """``["-I", folder]`` with a ``.gch`` for this flag set (built now if missing), or [] when off or failing."""
    if not enabled():
        return []
    pch_flags = relevant_flags(flags, user_defines, include_dir, fingerprint)
    key = hashlib.sha256(json.dumps([PCH_VERSION, cxx, version, str(include_dir), fingerprint, pch_flags])
                         .encode()).hexdigest()[:32]
    folder = cache / "pch" / key
    gch = folder / f"{HEADER}.gch"
    if not cache_entry.verified(gch, "precompiled header") and not _build(cxx, pch_flags, include_dir, folder, gch):
        return []
    return ["-I", str(folder)]


def _build(cxx: str, pch_flags: list[str], include_dir: Path, folder: Path, gch: Path) -> bool:
    """Compile the runtime header to ``gch`` under an exclusive lock; False (no PCH) if g++ fails."""
    cache_entry.checked_folder(folder)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building this one: wait for it
        if cache_entry.verified(gch, "precompiled header", warn=False):  # another process built it meanwhile
            return True
        if (folder / "failed").exists():
            return False
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=gch.name + ".", suffix=".tmp")
        os.close(fd)
        cmd = [cxx, *pch_flags, "-I", str(include_dir), "-x", "c++-header", str(include_dir / HEADER), "-o", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=SOURCE_ROOT)  # as the kernels compile
            if proc.returncode != 0:
                # The kernel's own compile (without a PCH) reports whatever is wrong; do not retry each time.
                (folder / "failed").write_text(proc.stderr[-4000:])
                return False
            cache_entry.install(tmp, gch)
            return True
        finally:
            Path(tmp).unlink(missing_ok=True)
