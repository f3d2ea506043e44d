"""The ``template`` keyword nvcc does without and g++ needs, inserted where the source omits it.

    vec_cast<tgt_float_t, src_float_t>::cast<vec_size>(dst, src);            // nvcc (EDG) accepts
    vec_cast<tgt_float_t, src_float_t>::template cast<vec_size>(dst, src);   // what C++ requires

Inside a template, a member of a dependent class named ``A<T>::f`` is not taken to be a template
unless ``template`` says so; EDG guesses from the ``<``, g++ parses ``f < vec_size`` as a
comparison and fails. The executor applies one documented fix-up to the kernel's source and to
every header it compiles (never to the files themselves; the rewritten copies live in the cache):
a call ``X<...>::name<...>(`` whose class part ends in template arguments gets ``template``
before ``name``. Only that shape is rewritten: a member template call is the one reading in which
``<...>(`` after a qualified name is valid C++ (a comparison chain ``a < b > (c)`` with a
qualified ``a`` would need the same tokens, and no kernel code writes it). Where the name is not a
dependent member template, ``template`` is still allowed (C++11) and changes nothing.
"""
from __future__ import annotations

from .source import Token, tokenize


def _is(tok: Token, text: str) -> bool:
    return tok.kind == "punct" and tok.text == text


def _closing_angle(tokens: list[Token], i: int, src: str) -> int | None:
    """Index of the ``>`` that closes the ``<`` at ``i`` (parentheses nest inside), else None."""
    depth, parens = 0, 0
    for j in range(i, min(len(tokens), i + 200)):
        t = tokens[j]
        if t.kind == "pp" or (t.kind == "punct" and t.text in ";{}"):
            return None
        if t.kind != "punct":
            continue
        if t.text in "([":
            parens += 1
        elif t.text in ")]":
            parens -= 1
            if parens < 0:
                return None
        elif parens == 0 and t.text == "<":
            depth += 1
        elif parens == 0 and t.text == ">" and src[t.start - 1:t.start] != "-":
            depth -= 1
            if depth == 0:
                return j
    return None


def sites(src: str) -> list[int]:
    """Offsets in ``src`` where ``template `` must be inserted."""
    tokens = tokenize(src)
    out = []
    for i in range(3, len(tokens) - 1):
        name, c2, c1, close = tokens[i], tokens[i - 1], tokens[i - 2], tokens[i - 3]
        if name.kind != "word" or name.text == "template" or not (_is(c1, ":") and _is(c2, ":")):
            continue
        if c2.start != c1.end or not _is(close, ">") or src[close.start - 1:close.start] == "-":
            continue
        if not _is(tokens[i + 1], "<"):
            continue
        end = _closing_angle(tokens, i + 1, src)
        if end is not None and end + 1 < len(tokens) and _is(tokens[end + 1], "("):
            out.append(name.start)
    return out


def insert(src: str) -> str:
    """``src`` with ``template`` inserted at every :func:`sites` offset (lines and columns after kept on one line)."""
    for pos in reversed(sites(src)):
        src = src[:pos] + "template " + src[pos:]
    return src
