"""The keyboard shortcuts of the window's actions, and tooltips that name them.

Owns which key does what, in one table, so that a shortcut is chosen once and two actions never
share a key (the window's test reads every action's keys). The actions themselves belong to the
widgets that act (the task view's toolbar, the lineage panel, the window's menus); each is one
QAction shared by its menu, toolbar, context menu and the command palette.
"""

from __future__ import annotations

from gui.qt import QAction, QEvent, QHelpEvent, QKeySequence, QObject, QToolButton, QToolTip
from gui.task_view.actions import (
    CONTINUE,
    EXPORT_PATCH,
    FORK,
    PROMOTE,
    RESUME,
    RESUME_ON_HOST,
    START,
    STOP,
)

# Task actions (gui.task_view.actions names), then the tree's own, then the window's.
TASK_SHORTCUTS = {
    START: "Ctrl+R",
    CONTINUE: "Ctrl+Shift+C",
    FORK: "Ctrl+Shift+F",
    STOP: "Ctrl+.",
    RESUME: "Ctrl+Shift+R",
    RESUME_ON_HOST: "Ctrl+Shift+H",
    PROMOTE: "Ctrl+Shift+B",
    EXPORT_PATCH: "Ctrl+Shift+E",
}
RENAME = "F2"
EDIT_INSTRUCTIONS = "Ctrl+I"
ARCHIVE = "Ctrl+Shift+X"
DELETE = "Del"
COPY_TASK_ID = "Ctrl+Shift+I"
COMMAND_PALETTE = "Ctrl+Shift+P"
FOCUS_TREE = "Ctrl+1"
FOCUS_TASK = "Ctrl+2"
FOCUS_TABS = "Ctrl+3"


def shortcut_text(action: QAction) -> str:
    """The action's first shortcut as the desktop writes it ("Ctrl+Shift+P"), or ""."""
    return action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)


def tooltip_with_shortcut(action: QAction) -> str:
    """The action's tooltip (what it does or, disabled, why not) with its keys after it."""
    keys = shortcut_text(action)
    tip = action.toolTip()
    return f"{tip} ({keys})" if keys else tip


class ShortcutTooltips(QObject):
    """Shows a tool button's tooltip with its action's keys. The action's own tooltip is left
    as its owner sets it (the reason a button is disabled), so menus and the command palette
    read it unchanged."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            event.type() == QEvent.Type.ToolTip
            and isinstance(watched, QToolButton)
            and isinstance(event, QHelpEvent)
        ):
            action = watched.defaultAction()
            if action is not None:
                QToolTip.showText(event.globalPos(), tooltip_with_shortcut(action), watched)
                return True
        return False


def show_shortcuts_on(buttons: list[QToolButton], parent: QObject) -> ShortcutTooltips:
    """Tool buttons whose tooltips name their keys."""
    tips = ShortcutTooltips(parent)
    for button in buttons:
        button.installEventFilter(tips)
    return tips
