"""The Sessions & Snapshots tab: every sandbox and every snapshot, Stop / Resume / Reconcile,
Snapshot Now, naming a snapshot, and what the last resume did, in words.

Owns showing `cairn.views.status()` and running those actions as jobs (results and errors
shown here). A sandbox on the host backend is labelled UNSAFE wherever it appears: it has no
isolation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core import events as ev
from core import humanize
from gui.qt import (
    QAbstractItemView,
    QBrush,
    QColor,
    QFont,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSplitter,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)
from gui.sessions import data

if TYPE_CHECKING:
    from core.models import Run
    from core.runs.ladder import ResumeReport
    from core.runs.reconcile import ReconcileReport
    from gui.context import AppContext

SESSION_COLUMNS = (
    "Task",
    "Sandbox",
    "Backend",
    "Host",
    "State",
    "Image",
    "Uptime",
    "CPU",
    "Memory",
)
(S_TASK, S_SANDBOX, S_BACKEND, S_HOST, S_STATE, S_IMAGE, S_UPTIME, S_CPU, S_MEMORY) = range(9)
SNAPSHOT_COLUMNS = ("Snapshot", "Name", "Task", "Revision", "Age", "Size", "Restorable")
(P_ID, P_NAME, P_TASK, P_REVISION, P_AGE, P_SIZE, P_RESTORABLE) = range(7)

UNSAFE_TEXT = "UNSAFE: host, no isolation"
UNSAFE_TOOLTIP = (
    "This sandbox runs directly on your computer (the host backend): the agent can "
    "read and change anything your user can. It has no isolation."
)
SNAPSHOT_TEXT = "Snapshot Now"
SNAPSHOT_BUSY_TEXT = "Snapshotting…"
RENAME_TEXT = "Rename…"
REFRESH_MS = 5_000
EVENT_REFRESH_MS = 250

_REFRESH_ON = {
    ev.RUN_STATE,
    ev.RUN_RESUMED,
    ev.SNAPSHOT_CREATED,
    ev.SNAPSHOT_RENAMED,
    ev.WORKSPACE_STATE,
    ev.TASK_CREATED,
}


def _item(text: str, tooltip: str | None = None, *, align_right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if tooltip:
        item.setToolTip(tooltip)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def _table(columns: tuple[str, ...], stretch: int, parent: QWidget) -> QTableWidget:
    table = QTableWidget(0, len(columns), parent)
    table.setHorizontalHeaderLabels(list(columns))
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(False)
    table.setShowGrid(False)
    table.setWordWrap(False)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return table


class SessionsPanel(QWidget):
    """Every sandbox session and snapshot; `set_task` selects that task's sandbox."""

    sig_loaded = Signal()
    """The tables show a fresh `views.status()`."""

    sig_action_done = Signal(str, bool)
    """Stop, Resume, Reconcile or Snapshot ended: (action, succeeded)."""

    sig_target_checked = Signal()
    """The workspace Snapshot Now would snapshot was checked (the button's state is current)."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self._context = context
        self._jobs = context.jobs
        self._task_id: str | None = None
        self._data = data.SessionsData()
        self._busy: str | None = None
        self._last_resume: dict[str, dict] = {}  # by task id: reports seen from actions/events
        self._target: data.SnapshotTarget | None = None  # what Snapshot Now would snapshot
        self._target_problem: tuple[str, str] | None = None  # (task id, why it was not checked)
        self._made_snapshot: str | None = None  # selected in the table once it is listed
        self._loading = False  # a load is in flight; another waits for it (`_reload`)
        self._reload = False
        self._key = f"sessions-{id(self)}"

        self.problem = QLabel(self)
        self.problem.setObjectName("sessionsProblem")
        self.problem.setWordWrap(True)
        self.problem.setVisible(False)

        self.sessions = _table(SESSION_COLUMNS, S_TASK, self)
        self.sessions.setObjectName("sessionsTable")
        self.sessions.itemSelectionChanged.connect(self._on_session_selected)
        self.snapshots = _table(SNAPSHOT_COLUMNS, P_TASK, self)
        self.snapshots.setObjectName("snapshotsTable")
        self.snapshots.itemSelectionChanged.connect(self._update_buttons)
        self.snapshots.itemDoubleClicked.connect(
            lambda item: self.rename_selected() if item.column() == P_NAME else None
        )
        self.snapshots.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.snapshots.customContextMenuRequested.connect(self._snapshot_menu)

        self.refresh_button = QPushButton("Refresh", self)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setToolTip("Cancel the task's run in flight and stop its sandbox")
        self.resume_button = QPushButton("Resume", self)
        self.resume_button.setToolTip("Resume the task's interrupted run from its last checkpoint")
        self.reconcile_button = QPushButton("Reconcile", self)
        self.reconcile_button.setToolTip(
            "Match sandboxes on this machine with Cairn's records and "
            "settle runs whose process is gone; nothing is deleted"
        )
        self.refresh_button.clicked.connect(self.refresh)
        self.stop_button.clicked.connect(self.stop_selected)
        self.resume_button.clicked.connect(self.resume_selected)
        self.reconcile_button.clicked.connect(self.reconcile)
        self.snapshot_button = QPushButton(SNAPSHOT_TEXT, self)
        self.snapshot_button.setObjectName("snapshotNow")
        self.snapshot_button.clicked.connect(self.snapshot_selected)
        self.rename_button = QPushButton(RENAME_TEXT, self)
        self.rename_button.setObjectName("renameSnapshot")
        self.rename_button.clicked.connect(self.rename_selected)

        self.message = QLabel(self)
        self.message.setObjectName("sessionsMessage")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.resume_report = QLabel(data.describe_resume(None), self)
        self.resume_report.setObjectName("sessionsResumeReport")
        self.resume_report.setWordWrap(True)
        self.resume_report.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        buttons = QHBoxLayout()
        for b in (self.stop_button, self.resume_button, self.reconcile_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.refresh_button)

        top = QWidget(self)
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(QLabel("Sandboxes", top))
        top_layout.addWidget(self.sessions, 1)
        top_layout.addLayout(buttons)
        top_layout.addWidget(self.resume_report)
        bottom = QWidget(self)
        bottom_layout = QVBoxLayout(bottom)
        bottom_layout.setContentsMargins(0, 0, 0, 0)
        snapshots_head = QHBoxLayout()
        snapshots_head.addWidget(QLabel("Snapshots", bottom))
        snapshots_head.addStretch(1)
        snapshots_head.addWidget(self.rename_button)
        snapshots_head.addWidget(self.snapshot_button)
        bottom_layout.addLayout(snapshots_head)
        bottom_layout.addWidget(self.snapshots, 1)
        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.addWidget(top)
        splitter.addWidget(bottom)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.problem)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.message)  # the panel's status line, under both tables

        self._refresh_timer = QTimer(self)
        self._refresh_timer.setInterval(REFRESH_MS)
        self._refresh_timer.timeout.connect(self.refresh)
        self._event_timer = QTimer(self)
        self._event_timer.setSingleShot(True)
        self._event_timer.setInterval(EVENT_REFRESH_MS)
        self._event_timer.timeout.connect(self.refresh)
        context.events.sig_event.connect(self._on_event)
        self._update_buttons()
        self.refresh()

    @property
    def _cairn(self):
        return self._context.cairn

    # -- the task -----------------------------------------------------------------------------

    def set_task(self, task_id: str | None) -> None:
        """Select the sandbox of this task (every sandbox stays listed)."""
        if task_id != self._task_id and self.message.property("error"):
            self._show_message("")  # an error about another task is not this one's
        self._task_id = task_id
        self._select_task_row()
        self._show_resume_report()
        self._check_target()

    def _select_task_row(self) -> None:
        if self._task_id is None:
            return
        for row, s in enumerate(self._data.sessions):
            if s.task_id == self._task_id:
                self.sessions.selectRow(row)
                return
        self.sessions.clearSelection()

    def selected_session(self) -> data.SessionRow | None:
        rows = {i.row() for i in self.sessions.selectedIndexes()}
        if len(rows) != 1:
            return None
        row = rows.pop()
        return self._data.sessions[row] if row < len(self._data.sessions) else None

    # -- loading ------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Load the tables again. One load at a time: `views.status()` of a large workspace takes
        seconds of a job thread, and overlapping loads (timer, events, actions) would only
        compete with the GUI thread for the interpreter; a request meanwhile runs once after."""
        self._check_target()
        if self._loading:
            self._reload = True
            return
        self._loading = True
        self._reload = False
        cairn = self._cairn
        self._jobs.job(
            lambda: data.load_sessions(cairn),
            key=f"{self._key}-load",
            what="list the sandboxes and snapshots",
            parent=self,
        ).success(self._show_data).failure(
            lambda failure: self._show_message(failure.sentence(), error=True)
        ).finished(self._load_finished).run()

    def _load_finished(self) -> None:
        self._loading = False
        if self._reload:
            self.refresh()

    def _snapshot_task_id(self) -> str | None:
        """The task Snapshot Now acts on: the selected sandbox's, else the window's selection."""
        s = self.selected_session()
        if s is not None and s.task_id is not None:
            return s.task_id
        return self._task_id

    def _check_target(self) -> None:
        """Ask (in a job) whether the workspace Snapshot Now would snapshot can be snapshotted."""
        task_id = self._snapshot_task_id()
        key = f"{self._key}-target"
        if task_id is None:
            self._jobs.supersede(key)
            self._target = None
            self._update_buttons()
            return
        if self._target is not None and self._target.task_id != task_id:
            self._target = None  # never offer the button with another task's facts
            self._update_buttons()
        cairn = self._cairn
        self._jobs.job(
            lambda: data.load_snapshot_target(cairn, task_id),
            key=key,
            what="check the task's workspace",
            parent=self,
        ).success(self._target_checked).failure(
            lambda failure: self._target_failed(task_id, failure)
        ).run()

    def _target_checked(self, target: data.SnapshotTarget) -> None:
        self._target = target
        self._target_problem = None
        self._update_buttons()
        self.sig_target_checked.emit()

    def _target_failed(self, task_id: str, failure) -> None:
        self._target = None
        self._target_problem = (task_id, failure.message)
        self._update_buttons()
        self.sig_target_checked.emit()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._refresh_timer.start()

    def hideEvent(self, event) -> None:
        super().hideEvent(event)
        self._refresh_timer.stop()

    def _on_event(self, event) -> None:
        if event.kind in (ev.RUN_STATE, ev.RUN_RESUMED) and self.message.property("error"):
            # A run moved since the failure was shown: the red line describes the past.
            self._show_message("")
        if event.kind == ev.RUN_RESUMED and isinstance(event.payload.get("report"), dict):
            task_id = event.payload.get("task_id")
            if task_id:
                self._last_resume[task_id] = event.payload["report"]
                self._show_resume_report()
        if event.kind in _REFRESH_ON:
            self._event_timer.start()

    def _show_data(self, loaded: data.SessionsData) -> None:
        selected = self.selected_session()
        keep = selected.session_id if selected else None
        self._data = loaded
        self.problem.setVisible(bool(loaded.problem))
        if loaded.problem:
            self.problem.setText(
                f"The sandbox backend could not be asked: {loaded.problem}. "
                "Sandbox states are shown as unknown."
            )
        self._fill_sessions(loaded)
        self._fill_snapshots(loaded)
        if keep is not None:
            for row, s in enumerate(loaded.sessions):
                if s.session_id == keep:
                    self.sessions.selectRow(row)
                    break
        else:
            self._select_task_row()
        self._update_buttons()
        self._show_resume_report()
        self.sig_loaded.emit()

    def _fill_sessions(self, loaded: data.SessionsData) -> None:
        table = self.sessions
        table.blockSignals(True)
        try:
            table.setRowCount(len(loaded.sessions))
            for row, s in enumerate(loaded.sessions):
                table.setItem(row, S_TASK, _item(s.task_title, s.task_id or s.workspace_id))
                table.setItem(
                    row,
                    S_SANDBOX,
                    _item(
                        s.container or s.session_id,
                        f"session {s.session_id}, generation "
                        f"{s.generation}, snapshot "
                        f"{s.snapshot_id or 'none'}",
                    ),
                )
                backend = _item(
                    UNSAFE_TEXT if s.unsafe else s.backend, UNSAFE_TOOLTIP if s.unsafe else None
                )
                if s.unsafe:
                    font = QFont()
                    font.setBold(True)
                    backend.setFont(font)
                    backend.setForeground(QBrush(QColor(200, 40, 40)))
                table.setItem(row, S_BACKEND, backend)
                table.setItem(
                    row, S_HOST, _item(s.host or "—", "the sandbox host the sandbox runs on")
                )
                table.setItem(row, S_STATE, _item(s.state, _STATE_WORDS.get(s.state)))
                image = s.image or "—"
                table.setItem(
                    row,
                    S_IMAGE,
                    _item(image[:19] if image.startswith("sha256:") else image, s.image),
                )
                uptime = s.uptime_s if s.uptime_s is not None else s.age_s
                table.setItem(
                    row,
                    S_UPTIME,
                    _item(
                        humanize.duration(uptime) if s.state == "running" else "—",
                        f"session made {humanize.duration(s.age_s)} ago",
                        align_right=True,
                    ),
                )
                cpu = f"{s.cpu_percent:.1f} %" if s.cpu_percent is not None else "—"
                memory = humanize.size(s.memory_bytes) if s.memory_bytes is not None else "—"
                if s.memory_bytes is not None and s.memory_limit_bytes:
                    memory += f" of {humanize.size(s.memory_limit_bytes)}"
                table.setItem(row, S_CPU, _item(cpu, s.stats_note, align_right=True))
                table.setItem(row, S_MEMORY, _item(memory, s.stats_note, align_right=True))
        finally:
            table.blockSignals(False)

    def _fill_snapshots(self, loaded: data.SessionsData) -> None:
        table = self.snapshots
        chosen = self.selected_snapshot()
        keep = self._made_snapshot or (chosen.snapshot_id if chosen else None)
        table.blockSignals(True)
        try:
            table.setRowCount(len(loaded.snapshots))
            self._fill_snapshot_rows(loaded)
        finally:
            table.blockSignals(False)
        for row, p in enumerate(loaded.snapshots):
            if p.snapshot_id == keep:
                table.selectRow(row)
                item = table.item(row, P_ID)
                if item is not None and p.snapshot_id == self._made_snapshot:
                    table.scrollToItem(item)
                break
        self._made_snapshot = None

    def _fill_snapshot_rows(self, loaded: data.SessionsData) -> None:
        table = self.snapshots
        for row, p in enumerate(loaded.snapshots):
            table.setItem(row, P_ID, _item(p.snapshot_id, f"state {p.state}" if p.state else None))
            table.setItem(
                row, P_NAME, _item(p.name or "", "Double-click or Rename… to name the snapshot")
            )
            table.setItem(row, P_TASK, _item(p.task_title, p.workspace_id))
            table.setItem(row, P_REVISION, _item(p.revision[:12], p.revision))
            table.setItem(row, P_AGE, _item(humanize.duration(p.age_s), align_right=True))
            table.setItem(row, P_SIZE, _item(humanize.size(p.size), align_right=True))
            table.setItem(
                row,
                P_RESTORABLE,
                _item(
                    "yes" if p.restorable else "NO",
                    None if p.restorable else "its reference in the vault is missing or moved",
                ),
            )

    def selected_snapshot(self) -> data.SnapshotRow | None:
        rows = {i.row() for i in self.snapshots.selectedItems()}
        if len(rows) != 1:
            return None
        row = rows.pop()
        return self._data.snapshots[row] if row < len(self._data.snapshots) else None

    def _snapshot_menu(self, pos) -> None:
        item = self.snapshots.itemAt(pos)
        if item is None:
            return
        self.snapshots.selectRow(item.row())
        menu = QMenu(self)
        rename = menu.addAction(RENAME_TEXT)
        rename.setEnabled(self._busy is None)
        rename.triggered.connect(self.rename_selected)
        menu.popup(self.snapshots.viewport().mapToGlobal(pos))

    def _ask_name(self, snap: data.SnapshotRow) -> str | None:
        """The new name, or None when the person cancelled (blank removes the name)."""
        text, ok = QInputDialog.getText(
            self,
            "Rename Snapshot",
            f"Name of snapshot {snap.snapshot_id} (blank: no name):",
            QLineEdit.EchoMode.Normal,
            snap.name or "",
        )
        return text if ok else None

    def rename_selected(self) -> None:
        """Rename…: ask for the selected snapshot's new name and store it in a job."""
        snap = self.selected_snapshot()
        if snap is None or self._busy is not None:
            return
        name = self._ask_name(snap)
        if name is None:
            return
        snapshot_id, cairn = snap.snapshot_id, self._cairn
        self._made_snapshot = snapshot_id  # keep it selected once listed again
        self._run_action(
            "rename",
            f"Naming snapshot {snapshot_id}…",
            lambda: data.rename_snapshot(cairn, snapshot_id, name),
            self._renamed,
        )

    def _renamed(self, renamed: tuple[str, str | None]) -> None:
        snapshot_id, name = renamed
        self._made_snapshot = snapshot_id
        self._show_message(
            f"Snapshot {snapshot_id} is named “{name}”."
            if name
            else f"Snapshot {snapshot_id} has no name."
        )

    # -- actions ------------------------------------------------------------------------------

    def _on_session_selected(self) -> None:
        self._update_buttons()
        self._show_resume_report()
        if self._snapshot_task_id() != (self._target.task_id if self._target else None):
            self._check_target()

    def _update_buttons(self) -> None:
        s = self.selected_session()
        idle = self._busy is None
        has_task = s is not None and s.task_id is not None
        self.stop_button.setEnabled(
            idle and has_task and s is not None and s.state in ("running", "unknown")
        )
        resume_refusal = data.resume_refusal(s)
        self.resume_button.setEnabled(idle and resume_refusal is None)
        self.resume_button.setToolTip(
            resume_refusal[:1].upper() + resume_refusal[1:]
            if resume_refusal
            else "Resume the task's interrupted run from its last checkpoint"
        )
        self.reconcile_button.setEnabled(idle)
        can_snapshot, why = self._snapshot_state()
        self.snapshot_button.setText(
            SNAPSHOT_BUSY_TEXT if self._busy == "snapshot" else SNAPSHOT_TEXT
        )
        self.snapshot_button.setEnabled(idle and can_snapshot)
        self.snapshot_button.setToolTip(why)
        chosen = self.selected_snapshot()
        self.rename_button.setEnabled(idle and chosen is not None)
        self.rename_button.setToolTip(
            f"Name snapshot {chosen.snapshot_id}"
            if chosen is not None
            else "Select a snapshot to name it"
        )

    def _snapshot_state(self) -> tuple[bool, str]:
        """Whether Snapshot Now can run now, and its tooltip (the reason when it cannot)."""
        if self._busy == "snapshot":
            return False, "Snapshotting the workspace…"
        task_id = self._snapshot_task_id()
        if task_id is None:
            return False, "Select a task to snapshot its workspace"
        target = self._target
        if target is None or target.task_id != task_id:
            if self._target_problem is not None and self._target_problem[0] == task_id:
                return False, (
                    f"The task's workspace could not be checked: {self._target_problem[1]}"
                )
            return False, "Checking the task's workspace…"
        refusal = target.refusal()
        if refusal is not None:
            return False, refusal[:1].upper() + refusal[1:]
        if self._busy is not None:
            return False, f"Waiting for {self._busy} to finish"
        return True, (
            f"Capture the workspace of {target.task_title} now and keep its latest "
            "revision as a durable snapshot"
        )

    def stop_selected(self) -> None:
        s = self.selected_session()
        if s is None or s.task_id is None:
            return
        task_id, cairn = s.task_id, self._cairn
        self._run_action(
            "stop",
            f"Stopping the sandbox of {s.task_title}…",
            lambda: cairn.runs.stop(task_id),
            self._stopped,
        )

    def resume_selected(self) -> None:
        s = self.selected_session()
        if s is None or s.task_id is None:
            return
        task_id, cairn = s.task_id, self._cairn
        self._run_action(
            "resume",
            f"Resuming {s.task_title}…",
            lambda: (task_id, cairn.runs.resume(task_id)),
            self._resumed,
        )

    def snapshot_selected(self) -> None:
        """Snapshot Now: a verifying capture of the task's workspace, then a durable snapshot."""
        target = self._target
        if (
            target is None
            or target.task_id != self._snapshot_task_id()
            or target.refusal() is not None
            or self._busy is not None
        ):
            return
        task_id, title, cairn = target.task_id, target.task_title, self._cairn
        self._run_action(
            "snapshot",
            f"Snapshotting the workspace of {title}…",
            lambda: data.take_snapshot(cairn, task_id, title),
            self._snapshotted,
        )

    def reconcile(self) -> None:
        cairn = self._cairn
        self._run_action(
            "reconcile",
            "Reconciling sandboxes and runs…",
            lambda: cairn.runs.reconcile(),
            self._reconciled,
        )

    def _run_action(self, action: str, doing: str, work, on_done) -> None:
        self._busy = action
        self._update_buttons()
        self._show_message(doing)
        self._jobs.job(work, write=True, what=_ACTION_WHAT[action], parent=self).success(
            lambda result: self._action_done(action, on_done, result)
        ).failure(lambda failure: self._action_failed(action, failure)).run()

    def _action_done(self, action: str, on_done, result) -> None:
        self._busy = None
        try:
            on_done(result)
        finally:
            self._update_buttons()
            self.refresh()
            self.sig_action_done.emit(action, True)

    def _action_failed(self, action: str, failure) -> None:
        self._busy = None
        self._update_buttons()
        self._show_message(f"{action.capitalize()} failed: {failure.message}", error=True)
        self.refresh()
        self.sig_action_done.emit(action, False)

    def _stopped(self, result: dict) -> None:
        parts = []
        if result.get("run"):
            parts.append(f"cancelled run {result['run']}")
        if result.get("sandbox"):
            parts.append(f"stopped sandbox {result['sandbox']}")
        self._show_message("Stop: " + (", ".join(parts) if parts else "nothing was running") + ".")

    def _resumed(self, result: tuple[str, tuple[Run, ResumeReport]]) -> None:
        task_id, (run, report) = result
        self._last_resume[task_id] = report.to_dict()
        self._show_message(f"Resumed: run {run.id} is {run.state}.")
        self._show_resume_report(task_id)

    def _snapshotted(self, made: data.SnapshotMade) -> None:
        self._made_snapshot = made.snapshot_id
        if made.reused:
            text = (
                f"Snapshot: the latest revision {made.revision[:12]} of {made.task_title} "
                f"already had snapshot {made.snapshot_id}; it was kept."
            )
        else:
            text = (
                f"Snapshot {made.snapshot_id} made of revision {made.revision[:12]} "
                f"({made.task_title})."
            )
        self._show_message(text)
        self._context.sig_status.emit(text)

    def _reconciled(self, report: ReconcileReport) -> None:
        self._show_message(describe_reconcile(report.to_dict()))

    # -- words --------------------------------------------------------------------------------

    def _show_message(self, text: str, *, error: bool = False) -> None:
        self.message.setText(text)
        self.message.setProperty("error", error)
        self.message.setStyleSheet("color: #c62828;" if error else "")

    def _show_resume_report(self, task_id: str | None = None) -> None:
        if task_id is None:
            s = self.selected_session()
            task_id = s.task_id if s is not None else self._task_id
        report = self._last_resume.get(task_id) if task_id else None
        if report is None and task_id and task_id in self._data.resumes:
            report = self._data.resumes[task_id].report
        self.resume_report.setText(data.describe_resume(report))


_STATE_WORDS = {
    "running": "the sandbox is running",
    "stopped": "the sandbox exists but is stopped",
    "gone": "the sandbox no longer exists; a resume recreates it from the same snapshot",
    "unknown": "the sandbox backend could not be asked",
    "host unreachable": "the sandbox's host does not answer; its runs go on there and are "
    "found again when it answers",
}


def describe_reconcile(d: dict) -> str:
    """A reconcile report in words."""
    parts = []
    for key, words in (
        ("interrupted", "run(s) marked interrupted"),
        ("finished", "run(s) found finished"),
        ("still_running", "run(s) still running"),
        ("sessions_gone", "sandbox(es) gone"),
        ("catch_up_revisions", "catch-up revision(s) recorded"),
        ("orphan_containers", "container(s) Cairn does not know (left alone)"),
        ("orphan_snapshot_refs", "snapshot reference(s) without a record"),
    ):
        items = d.get(key) or []
        if items:
            parts.append(f"{len(items)} {words}")
    text = "Reconcile: " + (", ".join(parts) if parts else "everything matched") + "."
    problems = d.get("problems") or []
    if problems:
        text += " Problems: " + "; ".join(str(p) for p in problems) + "."
    return text


_ACTION_WHAT = {
    "stop": "stop the task's sandbox",
    "resume": "resume the task",
    "reconcile": "reconcile sandboxes and runs",
    "snapshot": "snapshot the task's workspace",
    "rename": "name the snapshot",
}
