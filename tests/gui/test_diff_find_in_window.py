"""In the window, Ctrl+F finds in the diff while the diff has focus and in the run output while
the output has focus; elsewhere it still filters the task tree."""

from __future__ import annotations

from core.diffs import Diff, DiffLine, FileDiff, Hunk
from gui.qt import Qt


def _diff() -> Diff:
    lines = [DiffLine("+", f"line {i}", None, i) for i in range(1, 4)]
    f = FileDiff("added", None, "a.txt", None, "100644", None, "0" * 40, additions=3)
    f.hunks.append(Hunk(0, 0, 1, 3, "@@ -0,0 +1,3 @@", lines))
    return Diff("a", "b", [f])


def test_ctrl_f_belongs_to_the_pane_with_focus(qtbot, window):
    viewer = window.revisions_panel.viewer
    output = window.task_view.output
    filter_was_focused = []
    window.filter_action.triggered.connect(lambda: filter_was_focused.append(True))

    window.tabs.setCurrentWidget(window.revisions_panel)
    viewer.set_diff(_diff())
    window.activateWindow()
    viewer.unified.setFocus()
    qtbot.waitUntil(viewer.unified.hasFocus, timeout=2_000)
    qtbot.keyClick(viewer.unified, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert viewer.find_bar.isVisible()
    assert not filter_was_focused

    window.task_view.stack.setCurrentWidget(window.task_view.page)  # as for a selected task
    output.reset("one needle\ntwo\n")
    output.setFocus()
    qtbot.waitUntil(output.hasFocus, timeout=2_000)
    qtbot.keyClick(output, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert output.find_bar.isVisible()
    assert not filter_was_focused

    # Elsewhere, the task filter has it.
    window.revisions_panel.table.setFocus()
    qtbot.waitUntil(window.revisions_panel.table.hasFocus, timeout=2_000)
    qtbot.keyClick(window.revisions_panel.table, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert filter_was_focused
