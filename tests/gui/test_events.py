"""The event bridge: core events published on any thread reach the GUI thread as signals,
in order, with bursts of run output merged."""

from __future__ import annotations

import threading

from core.events import RUN_OUTPUT, Event, EventBus
from gui.events import EventBridge, coalesce
from gui.qt import QApplication, QThread


def test_events_from_a_worker_thread_arrive_on_the_gui_thread(qtbot):
    bus = EventBus()
    bridge = EventBridge()
    bridge.attach(bus)
    received = []
    threads = []

    def on_event(event):
        received.append(event)
        threads.append(QThread.currentThread())

    bridge.sig_event.connect(on_event)
    worker = threading.Thread(target=lambda: bus.publish("task.created", "t_1", source="/x"))
    worker.start()
    worker.join()
    qtbot.waitUntil(lambda: bool(received))
    assert received[0].kind == "task.created" and received[0].subject == "t_1"
    assert threads[0] is QApplication.instance().thread()
    bridge.detach()
    bus.publish("task.created", "t_2")
    qtbot.wait(100)
    assert len(received) == 1


def test_a_burst_of_output_arrives_as_few_signals_with_nothing_lost(qtbot):
    bus = EventBus()
    bridge = EventBridge(interval_ms=30)
    bridge.attach(bus)
    batches = []
    texts = []
    bridge.sig_events.connect(batches.append)
    bridge.sig_event.connect(lambda e: texts.append(e.payload.get("text", "")))

    def burst():
        for i in range(5000):
            bus.publish(RUN_OUTPUT, "r_1", run_id="r_1", stream="stdout", text=f"line {i}\n")
        bus.publish("run.state", "r_1", state="succeeded", task_id="t_1")

    worker = threading.Thread(target=burst)
    worker.start()
    worker.join()
    qtbot.waitUntil(lambda: bool(batches) and batches[-1][-1].kind == "run.state")
    assert "".join(texts) == "".join(f"line {i}\n" for i in range(5000))
    assert sum(len(b) for b in batches) < 100  # merged, not 5,001 signals
    assert bridge.flushes < 60


def test_coalescing_keeps_order_and_separates_runs_and_streams():
    events = [
        Event(RUN_OUTPUT, "r_1", {"stream": "stdout", "text": "a"}),
        Event(RUN_OUTPUT, "r_1", {"stream": "stdout", "text": "b"}),
        Event(RUN_OUTPUT, "r_1", {"stream": "stderr", "text": "c"}),
        Event("run.state", "r_1", {"state": "failed"}),
        Event(RUN_OUTPUT, "r_1", {"stream": "stderr", "text": "d"}),
        Event(RUN_OUTPUT, "r_2", {"stream": "stderr", "text": "e"}),
        Event(RUN_OUTPUT, "r_2", {"stream": "stderr", "text": "f", "backlog": True}),
    ]
    merged = coalesce(events)
    assert [(e.kind, e.subject, e.payload.get("text")) for e in merged] == [
        (RUN_OUTPUT, "r_1", "ab"),
        (RUN_OUTPUT, "r_1", "c"),
        ("run.state", "r_1", None),
        (RUN_OUTPUT, "r_1", "d"),
        (RUN_OUTPUT, "r_2", "e"),
        (RUN_OUTPUT, "r_2", "f"),
    ]


def test_a_long_queue_is_flushed_in_batches(qtbot):
    bridge = EventBridge(interval_ms=5, max_batch=100)
    sizes = []
    bridge.sig_events.connect(lambda batch: sizes.append(len(batch)))
    for i in range(450):
        bridge.post(Event("revision.recorded", f"ws_{i}", {}))
    qtbot.waitUntil(lambda: sum(sizes) == 450)
    assert max(sizes) == 100 and len(sizes) == 5
