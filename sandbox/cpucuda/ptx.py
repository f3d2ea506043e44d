"""Inline PTX (``asm`` / ``asm volatile`` statements) translated to C++ for the CPU executor.

Real kernels carry a little inline PTX (vLLM's ``dtype_float16.cuh`` packs and converts halves
with it, even for float32 kernels). Each asm statement is replaced, on its own first line (the
lines after it are kept as blank lines, so line numbers still match), by a C++ block that reads
the input operands into registers, runs each PTX instruction through ``include/cpucuda_ptx.h``
(exact semantics: see there) and writes the output operands back:

    asm volatile("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    ->  do { uint16_t __ptx0 = 0; const float __ptx1 = to_reg<float>((f)); ...; from_reg((h), __ptx0); } while (0);

Statements are found and read by ptx_statements.py; the instructions translated are
OPCODES (ptx_ops.py's and ptx_more_ops.py's). Anything else becomes a ``static_assert`` that
names the instruction: g++ reports it with the file and line, and only where the preprocessor
keeps the statement (an asm inside an inactive ``#ifdef USE_ROCM`` costs nothing), which
compiler.py turns into "file:line: inline PTX ..." messages. Statements inside ``#define``
bodies are translated the same way (line continuations kept).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from . import ptx_more_ops, ptx_ops
from .ptx_statements import Refusal, Statement, find_statements, immediate, split  # noqa: F401  (re-exported)
from .source import tokenize

REFUSAL = "sandbox.cpucuda: inline PTX"  # the static_assert message prefix compiler.py looks for
OPCODES = {**ptx_ops.OPCODES, **ptx_more_ops.OPCODES}  # PTX opcode -> its translation (ins, ctx) -> C++
_CTYPE = {"h": "uint16_t", "r": "uint32_t", "l": "uint64_t", "f": "float", "d": "double", "n": "long long"}


# ---------------------------------------------------------------- translating

def translate(stmt: Statement, defer: bool = False) -> str:
    """One line of C++ for the statement: its translation, or its refusal.

    A refusal is a static_assert (g++ names the file and line at compile time), or with ``defer`` a
    call that stops the launch only if the statement is reached: library headers (FlashInfer, CCCL)
    hold PTX for other architectures in functions no kernel here calls, and must still compile.
    """
    try:
        if stmt.template is None:
            raise Refusal(f"cannot be translated: {stmt.problem}")
        return Translator(stmt).run()
    except Refusal as exc:
        if defer:
            return f"::cpucuda::ptx::refused({json.dumps(str(exc))}, __FILE__, __LINE__)"
        message = f"{REFUSAL} {exc}"
        return f"static_assert(false, {json.dumps(message)})"


class Translator:
    """The C++ for one statement: operand registers, then each instruction, then the outputs."""

    def __init__(self, stmt: Statement):
        self.stmt = stmt
        self.names: dict[str, tuple[str, str]] = {}  # PTX register -> (C++ name, C++ type)
        self.immediates: dict[str, str] = {}          # "%N" of an "n" operand -> its expression
        self.code: list[str] = []
        self.counter = 0

    def temp(self, prefix: str = "t") -> str:
        self.counter += 1
        return f"__ptx_{prefix}{self.counter}"

    def run(self) -> str:
        body = _strip_comments(self.stmt.template).replace("%%", "\x00")
        if not body.strip():  # asm("" ::: "memory") and the like: a compiler barrier, harmless on the CPU
            return '__asm__ __volatile__("" ::: "memory")'
        self._operands()
        for item in _statements(body):
            if item in ("{", "}"):
                self.code.append(item)
            elif item.startswith(".reg"):
                self._declare(item)
            else:
                guard, item = _guard(item)
                code = emit(_instruction(item), self)
                self.code.append(self._guarded(guard, code) if guard else code)
        self._writeback()
        return "do { " + " ".join(self.code) + " } while (0)"

    def _guarded(self, guard: str, code: str) -> str:
        """``@p`` / ``@!p``: the instruction runs where the predicate register holds (does not)."""
        negate = guard.startswith("!")
        name, ctype = self.reg(guard.lstrip("!"))
        if ctype != "bool":
            raise Refusal(f"the guard @{guard} must be a .pred register")
        return f"if ({'!' if negate else ''}{name}) {{ {code} }}"

    def _operands(self) -> None:
        for k, op in enumerate(self.stmt.operands):
            name = f"__ptx{k}"
            if op.constraint.isdigit():  # tied to an output: the same register, initialised from this input
                tied = int(op.constraint)
                if tied >= k or not self.stmt.operands[tied].output:
                    raise Refusal(f"operand {k} is tied to {tied}, which is not an earlier output")
                tname, ttype = self.names[f"%{tied}"]
                self.code.append(f"{tname} = ::cpucuda::ptx::to_reg<{ttype}>(({op.expr}));")
                self.names[f"%{k}"] = (tname, ttype)
                continue
            ctype = _CTYPE[op.constraint]
            if op.constraint == "n":
                self.immediates[f"%{k}"] = f"((long long)({op.expr}))"
                continue
            if op.output and not op.readwrite:
                self.code.append(f"{ctype} {name} = 0;")
            else:
                qual = "" if op.output else "const "
                self.code.append(f"{qual}{ctype} {name} = ::cpucuda::ptx::to_reg<{ctype}>(({op.expr}));")
            self.names[f"%{k}"] = (name, ctype)

    def _writeback(self) -> None:
        for k, op in enumerate(self.stmt.operands):
            if op.output:
                self.code.append(f"::cpucuda::ptx::from_reg(({op.expr}), {self.names[f'%{k}'][0]});")

    def _declare(self, item: str) -> None:
        m = re.fullmatch(r"\.reg\s+\.(\w+)\s+(.+)", item, re.S)
        if not m:
            raise Refusal(f"cannot read the declaration {item!r}")
        ptype, names = m.group(1), m.group(2)
        ctype = ptx_ops.REG_TYPES.get(ptype)
        if ctype is None:
            raise Refusal(f"registers of type .{ptype} (declared in {item!r}) are not supported")
        for name in (n.strip() for n in names.split(",")):
            count = re.fullmatch(r"(\S+?)<(\d+)>", name)
            for reg in ([f"{count.group(1)}{i}" for i in range(int(count.group(2)))] if count else [name]):
                cname = "__ptxr_" + re.sub(r"\W", "_", reg)
                self.names[reg] = (cname, ctype)
                self.code.append(f"{ctype} {cname} = 0;")

    # -- operands as the instructions use them (ptx_ops calls these)

    def reg(self, text: str) -> tuple[str, str]:
        """(C++ lvalue, C++ type) of a register operand."""
        text = text.strip()
        if text in self.names:
            return self.names[text]
        if text.startswith("%") and text[1:].isdigit():
            raise Refusal(f"operand {text} does not exist ({len(self.stmt.operands)} operand(s) given)")
        raise Refusal(f"unknown register {text!r}")

    def dest(self, text: str) -> str:
        if text.strip() in self.immediates or _special(text) is not None:
            raise Refusal(f"{text.strip()} cannot be written")
        return self.reg(text)[0]

    def value(self, text: str, utype: str) -> str:
        """A source operand as the unsigned type ``utype`` (its low bits, or an immediate)."""
        text = text.strip()
        if text in self.immediates:
            return f"(({utype}){self.immediates[text]})"
        special = _special(text)
        if special is not None:
            return f"(({utype}){special})"
        imm = immediate(text)
        if imm is not None:
            return f"(({utype}){imm})"
        name, _ = self.reg(text)
        return f"::cpucuda::ptx::get<{utype}>({name})"

    def constant(self, text: str) -> int | str:
        """An operand that must be a compile-time integer (lop3's table, prmt's selector may vary)."""
        text = text.strip()
        if text in self.immediates:
            return self.immediates[text]
        imm = immediate(text)
        if imm is None:
            raise Refusal(f"{text!r} must be an immediate (a number or an \"n\" operand)")
        return imm

    def site(self) -> str:
        return "__FILE__, __LINE__"


_SPECIAL = {
    "%laneid": "::cpucuda::g.cur->lane",
    "%tid.x": "threadIdx.x", "%tid.y": "threadIdx.y", "%tid.z": "threadIdx.z",
    "%ntid.x": "blockDim.x", "%ntid.y": "blockDim.y", "%ntid.z": "blockDim.z",
    "%ctaid.x": "blockIdx.x", "%ctaid.y": "blockIdx.y", "%ctaid.z": "blockIdx.z",
    "%nctaid.x": "gridDim.x", "%nctaid.y": "gridDim.y", "%nctaid.z": "gridDim.z",
    "%lanemask_eq": "(1u << ::cpucuda::g.cur->lane)",
    "%lanemask_lt": "((1u << ::cpucuda::g.cur->lane) - 1u)",
    "%lanemask_le": "((2u << ::cpucuda::g.cur->lane) - 1u)",
    "%lanemask_gt": "(~((2u << ::cpucuda::g.cur->lane) - 1u))",
    "%lanemask_ge": "(~((1u << ::cpucuda::g.cur->lane) - 1u))",
    # One SM runs every block here, each block a cluster of one, and time is the host's (ns).
    "%warpid": "::cpucuda::g.cur->warp", "%nwarpid": "::cpucuda::g.nwarps",
    "%smid": "0u", "%nsmid": "1u", "%gridid": "0ull",
    "%clusterid.x": "blockIdx.x", "%clusterid.y": "blockIdx.y", "%clusterid.z": "blockIdx.z",
    "%nclusterid.x": "gridDim.x", "%nclusterid.y": "gridDim.y", "%nclusterid.z": "gridDim.z",
    "%cluster_ctaid.x": "0u", "%cluster_ctaid.y": "0u", "%cluster_ctaid.z": "0u",
    "%cluster_nctaid.x": "1u", "%cluster_nctaid.y": "1u", "%cluster_nctaid.z": "1u",
    "%cluster_ctarank": "0u", "%cluster_nctarank": "1u",
    "%clock": "((uint32_t)::cpucuda::ptx::clock_ns())", "%clock_hi": "((uint32_t)(::cpucuda::ptx::clock_ns() >> 32))",
    "%clock64": "::cpucuda::ptx::clock_ns()", "%globaltimer": "::cpucuda::ptx::clock_ns()",
    "%globaltimer_lo": "((uint32_t)::cpucuda::ptx::clock_ns())",
    "%globaltimer_hi": "((uint32_t)(::cpucuda::ptx::clock_ns() >> 32))",
    "%dynamic_smem_size": "((uint32_t)::cpucuda::g.dyn_size)",
}


def _special(text: str) -> str | None:
    return _SPECIAL.get(text.strip().replace("\x00", "%"))


def _strip_comments(body: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", body, flags=re.S)


def _statements(body: str) -> list[str]:
    """PTX statements in order, with scope braces as items of their own.

    A brace that opens a statement is a scope (``{ .reg .b16 t; ... }``); one inside an
    instruction is a vector operand (``mov.b32 {%0, %1}, %2``).
    """
    out, buf, vector = [], [], 0
    for ch in body:
        if ch == "{" and not "".join(buf).strip():
            out.append("{")
        elif ch == "{":
            vector += 1
            buf.append(ch)
        elif ch == "}" and vector:
            vector -= 1
            buf.append(ch)
        elif ch == "}":
            if "".join(buf).strip():
                out.append("".join(buf).strip())
            buf = []
            out.append("}")
        elif ch == ";" and not vector:
            if "".join(buf).strip():
                out.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
    if "".join(buf).strip():
        out.append("".join(buf).strip())
    return out


@dataclass
class Instruction:
    text: str
    parts: list            # "cvt.rn.f16x2.f32" -> ["cvt", "rn", "f16x2", "f32"]
    operands: list         # "%0", "{%1, %2}", "[%3+16]", "0x96"

    @property
    def name(self) -> str:
        return ".".join(self.parts)


def _guard(item: str) -> tuple[str, str]:
    """("p" or "!p", the instruction) of a guarded ``@p instr``; ("", item) when unguarded."""
    m = re.match(r"@\s*(!?\s*[%\w.$\x00]+)\s+(.*)", item, re.S)
    if not m:
        return "", item
    return m.group(1).replace(" ", "").replace("\x00", "%"), m.group(2)


def _instruction(item: str) -> Instruction:
    item = item.replace("\x00", "%")
    if item.startswith("@"):
        raise Refusal(f"cannot read the guard of `{item.split()[0]} ...`")
    m = re.match(r"([\w.:]+)\s*(.*)", item, re.S)
    if not m:
        raise Refusal(f"cannot read the instruction {item!r}")
    return Instruction(item, m.group(1).split("."), split(m.group(2), ","))


# ---------------------------------------------------------------- sources

def translate_source(text: str, defer: bool = False) -> str:
    """``text`` with every asm statement (also in #define bodies) replaced, line numbers kept.

    ``defer``: refusals stop the launch when reached instead of the compile (see :func:`translate`).
    """
    tokens = tokenize(text)
    edits: list[tuple[int, int, str]] = []
    for stmt in find_statements(text, tokens):
        original = text[stmt.start:stmt.end]
        edits.append((stmt.start, stmt.end, translate(stmt, defer) + "\n" * original.count("\n")))
    for tok in tokens:
        if tok.kind == "pp" and re.match(r"\s*#\s*define\b", tok.text) and _mentions_asm(tok.text):
            edits.append((tok.start, tok.end, _translate_macro(tok.text, defer)))
    out = text
    for a, b, rep in sorted(edits, reverse=True):
        out = out[:a] + rep + out[b:]
    return out


def _mentions_asm(text: str) -> bool:
    return re.search(r"\b(?:asm|__asm__|__asm)\b", text) is not None


def _translate_macro(directive: str, defer: bool = False) -> str:
    head = re.match(r"\s*#\s*define\s+\w+(?:\([^)]*\))?", directive)
    body = directive[head.end():].replace("\\\n", " \x01")  # a continuation: one marker per source line
    edits = []
    for stmt in find_statements(body):
        original = body[stmt.start:stmt.end]
        edits.append((stmt.start, stmt.end,
                      translate(stmt, defer).replace("\n", " ") + " \x01" * original.count("\x01")))
    for a, b, rep in reversed(edits):
        body = body[:a] + rep + body[b:]
    return directive[:head.end()] + body.replace(" \x01", "\\\n").replace("\x01", "\\\n")


def has_asm(text: str) -> bool:
    """Whether ``text`` holds an asm statement anywhere (a header that needs the translated copy)."""
    return _mentions_asm(text) and (bool(find_statements(text)) or any(
        t.kind == "pp" and _mentions_asm(t.text) for t in tokenize(text)))


def emit(ins, ctx) -> str:
    """The C++ of one instruction (OPCODES), or a Refusal naming it and the translated ones."""
    fn = OPCODES.get(ins.parts[0])
    if fn is None:
        raise Refusal(f"instruction `{ins.name}` is not translated (sandbox.cpucuda translates "
                      f"{', '.join(sorted(OPCODES))}); use the CUDA intrinsic instead, or guard the asm with "
                      "#ifndef __CPUCUDA__")
    return fn(ins, ctx)
