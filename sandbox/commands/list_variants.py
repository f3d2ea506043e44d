"""python -m sandbox list: every registered variant with its family, limits and tunables (the default first)."""
from __future__ import annotations

from ..variant import registry


def add_arguments(parser) -> None:
    parser.add_argument("--wrong", action="store_true", help="list the negative controls (kernels/wrong) instead")


def tunables_cell(table: dict) -> str:
    """{"threads": ("auto", 32)} -> "threads=auto|32" (the default first; --config NAME=VALUE picks one); "-" for none."""
    return " ".join(f"{name}={'|'.join(map(str, values))}" for name, values in table.items()) or "-"


def _fmt(values) -> str:
    return "any" if values is None else ",".join(map(str, values))


def main(args) -> int:
    names = registry.variants("wrong", problem=None) if args.wrong else registry.variants(problem=None)
    rows = [("variant", "problem", "block sizes", "head dims", "dtypes", "kv (fp8)", "options", "query_len", "tunables",
             "what")]
    for name in names:
        v = registry.get(name)
        lim = v.limits
        kv = getattr(lim, "kv_formats", None) or [d.replace("float8_", "") for d in lim.kv_dtypes]
        rows.append((name, v.problem, _fmt(lim.block_sizes), _fmt(lim.head_dims), _fmt(lim.dtypes), ",".join(kv) or "-",
                     ",".join(lim.options) or "-", _fmt(None if lim.max_query_len is None else (lim.max_query_len,)),
                     tunables_cell(v.tunables), v.summary))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths)) + "  " + row[-1])
    return 0
