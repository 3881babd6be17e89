"""The main window: for now an empty state that accepts a dropped repository folder.

Owns window chrome (title, icon, menu, status bar, saved geometry) and drop handling; starting a
task from the dropped folder belongs to the facade and arrives with the task views.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gui.qt import (
    QAction,
    QByteArray,
    QCloseEvent,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QIcon,
    QKeySequence,
    QLabel,
    QMainWindow,
    QMimeData,
    QSettings,
    Qt,
    QUrl,
    QWidget,
    Signal,
)
from gui.resources import icon_path

WINDOW_TITLE = "Cairn"
EMPTY_STATE_TEXT = "Drop a repository folder here to start a task"
DEFAULT_SIZE = (1100, 720)
GEOMETRY_KEY = "main_window/geometry"
STATE_KEY = "main_window/state"


def app_icon() -> QIcon:
    """The Cairn icon; a null icon (never an error) when the resources folder is missing."""
    path = icon_path()
    return QIcon(str(path)) if path.is_file() else QIcon()


def _local_urls(mime: QMimeData) -> list[QUrl]:
    return [url for url in mime.urls() if url.isLocalFile()] if mime.hasUrls() else []


def sort_dropped_urls(urls: Iterable[QUrl]) -> tuple[list[Path], list[str]]:
    """Split dropped URLs into local folders and everything else (shown by name)."""
    folders: list[Path] = []
    rejected: list[str] = []
    for url in urls:
        if not url.isLocalFile():
            rejected.append(url.toString())
            continue
        path = Path(url.toLocalFile())
        if path.is_dir():
            folders.append(path)
        else:
            rejected.append(path.name or str(path))
    return folders, rejected


def drop_message(folders: list[Path], rejected: list[str]) -> str:
    """The status-bar line that tells the user what a drop did."""
    if not folders:
        if not rejected:
            return "Nothing to drop here. Drop a repository folder to start a task."
        label = "Not a folder" if len(rejected) == 1 else "Not folders"
        return f"{label}: {', '.join(rejected)}. Drop a repository folder to start a task."
    if len(folders) == 1:
        message = f"Folder dropped: {folders[0]}"
    else:
        message = f"{len(folders)} folders dropped: {', '.join(str(f) for f in folders)}"
    if rejected:
        what = "1 item that is not a folder" if len(rejected) == 1 else (
            f"{len(rejected)} items that are not folders")
        message += f" (ignored {what}: {', '.join(rejected)})"
    return message


class MainWindow(QMainWindow):
    sig_folders_dropped = Signal(list)
    """Local folders (list of Path) were dropped on the window, to start tasks from."""

    def __init__(
        self,
        data_dir: Path | None = None,
        settings: QSettings | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._settings = settings if settings is not None else QSettings()
        self.setWindowTitle(WINDOW_TITLE)
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)

        self.empty_state = QLabel(EMPTY_STATE_TEXT, self)
        self.empty_state.setObjectName("emptyState")
        self.empty_state.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_state.setWordWrap(True)
        self.setCentralWidget(self.empty_state)

        self._build_menu()
        self.data_dir_label = QLabel(self)
        self.data_dir_label.setObjectName("dataDirLabel")
        if data_dir is not None:
            self.data_dir_label.setText(f"Data: {data_dir}")
            self.data_dir_label.setToolTip(str(data_dir))
        self.statusBar().addPermanentWidget(self.data_dir_label)
        self.statusBar().showMessage("Ready")

        self._restore_geometry()

    def _build_menu(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.quit_action = QAction("&Quit", self)
        self.quit_action.setShortcut(QKeySequence(QKeySequence.StandardKey.Quit))
        self.quit_action.triggered.connect(self.close)
        file_menu.addAction(self.quit_action)

    # -- geometry -------------------------------------------------------------------------------

    def _restore_geometry(self) -> None:
        geometry = self._settings.value(GEOMETRY_KEY)
        if not (isinstance(geometry, QByteArray) and self.restoreGeometry(geometry)):
            self.resize(*DEFAULT_SIZE)
        state = self._settings.value(STATE_KEY)
        if isinstance(state, QByteArray):
            self.restoreState(state)

    def save_geometry(self) -> None:
        self._settings.setValue(GEOMETRY_KEY, self.saveGeometry())
        self._settings.setValue(STATE_KEY, self.saveState())
        self._settings.sync()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt override)
        self.save_geometry()
        event.accept()

    # -- drag and drop --------------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 (Qt override)
        # Any local item is accepted here so that dropping a file can explain why it is refused.
        if _local_urls(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:  # noqa: N802 (Qt override)
        if _local_urls(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 (Qt override)
        mime = event.mimeData()
        folders, rejected = sort_dropped_urls(mime.urls() if mime.hasUrls() else [])
        self.statusBar().showMessage(drop_message(folders, rejected))
        if folders:
            event.acceptProposedAction()
            self.sig_folders_dropped.emit(folders)
        else:
            event.ignore()
