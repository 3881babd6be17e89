"""The sandbox host in the desktop app: the first-run check offers to send the image to a host
that lacks it and checks again; Settings chooses the default host, tests it and sends the image,
all in jobs (the GUI thread never waits on an engine)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest

from core.events import EventBus
from core.health import ACTION_SEND_IMAGE, ERROR, OK, Check
from core.settings import settings_path
from core.signin import Problem
from gui.context import AppContext
from gui.settings.dialog import SettingsDialog
from gui.welcome import WelcomeDialog

PODMAN = "unix:///run/user/1000/podman/podman.sock"
MISSING = Check(
    "host",
    "Sandbox host lab (Podman)",
    ERROR,
    "the sandbox image cairn-sandbox:1 is not on host lab",
    "send it from the local Docker engine",
    "cairnctl host send-image lab",
    problems=(Problem("the image is not there", "send it", None, ACTION_SEND_IMAGE),),
    host="lab",
)
READY = Check("host", "Sandbox host lab (Podman)", OK, "ready: 4.3.1", facts=("4.3.1",), host="lab")


class FakeCairn:
    def __init__(self):
        self.events = EventBus()
        self.sent: list[str] = []
        self.answer = MISSING
        self.hosts = SimpleNamespace(send_image=self.send_image)

    def health_checks(self) -> list[Check]:
        return [self.answer]

    def send_image(self, name: str) -> str:
        assert threading.current_thread() is not threading.main_thread()
        self.sent.append(name)
        self.answer = READY
        return "sha256:1"


def test_the_first_run_check_sends_the_image_and_checks_again(qtbot, settings):
    cairn = FakeCairn()
    ctx = AppContext(cairn, settings=settings)  # type: ignore[arg-type]
    try:
        dialog = WelcomeDialog(ctx)
        qtbot.addWidget(dialog)
        dialog.show()
        qtbot.waitUntil(lambda: dialog.checked, timeout=10_000)
        row = dialog.row("host")
        assert row is not None and row.send_image_button.isVisible()
        assert not dialog.host_box.isHidden()  # sandboxes cannot run yet: the host backend too
        row.send_image_button.click()
        qtbot.waitUntil(lambda: dialog.row("host").check.state == OK, timeout=10_000)
        assert cairn.sent == ["lab"]
        assert not dialog.row("host").send_image_button.isVisible()
    finally:
        ctx.close(close_facade=False)


@pytest.fixture
def dialog(qtbot, context):
    made = SettingsDialog(context)
    qtbot.addWidget(made)
    made.show()
    qtbot.waitUntil(lambda: made.loaded is not None and not made.busy, timeout=10_000)
    return made


def test_settings_chooses_the_default_host(qtbot, cairn, context):
    cairn.settings.set("hosts.lab", f"podman {PODMAN}")
    made = SettingsDialog(context)
    qtbot.addWidget(made)
    made.show()
    qtbot.waitUntil(lambda: made.loaded is not None and not made.busy, timeout=10_000)
    names = [made.host_combo.itemData(i) for i in range(made.host_combo.count())]
    assert names == ["lab", "local", "podman"]
    assert made.host_combo.currentData() == "local"
    made.host_combo.setCurrentIndex(names.index("lab"))
    assert made.changes().set == {"defaults.host": "lab"}
    made.apply()
    qtbot.waitUntil(lambda: not made.busy and context.jobs.idle(), timeout=10_000)
    stored = json.loads(settings_path(cairn.data.root).read_text())
    assert stored["defaults"]["host"] == "lab"


def test_settings_tests_a_host_and_sends_the_image(qtbot, cairn, dialog, monkeypatch):
    answers = [MISSING, READY]
    sent: list[str] = []

    def check(name):
        assert threading.current_thread() is not threading.main_thread()
        return replace(answers.pop(0), host=name)

    monkeypatch.setattr(cairn.hosts, "check", check)
    monkeypatch.setattr(cairn.hosts, "send_image", lambda name: sent.append(name) or "sha256:1")
    dialog.test_host_button.click()
    qtbot.waitUntil(lambda: dialog.send_image_button.isVisible(), timeout=10_000)
    assert "not on host lab" in dialog.host_result.text()
    dialog.send_image_button.click()
    qtbot.waitUntil(lambda: "4.3.1" in dialog.host_result.text(), timeout=10_000)
    assert sent == ["local"]  # the host shown in the list when the buttons were pressed
    assert not dialog.send_image_button.isVisible()


def test_new_task_chooses_the_sandbox_host(qtbot, tmp_path):
    from gui.dialogs import NewTaskDialog

    folder = tmp_path / "repo"
    folder.mkdir()
    made = NewTaskDialog([folder], hosts=("lab", "local", "podman"), default_host="podman")
    qtbot.addWidget(made)
    assert made.host_combo.currentText() == "podman"
    made.instructions_edit.setPlainText("make test")
    made.host_combo.setCurrentText("lab")
    (request,) = made.requests()
    assert request.host == "lab"
    plain = NewTaskDialog([folder])  # hosts not read yet: the settings' default, no choice shown
    qtbot.addWidget(plain)
    plain.instructions_edit.setPlainText("make test")
    assert plain.host_combo.isHidden() and plain.requests()[0].host is None


def test_the_window_makes_the_task_on_the_chosen_host(qtbot, cairn, window, tmp_path):
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    cairn.settings.set("hosts.lab", f"podman {PODMAN}")
    window.load_defaults()
    qtbot.waitUntil(lambda: "lab" in window._hosts, timeout=10_000)
    dialog = window.open_new_task_dialog([folder])
    dialog.instructions_edit.setPlainText("echo hi")
    dialog.host_combo.setCurrentText("lab")
    dialog.accept()
    qtbot.waitUntil(lambda: bool(cairn.ctx.store.list_tasks()), timeout=10_000)
    (task,) = cairn.ctx.store.list_tasks()
    assert task.host == "lab"


def test_fork_chooses_the_sandbox_host(qtbot):
    from gui.dialogs import ForkDialog

    revisions = [{"id": "a" * 40, "description": "first"}]
    made = ForkDialog("t", revisions, hosts=("local", "podman"), default_host="local")
    qtbot.addWidget(made)
    assert made.host() == "local"
    made.host_combo.setCurrentText("podman")
    assert made.host() == "podman"
    plain = ForkDialog("t", revisions)
    qtbot.addWidget(plain)
    assert plain.host_combo.isHidden() and plain.host() is None
