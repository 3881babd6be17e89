"""Keyboard first: the Task menu holds every task action with its keys, the tree's context
menu and the command palette offer the very same actions, Tab reaches the toolbar, and the
focus ring is drawn in the highlight colour."""

from __future__ import annotations

from gui.palette import CommandPalette, fuzzy_score, menu_actions
from gui.qt import (
    QAbstractItemView,
    QAction,
    QApplication,
    QKeySequence,
    QPalette,
    Qt,
    QToolButton,
)
from gui.shortcuts import TASK_SHORTCUTS, tooltip_with_shortcut
from gui.task_view.actions import BUTTONS, EXPORT_PATCH, START, STOP

TREE_ACTIONS = ["Rename…", "Edit Instructions…", "Archive Task", "Delete Task…", "Copy Task ID"]


def _shown_task(qtbot, window, cairn, repo, **fields) -> str:
    task_id = cairn.tasks.new(repo, title="keys", engine="shell", **fields).task.id
    window.lineage.reload()
    qtbot.waitUntil(lambda: window.lineage.select_task(task_id), timeout=10_000)
    qtbot.waitUntil(lambda: window.task_view.data is not None, timeout=10_000)
    return task_id


def test_the_task_menu_holds_every_task_action_with_its_keys(window):
    menu = window.task_menu
    actions = [a for a in menu.actions() if not a.isSeparator()]
    texts = [a.text() for a in actions]
    for name in BUTTONS:
        action = window.task_view.buttons[name]
        assert action in actions, name  # the toolbar's own QAction, not a copy
        assert action.shortcut() == QKeySequence(TASK_SHORTCUTS[name])
    for text in TREE_ACTIONS:
        assert text in texts
    assert window.new_task_action in actions and window.reconcile_action in actions
    without_keys = [a.text() for a in actions if a.shortcut().isEmpty()]
    assert without_keys == ["Re&concile Runs"]


def test_no_two_actions_of_the_window_share_a_key(window):
    seen: dict[str, str] = {}
    for action in window.findChildren(QAction):
        for keys in action.shortcuts():
            text = keys.toString()
            assert text not in seen, f"{text}: {seen.get(text)} and {action.text()}"
            seen[text] = action.text()
    assert "Ctrl+Shift+P" in seen and "Ctrl+R" in seen


def test_the_context_menu_offers_the_same_actions_as_the_task_menu(qtbot, window, cairn, repo):
    task_id = _shown_task(qtbot, window, cairn, repo, instructions="true")
    menu = window.lineage.context_menu_for(task_id)
    in_menu = set(window.task_menu.actions())
    shared = [a for a in menu.actions() if not a.isSeparator()]
    assert shared and all(a in in_menu for a in shared)
    assert [a.text() for a in shared][-5:] == TREE_ACTIONS


def test_a_shortcut_runs_the_task_action_from_anywhere_in_the_window(
    qtbot, window, cairn, repo, monkeypatch
):
    _shown_task(qtbot, window, cairn, repo, instructions="make test")
    view = window.task_view
    started: list[str] = []
    monkeypatch.setattr(view, "_start", lambda d: started.append(d["task_id"]))
    qtbot.waitUntil(lambda: view.buttons[START].isEnabled(), timeout=10_000)
    window.lineage.filter_edit.setFocus()
    qtbot.keyClick(window.lineage.filter_edit, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert started == [view.task_id]
    # A disabled action's keys do nothing, and its menu entry says why.
    assert not view.buttons[STOP].isEnabled()
    qtbot.keyClick(window.lineage.tree, Qt.Key.Key_Period, Qt.KeyboardModifier.ControlModifier)
    assert view.buttons[STOP].toolTip() == "the task has not run yet"


def test_tab_reaches_the_toolbar_and_its_tooltips_name_the_keys(qtbot, window, cairn, repo):
    _shown_task(qtbot, window, cairn, repo, instructions="make test")
    view = window.task_view
    toolbar = view.toolbar
    button = toolbar.widgetForAction(view.buttons[START])
    assert isinstance(button, QToolButton)
    assert button.focusPolicy() & Qt.FocusPolicy.TabFocus
    window.focus_task_actions()  # Ctrl+2
    qtbot.waitUntil(lambda: QApplication.focusWidget() is button)
    qtbot.keyClick(button, Qt.Key.Key_Tab)
    assert QApplication.focusWidget() is not button
    assert tooltip_with_shortcut(view.buttons[START]) == "Start (Ctrl+R)"
    export = view.buttons[EXPORT_PATCH]
    assert tooltip_with_shortcut(export) == "no changes since the base revision (Ctrl+Shift+E)"


def test_the_command_palette_finds_runs_and_explains(qtbot, window, cairn, repo):
    _shown_task(qtbot, window, cairn, repo, instructions="make test")
    window.palette_action.trigger()
    palette: CommandPalette = window.command_palette
    qtbot.waitUntil(palette.isVisible)
    everything = {e.action for e in menu_actions(window.menuBar())}
    assert window.settings_action in everything and window.task_view.buttons[STOP] in everything
    qtbot.keyClicks(palette.search, "exp")
    assert palette.current_action() is window.task_view.buttons[EXPORT_PATCH]
    assert "no changes since the base revision" in palette.reason_label.text()
    # Enter on a disabled action runs nothing and keeps the palette open with the reason.
    qtbot.keyClick(palette.search, Qt.Key.Key_Return)
    assert palette.isVisible() and palette.reason_label.text().startswith("Not now:")
    palette.search.clear()
    qtbot.keyClicks(palette.search, "filtr tasks")
    assert palette.current_action() is window.filter_action
    qtbot.keyClick(palette.search, Qt.Key.Key_Return)
    assert not palette.isVisible()
    assert window.lineage.filter_edit.hasFocus()


def test_the_palette_moves_with_the_arrow_keys(qtbot, window):
    palette = window.show_palette()
    first = palette.current_action()
    qtbot.keyClick(palette.search, Qt.Key.Key_Down)
    assert palette.current_action() is not first
    assert palette.search.hasFocus()
    qtbot.keyClick(palette.search, Qt.Key.Key_Escape)


def test_fuzzy_score_prefers_word_starts_and_runs():
    assert fuzzy_score("", "anything") == 0
    assert fuzzy_score("xyz", "Export patch") is None
    assert fuzzy_score("exp", "Export patch") > fuzzy_score("exp", "Keep the last example")  # type: ignore[operator]
    assert fuzzy_score("ep", "Export patch") is not None
    assert fuzzy_score("Export Patch", "export patch") is not None


def test_the_focus_ring_is_drawn_in_the_highlight_colour(qtbot, window, cairn, repo):
    _shown_task(qtbot, window, cairn, repo, instructions="make test")
    button = window.task_view.toolbar.widgetForAction(window.task_view.buttons[START])
    highlight = button.palette().color(QPalette.ColorRole.Highlight).rgb()

    def ring_pixels() -> int:
        image = button.grab().toImage()
        return sum(
            1
            for x in range(image.width())
            for y in (0, 1, image.height() - 1)
            if image.pixel(x, y) == highlight
        )

    assert ring_pixels() == 0
    button.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(button.hasFocus)
    assert ring_pixels() > button.width()  # the top and bottom edges at least


def test_the_menu_key_opens_the_context_menu_of_the_current_row(qtbot, window, cairn, repo):
    from gui.qt import QPoint

    task_id = _shown_task(qtbot, window, cairn, repo, instructions="true")
    tree = window.lineage.tree
    # The keyboard's menu request comes with a point that may be on no row: the current one.
    tree.customContextMenuRequested.emit(QPoint(-5, -5))
    menu = window.lineage.context_menu
    qtbot.waitUntil(menu.isVisible)
    assert window.lineage.selected_task() == task_id
    assert window.task_view.buttons[START] in menu.actions()
    menu.close()


def test_tab_goes_round_the_window_through_the_actions_and_the_tabs(qtbot, window, cairn, repo):
    _shown_task(qtbot, window, cairn, repo, instructions="make test")
    window.activateWindow()
    window.lineage.tree.setFocus()
    qtbot.waitUntil(window.lineage.tree.hasFocus)
    start = window.task_view.toolbar.widgetForAction(window.task_view.buttons[START])
    visited = []
    for _ in range(30):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        visited.append(QApplication.focusWidget())
        if visited[-1] is window.lineage.tree:
            break
    assert visited[0] is start  # straight from the tree to the task's first action
    assert window.tabs.tabBar() in visited
    timeline = window.revisions_panel.findChild(QAbstractItemView, "revisionsTimeline")
    assert timeline is not None and timeline in visited
    assert visited[-1] is window.lineage.tree  # and round again, never stuck in a table


def test_shift_f10_in_the_tree_opens_the_context_menu(qtbot, window, cairn, repo):
    _shown_task(qtbot, window, cairn, repo, instructions="true")
    window.activateWindow()
    tree = window.lineage.tree
    tree.setFocus()
    qtbot.waitUntil(tree.hasFocus)
    qtbot.keyClick(tree, Qt.Key.Key_F10, Qt.KeyboardModifier.ShiftModifier)
    menu = window.lineage.context_menu
    qtbot.waitUntil(menu.isVisible)
    assert window.lineage.delete_action in menu.actions()
    menu.close()
