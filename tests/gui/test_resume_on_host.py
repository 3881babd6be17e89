"""Resume on Host… in the window and the host in the Sessions tab: the action sits beside Resume
in the Task menu (and so in the palette), is disabled with its reason when there is no other
host, and its dialog preselects the task's own host and resumes through `runs.resume(host=)` in
a job; a host that does not answer fails as any resume does. The Sessions tab names each
sandbox's host, read with the rest of its data."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from core.events import EventBus
from core.models import Run
from core.sandbox.base import SandboxUnavailable
from gui.context import AppContext
from gui.dialogs import ResumeOnHostDialog
from gui.dialogs.prompts import MOVE_NOTE
from gui.palette import menu_actions
from gui.qt import QCoreApplication, QEvent, QMessageBox, QSettings, Qt
from gui.sessions import SessionsPanel
from gui.sessions.panel import S_BACKEND, S_HOST, S_STATE, SESSION_COLUMNS
from gui.task_view import view as view_module
from gui.task_view.actions import RESUME

LAB_DOWN = "Docker at unix:///run/lab.sock did not answer (connection timed out)"


def interrupted(task_id: str) -> Run:
    return Run("run-1", task_id, "interrupted", 1, "shell")


@pytest.fixture
def shown(qtbot, monkeypatch, cairn, repo):
    """A task whose last run was interrupted, shown in a window; `hosts` chooses the sandbox
    hosts the task view reads (the real facade's settings always have local and podman)."""
    hosts: dict[str, tuple[str, ...]] = {"names": ("local", "podman")}
    real = view_module.task_view

    def task_view(facade, task_id, *, with_output=True):
        data = real(facade, task_id, with_output=with_output)
        data.run = interrupted(task_id)
        data.hosts = hosts["names"]
        return data

    monkeypatch.setattr(view_module, "task_view", task_view)
    monkeypatch.setattr(view_module, "run_output", lambda facade, run_id: "")
    task_id = cairn.tasks.new(repo, title="moves", engine="shell", instructions="true").task.id

    def show(window):
        window.lineage.reload()
        qtbot.waitUntil(lambda: window.lineage.select_task(task_id), timeout=10_000)
        view = window.task_view
        qtbot.waitUntil(
            lambda: view.data is not None and view.data.details["task_id"] == task_id,
            timeout=10_000,
        )
        return view

    return SimpleNamespace(task_id=task_id, hosts=hosts, show=show)


def test_resume_on_host_sits_beside_resume_in_the_menus_and_the_palette(qtbot, window, shown):
    view = shown.show(window)
    action = view.resume_on_host_action
    menu = [a for a in window.task_menu.actions() if not a.isSeparator()]
    assert menu[menu.index(view.buttons[RESUME]) + 1] is action
    assert action in {e.action for e in menu_actions(window.menuBar())}
    assert action in window.lineage.context_menu_for(shown.task_id).actions()
    assert action not in view.toolbar.actions()  # the toolbar's Resume stays the plain one
    assert action.isEnabled(), action.toolTip()
    # The default host not answering stops Resume, not a move to another host.
    window.context.set_sandbox_problem("Docker is not running")
    assert not view.buttons[RESUME].isEnabled() and action.isEnabled()
    dialog = view.resume_on_host()
    assert dialog is not None
    assert dialog.host_list.item(0).text() == (
        "local (the task's host now) — did not answer at the last check: Docker is not running"
    )
    dialog.reject()


def test_with_one_host_the_action_is_disabled_and_says_why(qtbot, window, shown):
    shown.hosts["names"] = ("local",)
    view = shown.show(window)
    action = view.resume_on_host_action
    assert view.buttons[RESUME].isEnabled()  # plain Resume does not need another host
    assert not action.isEnabled()
    assert action.toolTip() == "only one sandbox host is configured (local); there is no other"
    assert view.resume_on_host() is None  # its keys and the palette open nothing


def test_the_dialog_preselects_the_task_s_host_and_resumes_on_the_chosen_one(
    qtbot, window, shown, cairn, monkeypatch
):
    view = shown.show(window)
    assert view.data.details["host"] == "local"
    calls: list[tuple[str, dict]] = []

    def resume(task_id, **kwargs):
        assert threading.current_thread() is not threading.main_thread()  # in a job
        calls.append((task_id, kwargs))
        return interrupted(task_id), None

    monkeypatch.setattr(cairn.runs, "resume", resume)
    view.resume_on_host_action.trigger()
    dialog = view.resume_on_host_dialog
    assert isinstance(dialog, ResumeOnHostDialog) and dialog.isVisible()
    assert dialog.host() == "local"  # the task's own host, preselected and marked
    texts = [dialog.host_list.item(i).text() for i in range(dialog.host_list.count())]
    assert texts == ["local (the task's host now)", "podman"]
    assert dialog.note.text() == MOVE_NOTE and "same snapshot" in MOVE_NOTE
    dialog.host_list.setCurrentRow(1)
    dialog.accept()
    qtbot.waitUntil(lambda: bool(calls), timeout=10_000)
    assert calls == [(shown.task_id, {"choice": None, "host": "podman"})]
    qtbot.waitUntil(lambda: window.statusBar().currentMessage() == "Resumed moves on podman")


def test_a_task_s_host_removed_from_the_settings_is_shown_but_not_chosen(qtbot):
    """The task's host is no longer in the settings: it is listed, says how to get it back,
    cannot be chosen, and the settings' default host is preselected instead of the first."""
    dialog = ResumeOnHostDialog("moves", ("local", "podman", "lab"), "gone-box", default="podman")
    qtbot.addWidget(dialog)
    first = dialog.host_list.item(0)
    assert first.text().startswith("gone-box (the task's host now)")
    assert "no longer in Settings" in first.text()
    assert not first.flags() & Qt.ItemFlag.ItemIsSelectable
    assert dialog.host() == "podman"
    assert dialog.ok_button.isEnabled()
    dialog.host_list.setCurrentRow(0)
    assert dialog.host() is None and not dialog.ok_button.isEnabled()


def test_plain_resume_asks_nothing_and_stays_on_the_task_s_host(
    qtbot, window, shown, cairn, monkeypatch
):
    view = shown.show(window)
    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(
        cairn.runs,
        "resume",
        lambda task_id, **kwargs: calls.append((task_id, kwargs)) or (interrupted(task_id), None),
    )
    view.buttons[RESUME].trigger()
    qtbot.waitUntil(lambda: bool(calls), timeout=10_000)
    assert calls == [(shown.task_id, {"choice": None})]
    assert getattr(view, "resume_on_host_dialog", None) is None


def test_a_host_that_does_not_answer_fails_as_a_resume_does(
    qtbot, window, shown, cairn, monkeypatch
):
    view = shown.show(window)
    window.context.host_problems = {"podman": "the engine at podman did not answer"}

    def resume(task_id, **kwargs):
        raise SandboxUnavailable(LAB_DOWN, hint="check that the daemon runs: docker info")

    monkeypatch.setattr(cairn.runs, "resume", resume)
    dialog = view.resume_on_host()
    assert dialog is not None
    texts = [dialog.host_list.item(i).text() for i in range(dialog.host_list.count())]
    assert (
        texts[1] == "podman — did not answer at the last check: the engine at podman did not answer"
    )
    dialog.host_list.setCurrentRow(1)
    dialog.accept()
    qtbot.waitUntil(lambda: view.findChild(QMessageBox, "actionFailed") is not None, timeout=10_000)
    box = view.findChild(QMessageBox, "actionFailed")
    assert LAB_DOWN in box.text() and box.text().startswith("Could not resume the run")
    qtbot.waitUntil(lambda: view.resume_on_host_action.isEnabled(), timeout=10_000)
    box.close()


# -- the Sessions tab -------------------------------------------------------------------------


@dataclass
class SessionsCairn:
    """What the Sessions tab reads: two sandboxes on two hosts."""

    events: EventBus = field(default_factory=EventBus)
    stats_calls: list = field(default_factory=list)

    def __post_init__(self):
        self.tasks = SimpleNamespace(all=self.all_tasks)
        self.views = SimpleNamespace(status=self.status, session_stats=self.session_stats)
        self.runs = SimpleNamespace(latest=lambda task_id: None)

    def all_tasks(self):
        return [
            SimpleNamespace(id="task-a", title="here", workspace_id="ws-a", created_at=0.0),
            SimpleNamespace(id="task-b", title="there", workspace_id="ws-b", created_at=0.0),
        ]

    def session(self, name: str, host: str, state: str) -> dict:
        return {
            "session_id": f"sess-{name}",
            "workspace_id": f"ws-{name}",
            "backend": "docker",
            "host": host,
            "unsafe": False,
            "container": f"cairn-{name}",
            "state": state,
            "image": "img",
            "generation": 1,
            "snapshot_id": None,
            "age_s": 5.0,
        }

    def status(self):
        return {
            "sessions": [
                self.session("a", "local", "running"),
                self.session("b", "lab", "unknown"),
            ],
            "snapshots": [],
            "problem": None,
            "host_problems": {"lab": LAB_DOWN},
        }

    def session_stats(self, session_id):
        self.stats_calls.append(session_id)
        return {"running": True}


def test_the_sessions_tab_names_each_sandbox_s_host(qtbot, tmp_path):
    context = AppContext(
        SessionsCairn(),  # type: ignore[arg-type]
        settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
    )
    panel = SessionsPanel(context)
    qtbot.addWidget(panel)
    panel.show()
    try:
        qtbot.waitUntil(lambda: panel.sessions.rowCount() == 2, timeout=5000)
        table = panel.sessions
        assert SESSION_COLUMNS[S_HOST] == "Host"
        assert table.horizontalHeaderItem(S_HOST).text() == "Host"
        assert [table.item(r, S_HOST).text() for r in range(2)] == ["local", "lab"]
        assert table.item(0, S_BACKEND).text() == "docker"
        assert table.item(1, S_STATE).text() == "unknown"
    finally:
        panel.close()
        panel.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        context.close(close_facade=False)
