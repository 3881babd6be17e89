"""The one module in gui/ that imports Qt; every other gui module imports from here.

Keeping Qt behind one module makes the binding swappable and shows at a glance what gui/ uses.
"""

from __future__ import annotations

from PySide6 import __version__ as PYSIDE_VERSION
from PySide6.QtCore import (
    QByteArray,
    QCoreApplication,
    QEvent,
    QMimeData,
    QObject,
    QPoint,
    QPointF,
    QSettings,
    QSize,
    Qt,
    QTimer,
    QUrl,
    Signal,
    Slot,
    qVersion,
)
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QGuiApplication,
    QIcon,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QMainWindow,
    QStatusBar,
    QWidget,
)

__all__ = [
    "PYSIDE_VERSION",
    "QAction",
    "QApplication",
    "QByteArray",
    "QCloseEvent",
    "QCoreApplication",
    "QDragEnterEvent",
    "QDragMoveEvent",
    "QDropEvent",
    "QEvent",
    "QGuiApplication",
    "QIcon",
    "QKeySequence",
    "QLabel",
    "QMainWindow",
    "QMimeData",
    "QObject",
    "QPoint",
    "QPointF",
    "QSettings",
    "QSize",
    "QStatusBar",
    "QTimer",
    "QUrl",
    "QWidget",
    "Qt",
    "Signal",
    "Slot",
    "qVersion",
]
