"""The import graph of sandbox/, kernels/ and reference/, function-local imports included.

lint-imports (pyproject.toml's contract, run by `make test`) holds the layers; this file holds what it
cannot: no import cycle anywhere (inside a layer too), every project module placed in a layer, and at most
a dozen function-local imports of project code, each a documented lazy choice (LAZY below).
"""
import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sandbox", "kernels", "reference")

# The function-local project imports the project keeps, each a choice of backend made at call time:
# (importing module, imported module): why it waits for the call.
LAZY = {
    ("sandbox.devices.backends", "sandbox.devices.numba_poison"):
        "the simulator's shared-memory poison patches numba.cuda's simulator: imported only when simulating",
    ("sandbox.devices.backends", "sandbox.cpucuda"):
        "the CPU executor (g++, ctypes) loads only where CUDA C runs on the CPU, not on a GPU",
    ("sandbox.analysis.traffic.variant", "sandbox.analysis.traffic.numba_sim"):
        "the Numba traffic capture patches the simulator: only a simulator process may import it",
    ("sandbox.analysis.traffic.numba_patches", "kernels.numba_cuda.simulator"):
        "the Numba family's simulator patches must be installed before the traffic patches, simulator only",
}
MAX_LAZY = 12

def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an import names (`pkg.mod.attr` -> `pkg.mod`), None outside the project."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path):
    """(imported module, line, inside a function) for every project import of `module`."""
    tree = ast.parse(path.read_text(), str(path))
    local = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            # `from pkg import mod` imports pkg.mod; `from pkg import name` imports pkg
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in {_resolve(n) for n in names} - {None, module}:
            yield target, node.lineno, id(node) in local


GRAPH = {m: sorted(set(_imports(m, p))) for m, p in MODULES.items()}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_scan_sees_a_planted_cycle_and_a_function_local_import(tmp_path):
    """The scanner's own check: a cycle closed only by a function-local import is found."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    source = tmp_path / "__init__.py"
    source.write_text("import sandbox.errors\n\ndef f():\n    from sandbox.variant import limits\n")
    found = sorted(_imports("sandbox.fake", source))
    assert found == [("sandbox.errors", 1, False), ("sandbox.variant.limits", 4, True)]


def test_no_import_cycle_counting_function_local_imports():
    edges = {m: {t for t, _, _ in targets} for m, targets in GRAPH.items()}
    cycles = _cycles(edges)
    assert not cycles, "import cycles (function-local imports included):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_function_local_project_imports_are_few_and_documented():
    local = [(m, t, line) for m, targets in GRAPH.items() for t, line, inside in targets if inside]
    undocumented = [f"{MODULES[m].relative_to(ROOT)}:{line}: imports {t} inside a function"
                    for m, t, line in local if (m, t) not in LAZY]
    assert not undocumented, ("function-local project imports: move them to the top of the module, or document "
                              "a backend choice in tests/test_layers.py's LAZY:\n" + "\n".join(undocumented))
    assert len(LAZY) <= MAX_LAZY
    stale = set(LAZY) - {(m, t) for m, t, _ in local}
    assert not stale, f"LAZY lists imports that are no longer function-local: {sorted(stale)}"


def _layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers" and not c.get("containers")]
    return [[name.strip() for name in layer.replace(":", "|").split("|")] for layer in contract["layers"]]


def test_every_project_module_sits_in_a_layer():
    """A module outside every layer would escape the contract; the package roots' __init__ (the users'
    facade: `sandbox.run`, `reference.paged_attention`) and package __init__ files above their layers are
    the exceptions."""
    named = [name for layer in _layers() for name in layer]
    unplaced = [m for m in MODULES if not any(m == n or m.startswith(n + ".") for n in named)
                and not any(n.startswith(m + ".") for n in named) and m not in PACKAGES]
    assert not unplaced, f"modules in no layer of pyproject.toml's contract: {sorted(unplaced)}"
