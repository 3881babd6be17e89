"""The Approvals tab: the queue of commands runs asked permission for, one card each
(gui.approvals.card), with Approve, Deny with a reason, and Remember; under it the recent
decisions (gui.approvals.history), folded or open as the person left them.

Owns showing the queue and sending decisions through the facade's judge
(`approvals.approve(id, remember=...)`, `approvals.deny(id, reason=...)`). The queue
(gui.approvals.data) is loaded again on `approval.requested` / `approval.decided` events and
every few seconds, which also lets the judge answer what its rules can and apply timeouts; the
same job reads the decisions when something was decided (see HISTORY_MIN_GAP_S). Notifying the
user and the tab's badge belong to the main window, which listens to `sig_count_changed` and
`sig_arrived`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from core import events as ev
from core.events import Event
from gui.approvals.card import ApprovalCard
from gui.approvals.data import PendingApproval, PendingQueue, load_pending
from gui.approvals.history import DecisionHistory
from gui.jobs import JobFailure
from gui.qt import (
    QFrame,
    QLabel,
    QMessageBox,
    QScrollArea,
    QSplitter,
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
HISTORY_OPEN_KEY = "approvals/history_open"
# Reading the decisions costs the judge's whole table, on the write thread the queue's load uses:
# read them when something was decided, not oftener than every few seconds, and now and then
# for what no event announced (another process's decisions).
HISTORY_MIN_GAP_S = 5.0
HISTORY_REFRESH_S = 30.0

__all__ = ["ApprovalCard", "ApprovalsPanel"]


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
        self._history_due = True  # something may have been decided since the last read
        self._history_now = False  # read with the next load, whatever the gap
        self._history_read_at = -HISTORY_REFRESH_S  # time.monotonic() of the last read
        self._sized = False  # whether the person moved the line between queue and decisions
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        # The queue above, the recent decisions below; the person moves the line between them.
        self.splitter = QSplitter(Qt.Orientation.Vertical, self)
        self.splitter.setObjectName("approvalsSplitter")
        self.splitter.setChildrenCollapsible(False)
        queue = QWidget(self.splitter)
        queue_layout = QVBoxLayout(queue)
        queue_layout.setContentsMargins(0, 0, 0, 0)
        self.empty_label = QLabel(EMPTY_TEXT, queue)
        self.empty_label.setObjectName("approvalsEmpty")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        queue_layout.addWidget(self.empty_label)
        self.scroll_area = QScrollArea(queue)
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        holder = QWidget(self.scroll_area)
        self.cards_layout = QVBoxLayout(holder)
        self.cards_layout.addStretch(1)
        self.scroll_area.setWidget(holder)
        queue_layout.addWidget(self.scroll_area, 1)
        self.scroll_area.hide()
        open_ = context.settings.value(HISTORY_OPEN_KEY, True, type=bool)
        self.history = DecisionHistory(self.splitter, open_=bool(open_))
        self.history.sig_toggled.connect(self._history_toggled)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.splitterMoved.connect(self._line_moved)
        layout.addWidget(self.splitter)
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

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if not self._sized or not self.history.is_open:
            # Two thirds for the queue, one for the decisions (the splitter alone would give
            # each what it asks for), until the person moves the line between them.
            self._share_height()

    def _line_moved(self, _pos: int, _index: int) -> None:
        self._sized = True

    def _share_height(self) -> None:
        """Open: a third of the height for the decisions; folded: the queue takes all but the
        header (the splitter keeps the header's minimum)."""
        total = sum(self.splitter.sizes())
        if total > 0:
            history = total // 3 if self.history.is_open else 0
            self.splitter.setSizes([total - history, history])

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
        history = self._history_wanted()

        self._loading = True

        def finished() -> None:
            self._loading = False
            if self._again:
                self._again = False
                self.reload()

        self.context.jobs.job(
            lambda: load_pending(cairn, known, history=history),
            key=LOAD_KEY,
            write=True,
            what="load the approvals",
            parent=self,
        ).success(self._loaded).finished(finished).run()

    def _history_wanted(self) -> bool:
        """Whether this load reads the decisions too (a folded history is never read)."""
        now = time.monotonic()
        since = now - self._history_read_at
        wanted = self.history.is_open and (
            self._history_now
            or since >= HISTORY_REFRESH_S
            or (self._history_due and since >= HISTORY_MIN_GAP_S)
        )
        if wanted:
            self._history_due = self._history_now = False
            self._history_read_at = now
        return wanted

    def _loaded(self, queue: PendingQueue) -> None:
        self._titles.update(queue.titles)
        if queue.history is not None:
            self.history.set_decisions(queue.history)
        self._show(queue.approvals)

    def _history_toggled(self, open_: bool) -> None:
        self.context.settings.setValue(HISTORY_OPEN_KEY, open_)
        self._share_height()
        if open_:
            self._history_now = True  # it was not read while folded
            self.reload()

    def _on_event(self, event: Event) -> None:
        if event.kind in (ev.APPROVAL_REQUESTED, ev.APPROVAL_DECIDED):
            if event.kind == ev.APPROVAL_DECIDED:
                self._history_due = True
            self._reload_timer.start()

    def _show(self, pending: list[PendingApproval]) -> None:
        wanted = {a.id: a for a in pending}
        for approval_id in list(self.cards):
            if approval_id not in wanted:
                self._remove(approval_id)
                self._history_due = True  # decided somewhere: by a timeout, another process
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
        card = self.cards.get(approval_id)
        kept = ""
        if remember and card is not None:
            what = card.approval
            kept = (
                f" (rule {what.rule} remembered for the task)"
                if what.program is not None
                else " (this exact command remembered for the task)"
            )
        self._decide(
            approval_id,
            lambda: cairn.approvals.approve(approval_id, remember=remember),
            "approve the command",
            "Approved" + kept,
        )

    def deny(self, approval_id: str, reason: str = "") -> None:
        cairn = self.context.cairn
        sent = reason.strip() or None
        self._decide(
            approval_id,
            lambda: cairn.approvals.deny(approval_id, reason=sent),
            "deny the command",
            "Denied" + (" (reason sent to the run)" if sent else ""),
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
            self._history_now = True  # the person looks for what they just decided
            self.reload()

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
