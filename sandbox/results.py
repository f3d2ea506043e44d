"""Run folders under results/: one new folder per run, rows appended as they finish."""
from __future__ import annotations

import csv
import datetime as _dt
import os
from pathlib import Path

RESULTS_ROOT = Path(os.environ.get("SANDBOX_RESULTS", Path(__file__).resolve().parent.parent / "results"))


def new_run_dir(kind: str, root: Path | None = None) -> Path:
    """Create and return a fresh ``results/<UTC time>-<kind>/`` folder (never reused)."""
    root = Path(root) if root is not None else RESULTS_ROOT
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1000):
        suffix = "" if attempt == 0 else f"-{attempt}"
        path = root / f"{stamp}-{kind}{suffix}"
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a new run folder under {root}")


class CsvAppender:
    """Writes a CSV row by row and flushes each, so an interrupted run keeps what it measured."""

    def __init__(self, path: Path, fieldnames: list[str]):
        self.path = Path(path)
        self.fieldnames = list(fieldnames)
        self._file = open(self.path, "w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=self.fieldnames, extrasaction="ignore")
        self._writer.writeheader()
        self._file.flush()

    def write(self, row: dict) -> None:
        self._writer.writerow(row)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
