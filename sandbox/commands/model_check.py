"""python -m sandbox model-check [--table CSV] [--json FILE]: the performance model against published measurements.

Models every row of the table (default: sandbox/analysis/model_check.csv, each row with its source), prints the
model, the measurement and the error (model / measured - 1) per row, then the median |error| over the micro rows
(the memory system alone: the model's own error) and over every row. Writes results/<time>-model-check/points.csv
row by row; --json FILE writes {"points": [...], "median_abs_error": x} (over every row). Exit 0; 2 for a refused
request (a bad table, an unwritable --json: nothing runs, nothing is written); 1 when a row fails to model.
"""
from __future__ import annotations

import json
import time

from ..analysis import model_check as MC
from ..analysis.traffic import variant as V
from ..errors import RefusedRequest
from ..problem.micro import MicroReadProblem
from ..results import CsvAppender, new_run_dir
from ..sweep import shapes as shapes_mod
from . import align, outputs
from .traffic import problem_for


def add_arguments(parser) -> None:
    parser.add_argument("--table", default=str(MC.DEFAULT_TABLE), metavar="CSV",
                        help=f"published measurements, columns {','.join(MC.COLUMNS)} (default: the project's table)")
    parser.add_argument("--json", metavar="FILE", help="write the points and the median |error| as JSON")


def model_us(row: MC.Row) -> float:
    """The modelled time of one row: micro rows through micro.read's count, decode rows at their shape."""
    if row.micro:
        problem = MicroReadProblem(int(row.shape))
        return V.traffic(row.variant, problem, row.device, config=row.config)["model"]["time_us"]
    problem = problem_for(shapes_mod.parse_any(row.shape), row.block_size, seed=0)
    return V.traffic(row.variant, problem, row.device, config=row.config or None)["model"]["time_us"]


def main(args) -> int:
    rows = MC.read_table(args.table)
    for row in rows:  # a micro row's shape is a byte count: refuse a bad one before anything runs
        if row.micro:
            try:
                MicroReadProblem(int(row.shape)).validate()
            except ValueError as exc:
                raise RefusedRequest(f"--table {args.table}: {row.variant} shape {row.shape!r}: {exc}") from None
    outputs.check_output_path("--json", args.json)
    run_dir = new_run_dir("model-check")
    points, failed = [], 0
    with CsvAppender(run_dir / "points.csv", list(MC.POINT_KEYS)) as out:
        for row in rows:
            start = time.perf_counter()
            point = row.as_dict()
            try:
                point["model_us"] = round(model_us(row), 3)
                point["error"] = round(MC.error(point["model_us"], row.measured_us), 4)
            except Exception as exc:  # one row failing must not hide the others
                print(f"{row.variant} {row.device} {row.shape}: FAILED: {type(exc).__name__}: {exc}")
                point["model_us"] = point["error"] = None
                failed += 1
            out.write(point)
            points.append(point)
            print(f"  {row.variant} on {row.device}, {row.shape} [{point['config']}]: model {point['model_us']} us, "
                  f"measured {row.measured_us} us ({time.perf_counter() - start:.1f} s)", flush=True)
    lines = [["variant", "device", "shape", "bs", "config", "measured us", "model us", "error", "source"]]
    for p in points:
        err = "-" if p["error"] is None else f"{p['error']:+.1%}"
        lines.append([p["variant"], p["device"], str(p["shape"]), str(p["block_size"]), p["config"] or "-",
                      f"{p['measured_us']:.1f}", "-" if p["model_us"] is None else f"{p['model_us']:.1f}", err,
                      p["source"]])
    print(align(lines))
    micro = MC.median_abs_error([p for p in points if p["variant"].startswith(MC.MICRO_PREFIX)])
    every = MC.median_abs_error(points)
    fmt = lambda x: "-" if x is None else f"{x:.1%}"  # noqa: E731
    print(f"median |error|: micro rows {fmt(micro)}, every row {fmt(every)} (error = model / measured - 1)")
    print(f"wrote {run_dir / 'points.csv'}")
    if args.json:
        outputs.write_output("--json", args.json,
                             json.dumps(dict(points=points, median_abs_error=every), indent=1) + "\n")
        print(f"wrote {args.json}")
    return 1 if failed else 0
