"""The Approvals tab: a card per pending request (task, exact command, rule and why, time
waiting) with Approve, Deny and "remember for this task", keyboard shortcuts, a count for the
tab badge, and an empty state that says so."""

from __future__ import annotations

import dataclasses
import threading
import time
from types import SimpleNamespace

import pytest

from core.approvals import Approval
from core.errors import Conflict
from core.events import EventBus
from gui.approvals import ApprovalsPanel
from gui.approvals.data import waited
from gui.context import AppContext
from gui.qt import QMessageBox, Qt


class FakeApprovals:
    """The approvals part of the facade: the judge's queue, decisions, and the tasks' titles."""

    def __init__(self, items):
        self.events = EventBus()
        self.items = {item.id: item for item in items}
        self.decisions = []
        self.fail_next = None
        self.lock = threading.Lock()
        self.notes = {}
        self.approvals = SimpleNamespace(
            pending=self.pending,
            list=self.list,
            decided=self.decided,
            approve=self.approve,
            deny=self.deny,
        )
        self.tasks = SimpleNamespace(get=self.task)

    def pending(self):
        with self.lock:
            return [item for item in self.items.values() if item.state == "pending"]

    def list(self, pending_only=True):
        with self.lock:
            return [i for i in self.items.values() if i.state == "pending" or not pending_only]

    def decided(self, limit=200):
        with self.lock:
            done = [i for i in self.items.values() if i.state != "pending"]
        done.sort(key=lambda a: (a.decided_at or a.created_at, a.id), reverse=True)
        return done[:limit]

    def task(self, task_id):
        return SimpleNamespace(id=task_id, title=f"Task {task_id.removeprefix('t_')}")

    def approve(self, approval_id, remember=False):
        self._decide(approval_id, "approved", remember)

    def deny(self, approval_id, reason=None):
        self.notes[approval_id] = reason
        self._decide(approval_id, "denied", False, reason)

    def _decide(self, approval_id, state, remember, note=None):
        if self.fail_next:
            error, self.fail_next = self.fail_next, None
            raise error
        with self.lock:
            item = self.items[approval_id]
            details = {**item.details, "note": note} if note else item.details
            item = self.items[approval_id] = dataclasses.replace(
                item, state=state, decided_by="ana", decided_at=time.time(), details=details
            )
            self.decisions.append((approval_id, state, remember))
        self.events.publish("approval.decided", approval_id, state=state, task_id=item.task_id)

    def request(self, item):
        with self.lock:
            self.items[item.id] = item
        self.events.publish("approval.requested", item.id, task_id=item.task_id)


def request(n: int, **changes) -> Approval:
    fields = {
        "id": f"ap_{n}",
        "run_id": f"r_{n}",
        "task_id": f"t_{n}",
        "command": f"rm -rf build/{n}",
        "rule": "destructive-rm",
        "reason": "deletes files recursively",
        "state": "pending",
        "decided_by": None,
        "decided_at": None,
        "policy_version": None,
        "created_at": time.time() - 75,
        "timeout_at": None,
    }
    fields.update(changes)
    return Approval(**fields)


@pytest.fixture
def make_panel(qtbot, settings):
    contexts = []

    def make(facade):
        context = AppContext(facade, settings=settings)
        contexts.append(context)
        panel = ApprovalsPanel(context)
        qtbot.addWidget(panel)
        panel.show()
        return panel

    yield make
    for context in contexts:
        context.close(close_facade=False)


def test_cards_show_task_command_rule_why_and_time_waiting(qtbot, make_panel):
    facade = FakeApprovals([request(1), request(2, state="approved")])
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.count == 1)
    card = panel.cards["ap_1"]
    assert card.command_label.text() == "rm -rf build/1"
    assert "destructive-rm" in card.why_label.text()
    assert "deletes files recursively" in card.why_label.text()
    assert card.waiting_label.text().startswith("waiting 1 min")
    assert not panel.empty_label.isVisible()


def test_approve_with_remember_and_deny_reach_the_facade(qtbot, make_panel):
    facade = FakeApprovals([request(1), request(2)])
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.count == 2)
    counts = []
    panel.sig_count_changed.connect(counts.append)
    card = panel.cards["ap_1"]
    card.remember.setChecked(True)
    qtbot.mouseClick(card.approve_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "ap_1" not in panel.cards)
    qtbot.mouseClick(panel.cards["ap_2"].deny_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.count == 0)
    assert facade.decisions == [("ap_1", "approved", True), ("ap_2", "denied", False)]
    assert counts[-1] == 0
    qtbot.waitUntil(lambda: panel.empty_label.isVisible())


def test_keyboard_a_approves_d_denies_r_remembers_on_the_focused_card(qtbot, make_panel):
    facade = FakeApprovals([request(1), request(2)])
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.count == 2)
    first = panel.cards["ap_1"]
    first.setFocus()
    qtbot.keyClick(first, Qt.Key.Key_R)
    assert first.remember.isChecked()
    qtbot.keyClick(first, Qt.Key.Key_A)
    qtbot.waitUntil(lambda: panel.count == 1)
    second = panel.cards["ap_2"]
    qtbot.keyClick(second, Qt.Key.Key_D)
    qtbot.waitUntil(lambda: panel.count == 0)
    assert facade.decisions == [("ap_1", "approved", True), ("ap_2", "denied", False)]


def test_a_new_request_event_adds_a_card_and_announces_it(qtbot, make_panel):
    facade = FakeApprovals([])
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.loaded)  # requests there at start-up are not "arrivals"
    assert panel.empty_label.isVisible()
    with qtbot.waitSignal(panel.sig_arrived, timeout=5000) as blocker:
        threading.Thread(target=lambda: facade.request(request(7))).start()
    assert [a.id for a in blocker.args[0]] == ["ap_7"]
    assert panel.count == 1


def test_a_decision_that_fails_says_why_and_keeps_the_card(qtbot, make_panel):
    facade = FakeApprovals([request(1)])
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.count == 1)
    facade.fail_next = Conflict("the request timed out and was denied")
    qtbot.mouseClick(panel.cards["ap_1"].approve_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: any(
            box.objectName() == "decisionFailed" and box.isVisible()
            for box in panel.findChildren(QMessageBox)
        )
    )
    box = next(b for b in panel.findChildren(QMessageBox) if b.objectName() == "decisionFailed")
    assert "the request timed out" in box.text()
    assert "ap_1" in panel.cards and panel.cards["ap_1"].approve_button.isEnabled()
    box.close()


def test_waiting_times_read_naturally():
    assert waited(5) == "waiting 5 s"
    assert waited(75) == "waiting 1 min 15 s"
    assert waited(3 * 3600 + 120) == "waiting 3 h 02 min"
