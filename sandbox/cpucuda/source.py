"""Reading and rewriting CUDA C source before g++ sees it.

Jobs, all on a light tokenisation that skips comments, strings and
preprocessor lines:

* find the ``__global__`` functions (name, template or not, inside a
  namespace or not), so a module can offer every plain kernel by name;
* rewrite ``__shared__`` declarations, which g++ cannot express with a macro:
  a static one becomes function-static storage (one per template
  instantiation, shared by all fibers of the block) that the first thread of
  each block poisons with 0xFF bytes; an ``extern __shared__ T x[];`` becomes
  a pointer to the launch's dynamic shared buffer of exactly ``shared_mem``
  bytes. Rewrites keep every line where it was, so g++ and ASan line numbers
  match the original source;
* register ``__constant__`` variables so Python can fill them (get_global).

Inline PTX is translated by ptx.py.

What the parser does not understand raises ``CpuCompileError`` with the line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import CpuCompileError

_TOKEN = re.compile(
    r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<pp>^[ \t]*\#(?:\\\n|//[^\n]*|/\*.*?\*/|[^\n])*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<word>[A-Za-z_]\w*)
  | (?P<punct>[{}()\[\];<>,:])
    """,
    re.M | re.S | re.X,
)

_ATTRIBUTE_WORDS = {"__launch_bounds__", "__attribute__", "alignas", "__align__", "__declspec"}
_SHARED_QUALIFIERS = {"extern", "static", "volatile", "const", "__align__", "alignas", "__attribute__"}


@dataclass(frozen=True)
class Token:
    kind: str  # "comment", "pp", "string", "word", "punct"
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class KernelDecl:
    """A ``__global__`` function found in the source."""

    name: str
    line: int
    is_template: bool
    in_namespace: bool


def tokenize(src: str) -> list[Token]:
    """Significant tokens of ``src`` (comments dropped, pp lines kept as one token)."""
    out = []
    for m in _TOKEN.finditer(src):
        kind = m.lastgroup
        if kind != "comment":
            out.append(Token(kind, m.group(), m.start(), m.end()))
    return out


def line_of(src: str, pos: int) -> int:
    return src.count("\n", 0, pos) + 1


def _scope_kinds(tokens: list[Token]) -> list[tuple[str, ...]]:
    """For each token, the stack of open braces: 'namespace', 'externC' or 'code'."""
    stack: list[str] = []
    scopes = []
    prev: list[Token] = []  # the significant tokens before the current one
    for tok in tokens:
        scopes.append(tuple(stack))
        if tok.kind == "punct" and tok.text == "{":
            words = [t.text for t in prev[-3:]]
            if words[-1:] == ["namespace"] or words[-2:-1] == ["namespace"]:
                stack.append("namespace")
            elif len(words) >= 2 and words[-2] == "extern" and words[-1] == '"C"':
                stack.append("externC")
            else:
                stack.append("code")
        elif tok.kind == "punct" and tok.text == "}" and stack:
            stack.pop()
        if tok.kind != "pp":
            prev.append(tok)
    return scopes


def find_kernels(src: str) -> list[KernelDecl]:
    """The ``__global__`` functions of ``src``, first declaration of each name."""
    tokens = tokenize(src)
    scopes = _scope_kinds(tokens)
    found: dict[str, KernelDecl] = {}
    for i, tok in enumerate(tokens):
        if tok.kind != "word" or tok.text != "__global__":
            continue
        if "code" in scopes[i]:
            continue  # inside a class or function body: not a kernel definition
        is_template = False
        for back in reversed(tokens[:i]):
            if back.kind == "pp" or back.text in (";", "{", "}"):
                break
            if back.text == "template":
                is_template = True
                break
        name = _name_after(tokens, i + 1)
        if name is None:
            raise CpuCompileError(f"line {line_of(src, tok.start)}: cannot find the name of this __global__ function")
        found.setdefault(
            name, KernelDecl(name, line_of(src, tok.start), is_template, "namespace" in scopes[i])
        )
    return list(found.values())


def _name_after(tokens: list[Token], i: int) -> str | None:
    """The identifier before the parameter list's '(' (skipping attribute parens)."""
    last_word = None
    while i < len(tokens):
        tok = tokens[i]
        if tok.text == "(":
            if last_word in _ATTRIBUTE_WORDS:
                i = _skip_parens(tokens, i)
                last_word = None
                continue
            return last_word
        if tok.text in (";", "{", "}"):
            return None
        last_word = tok.text if tok.kind == "word" else last_word
        i += 1
    return None


def _skip_parens(tokens: list[Token], i: int) -> int:
    depth = 0
    while i < len(tokens):
        if tokens[i].text == "(":
            depth += 1
        elif tokens[i].text == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


# ---------------------------------------------------------------- __shared__

_DECLARATOR = re.compile(r"^(?P<type>.*?[\w>\s*&])\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\[\]]*\]\s*)*)$", re.S)
_ALIGN = re.compile(r"\b(?:__align__|alignas)\s*\(([^()]*)\)")
_ATTRIB = re.compile(r"\b__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")


@dataclass
class SharedRewrite:
    """The result of :func:`rewrite_shared`."""

    source: str
    names: dict[str, str]  # generated storage name -> name in the source
    dynamic: list[str] = None  # names of extern __shared__ arrays (views of dynamic shared memory)


def rewrite_shared(src: str, tag: str = "") -> SharedRewrite:
    """Rewrite every ``__shared__`` declaration of ``src`` (see module docstring).

    ``tag`` keeps generated names unique across the main source and headers.
    """
    tokens = tokenize(src)
    scopes = _scope_kinds(tokens)
    edits: list[tuple[int, int, str]] = []
    names: dict[str, str] = {}
    for i, tok in enumerate(tokens):
        if tok.kind == "pp" and re.search(r"\b__shared__\b", tok.text):
            raise CpuCompileError(
                f"line {line_of(src, tok.start)}: __shared__ inside a preprocessor directive cannot be rewritten "
                "for the CPU; declare shared memory directly in the function body"
            )
        if tok.kind != "word" or tok.text != "__shared__":
            continue
        start = _decl_start(tokens, i)
        end = _decl_end(tokens, i, src)
        in_function = "code" in scopes[i]
        text = src[tokens[start].start:tokens[end].start]
        replacement = _rewrite_one(text, in_function, f"{tag}{len(edits)}", line_of(src, tok.start), names)
        replacement += "\n" * text.count("\n")  # keep later lines where they were
        edits.append((tokens[start].start, tokens[end].end, replacement))
    out = src
    for a, b, rep in reversed(edits):
        out = out[:a] + rep + out[b:]
    dynamic = [n for store, n in names.items() if store.startswith("__cpucuda_dyn_")]
    return SharedRewrite(out, {k: v for k, v in names.items() if not k.startswith("__cpucuda_dyn_")}, dynamic)


def _decl_start(tokens: list[Token], i: int) -> int:
    j = i
    while j > 0:
        prev = tokens[j - 1]
        if prev.kind == "pp" or prev.text in (";", "{", "}", ":"):  # ':' ends a label (case 0:)
            break
        j -= 1
    return j


def _decl_end(tokens: list[Token], i: int, src: str) -> int:
    depth = 0
    for j in range(i, len(tokens)):
        t = tokens[j].text
        if t in "([{" and tokens[j].kind == "punct":
            depth += 1
        elif t in ")]}" and tokens[j].kind == "punct":
            depth -= 1
            if depth < 0:
                break
        elif t == ";" and depth == 0:
            return j
    raise CpuCompileError(f"line {line_of(src, tokens[i].start)}: cannot find the end of this __shared__ declaration")


def _rewrite_one(text: str, in_function: bool, uid: str, line: int, names: dict[str, str]) -> str:
    decl = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
    aligns = [a.strip() for a in _ALIGN.findall(decl)]
    decl = _ALIGN.sub(" ", decl)
    decl = _ATTRIB.sub(" ", decl)
    is_extern = re.search(r"\bextern\b", decl) is not None
    decl = re.sub(r"\b(?:extern|static|__shared__)\b", " ", decl)
    decl = " ".join(decl.split())
    parts = _split_top_level(decl)
    first = _DECLARATOR.match(parts[0])
    if not first:
        raise CpuCompileError(f"line {line}: cannot parse this __shared__ declaration: {text.strip()!r}")
    base_type = first.group("type").strip()
    declarators = [(first.group("name"), first.group("dims").replace(" ", ""))]
    for extra in parts[1:]:
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*((?:\[[^\[\]]*\]\s*)*)", extra)
        if not m or base_type.endswith(("*", "&")):
            raise CpuCompileError(
                f"line {line}: cannot parse this __shared__ declaration (declare one variable per line): "
                f"{text.strip()!r}"
            )
        declarators.append((m.group(1), m.group(2).replace(" ", "")))
    # 256-bit alignment at least, as shared memory on a GPU has it for the arrays code loads tiles from (wmma).
    align = "alignas(32) " + "".join(f"alignas({a}) " for a in aligns)
    out = []
    for k, (name, dims) in enumerate(declarators):
        store = f"__cpucuda_shared_{name}_{uid}_{k}"
        names[store if not is_extern else f"__cpucuda_dyn_{uid}_{k}"] = name
        if is_extern:
            if dims != "[]":
                raise CpuCompileError(f"line {line}: extern __shared__ {name} must be an array of unknown size (T {name}[];)")
            if in_function:
                out.append(f"{base_type}* const {name} = reinterpret_cast<{base_type}*>(::cpucuda::dynamic_shared());")
            else:
                out.append(
                    f"static {base_type}* {name}; static int {store} = "
                    f"::cpucuda::register_region(nullptr, 0, (void**)&{name});"
                )
            continue
        if dims == "[]" or "[]" in dims:
            raise CpuCompileError(f"line {line}: __shared__ {name}{dims}: only extern __shared__ arrays may omit a size")
        storage_type = f"::cpucuda::type_t<{base_type}{dims}>"
        if in_function:
            out.append(
                f"{align}static {storage_type} {store}; static unsigned long {store}_gen; "
                f"::cpucuda::shared_enter((void*)&{store}, sizeof({store}), &{store}_gen); "
                f"auto& {name} = {store};"
            )
        else:
            out.append(
                f"{align}static {storage_type} {name}; static int {store} = "
                f"::cpucuda::register_region((void*)&{name}, sizeof({name}), nullptr);"
            )
    return " ".join(out)


# ---------------------------------------------------------------- CuPy's translate_cucomplex

_CUCOMPLEX_INCLUDE = re.compile(r"^\s*#\s*include\s*<\s*cuComplex\.h\s*>.*$", re.M)


def translate_cucomplex(src: str, options: tuple) -> tuple[str, tuple]:
    """What CuPy's ``translate_cucomplex=True`` does: each ``#include <cuComplex.h>`` line becomes
    ``#include <cupy/cuComplex_bridge.h>`` (cuFloatComplex is then complex<float>, cuCaddf its +, ...)
    and cupy/complex.cuh comes first (here a forced include, so no line moves)."""
    return (_CUCOMPLEX_INCLUDE.sub("#include <cupy/cuComplex_bridge.h>  // translate_cucomplex", src),
            tuple(options) + ("-include", "cupy/complex.cuh"))


# ---------------------------------------------------------------- includes

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)


def user_includes(src: str, include_dirs: list[Path], base: Path | None = None, _seen=None) -> list[Path]:
    """Files that ``src`` includes from the user's ``-I`` folders, recursively.

    Their contents go into the cache key (CuPy's cache misses edits to
    headers), and those that declare ``__shared__`` are rewritten too.
    """
    seen = {} if _seen is None else _seen
    for delim, name in _INCLUDE.findall(src):
        search = ([base] if base is not None and delim == '"' else []) + list(include_dirs)
        for folder in search:
            path = (folder / name).resolve()
            if path.is_file():
                if path not in seen:
                    seen[path] = None
                    user_includes(path.read_text(errors="replace"), include_dirs, path.parent, seen)
                break
    return list(seen)


# ---------------------------------------------------------------- locations

_LINE_DIRECTIVE = re.compile(r'^[ \t]*#[ \t]*line[ \t]+(\d+)(?:[ \t]+"([^"]*)")?', re.M)


def locate(src: str, pos: int, default_file: str) -> tuple[str, int]:
    """(file, line) of offset ``pos``, honouring ``#line N "file"`` directives.

    Kernels loaded from files (sandbox/variant/cuda_source.load_source) carry
    ``#line`` directives, so messages can name the user's own file.
    """
    file, base_line, base_pos = default_file, 1, 0
    for m in _LINE_DIRECTIVE.finditer(src, 0, pos):
        file = m.group(2) if m.group(2) is not None else file
        base_line = int(m.group(1))
        base_pos = src.index("\n", m.end()) + 1 if "\n" in src[m.end():] else len(src)
    if pos < base_pos:
        return file, base_line
    return file, base_line + src.count("\n", base_pos, pos)


# ---------------------------------------------------------------- __constant__


@dataclass(frozen=True)
class ConstantDecl:
    """A file- or namespace-scope ``__constant__`` variable."""

    name: str
    line: int
    is_const: bool  # declared const: g++ may place it in read-only memory


def rewrite_constants(src: str) -> tuple[str, list[ConstantDecl]]:
    """Append a registration after each ``__constant__`` declaration (same line).

    ``static int __cpucuda_constant_N = ::cpucuda::register_constant("name", &name, sizeof(name));``
    lets ``CpuRawModule.get_global(name)`` find the variable's bytes. ``extern``
    declarations are left alone (the definition registers).
    """
    tokens = tokenize(src)
    scopes = _scope_kinds(tokens)
    edits: list[tuple[int, str]] = []
    decls: list[ConstantDecl] = []
    for i, tok in enumerate(tokens):
        if tok.kind != "word" or tok.text != "__constant__":
            continue
        line = line_of(src, tok.start)
        if "code" in scopes[i]:
            raise CpuCompileError(f"line {line}: __constant__ is only allowed at file or namespace scope")
        start = _decl_start(tokens, i)
        end = _decl_end(tokens, i, src)
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", src[tokens[start].start:tokens[end].start], flags=re.S)
        if re.search(r"\bextern\b", text):
            continue
        is_const = re.search(r"\b(?:const|constexpr)\b", text) is not None
        regs = []
        for part in _split_top_level(text):
            head = re.split(r"[={]", part, maxsplit=1)[0]
            head = _ALIGN.sub(" ", _ATTRIB.sub(" ", head))
            head = " ".join(re.sub(r"\b(?:__constant__|static|__device__|const|constexpr|volatile)\b", " ", head).split())
            m = re.search(r"([A-Za-z_]\w*)\s*((?:\[[^\[\]]*\]\s*)*)$", head)
            if not m:
                raise CpuCompileError(f"line {line}: cannot parse this __constant__ declaration: {text.strip()!r}")
            name = m.group(1)
            decls.append(ConstantDecl(name, line, is_const))
            regs.append(f'static int __cpucuda_constant_{len(decls)} = ::cpucuda::register_constant('
                        f'"{name}", (void*)&{name}, sizeof({name}));')
        edits.append((tokens[end].end, " " + " ".join(regs)))
    out = src
    for pos, text in reversed(edits):
        out = out[:pos] + text + out[pos:]
    return out, decls


def _split_top_level(decl: str) -> list[str]:
    """Split declarators at commas outside (), [], {} and <>."""
    parts, depth, cur = [], 0, []
    for ch in decl:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (p.strip() for p in parts) if p]
