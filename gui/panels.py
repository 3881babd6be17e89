"""The tabs other parts of the GUI provide (Revisions, Sessions & Snapshots), made in one place.

Owns finding each panel class and falling back to a placeholder while its module is not in this
build. A panel is constructed as `Panel(context, parent)` and told the selected task with
`set_task(task_id | None)`; that is the whole contract.
"""

from __future__ import annotations

import importlib
import logging

from gui.context import AppContext
from gui.qt import QLabel, Qt, QWidget

log = logging.getLogger(__name__)

# tab name -> (module, class, tab title)
PANELS = {
    "revisions": ("gui.revisions", "RevisionsPanel", "Revisions"),
    "sessions": ("gui.sessions", "SessionsPanel", "Sessions && Snapshots"),
}


class PanelPlaceholder(QLabel):
    """Stands in for a panel whose module is not in this build (or failed to load)."""

    def __init__(self, text: str, parent: QWidget | None = None):
        super().__init__(text, parent)
        self.setObjectName("panelPlaceholder")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWordWrap(True)
        self.setEnabled(False)

    def set_task(self, _task_id: str | None) -> None:
        pass


def make_panel(name: str, context: AppContext, parent: QWidget | None = None) -> QWidget:
    """The named panel, or a placeholder that says why it is not there."""
    module_name, class_name, _title = PANELS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return PanelPlaceholder("loading…", parent)  # not in this build yet
        log.exception("the %s panel failed to import", name)
        return PanelPlaceholder(f"The {name} panel failed to load: {exc}", parent)
    except Exception as exc:  # a broken panel must not take the window down; it says why
        log.exception("the %s panel failed to import", name)
        return PanelPlaceholder(f"The {name} panel failed to load: {exc}", parent)
    panel_class = getattr(module, class_name, None)
    if panel_class is None:
        return PanelPlaceholder("loading…", parent)
    try:
        return panel_class(context, parent)
    except Exception as exc:
        log.exception("the %s panel failed to start", name)
        return PanelPlaceholder(f"The {name} panel failed to start: {exc}", parent)


def panel_title(name: str) -> str:
    return PANELS[name][2]
