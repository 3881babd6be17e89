"""The recent decisions under the approval queue: what was approved, denied, allowed by the rules
or ended by a timeout, by whom, when, under which rule, and the reason a denial sent back.

Owns showing the list (newest first) and folding it away; the panel loads it with the queue and
keeps whether it is open.
"""

from __future__ import annotations

import html
import time

from gui.approvals.data import Decision, visible, when
from gui.icons import icon
from gui.qt import (
    QAbstractItemView,
    QFontDatabase,
    QHeaderView,
    QLabel,
    QSizePolicy,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
)

UNLIMITED = 16777215  # Qt's QWIDGETSIZE_MAX
TITLE = "Recent decisions"
EMPTY_TEXT = "No decisions yet."
COLUMNS = ("When", "Who", "Command", "Decision", "Rule", "Reason")
COMMAND_COLUMN = COLUMNS.index("Command")
REASON_COLUMN = COLUMNS.index("Reason")
DECISION_ICONS = {
    "approved": "approve",
    "auto-allowed": "approve",
    "denied": "deny",
    "timed-out": "warning",
}


def plain_tip(text: str) -> str:
    """A tooltip that shows `text` as it is (Qt takes a tooltip that looks like HTML for HTML)."""
    return f"<p style='white-space:pre-wrap'>{html.escape(text)}</p>"


class DecisionHistory(QWidget):
    """A foldable table of decisions. `set_decisions` fills it; `sig_toggled` says it was opened
    or folded by the person."""

    sig_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None, *, open_: bool = True):
        super().__init__(parent)
        self.setObjectName("approvalHistory")
        self.decisions: list[Decision] = []
        self._day: tuple[int, ...] = ()  # the day the times were written for
        self._open = open_
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("historyToggle")
        self.toggle.setText(TITLE)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setAutoRaise(True)
        self.toggle.clicked.connect(lambda: self.set_open(not self._open))
        layout.addWidget(self.toggle)
        self.empty_label = QLabel(EMPTY_TEXT, self)
        self.empty_label.setEnabled(False)
        layout.addWidget(self.empty_label)
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setObjectName("historyTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        # The two free texts share what is left; a long one is elided, whole in its tooltip.
        header.setSectionResizeMode(COMMAND_COLUMN, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(REASON_COLUMN, QHeaderView.ResizeMode.Stretch)
        layout.addWidget(self.table, 1)
        self._fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        rows = self.table.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(self.fontMetrics().height() + 8)
        self._show_state()

    @property
    def is_open(self) -> bool:
        return self._open

    def set_open(self, open_: bool) -> None:
        """Open or fold the list, as the person's click does (announced by `sig_toggled`)."""
        if open_ == self._open:
            return
        self._open = open_
        self._show_state()
        self.sig_toggled.emit(open_)

    def _show_state(self) -> None:
        open_ = self._open
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)
        self.toggle.setToolTip(
            "Fold the recent decisions" if open_ else "Show the recent decisions"
        )
        self.table.setVisible(open_ and bool(self.decisions))
        self.empty_label.setVisible(open_ and not self.decisions)
        vertical = QSizePolicy.Policy.Expanding if open_ else QSizePolicy.Policy.Maximum
        self.setSizePolicy(QSizePolicy.Policy.Preferred, vertical)
        # Folded, it is its header only: whatever holds it gives the rest to the queue.
        self.setMaximumHeight(UNLIMITED if open_ else self.toggle.sizeHint().height())

    def set_decisions(self, decisions: list[Decision], now: float | None = None) -> None:
        now = now if now is not None else time.time()
        day = time.localtime(now)[:3]  # "14:02" reads as today: a new day shows dates again
        if decisions == self.decisions and day == self._day:
            return  # the same list: the selection and the scroll position stay
        self.decisions = list(decisions)
        self._day = day
        self.table.setRowCount(len(decisions))
        for row, decision in enumerate(decisions):
            cells = (
                when(decision.at, now),
                decision.who,
                visible(decision.command, 500).replace("\n", " ⏎ "),
                decision.outcome,
                decision.rule or "",
                visible(decision.note or "", 500).replace("\n", " "),
            )
            for column, text in enumerate(cells):
                # QTableWidgetItem shows plain text: a command holding `<b>` stays as it is.
                item = QTableWidgetItem(text)
                if column == 0:
                    item.setToolTip(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(decision.at)))
                elif column == COMMAND_COLUMN:
                    item.setFont(self._fixed)
                    item.setToolTip(plain_tip(visible(decision.command, 2000)))
                elif column == REASON_COLUMN and decision.note:
                    item.setToolTip(plain_tip(visible(decision.note, 2000)))
                if column == COLUMNS.index("Decision") and decision.state in DECISION_ICONS:
                    item.setIcon(icon(DECISION_ICONS[decision.state]))
                self.table.setItem(row, column, item)
        self._show_state()

    def row_texts(self, row: int) -> list[str]:
        """The texts of one row as shown (for whoever reads the table back)."""
        items = (self.table.item(row, c) for c in range(len(COLUMNS)))
        return [item.text() if item is not None else "" for item in items]
