"""What the GUI reads from the facade, composed into plain values the widgets can show.

Owns every read gui/ makes through `core.app.Cairn` (so one module shows what the GUI depends
on); the functions here run inside jobs, never on the GUI thread, and import no Qt. Writes are
made by the widgets that offer them, also through jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.models import Run, RunState, Task
from core.runs import output_of

IN_FLIGHT = frozenset(s.value for s in RunState if s.in_flight)
# Runs whose process has been launched: following one before that (queued, preparing) would
# find no process yet and take the run for lost.
FOLLOWABLE = frozenset({RunState.RUNNING.value, RunState.WAITING_APPROVAL.value})

# The facade methods behind each action; an action whose method is missing is shown disabled.
FACADE_METHODS = {
    "start": "start_run",
    "continue": "continue_task",
    "fork": "fork_task",
    "stop": "stop",
    "resume": "resume",
    "promote": "promote_to_branch",
    "export_patch": "export_patch",
    "approvals": "approvals",
}


def capabilities(cairn: Any) -> frozenset[str]:
    """The actions this build's facade offers (keys of FACADE_METHODS)."""
    return frozenset(
        name for name, method in FACADE_METHODS.items() if callable(getattr(cairn, method, None))
    )


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


@dataclass
class LineageData:
    rows: list[TaskRow]
    problem: str | None = None  # e.g. the sandbox backend could not be asked about live sessions


def latest_run(cairn: Any, task: Task) -> Run | None:
    """The task's most recent run (any state); None before its first run."""
    method = getattr(cairn, "latest_run", None)
    if callable(method):
        return method(task.id)
    return cairn.runs.latest_run(task)  # until the facade has latest_run of its own


def _snapshot_freshness(snapshot_revisions: list[str], current_revision: str | None) -> str:
    if not snapshot_revisions:
        return "none"
    return "fresh" if snapshot_revisions[-1] == current_revision else "stale"


def pending_approvals_by_task(cairn: Any) -> dict[str, int]:
    """How many approvals wait for a person, per task."""
    if "approvals" not in capabilities(cairn):
        return {}
    counts: dict[str, int] = {}
    for item in cairn.approvals():
        task_id = field_of(item, "task_id")
        state = field_of(item, "state") or "pending"
        if task_id and state == "pending":
            counts[task_id] = counts.get(task_id, 0) + 1
    return counts


def field_of(item: Any, *names: str, default: Any = None) -> Any:
    """The first present field of a dict or an object (the approvals API returns either)."""
    for name in names:
        if isinstance(item, dict):
            if item.get(name) is not None:
                return item[name]
        elif getattr(item, name, None) is not None:
            return getattr(item, name)
    return default


def live_workspaces(status: dict) -> set[str]:
    return {s["workspace_id"] for s in status.get("sessions", []) if s.get("state") == "running"}


def load_lineage(cairn: Any, *, with_sessions: bool = True) -> LineageData:
    """Every task with what its row shows (run state, live session, snapshot, approvals)."""
    tasks = cairn.tasks()
    source_paths: dict[str, str] = {}
    for task in tasks:
        if task.source_id not in source_paths:
            source_paths[task.source_id] = cairn.task_details(task.id)["source_path"]
    snapshots: dict[str, list[str]] = {}
    for snap in cairn.snapshots():
        snapshots.setdefault(snap.workspace_id, []).append(snap.revision_id)
    problem = None
    live: set[str] = set()
    if with_sessions and tasks:
        status = cairn.status()
        problem = status.get("problem")
        live = live_workspaces(status)
    approvals = pending_approvals_by_task(cairn)
    rows = []
    for task in tasks:
        rows.append(_row(cairn, task, source_paths[task.source_id], snapshots, live, approvals))
    return LineageData(rows, problem)


def _row(
    cairn: Any,
    task: Task,
    source_path: str,
    snapshots: dict[str, list[str]],
    live: set[str],
    approvals: dict[str, int],
) -> TaskRow:
    ws = cairn.workspace_of(task) if task.workspace_id else None
    run = latest_run(cairn, task)
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


def task_row(cairn: Any, task_id: str) -> TaskRow:
    """One task's row (after it was created, or when its state changed)."""
    task = cairn.task(task_id)
    details = cairn.task_details(task.id)
    snaps = {details["workspace_id"]: [s["revision"] for s in details["snapshots"]]}
    return _row(cairn, task, details["source_path"], snaps, set(), pending_approvals_by_task(cairn))


@dataclass
class TaskViewData:
    """What the task view shows for one task."""

    details: dict
    run: Run | None
    lineage_run: Run | None  # a run in flight elsewhere in the task's lineage
    output: str | None  # the run's output so far (None when the caller follows it live)
    capabilities: frozenset[str] = field(default_factory=frozenset)


def lineage_members(tasks: list[Task], task_id: str) -> list[Task]:
    by_id = {t.id: t for t in tasks}
    root = by_id[task_id]
    seen = set()
    while root.parent_task_id and root.parent_task_id in by_id and root.id not in seen:
        seen.add(root.id)
        root = by_id[root.parent_task_id]
    children: dict[str | None, list[Task]] = {}
    for t in tasks:
        children.setdefault(t.parent_task_id, []).append(t)
    out, stack = [], [root]
    while stack:
        t = stack.pop()
        out.append(t)
        stack.extend(children.get(t.id, []))
    return out


def task_view(cairn: Any, task_id: str, *, with_output: bool = True) -> TaskViewData:
    task = cairn.task(task_id)
    details = cairn.task_details(task.id)
    run = latest_run(cairn, task)
    lineage_run = None
    for member in lineage_members(cairn.tasks(), task.id):
        if member.id == task.id:
            continue
        other = cairn.in_flight_run(member.id)
        if other is not None:
            lineage_run = other
            break
    output = run_output(cairn, run.id) if (with_output and run is not None) else None
    return TaskViewData(details, run, lineage_run, output, capabilities(cairn))


def run_output(cairn: Any, run_id: str) -> str:
    """Everything recorded of a run's output so far (stdout and stderr, in order)."""
    return output_of(cairn.store, run_id)
