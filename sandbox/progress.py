"""One progress bar for every long command (check, the sweep's static phase): tqdm on stderr.

    bar(total, desc, enabled=True, unit="problem") -> tqdm     update() per step; write() prints above it

Disabled (enabled=False, --no-progress) it prints nothing, and write() still prints the line.
"""
from __future__ import annotations

import sys


def bar(total: int, desc: str, enabled: bool = True, unit: str = "problem"):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not enabled, dynamic_ncols=True,
                leave=False)
