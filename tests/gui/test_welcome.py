"""The welcome dialog / System Check: each situation shows its message and fix, Continue always
works once the checks ran (and is remembered), and the unsafe host backend is offered only when
Docker cannot be used, behind a confirmation. Also: the app still opens with nothing available."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.engines.codex import CHATGPT_SIGN_IN_NOTE
from core.events import EventBus
from core.health import Check, check_docker, check_engine, check_keyring
from core.signin import (
    ACTION_CHOOSE_BINARY,
    ACTION_SIGN_IN,
    SIGN_IN_NOTES,
    EngineStatus,
    Found,
    Problem,
    SignIn,
    kinds_of,
)
from gui import welcome
from gui.context import AppContext
from gui.qt import QApplication, QDialog, Qt
from gui.welcome import WELCOMED_KEY, WelcomeDialog, should_welcome

REPO_ROOT = Path(__file__).resolve().parents[2]

DOCKER_OK = Check(
    "docker", "Docker", "ok", "Docker 24.0.7 is running at unix:///var/run/docker.sock"
)
KEYRING_OK = Check(
    "keyring", "Keyring", "ok", "secrets are kept in the OS keyring (SecretService Keyring)"
)
GIT_OK = Check("git", "Git", "ok", "git 2.39.5 (Cairn needs 2.29 or newer)")
DISK_OK = Check("disk", "Disk space", "ok", "70.0 GiB free on the disk of the data folder (/data)")


def docker_missing() -> Check:
    return check_docker(which=lambda _name: None, docker_host="unix:///nonexistent/docker.sock")


def docker_stopped() -> Check:
    return check_docker(
        which=lambda name: f"/usr/bin/{name}", docker_host="unix:///nonexistent/docker.sock"
    )


def keyring_unavailable() -> Check:
    from keyring.backends import fail

    return check_keyring(fail.Keyring())


class FakeCairn:
    """The facade methods the dialog uses, recording what it was asked to do."""

    def __init__(self, checks: list[Check]):
        self.checks = checks
        self.calls: list[tuple] = []
        self.events = EventBus()
        self.settings = SimpleNamespace(set=self.set_setting)

    def health_checks(self) -> list[Check]:
        self.calls.append(("health_checks",))
        return list(self.checks)

    def set_setting(self, key: str, value: str) -> str:
        self.calls.append(("set_setting", key, value))
        return value

    def reset_sandboxes(self) -> None:
        self.calls.append(("reset_sandboxes",))


@pytest.fixture
def make_dialog(qtbot, settings):
    contexts = []

    def make(cairn) -> WelcomeDialog:
        ctx = AppContext(cairn, settings=settings)
        contexts.append(ctx)
        dialog = WelcomeDialog(ctx)
        qtbot.addWidget(dialog)
        dialog.show()
        qtbot.waitUntil(lambda: dialog.checked, timeout=10_000)
        return dialog

    yield make
    for ctx in contexts:
        ctx.close(close_facade=False)


SCENARIOS = {
    "docker missing": (
        docker_missing,
        "docker",
        "Docker is not installed",
        "sudo apt install docker.io",
        True,
    ),
    "daemon stopped": (
        docker_stopped,
        "docker",
        "its daemon is not running",
        "sudo systemctl start docker",
        True,
    ),
    "keyring unavailable": (
        keyring_unavailable,
        "keyring",
        "No usable keyring",
        "sudo apt install gnome-keyring",
        False,
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_problem_shows_its_message_and_continue_works(qtbot, make_dialog, settings, scenario):
    make_check, check_id, words, command, host_offered = SCENARIOS[scenario]
    problem = make_check()
    checks = {c.id: c for c in (DOCKER_OK, KEYRING_OK, GIT_OK, DISK_OK)}
    checks[check_id] = problem
    assert should_welcome(settings)
    dialog = make_dialog(FakeCairn(list(checks.values())))

    assert dialog.windowTitle() == "Welcome to Cairn"
    assert [r.check.id for r in dialog.rows] == ["docker", "keyring", "git", "disk"]
    row = dialog.row(check_id)
    assert words in row.detail_label.text()
    assert row.title_label.text().endswith("Problem")
    assert command in row.fix_label.text() and row.fix_label.isVisible()
    assert row.copy_button.isVisible() and row.copy_button.toolTip() == command
    for other in dialog.rows:
        if other is not row:
            assert other.title_label.text().endswith("OK") and not other.copy_button.isVisible()
    assert dialog.host_box.isVisible() is host_offered
    if host_offered:
        assert "host backend" in dialog.status_label.text()

    assert dialog.continue_button.isEnabled()
    dialog.continue_button.click()
    assert not dialog.isVisible() and dialog.result() == QDialog.DialogCode.Accepted
    assert settings.value(WELCOMED_KEY, False, type=bool) is True
    assert not should_welcome(settings)


def test_copy_fix_puts_the_command_on_the_clipboard(qtbot, make_dialog):
    dialog = make_dialog(FakeCairn([docker_stopped(), KEYRING_OK, GIT_OK, DISK_OK]))
    dialog.row("docker").copy_button.click()
    assert QApplication.clipboard().text() == "sudo systemctl start docker"


def test_the_host_backend_is_not_offered_when_docker_works(qtbot, make_dialog):
    dialog = make_dialog(FakeCairn([DOCKER_OK, KEYRING_OK, GIT_OK, DISK_OK]))
    assert not dialog.host_box.isVisible()
    assert dialog.status_label.text() == "Everything Cairn needs is in place."


def test_choosing_the_host_backend_asks_first_then_sets_it(qtbot, make_dialog, monkeypatch):
    cairn = FakeCairn([docker_missing(), KEYRING_OK, GIT_OK, DISK_OK])
    dialog = make_dialog(cairn)
    assert dialog.host_box.isVisible()
    assert dialog.host_button.text() == "Use the host backend (unsafe: no isolation)"

    asked = []
    monkeypatch.setattr(welcome, "confirm_host_backend", lambda parent: asked.append(parent))
    dialog.host_button.click()  # declined: nothing changes
    assert asked == [dialog]
    qtbot.wait(50)
    assert ("set_setting", "defaults.backend", "host") not in cairn.calls

    monkeypatch.setattr(welcome, "confirm_host_backend", lambda parent: True)
    with qtbot.waitSignal(dialog.sig_backend_changed, timeout=5000) as blocker:
        dialog.host_button.click()
    assert blocker.args == ["host"]
    assert cairn.calls[-2:] == [("set_setting", "defaults.backend", "host"), ("reset_sandboxes",)]
    assert "no isolation" in dialog.host_result.text() and dialog.host_result.isVisible()
    assert not dialog.host_button.isEnabled()


def test_a_switch_to_the_host_backend_that_fails_says_why(qtbot, make_dialog, monkeypatch):
    class RefusingFacade(FakeCairn):
        def set_setting(self, key, value):
            raise ValueError(f"unknown setting {key}")

    dialog = make_dialog(RefusingFacade([docker_stopped(), KEYRING_OK, GIT_OK, DISK_OK]))
    monkeypatch.setattr(welcome, "confirm_host_backend", lambda parent: True)
    dialog.host_button.click()
    qtbot.waitUntil(lambda: dialog.host_result.isVisible(), timeout=5000)
    assert "Could not switch to the host backend" in dialog.host_result.text()
    assert "unknown setting defaults.backend" in dialog.host_result.text()
    assert dialog.host_button.isEnabled()  # the user may try again


def test_the_host_backend_through_the_real_facade(qtbot, context, cairn, monkeypatch):
    monkeypatch.delenv("CAIRN_BACKEND", raising=False)
    monkeypatch.setattr(
        cairn, "health_checks", lambda: [docker_missing(), KEYRING_OK, GIT_OK, DISK_OK]
    )
    monkeypatch.setattr(welcome, "confirm_host_backend", lambda parent: True)
    dialog = WelcomeDialog(context)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.checked, timeout=10_000)
    with qtbot.waitSignal(dialog.sig_backend_changed, timeout=5000):
        dialog.host_button.click()
    assert cairn.settings.get("defaults.backend") == "host"
    assert cairn.sandboxes.backend.name == "host"  # made again from the new setting


def test_check_again_replaces_the_rows(qtbot, make_dialog):
    cairn = FakeCairn([docker_stopped(), KEYRING_OK, GIT_OK, DISK_OK])
    dialog = make_dialog(cairn)
    assert dialog.host_box.isVisible()
    cairn.checks = [DOCKER_OK, KEYRING_OK, GIT_OK, DISK_OK]
    with qtbot.waitSignal(dialog.sig_checked, timeout=5000):
        dialog.check_again_button.click()
    assert len(dialog.rows) == 4 and dialog.row("docker").check is DOCKER_OK
    assert not dialog.host_box.isVisible()
    assert len([c for c in cairn.calls if c == ("health_checks",)]) == 2


def test_the_gui_thread_does_not_wait_for_the_checks(qtbot, settings):
    release = threading.Event()

    class SlowFacade(FakeCairn):
        def health_checks(self):
            release.wait(10)
            return super().health_checks()

    ctx = AppContext(SlowFacade([DOCKER_OK, KEYRING_OK, GIT_OK, DISK_OK]), settings=settings)
    try:
        started = time.monotonic()
        dialog = WelcomeDialog(ctx)
        qtbot.addWidget(dialog)
        dialog.show()
        assert time.monotonic() - started < 1
        assert dialog.status_label.text() == "Checking this computer…"
        assert not dialog.continue_button.isEnabled() and not dialog.check_again_button.isEnabled()
        release.set()
        qtbot.waitUntil(lambda: dialog.checked, timeout=5000)
        assert dialog.continue_button.isEnabled() and len(dialog.rows) == 4
    finally:
        release.set()
        ctx.close(close_facade=False)


def test_a_failed_check_run_still_lets_the_user_continue(qtbot, make_dialog, settings):
    class Broken(FakeCairn):
        def health_checks(self):
            raise RuntimeError("no checks today")

    dialog = make_dialog(Broken([]))
    assert "Could not check this computer" in dialog.status_label.text()
    assert "no checks today" in dialog.status_label.text()
    dialog.continue_button.click()
    assert settings.value(WELCOMED_KEY, False, type=bool) is True


def test_from_the_menu_after_the_first_run_it_is_the_system_check(qtbot, make_dialog, settings):
    settings.setValue(WELCOMED_KEY, True)
    dialog = make_dialog(FakeCairn([DOCKER_OK, KEYRING_OK, GIT_OK, DISK_OK]))
    assert dialog.windowTitle() == "System Check"


def test_with_the_real_facade(qtbot, context):
    dialog = WelcomeDialog(context)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.checked, timeout=15_000)
    assert [r.check.id for r in dialog.rows] == [
        "docker",
        "keyring",
        "git",
        "disk",
        "engine-claude-code",
        "engine-codex",
    ]
    assert all(r.detail_label.text() for r in dialog.rows)


# -- agent engines -------------------------------------------------------------------------------

CLAUDE = Path("/home/me/.npm-global/bin/claude")
CLAUDE_NATIVE = Path("/home/me/.npm-global/lib/node_modules/@anthropic-ai/claude-code/bin/claude")


def engine_check(engine: str, *issues: Problem, found: Found | None = None) -> Check:
    kind = kinds_of(engine)[0]
    status = EngineStatus(
        engine,
        found or Found(engine, CLAUDE, CLAUDE_NATIVE, "2.1.197", "npm global", None),
        None if issues else kind.kind,
        tuple(issues),
        None if issues else SignIn(kind, kind.secret, "keyring"),
        "https://api.example.com",
        "api.example.com:443",
        "allowlist",
        True,
        SIGN_IN_NOTES.get(engine),
    )
    return check_engine(engine, lambda _name: status)


CODEX_MISSING = Problem(
    "Codex was not found on PATH or where npm put it: install it with "
    "`npm install -g @openai/codex`, or set engines.codex.binary",
    None,
    "npm install -g @openai/codex",
    ACTION_CHOOSE_BINARY,
)
CODEX_SIGNED_OUT = Problem(
    "the codex engine is not signed in (no OPENAI_API_KEY in the keyring)",
    "sign in with an OpenAI API key: cairnctl engine login codex (the value on stdin)",
    "cairnctl engine login codex",
    ACTION_SIGN_IN,
)


class FakeSecrets:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, name: str, value: str) -> None:
        self.values[name] = value


def engine_dialog(make_dialog) -> tuple[WelcomeDialog, FakeCairn]:
    codex = engine_check(
        "codex",
        CODEX_MISSING,
        CODEX_SIGNED_OUT,
        found=Found("codex", None, None, None, "", CODEX_MISSING.what),
    )
    cairn = FakeCairn([DOCKER_OK, KEYRING_OK, GIT_OK, DISK_OK, engine_check("claude-code"), codex])
    cairn.credentials = SimpleNamespace(secrets=FakeSecrets())
    return make_dialog(cairn), cairn


def test_a_found_engine_shows_its_path_and_version(qtbot, make_dialog):
    dialog, _cairn = engine_dialog(make_dialog)
    row = dialog.row("engine-claude-code")
    assert row.title_label.text() == "Claude Code engine — OK"
    text = row.detail_label.text()
    assert f"Found {CLAUDE} (version 2.1.197, from npm global); runs {CLAUDE_NATIVE}" in text
    assert "Signed in with Claude subscription (long-lived token)" in text
    assert not row.sign_in_button.isVisible() and not row.choose_button.isVisible()


def test_a_missing_engine_shows_each_fix_and_the_buttons_that_help(qtbot, make_dialog):
    dialog, _cairn = engine_dialog(make_dialog)
    row = dialog.row("engine-codex")
    assert row.title_label.text() == "Codex engine — Warning"
    assert row.detail_label.text().startswith("Not found")
    fixes = row.fix_label.text()
    assert "Codex was not found on PATH" in fixes and "npm install -g @openai/codex" in fixes
    assert "To fix, sign in with an OpenAI API key: cairnctl engine login codex" in fixes
    assert row.sign_in_button.isVisible() and row.choose_button.isVisible()
    assert row.copy_button.isVisible()
    row.copy_button.click()
    assert QApplication.clipboard().text() == "npm install -g @openai/codex"
    assert row.note_label.isVisible() and row.note_label.text() == CHATGPT_SIGN_IN_NOTE
    assert "agent engine needs a step" in dialog.status_label.text()


def test_choose_binary_sets_the_engines_binary_and_checks_again(qtbot, make_dialog, monkeypatch):
    dialog, cairn = engine_dialog(make_dialog)
    monkeypatch.setattr(dialog, "pick_binary", lambda engine: "/opt/codex/bin/codex")
    with qtbot.waitSignal(dialog.sig_checked, timeout=5000):
        dialog.row("engine-codex").choose_button.click()
    assert ("set_setting", "engines.codex.binary", "/opt/codex/bin/codex") in cairn.calls
    assert len([c for c in cairn.calls if c == ("health_checks",)]) == 2
    monkeypatch.setattr(dialog, "pick_binary", lambda engine: "")  # cancelled: nothing happens
    dialog.row("engine-codex").choose_button.click()
    qtbot.wait(50)
    assert len([c for c in cairn.calls if c[0] == "set_setting"]) == 1


def test_sign_in_from_the_check_stores_the_value_and_checks_again(qtbot, make_dialog):
    dialog, cairn = engine_dialog(make_dialog)
    dialog.row("engine-codex").sign_in_button.click()
    sign_in = dialog.sign_in_dialog
    assert sign_in is not None and sign_in.isVisible() and sign_in.engine == "codex"
    assert sign_in.note_label.isVisible() and sign_in.note_label.text() == CHATGPT_SIGN_IN_NOTE
    assert "platform.openai.com" in sign_in.how_label.text()
    key = "sk-proj-" + "k" * 40
    sign_in.value_edit.setText(f" {key} ")
    with qtbot.waitSignal(dialog.sig_checked, timeout=5000):
        qtbot.keyClick(sign_in.value_edit, Qt.Key.Key_Return)
        assert sign_in.value_edit.text() == ""  # emptied as soon as it is queued
    assert cairn.credentials.secrets.values == {"OPENAI_API_KEY": key}
    assert not sign_in.isVisible()


# -- the app still opens -------------------------------------------------------------------------

LAUNCH = textwrap.dedent(
    """
    import sys
    from gui.qt import QApplication, QTimer
    app = QApplication([sys.argv[0]])
    def report():
        shown = [type(w).__name__ for w in app.topLevelWidgets() if w.isVisible()]
        if "MainWindow" in shown:
            print("shown:", *shown, flush=True)
        else:
            QTimer.singleShot(200, report)
    QTimer.singleShot(200, report)
    from gui.main import main
    sys.exit(main(["--data-dir", sys.argv[1]]))
    """
)


@pytest.mark.slow
def test_the_app_opens_without_docker_or_a_keyring(tmp_path):
    bin_dir = tmp_path / "bin"  # git only: no docker, no dockerd
    bin_dir.mkdir()
    git = shutil.which("git")
    assert git
    (bin_dir / "git").symlink_to(git)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DBUS_", "DOCKER_", "CAIRN_"))
    }
    env.update(
        QT_QPA_PLATFORM="offscreen",
        PATH=str(bin_dir),
        DOCKER_HOST="unix:///nonexistent.sock",
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        HOME=str(tmp_path / "home"),
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, str(tmp_path / "data")],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(90, proc.kill)  # a hung start fails the test instead of pytest
    watchdog.start()
    try:
        first = proc.stdout.readline()  # blocks until the window shows (or the process ends)
        assert first.startswith("shown:") and "MainWindow" in first, proc.stderr.read()
        time.sleep(1.5)  # let the start-up jobs (sandbox check, reconcile) come back
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert (tmp_path / "data" / "cairn.db").is_file()
