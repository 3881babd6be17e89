"""A label that fits its text to its width by eliding in the middle, so a long path keeps its
start and its end ("/home/ana/…/login-service") and shows whole in its tooltip.

Owns only the eliding; what the text is belongs to the widget using it.
"""

from __future__ import annotations

from gui.qt import QLabel, QResizeEvent, QSize, QSizePolicy, Qt, QWidget


class ElidedLabel(QLabel):
    """A one-line label whose text is elided in the middle to fit; the full text stays in
    `full_text()` (and in the tooltip, unless one is set)."""

    def __init__(self, parent: QWidget | None = None, text: str = ""):
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:
        self._full = text
        if not self.toolTip() or self.toolTip() == super().text():
            self.setToolTip(text)
        self._elide()

    def full_text(self) -> str:
        return self._full

    def minimumSizeHint(self) -> QSize:
        return QSize(
            self.fontMetrics().horizontalAdvance("…") * 4, super().minimumSizeHint().height()
        )

    def sizeHint(self) -> QSize:
        return QSize(
            self.fontMetrics().horizontalAdvance(self._full) + 8, super().sizeHint().height()
        )

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(
            self._full, Qt.TextElideMode.ElideMiddle, max(0, self.contentsRect().width())
        )
        super().setText(shown)
