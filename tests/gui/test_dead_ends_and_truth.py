"""The app shows the truth and has no dead ends: a sandbox event settles the run and every view
reads again; Docker's errors reach no label raw; tasks are renamed (F2), edited and deleted from
the tree; a reload keeps the tree's expansion."""

from __future__ import annotations

import docker.errors
import requests

from core.sandbox.events import SandboxEvent
from gui.errors import describe_error
from gui.qt import QDialogButtonBox, QMessageBox
from gui.sandbox_watch import Settled


def test_docker_client_errors_are_described_not_shown_raw():
    response = requests.Response()
    response.status_code = 404
    raw = docker.errors.NotFound(
        "404 Client Error for http+docker://localhost/v1.45/containers/x/json: Not Found",
        response=response,
    )
    for error in (raw, RuntimeError(f"internal error: {raw}")):
        text = describe_error(error)
        assert "404" not in text and "docker.errors" not in text and "http+docker" not in text
    assert "no longer exists" in describe_error(raw)


class FakeStream:
    made: list[FakeStream] = []

    def __init__(self, data_dir, *, on_event, on_connection):
        self.on_event, self.on_connection = on_event, on_connection
        FakeStream.made.append(self)

    def start(self):
        self.on_connection(None)

    def stop(self):
        pass


def test_a_destroy_event_settles_the_workspace_and_refreshes_every_view(qtbot, window, monkeypatch):
    watch = window.context.sandbox_watch
    settled_for: list = []
    monkeypatch.setattr(
        "gui.sandbox_watch.settle_workspace",
        lambda cairn, ws: settled_for.append(ws) or Settled(ws, {"r_1": "interrupted"}),
    )
    refreshed: list = []
    monkeypatch.setattr(window.task_view, "reload", lambda: refreshed.append("task"))
    monkeypatch.setattr(window.lineage, "refresh_sessions", lambda: refreshed.append("tree"))
    monkeypatch.setattr(window.sessions_panel, "refresh", lambda: refreshed.append("sessions"))
    watch._factory = FakeStream
    watch._stream = None
    watch._start_stream(True)
    stream = FakeStream.made[-1]
    event = SandboxEvent("destroy", "c1", "cairn-x", "ws_1", "se_1", None, 0.0)
    with qtbot.waitSignal(watch.sig_changed, timeout=5000):
        stream.on_event(event)
    assert settled_for == ["ws_1"]
    assert {"task", "tree", "sessions"} <= set(refreshed)
    assert "interrupted" in window.statusBar().currentMessage()
    assert "Resume" in window.statusBar().currentMessage()


def test_rename_with_f2_edit_and_delete_from_the_tree(qtbot, window, cairn, repo):
    task_id = cairn.tasks.new(repo, title="old").task.id
    window.lineage.reload()
    qtbot.waitUntil(lambda: window.lineage.model.task_node(task_id) is not None, timeout=10_000)
    window.lineage.select_task(task_id)
    window.lineage.tree.setFocus()
    window.lineage.rename_action.trigger()
    dialog = window.lineage.rename_dialog
    dialog.setTextValue("new title")
    dialog.accept()
    qtbot.waitUntil(lambda: cairn.tasks.get(task_id).title == "new title", timeout=10_000)
    qtbot.waitUntil(lambda: window.lineage.model.task_row(task_id).title == "new title")

    menu = window.lineage.context_menu_for(task_id)
    edit = next(a for a in menu.actions() if a.text() == "Edit Instructions…")
    assert edit.isEnabled()
    edit.trigger()
    box = window.lineage.instructions_dialog
    box.edit.setPlainText("")
    assert not box.ok_button.isEnabled() and "blank" in box.ok_button.toolTip()
    box.edit.setPlainText("make test")
    box.buttons.button(QDialogButtonBox.StandardButton.Save).click()
    qtbot.waitUntil(lambda: cairn.tasks.get(task_id).instructions == "make test", timeout=10_000)

    root = cairn.tasks.workspace_of(cairn.tasks.get(task_id)).root
    next(
        a for a in window.lineage.context_menu_for(task_id).actions() if a.text() == "Delete Task…"
    ).trigger()
    qtbot.waitUntil(lambda: isinstance(getattr(window.lineage, "confirm_box", None), QMessageBox))
    confirm = window.lineage.confirm_box
    assert root in confirm.text()  # says exactly what goes
    delete = next(b for b in confirm.buttons() if b.text().replace("&", "") == "Delete")
    delete.click()
    qtbot.waitUntil(lambda: cairn.tasks.all() == [], timeout=10_000)
    qtbot.waitUntil(lambda: window.lineage.model.task_node(task_id) is None, timeout=10_000)


def test_a_reload_keeps_expansion_and_selection(qtbot, window, cairn, repo):
    task_id = cairn.tasks.new(repo).task.id
    window.lineage.reload()
    qtbot.waitUntil(lambda: window.lineage.model.task_node(task_id) is not None, timeout=10_000)
    window.lineage.select_task(task_id)
    expanded = window.lineage.expanded_keys()
    assert expanded
    window.lineage.reload()
    qtbot.wait(300)
    qtbot.waitUntil(lambda: window.lineage.selected_task() == task_id, timeout=10_000)
    assert window.lineage.expanded_keys() == expanded
