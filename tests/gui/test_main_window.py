"""The main window over a real facade on a temporary data folder: it shows the lineage, the task
and the tabs; takes folder drops into the New Task dialog and makes the tasks; refuses files and
unreadable folders with a clear message; keeps its layout, selection and geometry; says when
sandboxes cannot run; and shows every background failure."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from core.approvals import Approval
from core.errors import CairnError
from gui.context import AppContext
from gui.dialogs import KeyringDialog, NewTaskDialog, NewTaskRequest
from gui.main_window import EMPTY_STATE_TEXT, MainWindow
from gui.qt import QDialogButtonBox, QLabel, QMimeData, Qt, QUrl
from gui.resources import ICON_NAMES, icon_path
from tests.gui.support import StallMeter, mime_with, send_drag_enter, send_drop

REPO_ROOT = Path(__file__).resolve().parents[2]


def accept_dialog(qtbot, dialog) -> None:
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)


def wait_for_dialog(qtbot, window) -> NewTaskDialog:
    qtbot.waitUntil(
        lambda: window.new_task_dialog is not None and window.new_task_dialog.isVisible(),
        timeout=10_000,
    )
    return window.new_task_dialog


def tree_titles(window) -> list[str]:
    model = window.lineage.model
    model.fetch_all()
    return sorted(model.task_node(t).task.title for t in model.task_ids())


# -- the frame ---------------------------------------------------------------------------------


def test_window_shows_the_tree_the_task_area_and_the_tabs(window, data_dir):
    assert window.windowTitle() == "Cairn"
    assert not window.windowIcon().isNull()
    texts = [label.text() for label in window.findChildren(QLabel) if label.isVisible()]
    assert EMPTY_STATE_TEXT in texts
    assert window.lineage.empty_label.isVisible()  # no tasks yet, and it says how to make one
    assert [window.tabs.tabText(i) for i in range(window.tabs.count())] == [
        "Revisions",
        "Sessions && Snapshots",
        "Approvals",
    ]
    assert str(data_dir) in window.data_dir_label.text()


def test_the_icons_exist_and_draw(qtbot):
    from gui.icons import icon

    for name in ICON_NAMES:
        assert icon_path(name).is_file(), name
        assert not icon(name).isNull(), name


# -- new tasks from folders --------------------------------------------------------------------


def test_dropping_a_folder_opens_the_dialog_and_makes_the_task(qtbot, window, repo, cairn):
    with StallMeter() as meter:
        assert send_drop(window, mime_with(repo))
        dialog = wait_for_dialog(qtbot, window)
        assert dialog.title_edits[0].text() == "login-service"
        dialog.title_edits[0].setText("Fix the login test")
        dialog.instructions_edit.setPlainText("make test")
        accept_dialog(qtbot, dialog)
        qtbot.waitUntil(lambda: len(window.lineage.model) == 1, timeout=20_000)
        qtbot.waitUntil(
            lambda: window.task_view.title_label.text() == "Fix the login test", timeout=10_000
        )
    print(f"longest event-loop stall while creating a task: {meter.longest_ms:.1f} ms")
    assert meter.longest_ms < 250, "the GUI thread waited on something"
    [task] = cairn.tasks.all()
    assert task.title == "Fix the login test" and task.instructions == "make test"
    assert window.lineage.selected_task() == task.id
    assert "Fix the login test" in window.statusBar().currentMessage()
    assert window.lineage.tree.isVisible()
    assert window.task_view.instructions.text() == "make test"


def test_several_folders_make_several_tasks_from_one_dialog(qtbot, window, tmp_path, cairn):
    folders = []
    for name in ("api", "web"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "main.txt").write_text(name)
        folders.append(folder)
    assert send_drop(window, mime_with(*folders))
    dialog = wait_for_dialog(qtbot, window)
    assert [e.text() for e in dialog.title_edits] == ["api", "web"]
    dialog.instructions_edit.setPlainText("make test")
    accept_dialog(qtbot, dialog)
    qtbot.waitUntil(lambda: len(window.lineage.model) == 2, timeout=20_000)
    assert tree_titles(window) == ["api", "web"]
    # One folder each in the tree.
    assert window.lineage.model.rowCount() == 2


def test_dropping_a_file_says_it_is_not_a_folder(qtbot, window, tmp_path):
    note = tmp_path / "notes.txt"
    note.write_text("hello")
    assert send_drop(window, mime_with(note))
    qtbot.waitUntil(lambda: window.statusBar().currentMessage().startswith("Cannot start"))
    message = window.statusBar().currentMessage()
    assert "notes.txt: it is a file, not a folder" in message
    assert "Drop a repository folder" in message
    assert window.new_task_dialog is None


def test_a_folder_and_a_file_together_keep_the_folder(qtbot, window, repo, tmp_path):
    note = tmp_path / "notes.txt"
    note.write_text("hello")
    assert send_drop(window, mime_with(repo, note))
    dialog = wait_for_dialog(qtbot, window)
    assert dialog.folders == [repo]
    assert "notes.txt" in window.statusBar().currentMessage()
    dialog.reject()


def test_drag_without_local_files_is_refused(window):
    text_only = QMimeData()
    text_only.setText("/not/a/url")
    assert not send_drag_enter(window, text_only)
    assert not send_drag_enter(window, mime_with(QUrl("https://example.invalid/repo.git")))


UNREADABLE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gui.qt import QApplication, QSettings
    app = QApplication([sys.argv[0]])
    from core.app import Cairn
    from gui.context import AppContext
    from gui.main_window import MainWindow
    from tests.gui.support import mime_with, send_drop, wait_for
    base = Path(sys.argv[1])
    ctx = AppContext(Cairn(base / "data"), settings=QSettings(str(base / "s.ini"),
                     QSettings.Format.IniFormat))
    win = MainWindow(ctx)
    win.show()
    accepted = send_drop(win, mime_with(base / "locked"))
    wait_for(lambda: win.statusBar().currentMessage().startswith("Cannot start"))
    print("accepted:", accepted)
    print("dialog:", win.new_task_dialog)
    print("message:", win.statusBar().currentMessage())
    win.close()
    ctx.close()
    """
)


def test_dropping_an_unreadable_folder_says_so(qtbot, window, tmp_path):
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0)
        try:
            assert send_drop(window, mime_with(locked))
            qtbot.waitUntil(lambda: window.statusBar().currentMessage().startswith("Cannot"))
            message = window.statusBar().currentMessage()
        finally:
            locked.chmod(0o700)
    else:
        # root reads every folder: drop it as an unprivileged user in a window of its own.
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv to drop privileges")
        base = Path(tempfile.mkdtemp(prefix="cairn-unreadable-"))
        try:
            base.chmod(0o777)
            (base / "locked").mkdir(mode=0o700)
            env = dict(
                os.environ,
                QT_QPA_PLATFORM="offscreen",
                HOME=str(base),
                XDG_RUNTIME_DIR=str(base),
                PYTHONPATH=str(REPO_ROOT),
            )
            result = subprocess.run(
                [
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    sys.executable,
                    "-c",
                    UNREADABLE,
                    str(base),
                ],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            shutil.rmtree(base, ignore_errors=True)
        assert result.returncode == 0, result.stderr
        assert "accepted: True" in result.stdout
        assert "dialog: None" in result.stdout
        message = result.stdout.split("message:", 1)[1].strip()
    assert "locked: the folder cannot be read (permission denied)" in message


def test_file_new_task_uses_a_folder_chooser(qtbot, window, repo, monkeypatch):
    from gui import main_window as module

    monkeypatch.setattr(
        module.QFileDialog, "getExistingDirectory", staticmethod(lambda *args, **kwargs: str(repo))
    )
    window.new_task_action.trigger()
    dialog = wait_for_dialog(qtbot, window)
    assert dialog.folders == [repo]
    dialog.reject()


def test_a_failed_import_is_shown_to_the_user(qtbot, window, tmp_path, data_dir):
    inside = data_dir / "inside"
    inside.mkdir(parents=True, exist_ok=True)
    window.create_tasks([NewTaskRequest(inside, "inside the data folder", "shell", "")])
    qtbot.waitUntil(
        lambda: window.statusBar().currentMessage().startswith("Could not create"), timeout=10_000
    )
    assert str(inside) in window.statusBar().currentMessage()


# -- state kept across sessions ----------------------------------------------------------------


def test_layout_selection_and_geometry_are_restored(qtbot, context, cairn, repo, settings):
    made = cairn.tasks.new(repo, title="Remember me")
    first = MainWindow(context)
    qtbot.addWidget(first)
    first.show()
    qtbot.waitExposed(first)
    qtbot.waitUntil(lambda: len(first.lineage.model) == 1, timeout=10_000)
    first.resize(700, 500)  # the offscreen screen is 800x600: a bigger window is clamped
    qtbot.waitUntil(lambda: first.size().width() == 700)
    first.main_splitter.setSizes([250, 440])
    first.tabs.setCurrentIndex(2)
    assert first.lineage.select_task(made.task.id)
    sizes = first.main_splitter.sizes()
    first.close()

    second = MainWindow(context)
    qtbot.addWidget(second)
    second.show()
    qtbot.waitExposed(second)
    assert (second.width(), second.height()) == (700, 500)
    assert second.main_splitter.sizes() == sizes
    assert second.tabs.currentIndex() == 2
    qtbot.waitUntil(lambda: second.lineage.selected_task() == made.task.id, timeout=10_000)
    qtbot.waitUntil(lambda: second.task_view.title_label.text() == "Remember me")
    second.close()


# -- failures reach the user -------------------------------------------------------------------


def test_an_error_in_a_job_reaches_the_status_bar(qtbot, window):
    def work():
        raise CairnError("the vault of /src is missing", hint="import the folder again")

    window.context.jobs.job(work, what="load the revisions", parent=window).run()
    qtbot.waitUntil(lambda: "the vault of /src is missing" in window.statusBar().currentMessage())
    assert window.statusBar().currentMessage() == (
        "Could not load the revisions: the vault of /src is missing (import the folder again)"
    )


def test_a_locked_keyring_asks_the_user_to_unlock_it(qtbot, window):
    from core.credentials import KeyringLocked

    def work():
        raise KeyringLocked("Prompt dismissed")

    window.context.jobs.job(work, what="read the secrets", parent=window).run()
    qtbot.waitUntil(lambda: window.keyring_dialog is not None and window.keyring_dialog.isVisible())
    assert isinstance(window.keyring_dialog, KeyringDialog)
    assert "Prompt dismissed" in window.keyring_dialog.message_label.text()
    window.keyring_dialog.reject()


def test_docker_not_running_shows_a_banner_and_the_app_stays_usable(
    qtbot, monkeypatch, tmp_path, settings, repo
):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    monkeypatch.setenv("CAIRN_BACKEND", "docker")
    from core.app import Cairn

    facade = Cairn(tmp_path / "data")
    facade.tasks.new(repo, title="Browse me", instructions="make test")
    context = AppContext(facade, settings=settings, data_dir=tmp_path / "data")
    win = MainWindow(context)
    qtbot.addWidget(win)
    win.show()
    try:
        qtbot.waitUntil(lambda: win.banner.isVisible(), timeout=20_000)
        text = win.banner.text_label.text()
        assert "Sandboxes cannot run" in text and "Docker" in text
        # Still browsable: the task is there and can be shown; starting says why not.
        qtbot.waitUntil(lambda: len(win.lineage.model) == 1, timeout=10_000)
        assert win.lineage.select_task(facade.tasks.all()[0].id)
        qtbot.waitUntil(lambda: win.task_view.title_label.text() == "Browse me")
        start = win.task_view.buttons["start"]
        qtbot.waitUntil(lambda: "no sandbox can be started" in start.toolTip())
        assert not start.isEnabled()
    finally:
        win.close()
        context.close()


# -- approvals in the window -------------------------------------------------------------------


def test_approvals_badge_and_notification(qtbot, data_dir, settings):
    from core.app import Cairn

    def waiting(approval_id: str, command: str, **fields) -> Approval:
        values = {
            "id": approval_id,
            "run_id": "r_1",
            "task_id": "t_1",
            "command": command,
            "rule": None,
            "reason": None,
            "state": "pending",
            "decided_by": None,
            "decided_at": None,
            "policy_version": None,
            "created_at": time.time(),
            "timeout_at": None,
        }
        values.update(fields)
        return Approval(**values)

    class QueueJudge:
        """The judge's part the window uses, over a queue the test fills."""

        queue = [waiting("ap_1", "git push --force", rule="force-push", reason="rewrites history")]

        def list(self, pending_only=True):
            return list(self.queue)

        def decided(self, limit=200):
            return []

        def pending(self):
            return list(self.queue)

        def approve(self, approval_id, remember=False):
            self.queue = [a for a in self.queue if a.id != approval_id]

        def deny(self, approval_id, reason=None):
            self.queue = [a for a in self.queue if a.id != approval_id]

    facade = Cairn(data_dir)
    facade.approvals = QueueJudge()
    context = AppContext(facade, settings=settings, data_dir=data_dir)
    win = MainWindow(context)
    qtbot.addWidget(win)
    win.show()
    try:
        qtbot.waitUntil(lambda: win.tabs.tabText(win.approvals_tab) == "Approvals (1)")
        assert not win.tabs.tabIcon(win.approvals_tab).isNull()
        notified = []
        win.notify = lambda title, text: notified.append((title, text)) or "alert"
        facade.approvals.queue = facade.approvals.queue + [waiting("ap_2", "rm -rf /x")]
        facade.events.publish("approval.requested", "ap_2", task_id="t_1")
        qtbot.waitUntil(lambda: win.tabs.tabText(win.approvals_tab) == "Approvals (2)")
        if not win.isActiveWindow():
            assert notified == [("A run asks for approval", "rm -rf /x")]
        assert MainWindow.notify(win, "t", "x") in ("tray", "alert")
    finally:
        win.close()
        context.close()


# -- the process -------------------------------------------------------------------------------

LAUNCH = textwrap.dedent(
    """
    import sys
    from gui.qt import QApplication, QTimer
    app = QApplication([sys.argv[0]])
    def shown(prefix):
        for widget in app.topLevelWidgets():
            if widget.isVisible():
                print(prefix, widget.windowTitle(), type(widget).__name__, flush=True)
    def close_check():
        shown("window:")
        for widget in app.topLevelWidgets():
            if type(widget).__name__ == "WelcomeDialog" and widget.isVisible():
                widget.done(0)
        QTimer.singleShot(1000, close_all)
    def close_all():
        shown("then:")
        for widget in app.topLevelWidgets():
            if type(widget).__name__ == "MainWindow":
                widget.close()
    QTimer.singleShot(2000, close_check)
    from gui.main import main
    rc = main(["--data-dir", sys.argv[1], *sys.argv[2:]])
    print("app:", app.applicationName(), app.desktopFileName(), app.organizationDomain())
    sys.exit(rc)
    """
)


def test_main_starts_opens_the_dialog_for_a_path_and_quits_saving_settings(tmp_path, repo):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path / "config"))
    result = subprocess.run(
        [sys.executable, "-c", LAUNCH, str(tmp_path / "data"), str(repo)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "window: Cairn MainWindow" in result.stdout
    # A first start: the first-run check first, and New Task for the path once it is closed.
    assert "window: Welcome to Cairn WelcomeDialog" in result.stdout, result.stdout
    assert "window: New Task NewTaskDialog" not in result.stdout
    assert "then: New Task NewTaskDialog" in result.stdout
    assert "app: Cairn io.cairn.Cairn cairn.io" in result.stdout
    saved = list((tmp_path / "config").rglob("*.conf"))
    assert saved, "closing the window did not save its state"
    assert "geometry" in saved[0].read_text()


SCREENSHOT = textwrap.dedent(
    """
    import subprocess, sys
    from gui.qt import QApplication, QTimer
    app = QApplication([sys.argv[0]])
    def shoot_and_close():
        windows = [w for w in app.topLevelWidgets() if w.isVisible()]
        subprocess.run(["import", "-window", "root", sys.argv[2]], check=True, timeout=30)
        print("platform:", app.platformName(), "windows:", [w.windowTitle() for w in windows])
        for w in windows:
            w.close()
    QTimer.singleShot(1500, shoot_and_close)
    from gui.main import main
    sys.exit(main(["--data-dir", sys.argv[1]]))
    """
)


@pytest.mark.skipif(not shutil.which("import"), reason="imagemagick's import is not installed")
def test_cairn_shows_a_real_window_under_x(tmp_path, artifacts_dir, x_display):
    shot = artifacts_dir / "main-window.png"
    env = dict(
        os.environ,
        QT_QPA_PLATFORM="xcb",
        DISPLAY=x_display,
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    result = subprocess.run(
        [sys.executable, "-c", SCREENSHOT, str(tmp_path / "data"), str(shot)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    # A first start: the system check comes up over the main window.
    assert "platform: xcb windows:" in result.stdout
    windows = result.stdout.split("windows:", 1)[1].strip()
    assert sorted(ast.literal_eval(windows)) == ["Cairn", "Welcome to Cairn"]
    assert shot.is_file() and shot.stat().st_size > 1000


def test_settings_open_with_a_credentials_page_for_the_selected_task(qtbot, window, cairn, repo):
    made = cairn.tasks.new(repo)
    window.lineage.reload()
    qtbot.waitUntil(lambda: window.lineage.select_task(made.task.id), timeout=10_000)
    window.settings_action.trigger()
    dialog = window.settings_dialog
    qtbot.waitUntil(dialog.isVisible, timeout=5_000)
    titles = [dialog.pages.tabText(i) for i in range(dialog.pages.count())]
    assert titles[-1] == "Credentials" and "General" in titles
    qtbot.waitUntil(
        lambda: dialog.credentials_page.task_combo.currentData() == made.task.id, timeout=10_000
    )
    window.settings_action.trigger()  # a second time brings the same dialog forward
    assert window.settings_dialog is dialog
    dialog.reject()


def test_the_default_engine_setting_preselects_the_new_task_engine(
    qtbot, context, cairn, settings, repo
):
    cairn.settings.set("defaults.engine", "codex")
    win = MainWindow(context)
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: win._default_engine == "codex", timeout=10_000)
    dialog = win.open_new_task_dialog([repo])
    assert dialog.engine_combo.currentText() == "codex"
    dialog.reject()
    win.close()


def test_credentials_housekeeping_and_system_check_open_from_the_menus(qtbot, window):
    window.credentials_action.trigger()
    credentials = window.credentials_dialog
    qtbot.waitUntil(credentials.isVisible, timeout=5_000)
    credentials.close()
    qtbot.waitUntil(lambda: window.credentials_dialog is None, timeout=5_000)

    window.housekeeping_action.trigger()
    qtbot.waitUntil(window.housekeeping_dialog.isVisible, timeout=5_000)
    window.housekeeping_dialog.reject()

    window.system_check_action.trigger()
    check = window.system_check
    qtbot.waitUntil(lambda: check.isVisible() and check.checked, timeout=15_000)
    assert {row for row in ("docker", "keyring", "git", "disk") if check.row(row) is not None} == {
        "docker",
        "keyring",
        "git",
        "disk",
    }
    check.reject()
    assert window.menuBar().actions()[-1].text() == "&Help"


def test_the_data_folder_chosen_in_settings_is_used_unless_one_is_given(
    tmp_path, settings, monkeypatch
):
    from gui.main import chosen_data_dir
    from gui.settings import DATA_DIR_KEY as DATA_DIR_SETTING

    monkeypatch.delenv("CAIRN_DATA_DIR", raising=False)
    assert chosen_data_dir(None, settings) == (None, False)
    settings.setValue(DATA_DIR_SETTING, str(tmp_path / "chosen"))
    assert chosen_data_dir(None, settings) == (tmp_path / "chosen", True)
    assert chosen_data_dir(tmp_path / "given", settings) == (tmp_path / "given", False)
    monkeypatch.setenv("CAIRN_DATA_DIR", str(tmp_path / "env"))
    assert chosen_data_dir(None, settings) == (None, False)  # the environment wins (datadir)


def test_a_task_is_archived_and_brought_back_from_the_tree(qtbot, window, cairn, repo):
    made = cairn.tasks.new(repo)
    task_id = made.task.id
    window.lineage.reload()
    qtbot.waitUntil(lambda: window.lineage.model.task_node(task_id) is not None, timeout=10_000)
    menu = window.lineage.context_menu_for(task_id)
    archive = next(a for a in menu.actions() if a.text() == "Archive Task")
    archive.trigger()
    node = window.lineage.model.task_node(task_id)
    qtbot.waitUntil(lambda: node.task.workspace_state == "archived", timeout=10_000)
    assert cairn.tasks.workspace_of(cairn.tasks.get(task_id)).state == "archived"

    menu = window.lineage.context_menu_for(task_id)
    assert [a.text() for a in menu.actions() if a.text()] == [
        "Start",
        "Continue…",
        "Fork…",
        "Stop",
        "Resume",
        "Resume on Host…",
        "Promote to branch",
        "Export patch…",
        "Rename…",
        "Edit Instructions…",
        "Unarchive Task",
        "Delete Task…",
        "Copy Task ID",
    ]
    next(a for a in menu.actions() if a.text() == "Unarchive Task").trigger()
    qtbot.waitUntil(lambda: node.task.workspace_state != "archived", timeout=10_000)
    assert "unarchived" in window.statusBar().currentMessage()


def test_runs_whose_liveness_reconcile_could_not_tell_are_followed_not_given_up(
    window, monkeypatch
):
    from core.runs.reconcile import ReconcileReport

    followed: list[str] = []
    monkeypatch.setattr(window.context.followers, "follow", followed.append)
    report = ReconcileReport(
        still_running=["r_alive"],
        unknown=["r_unknown"],
        problems=["run r_unknown: its state is unknown, left as it is: the sandbox is paused"],
    )
    window._reconciled(report)
    assert followed == ["r_alive", "r_unknown"]
    assert "unknown" in window.statusBar().currentMessage()


def test_settings_open_with_ctrl_comma_on_every_desktop(window):
    from gui.qt import QKeySequence

    assert QKeySequence("Ctrl+,") in window.settings_action.shortcuts()


def test_closing_the_window_closes_its_dialogs_so_the_app_can_quit(qtbot, window):
    check = window.show_system_check()
    qtbot.waitUntil(check.isVisible)
    window.close()
    assert not check.isVisible()


def test_a_palette_switched_live_reaches_the_widgets_under_the_style_sheet(qtbot, window):
    from gui.qt import QApplication, QColor, QPalette

    app = QApplication.instance()
    before = app.palette()
    try:
        app.setPalette(QPalette(QColor("#f0f0f0"), QColor("#2b2b2b")))
        role = QPalette.ColorRole.Window
        qtbot.waitUntil(lambda: window.task_view.palette().color(role).name() == "#2b2b2b")
    finally:
        app.setPalette(before)
    back = before.color(QPalette.ColorRole.Window)
    qtbot.waitUntil(lambda: window.task_view.palette().color(QPalette.ColorRole.Window) == back)


def test_a_folder_given_at_the_first_start_waits_for_the_first_run_check(qtbot, window, tmp_path):
    from gui.dialogs.data import SortedPaths

    opened: list[list] = []
    window.sig_folders_dropped.disconnect()
    window.sig_folders_dropped.connect(opened.append)
    check = window.show_system_check()
    qtbot.waitUntil(check.isVisible)
    window._paths_sorted(SortedPaths(folders=[tmp_path]))
    qtbot.wait(50)
    assert opened == []  # not stacked over the check
    check.done(0)
    qtbot.waitUntil(lambda: opened == [[tmp_path]])
    again = window.show_system_check()  # a later System Check opens no New Task again
    qtbot.waitUntil(again.isVisible)
    again.done(0)
    qtbot.wait(50)
    assert opened == [[tmp_path]]


def test_a_folder_dropped_with_no_check_open_opens_new_task_at_once(window, tmp_path):
    from gui.dialogs.data import SortedPaths

    opened: list[list] = []
    window.sig_folders_dropped.disconnect()
    window.sig_folders_dropped.connect(opened.append)
    window._paths_sorted(SortedPaths(folders=[tmp_path]))
    assert opened == [[tmp_path]]
