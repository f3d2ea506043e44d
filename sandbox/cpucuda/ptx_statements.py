"""The asm statements of a CUDA C source: where they are and what they say (template, operands).

    asm [volatile] ( "template" : "=r"(out), ... : "r"(in), ... : clobbers );

Read from ``source.tokenize``'s tokens (comments, strings and preprocessor lines kept apart), so an
asm inside a string or a comment is not one. ptx.py translates what is found here.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from .source import Token, tokenize

_ASM_WORDS = {"asm", "__asm__", "__asm"}
_ASM_QUALIFIERS = {"volatile", "__volatile__", "__volatile", "inline", "__inline", "__inline__"}
# Operand constraints the translation knows (CUDA's inline PTX: 16, 32, 64-bit integer registers,
# float, double, an immediate), and digits tying an input to an output.
CONSTRAINTS = ("h", "r", "l", "f", "d", "n")


@dataclass
class Operand:
    constraint: str   # without modifiers: "r", "h", "l", "f", "d", "n", or a digit (tied to that output)
    expr: str
    output: bool
    readwrite: bool   # "+r"


@dataclass
class Statement:
    start: int        # offset of `asm` in the text
    end: int          # offset just after the closing parenthesis
    template: str | None
    operands: list = field(default_factory=list)  # outputs first, then inputs (PTX numbering)
    problem: str = ""  # why it cannot be read, when template is None


# ---------------------------------------------------------------- finding statements

def find_statements(text: str, tokens: list[Token] | None = None) -> list[Statement]:
    """Every ``asm [qualifiers] ( ... )`` statement outside preprocessor lines, in order."""
    tokens = tokenize(text) if tokens is None else tokens
    out = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.kind == "word" and tok.text in _ASM_WORDS:
            j = i + 1
            while j < len(tokens) and tokens[j].text in _ASM_QUALIFIERS:
                j += 1
            if j < len(tokens) and tokens[j].text == "goto":
                out.append(Statement(tok.start, _close(tokens, j + 1), None, problem="asm goto"))
                i = j + 1
                continue
            if j < len(tokens) and tokens[j].text == "(":
                end = _close(tokens, j)
                out.append(_parse(text, tokens, tok.start, j, end))
                i = next((k for k in range(j, len(tokens)) if tokens[k].end >= end), len(tokens))
                continue
        i += 1
    return out


def _close(tokens: list[Token], open_index: int) -> int:
    depth = 0
    for k in range(open_index, len(tokens)):
        if tokens[k].text == "(":
            depth += 1
        elif tokens[k].text == ")":
            depth -= 1
            if depth == 0:
                return tokens[k].end
    return tokens[-1].end


def _parse(text: str, tokens: list[Token], start: int, open_index: int, end: int) -> Statement:
    """Split ``( template : outputs : inputs : clobbers )`` at its top-level colons."""
    inner = text[tokens[open_index].end:end - 1]
    sections = split(inner, ":")
    strings = tokenize(sections[0])
    if not strings or any(t.kind != "string" or not t.text.startswith('"') for t in strings):
        return Statement(start, end, None, problem="its template is not a string literal (a macro?)")
    template = "".join(_unescape(t.text[1:-1]) for t in strings)
    operands: list[Operand] = []
    for k, section in enumerate(sections[1:3]):
        for item in split(section, ","):
            m = re.fullmatch(r'\s*"([^"]*)"\s*\((.*)\)\s*', item, re.S)
            if not m:
                return Statement(start, end, None, problem=f"cannot read the operand {item.strip()!r}")
            flags, expr = m.group(1), m.group(2)
            constraint = flags.lstrip("=+&")
            constraint = constraint.replace("&", "")
            if constraint not in CONSTRAINTS and not constraint.isdigit():
                return Statement(start, end, None, problem=f"operand constraint {flags!r} (use h, r, l, f, d or n)")
            operands.append(Operand(constraint, expr.strip(), k == 0, "+" in flags))
    return Statement(start, end, template, operands)


def split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and string literals.

    At the top level of an asm statement ``::`` is two separators (no outputs); C++'s scope ``::``
    can only appear inside an operand's parentheses.
    """
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        ch = text[i]
        if ch == '"' or ch == "'":
            j = i + 1
            while j < len(text) and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    if len(parts) == 1 and not parts[0].strip():
        return []
    return parts if sep == ":" else [p for p in parts if p.strip()]


def _unescape(body: str) -> str:
    return json.loads('"' + body.replace("\\'", "'").replace("\\\n", "") + '"') if "\\" in body else body


class Refusal(Exception):
    """This statement (or one instruction of it) cannot run on the CPU; the message says why."""


def immediate(text: str) -> str | None:
    """A PTX integer or float immediate as a C++ expression (0f3F800000: a float's bits), else None."""
    text = text.strip()
    m = re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uU]?", text)
    if m:
        neg = text.startswith("-")
        body = text.lstrip("-").rstrip("uU")
        value = int(body, 0) if not re.fullmatch(r"0\d+", body) else int(body, 8)
        return f"{'-' if neg else ''}{value}ull" if not neg else f"(-(long long){value})"
    m = re.fullmatch(r"0[fF]([0-9a-fA-F]{8})", text)
    if m:
        return f"0x{m.group(1)}u"
    m = re.fullmatch(r"0[dD]([0-9a-fA-F]{16})", text)
    if m:
        return f"0x{m.group(1)}ull"
    return None
