"""What the selected task's runs used of their model: tokens and cost per run, for the task and
summed over its lineage, read-only.

Owns that section of the task view (one summary line, and a table of the runs behind a toggle)
and the task view that holds it.
The figures are core.views' (`cairn.views.usage`), read in a job when the task changes, when a
run changes state and, while a run is in flight, every few seconds as its output arrives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.events import RUN_OUTPUT, RUN_STATE, Event
from core.usage import cost_text, count_text, summary_text
from gui.qt import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QTimer,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from gui.task_view.view import TaskView

if TYPE_CHECKING:
    from gui.context import AppContext

COST_KEY = "task-cost"
COLUMNS = ("Run", "State", "Cost", "In", "Out", "Cache read", "Cache write")
LIVE_REFRESH_MS = 3000  # at most this often while a run's output arrives
MAX_TABLE_HEIGHT = 140


def summary_line(figures: dict[str, Any]) -> str:
    """`Used: $0.0130 (3.2k in · …) · lineage $0.0624 over 2 tasks, 3 runs`."""
    task = figures["task"]
    text = f"Used: {summary_text(task)}"
    if not task["runs"]:
        text = "Used: nothing yet (no runs)"
    if len(figures["lineage_tasks"]) > 1:
        lineage = figures["lineage"]
        text += (
            f" · lineage {cost_text(lineage)} over {len(figures['lineage_tasks'])} tasks, "
            f"{lineage['runs']} run{'s' if lineage['runs'] != 1 else ''}"
        )
    if any(r["in_flight"] for r in figures["runs"]):
        text += " · so far"
    return text


def run_cells(run: dict[str, Any]) -> list[str]:
    return [
        run["run_id"],
        run["state"],
        cost_text(run),
        count_text(run["input_tokens"]),
        count_text(run["output_tokens"]),
        count_text(run["cache_read_tokens"]),
        count_text(run["cache_write_tokens"]),
    ]


class CostPanel(QWidget):
    """`set_task(task_id)`; follows the task's runs until another task is set."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.task_id: str | None = None
        self.figures: dict[str, Any] | None = None
        self._live_runs: set[str] = set()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.summary = QLabel(self)
        self.summary.setObjectName("taskCost")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(self.summary, 1)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("taskCostRuns")
        self.toggle.setText("Per run")
        self.toggle.setCheckable(True)
        self.toggle.setToolTip("Show what each run of this task used")
        self.toggle.toggled.connect(self._show_table)
        row.addWidget(self.toggle)
        layout.addLayout(row)
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setObjectName("taskCostTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.hide()
        layout.addWidget(self.table)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(300)
        self._timer.timeout.connect(self.reload)
        self._live_timer = QTimer(self)
        self._live_timer.setSingleShot(True)
        self._live_timer.setInterval(LIVE_REFRESH_MS)
        self._live_timer.timeout.connect(self.reload)
        context.events.sig_event.connect(self._on_event)
        self.setVisible(False)

    def set_task(self, task_id: str | None) -> None:
        if task_id == self.task_id:
            return
        self.task_id = task_id
        self.figures = None
        self._live_runs = set()
        self.table.setRowCount(0)
        self.summary.setText("Used: …")
        self.setVisible(task_id is not None)
        if task_id is None:
            self.context.jobs.supersede(COST_KEY)
            return
        self.reload()

    def reload(self) -> None:
        task_id = self.task_id
        if task_id is None:
            return
        cairn = self.context.cairn
        self.context.jobs.job(
            lambda: cairn.views.usage(task_id),
            key=COST_KEY,
            what="read what the task's runs used",
            parent=self,
        ).success(self._show).failure(self._failed).run()

    def _show(self, figures: dict[str, Any]) -> None:
        if figures["task_id"] != self.task_id:
            return
        self.figures = figures
        self._live_runs = {r["run_id"] for r in figures["runs"] if r["in_flight"]}
        self.summary.setText(summary_line(figures))
        self.summary.setToolTip(self._tooltip(figures))
        runs = figures["runs"]
        self.toggle.setEnabled(bool(runs))
        self.table.setVisible(bool(runs) and self.toggle.isChecked())
        self.table.setRowCount(len(runs))
        for row, run in enumerate(runs):
            for column, text in enumerate(run_cells(run)):
                item = QTableWidgetItem(text)
                if column >= 2:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                if column == 2 and run.get("cost_source"):
                    item.setToolTip(f"from the {run['cost_source']}")
                self.table.setItem(row, column, item)
        self._fit_table()

    def _fit_table(self) -> None:
        """As tall as its rows (up to MAX_TABLE_HEIGHT, then it scrolls)."""
        rows = max(1, self.table.rowCount())
        height = (
            self.table.horizontalHeader().height()
            + rows * self.table.verticalHeader().defaultSectionSize()
            + 2 * self.table.frameWidth()
            + 2
        )
        self.table.setFixedHeight(min(MAX_TABLE_HEIGHT, height))

    def _failed(self, failure: Any) -> None:
        self.summary.setText("Used: cannot be read now")
        self.summary.setToolTip(str(getattr(failure, "message", failure)))

    @staticmethod
    def _tooltip(figures: dict[str, Any]) -> str:
        lines = []
        for row in figures["lineage_tasks"]:
            if row["runs"]:
                lines.append(f"{row['title']}: {summary_text(row)}")
        sources = {figures["lineage"].get("cost_source")} - {None}
        if sources:
            lines.append(f"Cost from the {' and '.join(sorted(sources))}.")
        return "\n".join(lines)

    def _show_table(self, shown: bool) -> None:
        self.table.setVisible(shown)

    def _on_event(self, event: Event) -> None:
        if self.task_id is None:
            return
        if event.kind == RUN_STATE:
            self._timer.start()
        elif (
            event.kind == RUN_OUTPUT
            and event.subject in self._live_runs
            and not self._live_timer.isActive()
        ):
            self._live_timer.start()


class TaskViewWithCost(TaskView):
    """The task view with this section under the task's run state."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(context, parent)
        self.cost = CostPanel(context, self.page)
        layout = self.page.layout()
        assert isinstance(layout, QVBoxLayout)
        layout.insertWidget(layout.indexOf(self.state_label) + 1, self.cost)

    def set_task(self, task_id: str | None) -> None:
        super().set_task(task_id)
        self.cost.set_task(task_id)
