"""Cache entries that heal and run nothing foreign: every on-disk cache of the sandbox uses these helpers.

    checked_folder(path) -> path        created if missing (0755); refused if others can write it
    install(tmp, path)                  a finished temporary file renamed into place, its digest beside it
    write_atomic(path, data)            install() of bytes
    verified(path, what) -> bool        the entry exists and matches its digest (else rebuild it)

An entry ``X`` has its content's sha256 in ``X.sha256``. The digest is written (atomically) before the entry
is renamed into place, and a reader checks it before it dlopens, loads or hands the file to g++: a
truncated, empty or garbage entry (a crash mid-copy, a full disk, a hand edit) is reported in one line on
stderr and rebuilt, never loaded. Two processes building the same entry at once may pair one's digest with
the other's file: the next reader rebuilds it (a one-line warning), nothing worse.

A folder someone else owns or can write (group- or world-writable) could hand us a shared object to dlopen
or a header to compile: it is refused with UnsafeCacheFolder (a RefusedRequest: exit 2 from the CLI), whose
message names the folder and the fix.
"""
from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path

from ..errors import RefusedRequest

DIGEST_SUFFIX = ".sha256"
# (path, inode, size, mtime_ns, and the digest's inode, mtime_ns) verified by this process: not hashed again.
_VERIFIED: set[tuple] = set()


class UnsafeCacheFolder(RefusedRequest):
    """A cache folder that another user owns or that others can write: its entries cannot be trusted."""


def checked_folder(path: Path) -> Path:
    """`path` as a cache folder: created if missing (mode 0755), refused if another user owns it or it is
    group- or world-writable."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
    info = path.stat()
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise UnsafeCacheFolder(f"cache folder {path} belongs to uid {info.st_uid}, not to this user "
                                f"(uid {os.getuid()}): its entries could run someone else's code; "
                                "point the cache variable at a folder of your own")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeCacheFolder(f"cache folder {path} is writable by others (mode {stat.S_IMODE(info.st_mode):o}): "
                                f"its entries could run someone else's code; chmod go-w {path}, or point the "
                                "cache variable at a folder of your own")
    return path


def digest_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + DIGEST_SUFFIX)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def replace_file(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in its folder and a rename (no digest): readers see all
    or nothing."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def install(tmp, path: Path) -> None:
    """Rename the finished temporary file `tmp` (in `path`'s folder) to `path`, its digest written first."""
    path = Path(path)
    replace_file(digest_path(path), (_sha256(Path(tmp)) + "\n").encode())
    os.replace(tmp, path)


def write_atomic(path: Path, data: bytes) -> None:
    """`data` to `path` through a temporary file and a rename, with its digest beside it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        install(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def verified(path: Path, what: str = "cache entry", warn: bool = True) -> bool:
    """True when `path` exists and matches the digest beside it. Absent: False, silently (build it). Present but
    damaged (empty, truncated, garbage, no digest): False with one line on stderr (rebuild it; the new entry
    replaces it). warn=False: no line (a second look, under a lock, at an entry already reported)."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        return False
    try:
        digest_info = digest_path(path).stat()
        seen = (str(path), info.st_ino, info.st_size, info.st_mtime_ns, digest_info.st_ino, digest_info.st_mtime_ns)
    except FileNotFoundError:
        seen = None
    if seen in _VERIFIED:
        return True
    try:
        expected = digest_path(path).read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        expected = None
    try:
        actual = _sha256(path) if info.st_size else None
    except OSError as exc:
        actual, expected = None, f"unreadable: {exc}"
    if expected is not None and actual == expected:
        _VERIFIED.add(seen)
        return True
    if not warn:
        return False
    why = ("empty" if not info.st_size else "no digest beside it" if expected is None
           else "its content does not match its digest (truncated or altered)")
    print(f"warning: {what} {path} is damaged ({why}); rebuilding it", file=sys.stderr, flush=True)
    return False
