"""core/'s import graph, read from the source: dependencies point one way.

No module of core/ takes part in an import circle; only the adapters import the facade
(`core.app`); and modules import each other at the top, not inside functions to dodge a circle
(the few lazy imports that keep start-up fast are listed here with their reason).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CORE = REPO_ROOT / "core"

# Modules that may import core.app: the command line and the helper processes' entry points.
ADAPTERS = ("core.cli",)

# (importing module, imported module) pairs allowed inside a function, with why.
LAZY_IMPORTS = {
    ("core.sandboxes", "core.sandbox.docker"): "the Docker client is slow to import",
    ("core.sandboxes", "core.sandbox.host"): "chosen only when the user asks for no isolation",
    ("core.sandboxes", "core.sandbox.podman"): "the Docker client, chosen for a Podman host",
    ("core.sandboxes", "core.sandbox.remote"): "the Docker client, chosen for an SSH host",
    ("core.sandboxes", "core.sandbox"): "the package of the two backends above",
    ("core.sandbox.egress", "core.credentials"): "the proxy process reads the keyring only when "
    "it serves a model endpoint",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(CORE.rglob("*.py")) if "__pycache__" not in p.parts}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The core module `name` stands for (a module, or the package an attribute is taken from)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[str, bool, int]]:
    """(imported core module, imported inside a function, line) for every import of `module`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    found: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    package = module if is_package else module.rpartition(".")[0]
                    for _ in range(child.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}".rstrip(".")
                names = [f"{base}.{alias.name}" for alias in child.names]
            for name in names:
                target = _resolve(name, known)
                if target is None or target == module:
                    continue
                # Importing a module runs its packages' __init__ first (a package a module
                # belongs to is being set up already when the module runs).
                parts = target.split(".")
                for i in range(2, len(parts) + 1):
                    package = ".".join(parts[:i])
                    if package == target or not module.startswith(package + "."):
                        found.append((package, in_function, child.lineno))
            visit(child, nested)

    visit(tree, False)
    return found


def _graph() -> tuple[dict[str, set[str]], list[tuple[str, str, bool, int]]]:
    known = _modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    listed: list[tuple[str, str, bool, int]] = []
    for module, path in known.items():
        for target, in_function, line in _imports(module, path, known):
            if target != module:
                edges[module].add(target)
                listed.append((module, target, in_function, line))
    return edges, listed


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            strongconnect(v)
    return found


def test_the_graph_is_read_from_the_source():
    edges, _ = _graph()
    assert "core.app" in edges and "core.runs.service" in edges["core.app"]
    assert "core.store" in edges["core.context"]


def test_core_has_no_import_circle():
    edges, _ = _graph()
    assert _cycles(edges) == []


def test_a_circle_would_be_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_adapters_import_the_facade():
    _, listed = _graph()
    importers = {
        f"{module}:{line}"
        for module, target, _, line in listed
        if target == "core.app" and not module.startswith(ADAPTERS)
    }
    assert importers == set()


def test_core_modules_import_each_other_at_the_top():
    _, listed = _graph()
    inside = {
        f"{module}:{line} imports {target}"
        for module, target, in_function, line in listed
        if in_function and (module, target) not in LAZY_IMPORTS and target != "core"
    }
    assert inside == set()
