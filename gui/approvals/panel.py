"""The Approvals tab: the queue of commands runs asked permission for, one card each, with
Approve, Deny and "remember for this task".

Owns showing the queue and sending decisions through the facade's judge
(`approvals.approve(id, remember=...)`, `approvals.deny(id)`). The queue (gui.approvals.data) is
loaded again on `approval.requested` / `approval.decided` events and every few seconds, which
also lets the judge answer what its rules can and apply timeouts. Notifying the user and the
tab's badge belong to the main window, which listens to `sig_count_changed` and `sig_arrived`.
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING, Any

from core import events as ev
from core.events import Event
from gui.approvals.data import PendingApproval, PendingQueue, load_pending, waited
from gui.icons import icon
from gui.jobs import JobFailure
from gui.qt import (
    QCheckBox,
    QFontDatabase,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QScrollArea,
    Qt,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)

if TYPE_CHECKING:
    from gui.context import AppContext

EMPTY_TEXT = "No commands are waiting for approval."
LOAD_KEY = "approvals"
POLL_MS = 3000


class ApprovalCard(QFrame):
    """One request. A approves, D denies, R toggles "remember for this task" (when focused)."""

    sig_approve = Signal(str, bool)
    """Approve the request (id, remember for this task)."""

    sig_deny = Signal(str)
    """Deny the request (id)."""

    def __init__(self, approval: PendingApproval, parent: QWidget | None = None):
        super().__init__(parent)
        self.approval = approval
        self.setObjectName("approvalCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setToolTip("A: approve · D: deny · R: remember for this task")
        layout = QVBoxLayout(self)
        task = approval.task_title or approval.task_id or "a task"
        head = QLabel(
            f"<b>{html.escape(task)}</b>"
            + (f" · run {approval.run_id}" if approval.run_id else ""),
            self,
        )
        layout.addWidget(head)
        self.command_label = QLabel(approval.command, self)
        self.command_label.setObjectName("approvalCommand")
        # The exact command, whatever it holds: never taken for rich text (`echo <b>`).
        self.command_label.setTextFormat(Qt.TextFormat.PlainText)
        self.command_label.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.command_label.setWordWrap(True)
        self.command_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.command_label)
        why = approval.reason or "no reason given"
        rule = f"rule {approval.rule}: " if approval.rule else ""
        self.why_label = QLabel(f"{html.escape(rule)}{html.escape(why)}", self)
        self.why_label.setWordWrap(True)
        layout.addWidget(self.why_label)
        row = QHBoxLayout()
        self.waiting_label = QLabel(self)
        self.waiting_label.setEnabled(False)
        row.addWidget(self.waiting_label)
        row.addStretch(1)
        self.remember = QCheckBox("&Remember for this task", self)
        row.addWidget(self.remember)
        self.approve_button = QPushButton(icon("approve"), "Approve", self)
        self.approve_button.setObjectName("approveButton")
        self.approve_button.setToolTip("Approve this command (A)")
        self.approve_button.clicked.connect(self.approve)
        self.deny_button = QPushButton(icon("deny"), "Deny", self)
        self.deny_button.setObjectName("denyButton")
        self.deny_button.setToolTip("Deny this command (D)")
        self.deny_button.clicked.connect(self.deny)
        row.addWidget(self.approve_button)
        row.addWidget(self.deny_button)
        layout.addLayout(row)
        self.update_waiting()

    def update_waiting(self, now: float | None = None) -> None:
        if self.approval.requested_at is None:
            self.waiting_label.setText("waiting")
            return
        self.waiting_label.setText(waited((now or time.time()) - self.approval.requested_at))

    def set_pending(self, pending: bool) -> None:
        """While a decision is being sent, the card cannot send another."""
        for widget in (self.approve_button, self.deny_button, self.remember):
            widget.setEnabled(not pending)

    def approve(self) -> None:
        if self.approve_button.isEnabled():
            self.sig_approve.emit(self.approval.id, self.remember.isChecked())

    def deny(self) -> None:
        if self.deny_button.isEnabled():
            self.sig_deny.emit(self.approval.id)

    def keyPressEvent(self, event) -> None:
        key = event.key()
        plain = event.modifiers() in (
            Qt.KeyboardModifier.NoModifier,
            Qt.KeyboardModifier.KeypadModifier,
        )
        if not plain:
            super().keyPressEvent(event)
        elif key == Qt.Key.Key_A:
            self.approve()
        elif key == Qt.Key.Key_D:
            self.deny()
        elif key == Qt.Key.Key_R:
            self.remember.toggle()
        else:
            super().keyPressEvent(event)


class ApprovalsPanel(QWidget):
    """The queue of pending approvals as cards."""

    sig_count_changed = Signal(int)
    """How many requests are waiting changed."""

    sig_arrived = Signal(list)
    """New requests appeared since the last load (a list of PendingApproval)."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.cards: dict[str, ApprovalCard] = {}
        self._titles: dict[str, str | None] = {}  # task id -> title, as the loads found them
        self._loading = False
        self._again = False
        self._known: set[str] = set()
        self.loaded = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.empty_label = QLabel(EMPTY_TEXT, self)
        self.empty_label.setObjectName("approvalsEmpty")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        layout.addWidget(self.empty_label)
        self.scroll_area = QScrollArea(self)
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        holder = QWidget(self.scroll_area)
        self.cards_layout = QVBoxLayout(holder)
        self.cards_layout.addStretch(1)
        self.scroll_area.setWidget(holder)
        layout.addWidget(self.scroll_area, 1)
        self.scroll_area.hide()
        self._clock = QTimer(self)
        self._clock.setInterval(1000)
        self._clock.timeout.connect(self._tick)
        self._reload_timer = QTimer(self)
        self._reload_timer.setSingleShot(True)
        self._reload_timer.setInterval(100)
        self._reload_timer.timeout.connect(self.reload)
        self._poll = QTimer(self)
        self._poll.setInterval(POLL_MS)
        self._poll.timeout.connect(self.reload)
        context.events.sig_event.connect(self._on_event)
        self._poll.start()
        self.reload()

    @property
    def count(self) -> int:
        return len(self.cards)

    def set_task(self, _task_id: str | None) -> None:
        """The queue shows every task's requests; selecting a task changes nothing here."""

    # -- loading ---------------------------------------------------------------------------------

    def reload(self) -> None:
        """Load the queue (a job). The load also writes (rule answers, timeouts), so it goes to
        the write thread, one at a time: a poll is skipped while the previous one has not come
        back."""
        if self._loading:
            self._again = True  # asked for while a load runs: load once more after it
            return
        cairn = self.context.cairn
        known = dict(self._titles)  # a copy: the job never reads what the GUI thread changes

        self._loading = True

        def finished() -> None:
            self._loading = False
            if self._again:
                self._again = False
                self.reload()

        self.context.jobs.job(
            lambda: load_pending(cairn, known),
            key=LOAD_KEY,
            write=True,
            what="load the approvals",
            parent=self,
        ).success(self._loaded).finished(finished).run()

    def _loaded(self, queue: PendingQueue) -> None:
        self._titles.update(queue.titles)
        self._show(queue.approvals)

    def _on_event(self, event: Event) -> None:
        if event.kind in (ev.APPROVAL_REQUESTED, ev.APPROVAL_DECIDED):
            self._reload_timer.start()

    def _show(self, pending: list[PendingApproval]) -> None:
        wanted = {a.id: a for a in pending}
        for approval_id in list(self.cards):
            if approval_id not in wanted:
                self._remove(approval_id)
        arrived = []
        for approval in pending:
            if approval.id not in self.cards:
                card = ApprovalCard(approval, self)
                card.sig_approve.connect(self.approve)
                card.sig_deny.connect(self.deny)
                self.cards_layout.insertWidget(self.cards_layout.count() - 1, card)
                self.cards[approval.id] = card
                if approval.id not in self._known:
                    arrived.append(approval)
                self._known.add(approval.id)
        self._update_state()
        if arrived and self.loaded:
            self.sig_arrived.emit(arrived)
        self.loaded = True

    def _remove(self, approval_id: str) -> None:
        card = self.cards.pop(approval_id, None)
        if card is None:
            return
        had_focus = card.hasFocus() or card.isAncestorOf(self.focusWidget() or card)
        self.cards_layout.removeWidget(card)
        card.deleteLater()
        if had_focus and self.cards:
            next(iter(self.cards.values())).setFocus()

    def _update_state(self) -> None:
        has_cards = bool(self.cards)
        self.scroll_area.setVisible(has_cards)
        self.empty_label.setVisible(not has_cards)
        if has_cards:
            self._clock.start()
        else:
            self._clock.stop()
        self.sig_count_changed.emit(len(self.cards))

    def _tick(self) -> None:
        now = time.time()
        for card in self.cards.values():
            card.update_waiting(now)

    def focus_first(self) -> None:
        if self.cards:
            next(iter(self.cards.values())).setFocus()

    # -- decisions -------------------------------------------------------------------------------

    def approve(self, approval_id: str, remember: bool = False) -> None:
        cairn = self.context.cairn
        self._decide(
            approval_id,
            lambda: cairn.approvals.approve(approval_id, remember=remember),
            "approve the command",
            "Approved" + (" (remembered for the task)" if remember else ""),
        )

    def deny(self, approval_id: str) -> None:
        cairn = self.context.cairn
        self._decide(
            approval_id, lambda: cairn.approvals.deny(approval_id), "deny the command", "Denied"
        )

    def _decide(self, approval_id: str, work, what: str, done: str) -> None:
        card = self.cards.get(approval_id)
        if card is None:
            return
        card.set_pending(True)
        command = card.approval.command

        def succeeded(_result: Any) -> None:
            self._remove(approval_id)
            self._update_state()
            self.context.sig_status.emit(f"{done}: {command}")

        def failed(failure: JobFailure) -> None:
            if approval_id in self.cards:
                self.cards[approval_id].set_pending(False)
            self.context.sig_status.emit(failure.sentence())
            box = QMessageBox(
                QMessageBox.Icon.Warning,
                "Cairn",
                failure.sentence(),
                QMessageBox.StandardButton.Ok,
                self,
            )
            box.setObjectName("decisionFailed")
            box.open()
            self.reload()

        self.context.jobs.job(work, write=True, what=what, parent=self).success(succeeded).failure(
            failed
        ).run()
