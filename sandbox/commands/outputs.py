"""Output files of the commands (--json FILE, --csv FILE, --plot PNG): checked before any work, written whole
or not at all.

    check_output_path(flag, path)          RefusedRequest (exit 2) for a path that cannot work: a folder, a
                                           missing or non-folder parent, a parent this user cannot write
    check_distinct(**{flag: path})         RefusedRequest when two flags name the same file
    write_output(flag, path, text)         text (str) or bytes; a regular file: temporary file + rename (no
                                           half-written file); a device or pipe (/dev/stdout, /dev/full): written directly;
                                           OutputFailed (exit 1, one line naming the path) when the write fails
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import OutputFailed, RefusedRequest


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_output_path(flag: str, path) -> None:
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise RefusedRequest(f"{flag} {path}: is a folder; name a file")
    if target.exists() and not target.is_file():
        return  # a device or a pipe: written directly, its errors reported when they happen
    parent = target.resolve().parent
    if not parent.is_dir():
        raise RefusedRequest(f"{flag} {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise RefusedRequest(f"{flag} {path}: this user cannot write there")


def check_distinct(**paths) -> None:
    """Refuse two flags (keyword = flag name with _ for -) that name one file: the second would overwrite the first."""
    seen: dict = {}
    for flag, path in paths.items():
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise RefusedRequest(f"--{seen[key]} and --{flag.replace('_', '-')} name the same file {path}: "
                                 "give each its own")
        seen[key] = flag.replace("_", "-")


def write_output(flag: str, path, text: str | bytes) -> None:
    target = Path(path)
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        if target.exists() and not target.is_file():
            with open(target, "wb") as f:
                f.write(data)
            return
        fd, tmp = tempfile.mkstemp(dir=target.resolve().parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # what open() would have given the file
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise OutputFailed(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
