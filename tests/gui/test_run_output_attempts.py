"""A run interrupted in the middle of a line and resumed shows, in the window, the cut line on its
own and the next attempt under its header with why it was resumed (host backend, test only)."""

from __future__ import annotations

import time

import pytest

from gui.context import AppContext
from gui.main_window import MainWindow
from gui.task_view.actions import RESUME
from tests.gui.test_task_view import output_text
from tests.support import kill_run_process

COMMANDS = ["echo before", "printf 'echo after > afte'; sleep 3", "echo done-line"]


@pytest.fixture
def shown(qtbot, monkeypatch, data_dir, repo, settings):
    monkeypatch.setenv("CAIRN_BACKEND", "host")
    from core.app import Cairn

    facade = Cairn(data_dir)
    made = facade.tasks.new(repo, title="Cut", engine="shell", instructions="\n".join(COMMANDS))
    facade.tasks.set_policy(made.task.id, network="open")
    context = AppContext(facade, settings=settings, data_dir=data_dir)
    win = MainWindow(context)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: len(win.lineage.model) == 1, timeout=10_000)
    assert win.lineage.select_task(made.task.id)
    yield win, win.task_view, facade, made.task.id
    win.close()
    context.close(close_facade=False)
    facade.close()


def test_a_resumed_attempt_starts_on_its_own_line_under_its_header(qtbot, shown):
    win, view, facade, task_id = shown
    run = facade.runs.start(task_id, commands=COMMANDS)
    files = facade.runs.files(run)
    deadline = time.monotonic() + 20
    while b"afte" not in (files.stdout.read_bytes() if files.stdout.exists() else b""):
        assert time.monotonic() < deadline, "the run never printed its cut line"
        time.sleep(0.05)
    assert files.pid is not None
    kill_run_process(files.pid)
    qtbot.waitUntil(lambda: "interrupted" in view.state_label.text(), timeout=30_000)
    qtbot.waitUntil(lambda: view.buttons[RESUME].isEnabled(), timeout=10_000)
    view.buttons[RESUME].trigger()
    qtbot.waitUntil(lambda: "succeeded" in view.state_label.text(), timeout=60_000)
    qtbot.waitUntil(lambda: "done-line" in output_text(view), timeout=10_000)
    lines = output_text(view).split("\n")
    assert "echo after > afte" in lines  # the cut line ends where its attempt did
    header = next(line for line in lines if line.startswith("attempt 2"))
    assert header.startswith("attempt 2 · resumed: ")
    assert "engine shell continues at step 1" in header
    assert lines.index("echo after > afte") < lines.index(header)
    assert lines[0].startswith("attempt 1")
    view.output.grab().save("/tmp/shots/resumed_output_pane.png")
