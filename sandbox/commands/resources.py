"""python -m sandbox resources: registers, shared/local memory, spills and occupancy of each variant,
compiled for sm_80/sm_90 without a GPU (numba: compile_ptx -> nvJitLink; CUDA C: NVRTC -> cubin), for a
query dtype (--dtype fp32|fp16|bf16) and an fp8 cache (--kv-dtype e4m3|e5m2); --config NAME=VALUE,... reports the
named variants' kernels as those tunables launch them (the `config` column)."""
from __future__ import annotations

import json
import sys

from ..variant import registry
from ..analysis import resources
from . import (add_block_sizes_argument, add_config_argument, add_names_argument, align, block_sizes_given,
               names_given, numbers, select_names)
from ..variant.limits import POW2_BLOCK_SIZES
from ..errors import RefusedRequest


MAX_HEAD_DIM = 1024  # the largest head dim a compile report takes (MLA's 576 and the 512 of the family tests within)


def select(values) -> list[str] | None:
    """Variant names as the sweep takes them (comma-separated names, families, globs), over variants, negative
    controls and cache writers; None (everything registered) when not given."""
    if not values:
        return None
    known = registry.variants(problem=None) + registry.variants("wrong", problem=None) + registry.cache_writers()
    return select_names(list(values), known,
                        lambda family: registry.variants(family, problem=None) + (registry.cache_writers(family)
                                                                                  if family != "wrong" else []))


def without_report_line(names) -> str:
    """One line naming the selected variants that have no compile_report (nothing to compile), or ""."""
    missing = resources.without_compile_report(names)
    if not missing:
        return ""
    return f"no compile_report (not compiled, no static resources): {', '.join(missing)}"


def add_arguments(parser) -> None:
    add_names_argument(parser, "variants or cache writers (default: every registered one with compile_report)")
    add_block_sizes_argument(parser, POW2_BLOCK_SIZES, ": 1..256, powers of two")
    parser.add_argument("--head-dim", type=numbers.integer(1, MAX_HEAD_DIM), default=128,
                        help="decode variants' head dim (MLA variants: 576)")
    add_precision_arguments(parser)
    add_config_argument(parser)
    parser.add_argument("--arch", default=resources.DEFAULT_ARCH, choices=resources.ARCHS)
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON list instead of a table")


def add_precision_arguments(parser) -> None:
    parser.add_argument("--dtype", default="float16", metavar="DTYPE",
                        help="query (and output) dtype: fp32, fp16, bf16 or their long names (default fp16)")
    parser.add_argument("--kv-dtype", metavar="DTYPE",
                        help="fp8 cache: e4m3 or e5m2 (float8_e4m3fn, float8_e5m2); default: the query's dtype")


def precision(args) -> tuple[str, str | None]:
    """(dtype, kv_dtype or None) from --dtype/--kv-dtype, canonical; ValueError (exit 2) naming the flag."""
    try:
        dtype, _ = resources.precision(args.dtype)
    except ValueError as exc:
        raise RefusedRequest(f"--dtype {args.dtype}: {exc}") from None
    try:
        return resources.precision(dtype, args.kv_dtype)
    except ValueError as exc:
        raise RefusedRequest(f"--kv-dtype {args.kv_dtype}: {exc}") from None


def precision_label(dtype: str, kv_dtype: str | None) -> str:
    return dtype + (f", cache {kv_dtype}" if kv_dtype else "")


def not_supported_line(rows) -> str:
    """One line naming the variants that reported no row for this precision (skipped: not supported), or ""."""
    skipped = list(dict.fromkeys(r["variant"] for r in rows if "skipped" in r and "not supported" in r["skipped"]
                                 and "block_size" not in r["skipped"] and "head_dim" not in r["skipped"]))
    if not skipped:
        return ""
    return f"not supported at this precision (no row): {', '.join(skipped)}"


def _fmt_row(row: dict, name: str) -> list[str]:
    if "skipped" in row or "error" in row:
        return [name, str(row["block_size"])] + [""] * 9 + [row.get("skipped") or "ERROR " + row["error"].splitlines()[0]]
    return [name, str(row["block_size"]), str(row["registers"]), str(row["static_shared_bytes"]),
            str(row["dynamic_shared_bytes"]), str(row["local_bytes"]), str(row["spill_stores"]),
            str(row["spill_loads"]), str(row["threads_per_block"]), f"{100 * row['occupancy']:.1f}%",
            row["limiter"], row.get("path", "")]


def table(rows, show_config: bool = False) -> str:
    """The rows as text; show_config: each variant's name followed by its configuration (threads=64)."""
    header = ["variant", "bs", "regs", "static smem", "dyn smem", "local", "spill st", "spill ld", "threads",
              "occupancy", "limiter", "path"]
    lines = [header]
    for row in rows:
        kernels = row.get("kernels", [])
        name = row["variant"] + (f" ({row['config']})" if show_config and row.get("config") else "")
        lines.append(_fmt_row(row, name + (f" [{kernels[0]['name']}]" if len(kernels) > 1 else "")))
        for kernel in kernels[1:]:
            lines.append(_fmt_row(dict(kernel, block_size=row["block_size"], path=row.get("path", "")),
                                  f"  + [{kernel['name']}]"))
    return align(lines)


def main(args) -> int:
    block_sizes = block_sizes_given(args)
    dtype, kv_dtype = precision(args)
    variants = select(names_given(args))
    if args.config and variants is None:
        raise RefusedRequest("--config: name the variants it is for (tunables differ per variant; "
                             "python -m sandbox list shows them)")
    label = precision_label(dtype, kv_dtype)
    print(f"compiling for {args.arch} ({label}, head_dim {args.head_dim}, block sizes "
          f"{','.join(map(str, block_sizes))}); numba kernels compile in a real-mode child process ...",
          file=sys.stderr, flush=True)
    rows = resources.collect(variants, block_sizes, args.head_dim, dtype, args.arch,
                             progress=lambda what: print(f"  {what}", file=sys.stderr, flush=True), kv_dtype=kv_dtype,
                             config=args.config or None)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{args.arch}, {label}, head_dim {args.head_dim}; shared memory in bytes per block, local in "
              "bytes per thread; occupancy = resident warps / 64 per SM (sandbox.analysis.occupancy)")
        print(table(rows, show_config=bool(args.config)))
        notes = {row["variant"]: row["note"] for row in rows if row.get("note")}
        for name, note in notes.items():
            print(f"note {name}: {note}")
    for line in (not_supported_line(rows), without_report_line(variants)):
        if line:
            print(line, file=sys.stderr if args.json else sys.stdout)
    return 1 if any("error" in row for row in rows) else 0
