"""python -m sandbox compare RUN_A RUN_B: B time / A time per matching point, and B / A modelled time (the
traffic columns); regressions flagged. CPU emulation times are noise: listed, never a regression, unless
--cpu-times.

Exit status 1 when any point regressed beyond --threshold (a GPU time, a modelled time, or with --cpu-times
a CPU emulation time) or turned wrong, or when the runs share no point; 2 when a run cannot be read (no
sweep.csv, no point, a truncated or unparsable row, an ok row without a time; the message names the file
and line); else 0. A run that was interrupted is warned about.
"""
from __future__ import annotations

from pathlib import Path

from ..sweep.report import diff
from . import numbers
from ..errors import RefusedRequest


def add_arguments(parser) -> None:
    parser.add_argument("run_a", type=Path, metavar="RUN_A", help="the baseline: a sweep run folder or its sweep.csv")
    parser.add_argument("run_b", type=Path, metavar="RUN_B", help="the new run: a sweep run folder or its sweep.csv")
    parser.add_argument("--threshold", type=numbers.real(0, 100), default=0.10,
                        help="relative slow-down that counts as a regression (default 0.10 = 10%%)")
    parser.add_argument("--cpu-times", action="store_true",
                        help="count CPU emulation times as regressions too (by default they are noise: only "
                             "correctness, modelled times and GPU times decide)")


def main(args) -> int:
    report = diff.compare_runs(args.run_a, args.run_b, args.threshold, args.cpu_times)
    print(report.render())
    return report.exit_code
