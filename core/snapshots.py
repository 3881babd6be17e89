"""Snapshots: durable, restorable references to revisions, and restoring them.

Owns the snapshot write order (objects synced, then the ref, then the row), snapshots' names,
materializing a snapshot into a folder or a workspace with its tree verified, and making a new
workspace from any revision. Recording the revisions themselves is core.revisions'; checkpoints
are core.runs'.
"""

from __future__ import annotations

import time
from pathlib import Path

from core import events as ev
from core import workspaces
from core.context import Context
from core.errors import CorruptSnapshot, InputError, NotFound
from core.ids import new_id
from core.models import Revision, Snapshot, Task, Workspace, WorkspaceState
from core.revisions import Revisions
from core.vault import Vault, base_ref, revisions_ref, sizes, snapshot_ref
from core.vault.materialize import materialize
from core.vault.tree_index import Looked

MAX_NAME = 80


def check_name(name: str | None) -> str | None:
    """A snapshot's name as stored: one line with its spaces collapsed, at most MAX_NAME
    characters; blank or None removes the name."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise InputError(f"a snapshot's name is text, not {type(name).__name__}")
    name = " ".join(name.split())
    if len(name) > MAX_NAME:
        raise InputError(f"a snapshot's name takes at most {MAX_NAME} characters")
    return name or None


class Snapshots:
    """A data folder's snapshots. Thread-safe; long operations block the caller."""

    def __init__(self, ctx: Context, revisions: Revisions):
        self.ctx = ctx
        self.revisions = revisions

    def take(self, task_ref: str, *, name: str | None = None) -> Snapshot:
        """Capture, make the objects durable, then write the snapshot ref and row; with `name`,
        the snapshot gets that name (a revision's existing snapshot is renamed).

        A workspace this process watches is captured from its watcher's pending paths: when its
        latest revision already holds the files, a snapshot is a sync and a ref. Otherwise the
        capture is a full, verifying one."""
        name = check_name(name)
        task = self.ctx.task(task_ref)
        rev, _ = self.revisions.capture(task.id, trigger="checkpoint", verify=False)
        snap = self.make(task.id, rev)
        return self.rename(snap.id, name) if name else snap

    def of_latest_revision(self, task_ref: str) -> Snapshot:
        """A durable snapshot of the workspace's latest recorded revision, without a capture
        first (a revision with a snapshot keeps it). For a new sandbox session, whose run's
        checkpoint captures in full right after: the pass over the tree is that capture's."""
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        self.revisions.sync_rows(ws)
        latest = self.ctx.store.latest_revision(ws.id)
        if latest is None:
            return self.take(task.id)
        return self.make(task.id, latest)

    def get(self, snapshot_ref: str) -> Snapshot:
        """A snapshot by its id, an unambiguous prefix of it, or its name when one snapshot
        has that name."""
        try:
            return self.ctx.store.find_snapshot(snapshot_ref)
        except NotFound:
            rows = self.ctx.store.query("SELECT id FROM snapshots WHERE name = ?", (snapshot_ref,))
            if len(rows) == 1:
                return self.ctx.store.get_snapshot(rows[0]["id"])
            if len(rows) > 1:
                raise NotFound(
                    f"{len(rows)} snapshots are named {snapshot_ref!r}; give the id"
                ) from None
            raise

    def rename(self, snapshot_ref: str, name: str | None) -> Snapshot:
        """Give a snapshot a name, another one, or (blank or None) none."""
        snap = self.get(snapshot_ref)
        name = check_name(name)
        if name != snap.name:
            with self.ctx.store.transaction() as conn:
                conn.execute("UPDATE snapshots SET name = ? WHERE id = ?", (name, snap.id))
            self.ctx.events.publish(
                ev.SNAPSHOT_RENAMED, snap.workspace_id, snapshot=snap.id, name=name
            )
        return self.ctx.store.get_snapshot(snap.id)

    def make(self, task_id: str, rev: Revision) -> Snapshot:
        """A durable snapshot of a recorded revision: objects synced, then ref, then row. A
        revision that already has a restorable snapshot keeps that one."""
        ws = self.ctx.workspace_of(self.ctx.task(task_id))
        vault = self.ctx.vault_for(ws.source_id)
        for known in reversed(self.ctx.store.list_snapshots(ws.id)):
            if (
                known.revision_id == rev.id
                and vault.objects.read_ref(snapshot_ref(known.id)) == rev.id
            ):
                return known
        snap = Snapshot(
            new_id("snapshot"), ws.id, rev.id, rev.tree, "durable", created_at=time.time()
        )
        vault.objects.sync_commit(rev.id)
        vault.objects.update_ref(snapshot_ref(snap.id), rev.id, durable=True)
        self.ctx.store.add_snapshot(snap)
        self.ctx.events.publish(ev.SNAPSHOT_CREATED, ws.id, snapshot=snap.id, revision=rev.id)
        return snap

    def all(self, task_ref: str | None = None) -> list[Snapshot]:
        if task_ref is None:
            return self.ctx.store.list_snapshots()
        return self.ctx.store.list_snapshots(self.ctx.workspace_of(self.ctx.task(task_ref)).id)

    def materialize(self, snapshot_id: str, dest: str | Path) -> tuple[Path, str]:
        """Restore a snapshot's files into a new folder; returns the folder and its tree id."""
        snap = self.get(snapshot_id)
        target = Path(dest).expanduser().absolute()
        if target.exists() or target.is_symlink():
            raise InputError(f"{target} already exists; give a folder that does not exist yet")
        if self.ctx.data.contains(target):
            raise InputError(f"{target} is inside Cairn's data folder; choose a folder outside it")
        if not target.parent.is_dir():
            raise InputError(f"the folder {target.parent} does not exist")
        ws = self.ctx.store.get_workspace(snap.workspace_id)
        vault = self.ctx.vault_for(ws.source_id)
        commit = self.snapshot_commit(vault, snap)
        tree = materialize(vault, commit, target, label=f"snapshot {snap.id}")
        if tree != snap.tree:
            workspaces.remove_tree(target)
            raise CorruptSnapshot(
                f"snapshot {snap.id} cannot be restored: its files do not hash to the recorded tree"
            )
        return target, tree

    def restore_workspace(self, ws: Workspace, snapshot_id: str) -> str:
        """Materialize a snapshot where a workspace's folder went missing; returns the tree."""
        snap = self.ctx.store.get_snapshot(snapshot_id)
        vault = self.ctx.vault_for(ws.source_id)
        commit = self.snapshot_commit(vault, snap)
        root = Path(ws.root)
        root.parent.mkdir(parents=True, exist_ok=True)
        tree = workspaces.create_tree(
            vault,
            commit,
            root,
            branch=ws.branch,
            head_commit=ws.head_commit,
            label=f"snapshot {snap.id}",
        )
        if tree != snap.tree:
            workspaces.remove_tree(root)
            raise CorruptSnapshot(
                f"snapshot {snap.id} cannot be restored: its files do not hash to the recorded tree"
            )
        task = next(t for t in self.ctx.store.list_tasks() if t.workspace_id == ws.id)
        self.revisions.capture(task.id, trigger="restore")
        return tree

    def restore_into_new_workspace(self, task: Task, old: Workspace, snapshot_id: str) -> Workspace:
        """Give the task a new workspace made from a snapshot; the old one is kept, frozen."""
        snap = self.ctx.store.get_snapshot(snapshot_id)
        commit = self.snapshot_commit(self.ctx.vault_for(old.source_id), snap)
        ws = self.workspace_from_revision(
            old,
            commit,
            snap.tree,
            branch=old.branch,
            trigger="restore",
            label=f"snapshot {snap.id}",
            task_id=task.id,
        )
        if old.state in (WorkspaceState.PREPARED.value, WorkspaceState.ACTIVE.value):
            self.ctx.set_workspace_state(old.id, WorkspaceState.FROZEN)
        return ws

    def workspace_from_revision(
        self,
        old: Workspace,
        commit: str,
        tree: str,
        *,
        branch: str,
        trigger: str,
        label: str,
        task_id: str | None = None,
    ) -> Workspace:
        """A new workspace of `old`'s source folder and policy, materialized from `commit`; on
        failure nothing of it is left. Given `task_id`, that task moves into it."""
        vault = self.ctx.vault_for(old.source_id)
        ws_id = new_id("workspace")
        root = self.ctx.data.workspace_path(ws_id)
        now = time.time()
        ws = Workspace(
            ws_id,
            old.source_id,
            str(root),
            commit,
            old.head_commit,
            branch,
            None,
            WorkspaceState.ALLOCATED.value,
            policy=dict(old.policy),
            mounts=list(old.mounts),
            quota_bytes=old.quota_bytes,
            expires_at=old.expires_at,
            created_at=now,
            updated_at=now,
        )
        self.ctx.store.add_workspace(ws)
        try:
            looked = Looked()
            workspaces.create_tree(
                vault,
                commit,
                root,
                branch=branch,
                head_commit=old.head_commit,
                label=label,
                looked=looked,
            )
            vault.objects.update_ref(base_ref(ws_id), commit)
            vault.objects.update_ref(revisions_ref(ws_id), commit)
            self.revisions.seed_stat_cache(ws_id, root, commit, looked=looked)
        except BaseException:
            workspaces.remove_tree(root)
            self.ctx.store.delete_workspace_rows(ws_id)
            raise
        with self.ctx.store.transaction():
            self.ctx.store.add_revision(Revision(commit, ws_id, None, tree, trigger, None, 0, now))
            self.ctx.store.update_workspace(ws_id, state=WorkspaceState.PREPARED.value)
            if task_id is not None:
                self.ctx.store.update_task(task_id, workspace_id=ws_id)
        return self.ctx.store.get_workspace(ws_id)

    def snapshot_commit(self, vault: Vault, snap: Snapshot) -> str:
        commit = vault.objects.read_ref(snapshot_ref(snap.id))
        if commit is None:
            raise CorruptSnapshot(
                f"snapshot {snap.id} cannot be restored: its reference is missing from the vault"
            )
        if commit != snap.revision_id:
            raise CorruptSnapshot(
                f"snapshot {snap.id} cannot be restored: its reference points "
                f"at {commit[:12]}, not at the recorded {snap.revision_id[:12]}"
            )
        return commit


def tree_size(vault: Vault, tree: str, *, near: str | None = None) -> int:
    """A tree's bytes (`status()` asks for every snapshot and sandbox each time): from the
    vault's memo, else counted from `near` (a tree whose size may be known, the workspace's
    base) and what differs, else from every blob (see core.vault.sizes)."""
    return sizes.tree_bytes(vault.git_dir, tree, near=near)
