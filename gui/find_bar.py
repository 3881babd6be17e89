"""A find bar for a text pane: a field, "3 of 12", previous and next.

Owns finding a string (case-insensitive) in the lines a target gives it, the current match, and
moving between matches (Enter, Shift+Enter, F3, Shift+F3; Escape closes). What a line is and how
a match is shown belong to the target (`FindTarget`), so the diff and the run output share it.
"""

from __future__ import annotations

from typing import Protocol

from gui.qt import (
    QEvent,
    QHBoxLayout,
    QKeyEvent,
    QKeySequence,
    QLabel,
    QLineEdit,
    QObject,
    QPlainTextEdit,
    Qt,
    QTextCursor,
    QToolButton,
    QWidget,
    Signal,
)

MAX_MATCHES = 10_000  # counting stops here; the label then says "10,000+"

Match = tuple[int, int, int]  # line, start, length


class FindTarget(Protocol):
    def find_lines(self) -> list[str]:
        """The text to search, one entry per line."""

    def find_origin(self) -> int:
        """The line the search starts from (where the reader is)."""

    def show_match(self, line: int, start: int, length: int) -> None:
        """Scroll to a match and select it."""


def find_all(lines: list[str], needle: str, limit: int = MAX_MATCHES) -> list[Match]:
    """Every case-insensitive occurrence of `needle`, in order (at most `limit`)."""
    if not needle:
        return []
    needle = needle.lower()
    n = len(needle)
    out: list[Match] = []
    for number, line in enumerate(lines):
        text = line.lower()
        start = text.find(needle)
        while start >= 0:
            out.append((number, start, n))
            if len(out) >= limit:
                return out
            start = text.find(needle, start + max(1, n))
    return out


def select_in(view: QPlainTextEdit, line: int, start: int, length: int) -> None:
    """Select a match in a plain text view and bring it into sight, centred."""
    block = view.document().findBlockByNumber(line)
    if not block.isValid():
        return
    cursor = QTextCursor(block)
    cursor.setPosition(block.position() + min(start, block.length() - 1))
    cursor.setPosition(
        block.position() + min(start + length, block.length() - 1),
        QTextCursor.MoveMode.KeepAnchor,
    )
    view.setTextCursor(cursor)
    view.centerCursor()


def is_find_key(event: QKeyEvent) -> bool:
    return event.matches(QKeySequence.StandardKey.Find) or (
        event.key() == Qt.Key.Key_F and event.modifiers() == Qt.KeyboardModifier.ControlModifier
    )


class FindBar(QWidget):
    """Hidden until `open()`; searches its target as the text changes."""

    sig_closed = Signal()

    def __init__(self, target: FindTarget, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("findBar")
        self._target = target
        self._matches: list[Match] = []
        self._current = -1
        self.field = QLineEdit(self)
        self.field.setObjectName("findField")
        self.field.setPlaceholderText("Find")
        self.field.setClearButtonEnabled(True)
        self.field.textChanged.connect(lambda _text: self.search())
        self.field.installEventFilter(self)
        self.count = QLabel(self)
        self.count.setObjectName("findCount")
        self.count.setMinimumWidth(self.count.fontMetrics().horizontalAdvance("10,000 of 10,000+"))
        self.count.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.previous_button = QToolButton(self)
        self.previous_button.setText("↑")
        self.previous_button.setToolTip("Previous match (Shift+Enter)")
        self.previous_button.clicked.connect(self.find_previous)
        self.next_button = QToolButton(self)
        self.next_button.setText("↓")
        self.next_button.setToolTip("Next match (Enter)")
        self.next_button.clicked.connect(self.find_next)
        self.close_button = QToolButton(self)
        self.close_button.setText("✕")
        self.close_button.setToolTip("Close (Escape)")
        self.close_button.clicked.connect(self.close_bar)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.field, 1)
        layout.addWidget(self.count)
        layout.addWidget(self.previous_button)
        layout.addWidget(self.next_button)
        layout.addWidget(self.close_button)
        self.setVisible(False)
        self._show_count()

    # -- what is found ------------------------------------------------------------------------

    @property
    def matches(self) -> list[Match]:
        return list(self._matches)

    @property
    def current(self) -> int:
        """The index of the selected match in `matches`, or -1."""
        return self._current

    def open(self, text: str | None = None) -> None:
        """Show the bar with its field focused (and `text` in it, if given)."""
        self.setVisible(True)
        if text is not None and text != self.field.text():
            self.field.setText(text)  # searches
        elif self.field.text():
            self.search()
        self.field.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.field.selectAll()

    def close_bar(self) -> None:
        self.setVisible(False)
        self._matches = []
        self._current = -1
        self.sig_closed.emit()

    def search(self) -> None:
        """Find the field's text again (the target's text may have changed), selecting the first
        match at or after where the reader is."""
        self._matches = find_all(self._target.find_lines(), self.field.text())
        self._current = -1
        if self._matches:
            origin = self._target.find_origin()
            self._current = next((i for i, m in enumerate(self._matches) if m[0] >= origin), 0)
            self._target.show_match(*self._matches[self._current])
        self._show_count()

    def recount(self) -> None:
        """Count again after the target's text grew, keeping the selected match and the view."""
        current = self._matches[self._current] if 0 <= self._current < len(self._matches) else None
        self._matches = find_all(self._target.find_lines(), self.field.text())
        if current in self._matches:
            self._current = self._matches.index(current)
        elif self._current >= len(self._matches):
            self._current = len(self._matches) - 1
        self._show_count()

    def find_next(self) -> None:
        self._step(1)

    def find_previous(self) -> None:
        self._step(-1)

    def _step(self, by: int) -> None:
        if not self._matches:
            self.search()
            return
        self._current = (self._current + by) % len(self._matches)
        self._target.show_match(*self._matches[self._current])
        self._show_count()

    def _show_count(self) -> None:
        n = len(self._matches)
        if not self.field.text():
            self.count.setText("")
        elif not n:
            self.count.setText("No matches")
        else:
            total = f"{n:,}+" if n >= MAX_MATCHES else f"{n:,}"
            self.count.setText(f"{self._current + 1:,} of {total}")
        self.previous_button.setEnabled(n > 0)
        self.next_button.setEnabled(n > 0)

    # -- keys -----------------------------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            watched is self.field
            and event.type() == QEvent.Type.ShortcutOverride
            and isinstance(event, QKeyEvent)
            and is_find_key(event)
        ):
            event.accept()  # Ctrl+F in the field selects its text, and nothing else happens
            return True
        if watched is self.field and event.type() == QEvent.Type.KeyPress:
            assert isinstance(event, QKeyEvent)
            if is_find_key(event):
                self.field.selectAll()
                return True
            key = event.key()
            shift = bool(event.modifiers() & Qt.KeyboardModifier.ShiftModifier)
            if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_F3):
                self._step(-1 if shift else 1)
                return True
            if key == Qt.Key.Key_Escape:
                self.close_bar()
                return True
        return super().eventFilter(watched, event)
