"""Fixtures of the GUI tests: Qt settings in a temporary file, a real facade on a temporary data
folder, the context widgets get, and a shown main window."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from gui.context import AppContext
from gui.main_window import MainWindow
from gui.qt import QSettings


@pytest.fixture(autouse=True)
def collect_on_the_gui_thread():
    """As the app does (gui.collector): no automatic collection during a GUI test, which could
    run on a job's thread and destroy Qt objects there; the garbage is collected here after."""
    was_enabled = gc.isenabled()
    gc.disable()
    yield
    gc.collect()
    if was_enabled:
        gc.enable()


@pytest.fixture
def settings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def cairn(data_dir: Path):
    from core.app import Cairn

    facade = Cairn(data_dir)
    yield facade
    facade.close()


@pytest.fixture
def context(qtbot, cairn, settings, data_dir):
    ctx = AppContext(cairn, settings=settings, data_dir=data_dir)
    yield ctx
    ctx.close(close_facade=False)  # the cairn fixture closes it


@pytest.fixture
def window(qtbot, context) -> MainWindow:
    win = MainWindow(context)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    qtbot.waitUntil(lambda: win.lineage._loaded, timeout=10_000)
    yield win
    win.close()
