"""The timeline of one task's revisions as a table model, newest first; +/− filled in lazily.

Owns the rows and their text. The +/− counts cost a git call each, so the model only asks for the
rows a view actually paints (through `on_stats_wanted`, batched by the panel) and shows "…" until
they arrive.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gui.qt import ModelIndex, QObject, Qt
from gui.revisions.data import TimelineEntry
from gui.table_model import RowsTableModel

COL_SEQ, COL_TIME, COL_TRIGGER, COL_RUN, COL_FILES, COL_LINES = range(6)
HEADERS = ("#", "Time", "Trigger", "Run", "Files", "+/−")

TRIGGER_WORDS = {
    "base": "base (imported folder)",
    "watch": "watch (edits as they happened)",
    "checkpoint": "checkpoint",
    "external": "external (edited outside Cairn)",
    "restore": "restore (from a snapshot)",
    "manual": "manual capture",
}


def when(ts: float, now: float | None = None) -> str:
    now = time.time() if now is None else now
    local = time.localtime(ts)
    if time.localtime(now)[:3] == local[:3]:
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%Y-%m-%d %H:%M", local)


class TimelineModel(RowsTableModel):
    headers = HEADERS

    def __init__(
        self, parent: QObject | None = None, on_stats_wanted: Callable[[str], None] | None = None
    ):
        super().__init__(parent)
        self._rows: list[TimelineEntry] = []
        self._stats: dict[str, tuple[int, int, int]] = {}
        self._asked: set[str] = set()
        self._on_stats_wanted = on_stats_wanted

    # -- content ----------------------------------------------------------------------------

    def set_entries(self, entries: list[TimelineEntry], *, keep_stats: bool = False) -> None:
        self.beginResetModel()
        self._rows = sorted(entries, key=lambda e: (e.seq, e.created_at), reverse=True)
        if not keep_stats:
            self._stats.clear()
            self._asked.clear()
        self.endResetModel()

    def entries(self) -> list[TimelineEntry]:
        return list(self._rows)

    def entry(self, row: int) -> TimelineEntry:
        return self._rows[row]

    def row_of(self, revision_id: str) -> int:
        for row, e in enumerate(self._rows):
            if e.id == revision_id:
                return row
        return -1

    def stats(self, revision_id: str) -> tuple[int, int, int] | None:
        return self._stats.get(revision_id)

    def set_stats(self, stats: dict[str, tuple[int, int, int]]) -> None:
        self._stats.update(stats)
        for rev in stats:
            row = self.row_of(rev)
            if row >= 0:
                self.dataChanged.emit(self.index(row, COL_LINES), self.index(row, COL_LINES))

    def forget_asked(self, revision_ids: list[str]) -> None:
        """Let rows whose stats failed to load ask again later."""
        self._asked.difference_update(revision_ids)

    # -- Qt model ---------------------------------------------------------------------------

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        e = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == COL_SEQ:
                return str(e.seq)
            if col == COL_TIME:
                return when(e.created_at)
            if col == COL_TRIGGER:
                return e.trigger
            if col == COL_RUN:
                return e.run_id or "—"
            if col == COL_FILES:
                return str(e.files_changed)
            if col == COL_LINES:
                return self._lines_text(e)
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == COL_TRIGGER:
                return TRIGGER_WORDS.get(e.trigger, e.trigger)
            if col == COL_TIME:
                return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.created_at))
            if col == COL_LINES and e.parent_id is None:
                return "the base revision: every file counts as added"
            return f"revision {e.id}"
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_SEQ, COL_FILES, COL_LINES):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.UserRole:
            return e.id
        return None

    def _lines_text(self, e: TimelineEntry) -> str:
        stats = self._stats.get(e.id)
        if stats is not None:
            return f"+{stats[1]} −{stats[2]}"
        if e.id not in self._asked and self._on_stats_wanted is not None:
            # Asked only for rows a view paints: that is what makes the counts lazy.
            self._asked.add(e.id)
            self._on_stats_wanted(e.id)
        return "…"
