"""The Qt binding keeps Python's reference counts straight (PySide6 6.12.0 on Python 3.11 did not:
every void or bool return dropped a reference to None/True/False until Python aborted)."""

from __future__ import annotations

import sys

from gui.qt import QLabel, QModelIndex, QObject, QStandardItemModel


def _lost(call, times: int = 200) -> dict[str, int]:
    before = {
        name: sys.getrefcount(value)
        for name, value in (("None", None), ("True", True), ("False", False))
    }
    for _ in range(times):
        call()
    return {
        name: before[name] - sys.getrefcount(value)
        for name, value in (("None", None), ("True", True), ("False", False))
        if before[name] - sys.getrefcount(value) >= times // 2
    }


def test_void_and_bool_returns_keep_reference_counts(qtbot):
    label = QLabel()
    qtbot.addWidget(label)
    obj = QObject()
    model = QStandardItemModel(1, 1)
    assert _lost(lambda: obj.setObjectName("x")) == {}
    assert _lost(lambda: label.setText("x")) == {}
    assert _lost(lambda: (model.beginResetModel(), model.endResetModel())) == {}
    assert _lost(lambda: model.hasIndex(0, 0, QModelIndex())) == {}
    assert _lost(lambda: label.isVisible()) == {}
