"""Garbage is collected on the GUI thread only while the app runs (see gui.collector)."""

from __future__ import annotations

import gc
import threading

from gui.collector import GuiThreadCollector
from gui.qt import QObject


class Cycle(QObject):
    """A Qt object kept alive only by a reference cycle, as a closed dialog with its lambda is."""

    deleted_on: list[str] = []

    def __init__(self):
        super().__init__()
        self.me = self
        self.destroyed.connect(lambda: Cycle.deleted_on.append(threading.current_thread().name))


def test_cycles_are_collected_by_the_timer_on_the_gui_thread(qtbot):
    gc.enable()
    collector = GuiThreadCollector().start()
    try:
        assert not gc.isenabled()
        Cycle.deleted_on.clear()
        Cycle()
        # A job's thread allocating a lot would have run a collection there; now it cannot.
        worker = threading.Thread(target=lambda: [[] for _ in range(200_000)], name="job")
        worker.start()
        worker.join()
        assert Cycle.deleted_on == []
        qtbot.waitUntil(lambda: Cycle.deleted_on != [], timeout=5000)
        assert Cycle.deleted_on == [threading.current_thread().name]
    finally:
        collector.stop()
    assert gc.isenabled()
