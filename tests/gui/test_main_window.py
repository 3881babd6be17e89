"""The main window shell: it shows, explains its empty state, takes folder drops, keeps geometry."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gui.main_window import EMPTY_STATE_TEXT, MainWindow
from gui.qt import (
    QApplication,
    QDragEnterEvent,
    QDropEvent,
    QLabel,
    QMimeData,
    QPoint,
    QPointF,
    QSettings,
    Qt,
    QUrl,
)
from gui.resources import icon_path

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def settings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def window(qtbot, settings, data_dir) -> MainWindow:
    win = MainWindow(data_dir=data_dir, settings=settings)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    return win


def _mime_with(*urls: QUrl) -> QMimeData:
    mime = QMimeData()
    mime.setUrls(list(urls))
    return mime


def _drag_enter(win: MainWindow, mime: QMimeData) -> bool:
    args = (
        Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
    )
    try:
        event = QDragEnterEvent(QPointF(20, 20), *args)
    except TypeError:  # PySide6 before the QPointF overload
        event = QDragEnterEvent(QPoint(20, 20), *args)
    event.setAccepted(False)
    QApplication.sendEvent(win, event)
    return event.isAccepted()


def _drop(win: MainWindow, mime: QMimeData) -> bool:
    assert _drag_enter(win, mime), "the drag was refused before the drop"
    event = QDropEvent(
        QPointF(20, 20), Qt.DropAction.CopyAction, mime,
        Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
    )
    event.setAccepted(False)
    QApplication.sendEvent(win, event)
    return event.isAccepted()


def test_window_shows_with_title_icon_and_empty_state(window):
    assert window.isVisible()
    assert window.windowTitle() == "Cairn"
    assert icon_path().is_file()
    assert not window.windowIcon().isNull()
    texts = [label.text() for label in window.findChildren(QLabel)]
    assert EMPTY_STATE_TEXT in texts
    assert window.centralWidget().text() == "Drop a repository folder here to start a task"


def test_window_names_its_data_folder(window, data_dir):
    assert str(data_dir) in window.data_dir_label.text()


def test_dropping_a_folder_reports_it_and_emits_it(window, qtbot, tmp_path):
    repo = tmp_path / "my-repo"
    repo.mkdir()
    with qtbot.waitSignal(window.sig_folders_dropped, timeout=1000) as blocker:
        accepted = _drop(window, _mime_with(QUrl.fromLocalFile(str(repo))))
    assert accepted
    assert blocker.args == [[repo]]
    assert window.statusBar().currentMessage() == f"Folder dropped: {repo}"


def test_dropping_a_file_says_it_is_not_a_folder(window, qtbot, tmp_path):
    note = tmp_path / "notes.txt"
    note.write_text("hello")
    with qtbot.assertNotEmitted(window.sig_folders_dropped):
        accepted = _drop(window, _mime_with(QUrl.fromLocalFile(str(note))))
    assert not accepted
    message = window.statusBar().currentMessage()
    assert message.startswith("Not a folder: notes.txt"), message
    assert "Drop a repository folder" in message


def test_dropping_a_folder_and_a_file_keeps_the_folder_and_mentions_the_file(window, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    note = tmp_path / "notes.txt"
    note.write_text("hello")
    assert _drop(window, _mime_with(QUrl.fromLocalFile(str(repo)), QUrl.fromLocalFile(str(note))))
    message = window.statusBar().currentMessage()
    assert message.startswith(f"Folder dropped: {repo}"), message
    assert "1 item that is not a folder: notes.txt" in message


def test_drag_without_local_urls_is_refused(window):
    text_only = QMimeData()
    text_only.setText("/not/a/url")
    assert not _drag_enter(window, text_only)
    assert not _drag_enter(window, _mime_with(QUrl("https://example.invalid/repo.git")))


def test_geometry_is_saved_on_close_and_restored(qtbot, settings, data_dir):
    first = MainWindow(data_dir=data_dir, settings=settings)
    qtbot.addWidget(first)
    first.show()
    qtbot.waitExposed(first)
    first.resize(640, 480)
    qtbot.waitUntil(lambda: first.size().width() == 640)
    first.close()
    assert settings.value("main_window/geometry") is not None

    second = MainWindow(data_dir=data_dir, settings=settings)
    qtbot.addWidget(second)
    assert (second.width(), second.height()) == (640, 480)


LAUNCH = textwrap.dedent(
    """
    import sys
    from gui.qt import QApplication, QTimer
    app = QApplication([sys.argv[0]])
    def close_all():
        for widget in app.topLevelWidgets():
            if widget.isVisible():
                print("window:", widget.windowTitle(), widget.isWindow(), flush=True)
                widget.close()
    QTimer.singleShot(300, close_all)
    from gui.main import main
    rc = main(["--data-dir", sys.argv[1]])
    print("app:", app.applicationName(), app.desktopFileName(), app.organizationDomain())
    sys.exit(rc)
    """
)


def test_main_starts_and_quits_cleanly_saving_settings(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path / "config"))
    result = subprocess.run(
        [sys.executable, "-c", LAUNCH, str(tmp_path / "data")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "window: Cairn True" in result.stdout
    assert "app: Cairn io.cairn.Cairn cairn.io" in result.stdout
    saved = list((tmp_path / "config").rglob("*.conf"))
    assert saved, "closing the window did not save its geometry"
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
    env = dict(os.environ, QT_QPA_PLATFORM="xcb", DISPLAY=x_display,
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    result = subprocess.run(
        [sys.executable, "-c", SCREENSHOT, str(tmp_path / "data"), str(shot)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=90,
    )
    assert result.returncode == 0, result.stderr
    assert "platform: xcb windows: ['Cairn']" in result.stdout
    assert shot.is_file() and shot.stat().st_size > 1000
