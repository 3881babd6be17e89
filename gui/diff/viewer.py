"""The diff viewer: a file list beside the selected file's diff, unified or side by side.

Owns what is shown for a `core.diffs.Diff` (the core's size-cap banner, the file list, one file's
rows in chunks with a "show more" button) and keeping colouring off the GUI thread: each chunk's
lines are decorated in background jobs of growing size, and results for a file or diff that is no
longer shown are dropped by a request counter (and their work cancelled).
"""

from __future__ import annotations

import threading

from core.diffs import Diff, FileDiff
from gui.diff.decorate import DecorateRequest, Span, decorate
from gui.diff.file_list import COL_COUNTS, COL_PATH, COL_STATUS, FileListModel
from gui.diff.model import (
    SIDE_BY_SIDE,
    UNIFIED,
    FileLines,
    Rows,
    chunk_end,
    file_lines,
    file_summary,
    side_by_side_rows,
    unified_rows,
)
from gui.diff.text_view import NUMBERS_BOTH, NUMBERS_NEW, NUMBERS_OLD, DiffTextView
from gui.qt import (
    QAbstractItemView,
    QButtonGroup,
    QEvent,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QStackedWidget,
    Qt,
    QTableView,
    QTimer,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
)

CHUNK_LINES = 2_000  # rows shown at first, and added by each "show more"
CHUNK_CHARS = 400_000  # ... or fewer rows when they are long
FIRST_DECORATE_BATCH = 300  # lines coloured by the first job: about a screenful, back quickly
MAX_DECORATE_BATCH = 4_000
FILE_DEBOUNCE_MS = 60

PAGE_MESSAGE, PAGE_UNIFIED, PAGE_SIDE = range(3)


class _SideBySide(QWidget):
    """Old and new side in two text views that scroll together, row for row."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.old = DiffTextView(NUMBERS_OLD, marker=False)
        self.new = DiffTextView(NUMBERS_NEW, marker=False)
        self.old.setObjectName("diffOldSide")
        self.new.setObjectName("diffNewSide")
        for view in (self.old, self.new):
            # Both always have a horizontal bar, so their rows stay level to the last one.
            view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        splitter.addWidget(self.old)
        splitter.addWidget(self.new)
        splitter.setChildrenCollapsible(False)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        self._syncing = False
        self.old.verticalScrollBar().valueChanged.connect(lambda v: self._sync(self.new, v))
        self.new.verticalScrollBar().valueChanged.connect(lambda v: self._sync(self.old, v))

    def _sync(self, other: DiffTextView, value: int) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            other.verticalScrollBar().setValue(value)
        finally:
            self._syncing = False

    def views(self) -> tuple[DiffTextView, DiffTextView]:
        return self.old, self.new


class DiffViewer(QWidget):
    """Shows a Diff. `jobs` (a gui.jobs.JobRunner) runs the colouring off the GUI thread."""

    sig_file_shown = Signal(int)
    """The rows of the file at this index of the file list are in the view."""

    sig_decorated = Signal(int)
    """Every loaded row of the file at this index is coloured."""

    def __init__(self, jobs, parent: QWidget | None = None):
        super().__init__(parent)
        self._jobs = jobs
        self._job_key = f"diff-colours-{id(self)}"
        self._diff: Diff | None = None
        self._sizes: dict[str, int] = {}
        self._mode = UNIFIED
        self._generation = 0
        self._cancel = threading.Event()
        self._file_index = -1
        self._file: FileDiff | None = None
        self._lines: FileLines | None = None
        self._rows: dict[str, object] = {}
        self._shown = 0
        self._ref_limit = 0
        self._spans: dict[int, list[Span]] = {}
        self._decorated_upto = 0
        self._decorating = False
        self._batch = FIRST_DECORATE_BATCH
        self._pending_file = -1

        self.banner = QLabel(self)
        self.banner.setObjectName("diffTruncatedBanner")
        self.banner.setWordWrap(True)
        self.banner.setVisible(False)

        self.file_model = FileListModel(self)
        self.file_list = QTableView(self)
        self.file_list.setObjectName("diffFileList")
        self.file_list.setModel(self.file_model)
        self.file_list.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.file_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.file_list.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.file_list.verticalHeader().setVisible(False)
        self.file_list.setShowGrid(False)
        self.file_list.setWordWrap(False)
        header = self.file_list.horizontalHeader()
        header.setSectionResizeMode(COL_STATUS, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COL_PATH, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(COL_COUNTS, QHeaderView.ResizeMode.ResizeToContents)
        self.file_list.selectionModel().currentRowChanged.connect(self._on_file_row_changed)

        self.file_heading = QLabel(self)
        self.file_heading.setObjectName("diffFileHeading")
        self.file_heading.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.unified_button = QToolButton(self)
        self.unified_button.setText("Unified")
        self.side_button = QToolButton(self)
        self.side_button.setText("Side by side")
        group = QButtonGroup(self)
        for button in (self.unified_button, self.side_button):
            button.setCheckable(True)
            group.addButton(button)
        self.unified_button.setChecked(True)
        self.unified_button.clicked.connect(lambda: self.set_mode(UNIFIED))
        self.side_button.clicked.connect(lambda: self.set_mode(SIDE_BY_SIDE))

        self.message = QLabel("No diff to show", self)
        self.message.setObjectName("diffMessage")
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message.setWordWrap(True)
        self.unified = DiffTextView(NUMBERS_BOTH, marker=True)
        self.unified.setObjectName("diffUnified")
        self.side = _SideBySide()
        self.stack = QStackedWidget(self)
        self.stack.addWidget(self.message)
        self.stack.addWidget(self.unified)
        self.stack.addWidget(self.side)
        for view in self._all_views():
            view.sig_colouring_idle.connect(self._decorate_next)

        self.more_button = QPushButton(self)
        self.more_button.setObjectName("diffShowMore")
        self.more_button.setVisible(False)
        self.more_button.clicked.connect(self.show_more)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.file_heading, 1)
        top.addWidget(self.unified_button)
        top.addWidget(self.side_button)
        right = QWidget(self)
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addLayout(top)
        right_layout.addWidget(self.stack, 1)
        right_layout.addWidget(self.more_button)

        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.addWidget(self.file_list)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setSizes([260, 780])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.banner)
        layout.addWidget(self.splitter, 1)

        self._file_timer = QTimer(self)
        self._file_timer.setSingleShot(True)
        self._file_timer.setInterval(FILE_DEBOUNCE_MS)
        self._file_timer.timeout.connect(self._show_pending_file)
        self._style_banner()
        self.show_message("No diff to show")

    # -- what is shown ----------------------------------------------------------------------

    @property
    def diff(self) -> Diff | None:
        return self._diff

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def file_index(self) -> int:
        return self._file_index

    @property
    def shown_rows(self) -> int:
        return self._shown

    @property
    def total_rows(self) -> int:
        return len(self._current_rows()[0]) if self._file is not None else 0

    @property
    def colouring_complete(self) -> bool:
        return (
            self._file is not None
            and not self._decorating
            and self._decorated_upto >= self._ref_limit
            and not any(v.colouring_pending for v in self._active_views())
        )

    def shown_text(self) -> str:
        """The text in the active view (the new side when side by side)."""
        page = self.stack.currentIndex()
        if page == PAGE_UNIFIED:
            return self.unified.toPlainText()
        if page == PAGE_SIDE:
            return self.side.new.toPlainText()
        return self.message.text()

    def show_message(self, text: str) -> None:
        """Replace the diff with a sentence (loading, nothing selected, an error)."""
        self._next_generation()
        self._diff = None
        self._file = None
        self._file_index = -1
        self.file_model.set_files([])
        self.banner.setVisible(False)
        self.file_heading.setText("")
        self.more_button.setVisible(False)
        self.message.setText(text)
        for view in self._all_views():
            view.clear_rows()
        self.stack.setCurrentIndex(PAGE_MESSAGE)

    def set_diff(self, diff: Diff, blob_sizes: dict[str, int] | None = None) -> None:
        """Show a diff, its first file selected. `blob_sizes` (blob id → bytes) lets binary files
        say how big they are."""
        self.show_message("No differences between these revisions" if not diff.files else "")
        self._diff = diff
        self._sizes = dict(blob_sizes or {})
        if diff.truncated:
            self.banner.setText(
                f"This diff is incomplete: {diff.note or 'it was cut at its size cap'}. "
                "Files past the cap are listed without their changes."
            )
            self.banner.setVisible(True)
        if not diff.files:
            return
        self.file_model.set_palette(self.palette())
        self.file_model.set_files(diff.files)
        self._show_file(0)
        self._select_list_row(0)

    def select_file(self, index: int) -> None:
        """Show the file at `index` of the list now (the list's own selection is debounced)."""
        self._file_timer.stop()
        self._show_file(index)
        self._select_list_row(index)

    def _select_list_row(self, index: int) -> None:
        selection = self.file_list.selectionModel()
        selection.blockSignals(True)
        try:
            self.file_list.selectRow(index)
        finally:
            selection.blockSignals(False)
        self.file_list.viewport().update()

    def set_mode(self, mode: str) -> None:
        if mode not in (UNIFIED, SIDE_BY_SIDE):
            raise ValueError(f"unknown diff mode {mode!r}")
        self.unified_button.setChecked(mode == UNIFIED)
        self.side_button.setChecked(mode == SIDE_BY_SIDE)
        if mode == self._mode:
            return
        self._mode = mode
        if self._file is None:
            return
        rows = self._current_rows()[0]
        shown = len(rows)
        for i, ref in enumerate(rows.refs):  # cover the same diff lines as before
            if ref >= self._ref_limit:
                shown = i
                break
        self._shown = 0
        self._load_rows(max(shown, min(len(rows), CHUNK_LINES)), replace=True)

    def show_more(self) -> None:
        """Add the next chunk of the current file's rows."""
        if self._file is None:
            return
        rows = self._current_rows()[0]
        if self._shown >= len(rows):
            return
        self._load_rows(chunk_end(rows, self._shown, CHUNK_LINES, CHUNK_CHARS), replace=False)

    # -- internals --------------------------------------------------------------------------

    def _all_views(self) -> tuple[DiffTextView, ...]:
        return (self.unified, self.side.old, self.side.new)

    def _active_views(self) -> tuple[DiffTextView, ...]:
        return (self.unified,) if self._mode == UNIFIED else self.side.views()

    def _next_generation(self) -> None:
        self._generation += 1
        self._jobs.supersede(self._job_key)
        self._cancel.set()
        self._cancel = threading.Event()
        self._file_timer.stop()
        self._decorating = False

    def _on_file_row_changed(self, current, _previous) -> None:
        if not current.isValid() or current.row() == self._file_index:
            return
        self._pending_file = current.row()
        self._file_timer.start()

    def _show_pending_file(self) -> None:
        if self._pending_file >= 0:
            self._show_file(self._pending_file)

    def _show_file(self, index: int) -> None:
        if self._diff is None or not 0 <= index < len(self._diff.files):
            return
        self._next_generation()
        f = self._diff.files[index]
        self._file_index = index
        self._file = f
        self._lines = file_lines(f)
        self._rows = {}
        self._spans = {}
        self._decorated_upto = 0
        self._ref_limit = 0
        self._batch = FIRST_DECORATE_BATCH
        self._shown = 0
        self.file_heading.setText(file_summary(f))
        self.file_heading.setToolTip(file_summary(f))
        rows = self._current_rows()[0]
        self._load_rows(chunk_end(rows, 0, CHUNK_LINES, CHUNK_CHARS), replace=True)
        self.sig_file_shown.emit(index)

    def _current_rows(self) -> tuple[Rows, ...]:
        cached = self._rows.get(self._mode)
        if cached is None:
            assert self._file is not None and self._lines is not None
            if self._mode == UNIFIED:
                cached = (unified_rows(self._file, self._lines, self._sizes),)
            else:
                cached = side_by_side_rows(self._file, self._lines, self._sizes)
            self._rows[self._mode] = cached
        return cached  # type: ignore[return-value]

    def _load_rows(self, end: int, *, replace: bool) -> None:
        all_rows = self._current_rows()
        start = 0 if replace else self._shown
        views = self._active_views()
        for view, rows in zip(views, all_rows):
            chunk = rows.slice(start, end)
            if replace:
                view.set_rows(chunk, self._spans)
            else:
                view.append_rows(chunk)
        self.stack.setCurrentIndex(PAGE_UNIFIED if self._mode == UNIFIED else PAGE_SIDE)
        self._shown = end
        refs = [r for rows in all_rows for r in rows.refs[start:end] if r >= 0]
        if refs:
            self._ref_limit = max(self._ref_limit, max(refs) + 1)
        self._update_more_button(len(all_rows[0]))
        self._decorate_next()

    def _update_more_button(self, total: int) -> None:
        left = total - self._shown
        if left <= 0:
            self.more_button.setVisible(False)
            return
        rows = self._current_rows()[0]
        step = chunk_end(rows, self._shown, CHUNK_LINES, CHUNK_CHARS) - self._shown
        self.more_button.setText(f"Show {step:,} more lines ({left:,} not shown yet)")
        self.more_button.setVisible(True)

    def _decorate_next(self) -> None:
        if self._decorating or self._file is None or self._lines is None:
            return
        if any(v.colouring_pending for v in self._active_views()):
            # Applying the last batch first keeps the worker and the GUI thread from taking turns
            # on the interpreter lock for every line; sig_colouring_idle brings us back here.
            return
        if self._decorated_upto >= self._ref_limit:
            self._check_decorated()
            return
        start = self._decorated_upto
        end = min(self._ref_limit, start + self._batch)
        self._batch = min(MAX_DECORATE_BATCH, self._batch * 4)
        request = DecorateRequest(self._file.path, self._lines, start, end, cancel=self._cancel)
        generation = self._generation
        self._decorating = True
        self._jobs.job(
            lambda: decorate(request), key=self._job_key, what="colour the diff", parent=self
        ).success(lambda spans: self._on_decorated(generation, end, spans)).failure(
            lambda failure: self._on_decorate_failed(generation, failure)
        ).run()

    def _on_decorated(self, generation: int, end: int, spans: dict[int, list[Span]]) -> None:
        if generation != self._generation:
            return  # a late result for a file or diff no longer shown
        self._decorating = False
        self._spans.update(spans)
        self._decorated_upto = end
        for view in self._active_views():
            view.refresh_refs(spans)
        self._decorate_next()

    def _on_decorate_failed(self, generation: int, _failure: object) -> None:
        # Colouring is a nicety: the plain diff stays, and nothing more is attempted for the file.
        if generation == self._generation:
            self._decorating = False
            self._decorated_upto = self._ref_limit = max(self._ref_limit, self._decorated_upto)
            self._check_decorated()

    def _check_decorated(self) -> None:
        if self.colouring_complete:
            self.sig_decorated.emit(self._file_index)

    # -- palette ----------------------------------------------------------------------------

    def _style_banner(self) -> None:
        colors = self.unified.colors
        self.banner.setStyleSheet(
            f"QLabel#diffTruncatedBanner {{ background: {colors.banner_bg.name()}; "
            f"color: {colors.text.name()}; padding: 4px 8px; }}"
        )

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._style_banner()
            self.file_model.set_palette(self.palette())
