"""python -m sandbox list: every registered variant with its family and limits."""
from __future__ import annotations

from .. import registry


def add_arguments(parser) -> None:
    parser.add_argument("--wrong", action="store_true", help="list the negative controls (kernels/wrong) instead")


def _fmt(values) -> str:
    return "any" if values is None else ",".join(map(str, values))


def main(args) -> int:
    names = registry.variants("wrong") if args.wrong else registry.variants()
    rows = [("variant", "block sizes", "head dims", "dtypes", "what")]
    for name in names:
        v = registry.get(name)
        rows.append((name, _fmt(v.limits.block_sizes), _fmt(v.limits.head_dims), _fmt(v.limits.dtypes), v.summary))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4])
    return 0
