"""Checks the study commands (`memory`, `serving`) make before they write anything: where the run folder goes,
and whether the request fits in memory at all."""
from __future__ import annotations

import os
from pathlib import Path

from sandbox.errors import RefusedRequest

# Python objects the simulators keep per token id of a request (a small int and its list slot).
BYTES_PER_TOKEN_ID = 36
MEMORY_LIMIT_BYTES = 4e9


def check_results_dir(path) -> None:
    """--results-dir: a folder that exists and is writable, or a path whose nearest existing parent is one."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise RefusedRequest(f"--results-dir {str(p)!r} is not a folder")
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise RefusedRequest(f"--results-dir {str(p)!r}: {str(existing)!r} is not a writable folder")


def check_token_memory(requests: int, max_len: int, copies: int, flags: str) -> None:
    """Refuse a request whose token ids alone (requests x max_len x copies, the worst case) pass the limit."""
    need = requests * max_len * copies * BYTES_PER_TOKEN_ID
    if need > MEMORY_LIMIT_BYTES:
        raise RefusedRequest(f"{flags}: {requests:,} requests of up to {max_len:,} tokens x {copies} may hold "
                             f"{need / 1e9:.1f} GB of token ids; the limit is {MEMORY_LIMIT_BYTES / 1e9:g} GB "
                             "(fewer requests, seeds or a shorter --max-len)")
