"""What the lineage tree reads through the facade, composed into plain values (no Qt).

Owns every task's row (run state, live session, snapshot freshness, approvals waiting, and, when
the tree's Cost column is shown, what its runs used: core.views' usage figures) and the counts
and sets the tree updates its badges from; the functions here run inside jobs, never on the GUI
thread. Showing the rows belongs to gui.lineage.model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.app import Cairn
from core.models import Task


@dataclass
class TaskRow:
    """One task as the lineage tree shows it."""

    task_id: str
    title: str
    parent_id: str | None
    source_id: str
    source_path: str
    engine: str = "shell"
    origin: str = "new"  # new / continue / fork
    created_at: float = 0.0
    workspace_id: str | None = None
    workspace_state: str | None = None
    run_state: str | None = None
    live: bool = False
    snapshot: str = "none"  # none / fresh / stale
    approvals: int = 0
    instructions: str = ""
    pending: str | None = None  # an action under way that the run's state does not say yet
    # What the task's runs used (cairn.views' figures: tokens, cost_usd, runs...); None: not read
    usage: dict[str, Any] | None = None


@dataclass
class LineageData:
    rows: list[TaskRow]
    problem: str | None = None  # e.g. the sandbox backend could not be asked about live sessions


def _snapshot_freshness(snapshot_revisions: list[str], current_revision: str | None) -> str:
    if not snapshot_revisions:
        return "none"
    return "fresh" if snapshot_revisions[-1] == current_revision else "stale"


def pending_approvals_by_task(cairn: Cairn) -> dict[str, int]:
    """How many approvals wait for a person, per task."""
    counts: dict[str, int] = {}
    for approval in cairn.approvals.list():
        if approval.task_id and approval.state == "pending":
            counts[approval.task_id] = counts.get(approval.task_id, 0) + 1
    return counts


def live_workspaces(status: dict) -> set[str]:
    return {s["workspace_id"] for s in status.get("sessions", []) if s.get("state") == "running"}


def usage_by_task(cairn: Cairn) -> dict[str, dict[str, Any]]:
    """What each task's runs used, by task id (every task, those with no runs at zero)."""
    return {row["task_id"]: row for row in cairn.views.usage_all()["tasks"]}


def load_lineage(
    cairn: Cairn, *, with_sessions: bool = True, with_usage: bool = False
) -> LineageData:
    """Every task with what its row shows (run state, live session, snapshot, approvals, and
    with `with_usage` what its runs used)."""
    tasks = cairn.tasks.all()
    source_paths: dict[str, str] = {}
    for task in tasks:
        if task.source_id not in source_paths:
            source_paths[task.source_id] = cairn.views.task_details(task.id)["source_path"]
    snapshots: dict[str, list[str]] = {}
    for snap in cairn.snapshots.all():
        snapshots.setdefault(snap.workspace_id, []).append(snap.revision_id)
    problem = None
    live: set[str] = set()
    if with_sessions and tasks:
        status = cairn.views.status()
        problem = status.get("problem")
        live = live_workspaces(status)
    approvals = pending_approvals_by_task(cairn)
    used = usage_by_task(cairn) if with_usage and tasks else {}
    rows = []
    for task in tasks:
        row = _row(cairn, task, source_paths[task.source_id], snapshots, live, approvals)
        if with_usage:
            row.usage = used.get(task.id)
        rows.append(row)
    return LineageData(rows, problem)


def _row(
    cairn: Cairn,
    task: Task,
    source_path: str,
    snapshots: dict[str, list[str]],
    live: set[str],
    approvals: dict[str, int],
) -> TaskRow:
    ws = cairn.tasks.workspace_of(task) if task.workspace_id else None
    run = cairn.runs.latest(task.id)
    return TaskRow(
        task_id=task.id,
        title=task.title,
        parent_id=task.parent_task_id,
        source_id=task.source_id,
        source_path=source_path,
        engine=task.engine,
        origin=task.source,
        created_at=task.created_at,
        workspace_id=task.workspace_id,
        workspace_state=ws.state if ws else None,
        run_state=run.state if run else None,
        live=bool(ws and ws.id in live),
        snapshot=_snapshot_freshness(
            snapshots.get(ws.id, []) if ws else [], ws.current_revision if ws else None
        ),
        approvals=approvals.get(task.id, 0),
        instructions=task.instructions,
    )


def task_row(cairn: Cairn, task_id: str, *, with_usage: bool = False) -> TaskRow:
    """One task's row (after it was created, or when its state changed)."""
    task = cairn.tasks.get(task_id)
    details = cairn.views.task_details(task.id)
    snaps = {details["workspace_id"]: [s["revision"] for s in details["snapshots"]]}
    row = _row(cairn, task, details["source_path"], snaps, set(), pending_approvals_by_task(cairn))
    if with_usage:
        row.usage = cairn.views.usage(task.id)["task"]
    return row
