"""python -m sandbox sass: each variant's machine code (SASS) for sm_80/sm_90, compiled and disassembled
without a GPU, as a census (global loads by width, local memory, barriers, shuffles, ...) or in full;
--dtype fp32|fp16|bf16 and --kv-dtype e4m3|e5m2 pick the instantiation."""
from __future__ import annotations

import json
import sys

from ..analysis import resources, sass
from . import add_block_sizes_argument, add_names_argument, align, block_sizes_given, names_given, numbers
from .resources import (MAX_HEAD_DIM, add_precision_arguments, not_supported_line, precision, precision_label, select,
                        without_report_line)

HEADER = ("variant", "bs", "instrs", "global loads (width:count)", "16B loads", "global stores", "local", "generic",
          "shared ld/st", "bar", "shfl", "call", "fp64")


def add_arguments(parser) -> None:
    add_names_argument(parser, "variants or cache writers (default: every registered one with compile_report)")
    add_block_sizes_argument(parser, (16,))
    parser.add_argument("--head-dim", type=numbers.integer(1, MAX_HEAD_DIM), default=128)
    add_precision_arguments(parser)
    parser.add_argument("--arch", default=resources.DEFAULT_ARCH, choices=resources.ARCHS)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the census rows as a JSON list")
    output.add_argument("--dump", action="store_true", help="print each kernel's whole SASS listing instead")


def _cells(row: dict) -> list[str]:
    name = row["variant"] + (f" [{row['kernel']}]" if row["kernel"] not in ("", "main") else "")
    if "skipped" in row or "error" in row:
        return [name, str(row["block_size"])] + [""] * (len(HEADER) - 3) + [
            row.get("skipped") or "ERROR " + row["error"].splitlines()[0]]
    return [name, str(row["block_size"]), str(row["instructions"]), row["global_loads"], str(row["vector_loads"]),
            row["global_stores"], str(row["local"]), str(row["generic"]),
            f"{row['shared_loads']}/{row['shared_stores']}", str(row["barriers"]), str(row["shuffles"]),
            str(row["calls"]), str(row["fp64"])]


def table(rows) -> str:
    return align([list(HEADER)] + [_cells(row) for row in rows])


def main(args) -> int:
    block_sizes = block_sizes_given(args)
    dtype, kv_dtype = precision(args)
    variants = select(names_given(args))
    label = precision_label(dtype, kv_dtype)
    print(f"compiling for {args.arch} ({label}, head_dim {args.head_dim}, block sizes "
          f"{','.join(map(str, block_sizes))}) and disassembling with nvdisasm ...", file=sys.stderr, flush=True)
    rows = sass.collect(variants, block_sizes, args.head_dim, dtype, args.arch, keep_sass=args.dump,
                        progress=lambda what: print(f"  {what}", file=sys.stderr, flush=True), kv_dtype=kv_dtype)
    if args.dump:
        for row in rows:
            print(f"// ===== {row['variant']} [{row['kernel']}] block_size={row['block_size']} head_dim={row['head_dim']} "
                  f"{precision_label(row['dtype'], kv_dtype)} {row['arch']}")
            print(row.get("sass") or f"// {row.get('skipped') or row.get('error')}")
    elif args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{args.arch}, {label}, head_dim {args.head_dim}: static instruction counts (a loop body counts "
              "once). 16B loads = LDG of >= 128 bits; local = LDL/STL (spills, local arrays); generic = LD/ST "
              "through a generic address; call = CALL to a slow-path subroutine (its code is not counted).")
        print(table(rows))
    for line in (not_supported_line(rows), without_report_line(variants)):
        if line:
            print(line, file=sys.stderr if (args.json or args.dump) else sys.stdout)
    return 1 if any("error" in row for row in rows) else 0
