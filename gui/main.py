"""The `cairn` entry point: parse the command line, set up the QApplication, show the window.

Owns process start-up and shutdown; what the window shows belongs to gui.main_window.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from core import __version__
from core.datadir import ENV_VAR as DATA_DIR_ENV_VAR
from core.errors import CairnError
from gui.collector import GuiThreadCollector
from gui.context import AppContext
from gui.jobs import describe_error
from gui.main_window import MainWindow, app_icon
from gui.qt import QApplication, QGuiApplication, QMessageBox, QTimer

APP_NAME = "Cairn"
ORGANIZATION_NAME = "cairn"
ORGANIZATION_DOMAIN = "cairn.io"
DESKTOP_FILE_NAME = "io.cairn.Cairn"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairn",
        description="Run coding agents on your repositories in isolated, resumable workspaces.",
        epilog="Other arguments (for example -platform offscreen) are passed on to Qt.",
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


def main(argv: Sequence[str] | None = None) -> int:
    args, qt_args = build_parser().parse_known_args(
        list(sys.argv[1:] if argv is None else argv)
    )
    if args.data_dir is not None and args.data_dir.exists() and not args.data_dir.is_dir():
        build_parser().error(f"--data-dir {args.data_dir} exists and is not a folder")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    QApplication.setApplicationName(APP_NAME)
    QApplication.setApplicationDisplayName(APP_NAME)
    QApplication.setApplicationVersion(__version__)
    QApplication.setOrganizationName(ORGANIZATION_NAME)
    QApplication.setOrganizationDomain(ORGANIZATION_DOMAIN)
    QGuiApplication.setDesktopFileName(DESKTOP_FILE_NAME)
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "cairn", *qt_args])
    app.setWindowIcon(app_icon())

    # Opening the data folder touches the disk: done here, before the event loop runs.
    try:
        context = AppContext.open(args.data_dir)
    except (CairnError, OSError) as exc:
        QMessageBox.critical(None, APP_NAME, f"Cairn cannot open its data folder: "
                                             f"{describe_error(exc)}")
        return 2

    collector = GuiThreadCollector(app).start()  # before any job thread exists
    window = MainWindow(context)
    _install_signal_handlers(window)
    window.show()
    if args.paths:
        QTimer.singleShot(0, lambda: window.offer_paths(args.paths))
    try:
        return app.exec()
    finally:
        context.close()
        collector.stop()


if __name__ == "__main__":
    sys.exit(main())
