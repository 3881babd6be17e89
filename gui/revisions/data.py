"""What the Revisions tab reads through the facade, as plain values; every function here runs
inside a job, never on the GUI thread, and uses no Qt.

Owns the timeline of one task, the revisions of the other tasks grown from the same folder (named
`TASK:REV` for the facade), the +/− counts of revisions, and a diff with the sizes its binary files
need; the widgets own showing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.app import Cairn
from core.diffs import Diff
from gui.diff.model import binary_shas

DIFF_MAX_BYTES = 4_000_000


@dataclass(frozen=True)
class TimelineEntry:
    id: str
    seq: int
    trigger: str
    run_id: str | None
    created_at: float
    files_changed: int
    parent_id: str | None


@dataclass(frozen=True)
class OtherRevision:
    """A revision of another task of the same source folder."""

    task_id: str
    task_title: str
    relation: str  # parent / child / ancestor / descendant / related
    revision_id: str
    seq: int
    trigger: str
    created_at: float

    @property
    def ref(self) -> str:
        return f"{self.task_id}:{self.revision_id}"


@dataclass
class Timeline:
    task_id: str
    title: str
    source_id: str
    entries: list[TimelineEntry]
    others: list[OtherRevision] = field(default_factory=list)
    workspace_id: str | None = None


@dataclass
class DiffResult:
    diff: Diff
    blob_sizes: dict[str, int]
    old_ref: str
    new_ref: str


def load_timeline(cairn: Cairn, task_id: str) -> Timeline:
    task = cairn.tasks.get(task_id)
    entries = [
        TimelineEntry(r.id, r.seq, r.trigger, r.run_id, r.created_at, r.files_changed, r.parent_id)
        for r in cairn.revisions.all(task.id)
    ]
    tasks = cairn.tasks.all()
    by_id = {t.id: t for t in tasks}
    others: list[OtherRevision] = []
    for other in tasks:
        if other.id == task.id or other.source_id != task.source_id or not other.workspace_id:
            continue
        relation = _relation(by_id, task.id, other.id)
        for r in cairn.revisions.all(other.id):
            others.append(
                OtherRevision(other.id, other.title, relation, r.id, r.seq, r.trigger, r.created_at)
            )
    order = {"parent": 0, "child": 1, "ancestor": 2, "descendant": 3, "related": 4}
    others.sort(key=lambda o: (order.get(o.relation, 9), o.task_id, -o.seq))
    return Timeline(task.id, task.title, task.source_id, entries, others, task.workspace_id)


def _relation(by_id: dict, task_id: str, other_id: str) -> str:
    def ancestors(t_id: str) -> list[str]:
        out, seen = [], set()
        parent = by_id[t_id].parent_task_id if t_id in by_id else None
        while parent and parent not in seen and parent in by_id:
            seen.add(parent)
            out.append(parent)
            parent = by_id[parent].parent_task_id
        return out

    mine = ancestors(task_id)
    if mine and mine[0] == other_id:
        return "parent"
    if other_id in mine:
        return "ancestor"
    theirs = ancestors(other_id)
    if theirs and theirs[0] == task_id:
        return "child"
    if task_id in theirs:
        return "descendant"
    return "related"


def revision_stats(
    cairn: Cairn, task_id: str, pairs: list[tuple[str | None, str]]
) -> dict[str, tuple[int, int, int]]:
    """(files, added, removed) of each revision against its parent, by revision id."""
    return cairn.revisions.stats(task_id, pairs)


def load_diff(
    cairn: Cairn, task_id: str, old_ref: str, new_ref: str, *, max_bytes: int = DIFF_MAX_BYTES
) -> DiffResult:
    diff = cairn.revisions.diff(task_id, old_ref, new_ref, max_bytes=max_bytes)
    sizes: dict[str, int] = {}
    shas = binary_shas(diff)
    if shas:
        sizes = cairn.revisions.blob_sizes(task_id, shas)
    return DiffResult(diff, sizes, old_ref, new_ref)
