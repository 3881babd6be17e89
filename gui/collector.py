"""Garbage collection on the GUI thread only.

Python's cyclic collector runs on whichever thread happens to allocate when its threshold trips.
If that is a pool thread (a job tokenising a diff, a run's output being read) and the garbage
holds Qt objects (a closed dialog and the lambda connected to it, a finished panel), Qt objects
are destroyed off the GUI thread and the process crashes at random. So while the app runs,
automatic collection is off and this object collects on the GUI thread on a timer: the young
generations often (cheap), everything now and then. Anki does the same for the same reason.
"""

from __future__ import annotations

import gc

from gui.qt import QObject, QTimer

YOUNG_INTERVAL_MS = 1000
FULL_EVERY = 60  # young collections between two full ones


class GuiThreadCollector(QObject):
    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._ticks = 0
        self._timer = QTimer(self)
        self._timer.setInterval(YOUNG_INTERVAL_MS)
        self._timer.timeout.connect(self._collect)
        self._was_enabled = gc.isenabled()

    def start(self) -> "GuiThreadCollector":
        gc.disable()
        self._timer.start()
        return self

    def stop(self) -> None:
        self._timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()

    def _collect(self) -> None:
        self._ticks += 1
        if self._ticks % FULL_EVERY == 0:
            gc.collect()
        else:
            gc.collect(1)
