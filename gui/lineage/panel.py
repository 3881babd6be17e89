"""The left side of the window: the lineage tree with its filter box.

Owns loading the tree (a job), keeping it current from events (new tasks, run states, workspace
states, snapshots, revisions, approvals, and while the Cost column is shown what runs used),
filtering it, the columns shown (the header's context menu; kept in the Qt settings), and telling
the window which task is selected. The tree's shape and rows belong to gui.lineage.model, the
reads behind them to gui.lineage.data.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core import events as ev
from core.events import Event
from core.housekeeping import Deletion
from core.models import Run, Task
from gui import shortcuts
from gui.lineage.data import (
    LineageData,
    TaskRow,
    live_workspaces,
    load_lineage,
    pending_approvals_by_task,
    task_row,
    usage_by_task,
)
from gui.lineage.dialogs import InstructionsDialog
from gui.lineage.model import COST_COLUMN, ROLE_TASK_ID, LineageFilter, LineageModel
from gui.qt import (
    QAbstractItemView,
    QAction,
    QGuiApplication,
    QHeaderView,
    QInputDialog,
    QItemSelectionModel,
    QKeySequence,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QModelIndex,
    QPoint,
    QResizeEvent,
    QStackedWidget,
    Qt,
    QTimer,
    QTreeView,
    QVBoxLayout,
    QWidget,
    Signal,
)
from gui.run_state import ENDED, FOLLOWABLE, IN_FLIGHT

if TYPE_CHECKING:
    from gui.context import AppContext

LOAD_KEY = "lineage"
SESSIONS_KEY = "lineage-sessions"
APPROVALS_KEY = "lineage-approvals"
USAGE_KEY = "lineage-usage"
COST_COLUMN_SETTING = "lineage/cost_column"  # Qt setting: whether the Cost column is shown
USAGE_LIVE_MS = 5000  # at most this often the figures are read again while runs write output
COST_SHARE = 0.25  # the most of the pane's width the cost column takes
NO_TASKS_TEXT = "No tasks yet.\nDrop a repository folder on the window, or choose File ▸ New Task…"
FILTER_DELAY_MS = 150
STATE_COLUMN_WIDTH = 110  # until the rows have been measured
STATE_SHARE = 0.34  # the most of the pane's width the state column takes
NO_TASK = "select a task in the tree first"
STOPPING = "stopping…"
STOPPING_AT_MOST_MS = 60_000  # a stop the core never reported ends here; the row is read again
EXPAND_MATCHES = 50  # matches whose ancestors are expanded when a filter is typed


class _LineageTree(QTreeView):
    sig_resized = Signal()
    """The tree's width changed: its columns are fitted again."""

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.sig_resized.emit()


class LineagePanel(QWidget):
    sig_task_selected = Signal(object)
    """The selected task changed: its id, or None."""

    sig_loaded = Signal(int)
    """The tree was (re)loaded with this many tasks."""

    sig_task_changed = Signal(str)
    """A task's title or instructions were changed here: its id."""

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
        self._stopping: set[str] = set()  # tasks whose Stop is under way

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.filter_edit = QLineEdit(self)
        self.filter_edit.setObjectName("lineageFilter")
        self.filter_edit.setPlaceholderText("Filter tasks by title, id, engine or state")
        self.filter_edit.setClearButtonEnabled(True)
        layout.addWidget(self.filter_edit)
        self.stack = QStackedWidget(self)
        self.tree = _LineageTree(self)
        self.tree.setObjectName("lineageTree")
        self.tree.setModel(self.proxy)
        self.tree.setUniformRowHeights(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.tree.setAlternatingRowColors(True)
        self.tree.setIndentation(14)  # deep lineages keep room for their titles
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._show_context_menu)
        self._task_actions: list[QAction] = []  # the task view's, shown first in the menu
        self._build_actions()
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        # The state column is as wide as its badges, up to a share of the pane (longer badges
        # elide; the tooltip has them whole), so the titles keep most of a narrow pane.
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(1, STATE_COLUMN_WIDTH)
        header.setSectionResizeMode(COST_COLUMN, QHeaderView.ResizeMode.Interactive)
        header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(self._show_header_menu)
        self.cost_column_action = QAction("Cost", self)
        self.cost_column_action.setObjectName("action_cost_column")
        self.cost_column_action.setCheckable(True)
        self.cost_column_action.setToolTip(
            "Show what each task's runs cost (tokens, and a lineage's total, in the tooltip)"
        )
        shown = bool(context.settings.value(COST_COLUMN_SETTING, False, type=bool))
        self.cost_column_action.setChecked(shown)
        self.tree.setColumnHidden(COST_COLUMN, not shown)
        self.cost_column_action.toggled.connect(self.show_cost_column)
        self.tree.sig_resized.connect(self._fit_state_column)
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

        self._fit_timer = QTimer(self)
        self._fit_timer.setSingleShot(True)
        self._fit_timer.setInterval(100)
        self._fit_timer.timeout.connect(self._fit_state_column)
        self._filter_timer = QTimer(self)
        self._filter_timer.setSingleShot(True)
        self._filter_timer.setInterval(FILTER_DELAY_MS)
        self._filter_timer.timeout.connect(self._apply_filter)
        self.filter_edit.textChanged.connect(lambda _text: self._filter_timer.start())
        self.tree.selectionModel().currentRowChanged.connect(self._current_changed)
        self._actions_timer = QTimer(self)
        self._actions_timer.setSingleShot(True)
        self._actions_timer.setInterval(0)
        self._actions_timer.timeout.connect(self.update_actions)
        for signal in (
            self.model.dataChanged,
            self.model.rowsInserted,
            self.model.rowsRemoved,
            self.model.modelReset,
        ):
            signal.connect(lambda *_: self._rows_changed())
        self._sessions_timer = QTimer(self)
        self._sessions_timer.setSingleShot(True)
        self._sessions_timer.setInterval(500)
        self._sessions_timer.timeout.connect(self.refresh_sessions)
        self._approvals_timer = QTimer(self)
        self._approvals_timer.setSingleShot(True)
        self._approvals_timer.setInterval(200)
        self._approvals_timer.timeout.connect(self.refresh_approvals)
        self._usage_timer = QTimer(self)
        self._usage_timer.setSingleShot(True)
        self._usage_timer.setInterval(USAGE_LIVE_MS)
        self._usage_timer.timeout.connect(self.refresh_usage)
        context.events.sig_events.connect(self._on_events)

    # -- loading ---------------------------------------------------------------------------------

    def reload(self) -> None:
        """Load every task (a job); the selection is kept across the reload."""
        cairn = self.context.cairn
        with_usage = self.cost_column_shown()
        if self._loaded:
            self._wanted_selection = self.selected_task() or self._wanted_selection
        self.context.jobs.job(
            lambda: load_lineage(cairn, with_usage=with_usage),
            key=LOAD_KEY,
            what="load the tasks",
            parent=self,
        ).success(self._loaded_rows).run()

    # -- the Cost column -------------------------------------------------------------------------

    def cost_column_shown(self) -> bool:
        return self.cost_column_action.isChecked()

    def show_cost_column(self, shown: bool) -> None:
        """Show or hide the Cost column (kept in the Qt settings); shown, the tasks' figures
        are read again (a job): hidden, the tree did not keep them current."""
        if self.cost_column_action.isChecked() != shown:
            self.cost_column_action.setChecked(shown)  # toggled comes back here
            return
        self.context.settings.setValue(COST_COLUMN_SETTING, shown)
        self.tree.setColumnHidden(COST_COLUMN, not shown)
        if shown:
            if self._loaded:
                self.refresh_usage()
            self._fit_state_column()
        else:
            self._usage_timer.stop()
            self.context.jobs.supersede(USAGE_KEY)

    def refresh_usage(self) -> None:
        """Read what every task's runs used (a job) and show it in the Cost column."""
        if not self.cost_column_shown():
            return
        cairn = self.context.cairn
        self.context.jobs.job(
            lambda: usage_by_task(cairn),
            key=USAGE_KEY,
            what="read what the tasks' runs used",
            parent=self,
        ).success(self._usage_read).run()

    def _usage_read(self, by_task: dict[str, dict[str, Any]]) -> None:
        if self.cost_column_shown():
            self.model.set_usage(by_task)

    def header_menu(self) -> QMenu:
        """The columns that can be shown or hidden (the tree's header's context menu)."""
        menu = QMenu(self)
        menu.setObjectName("lineageHeaderMenu")
        menu.addAction(self.cost_column_action)
        menu.setToolTipsVisible(True)
        return menu

    def _show_header_menu(self, pos: QPoint) -> None:
        previous = getattr(self, "header_context_menu", None)
        if previous is not None:  # the action is shared; the menu around it is not
            previous.deleteLater()
        self.header_context_menu = self.header_menu()
        self.header_context_menu.popup(self.tree.header().mapToGlobal(pos))

    def expanded_keys(self) -> set[tuple[str, str]]:
        """The (kind, key) of every folder and task row shown expanded."""
        out = set()
        for node in self.model.node(QModelIndex()).walk():
            if node.row is None or not node.exposed():
                continue
            if self.tree.isExpanded(self.proxy.mapFromSource(self.model.index_of(node))):
                out.add((node.kind, node.key))
        return out

    def _expand(self, keys: set[tuple[str, str]]) -> None:
        for node in list(self.model.node(QModelIndex()).walk()):
            if (node.kind, node.key) in keys:
                index = self.proxy.mapFromSource(self.model.expose(node))
                if index.isValid():
                    self.tree.expand(index)

    def _loaded_rows(self, data: LineageData) -> None:
        # A reload keeps what the user opened and selected: only the rows' values change.
        expanded = self.expanded_keys() if self._loaded else set()
        self._wanted_selection = self.selected_task() or self._wanted_selection
        self.model.set_rows(
            [replace(r, pending=STOPPING) if r.task_id in self._stopping else r for r in data.rows]
        )
        self._expand(expanded)
        self._loaded = True
        if self.cost_column_shown() and any(r.usage is None for r in data.rows):
            self.refresh_usage()  # the column was shown while the rows were read without it
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
        with_usage = self.cost_column_shown()

        def shown(row: TaskRow) -> None:
            known = self.model.task_row(row.task_id)
            if known is not None:  # whether its sandbox is live is the sessions check's to say
                row = replace(row, live=known.live)
                if row.usage is None:
                    row = replace(row, usage=known.usage)
            if row.task_id in self._stopping:
                row = replace(row, pending=STOPPING)
            self.add_task_row(row)
            self._sessions_timer.start()
            if select:
                self.select_task(row.task_id)

        self.context.jobs.job(
            lambda: task_row(cairn, task_id, with_usage=with_usage),
            what="load the task",
            parent=self,
        ).success(shown).run()

    # -- the row's context menu ------------------------------------------------------------------

    def _build_actions(self) -> None:
        """One QAction per thing the tree does to the selected task, shared by the context
        menu, the window's Task menu and the command palette; `update_actions` keeps each
        enabled or disabled with the reason in its tooltip."""

        def make(text: str, keys: str, slot: Any, *, tree_only: bool = False) -> QAction:
            action = QAction(text, self)
            action.setShortcut(QKeySequence(keys))
            # Keys that mean something else in a text field act only in the tree.
            action.setShortcutContext(
                Qt.ShortcutContext.WidgetWithChildrenShortcut
                if tree_only
                else Qt.ShortcutContext.WindowShortcut
            )
            action.triggered.connect(lambda _checked=False: self._on_selected(slot))
            self.tree.addAction(action)
            return action

        self.rename_action = make("Rename…", shortcuts.RENAME, self.rename_task, tree_only=True)
        self.rename_action.setObjectName("action_rename")
        self.edit_action = make(
            "Edit Instructions…", shortcuts.EDIT_INSTRUCTIONS, self.edit_instructions
        )
        self.edit_action.setObjectName("action_edit_instructions")
        self.archive_action = make("Archive Task", shortcuts.ARCHIVE, self._toggle_archived)
        self.archive_action.setObjectName("action_archive")
        self.delete_action = make(
            "Delete Task…", shortcuts.DELETE, self.delete_task, tree_only=True
        )
        self.delete_action.setObjectName("action_delete")
        self.copy_id_action = make("Copy Task ID", shortcuts.COPY_TASK_ID, self.copy_task_id)
        self.copy_id_action.setObjectName("action_copy_task_id")
        # The Menu key opens the context menu by itself; Shift+F10 is the other usual key.
        self.menu_key_action = QAction("Task Actions Menu", self)
        self.menu_key_action.setShortcut(QKeySequence("Shift+F10"))
        self.menu_key_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.menu_key_action.triggered.connect(lambda: self._show_context_menu(QPoint(-1, -1)))
        self.tree.addAction(self.menu_key_action)
        self.tree_actions = [
            self.rename_action,
            self.edit_action,
            self.archive_action,
            self.delete_action,
            self.copy_id_action,
        ]
        self.update_actions()

    def _on_selected(self, slot: Any) -> None:
        task_id = self.selected_task()
        if task_id:
            slot(task_id)

    def set_task_actions(self, actions: list[QAction]) -> None:
        """The task view's actions (Start, Continue…), shown above the tree's own in the
        context menu: the same QActions as the toolbar's, with their enabled states."""
        self._task_actions = list(actions)

    def _rows_changed(self) -> None:
        self._actions_timer.start()
        self._fit_timer.start()

    def update_actions(self) -> None:
        """Enable what can be done to the selected task now; a disabled action's tooltip says
        why not."""
        task_id = self.selected_task()
        row = self.model.task_row(task_id) if task_id else None

        def state(action: QAction, why: str | None, what: str) -> None:
            action.setEnabled(why is None)
            action.setToolTip(why or what)

        if row is None:
            for action in self.tree_actions:
                state(action, NO_TASK, "")
            self.archive_action.setText("Archive Task")
            return
        state(self.rename_action, None, "Give the task a new title")
        state(self.edit_action, _edit_refusal(row), "Change what the task's first run will do")
        if row.workspace_state == "archived":
            self.archive_action.setText("Unarchive Task")
            state(
                self.archive_action,
                None,
                "Bring the workspace back (its files from its newest snapshot if a cleanup "
                "removed them)",
            )
        else:
            self.archive_action.setText("Archive Task")
            state(
                self.archive_action,
                _archive_refusal(row),
                "Snapshot the workspace and let File ▸ Housekeeping free its files; "
                "history stays browsable",
            )
        state(
            self.delete_action,
            _delete_refusal(row, self.model),
            "Delete the task (you are shown what goes first)",
        )
        state(self.copy_id_action, None, f"Copy {row.task_id} to the clipboard")

    def _toggle_archived(self, task_id: str) -> None:
        row = self.model.task_row(task_id)
        self.set_archived(task_id, not (row is not None and row.workspace_state == "archived"))

    def copy_task_id(self, task_id: str) -> None:
        clipboard = QGuiApplication.clipboard()
        if clipboard is not None:
            clipboard.setText(task_id)
            self.context.sig_status.emit(f"Copied the task id {task_id}")

    def context_menu_for(self, task_id: str) -> QMenu:
        """The task's actions (the task view's, then rename, edit the instructions before the
        first run, archive or bring back, delete, copy the id), for this task, which is
        selected first: they are the same actions as the Task menu's. What cannot be done now
        is disabled with the reason in its tooltip."""
        if self.selected_task() != task_id:
            self.select_task(task_id)
        self.update_actions()
        menu = QMenu(self)
        menu.setObjectName("taskContextMenu")
        if self._task_actions:
            menu.addActions(self._task_actions)
            menu.addSeparator()
        menu.addActions(self.tree_actions[:2])
        menu.addSeparator()
        menu.addActions(self.tree_actions[2:4])
        menu.addSeparator()
        menu.addAction(self.copy_id_action)
        menu.setToolTipsVisible(True)
        return menu

    def _show_context_menu(self, pos: QPoint) -> None:
        index = self.tree.indexAt(pos)
        if not index.isValid():  # the keyboard's menu key: the current row
            index = self.tree.currentIndex()
            pos = self.tree.visualRect(index).bottomLeft()
        task_id = index.data(ROLE_TASK_ID) if index.isValid() else None
        if task_id:
            previous = getattr(self, "context_menu", None)
            if previous is not None:  # the actions are shared; the menu around them is not
                previous.deleteLater()
            self.context_menu = self.context_menu_for(task_id)
            self.context_menu.popup(self.tree.viewport().mapToGlobal(pos))

    def _fit_state_column(self) -> None:
        """The state column (and the cost column when shown) as wide as its widest text in
        view, but at most a share of the pane, so titles keep the rest."""
        width = self.tree.viewport().width()
        if width <= 0:
            return
        header = self.tree.header()
        wanted = max(self.tree.sizeHintForColumn(1), header.sectionSizeHint(1))
        header.resizeSection(1, max(48, min(wanted + 8, int(width * STATE_SHARE))))
        if not self.tree.isColumnHidden(COST_COLUMN):
            wanted = max(
                self.tree.sizeHintForColumn(COST_COLUMN), header.sectionSizeHint(COST_COLUMN)
            )
            header.resizeSection(COST_COLUMN, max(48, min(wanted + 8, int(width * COST_SHARE))))

    def set_archived(self, task_id: str, archived: bool, *, shared_ok: bool = False) -> None:
        """Archive or unarchive a task's workspace (a write job); the core refuses while a run or
        its sandbox is live, and says so. A workspace other tasks share is archived for all of
        them: the tasks are named and the user asked first."""
        cairn = self.context.cairn
        if archived and not shared_ok:
            self.context.jobs.job(
                lambda: cairn.housekeeping.sharing(task_id),
                what=f"find the tasks sharing the workspace of {task_id}",
                parent=self,
            ).success(lambda others: self._confirm_shared_archive(task_id, others)).run()
            return
        work = (
            (lambda: cairn.housekeeping.archive(task_id, shared_ok=shared_ok))
            if archived
            else (lambda: cairn.housekeeping.unarchive(task_id))
        )
        verb = "archive" if archived else "unarchive"

        def done(_ws: Any) -> None:
            for shared in self._tasks_sharing_workspace(task_id):
                self.fetch_task(shared)
            self.context.sig_status.emit(f"Task {task_id} {verb}d")

        self.context.jobs.job(work, write=True, what=f"{verb} task {task_id}", parent=self).success(
            done
        ).run()

    def _confirm_shared_archive(self, task_id: str, others: list[Task]) -> None:
        if not others:
            self.set_archived(task_id, True, shared_ok=True)
            return
        names = "\n".join(f"• {t.title} ({t.id})" for t in others)
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Archive a shared workspace",
            f"The workspace of this task is shared with:\n{names}\n\nArchiving it archives it "
            "for every one of them (their history stays; Unarchive brings it back).",
            QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setObjectName("confirmSharedArchive")
        archive = box.addButton("Archive for All", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.buttonClicked.connect(
            lambda button: (
                self.set_archived(task_id, True, shared_ok=True) if button is archive else None
            )
        )
        self.confirm_box = box
        box.open()

    def _tasks_sharing_workspace(self, task_id: str) -> list[str]:
        row = self.model.task_row(task_id)
        if row is None or not row.workspace_id:
            return [task_id]
        return [
            n.task_row.task_id
            for n in self.model.task_nodes()
            if n.task_row.workspace_id == row.workspace_id
        ]

    def rename_selected(self) -> None:
        task_id = self.selected_task()
        if task_id:
            self.rename_task(task_id)

    def rename_task(self, task_id: str) -> None:
        """Ask for a new title (F2 or the context menu), then rename in a write job."""
        row = self.model.task_row(task_id)
        dialog = QInputDialog(self)
        dialog.setObjectName("renameTask")
        dialog.setWindowTitle("Rename Task")
        dialog.setLabelText("Title:")
        dialog.setTextValue(row.title if row else "")
        cairn = self.context.cairn

        def accepted() -> None:
            title = dialog.textValue()
            if not title.strip():
                self.context.sig_status.emit("A task's title cannot be blank; it was kept")
                return
            self.context.jobs.job(
                lambda: cairn.tasks.rename(task_id, title),
                write=True,
                what=f"rename task {task_id}",
                parent=self,
            ).success(
                lambda task: self._changed_task(task, f"Task renamed to “{task.title}”")
            ).run()

        dialog.accepted.connect(accepted)
        self.rename_dialog = dialog
        dialog.open()

    def edit_instructions(self, task_id: str) -> None:
        """Edit the instructions of a task that has not run yet (a dialog, then a write job)."""
        row = self.model.task_row(task_id)
        dialog = InstructionsDialog(row.title if row else task_id, row, self)
        cairn = self.context.cairn

        def accepted() -> None:
            text = dialog.text()
            self.context.jobs.job(
                lambda: cairn.tasks.edit_instructions(task_id, text),
                write=True,
                what=f"edit the instructions of task {task_id}",
                parent=self,
            ).success(lambda task: self._changed_task(task, "Instructions saved")).run()

        dialog.accepted.connect(accepted)
        self.instructions_dialog = dialog
        dialog.open()

    def _changed_task(self, task: Task, message: str) -> None:
        self.fetch_task(task.id)
        self.sig_task_changed.emit(task.id)
        self.context.sig_status.emit(message)

    def delete_task(self, task_id: str) -> None:
        """Read what deleting the task removes, say it exactly and ask; then delete."""
        cairn = self.context.cairn
        self.context.jobs.job(
            lambda: cairn.housekeeping.deletion(task_id),
            what=f"find what deleting task {task_id} removes",
            parent=self,
        ).success(self._confirm_delete).run()

    def _confirm_delete(self, plan: Deletion) -> None:
        if plan.refusal:
            self.context.sig_status.emit(f"Task {plan.task_id} cannot be deleted: {plan.refusal}")
            return
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Delete Task",
            f"Delete “{plan.title}”? This removes:\n"
            + "\n".join(f"• {line}" for line in plan.what_goes())
            + "\n\nThis cannot be undone.",
            QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setObjectName("confirmDelete")
        delete = box.addButton("&Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        cairn, task_id = self.context.cairn, plan.task_id

        def clicked(button: Any) -> None:
            if button is not delete:
                return
            self.context.jobs.job(
                lambda: cairn.housekeeping.delete(task_id),
                write=True,
                what=f"delete task {task_id}",
                parent=self,
            ).success(self._deleted).run()

        box.buttonClicked.connect(clicked)
        self.confirm_box = box
        box.open()

    def _deleted(self, done: Deletion) -> None:
        if self.selected_task() == done.task_id:
            self.tree.setCurrentIndex(QModelIndex())
            self._wanted_selection = None
        self.context.sig_status.emit(f"Deleted task “{done.title}”")
        self.reload()

    def show_stopping(self, task_id: str | None) -> None:
        """Stop was asked for this task: its row says "stopping…" until the run is recorded as
        ended (the core's stop can take seconds), not "interrupted" on the way."""
        if not task_id or self.model.task_node(task_id) is None:
            return
        self._stopping.add(task_id)
        self.model.set_task_fields(task_id, pending=STOPPING)
        self.update_actions()
        QTimer.singleShot(STOPPING_AT_MOST_MS, self, lambda: self.stop_settled(task_id))

    def stop_settled(self, task_id: str) -> None:
        """The stop ended (or failed): the row says the run's own state again."""
        if task_id not in self._stopping:
            return
        self._stopping.discard(task_id)
        self.model.set_task_fields(task_id, pending=None)
        self.fetch_task(task_id)
        self.update_actions()

    def refresh_sessions(self) -> None:
        """Ask which sandboxes are live (a job) and update the rows' live badges."""
        cairn = self.context.cairn
        self.context.jobs.job(
            cairn.views.status, key=SESSIONS_KEY, what="check the sandboxes", parent=self
        ).success(self._sessions_checked).run()

    def _sessions_checked(self, status: dict) -> None:
        self.context.set_sandbox_status(status)
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
            if (
                event.kind == ev.RUN_OUTPUT
                and self.cost_column_shown()
                and not self._usage_timer.isActive()
            ):
                self._usage_timer.start()  # a run in flight: its figures so far, now and then
            if event.kind == ev.TASK_CREATED and event.subject:
                if self.model.task_node(event.subject) is None:
                    self.fetch_task(event.subject)
            elif event.kind in (ev.RUN_STATE, ev.RUN_RESUMED):
                task_id = payload.get("task_id")
                state = payload.get("state") or (payload.get("report") and "running")
                if task_id and state:
                    self.model.set_task_fields(task_id, run_state=state)
                    # A stopped run may look interrupted for a moment (its process went before
                    # the stop was recorded): the row keeps saying "stopping…" until it ends.
                    if task_id in self._stopping and state in ENDED and state != "interrupted":
                        self.stop_settled(task_id)
                if state in FOLLOWABLE and event.subject:
                    self.context.followers.follow(event.subject)
                elif task_id and state in ENDED and self.model.task_node(task_id) is not None:
                    # The run's checkpoint and last revisions may have come before the row
                    # did (a new fork or continuation): read the whole row again.
                    self.fetch_task(task_id)
                sessions_changed = True
            elif event.kind == ev.WORKSPACE_STATE:
                # Every task sharing the workspace (Continue children) shows its new state.
                for node in self.model.task_nodes():
                    if node.task_row.workspace_id == event.subject:
                        self.model.set_task_fields(
                            node.task_row.task_id, workspace_state=payload.get("state")
                        )
                        # Its sandbox was let go: the last thing a stop does.
                        if payload.get("state") != "active":
                            self.stop_settled(node.task_row.task_id)
                sessions_changed = True
            elif event.kind == ev.TASK_CHANGED and event.subject:
                if self.model.task_node(event.subject) is not None:
                    self.fetch_task(event.subject)
            elif event.kind == ev.TASK_DELETED and event.subject:
                if self.model.task_node(event.subject) is not None:
                    self.reload()
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
        self.update_actions()
        self.sig_task_selected.emit(task_id)

    def refresh_icons(self) -> None:
        self.model.refresh_icons()


def _edit_refusal(row: TaskRow | None) -> str | None:
    if row is None:
        return "the task is not loaded yet"
    if row.run_state is not None:
        return "the task has run already; continue or fork it to give it more work"
    return None


def _archive_refusal(row: TaskRow | None) -> str | None:
    if row is None:
        return None
    if row.pending:
        return f"the task's run is {row.pending.rstrip('…')}; wait for it to finish"
    if row.run_state in IN_FLIGHT:
        return "a run of this task is in flight; stop it or wait for it to end first"
    return None


def _delete_refusal(row: TaskRow | None, model: LineageModel) -> str | None:
    if row is None:
        return "the task is not loaded yet"
    if row.pending:
        return f"the task's run is {row.pending.rstrip('…')}; wait for it to finish"
    if row.run_state in IN_FLIGHT:
        return "a run of this task is in flight; stop it or wait for it to end first"
    children = [n.task_row for n in model.task_nodes() if n.task_row.parent_id == row.task_id]
    if children:
        names = ", ".join(c.title for c in children[:3]) + ("…" if len(children) > 3 else "")
        return f"the task has child tasks ({names}); delete them first"
    return None
