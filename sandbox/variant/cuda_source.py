"""CUDA C source as every CUDA C family compiles it: the option table's prelude in front, local headers inlined.

    option_prelude() -> str      pa::OPT_* bits, pa::OptionArgs, PA_OPTION_PARAMS / PA_OPTION_ARGS (the table's)
    load_source(path) -> str     option_prelude(), then the .cu with its local #include "..." inlined (#line kept)
    ctype(dtype) -> str          the CUDA C type of a NumPy dtype (CTYPES): "__half", "__nv_fp8_e4m3", "pa::Nvfp4"

Inlining keeps the code self-contained, so CuPy's and the executor's caches (keyed on the code) see every
header and option-table edit. The option table (sandbox/problem/option_table.py) is the one definition of the
bits and arguments; a kernel lists PA_OPTION_PARAMS last and takes OPTS (the bits compiled in) as a template
argument (docs/design.md, "Running a variant").
"""
from __future__ import annotations

import pathlib
import re

import numpy as np

from ..problem.options import KERNEL_ARGS, KERNEL_FLAGS, SCORE_HOOKS
from .limits import Unsupported

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]  # #line names files relative to it
CTYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16",
          "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2",
          "uint8": "pa::Nvfp4"}  # uint8: an NVFP4 cache's packed e2m1 pairs (kernels/cupy_raw/codecs.cuh)

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')


def option_prelude() -> str:
    """The CUDA C the option table defines, put in front of every .cu by load_source:

        namespace pa { enum : int { OPT_WINDOW = 1, ... };  struct OptionArgs { int window_left; ... }; }
        #define PA_OPTION_PARAMS int window_left, ...        (a kernel's option parameters, in table order)
        #define PA_OPTION_ARGS pa::OptionArgs{window_left, ...}  (those parameters gathered)
        namespace pa { struct HeadParams { float alibi_slope; ... }; }  (the score modifiers' per-head values)
        #define PA_HEAD_PARAMS(q_head) pa::HeadParams{...}  (those of query head q_head, 0 outside FLAGS)
        #define PA_SCORE_HOOKS if constexpr ((FLAGS & OPT_SOFTCAP) != 0) { s = ...; } ...
                                 (the score modifiers' ScoreHook.cuda in table order, for pa::Options::logit)
    """
    def param(arg):
        restrict = " __restrict__" if arg.ctype.endswith("*") else ""
        return f"{arg.ctype}{restrict} {arg.name}"

    bits = ", ".join(f"{name} = {bit}" for name, bit in KERNEL_FLAGS)
    per_head = [(flag, name, expression) for (flag, _), hook in SCORE_HOOKS for name, expression in hook.cuda_head]
    head_members = " ".join(f"float {name};" for _, name, _ in per_head) or "char none;"
    head_values = [f"(FLAGS & pa::{flag}) != 0 ? ({expression}) : 0.f" for flag, _, expression in per_head] or ["0"]
    members = " ".join(f"{arg.ctype} {arg.name};" for arg in KERNEL_ARGS)
    return "\n".join([
        "// Generated from the option table (sandbox/problem/option_table.py) by sandbox/variant/cuda_source.py.",
        f"namespace pa {{ enum : int {{ {bits} }}; struct OptionArgs {{ {members} }}; }}",
        f"#define PA_OPTION_PARAMS {', '.join(param(a) for a in KERNEL_ARGS)}",
        f"#define PA_OPTION_ARGS pa::OptionArgs{{{', '.join(a.name for a in KERNEL_ARGS)}}}",
        f"namespace pa {{ struct HeadParams {{ {head_members} }}; }}",
        "#define PA_HEAD_PARAMS(q_head) pa::HeadParams{" + ", ".join(head_values) + "}",
        "#define PA_SCORE_HOOKS " + " ".join(f"if constexpr ((FLAGS & pa::{flag}) != 0) {{ {hook.cuda} }}"
                                             for (flag, _), hook in SCORE_HOOKS),
        ""])


def load_source(path) -> str:
    """option_prelude(), then the source of `path` with local `#include "file"` lines replaced by the file
    (once each, with #line).

    Inlining keeps `code` self-contained, so CuPy's and the executor's caches (keyed on the code)
    see header and option-table edits.
    """
    seen: set = set()
    root = REPOSITORY

    def shown(file: pathlib.Path) -> str:  # in #line, so reports name the real file: repo-relative, else absolute
        try:
            return file.relative_to(root).as_posix()
        except ValueError:
            return file.as_posix()

    def expand(file: pathlib.Path) -> str:
        file = file.resolve()
        if file in seen:
            return ""
        seen.add(file)
        lines = [f'#line 1 "{shown(file)}"']
        for number, line in enumerate(file.read_text().splitlines(), start=1):
            m = _INCLUDE.match(line)
            if m:
                inlined = expand(file.parent / m.group(1))  # "" when already inlined (#pragma once)
                if inlined:
                    lines.append(inlined)
                lines.append(f'#line {number + 1} "{shown(file)}"')
            else:  # `#pragma once` becomes a blank line, so every later line keeps its number
                lines.append("" if line.strip() == "#pragma once" else line)
        return "\n".join(lines)

    return option_prelude() + expand(pathlib.Path(path)) + "\n"


def ctype(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in CTYPES:
        raise Unsupported(f"dtype {name} has no CUDA C type here; supported: {', '.join(CTYPES)}")
    return CTYPES[name]
