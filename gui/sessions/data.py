"""What the Sessions & Snapshots tab reads through the facade, as plain values, and how a resume
report reads in words; the loading functions run inside jobs and use no Qt.

Owns joining `cairn.views.status()` with the tasks (a sandbox is listed under the task whose
workspace it serves), asking for the CPU and memory figures of each running sandbox, finding
each task's last resume report, and whether (and why not) the selected task's workspace can be
snapshotted.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from core.app import Cairn
from core.models import Task

NOT_RUNNING_REASON = "only a running sandbox has CPU and memory figures"


@dataclass
class SessionRow:
    session_id: str
    workspace_id: str
    task_id: str | None
    task_title: str
    backend: str
    unsafe: bool
    container: str | None
    host: str
    state: str  # running / stopped / gone / unknown
    image: str | None
    age_s: float
    generation: int
    snapshot_id: str | None
    run_state: str | None = None  # the latest run of the session's task
    cpu_percent: float | None = None
    memory_bytes: int | None = None
    memory_limit_bytes: int | None = None
    uptime_s: float | None = None
    stats_note: str = ""  # where the figures came from, or why there are none


@dataclass
class SnapshotRow:
    snapshot_id: str
    workspace_id: str
    task_title: str
    revision: str
    age_s: float
    size: int | None
    restorable: bool
    state: str = ""
    name: str | None = None


@dataclass
class ResumeInfo:
    task_id: str
    run_id: str
    report: dict


@dataclass
class SessionsData:
    sessions: list[SessionRow] = field(default_factory=list)
    snapshots: list[SnapshotRow] = field(default_factory=list)
    problem: str | None = None
    resumes: dict[str, ResumeInfo] = field(default_factory=dict)  # by task id


def resume_refusal(row: SessionRow | None) -> str | None:
    """Why Resume cannot help the session's task now, or None when it can."""
    if row is None or row.task_id is None:
        return "select a sandbox of a task"
    state = row.run_state
    if state is None:
        return "the task has not run yet; nothing to resume"
    if state == "interrupted":
        return None
    if state in ("queued", "preparing", "running", "waiting_approval"):
        if row.state in ("gone", "stopped"):
            return None  # the run's sandbox is not up: Resume settles it, then resumes
        return f"the run is {state.replace('_', ' ')}; there is nothing to resume"
    return f"the last run {state}; only an interrupted run can be resumed"


# Sandboxes whose figures are asked for at once. The engine takes two samples a second apart for
# each: asked one after another, ten running sandboxes would take ten seconds a refresh.
FIGURES_AT_ONCE = 8


def _add_figures(cairn: Cairn, rows: list[SessionRow]) -> None:
    """Each running sandbox's CPU, memory and uptime, asked of the backend in parallel."""

    def figures(row: SessionRow) -> None:
        try:
            stats = cairn.views.session_stats(row.session_id)
        except Exception as exc:  # noqa: BLE001 - one sandbox's figures must not hide the list
            row.stats_note = f"figures unavailable: {exc}"
            return
        row.cpu_percent = stats.get("cpu_percent")
        row.memory_bytes = stats.get("memory_bytes")
        row.memory_limit_bytes = stats.get("memory_limit_bytes")
        row.uptime_s = stats.get("uptime_s")
        row.stats_note = stats.get("note") or "from the sandbox backend"

    if not rows:
        return
    with ThreadPoolExecutor(min(FIGURES_AT_ONCE, len(rows)), "session-figures") as pool:
        list(pool.map(figures, rows))


def load_sessions(cairn: Cairn) -> SessionsData:
    status = cairn.views.status()
    tasks = cairn.tasks.all()
    # A sandbox is listed under the newest task of its workspace (the one Stop and Resume act
    # on); a snapshot under the task that was newest when it was taken, so a later
    # continuation does not relabel older snapshots with its title.
    task_of_ws = {t.workspace_id: t for t in tasks if t.workspace_id}

    def task_at(workspace_id: str | None, when: float) -> Task | None:
        found = None
        for t in tasks:
            if t.workspace_id == workspace_id and (found is None or t.created_at <= when):
                found = t
        return found

    out = SessionsData(problem=status.get("problem"))
    for s in status.get("sessions", []):
        task = task_of_ws.get(s.get("workspace_id"))
        row = SessionRow(
            session_id=s["session_id"],
            workspace_id=s.get("workspace_id") or "",
            task_id=task.id if task else None,
            task_title=task.title if task else "(no task)",
            backend=s.get("backend") or "",
            unsafe=bool(s.get("unsafe")),
            container=s.get("container"),
            host=s.get("host") or "",
            state=s.get("state") or "unknown",
            image=s.get("image"),
            age_s=float(s.get("age_s") or 0.0),
            generation=int(s.get("generation") or 0),
            snapshot_id=s.get("snapshot_id"),
        )
        if task is not None:
            latest = cairn.runs.latest(task.id)
            row.run_state = latest.state if latest else None
        if row.state != "running":
            row.stats_note = NOT_RUNNING_REASON
        out.sessions.append(row)
    _add_figures(cairn, [row for row in out.sessions if row.state == "running"])
    for snap in status.get("snapshots", []):
        task = task_at(snap.get("workspace_id"), float(snap.get("created_at") or 0.0))
        out.snapshots.append(
            SnapshotRow(
                snapshot_id=snap["snapshot_id"],
                workspace_id=snap.get("workspace_id") or "",
                task_title=task.title if task else "(no task)",
                revision=snap.get("revision") or "",
                age_s=float(snap.get("age_s") or 0.0),
                size=snap.get("size"),
                restorable=bool(snap.get("restorable")),
                state=snap.get("state") or "",
                name=snap.get("name"),
            )
        )
    for task in tasks:
        if not any(r.task_id == task.id for r in out.sessions):
            continue
        run = cairn.runs.latest(task.id)
        if run is not None and run.resume_report:
            out.resumes[task.id] = ResumeInfo(task.id, run.id, run.resume_report)
    return out


# -- Snapshot Now -----------------------------------------------------------------------------

# The workspace states whose files are on disk and recorded (core.workspaces.require_tree).
SNAPSHOTTABLE_STATES = ("prepared", "active", "frozen")


@dataclass
class SnapshotTarget:
    """The task whose workspace Snapshot Now would snapshot, and the facts that allow it."""

    task_id: str
    task_title: str
    workspace_id: str
    workspace_state: str
    present: bool  # the workspace folder is on disk

    def refusal(self) -> str | None:
        """Why this workspace cannot be snapshotted now, in words; None when it can."""
        if self.workspace_state == "archived":
            return (
                f"the workspace of {self.task_title} is archived; unarchive the task to snapshot it"
            )
        if self.workspace_state not in SNAPSHOTTABLE_STATES:
            return (
                f"the workspace of {self.task_title} is {self.workspace_state}; its files "
                "are not on disk"
            )
        if not self.present:
            return f"the workspace folder of {self.task_title} is missing (deleted outside Cairn)"
        return None


@dataclass
class SnapshotMade:
    """What Snapshot Now made: the snapshot and the revision it holds."""

    task_id: str
    task_title: str
    snapshot_id: str
    revision: str
    reused: bool  # the latest revision already had a restorable snapshot, which was kept


def load_snapshot_target(cairn: Cairn, task_id: str) -> SnapshotTarget:
    task = cairn.tasks.get(task_id)
    ws = cairn.tasks.workspace_of(task)
    return SnapshotTarget(task.id, task.title, ws.id, ws.state, Path(ws.root).is_dir())


def take_snapshot(cairn: Cairn, task_id: str, task_title: str) -> SnapshotMade:
    """A verifying capture of the workspace, then a durable snapshot of its latest revision."""
    started = time.time()
    snap = cairn.snapshots.take(task_id)
    return SnapshotMade(
        task_id, task_title, snap.id, snap.revision_id, reused=snap.created_at < started
    )


def rename_snapshot(cairn: Cairn, snapshot_id: str, name: str) -> tuple[str, str | None]:
    """Name a snapshot (blank: no name); returns its id and the name as stored."""
    snap = cairn.snapshots.rename(snapshot_id, name)
    return snap.id, snap.name


# -- resume reports in words ------------------------------------------------------------------


def _sandbox_words(outcome: str) -> str:
    if outcome == "reattached":
        return "reattached to the sandbox that was still there"
    if outcome == "recreated":
        return "recreated the sandbox (the old one was gone), carrying the same snapshot"
    if outcome == "created":
        return "created a new sandbox"
    return f"sandbox: {outcome}"


def _workspace_words(outcome: str) -> str:
    if outcome == "restored":
        return "restored the workspace from its snapshot (the folder was missing)"
    if outcome.startswith("restored into new workspace"):
        return f"restored the checkpoint into a new workspace ({outcome.rsplit(' ', 1)[-1]})"
    if outcome.startswith("continuing on top"):
        return "continued on top of edits made outside Cairn"
    if outcome.startswith("unchanged"):
        return "found the workspace unchanged since the checkpoint"
    if outcome.startswith("present"):
        return "found the workspace present (its changes are the run's own)"
    return f"workspace: {outcome}"


def _engine_words(outcome: str) -> str:
    if "fallback" in outcome:
        return "fell back to a new engine session on the same files"
    if outcome.startswith("native"):
        return f"resumed the engine's own session ({outcome})"
    return f"engine: {outcome}"


def describe_resume(report: dict | None) -> str:
    """What a resume did, as a sentence: reattached / recreated / restored / fell back."""
    if not report:
        return "No resume yet."
    parts: list[str] = []
    for step in report.get("path") or []:
        name, _, outcome = str(step).partition(": ")
        if name == "sandbox":
            parts.append(_sandbox_words(outcome))
        elif name == "workspace":
            parts.append(_workspace_words(outcome))
        elif name == "engine":
            parts.append(_engine_words(outcome))
        elif name == "checkpoint":
            parts.append(
                "started over from the first step (no checkpoint)"
                if outcome == "none"
                else f"went back to checkpoint {outcome}"
            )
        elif name == "tools":
            parts.append(f"tools {outcome}")
        elif name == "credentials":
            parts.append(f"credentials {outcome}")
        elif name == "background":
            parts.append(f"background processes {outcome}")
        else:
            parts.append(str(step))
    run = report.get("run_id")
    head = f"Last resume of run {run}: " if run else "Last resume: "
    text = head + "; ".join(parts) + "." if parts else head + "nothing was recorded."
    notes = [str(n) for n in report.get("notes") or []]
    if notes:
        text += " Why: " + "; ".join(notes) + "."
    return text
