"""The list of a diff's changed files: status letter, path (old → new for renames), +/−; flat,
or under their folders."""

from __future__ import annotations

from typing import Any

from core.diffs import FileDiff
from gui.diff.colors import GREEN, RED, blend
from gui.diff.model import (
    TreeNode,
    counts_text,
    file_label,
    file_summary,
    folder_tree,
    status_letter,
)
from gui.qt import (
    ModelIndex,
    QColor,
    QFont,
    QPalette,
    QStandardItem,
    QStandardItemModel,
    Qt,
    QWidget,
)
from gui.table_model import RowsTableModel

COL_STATUS, COL_PATH, COL_COUNTS = range(3)
HEADERS = ("", "File", "+/−")

_LETTER_COLOURS = {
    "A": GREEN,
    "D": RED,
    "M": QColor(200, 140, 20),
    "R": QColor(60, 120, 220),
    "C": QColor(60, 120, 220),
    "T": QColor(150, 90, 200),
    "X": QColor(150, 90, 200),
    "S": QColor(120, 120, 120),
}


class FileListModel(RowsTableModel):
    headers = HEADERS

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._rows: list[FileDiff] = []
        self._palette = QPalette()

    def set_files(self, files: list[FileDiff]) -> None:
        self.beginResetModel()
        self._rows = list(files)
        self.endResetModel()

    def set_palette(self, palette: QPalette) -> None:
        self._palette = palette
        if self._rows:
            self.dataChanged.emit(self.index(0, 0), self.index(len(self._rows) - 1, COL_COUNTS))

    def file(self, row: int) -> FileDiff:
        return self._rows[row]

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        f = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == COL_STATUS:
                return status_letter(f)
            if col == COL_PATH:
                return file_label(f)
            return counts_text(f)
        if role == Qt.ItemDataRole.ToolTipRole:
            return file_summary(f) + (
                "\n(partly left out by the diff's size cap)" if f.truncated else ""
            )
        if role == Qt.ItemDataRole.ForegroundRole and col == COL_STATUS:
            text = self._palette.color(QPalette.ColorRole.Text)
            return blend(text, _LETTER_COLOURS.get(status_letter(f), text), 0.85)
        if role == Qt.ItemDataRole.FontRole and col == COL_STATUS:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_STATUS, COL_COUNTS):
            return int(
                Qt.AlignmentFlag.AlignCenter
                if col == COL_STATUS
                else Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
            )
        if role == Qt.ItemDataRole.AccessibleTextRole and col == COL_STATUS:
            return file_summary(f)
        return None


# -- the same files as a folder tree ------------------------------------------------------------

FILE_ROLE = Qt.ItemDataRole.UserRole + 1  # the file's index in the diff (folders: -1)
TREE_HEADERS = ("File", "+/−")


def build_tree_model(model: QStandardItemModel, files: list[FileDiff], palette: QPalette) -> None:
    """Fill `model` with the files under their folders (see gui.diff.model.folder_tree)."""
    model.clear()
    model.setHorizontalHeaderLabels(list(TREE_HEADERS))
    text = palette.color(QPalette.ColorRole.Text)
    bold = QFont()
    bold.setBold(True)

    def add(parent: QStandardItem, nodes: list[TreeNode]) -> None:
        for node in nodes:
            if node.file < 0:
                item = QStandardItem(node.name + "/")
                item.setData(-1, FILE_ROLE)
                item.setToolTip(node.name)
                counts = QStandardItem("")
                add(item, node.children)
            else:
                f = files[node.file]
                letter = status_letter(f)
                item = QStandardItem(f"{letter}  {node.name}")
                item.setData(node.file, FILE_ROLE)
                item.setToolTip(file_summary(f))
                item.setForeground(blend(text, _LETTER_COLOURS.get(letter, text), 0.85))
                counts = QStandardItem(counts_text(f))
                counts.setData(node.file, FILE_ROLE)
                counts.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            for cell in (item, counts):
                cell.setEditable(False)
            parent.appendRow([item, counts])

    add(model.invisibleRootItem(), folder_tree([f.path for f in files]))


def tree_item_of(model: QStandardItemModel, file_index: int) -> QStandardItem | None:
    """The tree's item for a file of the diff."""
    stack = [model.invisibleRootItem()]
    while stack:
        parent = stack.pop()
        for row in range(parent.rowCount()):
            child = parent.child(row, 0)
            if child is None:
                continue
            if child.data(FILE_ROLE) == file_index:
                return child
            stack.append(child)
    return None
