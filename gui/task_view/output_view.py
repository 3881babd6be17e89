"""A run's output drawn as blocks: a header line per shell step and per tool call (what ran, when,
how long, how it ended) over its output, which folds away; agent messages in the body font; each
attempt under its own header; find (Ctrl+F) with next and previous; copy a block; a height that
is remembered.

Owns drawing and the pane's interaction; cutting the streams into blocks is
gui.task_view.output's (no Qt), and the structure of stored output (streams, times, attempts)
arrives as marker lines (core.output_blocks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from core.output_blocks import AttemptStart, decode
from gui.find_bar import FindBar, is_find_key, select_in
from gui.qt import (
    QColor,
    QEvent,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QObject,
    QPlainTextEdit,
    QPoint,
    QResizeEvent,
    QSettings,
    QSize,
    Qt,
    QTextCharFormat,
    QTextCursor,
    QWidget,
)
from gui.task_view.output import (
    ATTEMPT,
    CALL,
    EDIT,
    ERROR,
    FAILED,
    INTERRUPTED,
    MESSAGE,
    NOTE,
    RESULT,
    SESSION,
    STDERR,
    STEP,
    TEXT,
    TOOL,
    TOOL_RESULT,
    Block,
    OutputBlock,
    Transcript,
    header_text,
)

HEIGHT_KEY = "task_view/output_height"
DEFAULT_LINES = 14  # the pane's height at first, in lines of its fixed font
MIN_LINES = 5
GRIP = 6  # the strip along the bottom edge that sets the height

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
STATUS_COLOURS = {FAILED: "#d64541", INTERRUPTED: "#e67e22"}
OPEN_MARK, CLOSED_MARK = "▾ ", "▸ "


@dataclass
class _Drawn:
    """Where a block is in the document and what of it was drawn."""

    version: int
    first: int  # its header's line
    body: int  # its lines drawn below the header
    dropped: int  # its earliest lines left out when drawn


class _Grip(QWidget):
    """The pane's bottom edge: dragging it sets the pane's height."""

    def __init__(self, view: OutputView):
        super().__init__(view)
        self._view = view
        self._start: tuple[float, int] | None = None
        self.setCursor(Qt.CursorShape.SizeVerCursor)
        self.setToolTip("Drag to change the output's height")

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self._start = (event.globalPosition().y(), self._view.height())

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._start is not None:
            y, height = self._start
            self._view.set_height(int(height + event.globalPosition().y() - y))

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if self._start is not None:
            self._start = None
            self._view.remember_height()


class OutputView(QPlainTextEdit):
    """A run's output as blocks. `reset(text)` shows a whole output (marker lines give it its
    structure), `add_chunk` adds what arrives live, `finish` closes what is open."""

    def __init__(self, parent: QWidget | None = None, *, settings: QSettings | None = None):
        super().__init__(parent)
        self.setObjectName("runOutput")
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self._fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._formats: dict[str, QTextCharFormat] = {}
        self._settings = settings
        self._height_read = False
        self.transcript = Transcript()
        self._drawn: list[_Drawn] = []
        self._collapsed: set[int] = set()  # blocks by index
        self._press: QPoint | None = None
        self.setPlaceholderText("No output yet.")
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._context_menu)
        self.find_bar = FindBar(self, self)
        self.find_bar.setAutoFillBackground(True)
        self.find_bar.sig_closed.connect(lambda: self.setFocus())
        self._grip = _Grip(self)
        self.setViewportMargins(0, 0, 0, GRIP)
        self.set_height(self._default_height())
        self.installEventFilter(self)

    # -- feeding ------------------------------------------------------------------------------

    def reset(self, text: str = "") -> None:
        """Show a whole output anew (empty: nothing)."""
        self.transcript = Transcript()
        self._drawn = []
        self._collapsed = set()
        self.clear()
        if text:
            self._feed(text, "stdout", live=False)
        self._sync()

    def add_chunk(self, stream: str, text: str) -> None:
        """Add output that arrived now (marker lines at its start may say when and from which
        stream it came)."""
        self._feed(text, stream, live=True)
        self._sync()

    def finish(self, exit_code: int | None = None) -> None:
        """The run ended: its last unfinished lines are shown and open blocks closed."""
        self.transcript.finish(exit_code)
        self._sync()

    def add_blocks(self, blocks: list[OutputBlock]) -> None:
        """Add lines that were parsed elsewhere."""
        now = time.time()
        for line in blocks:
            self.transcript._take(line, now)
        self._sync()

    def _feed(self, text: str, stream: str, *, live: bool) -> None:
        now = time.time() if live else None
        for record in decode(text, stream):
            if isinstance(record, AttemptStart):
                self.transcript.start_attempt(record.number, record.reason, record.at)
            else:
                at = record.at if record.at is not None else now
                self.transcript.feed(record.stream, record.text, at)

    # -- drawing ------------------------------------------------------------------------------

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

    def _header_format(self, block: Block) -> QTextCharFormat:
        key = f"header:{block.kind}:{block.status}:{block.title[:2]}"
        fmt = self._formats.get(key)
        if fmt is None:
            fmt = QTextCharFormat()
            if block.kind == MESSAGE:
                self._formats[key] = fmt
                return fmt
            fmt.setFont(self._fixed)
            fmt.setFontWeight(QFont.Weight.Bold if block.kind == ATTEMPT else QFont.Weight.DemiBold)
            colour = STATUS_COLOURS.get(block.status)
            if colour is None and block.kind == CALL:
                colour = KIND_COLOURS[EDIT if not block.title.startswith("$") else TOOL]
            if colour is None and block.kind not in (STEP, TEXT, ATTEMPT):
                colour = KIND_COLOURS.get(block.kind)
            if colour:
                fmt.setForeground(QColor(colour))
            if block.kind == ATTEMPT:
                fmt.setBackground(self.palette().alternateBase())
            self._formats[key] = fmt
        return fmt

    def _header_line(self, index: int, block: Block) -> str:
        if block.kind == MESSAGE:
            return block.title
        if not block.collapsible:
            return header_text(block)
        return (CLOSED_MARK if index in self._collapsed else OPEN_MARK) + header_text(block)

    def _sync(self) -> None:
        """Bring the document up to the transcript, redrawing only blocks that changed."""
        blocks = self.transcript.blocks
        drawn = self._drawn
        i = 0
        while i < len(drawn) and i < len(blocks) and drawn[i].version == blocks[i].version:
            i += 1
        if i == len(blocks) and i == len(drawn):
            return
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        try:
            if i == len(drawn) - 1:
                self._grow_last(cursor, i)
                i += 1
            elif i < len(drawn):
                self._cut_from(cursor, drawn[i].first)
                del drawn[i:]
            for j in range(i, len(blocks)):
                self._draw(cursor, j)
        finally:
            cursor.endEditBlock()
        if at_end:
            bar.setValue(bar.maximum())
        if self.find_bar.isVisible() and self.find_bar.field.text():
            self.find_bar.recount()

    def _cut_from(self, cursor: QTextCursor, line: int) -> None:
        doc = self.document()
        if line <= 0:
            cursor.select(QTextCursor.SelectionType.Document)
            cursor.removeSelectedText()
            return
        start = doc.findBlockByNumber(line - 1)
        cursor.setPosition(start.position() + start.length() - 1)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()

    def _new_line(self, cursor: QTextCursor) -> None:
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if not self.document().isEmpty():
            cursor.insertBlock()

    def _draw(self, cursor: QTextCursor, index: int) -> None:
        block = self.transcript.blocks[index]
        self._new_line(cursor)
        first = cursor.blockNumber()
        cursor.insertText(self._header_line(index, block), self._header_format(block))
        for line in block.lines:
            self._draw_line(cursor, line, block, index)
        self._drawn.append(_Drawn(block.version, first, len(block.lines), block.dropped))

    def _draw_line(self, cursor: QTextCursor, line: OutputBlock, block: Block, index: int) -> None:
        cursor.insertBlock()
        kind = MESSAGE if block.kind == MESSAGE else line.kind
        cursor.insertText(line.text, self._format(kind))
        if index in self._collapsed:
            cursor.block().setVisible(False)

    def _grow_last(self, cursor: QTextCursor, index: int) -> None:
        block = self.transcript.blocks[index]
        drawn = self._drawn[index]
        doc = self.document()
        header = doc.findBlockByNumber(drawn.first)
        cursor.setPosition(header.position())
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(self._header_line(index, block), self._header_format(block))
        gone = min(block.dropped - drawn.dropped, drawn.body)
        if gone > 0:  # the earliest lines were let go: they leave the document too
            first = header.next()
            last = doc.findBlockByNumber(drawn.first + gone)
            cursor.setPosition(first.position() - 1)
            cursor.setPosition(last.position() + last.length() - 1, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            drawn.body -= gone
        drawn.dropped = block.dropped
        # Lines the transcript had added since, after what is drawn.
        new = len(block.lines) - drawn.body
        cursor.movePosition(QTextCursor.MoveOperation.End)
        for line in block.lines[len(block.lines) - new :] if new > 0 else []:
            self._draw_line(cursor, line, block, index)
        drawn.version = block.version
        drawn.body = len(block.lines)
        if index in self._collapsed:
            self._relayout()

    # -- folding ------------------------------------------------------------------------------

    def block_at_line(self, line: int) -> int:
        """The index of the block drawn on this line of the document, or -1."""
        lo, hi = 0, len(self._drawn) - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if self._drawn[mid].first <= line:
                found, lo = mid, mid + 1
            else:
                hi = mid - 1
        return found

    def is_collapsed(self, index: int) -> bool:
        return index in self._collapsed

    def set_collapsed(self, index: int, collapsed: bool, *, relayout: bool = True) -> None:
        if not 0 <= index < len(self._drawn):
            return
        block = self.transcript.blocks[index]
        if not block.collapsible or (index in self._collapsed) == collapsed:
            return
        if collapsed:
            self._collapsed.add(index)
        else:
            self._collapsed.discard(index)
        drawn = self._drawn[index]
        doc = self.document()
        cursor = QTextCursor(doc)
        header = doc.findBlockByNumber(drawn.first)
        cursor.setPosition(header.position())
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(self._header_line(index, block), self._header_format(block))
        line = header.next()
        for _ in range(drawn.body):
            if not line.isValid():
                break
            line.setVisible(not collapsed)
            line = line.next()
        if relayout:
            self._relayout()

    def set_all_collapsed(self, collapsed: bool) -> None:
        for index, block in enumerate(self.transcript.blocks):
            if block.collapsible:
                self.set_collapsed(index, collapsed, relayout=False)
        self._relayout()

    def _relayout(self) -> None:
        doc = self.document()
        doc.markContentsDirty(0, doc.characterCount())
        self.viewport().update()

    def block_text(self, index: int) -> str:
        return self.transcript.blocks[index].text()

    def copy_block(self, index: int) -> None:
        if 0 <= index < len(self.transcript.blocks):
            QGuiApplication.clipboard().setText(self.block_text(index))

    # -- finding ------------------------------------------------------------------------------

    def open_find(self) -> None:
        selected = self.textCursor().selectedText()
        self._place_find_bar()
        self.find_bar.open(selected if selected and "\u2029" not in selected else None)
        self.find_bar.raise_()

    def find_lines(self) -> list[str]:
        return self.document().toPlainText().split("\n")

    def find_origin(self) -> int:
        return self.textCursor().blockNumber()

    def show_match(self, line: int, start: int, length: int) -> None:
        block = self.document().findBlockByNumber(line)
        if block.isValid() and not block.isVisible():
            self.set_collapsed(self.block_at_line(line), False)
        select_in(self, line, start, length)

    def _place_find_bar(self) -> None:
        hint = self.find_bar.sizeHint()
        width = min(max(hint.width(), 360), self.viewport().width())
        self.find_bar.setGeometry(self.viewport().width() - width, 0, width, hint.height())

    # -- height -------------------------------------------------------------------------------

    def _line_height(self) -> int:
        return self.fontMetrics().lineSpacing()

    def _default_height(self) -> int:
        return DEFAULT_LINES * self._line_height() + 2 * self.frameWidth() + GRIP + 8

    def set_height(self, height: int) -> None:
        """The pane's height (it takes at least this much; the layout may give more)."""
        low = MIN_LINES * self._line_height() + GRIP
        self.setMinimumHeight(max(low, min(height, 2000)))
        self.updateGeometry()

    def remember_height(self) -> None:
        settings = self._find_settings()
        if settings is not None:
            settings.setValue(HEIGHT_KEY, self.minimumHeight())

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(hint.width(), max(self.minimumHeight(), self._default_height()))

    def _find_settings(self) -> QSettings | None:
        if self._settings is None:
            widget = self.parent()
            while widget is not None:
                context = getattr(widget, "context", None)
                settings = getattr(context, "settings", None)
                if isinstance(settings, QSettings):
                    self._settings = settings
                    break
                widget = widget.parent()
        return self._settings

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._height_read:
            self._height_read = True
            settings = self._find_settings()
            saved = settings.value(HEIGHT_KEY) if settings is not None else None
            try:
                if saved is not None:
                    self.set_height(int(saved))
            except (TypeError, ValueError):
                pass

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        rect = self.contentsRect()
        self._grip.setGeometry(rect.left(), rect.bottom() - GRIP + 1, rect.width(), GRIP)
        if self.find_bar.isVisible():
            self._place_find_bar()

    # -- mouse, keys, menu --------------------------------------------------------------------

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self._press = event.position().toPoint()
        super().mousePressEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        super().mouseReleaseEvent(event)
        press, self._press = self._press, None
        if press is None or event.button() != Qt.MouseButton.LeftButton:
            return
        if (event.position().toPoint() - press).manhattanLength() > 4:
            return  # a drag selects text
        line = self.cursorForPosition(press).blockNumber()
        index = self.block_at_line(line)
        if index >= 0 and self._drawn[index].first == line:
            self.set_collapsed(index, index not in self._collapsed)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self and isinstance(event, QKeyEvent):
            if event.type() == QEvent.Type.ShortcutOverride and is_find_key(event):
                event.accept()  # Ctrl+F here finds in the output, not in the task list
                return True
            if event.type() == QEvent.Type.KeyPress:
                if is_find_key(event):
                    self.open_find()
                    return True
                if event.key() == Qt.Key.Key_F3 and self.find_bar.field.text():
                    shift = event.modifiers() & Qt.KeyboardModifier.ShiftModifier
                    self.find_bar.find_previous() if shift else self.find_bar.find_next()
                    return True
                if event.key() == Qt.Key.Key_Escape and self.find_bar.isVisible():
                    self.find_bar.close_bar()
                    return True
                line = self.textCursor().blockNumber()
                index = self.block_at_line(line)
                if (
                    event.matches(QKeySequence.StandardKey.Copy)
                    and not self.textCursor().hasSelection()
                    and index >= 0
                ):  # Ctrl+C with nothing selected copies the block the cursor is in
                    self.copy_block(index)
                    return True
                on_header = index >= 0 and self._drawn[index].first == line
                if event.key() in (Qt.Key.Key_Space, Qt.Key.Key_Return) and on_header:
                    self.set_collapsed(index, index not in self._collapsed)
                    return True
        return super().eventFilter(watched, event)

    def _context_menu(self, pos: QPoint) -> None:
        menu = self.createStandardContextMenu(pos)
        index = self.block_at_line(self.cursorForPosition(pos).blockNumber())
        menu.addSeparator()
        if index >= 0:
            block = self.transcript.blocks[index]
            copy = menu.addAction("Copy Block")
            copy.triggered.connect(lambda: self.copy_block(index))
            if block.collapsible:
                fold = menu.addAction(
                    "Expand Block" if index in self._collapsed else "Collapse Block"
                )
                fold.triggered.connect(
                    lambda: self.set_collapsed(index, index not in self._collapsed)
                )
        menu.addAction("Collapse All").triggered.connect(lambda: self.set_all_collapsed(True))
        menu.addAction("Expand All").triggered.connect(lambda: self.set_all_collapsed(False))
        menu.addSeparator()
        menu.addAction("Find…").triggered.connect(self.open_find)
        menu.popup(self.viewport().mapToGlobal(pos))
