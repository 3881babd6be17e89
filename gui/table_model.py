"""A flat table over a Python list of rows with fixed column headers: the Qt boilerplate the
list models share (row and column counts, horizontal headers), so each keeps only its data.

Owns nothing else; subclasses hold the rows in `self._rows` and answer `data()`.
"""

from __future__ import annotations

from typing import Any

from gui.qt import ModelIndex, QAbstractTableModel, QModelIndex, QObject, Qt


class RowsTableModel(QAbstractTableModel):
    headers: tuple[str, ...] = ()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._rows: list[Any] = []

    def rowCount(self, parent: ModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: ModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.headers)

    def headerData(
        self,
        section: int,
        orientation: Qt.Orientation,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> str | None:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.headers[section]
        return None
