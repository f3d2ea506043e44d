"""The PTX instructions the CPU executor translates, each to C++ over include/cpucuda_ptx.h.

``emit(instruction, ctx)`` returns the C++ of one instruction (``ctx`` is ptx.Translator: it
knows the operands' registers) or raises ptx.Refusal naming what cannot be translated.
Supported (``OPCODES``): mov (scalars, special registers, vector pack/unpack), cvt (between
f16, bf16, f32 and f64 with rn/rz/rm/rp and ftz/sat/relu/satfinite where PTX allows them,
f16x2/bf16x2 from two f32, rni/rzi/rmi/rpi to integral values, and between integer widths),
add/sub/mul/fma on f16, f16x2, bf16, bf16x2 and f32 (ftz, sat, relu), ld/st on global or
generic addresses, and on .shared window addresses (include/cpucuda_shared_window.h; cache and
eviction hints accepted, scalars and v2/v4 vectors, alignment checked), prmt.b32 (all modes), lop3.b32, selp on a .pred register, shfl.sync (up, down, bfly, idx; with the predicate
output), bar.sync / barrier.sync 0, bar.warp.sync, membar / fence (no-ops: one block runs at a
time and fibers switch only at barriers).
"""
from __future__ import annotations

import json
import re

from .ptx_statements import Refusal, immediate

# Instruction types: (bits, C++ unsigned type, float format or None, signed integer)
TYPES = {
    "b8": (8, "uint8_t", None, False), "u8": (8, "uint8_t", None, False), "s8": (8, "uint8_t", None, True),
    "b16": (16, "uint16_t", None, False), "u16": (16, "uint16_t", None, False), "s16": (16, "uint16_t", None, True),
    "b32": (32, "uint32_t", None, False), "u32": (32, "uint32_t", None, False), "s32": (32, "uint32_t", None, True),
    "b64": (64, "uint64_t", None, False), "u64": (64, "uint64_t", None, False), "s64": (64, "uint64_t", None, True),
    "f16": (16, "uint16_t", "F16", False), "bf16": (16, "uint16_t", "BF16", False),
    "f16x2": (32, "uint32_t", "F16", False), "bf16x2": (32, "uint32_t", "BF16", False),
    "f32": (32, "uint32_t", "F32", False), "f64": (64, "uint64_t", "F64", False),
}
# C++ types of registers declared with .reg inside a template
REG_TYPES = {"b16": "uint16_t", "u16": "uint16_t", "s16": "uint16_t", "f16": "uint16_t", "bf16": "uint16_t",
             "b32": "uint32_t", "u32": "uint32_t", "s32": "uint32_t", "f16x2": "uint32_t", "bf16x2": "uint32_t",
             "f32": "float", "b64": "uint64_t", "u64": "uint64_t", "s64": "uint64_t", "f64": "double",
             "pred": "bool"}
_RND = {"rn": "RN", "rz": "RZ", "rm": "RM", "rp": "RP"}
_IRND = {"rni": "RN", "rzi": "RZ", "rmi": "RM", "rpi": "RP"}
_FLOATS = ("f16", "bf16", "f32", "f64")
# A format's (exponent bits, significand bits): a conversion loses nothing iff both grow or stay.
_SHAPE = {"f16": (5, 11), "bf16": (8, 8), "f32": (8, 24), "f64": (11, 53)}


def _refuse(msg: str):
    raise Refusal(msg)


def _check_count(ins, n: int) -> None:
    if len(ins.operands) != n:
        _refuse(f"`{ins.name}` takes {n} operands, got {len(ins.operands)} in {ins.text!r}")


def _vector(text: str) -> list[str] | None:
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        return [e.strip() for e in text[1:-1].split(",")]
    return None


def _flags(mods, allowed: set, name: str) -> str:
    out = []
    for m in mods:
        if m not in allowed:
            _refuse(f"`{name}`: the modifier .{m} is not supported here (allowed: "
                    f"{', '.join('.' + a for a in sorted(allowed)) or 'none'})")
        out.append({"ftz": "FTZ", "sat": "SAT", "relu": "RELU", "satfinite": "SATFINITE"}[m])
    return " | ".join(f"::cpucuda::ptx::{f}" for f in out) or "0u"


# ---------------------------------------------------------------- mov

def _mov(ins, ctx) -> str:
    _check_count(ins, 2)
    if len(ins.parts) != 2 or ins.parts[1] not in TYPES:
        _refuse(f"`{ins.name}`: mov needs exactly one type (.b32, .u64, .f32, ...)")
    bits, utype, _, _ = TYPES[ins.parts[1]]
    dst, src = ins.operands
    dvec, svec = _vector(dst), _vector(src)
    if dvec is not None:  # unpack: element 0 takes the least significant bits
        width = bits // len(dvec)
        etype = TYPES[f"b{width}"][1] if f"b{width}" in TYPES else None
        if etype is None or width * len(dvec) != bits:
            _refuse(f"`{ins.text}`: {len(dvec)} elements cannot split a {bits}-bit value")
        src_v = ctx.value(src, utype)
        out = [f"const {utype} {(t := ctx.temp())} = {src_v};"]
        for i, e in enumerate(dvec):
            if e != "_":
                out.append(f"::cpucuda::ptx::put({ctx.dest(e)}, ({etype})({t} >> {i * width}));")
        return " ".join(out)
    if svec is not None:  # pack
        width = bits // len(svec)
        etype = TYPES.get(f"b{width}", (0, None))[1]
        if etype is None or width * len(svec) != bits:
            _refuse(f"`{ins.text}`: {len(svec)} elements cannot fill a {bits}-bit value")
        terms = [f"(({utype}){ctx.value(e, etype)} << {i * width})" for i, e in enumerate(svec)]
        return f"::cpucuda::ptx::put({ctx.dest(dst)}, ({utype})({' | '.join(terms)}));"
    return f"::cpucuda::ptx::put({ctx.dest(dst)}, {ctx.value(src, utype)});"


# ---------------------------------------------------------------- cvt

def _cvt(ins, ctx) -> str:
    if len(ins.parts) < 3:
        _refuse(f"`{ins.name}`: cvt needs a destination and a source type")
    dtype, atype, mods = ins.parts[-2], ins.parts[-1], ins.parts[1:-2]
    if dtype not in TYPES or atype not in TYPES:
        _refuse(f"`{ins.name}`: unknown type")
    rnd = [m for m in mods if m in _RND]
    irnd = [m for m in mods if m in _IRND]
    rest = [m for m in mods if m not in _RND and m not in _IRND]
    if len(rnd) + len(irnd) > 1:
        _refuse(f"`{ins.name}`: more than one rounding modifier")
    d_is_float, a_is_float = dtype in _FLOATS or dtype.endswith("x2"), atype in _FLOATS
    if dtype in ("f16x2", "bf16x2"):  # cvt.rn.f16x2.f32 d, a, b: a to the upper half, b to the lower
        _check_count(ins, 3)
        if atype != "f32" or not rnd or rnd[0] not in ("rn", "rz"):
            _refuse(f"`{ins.name}`: PTX converts two f32 values to {dtype} with .rn or .rz")
        flags = _flags(rest, {"relu", "satfinite"}, ins.name)
        fmt = TYPES[dtype][2]
        r = _RND[rnd[0]]
        hi = f"::cpucuda::ptx::cvt(::cpucuda::ptx::{fmt}, ::cpucuda::ptx::F32, {ctx.value(ins.operands[1], 'uint32_t')}, ::cpucuda::ptx::{r}, 0u, {flags})"
        lo = f"::cpucuda::ptx::cvt(::cpucuda::ptx::{fmt}, ::cpucuda::ptx::F32, {ctx.value(ins.operands[2], 'uint32_t')}, ::cpucuda::ptx::{r}, 0u, {flags})"
        return f"::cpucuda::ptx::put({ctx.dest(ins.operands[0])}, (uint32_t)(({hi}) << 16 | ({lo})));"
    _check_count(ins, 2)
    dst, src = ins.operands
    dbits, dutype, dfmt, dsigned = TYPES[dtype]
    abits, autype, afmt, asigned = TYPES[atype]
    if d_is_float and a_is_float:
        if dtype == atype:
            if not irnd:
                _refuse(f"`{ins.name}`: a conversion to the same format needs .rni, .rzi, .rmi or .rpi")
            flags = _flags(rest, {"ftz", "sat"}, ins.name)
            v = f"::cpucuda::ptx::cvt_integral(::cpucuda::ptx::{dfmt}, {ctx.value(src, autype)}, ::cpucuda::ptx::{_IRND[irnd[0]]}, {flags})"
            return f"::cpucuda::ptx::put({ctx.dest(dst)}, ({dutype})({v}));"
        widening = all(d >= a for d, a in zip(_SHAPE[dtype], _SHAPE[atype]))
        if irnd:
            _refuse(f"`{ins.name}`: .{irnd[0]} rounds to an integral value; between formats use .rn/.rz/.rm/.rp")
        if widening and rnd:
            _refuse(f"`{ins.name}`: a rounding modifier is not allowed on a conversion that loses nothing (PTX)")
        if not widening and not rnd:
            _refuse(f"`{ins.name}`: a narrowing conversion needs a rounding modifier (.rn, .rz, .rm or .rp)")
        allowed = {"ftz", "sat"} | ({"relu", "satfinite"} if dtype in ("f16", "bf16") and atype == "f32" else set())
        _flags(rest, allowed, ins.name)
        in_flags = _flags([m for m in rest if m == "ftz" and atype == "f32"], {"ftz"}, ins.name)
        out_flags = _flags([m for m in rest if m != "ftz" or dtype == "f32"], allowed, ins.name)
        r = _RND[rnd[0]] if rnd else "RN"
        v = (f"::cpucuda::ptx::cvt(::cpucuda::ptx::{dfmt}, ::cpucuda::ptx::{afmt}, {ctx.value(src, autype)}, "
             f"::cpucuda::ptx::{r}, {in_flags}, {out_flags})")
        return f"::cpucuda::ptx::put({ctx.dest(dst)}, ({dutype})({v}));"
    if not d_is_float and not a_is_float:  # integer widths: truncate or extend, .sat clamps
        if rnd or irnd:
            _refuse(f"`{ins.name}`: integer-to-integer cvt takes no rounding modifier")
        _flags([m for m in rest if m != "sat"], set(), ins.name)
        dct, act = _int_ctype(dtype), _int_ctype(atype)
        v = (f"::cpucuda::ptx::cvt_int<{dct}, {act}>(({act}){ctx.value(src, autype)}, "
             f"{'true' if 'sat' in rest else 'false'})")
        return f"::cpucuda::ptx::put{'_signed' if dsigned else ''}({ctx.dest(dst)}, ({dutype})({v}));"
    _refuse(f"`{ins.name}`: conversions between integers and floating point are not translated "
            "(use __int2float_rn, __float2int_rz and the other CUDA intrinsics)")


def _int_ctype(ptype: str) -> str:
    bits, _, _, signed = TYPES[ptype]
    return f"{'' if signed else 'u'}int{bits}_t"


# ---------------------------------------------------------------- arithmetic

_ARITH = {"add": ("ADD", 3), "sub": ("SUB", 3), "mul": ("MUL", 3), "fma": ("FMA", 4)}


def _arith(ins, ctx) -> str:
    op, count = _ARITH[ins.parts[0]]
    _check_count(ins, count)
    ptype = ins.parts[-1]
    if ptype not in ("f16", "f16x2", "bf16", "bf16x2", "f32"):
        _refuse(f"`{ins.name}`: {ins.parts[0]} is translated for f16, f16x2, bf16, bf16x2 and f32 only")
    mods = ins.parts[1:-1]
    if ins.parts[0] == "mul" and "hi" in mods or "lo" in mods or "wide" in mods:
        _refuse(f"`{ins.name}`: integer multiplication is not translated")
    rnd = [m for m in mods if m in _RND]
    if ins.parts[0] == "fma" and not rnd:
        _refuse(f"`{ins.name}`: fma needs a rounding modifier (.rn)")
    if ptype != "f32" and rnd and rnd[0] != "rn":
        _refuse(f"`{ins.name}`: PTX rounds {ptype} arithmetic with .rn only")
    allowed = {"ftz", "sat"} | ({"relu"} if ins.parts[0] == "fma" and ptype != "f32" else set())
    flags = _flags([m for m in mods if m not in _RND], allowed, ins.name)
    r = _RND[rnd[0]] if rnd else "RN"
    bits, utype, fmt, _ = TYPES[ptype]
    args = [ctx.value(o, utype) for o in ins.operands[1:]] + ["0u"] * (4 - count)
    fn = "arith2" if ptype.endswith("x2") else "arith"
    v = (f"::cpucuda::ptx::{fn}(::cpucuda::ptx::{op}, ::cpucuda::ptx::{fmt}, {args[0]}, {args[1]}, {args[2]}, "
         f"::cpucuda::ptx::{r}, {flags})")
    return f"::cpucuda::ptx::put({ctx.dest(ins.operands[0])}, ({utype})({v}));"


# ---------------------------------------------------------------- memory

_CACHE_HINTS = {"ca", "cg", "cs", "lu", "cv", "nc", "wb", "wt", "weak", "volatile", "relaxed", "acquire", "release",
                "cta", "gpu", "sys", "cluster", "L1::evict_normal", "L1::evict_unchanged", "L1::evict_first",
                "L1::evict_last", "L1::no_allocate", "L2::evict_normal", "L2::evict_first", "L2::evict_last",
                "L2::64B", "L2::128B", "L2::256B", "L2::cache_hint", "unified"}
_SPACES = {"global", "shared", "local", "const", "param", "shared::cta", "shared::cluster"}


def _memory(ins, ctx) -> str:
    kind = ins.parts[0]
    mods, ptype = ins.parts[1:-1], ins.parts[-1]
    if ptype not in TYPES or TYPES[ptype][2] in ("F16", "BF16") and ptype.endswith("x2"):
        _refuse(f"`{ins.name}`: type .{ptype} is not translated for {kind}")
    spaces = [m for m in mods if m in _SPACES]
    if spaces and spaces[0] not in ("global", "shared", "shared::cta"):
        _refuse(f"`{ins.name}`: the .{spaces[0]} state space is not translated; load through a global, shared or "
                "generic (plain) pointer")
    shared = bool(spaces) and spaces[0] != "global"  # a shared-window address (include/cpucuda_shared_window.h)
    vec = [m for m in mods if re.fullmatch(r"v\d+", m)]
    n = int(vec[0][1:]) if vec else 1
    if n not in (1, 2, 4):
        _refuse(f"`{ins.name}`: .v{n} vectors are not translated (use .v2 or .v4)")
    unknown = [m for m in mods if m not in _CACHE_HINTS and m not in _SPACES and not re.fullmatch(r"v\d+", m)]
    if unknown:
        _refuse(f"`{ins.name}`: the qualifier .{unknown[0]} is not translated")
    hinted = "L2::cache_hint" in mods  # a trailing 64-bit cache-policy operand: only a hint
    _check_count(ins, 3 if hinted else 2)
    bits, utype, _, signed = TYPES[ptype]
    data, addr = (ins.operands[0], ins.operands[1]) if kind == "ld" else (ins.operands[1], ins.operands[0])
    address = _address(addr, ctx, ins, shared)
    if shared:
        address = (f"(uint64_t)(uintptr_t)::cpucuda::window_pointer({address}, {bits // 8 * n}, "
                   f"{json.dumps(ins.name)}, {ctx.site()})")
    elems = _vector(data) or [data]
    if len(elems) != n:
        _refuse(f"`{ins.text}`: {n} element(s) expected, {len(elems)} given")
    t = ctx.temp()
    what = json.dumps(ins.name)
    if kind == "ld":
        out = [f"{utype} {t}[{n}];", f"::cpucuda::ptx::load<{utype}>({address}, {t}, {n}, {what}, {ctx.site()});"]
        for i, e in enumerate(elems):
            if e != "_":
                out.append(f"::cpucuda::ptx::put{'_signed' if signed else ''}({ctx.dest(e)}, {t}[{i}]);")
        return " ".join(out)
    values = ", ".join(ctx.value(e, utype) for e in elems)
    return (f"const {utype} {t}[{n}] = {{{values}}}; "
            f"::cpucuda::ptx::store<{utype}>({address}, {t}, {n}, {what}, {ctx.site()});")


def _address(text: str, ctx, ins, shared: bool = False) -> str:
    m = re.fullmatch(r"\s*\[\s*([^\]+\-]+?)\s*(?:([+-])\s*(\w+))?\s*\]\s*", text)
    if not m:
        _refuse(f"`{ins.text}`: cannot read the address {text.strip()!r} (use [reg] or [reg+offset])")
    base, sign, offset = m.groups()
    name, ctype = ctx.reg(base)
    if ctype != "uint64_t" and not (shared and ctype == "uint32_t"):
        _refuse(f"`{ins.text}`: the address {base} must be a 64-bit register (an \"l\" operand holding a pointer)"
                + (" or a 32-bit shared-window address" if shared else ""))
    name = f"(uint64_t){name}"
    off = ""
    if offset is not None:
        imm = immediate(offset)
        if imm is None:
            _refuse(f"`{ins.text}`: the address offset {offset!r} must be a number")
        off = f" {sign} (uint64_t){imm}"
    return f"({name}{off})"


# ---------------------------------------------------------------- bits

_PRMT_MODES = {"f4e": 1, "b4e": 2, "rc8": 3, "ecl": 4, "ecr": 5, "rc16": 6}


def _prmt(ins, ctx) -> str:
    _check_count(ins, 4)
    if ins.parts[1] != "b32" or len(ins.parts) > 3 or (len(ins.parts) == 3 and ins.parts[2] not in _PRMT_MODES):
        _refuse(f"`{ins.name}`: prmt.b32 with an optional mode (.f4e, .b4e, .rc8, .ecl, .ecr, .rc16)")
    mode = _PRMT_MODES.get(ins.parts[2], 0) if len(ins.parts) == 3 else 0
    a, b, c = (ctx.value(o, "uint32_t") for o in ins.operands[1:])
    return f"::cpucuda::ptx::put({ctx.dest(ins.operands[0])}, ::cpucuda::ptx::prmt({a}, {b}, {c}, {mode}));"


def _selp(ins, ctx) -> str:
    if len(ins.parts) != 2 or ins.parts[1] not in TYPES:
        _refuse(f"`{ins.name}`: selp needs one type")
    _check_count(ins, 4)
    name, ctype = ctx.reg(ins.operands[3])
    if ctype != "bool":
        _refuse(f"`{ins.text}`: the selector {ins.operands[3].strip()} must be a .pred register")
    utype = TYPES[ins.parts[1]][1]
    a, b = (ctx.value(o, utype) for o in ins.operands[1:3])
    return f"::cpucuda::ptx::put({ctx.dest(ins.operands[0])}, ({utype})({name} ? {a} : {b}));"


def _lop3(ins, ctx) -> str:
    if ins.parts != ["lop3", "b32"]:
        _refuse(f"`{ins.name}`: lop3.b32 d, a, b, c, lut is translated (not the predicate forms)")
    _check_count(ins, 5)
    a, b, c = (ctx.value(o, "uint32_t") for o in ins.operands[1:4])
    lut = ctx.constant(ins.operands[4])
    return f"::cpucuda::ptx::put({ctx.dest(ins.operands[0])}, ::cpucuda::ptx::lop3({a}, {b}, {c}, (uint32_t)({lut})));"


# ---------------------------------------------------------------- warps and barriers

_SHFL_MODES = {"up": "SHFL_UP", "down": "SHFL_DOWN", "bfly": "SHFL_BFLY", "idx": "SHFL_IDX"}


def _shfl(ins, ctx) -> str:
    if len(ins.parts) != 4 or ins.parts[1] != "sync" or ins.parts[2] not in _SHFL_MODES or ins.parts[3] != "b32":
        _refuse(f"`{ins.name}`: shfl.sync.{{up,down,bfly,idx}}.b32 is translated (shfl without .sync is gone "
                "since sm_70)")
    _check_count(ins, 5)
    dst = ins.operands[0]
    pred = None
    if "|" in dst:
        dst, pred = (x.strip() for x in dst.split("|"))
    a, b, c, mask = (ctx.value(o, "uint32_t") for o in ins.operands[1:])
    t = ctx.temp()
    code = [f"bool {t} = false;",
            f"::cpucuda::ptx::put({ctx.dest(dst)}, ::cpucuda::ptx::shfl(::cpucuda::ptx::{_SHFL_MODES[ins.parts[2]]}, "
            f"{a}, {b}, {c}, {mask}, &{t}, {json.dumps(ins.name)}, {ctx.site()}));"]
    if pred is not None:
        code.append(f"{ctx.dest(pred)} = {t};")
    return " ".join(code)


def _bar(ins, ctx) -> str:
    if ins.parts[:2] in (["bar", "warp"],):
        if ins.parts != ["bar", "warp", "sync"]:
            _refuse(f"`{ins.name}`: bar.warp.sync mask is translated")
        _check_count(ins, 1)
        return f"__syncwarp({ctx.value(ins.operands[0], 'uint32_t')}, {ctx.site()});"
    if ins.parts[1:] not in (["sync"], ["sync", "aligned"]) and ins.parts[1:] != []:
        _refuse(f"`{ins.name}`: only bar.sync / barrier.sync (a whole-block barrier) is translated")
    if len(ins.operands) != 1 or ctx.constant(ins.operands[0]) not in ("0ull", 0):
        _refuse(f"`{ins.text}`: only barrier 0 with every thread of the block (as __syncthreads) is translated")
    return f"::cpucuda::block_barrier(::cpucuda::B_SYNC, 0, {json.dumps(ins.name)}, {ctx.site()});"


def _fence(ins, ctx) -> str:
    # One block runs at a time and fibers switch only at barriers: no ordering to add.
    return "(void)0;"


OPCODES = {"mov": _mov, "cvt": _cvt, "add": _arith, "sub": _arith, "mul": _arith, "fma": _arith, "ld": _memory,
           "st": _memory, "prmt": _prmt, "lop3": _lop3, "selp": _selp, "shfl": _shfl, "bar": _bar, "barrier": _bar,
           "membar": _fence, "fence": _fence}
