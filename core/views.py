"""Views: the plain-data projections of core's objects that the CLI and the GUI both show.

Owns turning tasks, revisions, snapshots and sandbox sessions into JSON-ready dicts (`cairnctl
... --json` prints them as they are; the GUI reads its rows from them), so both adapters say the
same thing. Nothing here changes state.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from core import workspaces
from core.context import Context
from core.errors import CairnError
from core.models import Revision, Snapshot
from core.revisions import Revisions
from core.runs.liveness import Sandboxes
from core.sandbox import egress
from core.snapshots import tree_size
from core.vault import snapshot_ref


class Views:
    def __init__(self, ctx: Context, *, revisions: Revisions, sandboxes: Sandboxes):
        self.ctx = ctx
        self.revisions = revisions
        self._sandboxes = sandboxes

    def session_stats(self, session_id: str) -> dict[str, Any]:
        """Live figures of one sandbox (see SandboxManager.session_stats); about a second."""
        return self._sandboxes.get().session_stats(session_id)

    def _workspace_size(self, workspace_id: str) -> int | None:
        """Bytes of the workspace's latest revision (what a restore would write)."""
        rev = self.ctx.store.latest_revision(workspace_id)
        if rev is None:
            return None
        ws = self.ctx.store.get_workspace(workspace_id)
        try:
            return tree_size(self.ctx.vault_for(ws.source_id), rev.tree)
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
        try:
            found = {s.container_id: s for s in self._sandboxes.get().backend.list_sessions()}
            problem = None
        except CairnError as exc:
            found, problem = {}, str(exc)
        for rec in self.ctx.store.list_sessions():
            summary = found.get(rec.container_id) if rec.container_id else None
            state = (
                "unknown"
                if problem
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
            vault = self.ctx.vault_for(ws.source_id)
            present = vault.objects.read_ref(snapshot_ref(snap.id)) == snap.revision_id
            snaps.append(
                {
                    **snapshot_json(snap),
                    "age_s": time.time() - snap.created_at,
                    "size": tree_size(vault, snap.tree) if present else None,
                    "restorable": present,
                }
            )
        return {"sessions": sessions, "snapshots": snaps, "problem": problem}

    def task_details(self, task_ref: str) -> dict:
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        revs = self.revisions.all(task.id)
        return {
            "task_id": task.id,
            "title": task.title,
            "engine": task.engine,
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
        "workspace_id": snap.workspace_id,
        "revision": snap.revision_id,
        "tree": snap.tree,
        "state": snap.state,
        "created_at": snap.created_at,
        "image_digest": snap.image_digest,
        "setup_command": snap.setup_command,
        "engine_home_archive": snap.engine_home_archive,
    }
