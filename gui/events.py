"""The event bridge: core's event stream, re-emitted on the GUI thread as Qt signals.

Owns crossing threads and pacing. Core calls its listeners on the publishing thread (often a job's
worker); the bridge queues each event and flushes the queue on the GUI thread at most every
`interval_ms`, so a burst (a run printing thousands of lines) arrives as a few signals instead of
thousands. Adjacent `run.output` chunks of the same run and stream are merged into one event.
What an event means is left to the widgets that listen.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from core.events import RUN_OUTPUT, Event
from gui.qt import QObject, QTimer, Signal, Slot

FLUSH_INTERVAL_MS = 40
MAX_BATCH = 500


def coalesce(events: list[Event]) -> list[Event]:
    """Merge adjacent run.output chunks of one run and stream; everything else keeps its order."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if (
            last is not None
            and event.kind == RUN_OUTPUT
            and last.kind == RUN_OUTPUT
            and last.subject == event.subject
            and last.payload.get("stream") == event.payload.get("stream")
            and not event.payload.get("backlog")
            and not last.payload.get("backlog")
        ):
            merged = dict(last.payload)
            merged["text"] = f"{last.payload.get('text', '')}{event.payload.get('text', '')}"
            out[-1] = Event(last.kind, last.subject, merged, event.seq, event.created_at)
        else:
            out.append(event)
    return out


class EventBridge(QObject):
    """Subscribes to `Cairn.events` and re-emits what it hears on the GUI thread, in batches."""

    sig_event = Signal(object)
    """One core Event, on the GUI thread (run.output chunks of a burst merged)."""

    sig_events = Signal(list)
    """The events of one flush, in order (the same ones sig_event carried one by one)."""

    _sig_wake = Signal()

    def __init__(
        self,
        parent: QObject | None = None,
        *,
        interval_ms: int = FLUSH_INTERVAL_MS,
        max_batch: int = MAX_BATCH,
    ):
        super().__init__(parent)
        self._queue: deque[Event] = deque()
        self._lock = threading.Lock()
        self._wake_pending = False
        self._max_batch = max_batch
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.flush)
        self._sig_wake.connect(self._on_wake)  # queued when posted from another thread
        self._unsubscribers: list[Callable[[], None]] = []
        self.flushes = 0

    def attach(self, bus) -> None:
        """Listen to an EventBus (anything with `subscribe(listener) -> unsubscribe`)."""
        self._unsubscribers.append(bus.subscribe(self.post))

    def detach(self) -> None:
        for unsubscribe in self._unsubscribers:
            unsubscribe()
        self._unsubscribers.clear()

    def post(self, event: Event) -> None:
        """Queue an event; safe to call from any thread."""
        with self._lock:
            self._queue.append(event)
            if self._wake_pending:
                return
            self._wake_pending = True
        self._sig_wake.emit()

    @Slot()  # declared: posted from other threads (see gui.jobs.JobRunner._on_done)
    def _on_wake(self) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Emit what is queued (up to the batch limit; the rest follows on the next tick)."""
        with self._lock:
            count = min(len(self._queue), self._max_batch)
            taken = [self._queue.popleft() for _ in range(count)]
            more = bool(self._queue)
            self._wake_pending = more
        if more:
            self._timer.start()
        if not taken:
            return
        self.flushes += 1
        batch = coalesce(taken)
        self.sig_events.emit(batch)
        for event in batch:
            self.sig_event.emit(event)
