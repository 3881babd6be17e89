"""gui/ is laid out by feature without circles: every module can be the first one imported; and
the modules that promise no Qt (each feature's `data`, the rules and the words) reach none
through their own imports (a package's `__init__`, which shows its widget, is not theirs)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GUI = REPO_ROOT / "gui"
QT_ROOTS = {"PySide6", "shiboken6"}
QT_FREE = [
    *sorted(GUI.glob("*/data.py")),
    GUI / "errors.py",
    GUI / "run_state.py",
    GUI / "task_view" / "actions.py",
    GUI / "task_view" / "output.py",
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _gui_modules() -> list[str]:
    return sorted(_module_name(p) for p in GUI.rglob("*.py"))


def _path_of(module: str) -> Path | None:
    base = REPO_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _runtime_imports(path: Path) -> set[str]:
    """The modules a file imports when it runs (imports under `if TYPE_CHECKING:` left out)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                # `from gui.pkg import data` imports the submodule gui.pkg.data
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If):
                test = node.test
                if not (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return found


def _brings_qt(start: Path) -> list[str]:
    """The chain of gui modules through which `start` reaches Qt ([] when it does not)."""
    seen: set[Path] = set()
    stack = [(start, [_module_name(start)])]
    while stack:
        path, chain = stack.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _runtime_imports(path):
            if name.split(".")[0] in QT_ROOTS or name == "gui.qt":
                return [*chain, name]
            if name.startswith("gui."):
                target = _path_of(name)
                if target is not None and target != path:
                    stack.append((target, [*chain, name]))
    return []


def test_the_qt_free_modules_import_nothing_that_brings_qt_in():
    problems = {str(p.relative_to(REPO_ROOT)): _brings_qt(p) for p in QT_FREE}
    problems = {path: chain for path, chain in problems.items() if chain}
    assert not problems, "\n".join(f"{p}: {' -> '.join(c)}" for p, c in problems.items())


IMPORT_EACH_FIRST = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "gui" or m.startswith("gui.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        failed.append(f"{name}: {exc}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_first_without_a_circle():
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH_FIRST, *_gui_modules()],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
