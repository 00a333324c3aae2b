"""The package graph of rnnkit: layers without circles.

Every import of an rnnkit module in ``src/rnnkit`` is read with ``ast`` — at module level, inside
functions, under ``if TYPE_CHECKING:`` — and the graph of modules is checked against the
layering that the package docstring of :mod:`rnnkit` declares (its table of layers is parsed
here, so the docstring is the one statement of it):

- no import of an rnnkit module inside a function (lazy imports of OPTIONAL third-party
  packages are fine: they are not rnnkit modules);
- no import from a higher layer;
- no cycle among the modules.

No edge breaks these rules: ``PENDING``, the list of exceptions, is empty and a test keeps it
so.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import rnnkit

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "rnnkit"

#: (importer, imported) -> the rule it breaks; empty, and it stays empty (a test says so): an
#: import that breaks a rule is fixed, not listed
PENDING: dict[tuple[str, str], str] = {}


def _module_name(path: Path, root: Path = SRC) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str:
    """The module that ``name`` (a module, or a module's attribute) lives in."""
    while name not in known:
        name = name.rsplit(".", 1)[0]
    return name


def imports(mods: dict[str, Path]) -> list[tuple[str, str, bool, int]]:
    """``(importer, imported module, inside a function, line)`` for every rnnkit import."""
    out: list[tuple[str, str, bool, int]] = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        in_function: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                in_function.update(id(n) for n in ast.walk(fn) if n is not fn)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    where = ".".join(base + ([node.module] if node.module else []))
                else:
                    where = node.module or ""
                targets = [f"{where}.{a.name}" for a in node.names]
            for t in targets:
                if t == "rnnkit" or t.startswith("rnnkit."):
                    dst = _resolve(t, mods)
                    if dst != mod:
                        out.append((mod, dst, id(node) in in_function, node.lineno))
    return out


#: third-party packages rnnkit may run without (extras, or numba's fallback to the reference)
OPTIONAL_PACKAGES = frozenset({"numba", "llvmlite", "h5py", "onnx", "onnxruntime", "torch", "mpi4py",
                               "matplotlib", "starlette", "uvicorn", "httpx", "websockets", "keras"})


def needs_optional(mods: dict[str, Path]) -> set[str]:
    """The rnnkit modules that import an optional package when they are imported: directly at
    module level, or through an rnnkit module that does. A function may import one of these
    (it is the door to an optional dependency, opened on first use); any other rnnkit import
    belongs at module level."""
    direct: set[str] = set()
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            if any(n.split(".")[0] in OPTIONAL_PACKAGES for n in names):
                direct.add(mod)
    top = [(a, b) for a, b, inside, _ in imports(mods) if not inside]
    found = set(direct)
    while True:
        more = {a for a, b in top if b in found} - found
        if not more:
            return found
        found |= more


def declared_layers() -> dict[str, int]:
    """``{top-level part: layer number}`` from the table in rnnkit's docstring (rows
    ``N  name  part part ...``, continued on indented lines)."""
    doc = rnnkit.__doc__ or ""
    block = doc.split("Layers, bottom to top", 1)[1].split("\n\n", 2)[1]
    layers: dict[str, int] = {}
    level = -1
    for line in block.splitlines():
        m = re.match(r"\s+(\d+)\s+\S+\s+(.*)", line)
        if m:
            level, names = int(m.group(1)), m.group(2)
        else:
            names = line
        for name in names.split():
            layers[name] = level
    return layers


def part(mod: str) -> str:
    """The top-level part a module belongs to: ``rnnkit.models._base`` -> ``models``."""
    pieces = mod.split(".")
    return pieces[1] if len(pieces) > 1 else "rnnkit"


def _cycles(edges: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_declared_layer() -> None:
    layers = declared_layers()
    missing = sorted({part(m) for m in modules()} - set(layers))
    assert not missing, f"parts with no layer in rnnkit's docstring: {missing}"
    assert layers["_errors"] == 0 and layers["rnnkit"] > layers["models"] > layers["layers"]


def test_no_function_level_import_of_rnnkit_modules() -> None:
    mods = modules()
    doors = needs_optional(mods)
    bad = sorted({(a, b) for a, b, inside, _ in imports(mods) if inside and b not in doors}
                 - set(PENDING))
    assert not bad, f"rnnkit modules imported inside functions: {bad}"


def test_no_upward_import() -> None:
    layers = declared_layers()
    bad = sorted({(a, b) for a, b, _, _ in imports(modules())
                  if layers[part(b)] > layers[part(a)]} - set(PENDING))
    assert not bad, f"imports from a higher layer: {bad}"


def test_no_cycle() -> None:
    mods = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for a, b, _, _ in imports(mods):
        if (a, b) not in PENDING:
            edges[a].add(b)
    assert _cycles(edges, list(mods)) == []


def test_optional_doors_are_the_compiled_kernels() -> None:
    """The modules a function may import lazily are those that need numba (the kernels), an
    interop extra or the server's stack; plain modules are not among them."""
    doors = needs_optional(modules())
    assert {"rnnkit.kernels._packed", "rnnkit.kernels._jit"} <= doors
    assert not doors & {"rnnkit.models._base", "rnnkit._layer", "rnnkit.layers._dense", "rnnkit.kernels"}


def test_no_exceptions() -> None:
    """Every rule holds for every import: the list of exceptions is empty."""
    assert PENDING == {}, f"imports that break a rule must be fixed, not listed: {sorted(PENDING)}"


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The reader finds imports at module level, inside functions and under TYPE_CHECKING,
    absolute and relative."""
    src = tmp_path / "rnnkit"
    (src / "sub").mkdir(parents=True)
    (src / "__init__.py").write_text("from rnnkit import sub\n")
    (src / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from rnnkit.sub.b import thing\n")
    (src / "sub" / "__init__.py").write_text("")
    (src / "sub" / "b.py").write_text("def f():\n    from .. import a\n    import numpy\n")
    mods = {_module_name(p, tmp_path): p for p in sorted(src.rglob("*.py"))}
    got = sorted((a, b, inside) for a, b, inside, _ in imports(mods))
    assert got == [("rnnkit", "rnnkit.sub", False), ("rnnkit.a", "rnnkit.sub.b", False),
                   ("rnnkit.sub.b", "rnnkit.a", True)]
    edges = {"rnnkit.a": {"rnnkit.sub.b"}, "rnnkit.sub.b": {"rnnkit.a"}}
    assert _cycles(edges, sorted(mods)) == [["rnnkit.a", "rnnkit.sub.b"]]

