"""The timeline of one task's revisions as a table model, newest first; +/− filled in lazily.

Owns the rows and their text: each revision with what produced it and its files, under a heading
row for its run and step or tool call; a burst of revisions of the same files within one step as
one row that opens (▸/▾) to show them; a marker row (checkpoint, snapshot, approval, fork) just
above the revision it belongs to; and the search by path and text. The +/− counts cost a git
call each, so the model only asks for the rows a view actually paints (through
`on_stats_wanted`, batched by the panel) and shows "…" until they arrive.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.history import Described, Marker, bursts, matches, name_paths
from core.models import Revision
from gui.qt import ModelIndex, QFont, QObject, Qt
from gui.revisions.data import TimelineEntry
from gui.table_model import RowsTableModel

COL_SEQ, COL_TIME, COL_WHAT, COL_TRIGGER, COL_FILES, COL_LINES = range(6)
HEADERS = ("#", "Time", "Change", "Trigger", "Files", "+/−")

# What a row is.
REVISION = "revision"  # one revision
BURST = "burst"  # several revisions of one step and the same files, as one row
MEMBER = "member"  # one revision of an opened burst
HEADING = "heading"  # the run and step or tool call the rows below it belong to
MARKER = "marker"  # a checkpoint, snapshot, approval or fork

MARKER_SIGNS = {"checkpoint": "◆", "snapshot": "●", "approval": "✔", "fork": "↗"}

TRIGGER_WORDS = {
    "base": "base (imported folder)",
    "watch": "watch (edits as they happened)",
    "checkpoint": "checkpoint",
    "external": "external (edited outside the sandbox)",
    "restore": "restore (restored or undone in place)",
    "manual": "manual capture",
}


def when(ts: float, now: float | None = None) -> str:
    now = time.time() if now is None else now
    local = time.localtime(ts)
    if time.localtime(now)[:3] == local[:3]:
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%Y-%m-%d %H:%M", local)


@dataclass
class Row:
    kind: str
    entry: TimelineEntry  # the revision the row stands for (a burst: its newest)
    members: list[TimelineEntry] = field(default_factory=list)  # a burst's, oldest first
    text: str = ""  # a heading's or marker's words
    marker: Marker | None = None

    @property
    def key(self) -> str:
        """What its +/− counts are asked and kept under."""
        if self.kind == BURST:
            return f"burst:{self.members[0].id}:{self.entry.id}"
        return self.entry.id

    @property
    def span(self) -> tuple[str | None, str]:
        """(old, new) revisions whose diff is this row's change."""
        if self.kind == BURST:
            return self.members[0].parent_id, self.entry.id
        return self.entry.parent_id, self.entry.id


class TimelineModel(RowsTableModel):
    headers = HEADERS

    def __init__(
        self, parent: QObject | None = None, on_stats_wanted: Callable[[str], None] | None = None
    ):
        super().__init__(parent)
        self._entries: list[TimelineEntry] = []  # newest first
        self._markers: list[Marker] = []
        self._rows: list[Row] = []
        self._stats: dict[str, tuple[int, int, int]] = {}
        self._asked: set[str] = set()
        self._open: set[str] = set()  # bursts shown opened, by their first revision
        self._search = ""
        self._on_stats_wanted = on_stats_wanted

    # -- content ----------------------------------------------------------------------------

    def set_entries(
        self,
        entries: list[TimelineEntry],
        *,
        keep_stats: bool = False,
        markers: list[Marker] | None = None,
    ) -> None:
        self.beginResetModel()
        self._entries = sorted(entries, key=lambda e: (e.seq, e.created_at), reverse=True)
        self._markers = list(markers or [])
        if not keep_stats:
            self._stats.clear()
            self._asked.clear()
        # Opened groups stay open across reloads (a group is known by its first revision's id,
        # which no other task's revision has).
        shown = {e.id for e in self._entries}
        self._open &= shown
        self._rows = self._build()
        self.endResetModel()

    def set_search(self, text: str) -> None:
        """Show only revisions whose description, paths, run or id hold every word of `text`."""
        if text.strip() == self._search:
            return
        self.beginResetModel()
        self._search = text.strip()
        self._rows = self._build()
        self.endResetModel()

    @property
    def search(self) -> str:
        return self._search

    def set_open(self, row: int, opened: bool) -> None:
        """Open or close the burst at `row`."""
        r = self._rows[row]
        if r.kind != BURST:
            return
        first = r.members[0].id
        if (first in self._open) == opened:
            return
        self.beginResetModel()
        if opened:
            self._open.add(first)
        else:
            self._open.discard(first)
        self._rows = self._build()
        self.endResetModel()

    def toggle(self, row: int) -> bool:
        """Open a closed burst, close an opened one; False for any other row."""
        r = self._rows[row]
        if r.kind != BURST:
            return False
        self.set_open(row, r.members[0].id not in self._open)
        return True

    def is_open(self, row: int) -> bool:
        r = self._rows[row]
        return r.kind == BURST and r.members[0].id in self._open

    def reveal(self, revision_id: str) -> int:
        """The row of a revision, opening the burst that holds it; -1 when it is not shown."""
        for row, r in enumerate(self._rows):
            if r.kind == BURST and any(m.id == revision_id for m in r.members[:-1]):
                self.set_open(row, True)
                break
        return self.row_of(revision_id)

    def _build(self) -> list[Row]:
        oldest_first = list(reversed(self._entries))
        shown = [e for e in oldest_first if not self._search or _matches(e, self._search)]
        by_id = {e.id: e for e in shown}
        described = [e.described or _bare(e) for e in shown]
        markers_of: dict[str, list[Marker]] = {}
        for m in self._markers:
            if m.revision_id in by_id:
                markers_of.setdefault(m.revision_id, []).append(m)
        rows: list[Row] = []
        heading = None
        for burst in reversed(bursts(described)):
            members = [by_id[d.revision.id] for d in burst.members]
            newest = members[-1]
            title = burst.last.heading
            if title and (heading is None or heading != burst.last.activity_key):
                rows.append(Row(HEADING, newest, text=title))
            heading = burst.last.activity_key if title else None
            for e in reversed(members):
                for m in sorted(markers_of.get(e.id, []), key=lambda m: m.at, reverse=True):
                    sign = MARKER_SIGNS.get(m.kind, "◆")
                    rows.append(Row(MARKER, e, text=f"{sign} {m.label}", marker=m))
            if len(members) == 1:
                rows.append(Row(REVISION, newest))
                continue
            rows.append(Row(BURST, newest, members=members, text=burst.description))
            if members[0].id in self._open:
                rows.extend(Row(MEMBER, e) for e in reversed(members))
        return rows

    def entries(self) -> list[TimelineEntry]:
        """Every revision of the timeline, newest first (whatever is shown)."""
        return list(self._entries)

    def row(self, row: int) -> Row:
        return self._rows[row]

    def entry(self, row: int) -> TimelineEntry:
        """The revision the row stands for: its own, a burst's newest, the revision a marker
        belongs to, the newest under a heading."""
        return self._rows[row].entry

    def kind(self, row: int) -> str:
        return self._rows[row].kind

    def row_of(self, revision_id: str) -> int:
        """The row showing this revision (or the burst holding it, when closed); -1 if none."""
        found = -1
        for row, r in enumerate(self._rows):
            if r.kind in (REVISION, MEMBER) and r.entry.id == revision_id:
                return row
            closed = r.kind == BURST and r.members[0].id not in self._open
            if closed and found < 0 and any(m.id == revision_id for m in r.members):
                found = row
        return found

    def marker_rows(self) -> list[int]:
        return [row for row, r in enumerate(self._rows) if r.kind == MARKER]

    def stats(self, key: str) -> tuple[int, int, int] | None:
        return self._stats.get(key)

    def stats_span(self, key: str) -> tuple[str | None, str] | None:
        """(old, new) whose counts `key` stands for."""
        for r in self._rows:
            if r.kind in (REVISION, MEMBER, BURST) and r.key == key:
                return r.span
        e = next((e for e in self._entries if e.id == key), None)
        return (e.parent_id, e.id) if e else None

    def set_stats(self, stats: dict[str, tuple[int, int, int]]) -> None:
        self._stats.update(stats)
        for row, r in enumerate(self._rows):
            if r.kind in (REVISION, MEMBER, BURST) and r.key in stats:
                self.dataChanged.emit(self.index(row, COL_LINES), self.index(row, COL_LINES))

    def forget_asked(self, keys: list[str]) -> None:
        """Let rows whose stats failed to load ask again later."""
        self._asked.difference_update(keys)

    # -- Qt model ---------------------------------------------------------------------------

    def flags(self, index: ModelIndex) -> Qt.ItemFlag:
        if index.isValid() and self._rows[index.row()].kind in (HEADING, MARKER):
            return Qt.ItemFlag.ItemIsEnabled  # clicked, never selected
        return super().flags(index)

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        r = self._rows[index.row()]
        if r.kind in (HEADING, MARKER):
            return self._note_data(r, index.column(), role)
        e = r.entry
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == COL_SEQ:
                if r.kind == BURST:
                    sign = "▾" if r.members[0].id in self._open else "▸"
                    return f"{sign} {r.members[0].seq}–{e.seq}"
                return f"   {e.seq}" if r.kind == MEMBER else str(e.seq)
            if col == COL_TIME:
                return when(e.created_at)
            if col == COL_WHAT:
                return r.text if r.kind == BURST else e.description
            if col == COL_TRIGGER:
                return e.trigger
            if col == COL_FILES:
                if r.kind == BURST:
                    return str(len({p for m in r.members for p in m.paths}))
                return str(e.files_changed)
            if col == COL_LINES:
                return self._lines_text(r)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(r, col)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_FILES, COL_LINES):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.UserRole:
            return e.id
        return None

    def _note_data(self, r: Row, col: int, role: int) -> Any:
        if role == Qt.ItemDataRole.DisplayRole:
            if col == COL_WHAT:
                return r.text
            if col == COL_TIME and r.marker is not None:
                return when(r.marker.at)
            return ""
        if role == Qt.ItemDataRole.FontRole and r.kind == HEADING:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.FontRole and r.kind == MARKER:
            font = QFont()
            font.setItalic(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            if r.marker is not None:
                return (
                    f"{r.marker.label} ({r.marker.ref}); click to select revision "
                    f"#{r.entry.seq}, the one it belongs to"
                )
            return r.text
        if role == Qt.ItemDataRole.UserRole:
            return r.entry.id
        return None

    def _tooltip(self, r: Row, col: int) -> str:
        e = r.entry
        if col == COL_TRIGGER:
            return TRIGGER_WORDS.get(e.trigger, e.trigger)
        if col == COL_TIME:
            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.created_at))
        if r.kind == BURST:
            return (
                f"{len(r.members)} revisions (#{r.members[0].seq}–#{e.seq}) of "
                f"{name_paths(sorted({p for m in r.members for p in m.paths}), 10)}; "
                "click ▸ (or press Space) to show them one by one"
            )
        if col == COL_LINES and e.parent_id is None:
            return "the base revision: every file counts as added"
        if col == COL_WHAT and e.paths:
            return (
                f"{e.what}\n"
                + "\n".join(e.paths[:30])
                + (f"\n… and {len(e.paths) - 30} more" if len(e.paths) > 30 else "")
            )
        return f"revision {e.id}" + (f" · run {e.run_id}" if e.run_id else "")

    def _lines_text(self, r: Row) -> str:
        key = r.key
        stats = self._stats.get(key)
        if stats is not None:
            return f"+{stats[1]} −{stats[2]}"
        if key not in self._asked and self._on_stats_wanted is not None:
            # Asked only for rows a view paints: that is what makes the counts lazy.
            self._asked.add(key)
            self._on_stats_wanted(key)
        return "…"


def _bare(e: TimelineEntry) -> Described:
    """A revision read without its description (the timeline's own fields only)."""
    return Described(
        Revision(
            e.id, "", e.parent_id, "", e.trigger, e.run_id, e.files_changed, e.created_at, e.seq
        ),
        e.trigger,
        (),
    )


def _matches(e: TimelineEntry, text: str) -> bool:
    return matches(e.described or _bare(e), text)
