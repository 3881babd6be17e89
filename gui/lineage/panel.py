"""The left side of the window: the lineage tree with its filter box.

Owns loading the tree (a job), keeping it current from events (new tasks, run states, workspace
states, snapshots, revisions, approvals), filtering it, and telling the window which task is
selected. The tree's shape and rows belong to gui.lineage.model, the reads behind them to
gui.lineage.data.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core import events as ev
from core.events import Event
from core.models import Run
from gui.lineage.data import (
    LineageData,
    TaskRow,
    live_workspaces,
    load_lineage,
    pending_approvals_by_task,
    task_row,
)
from gui.lineage.model import ROLE_TASK_ID, LineageFilter, LineageModel
from gui.qt import (
    QAbstractItemView,
    QGuiApplication,
    QHeaderView,
    QItemSelectionModel,
    QLabel,
    QLineEdit,
    QMenu,
    QModelIndex,
    QPoint,
    QStackedWidget,
    Qt,
    QTimer,
    QTreeView,
    QVBoxLayout,
    QWidget,
    Signal,
)
from gui.run_state import ENDED, FOLLOWABLE

if TYPE_CHECKING:
    from gui.context import AppContext

LOAD_KEY = "lineage"
SESSIONS_KEY = "lineage-sessions"
APPROVALS_KEY = "lineage-approvals"
NO_TASKS_TEXT = "No tasks yet.\nDrop a repository folder on the window, or choose File ▸ New Task…"
FILTER_DELAY_MS = 150
STATE_COLUMN_WIDTH = 110
EXPAND_MATCHES = 50  # matches whose ancestors are expanded when a filter is typed


class LineagePanel(QWidget):
    sig_task_selected = Signal(object)
    """The selected task changed: its id, or None."""

    sig_loaded = Signal(int)
    """The tree was (re)loaded with this many tasks."""

    sig_problem = Signal(str)
    """Loading found a problem worth showing (e.g. sandboxes could not be asked)."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.model = LineageModel(self)
        self.proxy = LineageFilter(self)
        self.proxy.setSourceModel(self.model)
        self._wanted_selection: str | None = None
        self._loaded = False

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.filter_edit = QLineEdit(self)
        self.filter_edit.setObjectName("lineageFilter")
        self.filter_edit.setPlaceholderText("Filter tasks by title, id, engine or state")
        self.filter_edit.setClearButtonEnabled(True)
        layout.addWidget(self.filter_edit)
        self.stack = QStackedWidget(self)
        self.tree = QTreeView(self)
        self.tree.setObjectName("lineageTree")
        self.tree.setModel(self.proxy)
        self.tree.setUniformRowHeights(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.tree.setAlternatingRowColors(True)
        self.tree.setIndentation(14)  # deep lineages keep room for their titles
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._show_context_menu)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        # The state column keeps a fixed share (its badges elide; the tooltip has them whole),
        # so a long badge never squeezes the titles out of a narrow pane.
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(1, STATE_COLUMN_WIDTH)
        self.empty_label = QLabel(NO_TASKS_TEXT, self)
        self.empty_label.setObjectName("lineageEmpty")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        self.empty_label.setEnabled(False)
        self.loading_label = QLabel("Loading tasks…", self)
        self.loading_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.stack.addWidget(self.loading_label)
        self.stack.addWidget(self.tree)
        self.stack.addWidget(self.empty_label)
        layout.addWidget(self.stack, 1)

        self._filter_timer = QTimer(self)
        self._filter_timer.setSingleShot(True)
        self._filter_timer.setInterval(FILTER_DELAY_MS)
        self._filter_timer.timeout.connect(self._apply_filter)
        self.filter_edit.textChanged.connect(lambda _text: self._filter_timer.start())
        self.tree.selectionModel().currentRowChanged.connect(self._current_changed)
        self._sessions_timer = QTimer(self)
        self._sessions_timer.setSingleShot(True)
        self._sessions_timer.setInterval(500)
        self._sessions_timer.timeout.connect(self.refresh_sessions)
        self._approvals_timer = QTimer(self)
        self._approvals_timer.setSingleShot(True)
        self._approvals_timer.setInterval(200)
        self._approvals_timer.timeout.connect(self.refresh_approvals)
        context.events.sig_events.connect(self._on_events)

    # -- loading ---------------------------------------------------------------------------------

    def reload(self) -> None:
        """Load every task (a job); the selection is kept across the reload."""
        cairn = self.context.cairn
        if self._loaded:
            self._wanted_selection = self.selected_task() or self._wanted_selection
        self.context.jobs.job(
            lambda: load_lineage(cairn), key=LOAD_KEY, what="load the tasks", parent=self
        ).success(self._loaded_rows).run()

    def _loaded_rows(self, data: LineageData) -> None:
        self.model.set_rows(data.rows)
        self._loaded = True
        self._update_stack()
        if self._wanted_selection:
            self.select_task(self._wanted_selection)
        self.sig_loaded.emit(len(data.rows))
        for row in data.rows:
            if row.run_state in FOLLOWABLE:
                self._follow_latest(row.task_id)
        if data.problem:
            self.sig_problem.emit(data.problem)

    def _update_stack(self) -> None:
        if not self._loaded:
            self.stack.setCurrentWidget(self.loading_label)
        elif len(self.model) == 0:
            self.stack.setCurrentWidget(self.empty_label)
        else:
            self.stack.setCurrentWidget(self.tree)

    def add_task_row(self, row: TaskRow) -> None:
        self.model.add_task(row)
        self._update_stack()

    def fetch_task(self, task_id: str, *, select: bool = False) -> None:
        """Load one task's row (a new task, or one whose state changed) and show it."""
        cairn = self.context.cairn

        def shown(row: TaskRow) -> None:
            known = self.model.task_row(row.task_id)
            if known is not None:  # whether its sandbox is live is the sessions check's to say
                row = replace(row, live=known.live)
            self.add_task_row(row)
            self._sessions_timer.start()
            if select:
                self.select_task(row.task_id)

        self.context.jobs.job(
            lambda: task_row(cairn, task_id), what="load the task", parent=self
        ).success(shown).run()

    # -- the row's context menu ------------------------------------------------------------------

    def context_menu_for(self, task_id: str) -> QMenu:
        """Archive (or bring back) the task's workspace, copy its id."""
        row = self.model.task_row(task_id)
        menu = QMenu(self)
        archived = row is not None and row.workspace_state == "archived"
        if archived:
            action = menu.addAction("Unarchive Task")
            action.setToolTip(
                "Bring the workspace back (its files from its newest snapshot if a "
                "cleanup removed them)"
            )
            action.triggered.connect(lambda: self.set_archived(task_id, False))
        else:
            action = menu.addAction("Archive Task")
            action.setToolTip(
                "Snapshot the workspace and let File ▸ Housekeeping free its files; "
                "history stays browsable"
            )
            action.triggered.connect(lambda: self.set_archived(task_id, True))
        menu.setToolTipsVisible(True)
        menu.addSeparator()
        menu.addAction("Copy Task ID").triggered.connect(
            lambda: QGuiApplication.clipboard().setText(task_id)
        )
        return menu

    def _show_context_menu(self, pos: QPoint) -> None:
        index = self.tree.indexAt(pos)
        task_id = index.data(ROLE_TASK_ID) if index.isValid() else None
        if task_id:
            self.context_menu_for(task_id).popup(self.tree.viewport().mapToGlobal(pos))

    def set_archived(self, task_id: str, archived: bool) -> None:
        """Archive or unarchive a task's workspace (a write job); the core refuses while a run or
        its sandbox is live, and says so."""
        cairn = self.context.cairn
        work = (
            (lambda: cairn.housekeeping.archive(task_id))
            if archived
            else (lambda: cairn.housekeeping.unarchive(task_id))
        )
        verb = "archive" if archived else "unarchive"

        def done(_ws: Any) -> None:
            self.fetch_task(task_id)
            self.context.sig_status.emit(f"Task {task_id} {verb}d")

        self.context.jobs.job(work, write=True, what=f"{verb} task {task_id}", parent=self).success(
            done
        ).run()

    def refresh_sessions(self) -> None:
        """Ask which sandboxes are live (a job) and update the rows' live badges."""
        cairn = self.context.cairn
        self.context.jobs.job(
            cairn.views.status, key=SESSIONS_KEY, what="check the sandboxes", parent=self
        ).success(self._sessions_checked).run()

    def _sessions_checked(self, status: dict) -> None:
        self.context.set_sandbox_problem(status.get("problem"))
        live = live_workspaces(status)
        for node in self.model.task_nodes():
            row = node.task_row
            is_live = bool(row.workspace_id) and row.workspace_id in live
            if row.live != is_live:
                self.model.set_task_fields(row.task_id, live=is_live)

    # -- events ----------------------------------------------------------------------------------

    def _on_events(self, events: list[Event]) -> None:
        sessions_changed = False
        for event in events:
            payload = event.payload
            if event.kind == ev.TASK_CREATED and event.subject:
                if self.model.task_node(event.subject) is None:
                    self.fetch_task(event.subject)
            elif event.kind in (ev.RUN_STATE, ev.RUN_RESUMED):
                task_id = payload.get("task_id")
                state = payload.get("state") or (payload.get("report") and "running")
                if task_id and state:
                    self.model.set_task_fields(task_id, run_state=state)
                if state in FOLLOWABLE and event.subject:
                    self.context.followers.follow(event.subject)
                elif task_id and state in ENDED and self.model.task_node(task_id) is not None:
                    # The run's checkpoint and last revisions may have come before the row
                    # did (a new fork or continuation): read the whole row again.
                    self.fetch_task(task_id)
                sessions_changed = True
            elif event.kind == ev.WORKSPACE_STATE:
                task_id = self.model.task_for_workspace(event.subject or "")
                if task_id:
                    self.model.set_task_fields(task_id, workspace_state=payload.get("state"))
                sessions_changed = True
            elif event.kind == ev.SNAPSHOT_CREATED:
                task_id = self.model.task_for_workspace(event.subject or "")
                if task_id:
                    self.model.set_task_fields(task_id, snapshot="fresh")
            elif event.kind == ev.REVISION_RECORDED:
                task_id = self.model.task_for_workspace(event.subject or "")
                row = self.model.task_row(task_id) if task_id else None
                if row is not None and row.snapshot == "fresh":
                    self.model.set_task_fields(row.task_id, snapshot="stale")
            elif event.kind in (ev.APPROVAL_REQUESTED, ev.APPROVAL_DECIDED):
                self._approvals_timer.start()
        if sessions_changed:
            self._sessions_timer.start()

    def refresh_approvals(self) -> None:
        """Count the approvals waiting per task again (a job) and update the rows' badges."""
        cairn = self.context.cairn
        self.context.jobs.job(
            lambda: pending_approvals_by_task(cairn),
            key=APPROVALS_KEY,
            what="count the approvals",
            parent=self,
        ).success(self._approvals_counted).run()

    def _approvals_counted(self, counts: dict[str, int]) -> None:
        for node in self.model.task_nodes():
            row = node.task_row
            count = counts.get(row.task_id, 0)
            if row.approvals != count:
                self.model.set_task_fields(row.task_id, approvals=count)

    def _follow_latest(self, task_id: str) -> None:
        cairn = self.context.cairn

        def follow(run: Run | None) -> None:
            if run is not None and run.state in FOLLOWABLE:
                self.context.followers.follow(run.id)

        self.context.jobs.job(
            lambda: cairn.runs.in_flight(task_id), what="find the run in flight", parent=self
        ).success(follow).run()

    # -- filtering and selection -----------------------------------------------------------------

    def _apply_filter(self) -> None:
        text = self.filter_edit.text()
        self.proxy.set_text(text)
        if not text.strip():
            return
        needle = text.strip().lower()
        shown = 0
        for node in self.model.task_nodes():
            if needle not in node.haystack:
                continue
            self.model.expose(node)
            proxy_index = self.proxy.mapFromSource(self.model.index_of(node))
            parent = proxy_index.parent()
            while parent.isValid():
                self.tree.expand(parent)
                parent = parent.parent()
            shown += 1
            if shown >= EXPAND_MATCHES:
                break

    def selected_task(self) -> str | None:
        index = self.tree.currentIndex()
        return index.data(ROLE_TASK_ID) if index.isValid() else None

    def select_task(self, task_id: str) -> bool:
        """Select a task (fetching and expanding down to it); False if it is not in the tree."""
        source = self.model.index_of_task(task_id)
        if not source.isValid():
            self._wanted_selection = task_id
            return False
        index = self.proxy.mapFromSource(source)
        if not index.isValid():  # filtered out: clear the filter so the task can be shown
            self.filter_edit.clear()
            self._apply_filter()
            index = self.proxy.mapFromSource(source)
        parent = index.parent()
        while parent.isValid():
            self.tree.expand(parent)
            parent = parent.parent()
        self.tree.selectionModel().setCurrentIndex(
            index,
            QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows,
        )
        self.tree.scrollTo(index)
        self._wanted_selection = None
        return True

    def restore_selection(self, task_id: str | None) -> None:
        """Select this task once the tree has loaded (the saved selection of the last session)."""
        if task_id and not (self._loaded and self.select_task(task_id)):
            self._wanted_selection = task_id

    def _current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        task_id: Any = current.data(ROLE_TASK_ID) if current.isValid() else None
        self.sig_task_selected.emit(task_id)

    def refresh_icons(self) -> None:
        self.model.refresh_icons()
