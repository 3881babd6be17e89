"""The sandbox's protections, shown above the risk rules: what a sandbox refuses by its
construction (nothing is asked, no spelling gets around it) and what waits for a person's
approval, with the paths a run can write. The list is core's (`core.sandboxes.PROTECTIONS`); this
module only words it.
"""

from __future__ import annotations

from html import escape as _escape

from core.sandboxes import BY_APPROVAL, BY_CONSTRUCTION, PROTECTIONS, WRITABLE_PATHS
from gui.qt import QLabel, Qt, QWidget

HOW_WORDS = {BY_CONSTRUCTION: "by construction", BY_APPROVAL: "by approval"}


def protections_html() -> str:
    """The protections as a short list (no Qt), construction first."""

    def escape(text: str) -> str:
        return _escape(text, quote=False)

    ordered = sorted(PROTECTIONS, key=lambda p: p.how != BY_CONSTRUCTION)
    items = "".join(
        f"<li><b>{escape(p.what)}</b> — <i>{HOW_WORDS.get(p.how, p.how)}</i>: "
        f"{escape(p.detail)}</li>"
        for p in ordered
    )
    writable = ", ".join(f"<code>{escape(path)}</code>" for path, _ in WRITABLE_PATHS)
    return (
        "<b>Protections</b> (Docker sandboxes)<ul style='margin-top:2px'>"
        f"{items}</ul>Writable in a sandbox: {writable}; everything else is read-only."
    )


class ProtectionsLabel(QLabel):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(protections_html(), parent)
        self.setObjectName("protections")
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
