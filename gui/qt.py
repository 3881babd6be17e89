"""The one module in gui/ that imports Qt; every other gui module imports from here.

Keeping Qt behind one module makes the binding swappable and shows at a glance what gui/ uses.
"""

from __future__ import annotations

from PySide6 import __version__ as PYSIDE_VERSION
from PySide6.QtCore import (
    QAbstractItemModel,
    QByteArray,
    QCoreApplication,
    QElapsedTimer,
    QEvent,
    QItemSelectionModel,
    QMimeData,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QPointF,
    QRectF,
    QRunnable,
    QSettings,
    QSize,
    QSortFilterProxyModel,
    Qt,
    QThread,
    QThreadPool,
    QTimer,
    QUrl,
    Signal,
    Slot,
    qVersion,
)
from PySide6.QtGui import (
    QAction,
    QBrush,
    QCloseEvent,
    QColor,
    QDesktopServices,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QIcon,
    QImage,
    QKeyEvent,
    QKeySequence,
    QPainter,
    QPalette,
    QPixmap,
    QShortcut,
    QStandardItem,
    QStandardItemModel,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QStatusBar,
    QSystemTrayIcon,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QToolBar,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid as is_alive

__all__ = [
    "PYSIDE_VERSION",
    "QAbstractItemModel",
    "QAbstractItemView",
    "QAction",
    "QApplication",
    "QBrush",
    "QCheckBox",
    "QByteArray",
    "QCloseEvent",
    "QColor",
    "QDesktopServices",
    "QComboBox",
    "QCoreApplication",
    "QDialog",
    "QDialogButtonBox",
    "QDragEnterEvent",
    "QDragMoveEvent",
    "QDropEvent",
    "QElapsedTimer",
    "QEvent",
    "QFileDialog",
    "QFont",
    "QFontDatabase",
    "QFormLayout",
    "QFrame",
    "QGuiApplication",
    "QHBoxLayout",
    "QHeaderView",
    "QIcon",
    "QKeyEvent",
    "QImage",
    "QInputDialog",
    "QItemSelectionModel",
    "QKeySequence",
    "QLabel",
    "QLineEdit",
    "QMainWindow",
    "QMessageBox",
    "QMimeData",
    "QModelIndex",
    "QObject",
    "QPainter",
    "QPalette",
    "QPersistentModelIndex",
    "QPixmap",
    "QPlainTextEdit",
    "QPoint",
    "QPointF",
    "QPushButton",
    "QRectF",
    "QRunnable",
    "QScrollArea",
    "QSettings",
    "QShortcut",
    "QSize",
    "QSizePolicy",
    "QSortFilterProxyModel",
    "QSplitter",
    "QStackedWidget",
    "QStandardItem",
    "QStandardItemModel",
    "QStatusBar",
    "QSvgRenderer",
    "QSystemTrayIcon",
    "QTabWidget",
    "QTableWidget",
    "QTableWidgetItem",
    "QTextCharFormat",
    "QTextCursor",
    "QThread",
    "QThreadPool",
    "QTimer",
    "QToolBar",
    "QToolButton",
    "QTreeView",
    "QUrl",
    "QVBoxLayout",
    "QWidget",
    "Qt",
    "Signal",
    "Slot",
    "is_alive",
    "qVersion",
]

# Names used by the revisions, diff and sessions views.
from PySide6.QtCore import (
    QAbstractTableModel,
    QRect,
)
from PySide6.QtGui import (
    QPaintEvent,
    QResizeEvent,
    QSyntaxHighlighter,
    QTextOption,
)
from PySide6.QtWidgets import (
    QButtonGroup,
    QMenu,
    QTableView,
)

# What Qt hands a model's overrides (data, flags, rowCount...): an index or a persistent one.
ModelIndex = QModelIndex | QPersistentModelIndex

__all__ += [
    "ModelIndex",
    "QAbstractTableModel",
    "QButtonGroup",
    "QMenu",
    "QPaintEvent",
    "QRect",
    "QResizeEvent",
    "QSyntaxHighlighter",
    "QTableView",
    "QTextOption",
]

# Names used by the command palette and the window's keyboard and layout.
from PySide6.QtGui import QHelpEvent  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QListView,
    QMenuBar,
    QToolTip,
)

__all__ += [
    "QHelpEvent",
    "QListView",
    "QMenuBar",
    "QToolTip",
]

# Names used by the diff viewer and the run output.
from PySide6.QtGui import QMouseEvent  # noqa: E402

__all__ += [
    "QMouseEvent",
]

# Names used by Resume on Host's list of hosts.
from PySide6.QtWidgets import QListWidget, QListWidgetItem  # noqa: E402

__all__ += [
    "QListWidget",
    "QListWidgetItem",
]
