"""The task view over a real facade: a shell task run in the (unsafe, test-only) host backend
shows its output live while it runs, its buttons follow the run's state with their reasons, and
its patch and branch leave through the facade."""

from __future__ import annotations

import subprocess

import pytest

from gui.context import AppContext
from gui.main_window import MainWindow
from gui.task_view.actions import CONTINUE, EXPORT_PATCH, PROMOTE, RESUME, START, STOP
from tests.gui.support import StallMeter

COMMANDS = "echo first-line\nsleep 2\necho changed > made-by-run.txt\necho second-line"


@pytest.fixture
def host_cairn(monkeypatch, data_dir, repo):
    monkeypatch.setenv("CAIRN_BACKEND", "host")
    from core.app import Cairn

    facade = Cairn(data_dir)
    made = facade.tasks.new(repo, title="Run me", engine="shell", instructions=COMMANDS)
    facade.tasks.set_policy(
        made.task.id, network="open"
    )  # the host backend cannot close the network
    yield facade, made.task.id
    facade.close()


@pytest.fixture
def shown(qtbot, host_cairn, settings, data_dir):
    facade, task_id = host_cairn
    context = AppContext(facade, settings=settings, data_dir=data_dir)
    win = MainWindow(context)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: len(win.lineage.model) == 1, timeout=10_000)
    assert win.lineage.select_task(task_id)
    view = win.task_view
    qtbot.waitUntil(
        lambda: view.data is not None and view.data.details["task_id"] == task_id, timeout=10_000
    )
    yield win, view, facade, task_id
    win.close()
    context.close(close_facade=False)


def output_text(view) -> str:
    return view.output.toPlainText()


def test_a_new_task_shows_its_facts_and_can_only_start(qtbot, shown):
    win, view, facade, task_id = shown
    assert view.title_label.text() == "Run me"
    assert "shell" in view.facts_label.text() and task_id in view.facts_label.text()
    assert view.instructions.text() == COMMANDS
    assert view.state_label.text() == "Not started yet."
    assert view.buttons[START].isEnabled()
    assert not view.buttons[STOP].isEnabled()
    assert view.buttons[STOP].toolTip() == "the task has not run yet"
    assert view.buttons[CONTINUE].toolTip() == "the task has not run yet; start it first"
    assert view.buttons[EXPORT_PATCH].toolTip() == "no changes since the base revision"


def test_a_run_shows_its_output_live_and_its_end(qtbot, shown, tmp_path, monkeypatch):
    win, view, facade, task_id = shown
    with StallMeter() as meter:
        view.buttons[START].trigger()
        qtbot.waitUntil(lambda: "first-line" in output_text(view), timeout=20_000)
        # Live: the first line is there while the run still sleeps.
        assert "second-line" not in output_text(view)
        assert facade.runs.in_flight(task_id) is not None
        qtbot.waitUntil(lambda: view.buttons[STOP].isEnabled(), timeout=5_000)
        assert "stop it or wait" in view.buttons[CONTINUE].toolTip()
        qtbot.waitUntil(lambda: "second-line" in output_text(view), timeout=20_000)
        qtbot.waitUntil(lambda: "succeeded" in view.state_label.text(), timeout=20_000)
    print(f"longest event-loop stall while a run was followed: {meter.longest_ms:.1f} ms")
    assert meter.longest_ms < 250
    text = output_text(view)
    assert text.index("first-line") < text.index("second-line")
    # Backlog and live output never overlap (the step's header names the command too).
    assert text.split("\n").count("first-line") == 1
    # The run ended; its sandbox is still up, so Stop stays offered to let it go.
    qtbot.waitUntil(lambda: "succeeded" in view.state_label.text())
    assert view.buttons[STOP].isEnabled() == ("workspace active" in view.facts_label.text())
    assert view.buttons[RESUME].toolTip() == (
        "the last run succeeded; only an interrupted run can be resumed"
    )
    # The tree's row carries the state too.
    index = win.lineage.model.index_of_task(task_id)
    qtbot.waitUntil(lambda: index.siblingAtColumn(1).data().startswith("succeeded"))

    # Shown again later, the output comes from the run's log.
    view.set_task(None)
    view.set_task(task_id)
    qtbot.waitUntil(lambda: "second-line" in output_text(view), timeout=10_000)
    assert output_text(view).split("\n").count("first-line") == 1

    # The run changed a file: the patch can leave through the facade.
    qtbot.waitUntil(lambda: view.buttons[EXPORT_PATCH].isEnabled(), timeout=10_000)
    target = tmp_path / "out.patch"
    from gui.task_view import view as module

    monkeypatch.setattr(
        module.QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(target), ""))
    )
    view.buttons[EXPORT_PATCH].trigger()
    qtbot.waitUntil(lambda: target.exists() and target.stat().st_size > 0, timeout=10_000)
    assert "made-by-run.txt" in target.read_text()
    qtbot.waitUntil(lambda: "Exported the patch" in win.statusBar().currentMessage())


def test_promote_to_branch_asks_for_the_name(qtbot, shown, repo, monkeypatch):
    win, view, facade, task_id = shown
    view.buttons[START].trigger()
    qtbot.waitUntil(lambda: "succeeded" in view.state_label.text(), timeout=30_000)
    qtbot.waitUntil(lambda: view.buttons[PROMOTE].isEnabled(), timeout=10_000)
    from gui.task_view import view as module

    monkeypatch.setattr(
        module.QInputDialog, "getText", staticmethod(lambda *a, **k: ("cairn/from-gui", True))
    )
    view.buttons[PROMOTE].trigger()
    qtbot.waitUntil(lambda: "cairn/from-gui" in win.statusBar().currentMessage(), timeout=10_000)
    branches = subprocess.run(
        ["git", "branch", "--list", "cairn/from-gui"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "cairn/from-gui" in branches


def test_the_empty_output_says_why_it_is_empty():
    from types import SimpleNamespace

    from gui.task_view import output_placeholder

    assert output_placeholder(None).startswith("No run yet")
    assert output_placeholder(SimpleNamespace(state="running")) == "Waiting for the run's output…"
    assert output_placeholder(SimpleNamespace(state="succeeded")) == "The run printed nothing."
