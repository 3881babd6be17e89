"""Garbage collection on the GUI thread only.

Python's cyclic collector runs on whichever thread happens to allocate when its threshold trips.
If that is a pool thread (a job tokenising a diff, a run's output being read) and the garbage
holds Qt objects (a closed dialog and the lambda connected to it, a finished panel), Qt objects
are destroyed off the GUI thread and the process crashes at random. So while the app runs,
automatic collection is off and this object collects on the GUI thread on a timer: the young
generations often (cheap), everything now and then. Anki does the same for the same reason.

A job that builds many objects (a capture's index of a 100,000-file workspace) would leave them
all to the next young collection, which then blocks the GUI thread for as long as it takes to
walk them (about 100 ms for 250,000). So a short timer also collects the young generations as
soon as they hold `BURST_OBJECTS`: many small collections instead of one long one.
"""

from __future__ import annotations

import gc

from gui.qt import QObject, QTimer

YOUNG_INTERVAL_MS = 1000
FULL_EVERY = 60  # young collections between two full ones
BURST_CHECK_MS = 20
BURST_OBJECTS = 20_000  # young objects that are worth collecting now rather than at the tick


class GuiThreadCollector(QObject):
    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._ticks = 0
        self._timer = QTimer(self)
        self._timer.setInterval(YOUNG_INTERVAL_MS)
        self._timer.timeout.connect(self._collect)
        self._burst_timer = QTimer(self)
        self._burst_timer.setInterval(BURST_CHECK_MS)
        self._burst_timer.timeout.connect(self._collect_burst)
        self._was_enabled = gc.isenabled()

    def start(self) -> GuiThreadCollector:
        gc.disable()
        self._timer.start()
        self._burst_timer.start()
        return self

    def stop(self) -> None:
        self._timer.stop()
        self._burst_timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()

    def _collect(self) -> None:
        self._ticks += 1
        if self._ticks % FULL_EVERY == 0:
            gc.collect()
        else:
            gc.collect(1)

    def _collect_burst(self) -> None:
        if gc.get_count()[0] >= BURST_OBJECTS:
            gc.collect(1)  # the middle generation too, so it never piles up either
