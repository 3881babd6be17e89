"""The recent decisions under the approval queue: newest first, who decided (the rules and the
timeout by name), the command, the outcome, the rule and the reason a denial sent; loaded in the
queue's own job, off the GUI thread; folded or open as the person left it."""

from __future__ import annotations

import threading
import time

from core.approvals import Approval
from gui.approvals.data import HISTORY_LIMIT, Decision, recent_decisions, when
from gui.approvals.history import COLUMNS, DecisionHistory
from gui.approvals.panel import HISTORY_OPEN_KEY
from gui.qt import Qt
from tests.gui import test_approvals_panel
from tests.gui.test_approvals_panel import FakeApprovals, request

make_panel = test_approvals_panel.make_panel  # the fixture: a panel over a fake judge

NOW = time.time()


def decided(n: int, state: str, by: str | None, ago: float, **changes) -> Approval:
    return request(n, state=state, decided_by=by, decided_at=NOW - ago, **changes)


def history_items() -> list[Approval]:
    return [
        decided(1, "approved", "ana", 300, command="rm -rf build/1"),
        decided(2, "denied", "ana", 10, command="git push -f", details={"note": "use a branch"}),
        decided(3, "timed-out", "cairn:timeout", 200, command="npm publish", rule="publish"),
        decided(4, "auto-allowed", "cairn:rules", 100, command="git status", rule="remembered"),
        decided(5, "withdrawn", None, 50, command="echo <b>hi</b>"),
        request(6),  # still waiting: a card, not a decision
    ]


class CountingApprovals(FakeApprovals):
    """Records which thread read the history and how often."""

    def __init__(self, items):
        super().__init__(items)
        self.history_reads: list[str] = []
        self.queue_reads: list[str] = []
        self.approvals.decided = self.decided
        self.approvals.pending = self.pending

    def pending(self):
        self.queue_reads.append(threading.current_thread().name)
        return super().pending()

    def decided(self, limit=200):
        self.history_reads.append(threading.current_thread().name)
        return super().decided(limit)


def test_the_history_lists_decisions_newest_first_with_who_what_rule_and_reason(qtbot, make_panel):
    panel = make_panel(FakeApprovals(history_items()))
    history = panel.history
    qtbot.waitUntil(lambda: history.table.rowCount() == 5)
    assert panel.count == 1
    assert [history.table.horizontalHeaderItem(c).text() for c in range(len(COLUMNS))] == [
        "When",
        "Who",
        "Command",
        "Decision",
        "Rule",
        "Reason",
    ]
    rows = [history.row_texts(r)[1:] for r in range(5)]
    assert rows == [
        ["ana", "git push -f", "denied", "destructive-rm", "use a branch"],
        ["—", "echo <b>hi</b>", "withdrawn", "destructive-rm", ""],
        ["rules", "git status", "allowed by rules", "remembered", ""],
        ["timeout", "npm publish", "timed out", "publish", ""],
        ["ana", "rm -rf build/1", "approved", "destructive-rm", ""],
    ]
    assert history.row_texts(0)[0] == when(NOW - 10)
    assert history.table.isVisible() and not history.empty_label.isVisible()


def test_a_decision_made_on_a_card_shows_at_the_top_with_its_reason(qtbot, make_panel):
    facade = FakeApprovals([request(1)])
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.count == 1)
    assert panel.history.empty_label.isVisible() and not panel.history.table.isVisible()
    card = panel.cards["ap_1"]
    card.reason_edit.setText("build/ is still needed")
    qtbot.mouseClick(card.deny_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.history.table.rowCount() == 1)
    assert panel.history.row_texts(0)[1:] == [
        "ana",
        "rm -rf build/1",
        "denied",
        "destructive-rm",
        "build/ is still needed",
    ]
    assert panel.history.table.isVisible()


def test_the_history_is_read_in_the_queue_job_not_on_the_gui_thread(qtbot, make_panel):
    facade = CountingApprovals(history_items())
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.history.table.rowCount() == 5)
    gui_thread = threading.current_thread().name
    assert facade.history_reads and gui_thread not in facade.history_reads
    assert facade.history_reads[0] == facade.queue_reads[0]  # the same job's thread


def test_folding_the_history_is_remembered_and_a_folded_history_is_not_read(
    qtbot, make_panel, settings
):
    facade = CountingApprovals(history_items())
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.history.table.rowCount() == 5)
    qtbot.mouseClick(panel.history.toggle, Qt.MouseButton.LeftButton)
    assert not panel.history.is_open and not panel.history.table.isVisible()
    assert panel.history.toggle.arrowType() == Qt.ArrowType.RightArrow
    assert settings.value(HISTORY_OPEN_KEY, True, type=bool) is False

    again = CountingApprovals(history_items())
    folded = make_panel(again)
    qtbot.waitUntil(lambda: folded.loaded)
    assert not folded.history.is_open and not folded.history.table.isVisible()
    assert again.history_reads == []  # nobody looks at it: not read
    qtbot.mouseClick(folded.history.toggle, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: folded.history.table.rowCount() == 5)  # opened: read now
    assert folded.history.table.isVisible()
    assert settings.value(HISTORY_OPEN_KEY, False, type=bool) is True


def test_an_unchanged_history_keeps_the_selection(qtbot, make_panel):
    panel = make_panel(FakeApprovals(history_items()))
    table = panel.history.table
    qtbot.waitUntil(lambda: table.rowCount() == 5)
    table.selectRow(2)
    panel.reload()
    qtbot.waitUntil(lambda: not panel._loading)
    assert [i.row() for i in table.selectionModel().selectedRows()] == [2]


def test_the_history_keeps_the_latest_decisions_only():
    items = [decided(n, "approved", "ana", 1000 - n) for n in range(HISTORY_LIMIT + 50)]
    items.append(request(999))
    latest = recent_decisions(items)
    assert len(latest) == HISTORY_LIMIT
    assert latest[0].id == f"ap_{HISTORY_LIMIT + 49}"  # decided last
    assert all(a.at >= b.at for a, b in zip(latest, latest[1:], strict=False))
    assert "ap_999" not in {d.id for d in latest}


def test_who_and_outcome_read_as_words():
    def decision(state: str, by: str | None) -> Decision:
        return Decision("ap_1", None, "x", state, by, NOW, None, None)

    assert decision("auto-allowed", "cairn:rules").who == "rules"
    assert decision("timed-out", "cairn:timeout").who == "timeout"
    assert decision("approved", "ana").who == "ana"
    assert decision("withdrawn", None).who == "—"
    assert decision("timed-out", "cairn:timeout").outcome == "timed out"
    assert decision("auto-allowed", "cairn:rules").outcome == "allowed by rules"
    assert decision("something-new", None).outcome == "something-new"


def test_times_are_clock_times_today_and_dates_before():
    today = time.mktime((2026, 12, 1, 15, 0, 0, 0, 0, -1))
    assert when(today - 3600, today) == "14:00:00"
    assert when(today - 2 * 86400, today) == "2026-11-29 15:00"


def test_an_open_history_takes_a_third_of_the_tab_and_a_folded_one_its_header(qtbot, make_panel):
    panel = make_panel(FakeApprovals(history_items()))
    panel.resize(800, 600)
    qtbot.waitUntil(lambda: panel.history.table.rowCount() == 5)
    queue, history = panel.splitter.sizes()
    assert abs(history - (queue + history) / 3) < 20
    panel.history.set_open(False)
    qtbot.waitUntil(lambda: panel.splitter.sizes()[1] <= panel.history.toggle.height() + 4)
    panel.history.set_open(True)
    qtbot.waitUntil(lambda: panel.splitter.sizes()[1] > 100)


def test_polls_read_the_decisions_only_when_something_was_decided(qtbot, make_panel):
    facade = CountingApprovals(history_items())
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.history.table.rowCount() == 5)
    for _ in range(3):  # the periodic polls: nothing decided, the table is not read again
        panel.reload()
        qtbot.waitUntil(lambda: not panel._loading)
    assert len(facade.history_reads) == 1
    qtbot.mouseClick(panel.cards["ap_6"].approve_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.history.table.rowCount() == 6)  # at once, not at a later poll
    assert panel.history.row_texts(0)[1:4] == ["ana", "rm -rf build/6", "approved"]


def test_the_next_day_the_same_decisions_show_their_date(qtbot):
    history = DecisionHistory()
    qtbot.addWidget(history)
    today = time.mktime((2026, 12, 1, 15, 0, 0, 0, 0, -1))
    decisions = [Decision("ap_1", None, "ls", "approved", "ana", today - 60, None, None)]
    history.set_decisions(decisions, now=today)
    assert history.row_texts(0)[0] == "14:59:00"
    history.set_decisions(decisions, now=today + 86400)
    assert history.row_texts(0)[0] == "2026-12-01 14:59"
