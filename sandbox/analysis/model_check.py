"""The model against published measurements: the table, the comparison and its statistics (`python -m sandbox
model-check`, sandbox/commands/model_check.py runs each row).

    read_table(path=DEFAULT_TABLE) -> list[Row]     COLUMNS, each row checked (RefusedRequest naming row and column)
    parse_config("threads=128;loads=1") -> dict     `config` as key=value;key=value (values as ints where they look so)
    error(model_us, measured_us) -> float           model / measured - 1
    median_abs_error(points) -> float

The default table (model_check.csv beside this module) holds stream micro-benchmarks run by others (rows for
`micro.read` with the benchmark's kernel shape: `shape` the total bytes, `block_size` empty) and paged-decode
measurements of other implementations, each mapped to the variant nearest its algorithm (its `source` says so):
their error mixes the model's with the implementations' difference, read it as a direction. Every row names its
source.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import statistics
from pathlib import Path

from ..errors import RefusedRequest
from ..variant import tunables
from . import gpus

DEFAULT_TABLE = Path(__file__).resolve().parent / "model_check.csv"
COLUMNS = ("source", "device", "variant", "shape", "block_size", "config", "measured_us")
POINT_KEYS = COLUMNS + ("model_us", "error")
MICRO_PREFIX = "micro."


@dataclasses.dataclass(frozen=True)
class Row:
    source: str
    device: str
    variant: str
    shape: str
    block_size: int | None
    config: dict
    measured_us: float

    @property
    def micro(self) -> bool:
        return self.variant.startswith(MICRO_PREFIX)

    def as_dict(self) -> dict:
        return dict(source=self.source, device=self.device, variant=self.variant, shape=self.shape,
                    block_size=self.block_size if self.block_size is not None else "",
                    config=";".join(f"{k}={v}" for k, v in self.config.items()), measured_us=self.measured_us)


def parse_config(text: str) -> dict:
    """"threads=128;blocks_per_sm=2" -> {"threads": 128, "blocks_per_sm": 2} (the table's spelling of a config)."""
    return tunables.parse((text or "").replace(";", ","), "config")


def read_table(path=DEFAULT_TABLE) -> list[Row]:
    """The rows of a model-check table; a missing file, a wrong header or a bad cell is refused with its place."""
    path = Path(path)
    if not path.is_file():
        raise RefusedRequest(f"--table {path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RefusedRequest(f"--table {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise RefusedRequest(f"--table {path}: the header must be {','.join(COLUMNS)}, got "
                             f"{','.join(reader.fieldnames or ())}")
    rows = []
    for number, cells in enumerate(reader, start=2):
        if None in cells or None in cells.values():
            raise RefusedRequest(f"--table {path} line {number}: {len(COLUMNS)} cells expected "
                                 f"({','.join(COLUMNS)})")
        rows.append(_row(cells, f"--table {path} line {number}"))
    if not rows:
        raise RefusedRequest(f"--table {path}: no rows")
    return rows


def _row(cells: dict, where: str) -> Row:
    try:
        gpus.get(cells["device"])
        config = parse_config(cells["config"])
        measured = float(cells["measured_us"])
        block = cells["block_size"].strip()
        block_size = int(block) if block else None
    except ValueError as exc:
        raise RefusedRequest(f"{where}: {exc}") from None
    if not measured > 0 or measured != measured or measured == float("inf"):
        raise RefusedRequest(f"{where}: measured_us must be a finite number > 0, got {cells['measured_us']!r}")
    if not cells["source"].strip():
        raise RefusedRequest(f"{where}: source must name where the measurement comes from")
    micro = cells["variant"].startswith(MICRO_PREFIX)
    if micro and block_size is not None:
        raise RefusedRequest(f"{where}: block_size must be empty for a {MICRO_PREFIX}* row (shape is the total bytes)")
    if not micro and block_size is None:
        raise RefusedRequest(f"{where}: block_size is required for a decode row")
    return Row(cells["source"].strip(), cells["device"].strip().lower(), cells["variant"].strip(),
               cells["shape"].strip(), block_size, config, measured)


def error(model_us: float, measured_us: float) -> float:
    return model_us / measured_us - 1


def median_abs_error(points) -> float | None:
    errors = [abs(p["error"]) for p in points if p.get("error") is not None]
    return statistics.median(errors) if errors else None
