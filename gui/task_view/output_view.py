"""A run's output drawn as blocks: agent messages in the body font, commands, edits and plain
lines in a fixed font, semantic colours that read on light and dark.

Owns drawing; cutting the streams into blocks is gui.task_view.output's (no Qt).
"""

from __future__ import annotations

from gui.qt import (
    QColor,
    QFont,
    QFontDatabase,
    QPlainTextEdit,
    QTextCharFormat,
    QTextCursor,
    QWidget,
)
from gui.task_view.output import (
    EDIT,
    ERROR,
    MESSAGE,
    NOTE,
    RESULT,
    SESSION,
    STDERR,
    TOOL,
    TOOL_RESULT,
    OutputBlock,
    OutputReader,
)

MAX_OUTPUT_LINES = 20_000
KIND_COLOURS = {
    TOOL: "#2e86de",
    EDIT: "#2e9e5b",
    ERROR: "#d64541",
    RESULT: "#2e9e5b",
    STDERR: "#e67e22",
    SESSION: "#8e8e8e",
    NOTE: "#8e8e8e",
    TOOL_RESULT: "#8e8e8e",
}


class OutputView(QPlainTextEdit):
    """A run's output drawn as blocks: messages in the body font, commands and plain lines in
    a fixed font, semantic colours for commands, edits and errors (they read on light and
    dark). Keeps the last MAX_OUTPUT_LINES lines."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("runOutput")
        self.setReadOnly(True)
        self.setMaximumBlockCount(MAX_OUTPUT_LINES)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self._fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._reader = OutputReader()
        self._formats: dict[str, QTextCharFormat] = {}
        self.setPlaceholderText("No output yet.")

    def _format(self, kind: str) -> QTextCharFormat:
        fmt = self._formats.get(kind)
        if fmt is None:
            fmt = QTextCharFormat()
            if kind != MESSAGE:
                fmt.setFont(self._fixed)
            if kind in (TOOL, EDIT, ERROR, RESULT):
                fmt.setFontWeight(QFont.Weight.DemiBold)
            colour = KIND_COLOURS.get(kind)
            if colour:
                fmt.setForeground(QColor(colour))
            self._formats[kind] = fmt
        return fmt

    def reset(self, text: str = "") -> None:
        self.clear()
        self._reader = OutputReader()
        if text:
            self.add_chunk("stdout", text)

    def add_chunk(self, stream: str, text: str) -> None:
        self.add_blocks(self._reader.feed(stream, text))

    def finish(self) -> None:
        self.add_blocks(self._reader.flush())

    def add_blocks(self, blocks: list[OutputBlock]) -> None:
        if not blocks:
            return
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        for block in blocks:
            if not self.document().isEmpty():
                cursor.insertBlock()
            cursor.insertText(block.text, self._format(block.kind))
        cursor.endEditBlock()
        if at_end:
            bar.setValue(bar.maximum())
