"""More PTX instructions for the CPU executor: the ones production kernels (FlashInfer, CCCL) carry.

Joined to ``ptx_ops.OPCODES`` by ptx.py (``ptx.OPCODES``); each returns the C++ of one instruction over
include/cpucuda_ptx_approx.h and include/cpucuda_ptx_async.h, or refuses naming what it cannot do.

* ``ex2``, ``lg2``, ``rcp``, ``rsqrt``, ``sqrt``, ``tanh``, ``sin``, ``cos`` (.approx with .ftz,
  .rn for rcp/sqrt; f32, and f16/f16x2/bf16/bf16x2 where PTX has them): the exact function rounded
  once to the format (cpucuda_ptx_approx.h says why that is the rounding chosen for .approx);
* ``setp.cmp.type p, a, b`` (integers and f32/f64; the predicate then guards ``@p``/``@!p``);
* ``shl``, ``shr``, ``bfind`` (integers, with PTX's out-of-range shift rules);
* ``cp.async.{ca,cg}.shared.global`` (with .L2::64B/128B/256B and cache hints; src-size or ignore-src),
  ``cp.async.commit_group``, ``cp.async.wait_group N``, ``cp.async.wait_all`` (cpucuda_ptx_async.h);
* ``prefetch``/``prefetchu`` (no effect: nothing to warm on the CPU; a GPU ignores bad addresses too),
  ``griddepcontrol`` (no effect: the next kernel starts after this one anyway), ``trap`` (__trap).
"""
from __future__ import annotations

import json
import re

from .ptx_ops import TYPES, _check_count, _refuse
from .ptx_statements import immediate

_APPROX = {"ex2": "EX2", "lg2": "LG2", "rcp": "RCP", "rsqrt": "RSQRT", "sqrt": "SQRT", "tanh": "TANH",
           "sin": "SIN", "cos": "COS"}
_HALF_APPROX = {"ex2", "tanh"}  # PTX's f16/bf16 forms of .approx


def _approx(ins, ctx) -> str:
    op = ins.parts[0]
    _check_count(ins, 2)
    mods, ptype = ins.parts[1:-1], ins.parts[-1]
    exact = op in ("rcp", "sqrt") and any(m in ("rn", "rz", "rm", "rp") for m in mods)
    if "approx" not in mods and not exact:
        _refuse(f"`{ins.name}`: {op} is translated in its .approx form" +
                (" or with .rn" if op in ("rcp", "sqrt") else ""))
    if exact and [m for m in mods if m in ("rz", "rm", "rp")]:
        _refuse(f"`{ins.name}`: {op} is translated with .rn only among the IEEE rounding modes")
    unknown = [m for m in mods if m not in ("approx", "ftz", "rn")]
    if unknown:
        _refuse(f"`{ins.name}`: the modifier .{unknown[0]} is not translated")
    half = ptype in ("f16", "f16x2", "bf16", "bf16x2")
    if ptype not in ("f32", "f64") and not (half and op in _HALF_APPROX):
        _refuse(f"`{ins.name}`: {op} is translated for .f32" +
                (" and .f16/.f16x2/.bf16/.bf16x2" if op in _HALF_APPROX else ""))
    if ptype == "f64" and not exact:
        _refuse(f"`{ins.name}`: the f64 .approx forms are not translated")
    bits, utype, fmt, _ = TYPES[ptype]
    flags = "::cpucuda::ptx::FTZ" if "ftz" in mods else "0u"
    a = ctx.value(ins.operands[1], utype)
    fn = "approx2" if ptype.endswith("x2") else "approx"
    return (f"::cpucuda::ptx::put({ctx.dest(ins.operands[0])}, ({utype})::cpucuda::ptx::{fn}("
            f"::cpucuda::ptx::{_APPROX[op]}, ::cpucuda::ptx::{fmt}, {a}, {flags}));")


_CMP = {"eq": "CMP_EQ", "ne": "CMP_NE", "lt": "CMP_LT", "le": "CMP_LE", "gt": "CMP_GT", "ge": "CMP_GE",
        "lo": "CMP_LT", "ls": "CMP_LE", "hi": "CMP_GT", "hs": "CMP_GE", "equ": "CMP_EQU", "neu": "CMP_NEU",
        "ltu": "CMP_LTU", "leu": "CMP_LEU", "gtu": "CMP_GTU", "geu": "CMP_GEU", "num": "CMP_NUM", "nan": "CMP_NAN"}
_FLOAT_ONLY = {"equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}


def _compare_type(ptype: str, name: str) -> tuple[str, str]:
    """(C++ type the operands compare as, the unsigned type they are read as)."""
    if ptype not in TYPES or ptype in ("f16", "f16x2", "bf16", "bf16x2"):
        _refuse(f"`{name}`: comparisons of .{ptype} are not translated")
    bits, utype, fmt, signed = TYPES[ptype]
    if fmt == "F32":
        return "float", utype
    if fmt == "F64":
        return "double", utype
    return (f"int{bits}_t" if signed else utype), utype


def _setp(ins, ctx) -> str:
    if len(ins.parts) < 3:
        _refuse(f"`{ins.name}`: setp needs a comparison and a type")
    cmp, ptype = ins.parts[1], ins.parts[-1]
    extra = [m for m in ins.parts[2:-1] if m != "ftz"]
    if cmp not in _CMP or extra:
        _refuse(f"`{ins.name}`: setp.cmp.type p, a, b is translated (cmp: {', '.join(_CMP)}; no boolean "
                "combining operand)")
    _check_count(ins, 3)
    ctype, utype = _compare_type(ptype, ins.name)
    if cmp in _FLOAT_ONLY and ctype not in ("float", "double"):
        _refuse(f"`{ins.name}`: .{cmp} compares floating-point values only")
    dst = ins.operands[0]
    if "|" in dst:
        _refuse(f"`{ins.text}`: the p|q form of setp is not translated")
    name, rtype = ctx.reg(dst)
    if rtype != "bool":
        _refuse(f"`{ins.text}`: the destination {dst.strip()} must be a .pred register")
    a, b = (_as(ctx.value(o, utype), utype, ctype) for o in ins.operands[1:])
    flush = "ftz" in ins.parts and ctype == "float"
    if flush:
        a, b = (f"(float)::cpucuda::ptx::input(::cpucuda::ptx::F32, {_bits(x)}, ::cpucuda::ptx::FTZ)" for x in (a, b))
    return f"{name} = ::cpucuda::ptx::compare<{ctype}>(::cpucuda::ptx::{_CMP[cmp]}, {a}, {b});"


def _bits(expr: str) -> str:
    return f"::cpucuda::ptx::raw({expr})"


def _as(expr: str, utype: str, ctype: str) -> str:
    """A register's bits (read as ``utype``) as the C++ type ``ctype``."""
    if ctype in ("float", "double"):
        return f"::cpucuda::ptx::bits_as<{ctype}>({expr})"
    return f"(({ctype}){expr})"


def _shift(ins, ctx) -> str:
    _check_count(ins, 3)
    if len(ins.parts) != 2 or ins.parts[1] not in TYPES or TYPES[ins.parts[1]][2] is not None:
        _refuse(f"`{ins.name}`: {ins.parts[0]} needs one integer type (.b16/.b32/.b64, .u32, .s32, ...)")
    bits, utype, _, signed = TYPES[ins.parts[1]]
    if ins.parts[0] == "shl" and signed:
        _refuse(f"`{ins.name}`: shl takes .b types")
    ctype = f"int{bits}_t" if signed and ins.parts[0] == "shr" else utype
    a = _as(ctx.value(ins.operands[1], utype), utype, ctype)
    n = ctx.value(ins.operands[2], "uint32_t")
    fn = "shift_left" if ins.parts[0] == "shl" else "shift_right"
    return f"::cpucuda::ptx::put({ctx.dest(ins.operands[0])}, ({utype})::cpucuda::ptx::{fn}<{ctype}>({a}, {n}));"


def _bfind(ins, ctx) -> str:
    _check_count(ins, 2)
    mods, ptype = ins.parts[1:-1], ins.parts[-1]
    if ptype not in ("u32", "s32", "u64", "s64") or [m for m in mods if m != "shiftamt"]:
        _refuse(f"`{ins.name}`: bfind{{.shiftamt}}.{{u32,s32,u64,s64}} is translated")
    bits, utype, _, signed = TYPES[ptype]
    ctype = f"int{bits}_t" if signed else utype
    a = _as(ctx.value(ins.operands[1], utype), utype, ctype)
    shiftamt = "true" if "shiftamt" in mods else "false"
    return f"::cpucuda::ptx::put({ctx.dest(ins.operands[0])}, ::cpucuda::ptx::bfind<{ctype}>({a}, {shiftamt}));"


# ---------------------------------------------------------------- cp.async and friends

_CP_HINTS = {"L2::64B", "L2::128B", "L2::256B", "L2::cache_hint"}


def _cp(ins, ctx) -> str:
    what = json.dumps(ins.name)
    if ins.parts[:2] != ["cp", "async"]:
        _refuse(f"`{ins.name}`: of the cp family only cp.async is translated (not cp.async.bulk or cp.reduce)")
    rest = ins.parts[2:]
    if rest == ["commit_group"]:
        _check_count(ins, 0)
        return "::cpucuda::ptx::cp_async_commit();"
    if rest == ["wait_group"]:
        _check_count(ins, 1)
        return f"::cpucuda::ptx::cp_async_wait((uint32_t)({ctx.constant(ins.operands[0])}));"
    if rest == ["wait_all"]:
        _check_count(ins, 0)
        return "::cpucuda::ptx::cp_async_wait_all();"
    if not rest or rest[0] not in ("ca", "cg"):
        _refuse(f"`{ins.name}`: cp.async.{{ca,cg}}.shared.global, commit_group, wait_group and wait_all are "
                "translated (not the bulk or mbarrier forms)")
    spaces = [m for m in rest[1:] if m not in _CP_HINTS]
    if spaces not in (["shared", "global"], ["shared::cta", "global"]):
        _refuse(f"`{ins.name}`: cp.async copies .shared{{::cta}}.global only")
    hinted = "L2::cache_hint" in rest
    operands = list(ins.operands[:-1] if hinted else ins.operands)
    if len(operands) not in (3, 4):
        _refuse(f"`{ins.text}`: cp.async [dst], [src], cp-size{{, src-size | ignore-src}} expected")
    cp_size = ctx.constant(operands[2])
    size_value = int(str(cp_size).rstrip("ul")) if re.fullmatch(r"\d+(ull)?", str(cp_size)) else None
    if size_value is not None and (size_value not in (4, 8, 16) or rest[0] == "cg" and size_value != 16):
        _refuse(f"`{ins.text}`: cp-size must be 4, 8 or 16 (16 for .cg)")
    dst = _register_address(operands[0], ctx, ins)
    src = _register_address(operands[1], ctx, ins)
    src_size = f"(uint32_t)({cp_size})"
    if len(operands) == 4:
        name = operands[3].strip()
        negate = name.startswith("!")
        reg = ctx.names.get(name.lstrip("!"))
        if reg is not None and reg[1] == "bool":  # ignore-src: true reads nothing and fills zeros
            src_size = f"({'!' if negate else ''}{reg[0]} ? 0u : (uint32_t)({cp_size}))"
        else:
            src_size = ctx.value(operands[3], "uint32_t")
    return (f"::cpucuda::ptx::cp_async({dst}, {src}, (uint32_t)({cp_size}), {src_size}, {what}, "
            f"{ctx.site()});")


def _register_address(text: str, ctx, ins) -> str:
    m = re.fullmatch(r"\s*\[\s*([^\]+\-]+?)\s*(?:\+\s*(\w+))?\s*\]\s*", text)
    if not m:
        _refuse(f"`{ins.text}`: cannot read the address {text.strip()!r} (use [reg] or [reg+offset])")
    base = ctx.value(m.group(1), "uint64_t")
    if m.group(2) is None:
        return base
    off = immediate(m.group(2))
    if off is None:
        _refuse(f"`{ins.text}`: the address offset {m.group(2)!r} must be a number")
    return f"({base} + (uint64_t){off})"


def _prefetch(ins, ctx) -> str:
    if len(ins.operands) not in (1, 2):
        _refuse(f"`{ins.text}`: prefetch [addr] expected")
    return "(void)0;"  # no cache to warm; an invalid address is ignored on a GPU too


def _griddepcontrol(ins, ctx) -> str:
    if ins.parts[1:] not in (["wait"], ["launch_dependents"]):
        _refuse(f"`{ins.name}`: griddepcontrol.wait / .launch_dependents are translated")
    return "(void)0;"  # launches run one after another here: the dependency is always met


def _trap(ins, ctx) -> str:
    _check_count(ins, 0)
    return "__trap(__FILE__, __LINE__);"


OPCODES = {**{op: _approx for op in _APPROX}, "setp": _setp, "shl": _shift, "shr": _shift, "bfind": _bfind,
           "cp": _cp, "prefetch": _prefetch, "prefetchu": _prefetch, "griddepcontrol": _griddepcontrol,
           "trap": _trap}
