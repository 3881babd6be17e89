"""core/ stays free of Qt (design invariant 8), and gui/ imports Qt only through gui.qt."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CORE = REPO_ROOT / "core"
GUI = REPO_ROOT / "gui"

QT_ROOTS = {
    "PySide6",
    "PySide2",
    "PyQt6",
    "PyQt5",
    "PyQt4",
    "shiboken6",
    "shiboken2",
    "qtpy",
    "sip",
}


def _python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _imported_roots(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, top-level module) of every import, import_module("...") and __import__("...")."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if (
                name in {"import_module", "__import__"}
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                found.append((node.lineno, first.value.split(".")[0]))
    return found


def _violations(root: Path, forbidden: set[str]) -> list[str]:
    problems = []
    for path in _python_files(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _imported_roots(tree):
            if module in forbidden:
                problems.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {module}")
    return problems


def test_core_source_imports_no_qt_and_no_gui():
    assert CORE.is_dir()
    problems = _violations(CORE, QT_ROOTS | {"gui"})
    assert not problems, "core/ must not import Qt or gui/:\n" + "\n".join(problems)


def test_gui_imports_qt_only_through_gui_qt():
    if not GUI.is_dir():
        return
    problems = [
        p for p in _violations(GUI, QT_ROOTS) if not p.startswith(str(Path("gui") / "qt.py") + ":")
    ]
    assert not problems, "import Qt through gui.qt instead:\n" + "\n".join(problems)


IMPORT_ALL_CORE = r"""
import importlib, json, pkgutil, sys, traceback
import core
failed = {}
for info in pkgutil.walk_packages(core.__path__, "core.", onerror=lambda name: None):
    if info.name.rsplit(".", 1)[-1] == "__main__":
        continue  # running the CLI is not importing it
    try:
        importlib.import_module(info.name)
    except BaseException:
        failed[info.name] = traceback.format_exc(limit=-2)
qt = sorted(name for name in sys.modules if name.split(".")[0] in set(json.loads(sys.argv[1])))
print(json.dumps({"qt": qt, "failed": failed}))
"""


@pytest.fixture(scope="module")
def import_all_core_report() -> dict:
    """Import core and every module under it in a fresh interpreter; report Qt and failures."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL_CORE, json.dumps(sorted(QT_ROOTS))],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_all_of_core_loads_no_qt(import_all_core_report):
    qt = import_all_core_report["qt"]
    assert qt == [], f"importing core loaded Qt modules: {qt}"


def test_every_core_module_imports(import_all_core_report):
    # Without this, a module that fails to import would escape the Qt check above.
    failed = import_all_core_report["failed"]
    if failed:
        pytest.fail(
            "core modules that fail to import:\n"
            + "\n".join(f"{name}:\n{tb}" for name, tb in failed.items()),
            pytrace=False,
        )
