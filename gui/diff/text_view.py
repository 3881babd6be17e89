"""The text of a file's diff: a read-only QPlainTextEdit with a line-number gutter, row
backgrounds by kind, and colours applied from precomputed spans.

Owns showing rows (gui.diff.model.Rows) and applying decoration results in small batches on the
GUI thread: a QSyntaxHighlighter that only reads spans computed elsewhere, so colouring costs the
GUI thread a dictionary lookup and a few setFormat calls per line.
"""

from __future__ import annotations

from gui.diff.colors import DiffColors, FormatCache, colors_for
from gui.diff.decorate import Span
from gui.diff.model import (
    ROW_ADDED,
    ROW_FILLER,
    ROW_HUNK,
    ROW_NO_NEWLINE,
    ROW_NOTE,
    ROW_REMOVED,
    Rows,
)
from gui.qt import (
    QElapsedTimer,
    QEvent,
    QFont,
    QFontDatabase,
    QPainter,
    QPaintEvent,
    QPlainTextEdit,
    QRect,
    QRectF,
    QResizeEvent,
    QSize,
    QSyntaxHighlighter,
    Qt,
    QTextCursor,
    QTextOption,
    QTimer,
    QWidget,
    Signal,
)

# Each kind of row's background: the DiffColors field that paints it (context rows have none).
ROW_BACKGROUNDS = {
    ROW_ADDED: "added_bg",
    ROW_REMOVED: "removed_bg",
    ROW_HUNK: "hunk_bg",
    ROW_NOTE: "note_bg",
    ROW_FILLER: "filler_bg",
}

NUMBERS_BOTH = "both"  # unified view: old and new line numbers
NUMBERS_OLD = "old"
NUMBERS_NEW = "new"

BATCH_BUDGET_MS = 8  # GUI time spent re-colouring per event-loop turn
BATCH_MIN_BLOCKS = 50


class _SpanHighlighter(QSyntaxHighlighter):
    """Applies spans computed off the GUI thread; never tokenises anything itself."""

    def __init__(self, view: DiffTextView):
        super().__init__(view.document())
        self._view = view

    def highlightBlock(self, text: str) -> None:
        view = self._view
        n = self.currentBlock().blockNumber()
        rows = view.rows
        if n >= len(rows) or not text:
            return
        kind = rows.kinds[n]
        formats = view.formats
        if kind == ROW_HUNK:
            self.setFormat(0, len(text), formats.hunk)
            return
        if kind in (ROW_NOTE, ROW_NO_NEWLINE):
            self.setFormat(0, len(text), formats.note)
            return
        offset = view.marker_width
        if offset:
            self.setFormat(0, offset, formats.marker)
        spans = view.spans.get(rows.refs[n])
        if not spans:
            return
        emph_kind = kind if kind in (ROW_ADDED, ROW_REMOVED) else ""
        get = formats.get
        set_format = self.setFormat
        for start, length, category, emph in spans:
            set_format(start + offset, length, get(category, emph_kind if emph else ""))


class _Gutter(QWidget):
    def __init__(self, view: DiffTextView):
        super().__init__(view)
        self._view = view

    def sizeHint(self) -> QSize:
        return QSize(self._view.gutter_width(), 0)

    def paintEvent(self, event: QPaintEvent) -> None:
        self._view.paint_gutter(self, event)


class DiffTextView(QPlainTextEdit):
    """Rows of one file's diff, one row per text block (block n shows row n)."""

    sig_colouring_idle = Signal()
    """Every pending re-colouring batch has been applied."""

    def __init__(
        self, numbers: str = NUMBERS_BOTH, *, marker: bool = True, parent: QWidget | None = None
    ):
        super().__init__(parent)
        self.numbers = numbers
        self.marker_width = 1 if marker else 0
        self.rows = Rows()
        self.spans: dict[int, list[Span]] = {}
        self.colors: DiffColors = colors_for(self.palette())
        self.formats = FormatCache(self.colors)
        self._digits = 1
        self._pending: list[int] = []
        self._batch_timer = QTimer(self)
        self._batch_timer.setSingleShot(True)
        self._batch_timer.setInterval(0)
        self._batch_timer.timeout.connect(self._apply_batch)

        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setWordWrapMode(QTextOption.WrapMode.NoWrap)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setStyleHint(QFont.StyleHint.Monospace)
        self.setFont(font)
        self.setTabStopDistance(self.fontMetrics().horizontalAdvance(" ") * 4)
        self.document().setDocumentMargin(2)

        self._gutter = _Gutter(self)
        self.updateRequest.connect(self._on_update_request)
        self._highlighter = _SpanHighlighter(self)
        self._update_gutter_width()

    # -- content ----------------------------------------------------------------------------

    def set_rows(self, rows: Rows, spans: dict[int, list[Span]]) -> None:
        """Show `rows` (replacing everything); `spans` is the shared, growing decoration table."""
        self._pending.clear()
        self._batch_timer.stop()
        self.rows = Rows()
        self.spans = spans
        self._extend_rows(rows)
        self.setPlainText("\n".join(rows.texts))
        self._update_gutter_width()

    def append_rows(self, rows: Rows) -> None:
        """Add rows at the end, keeping the scroll position and selection."""
        if not len(rows):
            return
        if not len(self.rows):
            self.set_rows(rows, self.spans)
            return
        self._extend_rows(rows)
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText("\n" + "\n".join(rows.texts))
        self._update_gutter_width()

    def _extend_rows(self, rows: Rows) -> None:
        r = self.rows
        r.kinds.extend(rows.kinds)
        r.texts.extend(rows.texts)
        r.old_nos.extend(rows.old_nos)
        r.new_nos.extend(rows.new_nos)
        r.refs.extend(rows.refs)
        top = max([n for n in rows.old_nos if n] + [n for n in rows.new_nos if n] + [1])
        self._digits = max(self._digits, len(str(top)))

    def clear_rows(self) -> None:
        self.set_rows(Rows(), {})

    def refresh_refs(self, refs: set[int] | dict) -> None:
        """Re-colour the rows showing these diff lines, visible rows first, in small batches."""
        if not refs:
            return
        wanted = [n for n, ref in enumerate(self.rows.refs) if ref in refs]
        if not wanted:
            return
        first = self.firstVisibleBlock().blockNumber()
        visible = max(1, self.viewport().height() // max(1, self.fontMetrics().height()) + 2)
        near = [n for n in wanted if first <= n < first + visible]
        rest = [n for n in wanted if not first <= n < first + visible]
        # _pending is consumed from the end: put the visible rows last.
        self._pending = rest[::-1] + self._pending + near[::-1]
        self._batch_timer.start()

    def recolour_all(self) -> None:
        self.refresh_refs(set(self.rows.refs))

    @property
    def colouring_pending(self) -> bool:
        return bool(self._pending)

    def _apply_batch(self) -> None:
        clock = QElapsedTimer()
        clock.start()
        doc = self.document()
        done = 0
        while self._pending and (done < BATCH_MIN_BLOCKS or clock.elapsed() < BATCH_BUDGET_MS):
            block = doc.findBlockByNumber(self._pending.pop())
            if block.isValid():
                self._highlighter.rehighlightBlock(block)
            done += 1
        if self._pending:
            self._batch_timer.start()
        else:
            self.sig_colouring_idle.emit()

    # -- palette ----------------------------------------------------------------------------

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.colors = colors_for(self.palette())
            self.formats = FormatCache(self.colors)
            self._highlighter.rehighlight()
            self.viewport().update()
            self._gutter.update()

    # -- row backgrounds --------------------------------------------------------------------

    def _row_brush(self, kind: str):
        name = ROW_BACKGROUNDS.get(kind)
        return getattr(self.colors, name) if name else None

    def paintEvent(self, event: QPaintEvent) -> None:
        kinds = self.rows.kinds
        if kinds:
            painter = QPainter(self.viewport())
            rect = event.rect()
            width = self.viewport().width()
            offset = self.contentOffset()
            block = self.firstVisibleBlock()
            while block.isValid():
                geo = self.blockBoundingGeometry(block).translated(offset)
                if geo.top() > rect.bottom():
                    break
                n = block.blockNumber()
                if n < len(kinds):
                    brush = self._row_brush(kinds[n])
                    if brush is not None:
                        painter.fillRect(QRectF(0, geo.top(), width, geo.height()), brush)
                block = block.next()
            painter.end()
        super().paintEvent(event)

    # -- gutter -----------------------------------------------------------------------------

    def gutter_width(self) -> int:
        columns = 2 if self.numbers == NUMBERS_BOTH else 1
        char = self.fontMetrics().horizontalAdvance("9")
        return 6 + columns * (self._digits * char + 8)

    def _update_gutter_width(self) -> None:
        width = self.gutter_width()
        if self.viewportMargins().left() != width:
            self.setViewportMargins(width, 0, 0, 0)
        cr = self.contentsRect()
        self._gutter.setGeometry(QRect(cr.left(), cr.top(), width, cr.height()))

    def _on_update_request(self, rect: QRect, dy: int) -> None:
        if dy:
            self._gutter.scroll(0, dy)
        else:
            self._gutter.update(0, rect.y(), self._gutter.width(), rect.height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._update_gutter_width()

    def paint_gutter(self, gutter: QWidget, event: QPaintEvent) -> None:
        painter = QPainter(gutter)
        c = self.colors
        painter.fillRect(event.rect(), c.gutter_bg)
        rows = self.rows
        char = self.fontMetrics().horizontalAdvance("9")
        col_w = self._digits * char + 8
        height = self.fontMetrics().height()
        block = self.firstVisibleBlock()
        offset = self.contentOffset()
        bottom = event.rect().bottom()
        painter.setPen(c.gutter_fg)
        align = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        while block.isValid():
            top = self.blockBoundingGeometry(block).translated(offset).top()
            if top > bottom:
                break
            n = block.blockNumber()
            if n < len(rows):
                numbers: tuple[int | None, ...]
                if self.numbers == NUMBERS_BOTH:
                    numbers = (rows.old_nos[n], rows.new_nos[n])
                elif self.numbers == NUMBERS_OLD:
                    numbers = (rows.old_nos[n] if rows.kinds[n] != ROW_ADDED else None,)
                else:
                    numbers = (rows.new_nos[n] if rows.kinds[n] != ROW_REMOVED else None,)
                x = 2
                for number in numbers:
                    if number is not None:
                        painter.drawText(QRect(x, int(top), col_w - 4, height), align, str(number))
                    x += col_w
            block = block.next()
        painter.end()

    # -- for tests and the file view -----------------------------------------------------------

    def row_of_ref(self, ref: int) -> int:
        try:
            return self.rows.refs.index(ref)
        except ValueError:
            return -1
