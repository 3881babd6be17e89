"""One file's own history: every revision of the task that changed it, and each one's diff of it.

Owns the window opened from the diff viewer's file list ("Show this file's history…"): the list
of revisions (newest first, with what produced each) read in a job, and the selected revision's
diff of that one file. Reading is gui.revisions.data's; showing a diff is gui.diff's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gui.diff import DiffViewer
from gui.qt import (
    QAbstractItemView,
    QDialog,
    QHeaderView,
    QLabel,
    QSplitter,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from gui.revisions import data
from gui.revisions.timeline_model import when

if TYPE_CHECKING:
    from gui.context import AppContext


class FileHistoryDialog(QDialog):
    """The revisions of `task_id` that changed `path`, each with its diff of it."""

    def __init__(self, context: AppContext, task_id: str, path: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("fileHistory")
        self.setWindowTitle(f"History of {path}")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self._context = context
        self._task_id = task_id
        self.path = path
        self._entries: list[data.TimelineEntry] = []
        self._request = 0
        self._key = f"file-history-{id(self)}"

        self.heading = QLabel(f"Loading the history of {path}…", self)
        self.heading.setObjectName("fileHistoryHeading")
        self.list = QTableWidget(0, 3, self)
        self.list.setObjectName("fileHistoryList")
        self.list.setHorizontalHeaderLabels(["#", "Time", "Change"])
        self.list.verticalHeader().setVisible(False)
        self.list.setShowGrid(False)
        self.list.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.list.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.list.currentCellChanged.connect(lambda row, *_: self._show_row(row))
        self.viewer = DiffViewer(context.jobs, self, settings=context.settings)
        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.addWidget(self.list)
        splitter.addWidget(self.viewer)
        splitter.setSizes([180, 420])
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addWidget(splitter, 1)
        self.resize(900, 640)

        cairn = context.cairn
        context.jobs.job(
            lambda: data.file_history(cairn, task_id, path),
            what=f"read the history of {path}",
            parent=self,
        ).success(self._show_entries).failure(
            lambda failure: self.heading.setText(failure.sentence())
        ).run()

    def entries(self) -> list[data.TimelineEntry]:
        return list(self._entries)

    def _show_entries(self, entries: list[data.TimelineEntry]) -> None:
        self._entries = entries
        n = len(entries)
        self.heading.setText(
            f"{self.path}: changed by {n} revision{'' if n == 1 else 's'}"
            if n
            else f"No revision of this task changed {self.path}"
        )
        self.list.setRowCount(len(entries))
        for row, e in enumerate(entries):
            tip = f"revision {e.id}" + (f" · run {e.run_id}" if e.run_id else "")
            for col, text in enumerate((str(e.seq), when(e.created_at), e.what)):
                item = QTableWidgetItem(text)
                item.setToolTip(tip)
                self.list.setItem(row, col, item)
        if entries:
            self.list.setCurrentCell(0, 0)
        else:
            self.viewer.show_message("Nothing to show")

    def _show_row(self, row: int) -> None:
        if not 0 <= row < len(self._entries):
            return
        entry = self._entries[row]
        self._request += 1
        request = self._request
        cairn, task_id, path = self._context.cairn, self._task_id, self.path
        self.viewer.show_message("Loading the diff…")
        self._context.jobs.job(
            lambda: data.load_diff(
                cairn, task_id, entry.parent_id or "base", entry.id, paths=[path]
            ),
            key=self._key,
            what="load the diff",
            parent=self,
        ).success(lambda result: self._show_diff(request, result)).failure(
            lambda failure: self.viewer.show_message(failure.sentence())
        ).run()

    def _show_diff(self, request: int, result: data.DiffResult) -> None:
        if request == self._request:
            self.viewer.set_diff(result.diff, blob_sizes=result.blob_sizes)
