"""Start-up reconcile: match what is on the machine (containers, processes, files) with what the
store says, and make the store true again without deleting anything.

Owns deciding, for each run the store thinks is in flight, whether it still runs, finished while
nobody watched, or was interrupted; and listing orphans for the user. Removing anything is
always an explicit user action elsewhere.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from core import lineage, runs
from core.errors import CairnError
from core.models import Run
from core.models import RunState as R
from core.sandbox.base import Attached

if TYPE_CHECKING:
    from core.app import Cairn

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    still_running: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    catch_up_revisions: list[str] = field(default_factory=list)
    orphan_containers: list[str] = field(default_factory=list)
    sessions_gone: list[str] = field(default_factory=list)
    orphan_snapshot_refs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def run_liveness(app: Cairn, run: Run) -> tuple[bool | None, str]:
    """Whether the run's process still runs: True, False, or None when it cannot be told now
    (Docker unreachable: an unknown error decides nothing)."""
    files = runs.run_files(app.data.runs_root, run)
    ws = app.store.get_workspace(run.workspace_id) if run.workspace_id else None
    record = app.store.session_for(ws.id) if ws else None
    if record is None:
        return False, "the run has no sandbox"
    pid = files.pid
    if pid is None:
        return False, "the run's process never started"
    try:
        result = app.sandboxes.attach_as_made(record, ws)
    except CairnError as exc:
        return None, f"cannot look at the sandbox: {exc}"
    if not isinstance(result, Attached):
        reason = getattr(result, "reason", None) or "; ".join(getattr(result, "reasons", []))
        return False, f"the sandbox is gone ({reason})"
    alive = result.live.process_alive(pid, run_id=run.exec_id)
    return alive, "the process is running" if alive else "the process is gone"


def settle_run(app: Cairn, run: Run) -> str:
    """Bring one in-flight run's state in line with reality; returns what it became."""
    if run.state in (R.QUEUED.value, R.PREPARING.value) and lineage.lease_held(
        app.store, lineage.root_of(app.store, run.task_id)
    ):
        return "starting"  # another Cairn process is launching it under the lineage lease
    files = runs.run_files(app.data.runs_root, run)
    code = files.exit_code
    if code is None:
        alive, why = run_liveness(app, run)
        if alive is None:
            raise CairnError(f"run {run.id}: {why}")
        if alive:
            return "running"
        code = files.exit_code  # it may have ended while we looked
        if code is None:
            app.end_run(run.id, None, note=f"interrupted: {why}")
            return R.INTERRUPTED.value
    app.end_run(run.id, code)
    return app.store.get_run(run.id).state


def reconcile(app: Cairn, *, catch_up: bool = True) -> ReconcileReport:
    report = ReconcileReport()
    for run in app.store.list_runs(states=runs.IN_FLIGHT):
        try:
            outcome = settle_run(app, run)
        except CairnError as exc:
            report.problems.append(str(exc))
            continue
        {
            "running": report.still_running,
            "starting": report.still_running,
            R.INTERRUPTED.value: report.interrupted,
        }.get(outcome, report.finished).append(run.id)

    try:
        found = {s.container_id: s for s in app.sandboxes.backend.list_sessions()}
    except CairnError as exc:
        report.problems.append(f"sandboxes not checked: {exc}")
        found = None
    if found is not None:
        known = set()
        for record in app.store.list_sessions():
            known.add(record.container_id)
            if record.container_id not in found:
                if record.status != "gone":
                    app.store.update_session(record.id, status="gone")
                report.sessions_gone.append(record.id)
            else:
                status = "live" if found[record.container_id].status == "running" else "stopped"
                if status != record.status:
                    app.store.update_session(record.id, status=status)
        report.orphan_containers = sorted(
            s.container_name for cid, s in found.items() if cid not in known
        )

    if catch_up:
        for ws in app.store.list_workspaces(states=("prepared", "active")):
            if not Path(ws.root).is_dir():
                report.problems.append(
                    f"workspace {ws.id} is missing on disk ({ws.root}); "
                    "resume restores it from its snapshot"
                )
                continue
            task = next((t for t in app.store.list_tasks() if t.workspace_id == ws.id), None)
            if task is None:
                continue
            try:
                rev, changed = app.capture(
                    task.id, trigger="watch", run_id=app.active_run_id(ws.id)
                )
            except CairnError as exc:
                report.problems.append(f"workspace {ws.id}: {exc}")
                continue
            if changed:
                report.catch_up_revisions.append(rev.id)

    for source in app.store.list_sources():
        try:
            vault = app.vault_for(source.id)
            refs = vault.objects.list_refs("refs/cairn/snapshots/")
        except CairnError as exc:
            report.problems.append(str(exc))
            continue
        rows = {s.id for s in app.store.list_snapshots()}
        report.orphan_snapshot_refs += sorted(
            ref.rsplit("/", 1)[-1] for ref in refs if ref.rsplit("/", 1)[-1] not in rows
        )
    return report


__all__ = ["reconcile", "settle_run", "run_liveness", "ReconcileReport"]
