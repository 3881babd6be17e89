"""The diff viewer: a file list (flat or as a folder tree) beside the selected file's diff,
unified or side by side.

Owns what is shown for a `core.diffs.Diff` (the core's size-cap banner, the file list, one file's
rows in chunks with a "show more" button), reshaping the shown file (more context around a hunk,
whitespace-only changes left out; gui.diff.reshape), finding text in it, moving between files
(n/p) and hunks (j/k), and keeping colouring off the GUI thread: each chunk's lines are decorated
in background jobs of growing size, and results for a file or diff that is no longer shown are
dropped by a request counter (and their work cancelled).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from core.diffs import Diff, DiffLine, FileDiff
from gui.diff.data import WholeFile
from gui.diff.decorate import DecorateRequest, Span, decorate
from gui.diff.file_list import (
    COL_COUNTS,
    COL_PATH,
    COL_STATUS,
    FILE_ROLE,
    FileListModel,
    build_tree_model,
    tree_item_of,
)
from gui.diff.model import (
    ROW_HUNK,
    SIDE_BY_SIDE,
    UNIFIED,
    FileLines,
    Rows,
    chunk_end,
    file_lines,
    file_summary,
    folder_tree,
    line_count,
    more_text,
    side_by_side_rows,
    tree_order,
    unified_rows,
)
from gui.diff.reshape import EXPAND_STEP, Expansion, without_whitespace_changes
from gui.diff.text_view import NUMBERS_BOTH, NUMBERS_NEW, NUMBERS_OLD, DiffTextView
from gui.find_bar import FindBar, is_find_key, select_in
from gui.qt import (
    QAbstractItemView,
    QButtonGroup,
    QEvent,
    QHBoxLayout,
    QHeaderView,
    QKeyEvent,
    QLabel,
    QMenu,
    QMouseEvent,
    QObject,
    QPoint,
    QPushButton,
    QSettings,
    QSplitter,
    QStackedWidget,
    QStandardItemModel,
    Qt,
    QTableView,
    QTimer,
    QToolButton,
    QTreeView,
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
TREE_KEY = "diff/folders"  # Qt settings: the file list as folders
WHITESPACE_KEY = "diff/ignore_whitespace"
SIDE_SEPARATOR = "\x00"  # between a side-by-side row's old and new text, for finding

# Keys that move through the diff while it has focus (no modifier).
NEXT_FILE, PREVIOUS_FILE, NEXT_HUNK, PREVIOUS_HUNK = (
    Qt.Key.Key_N,
    Qt.Key.Key_P,
    Qt.Key.Key_J,
    Qt.Key.Key_K,
)
MOVE_KEYS = (NEXT_FILE, PREVIOUS_FILE, NEXT_HUNK, PREVIOUS_HUNK)


@dataclass(frozen=True)
class FileAction:
    """An action the viewer's owner offers on one changed file ("Restore this file to #12…"),
    shown in the file list's and the diff's context menus; `refused` says why it cannot be done
    now (the action is shown disabled with that reason)."""

    name: str
    text: str
    refused: str = ""


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

    sig_context_ready = Signal(int)

    sig_file_action = Signal(str, str)
    """One of the owner's file actions was chosen: (action name, the file's path)."""
    """The whole file is known for the file at this index: its hunks can show more context."""

    def __init__(self, jobs, parent: QWidget | None = None, *, settings: QSettings | None = None):
        super().__init__(parent)
        self._jobs = jobs
        self._settings = settings
        self._job_key = f"diff-colours-{id(self)}"
        self._whole_key = f"diff-whole-file-{id(self)}"
        self._diff: Diff | None = None
        self._sizes: dict[str, int] = {}
        self._whole_file: WholeFile | None = None
        self._mode = UNIFIED
        self._generation = 0
        self._cancel = threading.Event()
        self._file_index = -1
        self._original: FileDiff | None = None
        self._expansion: Expansion | None = None
        self._whole_failed = False
        self._pending_expand: tuple[str, DiffLine, int] | None = None
        self._ignore_whitespace = False
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
        self._order: list[int] = []
        self._file_actions: list[FileAction] = []

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

        self.tree_model = QStandardItemModel(self)
        self.file_tree = QTreeView(self)
        self.file_tree.setObjectName("diffFileTree")
        self.file_tree.setModel(self.tree_model)
        self.file_tree.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.file_tree.setUniformRowHeights(True)
        self.file_tree.header().setStretchLastSection(False)
        self.file_tree.selectionModel().currentChanged.connect(self._on_tree_item_changed)

        self.list_stack = QStackedWidget(self)
        self.list_stack.addWidget(self.file_list)
        self.list_stack.addWidget(self.file_tree)
        self.tree_button = QToolButton(self)
        self.tree_button.setObjectName("diffTreeToggle")
        self.tree_button.setText("Folders")
        self.tree_button.setCheckable(True)
        self.tree_button.setToolTip("Show the changed files under their folders")
        self.tree_button.toggled.connect(self.set_tree)
        list_bar = QHBoxLayout()
        list_bar.setContentsMargins(0, 0, 0, 0)
        self.files_label = QLabel("Files", self)
        list_bar.addWidget(self.files_label, 1)
        list_bar.addWidget(self.tree_button)
        left = QWidget(self)
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addLayout(list_bar)
        left_layout.addWidget(self.list_stack, 1)

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
        self.whitespace_button = QToolButton(self)
        self.whitespace_button.setObjectName("diffIgnoreWhitespace")
        self.whitespace_button.setText("Ignore whitespace")
        self.whitespace_button.setCheckable(True)
        self.whitespace_button.setToolTip("Show lines whose only change is spacing as unchanged")
        self.whitespace_button.toggled.connect(self.set_ignore_whitespace)
        self.expand_up_button = QToolButton(self)
        self.expand_up_button.setObjectName("diffExpandAbove")
        self.expand_up_button.setText("↑ More context")
        self.expand_up_button.clicked.connect(lambda: self.expand_current("above"))
        self.expand_down_button = QToolButton(self)
        self.expand_down_button.setObjectName("diffExpandBelow")
        self.expand_down_button.setText("↓ More context")
        self.expand_down_button.clicked.connect(lambda: self.expand_current("below"))

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
            view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
            view.customContextMenuRequested.connect(lambda pos, v=view: self._context_menu(v, pos))
            view.installEventFilter(self)
            view.viewport().installEventFilter(self)
        for widget in (self.file_list, self.file_tree):
            widget.installEventFilter(self)
            widget.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.file_list.customContextMenuRequested.connect(self._file_list_menu)
        self.file_tree.customContextMenuRequested.connect(self._file_tree_menu)

        self.find_bar = FindBar(self, self)
        self.find_bar.sig_closed.connect(self._find_closed)

        self.more_button = QPushButton(self)
        self.more_button.setObjectName("diffShowMore")
        self.more_button.setVisible(False)
        self.more_button.clicked.connect(self.show_more)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.file_heading, 1)
        top.addWidget(self.expand_up_button)
        top.addWidget(self.expand_down_button)
        top.addWidget(self.whitespace_button)
        top.addWidget(self.unified_button)
        top.addWidget(self.side_button)
        right = QWidget(self)
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addLayout(top)
        right_layout.addWidget(self.stack, 1)
        right_layout.addWidget(self.find_bar)
        right_layout.addWidget(self.more_button)

        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.addWidget(left)
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
        if settings is not None:  # the choices of the last session
            self.set_tree(bool(settings.value(TREE_KEY, False, type=bool)))
            self.set_ignore_whitespace(bool(settings.value(WHITESPACE_KEY, False, type=bool)))

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
    def shown_file(self) -> FileDiff | None:
        """The file as shown: with its expanded context, whitespace changes left out or not."""
        return self._file

    @property
    def shown_rows(self) -> int:
        return self._shown

    @property
    def total_rows(self) -> int:
        return len(self._current_rows()[0]) if self._file is not None else 0

    @property
    def shown_lines(self) -> int:
        """Lines of the file in the view (hunk headers and notes not counted)."""
        return line_count(self._current_rows()[0], 0, self._shown) if self._file else 0

    @property
    def total_lines(self) -> int:
        return line_count(self._current_rows()[0]) if self._file is not None else 0

    @property
    def ignore_whitespace(self) -> bool:
        return self._ignore_whitespace

    @property
    def tree_shown(self) -> bool:
        return self.list_stack.currentWidget() is self.file_tree

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
        self._jobs.supersede(self._whole_key)
        self._diff = None
        self._file = None
        self._original = None
        self._expansion = None
        self._file_index = -1
        self._order = []
        self.file_model.set_files([])
        self.tree_model.clear()
        self.banner.setVisible(False)
        self.file_heading.setText("")
        self.more_button.setVisible(False)
        self.message.setText(text)
        for view in self._all_views():
            view.clear_rows()
        self.stack.setCurrentIndex(PAGE_MESSAGE)
        self._update_expand_buttons()

    def set_diff(
        self,
        diff: Diff,
        blob_sizes: dict[str, int] | None = None,
        *,
        whole_file: WholeFile | None = None,
    ) -> None:
        """Show a diff, its first file selected. `blob_sizes` (blob id → bytes) lets binary files
        say how big they are; `whole_file` (run in a job) lets hunks show more context."""
        self.show_message("No differences between these revisions" if not diff.files else "")
        self._diff = diff
        self._sizes = dict(blob_sizes or {})
        self._whole_file = whole_file
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
        build_tree_model(self.tree_model, diff.files, self.palette())
        tree_header = self.file_tree.header()  # the model's reset forgot the columns' modes
        tree_header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        tree_header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.file_tree.expandAll()
        self._order = (
            tree_order(folder_tree([f.path for f in diff.files]))
            if self.tree_shown
            else list(range(len(diff.files)))
        )
        first = self._order[0]
        self._show_file(first)
        self._select_list_row(first)

    def select_file(self, index: int) -> None:
        """Show the file at `index` of the list now (the list's own selection is debounced)."""
        self._file_timer.stop()
        self._show_file(index)
        self._select_list_row(index)

    def _select_list_row(self, index: int) -> None:
        for selection, select in (
            (self.file_list.selectionModel(), lambda: self.file_list.selectRow(index)),
            (self.file_tree.selectionModel(), lambda: self._select_tree_item(index)),
        ):
            selection.blockSignals(True)
            try:
                select()
            finally:
                selection.blockSignals(False)
        self.file_list.viewport().update()
        self.file_tree.viewport().update()

    def _select_tree_item(self, index: int) -> None:
        item = tree_item_of(self.tree_model, index)
        if item is not None:
            self.file_tree.setCurrentIndex(item.index())
            self.file_tree.scrollTo(item.index())

    def set_tree(self, on: bool) -> None:
        """List the files flat, or under their folders."""
        if self.tree_button.isChecked() != on:
            self.tree_button.setChecked(on)  # comes back here
            return
        self.list_stack.setCurrentWidget(self.file_tree if on else self.file_list)
        if self._settings is not None:
            self._settings.setValue(TREE_KEY, on)
        if self._diff is not None and self._diff.files:
            paths = [f.path for f in self._diff.files]
            self._order = tree_order(folder_tree(paths)) if on else list(range(len(paths)))
            if self._file_index >= 0:
                self._select_list_row(self._file_index)

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
        first = chunk_end(rows, 0, CHUNK_LINES, CHUNK_CHARS)
        self._load_rows(max(shown, first), replace=True)
        self._refresh_find()

    def show_more(self) -> None:
        """Add the next chunk of the current file's rows."""
        if self._file is None:
            return
        rows = self._current_rows()[0]
        if self._shown >= len(rows):
            return
        self._load_rows(chunk_end(rows, self._shown, CHUNK_LINES, CHUNK_CHARS), replace=False)

    def set_ignore_whitespace(self, on: bool) -> None:
        """Show lines whose only change is whitespace as unchanged (or as changed again)."""
        if self.whitespace_button.isChecked() != on:
            self.whitespace_button.setChecked(on)  # comes back here
            return
        if on == self._ignore_whitespace:
            return
        self._ignore_whitespace = on
        if self._settings is not None:
            self._settings.setValue(WHITESPACE_KEY, on)
        if self._original is not None:
            self._compose(keep_place=True)

    # -- files and hunks from the keyboard ---------------------------------------------------

    def next_file(self, by: int = 1) -> None:
        """Show the next (or, with -1, the previous) file in the list's order."""
        if not self._order:
            return
        try:
            at = self._order.index(self._file_index)
        except ValueError:
            at = -1
        target = max(0, min(len(self._order) - 1, at + by))
        if self._order[target] != self._file_index:
            self.select_file(self._order[target])

    def next_hunk(self, by: int = 1) -> bool:
        """Move to the next (or previous) hunk's header; False when there is none that way."""
        view = self._primary_view()
        if self._file is None:
            return False
        rows = self._current_rows()[0]
        here = view.textCursor().blockNumber()
        kinds = rows.kinds
        if by > 0:
            target = next((i for i in range(here + 1, len(kinds)) if kinds[i] == ROW_HUNK), -1)
        else:
            target = next((i for i in range(here - 1, -1, -1) if kinds[i] == ROW_HUNK), -1)
        if target < 0:
            return False
        self._reveal_row(target)
        for v in self._active_views():
            block = v.document().findBlockByNumber(target)
            cursor = v.textCursor()
            cursor.setPosition(block.position())
            v.setTextCursor(cursor)
        view.verticalScrollBar().setValue(max(0, target - 2))
        self._update_expand_buttons()
        return True

    def current_hunk(self) -> int:
        """The index of the hunk the cursor is in (the first when it is above them all)."""
        if self._file is None or not self._file.hunks:
            return -1
        rows = self._current_rows()[0]
        here = self._primary_view().textCursor().blockNumber()
        seen = sum(1 for k in rows.kinds[: here + 1] if k == ROW_HUNK)
        return max(0, min(len(self._file.hunks) - 1, seen - 1))

    # -- more context ---------------------------------------------------------------------------

    def can_expand(self) -> bool:
        return (
            self._original is not None
            and bool(self._original.hunks)
            and (self._expansion is not None or (self._whole_file is not None))
            and not self._whole_failed
        )

    def expand_current(self, where: str) -> None:
        """Show more unchanged lines above or below the current hunk ("above", "below"), or the
        whole file ("all")."""
        hunk = self.current_hunk()
        if hunk < 0 or self._file is None:
            return
        self.expand(hunk, where)

    def expand(self, hunk: int, where: str, lines: int = EXPAND_STEP) -> None:
        """Show `lines` more unchanged lines above or below the shown hunk at this index, or the
        whole file (`where` "all"). The whole file is read in a job the first time."""
        if self._file is None or not 0 <= hunk < len(self._file.hunks) or not self.can_expand():
            return
        first = next((ln for ln in self._file.hunks[hunk].lines if ln.kind != "\\"), None)
        if first is None:
            return
        if self._expansion is None:
            self._pending_expand = (where, first, lines)
            self._load_whole_file()
            return
        self._apply_expand(where, first, lines)

    def _apply_expand(self, where: str, first: DiffLine, lines: int) -> None:
        expansion = self._expansion
        assert expansion is not None
        group = expansion.group_of(first)
        if where == "all":
            expansion.expand_all()
        elif where == "above":
            expansion.expand_above(group, lines)
        else:
            expansion.expand_below(group, lines)
        self._compose(keep_place=True)

    def _load_whole_file(self) -> None:
        reader, original, index = self._whole_file, self._original, self._file_index
        if reader is None or original is None:
            return
        generation = self._generation
        self.file_heading.setText(file_summary(original) + " · reading the whole file…")
        self._jobs.job(
            lambda: reader(original),
            key=self._whole_key,
            what="read the whole file for more context",
            parent=self,
        ).success(lambda whole: self._on_whole_file(generation, index, whole)).failure(
            lambda failure: self._on_whole_file(generation, index, None)
        ).run()

    def _on_whole_file(self, generation: int, index: int, whole: FileDiff | None) -> None:
        if index != self._file_index or self._original is None:
            return
        del generation  # a newer colouring generation does not make the file's text stale
        expansion = Expansion.of(self._original, whole) if whole is not None else None
        self.file_heading.setText(file_summary(self._original))
        if expansion is None:
            self._whole_failed = True
            self.file_heading.setText(
                file_summary(self._original) + " · more context is not available for this file"
            )
            self._update_expand_buttons()
            return
        self._expansion = expansion
        pending, self._pending_expand = self._pending_expand, None
        self.sig_context_ready.emit(index)
        if pending is not None:
            self._apply_expand(*pending)

    # -- finding ------------------------------------------------------------------------------

    def open_find(self) -> None:
        """Show the find bar (Ctrl+F while the diff has focus), with the selected text."""
        selected = self._primary_view().textCursor().selectedText()
        self.find_bar.open(selected if selected and "\u2029" not in selected else None)

    def find_lines(self) -> list[str]:
        if self._file is None:
            return []
        rows = self._current_rows()
        if self._mode == UNIFIED:
            return rows[0].texts
        return [f"{a}{SIDE_SEPARATOR}{b}" for a, b in zip(rows[0].texts, rows[1].texts)]

    def find_origin(self) -> int:
        return self._primary_view().textCursor().blockNumber()

    def show_match(self, line: int, start: int, length: int) -> None:
        self._reveal_row(line)
        if self._mode == UNIFIED:
            select_in(self.unified, line, start, length)
            return
        left = len(self._current_rows()[0].texts[line])
        if start < left:
            select_in(self.side.old, line, start, length)
        else:
            select_in(self.side.new, line, start - left - 1, length)

    def _refresh_find(self) -> None:
        if self.find_bar.isVisible() and self.find_bar.field.text():
            self.find_bar.search()

    def _find_closed(self) -> None:
        self._primary_view().setFocus()

    # -- keys ---------------------------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.MouseButtonDblClick and isinstance(event, QMouseEvent):
            view = next((v for v in self._all_views() if v.viewport() is watched), None)
            if view is not None and self._double_click_on_hunk(view, event.position().toPoint()):
                return True
        if kind in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress) and isinstance(
            event, QKeyEvent
        ):
            action = self._key_action(event)
            if action is not None:
                if kind == QEvent.Type.ShortcutOverride:
                    event.accept()  # ours while the diff has focus, not the window's
                    return True
                action()
                return True
        return super().eventFilter(watched, event)

    def _key_action(self, event: QKeyEvent):
        if is_find_key(event):
            return self.open_find
        if event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            if event.key() == Qt.Key.Key_F3 and self.find_bar.field.text():
                return self.find_bar.find_previous
            return None
        key = event.key()
        if key == Qt.Key.Key_F3 and self.find_bar.field.text():
            return self.find_bar.find_next
        if key == Qt.Key.Key_Escape and self.find_bar.isVisible():
            return self.find_bar.close_bar
        if key == NEXT_FILE:
            return lambda: self.next_file(1)
        if key == PREVIOUS_FILE:
            return lambda: self.next_file(-1)
        if key == NEXT_HUNK and self._file is not None:
            return lambda: self.next_hunk(1)
        if key == PREVIOUS_HUNK and self._file is not None:
            return lambda: self.next_hunk(-1)
        return None

    def _double_click_on_hunk(self, view: DiffTextView, pos: QPoint) -> bool:
        """A double click on a hunk's header shows more lines above it."""
        row = view.cursorForPosition(pos).blockNumber()
        if self._file is None or not 0 <= row < len(view.rows) or view.rows.kinds[row] != ROW_HUNK:
            return False
        hunk = sum(1 for k in view.rows.kinds[: row + 1] if k == ROW_HUNK) - 1
        if self.can_expand():
            self.expand(hunk, "above")
        return True

    def _context_menu(self, view: DiffTextView, pos: QPoint) -> None:
        self.text_menu(view, pos).popup(view.viewport().mapToGlobal(pos))

    def text_menu(self, view: DiffTextView, pos: QPoint) -> QMenu:
        """The diff view's context menu at `pos`: more context, the owner's actions on the
        shown file, copy, find."""
        menu = QMenu(self)
        cursor = view.cursorForPosition(pos)
        if not view.textCursor().hasSelection():
            view.setTextCursor(cursor)
        hunk = self.current_hunk()
        for text, where in (
            (f"Show {EXPAND_STEP} more lines above this hunk", "above"),
            (f"Show {EXPAND_STEP} more lines below this hunk", "below"),
            ("Show the whole file", "all"),
        ):
            action = menu.addAction(text)
            action.setEnabled(hunk >= 0 and self.can_expand())
            action.triggered.connect(lambda _c=False, w=where, h=hunk: self.expand(h, w))
        if self._file is not None and self._file_actions:
            menu.addSeparator()
            self._add_file_actions(menu, self._file.path)
        menu.addSeparator()
        copy = menu.addAction("Copy")
        copy.setEnabled(view.textCursor().hasSelection())
        copy.triggered.connect(view.copy)
        find = menu.addAction("Find…")
        find.triggered.connect(self.open_find)
        return menu

    # -- the owner's actions on one file ----------------------------------------------------------

    def set_file_actions(self, actions: list[FileAction]) -> None:
        """What the file list's and the diff's context menus offer on a file."""
        self._file_actions = list(actions)

    @property
    def file_actions(self) -> list[FileAction]:
        return list(self._file_actions)

    def file_menu(self, path: str) -> QMenu:
        """The context menu of a changed file (for the file list and the folder tree)."""
        menu = QMenu(self)
        menu.setObjectName("diffFileMenu")
        self._add_file_actions(menu, path)
        return menu

    def _add_file_actions(self, menu: QMenu, path: str) -> None:
        menu.setToolTipsVisible(True)
        for action in self._file_actions:
            item = menu.addAction(action.text)
            item.setObjectName(f"fileAction-{action.name}")
            item.setEnabled(not action.refused)
            if action.refused:
                item.setToolTip(action.refused)
                item.setStatusTip(action.refused)
            item.triggered.connect(
                lambda _c=False, n=action.name, p=path: self.sig_file_action.emit(n, p)
            )

    def _file_list_menu(self, pos: QPoint) -> None:
        index = self.file_list.indexAt(pos)
        if not index.isValid() or not self._file_actions:
            return
        path = self.file_model.file(index.row()).path
        menu = self.file_menu(path)
        menu.exec(self.file_list.viewport().mapToGlobal(pos))
        menu.deleteLater()

    def _file_tree_menu(self, pos: QPoint) -> None:
        index = self.file_tree.indexAt(pos)
        if not index.isValid() or not self._file_actions or self._diff is None:
            return
        item = self.tree_model.itemFromIndex(index.siblingAtColumn(0))
        file_index = item.data(FILE_ROLE) if item is not None else -1
        if not isinstance(file_index, int) or not 0 <= file_index < len(self._diff.files):
            return  # a folder
        menu = self.file_menu(self._diff.files[file_index].path)
        menu.exec(self.file_tree.viewport().mapToGlobal(pos))
        menu.deleteLater()

    # -- internals ----------------------------------------------------------------------------

    def _all_views(self) -> tuple[DiffTextView, ...]:
        return (self.unified, self.side.old, self.side.new)

    def _active_views(self) -> tuple[DiffTextView, ...]:
        return (self.unified,) if self._mode == UNIFIED else self.side.views()

    def _primary_view(self) -> DiffTextView:
        if self._mode == UNIFIED:
            return self.unified
        return self.side.old if self.side.old.hasFocus() else self.side.new

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

    def _on_tree_item_changed(self, current, _previous) -> None:
        if not current.isValid():
            return
        index = current.data(FILE_ROLE)
        if not isinstance(index, int) or index < 0 or index == self._file_index:
            return
        self._pending_file = index
        self._file_timer.start()

    def _show_pending_file(self) -> None:
        if self._pending_file >= 0:
            self._show_file(self._pending_file)

    def _show_file(self, index: int) -> None:
        if self._diff is None or not 0 <= index < len(self._diff.files):
            return
        self._jobs.supersede(self._whole_key)
        self._file_index = index
        self._original = self._diff.files[index]
        self._expansion = None
        self._whole_failed = False
        self._pending_expand = None
        self._compose(keep_place=False)
        self.sig_file_shown.emit(index)

    def _compose(self, *, keep_place: bool) -> None:
        """Show the current file as it should look now: expanded, whitespace or not."""
        original = self._original
        assert original is not None
        place = self._place() if keep_place else None
        self._next_generation()
        f = self._expansion.file() if self._expansion is not None else original
        if self._ignore_whitespace:
            f = without_whitespace_changes(f)
        self._file = f
        self._lines = file_lines(f)
        self._rows = {}
        self._spans = {}
        self._decorated_upto = 0
        self._ref_limit = 0
        self._batch = FIRST_DECORATE_BATCH
        self._shown = 0
        summary = file_summary(original)
        if self._ignore_whitespace and original.hunks and not f.hunks:
            summary += " · only whitespace changed"
        if self._expansion is None and self._whole_failed:
            summary += " · more context is not available for this file"
        self.file_heading.setText(summary)
        self.file_heading.setToolTip(summary)
        rows = self._current_rows()[0]
        end = chunk_end(rows, 0, CHUNK_LINES, CHUNK_CHARS)
        target = self._row_of_place(place) if place is not None else -1
        if target >= end:
            end = min(len(rows), chunk_end(rows, target, CHUNK_LINES // 2, CHUNK_CHARS))
        self._load_rows(end, replace=True)
        if target >= 0:
            for view in self._active_views():
                block = view.document().findBlockByNumber(target)
                cursor = view.textCursor()
                cursor.setPosition(block.position())
                view.setTextCursor(cursor)
            self._primary_view().verticalScrollBar().setValue(max(0, target - 2))
        self._update_expand_buttons()
        self._refresh_find()

    def _place(self) -> tuple[int | None, int | None] | None:
        """The line numbers of the row the cursor is on, to find the same line again."""
        if self._file is None:
            return None
        rows = self._current_rows()[0]
        n = self._primary_view().textCursor().blockNumber()
        for i in range(n, len(rows)):
            if rows.old_nos[i] is not None or rows.new_nos[i] is not None:
                return rows.old_nos[i], rows.new_nos[i]
        return None

    def _row_of_place(self, place: tuple[int | None, int | None]) -> int:
        rows = self._current_rows()[0]
        old_no, new_no = place
        for i in range(len(rows)):
            if old_no is not None and rows.old_nos[i] == old_no:
                return max(0, i - 1) if rows.kinds[max(0, i - 1)] == ROW_HUNK else i
            if old_no is None and new_no is not None and rows.new_nos[i] == new_no:
                return i
        return -1

    def _reveal_row(self, row: int) -> None:
        """Load chunks until `row` is in the view."""
        rows = self._current_rows()[0]
        while self._shown <= row < len(rows):
            self._load_rows(chunk_end(rows, self._shown, CHUNK_LINES, CHUNK_CHARS), replace=False)

    def _update_expand_buttons(self) -> None:
        on = self.can_expand() and self._file is not None and bool(self._file.hunks)
        for button in (self.expand_up_button, self.expand_down_button):
            button.setEnabled(on)
        why = (
            "Show more unchanged lines around the hunk the cursor is in (right-click a hunk "
            "for more)"
            if on
            else "More context needs the whole file, which is not available here"
        )
        self.expand_up_button.setToolTip(why)
        self.expand_down_button.setToolTip(why)

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
        self._update_more_button()
        self._decorate_next()

    def _update_more_button(self) -> None:
        rows = self._current_rows()[0]
        left = line_count(rows, self._shown)
        if self._shown >= len(rows) or left <= 0:
            self.more_button.setVisible(False)
            return
        step = line_count(rows, self._shown, chunk_end(rows, self._shown, CHUNK_LINES, CHUNK_CHARS))
        self.more_button.setText(more_text(step, left))
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

    # -- palette ------------------------------------------------------------------------------

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
