"""What the Revisions tab reads through the facade, as plain values; every function here runs
inside a job, never on the GUI thread, and uses no Qt.

Owns the timeline of one task (each revision with what produced it and the paths it changed, from
cairn.views.history; the markers of checkpoints, snapshots, approvals and forks; the run that is
live in the workspace, which refuses restores), the revisions of the other tasks grown from the
same folder (named `TASK:REV` for the facade), the +/− counts of revisions and of bursts, a
file's own history, what a restore would write, and a diff with the sizes its binary files need;
the widgets own showing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.app import Cairn
from core.diffs import Diff
from core.history import Described, Marker
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
    described: Described | None = None  # what produced it and the paths it changed

    @property
    def what(self) -> str:
        return self.described.what if self.described else self.trigger

    @property
    def paths(self) -> tuple[str, ...]:
        return self.described.paths if self.described else ()

    @property
    def description(self) -> str:
        return self.described.description if self.described else self.trigger


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
    markers: list[Marker] = field(default_factory=list)
    live_run: str | None = None  # a run in flight in the workspace: restores are refused

    @property
    def refused(self) -> str:
        """Why a restore cannot be done now ("" when it can)."""
        if self.live_run:
            return (
                f"run {self.live_run} is live in this workspace; restoring would write under "
                "it — wait for it to end or stop it first"
            )
        return ""


@dataclass
class DiffResult:
    diff: Diff
    blob_sizes: dict[str, int]
    old_ref: str
    new_ref: str


def load_timeline(cairn: Cairn, task_id: str) -> Timeline:
    task = cairn.tasks.get(task_id)
    entries = load_timeline_entries(cairn, task.id)
    markers = cairn.views.markers(task.id)
    live = cairn.revisions.active_run_id(task.workspace_id) if task.workspace_id else None
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
    return Timeline(
        task.id, task.title, task.source_id, entries, others, task.workspace_id, markers, live
    )


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


def span_stats(
    cairn: Cairn, task_id: str, spans: dict[str, tuple[str | None, str]]
) -> dict[str, tuple[int, int, int]]:
    """(files, added, removed) from each span's first revision's parent to its last, by the
    caller's key (a burst of revisions read as one change)."""
    out = {}
    for key, (parent, last) in spans.items():
        out[key] = cairn.revisions.stats(task_id, [(parent, last)])[last]
    return out


def file_history(cairn: Cairn, task_id: str, path: str) -> list[TimelineEntry]:
    """Every revision of the task that changed `path`, newest first."""
    entries = load_timeline_entries(cairn, task_id)
    return [e for e in reversed(entries) if path in e.paths]


def load_timeline_entries(cairn: Cairn, task_id: str) -> list[TimelineEntry]:
    return [
        TimelineEntry(
            r.id, r.seq, r.trigger, r.run_id, r.created_at, r.files_changed, r.parent_id, d
        )
        for d in cairn.views.history(task_id)
        for r in (d.revision,)
    ]


def load_diff(
    cairn: Cairn,
    task_id: str,
    old_ref: str,
    new_ref: str,
    *,
    max_bytes: int = DIFF_MAX_BYTES,
    paths: list[str] | None = None,
) -> DiffResult:
    diff = cairn.revisions.diff(task_id, old_ref, new_ref, max_bytes=max_bytes, paths=paths)
    sizes: dict[str, int] = {}
    shas = binary_shas(diff)
    if shas:
        sizes = cairn.revisions.blob_sizes(task_id, shas)
    return DiffResult(diff, sizes, old_ref, new_ref)
