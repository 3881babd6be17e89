"""What the task actions show while they work: Stop says "stopping…" and what it waits for the
moment its keys are pressed, Create and Start makes the task and starts its first run, and the
status bar's "Working…" goes once the work is done."""

from __future__ import annotations

import threading
import time

from core.events import RUN_STATE, Event
from gui.qt import Qt
from gui.task_view.actions import BUTTONS, STOP


def test_stop_shows_stopping_at_once_and_what_it_waits_for(qtbot, window, cairn, repo, monkeypatch):
    task_id = cairn.tasks.new(
        repo, title="stop me", engine="shell", instructions="sleep 60"
    ).task.id
    window.lineage.reload()
    qtbot.waitUntil(lambda: window.lineage.select_task(task_id), timeout=10_000)
    view = window.task_view
    qtbot.waitUntil(lambda: view.data is not None, timeout=10_000)
    # The sandbox was last seen up: Stop can let it go (no run needed to be in flight).
    view.data.details["state"] = "active"
    view._update_buttons()
    assert view.buttons[STOP].isEnabled()
    release = threading.Event()
    stopped: list[str] = []

    def slow_stop(ref: str, **_kw) -> dict:
        release.wait(10)
        stopped.append(ref)
        return {"task_id": ref, "run": None, "sandbox": None}

    monkeypatch.setattr(cairn.runs, "stop", slow_stop)
    window.lineage.tree.setFocus()
    qtbot.keyClick(window.lineage.tree, Qt.Key.Key_Period, Qt.KeyboardModifier.ControlModifier)
    # At once, while the core still works: the header and every action say so.
    assert "stopping…" in view.state_label.text()
    assert "waiting for the sandbox to stop" in view.state_label.text()
    for name in BUTTONS:
        assert not view.buttons[name].isEnabled()
        assert view.buttons[name].toolTip().startswith("stopping the run")
    # The tree says it too, and a moment of "interrupted" on the way does not change that.
    lineage = window.lineage
    assert lineage.model.task_row(task_id).pending == "stopping…"
    badge = lineage.model.index_of_task(task_id).siblingAtColumn(1)
    assert badge.data().startswith("stopping…")
    lineage._on_events([Event(RUN_STATE, "r1", {"task_id": task_id, "state": "interrupted"})])
    assert badge.data().startswith("stopping…")
    assert not lineage.delete_action.isEnabled()
    release.set()
    qtbot.waitUntil(lambda: stopped == [task_id], timeout=10_000)
    qtbot.waitUntil(lambda: "stopping…" not in view.state_label.text(), timeout=10_000)
    lineage._on_events([Event(RUN_STATE, "r1", {"task_id": task_id, "state": "cancelled"})])
    assert lineage.model.task_row(task_id).pending is None
    assert lineage.model.index_of_task(task_id).siblingAtColumn(1).data().startswith("cancelled")


def test_create_and_start_makes_the_task_and_starts_its_run(
    qtbot, window, cairn, repo, monkeypatch
):
    started: list[tuple[str, list[str] | None, str | None]] = []

    def start(task_id: str, *, commands=None, prompt=None, **_kw):
        started.append((task_id, commands, prompt))

    monkeypatch.setattr(cairn.runs, "start", start)
    dialog = window.open_new_task_dialog([repo])
    dialog.engine_combo.setCurrentText("shell")
    dialog.instructions_edit.setPlainText("make test\n\ngit status")
    dialog.start_button.click()
    qtbot.waitUntil(lambda: len(started) == 1, timeout=10_000)
    task = cairn.tasks.all()[0]
    assert started == [(task.id, ["make test", "git status"], None)]
    qtbot.waitUntil(lambda: window.lineage.selected_task() == task.id, timeout=10_000)
    qtbot.waitUntil(lambda: "Started a run" in window.statusBar().currentMessage(), timeout=5_000)


def test_working_shows_while_jobs_work_and_clears_when_they_end(qtbot, window):
    qtbot.waitUntil(lambda: window.context.jobs.working == 0, timeout=10_000)
    qtbot.waitUntil(lambda: window.activity_label.text() == "", timeout=5_000)
    window.context.jobs.job(lambda: time.sleep(0.8), what="wait a while", parent=window).run()
    qtbot.waitUntil(lambda: window.activity_label.text() == "Working…", timeout=5_000)
    qtbot.waitUntil(lambda: window.activity_label.text() == "", timeout=5_000)
    # A quick job never shows it at all.
    window.context.jobs.job(lambda: None, what="a quick look", parent=window).run()
    qtbot.wait(600)
    assert window.activity_label.text() == ""
