"""Start-up reconcile: match what is on the machine (containers, processes, files) with what the
store says, and make the store true again without deleting anything.

Owns deciding, for each run the store thinks is in flight, whether it still runs, finished while
nobody watched, or was interrupted; and listing orphans for the user. Removing anything is
always an explicit user action elsewhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from core import lineage
from core.context import Context
from core.errors import CairnError
from core.models import Run
from core.models import RunState as R
from core.revisions import Revisions
from core.runs.liveness import Sandboxes, run_liveness
from core.runs.states import IN_FLIGHT, move, run_files

# Ends a run: (run id, exit code or None for lost, note) → the run (core.runs.service's `end`).
EndRun = Callable[..., Run]

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    still_running: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # in flight, but whether alive cannot be told
    finished: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    catch_up_revisions: list[str] = field(default_factory=list)
    orphan_containers: list[str] = field(default_factory=list)
    sessions_gone: list[str] = field(default_factory=list)
    orphan_snapshot_refs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def settle_run(ctx: Context, sandboxes: Sandboxes, end_run: EndRun, run: Run) -> str:
    """Bring one in-flight run's state in line with reality; returns what it became. A run
    becomes interrupted only on evidence that its process is gone; when that cannot be told
    now, CairnError and the run stays as it is."""
    if run.state in (R.QUEUED.value, R.PREPARING.value):
        if lineage.lease_held(ctx.store, lineage.root_of(ctx.store, run.task_id)):
            return "starting"  # another Cairn process is launching it under the lineage lease
        run = _adopt_launched_attempt(ctx, run)
    sandboxes.get().sync_run_files(run, force=True)  # a sandbox on another machine: its files
    files = run_files(ctx.data.runs_root, run)
    code = files.exit_code
    if code is None:
        alive, why = run_liveness(ctx, sandboxes, run)
        if alive is None:
            raise CairnError(f"run {run.id}: its state is unknown, left as it is: {why}")
        if alive:
            return "running"
        sandboxes.get().sync_run_files(run, force=True)
        code = files.exit_code  # it may have ended while we looked
        if code is None:
            _last_mirror_pass(sandboxes, run)
            end_run(run.id, None, note=f"interrupted: {why}")
            return R.INTERRUPTED.value
    _last_mirror_pass(sandboxes, run)
    end_run(run.id, code)
    return ctx.store.get_run(run.id).state


def _last_mirror_pass(sandboxes: Sandboxes, run: Run) -> None:
    """A run on another machine that ended while nothing followed it: its workspace there is
    brought here once more before the run's end records it, so the checkpoint holds what the run
    wrote there, not the folder as the last follower left it. Nothing to do for a sandbox on this
    machine, or while another Cairn process mirrors the workspace (its follower does that pass)."""
    try:
        stop = sandboxes.get().mirror_workspace(run, follow=False)
    except CairnError as exc:
        log.warning(
            "run %s: its workspace could not be brought back before its end: %s", run.id, exc
        )
        return
    if stop is not None:
        stop()


def _adopt_launched_attempt(ctx: Context, run: Run) -> Run:
    """A launch whose Cairn stopped between starting the next attempt's process and recording
    it: the stored run is still the previous attempt, the process already has a pid in the next
    attempt's folder. That attempt becomes the run's, so it is followed, never launched twice."""
    workspaces = [run.workspace_id]
    task_ws = ctx.store.get_task(run.task_id).workspace_id
    if task_ws not in workspaces:
        workspaces.append(task_ws)  # a resume into a new workspace
    for ws_id in workspaces:
        candidate = replace(run, attempt=run.attempt + 1, workspace_id=ws_id)
        files = run_files(ctx.data.runs_root, candidate)
        if files.pid is None:
            continue
        try:
            started = (files.folder / "pid").stat().st_mtime
        except OSError:
            started = time.time()
        try:
            return move(
                ctx.store,
                run.id,
                R.RUNNING,
                attempt=candidate.attempt,
                workspace_id=ws_id,
                output_offset=0,
                stderr_offset=0,
                exit_code=None,
                started_at=started,
                note="its launch was cut short after the process started; followed from here",
            )
        except CairnError:
            return ctx.store.get_run(run.id)  # someone else settled it first
    return run


def reconcile(
    ctx: Context,
    sandboxes: Sandboxes,
    revisions: Revisions,
    end_run: EndRun,
    *,
    catch_up: bool = True,
) -> ReconcileReport:
    report = ReconcileReport()
    for run in ctx.store.list_runs(states=IN_FLIGHT):
        try:
            outcome = settle_run(ctx, sandboxes, end_run, run)
        except CairnError as exc:  # not known to be gone: left in flight, and said
            report.unknown.append(run.id)
            report.problems.append(str(exc))
            continue
        {
            "running": report.still_running,
            "starting": report.still_running,
            R.INTERRUPTED.value: report.interrupted,
        }.get(outcome, report.finished).append(run.id)

    try:
        manager = sandboxes.get()
        found, unreachable = manager.found_sessions()
    except CairnError as exc:
        report.problems.append(f"sandboxes not checked: {exc}")
        found = None
    if found is not None:
        # A host that did not answer: its sessions are left as they are, never called gone.
        for host, problem in unreachable.items():
            report.problems.append(f"sandboxes on host {host} not checked: {problem}")
        known = set()
        for record in ctx.store.list_sessions():
            known.add(record.container_id)
            if manager.host_of(record) in unreachable:
                continue
            if record.container_id not in found:
                if record.status != "gone":
                    ctx.store.update_session(record.id, status="gone")
                report.sessions_gone.append(record.id)
            else:
                status = "live" if found[record.container_id].status == "running" else "stopped"
                if status != record.status:
                    ctx.store.update_session(record.id, status=status)
        report.orphan_containers = sorted(
            s.container_name for cid, s in found.items() if cid not in known
        )

    if catch_up:
        for ws in ctx.store.list_workspaces(states=("prepared", "active")):
            if not Path(ws.root).is_dir():
                report.problems.append(
                    f"workspace {ws.id} is missing on disk ({ws.root}); "
                    "resume restores it from its snapshot"
                )
                continue
            task = next((t for t in ctx.store.list_tasks() if t.workspace_id == ws.id), None)
            if task is None:
                continue
            try:
                rev, changed = revisions.capture(
                    task.id, trigger="watch", run_id=revisions.active_run_id(ws.id)
                )
            except CairnError as exc:
                report.problems.append(f"workspace {ws.id}: {exc}")
                continue
            if changed:
                report.catch_up_revisions.append(rev.id)

    for source in ctx.store.list_sources():
        try:
            vault = ctx.vault_for(source.id)
            refs = vault.objects.list_refs("refs/cairn/snapshots/")
        except CairnError as exc:
            report.problems.append(str(exc))
            continue
        rows = {s.id for s in ctx.store.list_snapshots()}
        report.orphan_snapshot_refs += sorted(
            ref.rsplit("/", 1)[-1] for ref in refs if ref.rsplit("/", 1)[-1] not in rows
        )
    return report


__all__ = ["reconcile", "settle_run", "ReconcileReport"]
