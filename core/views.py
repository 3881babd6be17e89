"""Views: the plain-data projections of core's objects that the CLI and the GUI both show.

Owns turning tasks, revisions, snapshots, sandbox sessions and what runs used of their model into
JSON-ready dicts (`cairnctl ... --json` prints them as they are; the GUI reads its rows from
them), so both adapters say the same thing. Nothing here changes state, except that a run's usage
is recorded the first time it is read after the run ended (so later price changes leave it be).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from core import events as ev
from core import history, lineage, workspaces
from core.context import Context
from core.errors import CairnError
from core.history import Activity, Described, Marker
from core.models import Revision, Run, Snapshot, Task, Workspace
from core.output_blocks import encode, read_records, records_from_events
from core.restore import restore_note
from core.revisions import Revisions
from core.runs.liveness import Sandboxes
from core.runs.states import IN_FLIGHT
from core.sandbox import egress
from core.settings import ENGINES_SECTION, read_prices, read_settings, settings_path
from core.snapshots import tree_size
from core.usage import DEFAULT_MODELS, Tokens, Usage, total, usage_of_output
from core.vault import snapshot_ref


class Views:
    def __init__(self, ctx: Context, *, revisions: Revisions, sandboxes: Sandboxes):
        self.ctx = ctx
        self.revisions = revisions
        self._sandboxes = sandboxes
        # What never changes once known: the paths a revision changed, an ended run's steps
        # and tool calls, a restore's source.
        self._paths: dict[str, list[str]] = {}
        self._readers: dict[str, tuple[history.ActivityReader, int]] = {}  # and the last seq
        self._readers_lock = threading.Lock()  # jobs on several threads read histories
        self._restores: dict[str, tuple[str, str] | None] = {}

    def session_stats(self, session_id: str) -> dict[str, Any]:
        """Live figures of one sandbox (see SandboxManager.session_stats); about a second."""
        return self._sandboxes.get().session_stats(session_id)

    def _workspace_size(self, workspace_id: str) -> int | None:
        """Bytes of the workspace's latest revision (what a restore would write)."""
        rev = self.ctx.store.latest_revision(workspace_id)
        if rev is None:
            return None
        return self._tree_size(self.ctx.store.get_workspace(workspace_id), rev.tree)

    def _tree_size(self, ws: Workspace, tree: str) -> int | None:
        """Bytes of one of the workspace's trees; None when its vault cannot tell (objects
        missing or damaged): one unreadable tree never fails the whole status."""
        try:
            return tree_size(self.ctx.vault_for(ws.source_id), tree, near=self._base_tree(ws))
        except CairnError:
            return None

    def _base_tree(self, ws: Workspace) -> str | None:
        """The tree of the workspace's base: its size is known from the import's materialize,
        so a later tree of the workspace is counted from what differs."""
        try:
            return self.ctx.store.get_revision(ws.id, ws.base_revision).tree
        except CairnError:
            return None

    def _credential_uses(self, session_id: str) -> dict[str, Any]:
        """How often the host's proxy signed a request for this sandbox, and when last (the
        session's egress log records host and time, never the value)."""
        uses = egress.credential_uses(self.ctx.data.root / "egress" / session_id / "egress.log")
        return {
            "credential_uses": len(uses),
            "credential_last_used": uses[-1].get("time") if uses else None,
            "credential_hosts": sorted({str(u.get("host")) for u in uses}),
        }

    def status(self) -> dict:
        """Every sandbox session and snapshot, for `cairnctl status` and the GUI."""
        sessions = []
        unreachable: dict[str, str] = {}
        try:
            manager = self._sandboxes.get()
            found, unreachable = manager.found_sessions()
            # The default host's problem stops every new sandbox (the GUI disables what needs
            # one); another host's only its own sessions, each then shown as unknown.
            problem = unreachable.get(manager.host)
        except CairnError as exc:
            manager, found, problem = None, {}, str(exc)
        for rec in self.ctx.store.list_sessions():
            summary = found.get(rec.container_id) if rec.container_id else None
            host = manager.host_of(rec) if manager is not None else rec.host
            state = (
                "unknown"
                if manager is None
                else manager.unanswered_state(host)
                if host in unreachable
                else "gone"
                if summary is None
                else "running"
                if summary.status == "running"
                else "stopped"
            )
            sessions.append(
                {
                    "session_id": rec.id,
                    "workspace_id": rec.workspace_id,
                    "backend": rec.backend,
                    "host": host,
                    "unsafe": rec.backend == "host",  # no isolation: said wherever it appears
                    "container": rec.container_name,
                    "state": state,
                    "image": rec.image_digest,
                    "generation": rec.generation,
                    "snapshot_id": rec.snapshot_id,
                    "age_s": time.time() - rec.created_at,
                    "policy_version": rec.policy_version,
                    "size": self._workspace_size(rec.workspace_id),
                    **self._credential_uses(rec.id),
                }
            )
        snaps = []
        for snap in self.ctx.store.list_snapshots():
            ws = self.ctx.store.get_workspace(snap.workspace_id)
            try:
                vault = self.ctx.vault_for(ws.source_id)
                present = vault.objects.read_ref(snapshot_ref(snap.id)) == snap.revision_id
            except CairnError:  # the vault is gone or unreadable: nothing there to restore
                present = False
            snaps.append(
                {
                    **snapshot_json(snap),
                    "age_s": time.time() - snap.created_at,
                    "size": self._tree_size(ws, snap.tree) if present else None,
                    "restorable": present,
                }
            )
        others = {h: why for h, why in unreachable.items() if manager is None or h != manager.host}
        return {
            "sessions": sessions,
            "snapshots": snaps,
            "problem": problem,
            "host_problems": others,
        }

    def run_output(self, run_id: str) -> str:
        """A run's output with its structure kept: streams, when each part was observed, and
        where each attempt began, as marker lines (core.output_blocks.encode)."""
        return encode(read_records(self.ctx.store, run_id))

    def task_details(self, task_ref: str) -> dict:
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        revs = self.revisions.all(task.id)
        return {
            "task_id": task.id,
            "title": task.title,
            "engine": task.engine,
            "host": task.host,
            "instructions": task.instructions,
            "source": task.source,
            "parent_task_id": task.parent_task_id,
            "from_revision": task.from_revision,
            "source_path": self.ctx.store.get_source(task.source_id).path,
            "workspace_id": ws.id,
            "workspace_root": ws.root,
            "state": ws.state,
            "branch": ws.branch,
            "base_revision": ws.base_revision,
            "current_revision": revs[-1].id if revs else None,
            "workspace_present": Path(ws.root).is_dir(),
            "quota_bytes": ws.quota_bytes,
            "expires_at": ws.expires_at,
            "expired": workspaces.is_expired(ws),
            "revisions": [revision_json(r) for r in revs],
            "snapshots": [snapshot_json(s) for s in self.ctx.store.list_snapshots(ws.id)],
        }

    # -- a history people can read ------------------------------------------------------------

    def history(self, task_ref: str) -> list[Described]:
        """The task's revisions, oldest first, each with what produced it and the paths it
        changed (core.history)."""
        task = self.ctx.task(task_ref)
        revs = self.revisions.all(task.id)
        vault = self.ctx.vault_for(task.source_id)
        missing = [r.id for r in revs if r.id not in self._paths]
        if missing:
            self._paths.update(history.changed_paths(vault.git_dir, missing))
        acts: dict[str, list[Activity]] = {}
        for run_id in dict.fromkeys(r.run_id for r in revs if r.run_id):
            acts[run_id] = self._run_activities(run_id) or self._single_command(run_id)
        notes: dict[str, tuple[str, str]] = {}
        for rev in revs:
            if rev.trigger != "restore":
                continue
            if rev.id not in self._restores:
                try:
                    self._restores[rev.id] = restore_note(vault, rev.id)
                except CairnError:
                    self._restores[rev.id] = None
            note = self._restores[rev.id]
            if note is not None:
                notes[rev.id] = note
        return history.describe(
            revs,
            {r.id: self._paths.get(r.id, []) for r in revs},
            run_activities=acts,
            restores=notes,
        )

    def _single_command(self, run_id: str) -> list[Activity]:
        """A shell run of one command prints no step header (its output stays as printed): its
        one activity is that command, from the run's start."""
        try:
            run = self.ctx.store.get_run(run_id)
        except CairnError:
            return []
        commands = run.spec.get("commands") if isinstance(run.spec, dict) else None
        if run.engine != "shell" or not isinstance(commands, list) or len(commands) != 1:
            return []
        label = f"step 1/1: {history.clip(str(commands[0]))}"
        return [Activity(run_id, run.created_at, "step", "step:1", label)]

    def _run_activities(self, run_id: str) -> list[Activity]:
        """The run's steps and tool calls; its output is read once, what was added since the
        last call each time after that."""
        with self._readers_lock:
            return self._read_activities(run_id)

    def _read_activities(self, run_id: str) -> list[Activity]:
        reader, last = self._readers.get(run_id) or (history.ActivityReader(run_id), 0)
        rows = self.ctx.store.query(
            "SELECT seq, kind, payload, created_at FROM events WHERE subject = ? AND kind IN "
            "(?, ?) AND seq > ? ORDER BY seq",
            (run_id, ev.RUN_OUTPUT, ev.RUN_RESUMED, last),
        )
        if rows:
            reader.feed(
                records_from_events(
                    (row["kind"], json.loads(row["payload"]), row["created_at"]) for row in rows
                )
            )
            last = rows[-1]["seq"]
        self._readers[run_id] = (reader, last)
        return reader.activities()

    def markers(self, task_ref: str) -> list[Marker]:
        """Checkpoints, snapshots, approvals and forks of the task's workspace, each at the
        revision it belongs to, oldest first."""
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        revs = self.ctx.store.list_revisions(ws.id)
        known = {r.id for r in revs}
        out: list[Marker] = []
        runs = self.ctx.store.query(
            "SELECT id FROM runs WHERE workspace_id = ? OR task_id IN "
            "(SELECT id FROM tasks WHERE workspace_id = ?)",
            (ws.id, ws.id),
        )
        run_ids = [r["id"] for r in runs]
        snapshots = {s.id: s for s in self.ctx.store.list_snapshots(ws.id)}
        checkpointed: set[str] = set()
        for run_id in run_ids:
            for cp in self.ctx.store.list_checkpoints(run_id):
                snap = snapshots.get(cp.snapshot_id)
                if snap is None or snap.revision_id not in known:
                    continue
                checkpointed.add(snap.id)
                pending = cp.pending_step or ""
                # A shell run notes the 0-based index of the step it had not finished.
                step = (
                    f" before step {int(pending) + 1}"
                    if pending.isdigit()
                    else f" before {pending}"
                    if pending
                    else ""
                )
                out.append(
                    Marker(
                        "checkpoint",
                        cp.created_at,
                        snap.revision_id,
                        f"checkpoint of run {run_id}{step}",
                        cp.id,
                    )
                )
        for snap in snapshots.values():
            if snap.id in checkpointed or snap.revision_id not in known:
                continue
            out.append(
                Marker(
                    "snapshot",
                    snap.created_at,
                    snap.revision_id,
                    f"snapshot {snap.name}" if snap.name else f"snapshot {snap.id}",
                    snap.id,
                )
            )
        if run_ids and revs:
            marks = ",".join("?" * len(run_ids))
            rows = self.ctx.store.query(
                f"SELECT id, command, state, created_at FROM approvals WHERE run_id IN ({marks}) "
                "ORDER BY created_at",
                tuple(run_ids),
            )
            for row in rows:
                rev = history.revision_at(revs, row["created_at"])
                if rev is None:
                    continue
                out.append(
                    Marker(
                        "approval",
                        row["created_at"],
                        rev.id,
                        f"approval ({row['state']}): {history.clip(row['command'], 60)}",
                        row["id"],
                    )
                )
        for child in self.ctx.store.list_tasks():
            if child.parent_task_id != task.id or child.from_revision not in known:
                continue
            out.append(
                Marker(
                    "fork",
                    child.created_at,
                    child.from_revision or "",
                    f"fork: {child.title}",
                    child.id,
                )
            )
        out.sort(key=lambda m: m.at)
        return out

    # -- tokens and cost --------------------------------------------------------------------------

    def usage(self, task_ref: str) -> dict[str, Any]:
        """What a task's runs used of their model: each run, the task's sum, and the sum over
        its whole lineage with each task's share (for `cairnctl cost TASK`, `cairnctl show` and
        the task view)."""
        task = self.ctx.task(task_ref)
        root = lineage.root_of(self.ctx.store, task.id)
        members = lineage.members(self.ctx.store, root)
        runs = self.ctx.store.runs_of([t.id for t in members])
        per_run = self.run_usages(runs)
        mine = [r for r in runs if r.task_id == task.id]
        return {
            "task_id": task.id,
            "lineage_root": root,
            "runs": [_run_usage_json(r, per_run[r.id]) for r in mine],
            "task": total(per_run[r.id] for r in mine).to_json(),
            "lineage": total(per_run.values()).to_json(),
            "lineage_tasks": _task_rows(members, runs, per_run),
        }

    def usage_all(self) -> dict[str, Any]:
        """Every task's usage and the sum over all of them (`cairnctl cost` without a task)."""
        tasks = self.ctx.store.list_tasks()
        runs = self.ctx.store.runs_of([t.id for t in tasks])
        per_run = self.run_usages(runs)
        return {
            "tasks": _task_rows(tasks, runs, per_run),
            "total": total(per_run.values()).to_json(),
        }

    def run_usages(self, runs: list[Run]) -> dict[str, Usage]:
        """Each run's usage. An ended run's is read from its record, or made from its stored
        output and recorded; a run in flight is counted anew each time. Runs are taken in the
        order they were made, so a run that continues an engine session starts from the
        session's figures as the earlier runs left them."""
        runs = sorted(runs, key=lambda r: (r.created_at, r.id))
        recorded = self._recorded_usage([r.id for r in runs])
        missing = [r.id for r in runs if r.id not in recorded]
        outputs = self._stdout_chunks(missing)
        prices: dict[str, dict[str, float]] | None = None
        threads: dict[str, Tokens] = {}
        out: dict[str, Usage] = {}
        for run in runs:
            if run.id in recorded:
                out[run.id], sessions = recorded[run.id]
            else:
                if prices is None:
                    prices = read_prices(settings_path(self.ctx.data.root))
                out[run.id], sessions = usage_of_output(
                    run.engine,
                    outputs.get(run.id, []),
                    prices=prices,
                    model=self._configured_model(run.engine),
                    threads=threads,
                    parent_session=run.spec.get("session_id"),
                )
                if run.state not in IN_FLIGHT:
                    self._record_usage(run, out[run.id], sessions)
            threads.update(sessions)
        return out

    def _configured_model(self, engine: str) -> str | None:
        section = read_settings(settings_path(self.ctx.data.root)).get(ENGINES_SECTION)
        settings = section.get(engine) if isinstance(section, dict) else None
        model = settings.get("model") if isinstance(settings, dict) else None
        return str(model) if model else DEFAULT_MODELS.get(engine)

    def _recorded_usage(self, run_ids: list[str]) -> dict[str, tuple[Usage, dict[str, Tokens]]]:
        found = {}
        for chunk in _chunks(run_ids):
            marks = ",".join("?" * len(chunk))
            for row in self.ctx.store.query(
                f"SELECT * FROM run_usage WHERE run_id IN ({marks})", tuple(chunk)
            ):
                data = dict(row)
                extra = json.loads(data.pop("sessions") or "{}")
                data.update(models=json.loads(data["models"]), runs=1)
                data["unpriced_tokens"] = extra.get("unpriced_tokens", 0)
                found[row["run_id"]] = (Usage.from_json(data), extra.get("threads", {}))
        return found

    def _record_usage(self, run: Run, used: Usage, sessions: dict) -> None:
        figures = used.to_json()
        with self.ctx.store.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO run_usage (run_id, engine, models, input_tokens, "
                "output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, cost_source, "
                "sessions, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.id,
                    run.engine,
                    json.dumps(figures["models"]),
                    used.input_tokens,
                    used.output_tokens,
                    used.cache_read_tokens,
                    used.cache_write_tokens,
                    used.cost_usd,
                    figures["cost_source"],
                    json.dumps(
                        {"threads": sessions, "unpriced_tokens": used.unpriced_tokens},
                        sort_keys=True,
                    ),
                    time.time(),
                ),
            )

    def _stdout_chunks(self, run_ids: list[str]) -> dict[str, list[str]]:
        """Each run's stdout as it was stored, chunk by chunk."""
        out: dict[str, list[str]] = {}
        for chunk in _chunks(run_ids):
            marks = ",".join("?" * len(chunk))
            for row in self.ctx.store.query(
                f"SELECT subject, payload FROM events WHERE kind = ? AND subject IN ({marks}) "
                "ORDER BY seq",
                (ev.RUN_OUTPUT, *chunk),
            ):
                payload = json.loads(row["payload"])
                if payload.get("stream") == "stdout":
                    out.setdefault(row["subject"], []).append(str(payload.get("text") or ""))
        return out


def _chunks(items: list[str], size: int = 500) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _run_usage_json(run: Run, used: Usage) -> dict[str, Any]:
    return {
        "run_id": run.id,
        "task_id": run.task_id,
        "engine": run.engine,
        "state": run.state,
        "in_flight": run.state in IN_FLIGHT,
        "created_at": run.created_at,
        **used.to_json(),
    }


def _task_rows(
    tasks: list[Task], runs: list[Run], per_run: dict[str, Usage]
) -> list[dict[str, Any]]:
    by_task: dict[str, list[Usage]] = {}
    for run in runs:
        by_task.setdefault(run.task_id, []).append(per_run[run.id])
    return [
        {
            "task_id": t.id,
            "title": t.title,
            "engine": t.engine,
            "parent_task_id": t.parent_task_id,
            **total(by_task.get(t.id, [])).to_json(),
        }
        for t in tasks
    ]


def revision_json(rev: Revision) -> dict:
    return {
        "id": rev.id,
        "seq": rev.seq,
        "parent": rev.parent_id,
        "tree": rev.tree,
        "trigger": rev.trigger,
        "run_id": rev.run_id,
        "created_at": rev.created_at,
        "files_changed": rev.files_changed,
    }


def snapshot_json(snap: Snapshot) -> dict:
    return {
        "snapshot_id": snap.id,
        "name": snap.name,
        "workspace_id": snap.workspace_id,
        "revision": snap.revision_id,
        "tree": snap.tree,
        "state": snap.state,
        "created_at": snap.created_at,
        "image_digest": snap.image_digest,
        "setup_command": snap.setup_command,
        "engine_home_archive": snap.engine_home_archive,
    }


def described_json(d: Described) -> dict:
    """A revision with what produced it, for `cairnctl revisions --json`."""
    act = d.activity
    return {
        **revision_json(d.revision),
        "description": d.description,
        "what": d.what,
        "paths": list(d.paths),
        "activity": (
            {"kind": act.kind, "key": act.key, "label": act.label, "at": act.at} if act else None
        ),
    }


def marker_json(m: Marker) -> dict:
    return {"kind": m.kind, "at": m.at, "revision": m.revision_id, "label": m.label, "id": m.ref}
