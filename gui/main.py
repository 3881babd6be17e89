"""The `cairn` entry point: parse the command line, set up the QApplication, show the window.

Owns process start-up and shutdown; what the window shows belongs to gui.main_window.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from core import __version__
from core.datadir import ENV_VAR as DATA_DIR_ENV_VAR
from core.errors import CairnError
from gui.collector import GuiThreadCollector
from gui.context import AppContext
from gui.errors import describe_error
from gui.icons import follow_colour_scheme
from gui.jobs import share_the_interpreter_with_the_gui
from gui.logs import install_file_log
from gui.main_window import MainWindow, app_icon
from gui.qt import QApplication, QGuiApplication, QMessageBox, QSettings, QTimer
from gui.settings import next_data_dir
from gui.welcome import should_welcome

APP_NAME = "Cairn"
ORGANIZATION_NAME = "cairn"
ORGANIZATION_DOMAIN = "cairn.io"
DESKTOP_FILE_NAME = "io.cairn.Cairn"


# Qt's own command-line options (QGuiApplication and QApplication), with and without a value.
QT_OPTIONS_WITH_VALUE = frozenset(
    {
        "platform", "platformpluginpath", "platformtheme", "plugin", "qmljsdebugger", "style",
        "stylesheet", "session", "display", "geometry", "title", "name", "qwindowgeometry",
        "qwindowicon", "qwindowtitle", "dialogs", "fontengine", "graphicssystem",
    }
)  # fmt: skip
QT_FLAGS = frozenset({"reverse", "widgetcount", "nograb", "dograb", "sync", "testability"})


def split_qt_arguments(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(Cairn's arguments, Qt's arguments): Qt's options, written `-platform xcb`,
    `-platform=xcb` or with two dashes, go to Qt with their values (in the form Qt reads), so a
    value is never taken for a folder; everything after `--` is Cairn's."""
    ours: list[str] = []
    qt: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        arg = items[i]
        if arg == "--":
            ours.extend(items[i:])
            break
        name, has_value, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name in QT_OPTIONS_WITH_VALUE:
            if has_value:  # Qt itself reads only the spaced form
                qt += ["-" + name, value]
            elif i + 1 < len(items):
                qt += ["-" + name, items[i + 1]]
                i += 1
            else:
                qt.append("-" + name)  # Qt says what is missing
        elif arg.startswith("-") and not has_value and name in QT_FLAGS:
            qt.append("-" + name)
        else:
            ours.append(arg)
        i += 1
    return ours, qt


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairn",
        description="Run coding agents on your repositories in isolated, resumable workspaces.",
        epilog="Qt's own options (for example -platform offscreen, -style Fusion) are passed "
        "on to Qt.",
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="folders to start tasks from (opens the New Task dialog for them)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"where Cairn keeps its data (default: ${DATA_DIR_ENV_VAR}, else the user data dir)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _install_signal_handlers(window: MainWindow) -> QTimer:
    """Close the window (saving its state) on Ctrl+C or SIGTERM instead of dying mid-write."""

    def close_window(_signum: int, _frame: object) -> None:
        window.close()

    signal.signal(signal.SIGINT, close_window)
    signal.signal(signal.SIGTERM, close_window)
    # Python runs signal handlers only when it gets control back from Qt's C++ event loop.
    timer = QTimer(window)
    timer.start(250)
    timer.timeout.connect(lambda: None)
    return timer


def chosen_data_dir(command_line: Path | None, settings: QSettings) -> tuple[Path | None, bool]:
    """The data folder to open and whether it is the one chosen in Settings: --data-dir, else
    $CAIRN_DATA_DIR, else the Settings choice, else (None) the default."""
    if command_line is not None or os.environ.get(DATA_DIR_ENV_VAR):
        return command_line, False
    chosen = next_data_dir(settings)
    return (Path(chosen), True) if chosen else (None, False)


def _open_context(command_line: Path | None) -> AppContext | None:
    settings = QSettings()
    data_dir, from_settings = chosen_data_dir(command_line, settings)
    try:
        return AppContext.open(data_dir, settings=settings)
    except (CairnError, OSError) as exc:
        problem = describe_error(exc)
    if not from_settings:
        QMessageBox.critical(None, APP_NAME, f"Cairn cannot open its data folder: {problem}")
        return None
    QMessageBox.warning(
        None,
        APP_NAME,
        f"Cairn cannot open the data folder chosen in Settings "
        f"({data_dir}): {problem}\n\nThe default data folder "
        "is used this time; choose another in Settings.",
    )
    try:
        return AppContext.open(None, settings=settings)
    except (CairnError, OSError) as exc:
        QMessageBox.critical(
            None, APP_NAME, f"Cairn cannot open its data folder: {describe_error(exc)}"
        )
        return None


def main(argv: Sequence[str] | None = None) -> int:
    ours, qt_args = split_qt_arguments(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(ours)
    if args.data_dir is not None and args.data_dir.exists() and not args.data_dir.is_dir():
        build_parser().error(f"--data-dir {args.data_dir} exists and is not a folder")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    share_the_interpreter_with_the_gui()

    QApplication.setApplicationName(APP_NAME)
    QApplication.setApplicationDisplayName(APP_NAME)
    QApplication.setApplicationVersion(__version__)
    QApplication.setOrganizationName(ORGANIZATION_NAME)
    QApplication.setOrganizationDomain(ORGANIZATION_DOMAIN)
    QGuiApplication.setDesktopFileName(DESKTOP_FILE_NAME)
    existing = QApplication.instance()
    app = (
        existing
        if isinstance(existing, QApplication)
        else QApplication([sys.argv[0] if sys.argv else "cairn", *qt_args])
    )
    app.setWindowIcon(app_icon())
    follow_colour_scheme(app)  # light or dark as the desktop switches, icons included

    # Opening the data folder touches the disk: done here, before the event loop runs.
    context = _open_context(args.data_dir)
    if context is not None and context.data_dir is not None:
        install_file_log(context.data_dir)
    if context is None:
        return 2

    collector = GuiThreadCollector(app).start()  # before any job thread exists
    window = MainWindow(context)
    _install_signal_handlers(window)
    window.show()
    if should_welcome(context.settings):  # the first start: what works on this machine
        QTimer.singleShot(0, window.show_system_check)
    if args.paths:
        QTimer.singleShot(0, lambda: window.offer_paths(args.paths))
    try:
        return app.exec()
    finally:
        context.close()
        collector.stop()


if __name__ == "__main__":
    sys.exit(main())
