"""The Revisions tab: one task's timeline, "fork from here", restoring in place, and the diff of
any two revisions, including revisions of its parent and child tasks.

Owns choosing what to compare and asking for it: every facade call goes through the job runner,
selection changes are debounced, and a request counter drops a diff that arrives for a selection
that is no longer current. Also the timeline's search, opening bursts, markers that select their
revision, and offering restores ("Restore workspace to this revision", "Undo this revision's
change", "Restore this file to here" from the diff) — refused with the reason while a run is
live. Showing the diff belongs to gui.diff; the restores' sequence to gui.restore_actions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from core import events as ev
from gui.diff import DiffViewer, FileAction
from gui.diff.data import WholeFile, whole_file_reader
from gui.qt import (
    QAbstractItemView,
    QComboBox,
    QEvent,
    QGuiApplication,
    QHBoxLayout,
    QHeaderView,
    QItemSelectionModel,
    QKeyEvent,
    QLabel,
    QLineEdit,
    QMenu,
    QModelIndex,
    QObject,
    QPoint,
    QPushButton,
    QSizePolicy,
    QSplitter,
    Qt,
    QTableView,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)
from gui.restore_actions import FILE, UNDO, WORKSPACE, Request, RestoreActions
from gui.revisions import data
from gui.revisions.file_history import FileHistoryDialog
from gui.revisions.timeline_model import (
    BURST,
    COL_SEQ,
    COL_WHAT,
    HEADING,
    MARKER,
    TimelineModel,
)

if TYPE_CHECKING:
    from gui.context import AppContext

SELECTION_DEBOUNCE_MS = 150
RELOAD_DEBOUNCE_MS = 300
STATS_BATCH_MS = 30

NO_OTHER = ""


class RevisionsPanel(QWidget):
    """The timeline of the task given to `set_task`, and the diff of the selected revisions."""

    sig_fork_requested = Signal(str, str)
    """The user chose "Fork from here": (task id, revision id)."""

    sig_diff_shown = Signal(str, str)
    """A diff is on screen: (old ref, new ref) as given to the facade."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self._context = context
        self._jobs = context.jobs
        self._task_id: str | None = None
        self._timeline: data.Timeline | None = None
        self._task_generation = 0
        self._diff_request = 0
        self._stats_wanted: list[str] = []
        self._key = f"revisions-{id(self)}"

        self.heading = QLabel("No task selected", self)
        self.heading.setObjectName("revisionsHeading")
        self.model = TimelineModel(self, on_stats_wanted=self._want_stats)
        self.table = QTableView(self)
        self.table.setObjectName("revisionsTimeline")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._show_context_menu)
        self.table.clicked.connect(self._on_clicked)
        self.table.installEventFilter(self)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COL_WHAT, QHeaderView.ResizeMode.Stretch)
        self.table.selectionModel().selectionChanged.connect(self._on_selection_changed)
        self.table.setToolTip(
            "Select one revision to see what it changed, or two to compare them. "
            "Right-click a revision to fork from it, restore the workspace to it or undo it; "
            "click ▸ to open a group of revisions, a marker to select its revision."
        )
        self.search = QLineEdit(self)
        self.search.setObjectName("revisionsSearch")
        self.search.setPlaceholderText("Search paths and descriptions…")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip(
            "Show only revisions whose changed paths, description (step, command or tool "
            "call), run or id hold every word"
        )
        self.search.textChanged.connect(self._on_search)

        self.other_label = QLabel("Compare with another task:", self)
        self.other_picker = QComboBox(self)
        self.other_picker.setObjectName("revisionsOtherPicker")
        self.other_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.other_picker.setToolTip(
            "A revision of a parent, child or other task grown from the "
            "same folder; it is compared with the selected revision"
        )
        self.other_picker.currentIndexChanged.connect(lambda _i: self._schedule_diff())
        self.fork_button = QPushButton("Fork from here…", self)
        self.fork_button.setEnabled(False)
        self.fork_button.clicked.connect(self._fork_selected)
        self.restore_button = QPushButton("Restore workspace…", self)
        self.restore_button.setObjectName("revisionsRestore")
        self.restore_button.setEnabled(False)
        self.restore_button.clicked.connect(lambda: self._restore_selected(WORKSPACE))
        self.undo_button = QPushButton("Undo change…", self)
        self.undo_button.setObjectName("revisionsUndo")
        self.undo_button.setEnabled(False)
        self.undo_button.clicked.connect(lambda: self._restore_selected(UNDO))
        self.refusal = QLabel(self)
        self.refusal.setObjectName("revisionsRefusal")
        self.refusal.setWordWrap(True)
        self.refusal.setVisible(False)
        self.restores = RestoreActions(context, self)
        self.restores.sig_done.connect(self._on_restored)
        self.comparison = QLabel(self)
        self.comparison.setObjectName("revisionsComparison")
        self.status = QLabel(self)
        self.status.setObjectName("revisionsStatus")
        self.status.setWordWrap(True)

        # One line above the timeline and one below it, so the rows get the height.
        bar = QHBoxLayout()
        # A long task title gives way (elided by the label's width) before the controls do.
        self.heading.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        bar.addWidget(self.heading, 1)
        bar.addWidget(self.other_label)
        bar.addWidget(self.other_picker)
        bar.addWidget(self.fork_button)
        bar.addWidget(self.restore_button)
        bar.addWidget(self.undo_button)
        below = QHBoxLayout()
        below.addWidget(self.comparison)
        below.addWidget(self.status, 1)
        top = QWidget(self)
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addLayout(bar)
        top_layout.addWidget(self.search)
        top_layout.addWidget(self.refusal)
        top_layout.addWidget(self.table, 1)
        top_layout.addLayout(below)

        self.viewer = DiffViewer(self._jobs, self, settings=context.settings)
        self.viewer.sig_file_action.connect(self._on_file_action)
        self._here: tuple[str, int] | None = None  # (revision, seq) the shown diff leads to
        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.addWidget(top)
        splitter.addWidget(self.viewer)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([300, 400])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)

        self._diff_timer = self._single_shot(SELECTION_DEBOUNCE_MS, self._request_diff)
        self._reload_timer = self._single_shot(RELOAD_DEBOUNCE_MS, self._reload)
        self._stats_timer = self._single_shot(STATS_BATCH_MS, self._request_stats)

        context.events.sig_event.connect(self._on_event)
        self.set_task(None)

    def _single_shot(self, ms: int, slot) -> QTimer:
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(ms)
        timer.timeout.connect(slot)
        return timer

    @property
    def _cairn(self):
        return self._context.cairn

    # -- the task -----------------------------------------------------------------------------

    @property
    def task_id(self) -> str | None:
        return self._task_id

    def set_task(self, task_id: str | None) -> None:
        """Show this task's revisions (None: nothing)."""
        self._task_id = task_id
        self._task_generation += 1
        self._timeline = None
        self._diff_request += 1
        self._diff_timer.stop()
        self._jobs.supersede(f"{self._key}-diff")
        self.model.set_entries([])
        self._fill_other_picker([])
        self._here = None
        self.viewer.set_file_actions([])
        self._update_buttons()
        self.comparison.setText("")
        self.status.setText("")
        if task_id is None:
            self.heading.setText("No task selected")
            self.viewer.show_message("Select a task to see its revisions")
            return
        self.heading.setText("Loading revisions…")
        self.viewer.show_message("Select a revision to see what it changed")
        self._reload()

    def reload(self) -> None:
        """Read the timeline again (kept selection, kept +/− counts)."""
        self._reload_timer.start()

    def _reload(self) -> None:
        if self._task_id is None:
            return
        task_id, generation = self._task_id, self._task_generation
        cairn = self._cairn
        self._jobs.job(
            lambda: data.load_timeline(cairn, task_id),
            key=f"{self._key}-timeline",
            what="load the revisions",
            parent=self,
        ).success(lambda timeline: self._show_timeline(generation, timeline)).failure(
            lambda failure: self._show_failure(generation, failure)
        ).run()

    def _show_timeline(self, generation: int, timeline: data.Timeline) -> None:
        if generation != self._task_generation:
            return
        keep = self._timeline is not None and self._timeline.task_id == timeline.task_id
        selected = self.selected_revisions()
        other = self.other_picker.currentData() or NO_OTHER
        self._timeline = timeline
        count = len(timeline.entries)
        # The count first: a narrow pane clips the end of the heading, not the figure.
        self.heading.setText(f"{count} revision{'' if count == 1 else 's'} · {timeline.title}")
        self.heading.setToolTip(timeline.title)
        self._keeping_selection(
            selected,
            lambda: self.model.set_entries(
                timeline.entries, keep_stats=keep, markers=timeline.markers
            ),
        )
        self._fill_other_picker(timeline.others, keep=other)
        self._update_buttons()
        self._update_file_actions()

    def _keeping_selection(self, revisions: list[str], change: Callable[[], object]) -> None:
        """Change the rows (`change`), then select `revisions` again where they still show,
        without a selection signal in between."""
        selection = self.table.selectionModel()
        selection.blockSignals(True)
        try:
            change()
            for rev in revisions:
                row = self.model.row_of(rev)
                if row >= 0:
                    self._add_row(row)
        finally:
            selection.blockSignals(False)

    def _add_row(self, row: int) -> None:
        flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        self.table.selectionModel().select(self.model.index(row, 0), flags)

    def _show_failure(self, generation: int, failure) -> None:
        if generation != self._task_generation:
            return
        self.heading.setText("Revisions could not be loaded")
        self.status.setText(failure.sentence())

    def _fill_other_picker(self, others: list[data.OtherRevision], keep: str = NO_OTHER) -> None:
        picker = self.other_picker
        picker.blockSignals(True)
        try:
            picker.clear()
            picker.addItem("— this task only —", NO_OTHER)
            for o in others:
                picker.addItem(
                    f"{o.task_title} ({o.relation}) · #{o.seq} {o.trigger} · {o.revision_id[:10]}",
                    o.ref,
                )
                picker.setItemData(picker.count() - 1, f"{o.ref}", Qt.ItemDataRole.ToolTipRole)
            index = picker.findData(keep)
            picker.setCurrentIndex(max(index, 0))
        finally:
            picker.blockSignals(False)
        visible = bool(others)
        self.other_label.setVisible(visible)
        picker.setVisible(visible)

    # -- events -------------------------------------------------------------------------------

    def _on_event(self, event) -> None:
        timeline = self._timeline
        if self._task_id is None:
            return
        if event.kind == ev.REVISION_RECORDED:
            if timeline is None or event.subject == timeline.workspace_id or timeline.others:
                self.reload()
        elif event.kind in (
            ev.TASK_CREATED,
            ev.SNAPSHOT_CREATED,
            ev.SNAPSHOT_RENAMED,
            ev.RUN_STATE,
            ev.APPROVAL_REQUESTED,
            ev.APPROVAL_DECIDED,
        ):
            self.reload()  # markers, and whether a run is live (restores are refused then)

    # -- selection and diff -------------------------------------------------------------------

    def selected_rows(self) -> list[int]:
        return sorted({i.row() for i in self.table.selectionModel().selectedRows()})

    def selected_revisions(self) -> list[str]:
        """Selected revision ids, oldest first (a group of revisions stands for its newest)."""
        entries = [self.model.entry(r) for r in self.selected_rows()]
        entries.sort(key=lambda e: e.seq)
        return list(dict.fromkeys(e.id for e in entries))

    def select_revisions(self, *revision_ids: str) -> None:
        """Select these revisions in the timeline (as a click would), opening a group that
        holds one."""
        rows = []
        for rev in revision_ids:
            self.model.reveal(rev)
        self.table.clearSelection()
        for rev in revision_ids:
            row = self.model.row_of(rev)
            if row >= 0:
                self._add_row(row)
                rows.append(row)
        if rows:
            self.table.scrollTo(self.model.index(rows[0], 0))

    def open_group(self, row: int, opened: bool = True) -> None:
        """Open (or close) the group of revisions at `row`, keeping the selection."""
        self._keeping_selection(self.selected_revisions(), lambda: self.model.set_open(row, opened))

    def set_search(self, text: str) -> None:
        """Search the timeline by path and text (as typing in the search field does)."""
        self.search.setText(text)

    def _on_search(self, text: str) -> None:
        self._keeping_selection(self.selected_revisions(), lambda: self.model.set_search(text))
        self._on_selection_changed()

    def _on_clicked(self, index: QModelIndex) -> None:
        if not index.isValid():
            return
        kind = self.model.kind(index.row())
        if kind == MARKER:
            self.select_revisions(self.model.entry(index.row()).id)
        elif kind == BURST and index.column() == COL_SEQ:
            self.open_group(index.row(), not self.model.is_open(index.row()))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table and event.type() == QEvent.Type.KeyPress:
            assert isinstance(event, QKeyEvent)
            row = self.table.currentIndex().row()
            if row >= 0 and self.model.kind(row) == BURST:
                key = event.key()
                if key == Qt.Key.Key_Space or (
                    key in (Qt.Key.Key_Right, Qt.Key.Key_Left)
                    and (key == Qt.Key.Key_Right) != self.model.is_open(row)
                ):
                    self.open_group(row, not self.model.is_open(row))
                    return True
        return super().eventFilter(watched, event)

    def compare_with_other(self, ref: str) -> None:
        """Choose a `TASK:REV` of another task to compare the selection with."""
        index = self.other_picker.findData(ref)
        if index < 0:
            raise ValueError(f"{ref} is not a revision of a related task")
        self.other_picker.setCurrentIndex(index)

    def _on_selection_changed(self, *_args) -> None:
        self._update_buttons()
        self._schedule_diff()

    def refused(self) -> str:
        """Why a restore cannot be done now ("" when it can)."""
        if self._timeline is None:
            return "the revisions are still loading"
        if self.restores.busy:
            return "a restore is under way"
        return self._timeline.refused

    def _undo_refused(self, row: int) -> str:
        entry = self.model.entry(row)
        if self.model.kind(row) == BURST:
            return (
                "this row is a group of revisions: open it (▸) and pick one to undo, or "
                "restore the workspace to the revision before the group"
            )
        if entry.parent_id is None:
            return "the base revision is where the task started; it has no change to undo"
        return self.refused()

    def _update_buttons(self) -> None:
        live = self._timeline.refused if self._timeline is not None else ""
        self.refusal.setText(f"Restoring is off: {live}." if live else "")
        self.refusal.setVisible(bool(live))
        rows = self.selected_rows()
        one = len(rows) == 1
        self.fork_button.setEnabled(len(self.selected_revisions()) == 1)
        refused = self.refused() if one else "select one revision"
        self.restore_button.setEnabled(not refused)
        self.restore_button.setToolTip(
            refused or "Put every file back as it was at the selected revision (asks first)"
        )
        undo_refused = self._undo_refused(rows[0]) if one else "select one revision"
        self.undo_button.setEnabled(not undo_refused)
        self.undo_button.setToolTip(
            undo_refused
            or "Take back the selected revision's change on top of the current files (asks first)"
        )

    def _schedule_diff(self) -> None:
        self._diff_timer.start()

    def comparison_refs(self) -> tuple[str, str] | None:
        """(old, new) refs for the facade's diff from the current selection, or None."""
        timeline = self._timeline
        if timeline is None:
            return None
        selected = self.selected_revisions()
        other = self.other_picker.currentData() or NO_OTHER
        if other:
            new = (
                selected[-1]
                if selected
                else (timeline.entries[-1].id if timeline.entries else None)
            )
            return (other, new) if new else None
        rows = self.selected_rows()
        if len(rows) == 1 and self.model.kind(rows[0]) == BURST:
            old, new = self.model.row(rows[0]).span
            return (old, new) if old else None
        if len(selected) >= 2:
            return selected[0], selected[-1]
        if len(selected) == 1:
            entry = next(e for e in timeline.entries if e.id == selected[0])
            if entry.parent_id is None:
                return None
            return entry.parent_id, entry.id
        return None

    def _request_diff(self) -> None:
        self._diff_request += 1
        request = self._diff_request
        refs = self.comparison_refs()
        task_id = self._task_id
        self.status.setText("")  # the figures of the last diff describe it, not what comes next
        self._here = None
        self._update_file_actions()
        if refs is None or task_id is None:
            self._jobs.supersede(f"{self._key}-diff")
            selected = self.selected_revisions()
            if selected and self._timeline is not None:
                self.comparison.setText("")
                self.viewer.show_message(
                    "The base revision is where this task started: "
                    "select a second revision to compare it with."
                )
            else:
                self.viewer.show_message("Select a revision to see what it changed")
            return
        old, new = refs
        self.comparison.setText(f"Comparing {self._describe(old)} → {self._describe(new)}")
        self.viewer.show_message("Loading the diff…")
        cairn = self._cairn
        self._jobs.job(
            lambda: data.load_diff(cairn, task_id, old, new),
            key=f"{self._key}-diff",
            what="load the diff",
            parent=self,
        ).success(
            lambda result: self._show_diff(
                request, result, whole_file_reader(cairn, task_id, old, new)
            )
        ).failure(lambda failure: self._show_diff_failure(request, failure)).run()

    def _describe(self, ref: str) -> str:
        timeline = self._timeline
        if ":" in ref:
            task_id, _, rev = ref.partition(":")
            other = next(
                (
                    o
                    for o in (timeline.others if timeline else [])
                    if o.task_id == task_id and o.revision_id == rev
                ),
                None,
            )
            return f"{other.task_title} #{other.seq}" if other else ref
        entry = next((e for e in (timeline.entries if timeline else []) if e.id == ref), None)
        return f"#{entry.seq} ({entry.trigger})" if entry else ref[:10]

    @property
    def diff_request(self) -> int:
        return self._diff_request

    def _show_diff(
        self, request: int, result: data.DiffResult, whole_file: WholeFile | None = None
    ) -> None:
        if request != self._diff_request:
            return  # the selection changed since this diff was asked for
        self.viewer.set_diff(result.diff, blob_sizes=result.blob_sizes, whole_file=whole_file)
        here = self._entry(result.new_ref)
        self._here = (here.id, here.seq) if here is not None else None
        self._update_file_actions()
        d = result.diff
        self.status.setText(
            f"{d.files_changed} file{'' if d.files_changed == 1 else 's'} changed, "
            f"+{d.additions} −{d.deletions}"
        )
        self.sig_diff_shown.emit(result.old_ref, result.new_ref)

    def _show_diff_failure(self, request: int, failure) -> None:
        if request != self._diff_request:
            return
        self.viewer.show_message(failure.sentence())

    # -- +/− per visible row ------------------------------------------------------------------

    def _want_stats(self, key: str) -> None:
        self._stats_wanted.append(key)
        self._stats_timer.start()

    def _request_stats(self) -> None:
        if self._timeline is None or not self._stats_wanted:
            return
        spans = {}
        for key in dict.fromkeys(self._stats_wanted):
            span = self.model.stats_span(key)
            if span is not None:
                spans[key] = span
        self._stats_wanted = []
        if not spans:
            return
        task_id, generation, cairn = self._timeline.task_id, self._task_generation, self._cairn
        self._jobs.job(
            lambda: data.span_stats(cairn, task_id, spans),
            what="count the changed lines",
            parent=self,
        ).success(lambda stats: self._show_stats(generation, stats)).failure(
            lambda _f: self.model.forget_asked(list(spans))
        ).run()

    def _show_stats(self, generation: int, stats: dict) -> None:
        if generation == self._task_generation:
            self.model.set_stats(stats)

    # -- fork ---------------------------------------------------------------------------------

    def context_menu_for(self, row: int) -> QMenu:
        """The menu of a timeline row: "Fork from here", restoring the workspace to it, undoing
        its change, opening a group, copying its id."""
        entry = self.model.entry(row)
        kind = self.model.kind(row)
        menu = QMenu(self)
        menu.setToolTipsVisible(True)
        if kind == BURST:
            opened = self.model.is_open(row)
            group = menu.addAction("Close the group" if opened else "Open the group")
            group.setObjectName("openGroup")
            group.triggered.connect(lambda: self.open_group(row, not opened))
        if kind == MARKER:
            select = menu.addAction(f"Select #{entry.seq}, the revision it belongs to")
            select.triggered.connect(lambda: self.select_revisions(entry.id))
        fork = menu.addAction(f"Fork from here (#{entry.seq})")
        fork.setObjectName("forkFromHere")
        fork.triggered.connect(lambda: self._request_fork(entry.id))
        menu.addSeparator()
        refused = self.refused()
        restore = menu.addAction(f"Restore workspace to this revision (#{entry.seq})…")
        restore.setObjectName("restoreWorkspace")
        restore.setEnabled(not refused)
        restore.setToolTip(refused)
        restore.triggered.connect(lambda: self.request_restore(WORKSPACE, entry.id))
        undo_refused = "" if kind in (HEADING, MARKER) else self._undo_refused(row)
        if kind in (HEADING, MARKER) and entry.parent_id is None:
            undo_refused = "the base revision is where the task started; it has no change to undo"
        undo = menu.addAction(f"Undo this revision's change (#{entry.seq})…")
        undo.setObjectName("undoRevision")
        undo.setEnabled(not undo_refused)
        undo.setToolTip(undo_refused)
        undo.triggered.connect(lambda: self.request_restore(UNDO, entry.id))
        menu.addSeparator()
        copy = menu.addAction("Copy revision id")
        copy.triggered.connect(lambda: self._copy(entry.id))
        return menu

    def _show_context_menu(self, pos: QPoint) -> None:
        index = self.table.indexAt(pos)
        if not index.isValid():
            return
        menu = self.context_menu_for(index.row())
        menu.exec(self.table.viewport().mapToGlobal(pos))
        menu.deleteLater()

    def _fork_selected(self) -> None:
        selected = self.selected_revisions()
        if len(selected) == 1:
            self._request_fork(selected[0])

    def _request_fork(self, revision_id: str) -> None:
        if self._task_id is not None:
            self.sig_fork_requested.emit(self._task_id, revision_id)

    def _copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)

    # -- restoring in place -------------------------------------------------------------------

    def _entry(self, ref: str) -> data.TimelineEntry | None:
        timeline = self._timeline
        if timeline is None or ":" in ref:
            return None
        return next((e for e in timeline.entries if e.id == ref), None)

    def _restore_selected(self, kind: str) -> None:
        rows = self.selected_rows()
        if len(rows) == 1:
            self.request_restore(kind, self.model.entry(rows[0]).id)

    def request_restore(self, kind: str, revision_id: str, path: str = "") -> None:
        """Restore the workspace (or one file) to a revision, or undo its change: asks with
        what will be written, then restores in a job; refused with the reason while a run is
        live."""
        entry = self._entry(revision_id)
        refused = self.refused()
        if self._task_id is None or entry is None:
            return
        if refused:
            self.status.setText(f"Cannot restore: {refused}")
            return
        self.status.setText("")
        self.restores.start(Request(kind, self._task_id, entry.id, entry.seq, path))
        self._update_buttons()
        self._update_file_actions()

    def _on_restored(self, text: str, problem: bool) -> None:
        self.status.setText(text.splitlines()[0] if text else "")
        self.status.setToolTip(text)
        self._update_buttons()
        self._update_file_actions()
        self.reload()

    def _update_file_actions(self) -> None:
        here = self._here
        if here is None or self._task_id is None:
            self.viewer.set_file_actions([])
            return
        _rev, seq = here
        self.viewer.set_file_actions(
            [
                FileAction("restore", f"Restore this file to here (#{seq})…", self.refused()),
                FileAction("history", "Show this file's history…"),
            ]
        )

    def _on_file_action(self, name: str, path: str) -> None:
        if name == "restore" and self._here is not None:
            self.request_restore(FILE, self._here[0], path)
        elif name == "history":
            self.show_file_history(path)

    def show_file_history(self, path: str) -> FileHistoryDialog | None:
        """Open the history of one file: every revision that changed it, with its diff."""
        if self._task_id is None:
            return None
        dialog = FileHistoryDialog(self._context, self._task_id, path, self)
        dialog.show()
        return dialog
