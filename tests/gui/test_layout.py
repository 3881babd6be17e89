"""gui/ is laid out by feature without circles: every module can be the first one imported; and
the modules that promise no Qt (each feature's `data`, the rules and the words) reach none
through their own imports (a package's `__init__`, which shows its widget, is not theirs).

And the window is laid out for 1024×700 and up: every task action stays reachable (the tool
bar's "»" menu holds what does not fit), the task view scrolls rather than squeezing, the tabs
with the diff get the larger share of the height, the tree's State column stays narrow, and
long paths are elided in the middle with the whole path in the tooltip."""

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


# -- the window at small and large sizes ---------------------------------------------------------


def _window_with_task(qtbot, window, cairn, repo, size: tuple[int, int]):
    from gui.qt import QApplication

    task_id = cairn.tasks.new(repo, title="layout", engine="shell", instructions="true").task.id
    window.lineage.reload()
    qtbot.waitUntil(lambda: window.lineage.select_task(task_id), timeout=10_000)
    qtbot.waitUntil(lambda: window.task_view.data is not None, timeout=10_000)
    window.resize(*size)
    QApplication.processEvents()
    qtbot.wait(150)
    return task_id


def _reachable(window) -> dict[str, str]:
    """Each task action: "bar" when its button shows, "»" when the overflow menu holds it."""
    from gui.qt import QToolButton

    toolbar = window.task_view.toolbar
    extension = toolbar.findChild(QToolButton, "qt_toolbar_ext_button")
    overflow = extension.menu().actions() if extension and extension.isVisible() else []
    out = {}
    for name, action in window.task_view.buttons.items():
        button = toolbar.widgetForAction(action)
        if button is not None and button.isVisible():
            out[name] = "bar"
        elif action in overflow:
            out[name] = "»"
    return out


def test_every_task_action_is_reachable_at_1024_wide_even_with_a_wide_tree(
    qtbot, window, cairn, repo
):
    _window_with_task(qtbot, window, cairn, repo, (1024, 700))
    assert set(_reachable(window)) == set(window.task_view.buttons)
    window.main_splitter.setSizes([460, 560])  # a wide tree: the actions no longer fit
    qtbot.wait(150)
    reachable = _reachable(window)
    assert set(reachable) == set(window.task_view.buttons)
    assert "»" in reachable.values()
    from gui.qt import Qt, QToolButton

    extension = window.task_view.toolbar.findChild(QToolButton, "qt_toolbar_ext_button")
    assert extension.focusPolicy() & Qt.FocusPolicy.TabFocus  # the keyboard reaches "»" too


def test_the_diff_gets_the_larger_share_and_the_task_view_scrolls(qtbot, window, cairn, repo):
    for size in ((1024, 700), (1366, 768), (1920, 1080)):
        window.centre_splitter.setSizes([260, 520])  # the first start's proportions
        _window_with_task(qtbot, window, cairn, repo, size)
        task, tabs = window.centre_splitter.sizes()
        assert tabs > task, (size, task, tabs)
        view = window.task_view
        # Never squeezed below what its rows need: the scroll area scrolls instead.
        assert view.height() >= view.minimumSizeHint().height()


def test_the_state_column_is_sized_to_its_badges_not_a_share_of_the_pane(
    qtbot, window, cairn, repo
):
    _window_with_task(qtbot, window, cairn, repo, (1024, 700))
    tree = window.lineage.tree
    for tree_width in (240, 320, 600):
        window.main_splitter.setSizes([tree_width, 1024 - tree_width])
        qtbot.wait(200)
        state = tree.columnWidth(1)
        assert state <= 0.35 * tree.viewport().width() + 1, (tree_width, state)
        assert state >= tree.sizeHintForColumn(1) or state >= 0.34 * tree.viewport().width()


def test_a_long_path_is_elided_in_the_middle_with_the_whole_in_the_tooltip(qtbot):
    from gui.elide import ElidedLabel

    path = "/home/someone/projects/" + "deeply/" * 12 + "login-service"
    label = ElidedLabel(text=path)
    qtbot.addWidget(label)
    label.resize(240, 20)
    label.show()
    shown = label.text()
    assert "…" in shown and shown.startswith("/home") and shown.endswith("service")
    assert label.toolTip() == path and label.full_text() == path
    label.resize(4000, 20)
    assert label.text() == path


def test_the_diffs_file_names_are_elided_in_the_middle(window):
    from gui.main_window import MIDDLE_ELIDED
    from gui.qt import QAbstractItemView, Qt

    views = [window.findChild(QAbstractItemView, name) for name in sorted(MIDDLE_ELIDED)]
    assert views and all(v is not None for v in views)
    assert all(v.textElideMode() == Qt.TextElideMode.ElideMiddle for v in views)
