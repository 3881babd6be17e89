"""Helpers the GUI tests and the benchmarks share: generated lineages, drag and drop events,
and a meter for the longest stall of the event loop."""

from __future__ import annotations

import time
from pathlib import Path

from gui.lineage.data import TaskRow
from gui.qt import (
    QApplication,
    QDragEnterEvent,
    QDropEvent,
    QElapsedTimer,
    QMimeData,
    QObject,
    QPoint,
    QPointF,
    Qt,
    QTimer,
    QUrl,
)

STATES = (None, "running", "succeeded", "failed", "interrupted", "waiting_approval", "cancelled")


def task_row(i: int, parent: str | None, source: int = 0, **fields) -> TaskRow:
    values = dict(
        task_id=f"t{i:06d}",
        title=f"task {i}",
        parent_id=parent,
        source_id=f"src{source}",
        source_path=f"/repos/project-{source}",
        engine="shell",
        origin="new" if parent is None else "fork" if i % 3 == 0 else "continue",
        created_at=1_000_000.0 + i,
        workspace_id=f"ws{i:06d}",
        workspace_state="prepared",
        run_state=STATES[i % len(STATES)],
        live=i % 5 == 0,
        snapshot=("none", "fresh", "stale")[i % 3],
        approvals=i % 4 == 0 and 1 or 0,
    )
    values.update(fields)
    return TaskRow(**values)


def deep_rows(total: int = 10_000, chain: int = 1_000) -> list[TaskRow]:
    """Chains of `chain` tasks, each the child of the one before (total/chain lineages)."""
    rows = []
    for i in range(total):
        parent = None if i % chain == 0 else f"t{i - 1:06d}"
        rows.append(task_row(i, parent, source=i // chain))
    return rows


def wide_rows(total: int = 10_000, fan: int = 5_000) -> list[TaskRow]:
    """One parent with `fan` children; the rest as small families under a second folder."""
    rows = [task_row(0, None, source=0)]
    for i in range(1, fan + 1):
        rows.append(task_row(i, "t000000", source=0))
    family_head = None
    for i in range(fan + 1, total):
        if (i - fan - 1) % 50 == 0:
            family_head = f"t{i:06d}"
            rows.append(task_row(i, None, source=1))
        else:
            rows.append(task_row(i, family_head, source=1))
    return rows


# -- drag and drop -------------------------------------------------------------------------------


def mime_with(*paths: Path | str | QUrl) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([p if isinstance(p, QUrl) else QUrl.fromLocalFile(str(p)) for p in paths])
    return mime


def send_drag_enter(widget, mime: QMimeData) -> bool:
    args = (
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    try:
        event = QDragEnterEvent(QPoint(20, 20), *args)
    except TypeError:
        event = QDragEnterEvent(QPointF(20, 20), *args)
    event.setAccepted(False)
    QApplication.sendEvent(widget, event)
    return event.isAccepted()


def send_drop(widget, mime: QMimeData) -> bool:
    """A real drag-enter then drop; returns whether the drop was accepted."""
    assert send_drag_enter(widget, mime), "the drag was refused before the drop"
    event = QDropEvent(
        QPointF(20, 20),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    event.setAccepted(False)
    QApplication.sendEvent(widget, event)
    return event.isAccepted()


# -- responsiveness ------------------------------------------------------------------------------


class StallMeter(QObject):
    """The longest gap between ticks of a 5 ms timer: how long the event loop was blocked.

    with StallMeter() as meter:
        ...  # drive the GUI, waiting with qtbot
    assert meter.longest_ms < 100
    """

    def __init__(self, interval_ms: int = 5):
        super().__init__()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self._tick)
        self._clock = QElapsedTimer()
        self.longest_ms = 0.0
        self.ticks = 0
        self._last = 0.0

    def _tick(self) -> None:
        now = self._clock.nsecsElapsed() / 1e6
        self.longest_ms = max(self.longest_ms, now - self._last)
        self._last = now
        self.ticks += 1

    def __enter__(self) -> StallMeter:
        self._clock.start()
        self._last = 0.0
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._tick()  # the stretch since the last tick counts too
        self._timer.stop()


def longest_stall_while(condition, timeout_s: float) -> float:
    """Spin the event loop until `condition()`; the longest stall of a 5 ms timer meanwhile (ms).
    Raises TimeoutError when the condition does not come within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    with StallMeter() as meter:
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not done within {timeout_s:.0f} s")
            QApplication.processEvents()
            time.sleep(0.001)
    return meter.longest_ms


def wait_for(predicate, timeout: float = 10.0, step_ms: int = 10) -> bool:
    """Spin the event loop until `predicate()` is true (for scripts without qtbot)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        QApplication.processEvents()
        if predicate():
            return True
        time.sleep(step_ms / 1000)
    return predicate()
