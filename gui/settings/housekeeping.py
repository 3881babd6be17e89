"""The Housekeeping dialog: how much disk Cairn's data folder uses and each task's share of it, and
a cleanup of what nothing needs any more (files of archived workspaces, their stopped sandbox
containers, unreachable vault objects).

Owns showing the usage and the plan and asking before cleaning; measuring, planning and cleaning
are core.housekeeping's, reached through the facade in jobs (the GUI thread never touches disk).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from core import humanize
from core.housekeeping import KIND_CONTAINER, KIND_REMOTE, Plan, Result
from gui.jobs import JobFailure
from gui.qt import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

if TYPE_CHECKING:
    from gui.context import AppContext

_CATEGORY_LABELS = {
    "vault": "Vaults (revisions, snapshots)",
    "workspaces": "Workspaces",
    "homes": "Engine homes",
    "runs": "Run logs",
    "artifacts": "Artifacts",
    "cache": "Cache",
    "database": "Database",
    "other": "Other",
}
_KIND_LABELS = {
    "archived_workspace": "Archived workspace",
    "vault_objects": "Unreachable objects",
    "leftover": "Leftover",
    "sandbox_container": "Stopped sandbox",
    "remote_sandbox": "Remote sandbox",
}
SHARE_COLUMNS = ("Size", "Task", "Workspace", "Files", "Run logs", "Engine home")


class HousekeepingDialog(QDialog):
    """Data folder size with its breakdown, the cleanup plan item by item, and "Clean up"."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.plan: Plan | None = None
        self.last_result: Result | None = None
        self.busy = False
        # Asks the person before cleaning; replaceable (tests answer it without a modal box).
        self.confirm: Callable[[str], bool] = self._ask
        self.setWindowTitle("Housekeeping")
        self.setObjectName("housekeepingDialog")
        self.resize(720, 480)

        layout = QVBoxLayout(self)
        self.usage_label = QLabel("Measuring the data folder…", self)
        self.usage_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.usage_label.setWordWrap(True)
        layout.addWidget(self.usage_label)
        form = QFormLayout()
        self.part_labels: dict[str, QLabel] = {}
        for key, text in _CATEGORY_LABELS.items():
            label = QLabel("…", self)
            label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.part_labels[key] = label
            form.addRow(f"{text}:", label)
        layout.addLayout(form)

        layout.addWidget(QLabel("<b>By task</b> (a workspace's files, run logs and engine home)"))
        self.shares_table = QTableWidget(0, len(SHARE_COLUMNS), self)
        self.shares_table.setObjectName("housekeepingShares")
        self.shares_table.setHorizontalHeaderLabels(list(SHARE_COLUMNS))
        self.shares_table.verticalHeader().setVisible(False)
        self.shares_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.shares_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        share_header = self.shares_table.horizontalHeader()
        for column in range(len(SHARE_COLUMNS)):
            share_header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        share_header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        layout.addWidget(self.shares_table, 1)

        layout.addWidget(QLabel("<b>Cleanup</b>"))
        self.items_table = QTableWidget(0, 3, self)
        self.items_table.setHorizontalHeaderLabels(["Frees", "Kind", "What"])
        self.items_table.verticalHeader().setVisible(False)
        self.items_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.items_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.items_table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        layout.addWidget(self.items_table, 1)

        self.total_label = QLabel("", self)
        self.total_label.setObjectName("housekeepingTotal")
        layout.addWidget(self.total_label)
        self.status_label = QLabel("", self)
        self.status_label.setObjectName("housekeepingStatus")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status_label)

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        self.refresh_button = QPushButton("Refresh", self)
        self.clean_button = QPushButton("Clean up", self)
        self.clean_button.setEnabled(False)
        self.buttons.addButton(self.refresh_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.buttons.addButton(self.clean_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.buttons.rejected.connect(self.reject)
        self.refresh_button.clicked.connect(self.refresh)
        self.clean_button.clicked.connect(self.clean)
        layout.addWidget(self.buttons)
        self.refresh()

    # -- planning ----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Measure and plan again in a job."""
        self._set_busy(True)
        cairn = self.context.cairn
        self.context.jobs.job(
            lambda: cairn.housekeeping.plan(),
            key="housekeeping-plan",
            what="measure the data folder",
            parent=self,
        ).success(self._show_plan).failure(self._show_error).finished(
            lambda: self._set_busy(False)
        ).run()

    def _show_plan(self, plan: Plan) -> None:
        self.plan = plan
        usage = plan.usage
        self.usage_label.setText(f"Data folder {usage.root}: {humanize.size(usage.total)}")
        for key, label in self.part_labels.items():
            label.setText(humanize.size(usage.parts.get(key, 0)))
        self._show_shares(plan)
        self.items_table.setRowCount(len(plan.items))
        for row, item in enumerate(plan.items):
            container = item.kind == KIND_CONTAINER
            remote = item.kind == KIND_REMOTE
            shown = "Docker" if container else item.host if remote else None
            freed = QTableWidgetItem(shown or humanize.size(item.bytes))
            freed.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            freed.setToolTip(
                "the container's disk is Docker's, outside the data folder"
                if container
                else f"the disk of sandbox host {item.host}, outside the data folder"
                if remote
                else f"{item.bytes:,} bytes"
            )
            self.items_table.setItem(row, 0, freed)
            kind = QTableWidgetItem(_KIND_LABELS.get(item.kind, item.kind))
            self.items_table.setItem(row, 1, kind)
            what = QTableWidgetItem(item.description)
            what.setToolTip(item.description)
            self.items_table.setItem(row, 2, what)
        if plan.empty:
            self.total_label.setText("Nothing to clean up")
        else:
            self.total_label.setText(f"Will free {humanize.size(plan.total)}")
        if plan.notes:
            self.total_label.setToolTip("\n".join(plan.notes))

    def _show_shares(self, plan: Plan) -> None:
        shares = plan.usage.shares
        self.shares_table.setRowCount(len(shares))
        total = plan.usage.total or 1
        for row, share in enumerate(shares):
            who = ", ".join(share.titles) or "(no task)"
            cells = [
                humanize.size(share.bytes),
                who,
                f"{share.workspace_id} ({share.state})",
                humanize.size(share.parts.get("files", 0)),
                humanize.size(share.parts.get("runs", 0)),
                humanize.size(share.parts.get("home", 0)),
            ]
            for column, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                if column != 1 and column != 2:
                    cell.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                if column == 0:
                    cell.setToolTip(
                        f"{share.bytes:,} bytes, {100 * share.bytes / total:.0f} % of the data "
                        "folder (the vault, shared by every task of a folder, is not in it)"
                    )
                if column == 1:
                    cell.setToolTip(", ".join(share.task_ids))
                self.shares_table.setItem(row, column, cell)

    # -- cleaning ----------------------------------------------------------------------------

    def clean(self) -> None:
        plan = self.plan
        if plan is None or plan.empty or self.busy:
            return
        if not self.confirm(
            f"Remove {len(plan.items)} item(s) and free "
            f"{humanize.size(plan.total)}? Archived workspaces keep their history "
            "and can be restored from their snapshots."
        ):
            return
        self._set_busy(True)
        self.status_label.setText("Cleaning up…")
        cairn = self.context.cairn
        self.context.jobs.job(
            lambda: cairn.housekeeping.clean(plan),
            write=True,
            what="clean up the data folder",
            parent=self,
        ).success(self._cleaned).failure(self._show_error).finished(self.refresh).run()

    def _cleaned(self, result: Result) -> None:
        self.last_result = result
        self.plan = None  # done: the next figures come from the refresh that follows
        lines = [f"Freed {humanize.size(result.freed)}"]
        lines += [f"Skipped: {s.item.description} — {s.reason}" for s in result.skipped]
        lines += result.notes
        self.status_label.setText("\n".join(lines))

    def _show_error(self, failure: JobFailure) -> None:
        self.status_label.setText(failure.sentence())

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.refresh_button.setEnabled(not busy)
        self.clean_button.setEnabled(not busy and self.plan is not None and not self.plan.empty)

    def _ask(self, text: str) -> bool:
        answer = QMessageBox.question(
            self,
            "Clean up",
            text,
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        return answer == QMessageBox.StandardButton.Yes
