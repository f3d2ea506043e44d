"""One progress bar for the long commands (check, the sweep's static phase): tqdm on stderr.

    bar(total, desc, enabled=True, unit="problem") -> tqdm     update() per step; write() prints above it

Shown when enabled and stderr is a terminal (a log or a pipe gets no carriage-return redraws); otherwise it
prints nothing, and write() still prints the line.
"""
from __future__ import annotations

import sys


def bar(total: int, desc: str, enabled: bool = True, unit: str = "problem"):
    from tqdm import tqdm

    shown = enabled and bool(getattr(sys.stderr, "isatty", lambda: False)())
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not shown, dynamic_ncols=True,
                leave=False)
