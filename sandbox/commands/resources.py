"""python -m sandbox resources: registers, shared/local memory, spills and occupancy of each variant,
compiled for sm_80/sm_90 without a GPU (numba: compile_ptx -> nvJitLink; CUDA C: NVRTC -> cubin)."""
from __future__ import annotations

import json
import sys

from .. import registry, resources
from . import align, select_names
from ..variant import POW2_BLOCK_SIZES


def _split(values):
    return [v for value in values for v in str(value).split(",") if v]


def select(values) -> list[str] | None:
    """--variants as the sweep takes it (comma-separated names, families, globs), over variants, negative
    controls and cache writers; None (everything registered) when not given."""
    if not values:
        return None
    known = registry.variants() + registry.variants("wrong") + registry.cache_writers()
    return select_names(list(values), known,
                        lambda family: registry.variants(family) + (registry.cache_writers(family)
                                                                    if family != "wrong" else []))


def without_report_line(names) -> str:
    """One line naming the selected variants that have no compile_report (nothing to compile), or ""."""
    missing = resources.without_compile_report(names)
    if not missing:
        return ""
    return f"no compile_report (not compiled, no static resources): {', '.join(missing)}"


def add_arguments(parser) -> None:
    parser.add_argument("--variants", nargs="+", metavar="LIST",
                        help="comma-separated variant or cache-writer names, families (numba, cupy, wrong) or globs "
                             "(numba.*), as the sweep takes them; default: every registered one with compile_report")
    parser.add_argument("--block-sizes", nargs="+", metavar="N", default=[",".join(map(str, POW2_BLOCK_SIZES))],
                        help="block sizes, space or comma separated (default: 1..256, powers of two)")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="float16", choices=resources.DTYPES)
    parser.add_argument("--arch", default="sm_90", choices=resources.ARCHS)
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON list instead of a table")


def _fmt_row(row: dict, name: str) -> list[str]:
    if "skipped" in row or "error" in row:
        return [name, str(row["block_size"])] + [""] * 9 + [row.get("skipped") or "ERROR " + row["error"].splitlines()[0]]
    return [name, str(row["block_size"]), str(row["registers"]), str(row["static_shared_bytes"]),
            str(row["dynamic_shared_bytes"]), str(row["local_bytes"]), str(row["spill_stores"]),
            str(row["spill_loads"]), str(row["threads_per_block"]), f"{100 * row['occupancy']:.1f}%",
            row["limiter"], row.get("path", "")]


def table(rows) -> str:
    header = ["variant", "bs", "regs", "static smem", "dyn smem", "local", "spill st", "spill ld", "threads",
              "occupancy", "limiter", "path"]
    lines = [header]
    for row in rows:
        kernels = row.get("kernels", [])
        lines.append(_fmt_row(row, row["variant"] + (f" [{kernels[0]['name']}]" if len(kernels) > 1 else "")))
        for kernel in kernels[1:]:
            lines.append(_fmt_row(dict(kernel, block_size=row["block_size"], path=row.get("path", "")),
                                  f"  + [{kernel['name']}]"))
    return align(lines)


def main(args) -> int:
    block_sizes = [int(b) for b in _split(args.block_sizes)]
    variants = select(args.variants)
    print(f"compiling for {args.arch} ({args.dtype}, head_dim {args.head_dim}, block sizes "
          f"{','.join(map(str, block_sizes))}); numba kernels compile in a real-mode child process ...",
          file=sys.stderr, flush=True)
    rows = resources.collect(variants, block_sizes, args.head_dim, args.dtype, args.arch,
                             progress=lambda what: print(f"  {what}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{args.arch}, {args.dtype}, head_dim {args.head_dim}; shared memory in bytes per block, local in "
              "bytes per thread; occupancy = resident warps / 64 per SM (sandbox.occupancy)")
        print(table(rows))
        notes = {row["variant"]: row["note"] for row in rows if row.get("note")}
        for name, note in notes.items():
            print(f"note {name}: {note}")
    missing = without_report_line(variants)
    if missing:
        print(missing, file=sys.stderr if args.json else sys.stdout)
    return 1 if any("error" in row for row in rows) else 0
