"""The facade: the one object the GUI and `cairnctl` call to reach everything in core.

Owns the order of operations across the store, vaults, workspaces and recorders (what is created
first, what is undone on failure); each of those modules owns its own details.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core import events as ev
from core import runs as runs_mod
from core import workspaces
from core.datadir import DataDir
from core.diffs import Diff, diff_revisions
from core.errors import (
    CairnError,
    Conflict,
    CorruptSnapshot,
    InputError,
    NotFound,
    QuotaExceeded,
    VaultError,
)
from core.ids import new_id
from core.locks import FileLock, held, lock_path
from core.models import (
    Revision,
    Run,
    RunState,
    Snapshot,
    Source,
    Task,
    TaskSource,
    Workspace,
    WorkspaceState,
)
from core.policy import Policy
from core.store import Store
from core.vault import Vault, base_ref, revisions_ref, snapshot_ref
from core.vault.importer import check_importable, import_folder
from core.vault.materialize import materialize
from core.watch import CapturedRevision, Recorder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NewTask:
    task: Task
    workspace: Workspace
    base_revision: str


class Cairn:
    """Cairn's domain behind one object. Thread-safe; long operations block the caller."""

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        backend: object | None = None,
        image: str | None = None,
        secrets: object | None = None,
        captures_in_child: bool = False,
    ):
        """`captures_in_child`: one-off captures (checkpoints, snapshots) of a workspace this
        process does not watch run in a child process, so a big tree's walk and index never
        compete with this process's other threads for the interpreter (the desktop app)."""
        self.data = DataDir.resolve(data_dir)
        self._captures_in_child = captures_in_child
        try:
            self.data.ensure()
        except OSError as exc:
            raise CairnError(
                f"cannot use the data folder {self.data.root}: {exc.strerror}"
            ) from exc
        self.store = Store(self.data.db_path)
        self.events = ev.EventBus(self.store.append_event)
        self._vaults: dict[str, Vault] = {}
        self._recorders: dict[str, tuple[Recorder, FileLock]] = {}
        self._lock = threading.RLock()
        self._backend = backend
        self._image = image
        self._secrets = secrets
        self._sandboxes = None
        self._credentials = None
        from core.resume import RunService

        self.runs = RunService(self)

    # -- services made on first use (so commands that need no Docker or keyring never touch them)

    @property
    def sandboxes(self):
        from core.sandboxes import SandboxManager

        with self._lock:
            if self._sandboxes is None:
                import os

                image = (
                    self._image
                    or os.environ.get("CAIRN_SANDBOX_IMAGE")
                    or self.defaults().get("image")
                )
                self._sandboxes = SandboxManager(
                    self.data, self.store, self._backend or _default_backend(self.data), image
                )
            return self._sandboxes

    def reset_sandboxes(self) -> None:
        """Forget the sandbox manager, so the next use makes a new one from the current settings
        (backend and image); sessions and containers are not touched."""
        with self._lock:
            self._sandboxes = None

    @property
    def credentials(self):
        from core.credentials import Credentials, SecretStore

        with self._lock:
            if self._credentials is None:
                self._credentials = Credentials(self.store, self._secrets or SecretStore())
            return self._credentials

    def close(self) -> None:
        with self._lock:
            for ws_id in list(self._recorders):
                self.stop_watching(ws_id)
            for vault in self._vaults.values():
                vault.close()
            self._vaults.clear()
        self.store.close()

    def __enter__(self) -> Cairn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lookups -------------------------------------------------------------------------------

    def vault_for(self, source_id: str) -> Vault:
        with self._lock:
            vault = self._vaults.get(source_id)
            if vault is None:
                source = self.store.get_source(source_id)
                try:
                    vault = Vault(Path(source.vault_path))
                except VaultError as exc:
                    raise CairnError(
                        f"the vault of {source.path} is missing ({source.vault_path})"
                    ) from exc
                self._vaults[source_id] = vault
            return vault

    def task(self, ref: str) -> Task:
        return self.store.find_task(ref)

    def tasks(self) -> list[Task]:
        return self.store.list_tasks()

    def workspace_of(self, task: Task) -> Workspace:
        if not task.workspace_id:
            raise CairnError(f"task {task.id} has no workspace")
        return self.store.get_workspace(task.workspace_id)

    def revisions(self, task_ref: str) -> list[Revision]:
        task = self.task(task_ref)
        ws = self.workspace_of(task)
        self._sync_revision_rows(ws)
        return self.store.list_revisions(ws.id)

    def resolve_revision(self, task: Task, ref: str | None, *, default: str = "latest") -> Revision:
        """`ref` is a revision id (or unambiguous prefix), `base`, `latest`, or `TASK:REV` to name a
        revision of another task of the same source folder."""
        ref = ref or default
        if ":" in ref:
            other_ref, _, rev = ref.partition(":")
            other = self.task(other_ref)
            if other.source_id != task.source_id:
                raise InputError(
                    f"task {other.id} grew from another folder than {task.id}; "
                    "diffs compare tasks of one source folder"
                )
            return self.resolve_revision(other, rev or default)
        ws = self.workspace_of(task)
        self._sync_revision_rows(ws)
        if ref == "latest":
            rev = self.store.latest_revision(ws.id)
            if rev is None:
                raise NotFound(f"task {task.id} has no revisions")
            return rev
        if ref == "base":
            return self.store.get_revision(ws.id, ws.base_revision)
        return self.store.get_revision(ws.id, ref)

    # -- new task ------------------------------------------------------------------------------

    def new_task(
        self,
        path: str | Path,
        *,
        title: str | None = None,
        engine: str | None = None,
        instructions: str = "",
        quota_bytes: int | None = None,
        expires_in: float | None = None,
        policy: Policy | None = None,
    ) -> NewTask:
        """Import a folder into its vault and give a new task a workspace made from it.

        Without `engine` or `policy`, the settings' defaults apply (`defaults.engine`, else the
        shell engine; `defaults.network` and `defaults.allow`, else no network).
        Bad input is refused before anything is written; a failure later undoes what was made.
        """
        from core.engines import engine_for
        from core.settings import default_policy

        defaults = self.defaults() if engine is None or policy is None else {}
        engine = engine or defaults.get("engine") or "shell"
        engine_for(engine)  # an unknown engine is refused before anything is made
        policy = policy or default_policy(defaults)
        folder = check_importable(Path(path), self.data)
        with held(
            self.data.locks_root,
            "import",
            str(folder),
            f"{folder} is already being imported by another Cairn process",
        ):
            return self._new_task_locked(
                folder,
                title or folder.name,
                engine,
                instructions,
                quota_bytes,
                expires_in,
                (policy or Policy()).validate(),
            )

    def _new_task_locked(
        self,
        folder: Path,
        title: str,
        engine: str,
        instructions: str,
        quota_bytes: int | None,
        expires_in: float | None,
        policy: Policy,
    ) -> NewTask:
        source = self.store.source_by_path(str(folder))
        new_source = source is None
        if source is None:
            source_id = new_id("source")
            source = Source(
                source_id, str(folder), "plain", str(self.data.vault_path(source_id)), time.time()
            )
        vault_path = Path(source.vault_path)
        vault_created = not (vault_path / "objects").is_dir()
        vault = Vault.open_or_create(vault_path)
        task_id, ws_id = new_id("task"), new_id("workspace")
        root = self.data.workspace_path(ws_id)
        try:
            result = import_folder(vault, folder)
            source.kind = result.kind
            now = time.time()
            ws = Workspace(
                ws_id,
                source.id,
                str(root),
                result.base_commit,
                result.head_commit,
                workspaces.branch_name(title, task_id),
                None,
                WorkspaceState.ALLOCATED.value,
                policy=policy.to_dict(),
                quota_bytes=quota_bytes,
                expires_at=now + expires_in if expires_in else None,
                created_at=now,
                updated_at=now,
            )
            with self.store.transaction():
                if new_source:
                    self.store.add_source(source)
                self.store.add_workspace(ws)
            workspaces.create_tree(
                vault,
                result.base_commit,
                root,
                branch=ws.branch,
                head_commit=result.head_commit,
                label=f"the base of {folder}",
            )
            vault.objects.update_ref(base_ref(ws_id), result.base_commit)
            vault.objects.update_ref(revisions_ref(ws_id), result.base_commit)
            task = Task(
                task_id,
                title,
                source.id,
                ws_id,
                engine,
                instructions,
                None,
                TaskSource.NEW.value,
                None,
                now,
            )
            workspaces.check_transition(ws.state, WorkspaceState.PREPARED.value)
            with self.store.transaction():
                self.store.add_task(task)
                self.store.add_revision(
                    Revision(
                        result.base_commit,
                        ws_id,
                        None,
                        result.base_tree,
                        "base",
                        None,
                        result.files,
                        now,
                    )
                )
                self.store.update_workspace(ws_id, state=WorkspaceState.PREPARED.value)
        except BaseException:
            self._undo_new_task(
                vault, ws_id, task_id, root, source if new_source else None, vault_created
            )
            raise
        with self._lock:
            self._vaults.setdefault(source.id, vault)
        ws = self.store.get_workspace(ws_id)
        self.events.publish(ev.TASK_CREATED, task_id, workspace_id=ws_id, source=str(folder))
        return NewTask(task, ws, result.base_commit)

    def _undo_new_task(
        self,
        vault: Vault,
        ws_id: str,
        task_id: str,
        root: Path,
        new_source: Source | None,
        vault_created: bool,
    ) -> None:
        workspaces.remove_tree(root)
        for ref in (base_ref(ws_id), revisions_ref(ws_id)):
            try:
                if vault.objects.read_ref(ref):
                    vault.objects.delete_ref(ref)
            except CairnError:
                pass
        try:
            with self.store.transaction() as conn:
                conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
                self.store.delete_workspace_rows(ws_id)
                if new_source is not None:
                    conn.execute("DELETE FROM sources WHERE id = ?", (new_source.id,))
        except Exception:  # pragma: no cover - the original error matters more
            log.exception("could not undo the rows of a failed import")
        if vault_created:
            vault.close()
            shutil.rmtree(vault.git_dir, ignore_errors=True)

    # -- revisions -----------------------------------------------------------------------------

    def _sync_revision_rows(self, ws: Workspace) -> None:
        """Add rows for revisions the vault has and the store lacks (a crash between the two)."""
        source_vault = self.vault_for(ws.source_id)
        head = source_vault.revision_head(ws.id)
        if head is None or head == ws.current_revision:
            return
        known = {r.id for r in self.store.list_revisions(ws.id)}
        for info in source_vault.revision_chain(ws.id, stop_at=known):
            c = info.commit
            self.store.add_revision(
                Revision(
                    c.sha,
                    ws.id,
                    c.parents[0] if c.parents else None,
                    c.tree,
                    info.trigger,
                    info.run_id,
                    info.files_changed,
                    float(c.timestamp),
                )
            )

    def _record(self, ws: Workspace, captured: CapturedRevision) -> Revision:
        rev = self.store.add_revision(
            Revision(
                captured.commit,
                ws.id,
                captured.parent,
                captured.tree,
                captured.trigger,
                captured.run_id,
                captured.files_changed,
                captured.created_at,
            )
        )
        self.events.publish(
            ev.REVISION_RECORDED,
            ws.id,
            revision=rev.id,
            trigger=rev.trigger,
            files_changed=rev.files_changed,
            run_id=rev.run_id,
        )
        return rev

    def _recorder(
        self, ws: Workspace, *, on_problem: Callable[[str], None] | None = None
    ) -> Recorder:
        vault = self.vault_for(ws.source_id)

        def problem(message: str) -> None:
            self.events.publish(ev.WORKSPACE_PROBLEM, ws.id, message=message)
            if on_problem:
                on_problem(message)

        return Recorder(
            vault,
            ws.id,
            Path(ws.root),
            on_revision=lambda c: self._record(ws, c),
            on_problem=problem,
            run_id=lambda: self.active_run_id(ws.id),
            stat_cache=self.data.cache_root / f"{ws.id}.stat",
        )

    def active_run_id(self, workspace_id: str) -> str | None:
        """The run in flight in a workspace: its edits are stamped with its id."""
        row = self.store.query_one(
            f"SELECT id FROM runs WHERE workspace_id = ? AND state IN "
            f"({','.join('?' * len(runs_mod.IN_FLIGHT))}) ORDER BY created_at DESC LIMIT 1",
            (workspace_id, *runs_mod.IN_FLIGHT),
        )
        return row["id"] if row else None

    def watch(self, task_ref: str, *, on_problem: Callable[[str], None] | None = None) -> Recorder:
        """Start recording a task's workspace as it changes; returns the running recorder."""
        task = self.task(task_ref)
        ws = self.workspace_of(task)
        with self._lock:
            if ws.id in self._recorders:
                return self._recorders[ws.id][0]
            workspaces.require_tree(ws)
            self._sync_revision_rows(ws)
            lock = FileLock(lock_path(self.data.locks_root, "watch", ws.id))
            if not lock.try_acquire():
                pid = lock.holder_pid()
                raise Conflict(
                    f"workspace {ws.id} is already being recorded by another Cairn "
                    f"process{f' ({pid})' if pid else ''}"
                )
            recorder = self._recorder(ws, on_problem=on_problem)
            try:
                recorder.start()
            except BaseException:
                lock.release()
                raise
            self._recorders[ws.id] = (recorder, lock)
            return recorder

    def stop_watching(self, workspace_id: str) -> None:
        with self._lock:
            entry = self._recorders.pop(workspace_id, None)
        if entry:
            recorder, lock = entry
            try:
                recorder.stop()
            finally:
                lock.release()

    def capture(
        self, task_ref: str, *, trigger: str = "manual", run_id: str | None = None
    ) -> tuple[Revision, bool]:
        """A full, verifying capture now. Returns the latest revision and whether it is new."""
        task = self.task(task_ref)
        ws = self.workspace_of(task)
        workspaces.require_tree(ws)
        with self._lock:
            entry = self._recorders.get(ws.id)
        if entry is not None:
            captured = entry[0].capture(trigger, full=True, run_id=run_id)
        elif self._captures_in_child:
            return self._capture_in_child(task, ws, trigger, run_id)
        else:
            self._sync_revision_rows(ws)
            recorder = self._recorder(ws)
            try:
                captured = recorder.capture(trigger, full=True, run_id=run_id)
            finally:
                recorder.stop()
        self._check_quota(ws)
        if captured is not None:
            return self.store.get_revision(ws.id, captured.commit), True
        self._sync_revision_rows(ws)
        latest = self.store.latest_revision(ws.id)
        assert latest is not None
        return latest, False

    def _capture_in_child(
        self, task: Task, ws: Workspace, trigger: str, run_id: str | None
    ) -> tuple[Revision, bool]:
        """`capture` by `cairnctl capture` in a child process; its revision is announced here."""
        from core.launch import python_command

        argv = python_command(
            "core.cli",
            "--data-dir",
            str(self.data.root),
            "capture",
            task.id,
            "--trigger",
            trigger,
            "--json",
        )
        if run_id:
            argv += ["--run", run_id]
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            raise CairnError(
                lines[-1].removeprefix("cairnctl: ")
                if lines
                else f"the capture of {ws.root} failed (exit code {proc.returncode})"
            )
        out = json.loads(proc.stdout)
        self._sync_revision_rows(self.store.get_workspace(ws.id))
        rev = self.store.get_revision(ws.id, out["revision"])
        if out["changed"]:
            self.events.publish(
                ev.REVISION_RECORDED,
                ws.id,
                revision=rev.id,
                trigger=rev.trigger,
                files_changed=rev.files_changed,
                run_id=rev.run_id,
            )
        self._check_quota(ws)
        return rev, bool(out["changed"])

    def _check_quota(self, ws: Workspace) -> None:
        """Report a workspace over its disk quota as a problem event; the capture is kept."""
        if ws.quota_bytes is None:
            return
        try:
            workspaces.check_quota(ws)
        except QuotaExceeded as exc:
            self.events.publish(ev.WORKSPACE_PROBLEM, ws.id, message=str(exc), problem="quota")

    # -- diffs ---------------------------------------------------------------------------------

    def diff(
        self,
        task_ref: str,
        rev_a: str | None = None,
        rev_b: str | None = None,
        *,
        max_bytes: int = 2_000_000,
        context: int = 3,
    ) -> Diff:
        """The diff from `rev_a` (default: the base) to `rev_b` (default: the latest revision)."""
        task = self.task(task_ref)
        a = self.resolve_revision(task, rev_a, default="base")
        b = self.resolve_revision(task, rev_b, default="latest")
        vault = self.vault_for(task.source_id)
        return diff_revisions(vault.git_dir, a.id, b.id, max_bytes=max_bytes, context=context)

    # -- snapshots -----------------------------------------------------------------------------

    def revision_stats(
        self, task_ref: str, pairs: list[tuple[str | None, str]]
    ) -> dict[str, tuple[int, int, int]]:
        """(files changed, lines added, lines removed) of each (parent, revision) pair, by
        revision id, without building hunks."""
        from core.diffs import diff_stats

        git_dir = self.vault_for(self.task(task_ref).source_id).git_dir
        return {rev: diff_stats(git_dir, parent, rev) for parent, rev in pairs}

    def blob_sizes(self, task_ref: str, shas: list[str]) -> dict[str, int]:
        """Sizes of the task's vault blobs by id, without reading them."""
        from core.diffs import blob_sizes

        return blob_sizes(self.vault_for(self.task(task_ref).source_id).git_dir, shas)

    def snapshot(self, task_ref: str) -> Snapshot:
        """Capture (verifying), make the objects durable, then write the snapshot ref and row."""
        task = self.task(task_ref)
        rev, _ = self.capture(task.id, trigger="checkpoint")
        return self.make_snapshot(task.id, rev)

    def make_snapshot(self, task_id: str, rev: Revision) -> Snapshot:
        """A durable snapshot of a recorded revision: objects synced, then ref, then row. A
        revision that already has a restorable snapshot keeps that one."""
        ws = self.workspace_of(self.task(task_id))
        vault = self.vault_for(ws.source_id)
        for known in reversed(self.store.list_snapshots(ws.id)):
            if (
                known.revision_id == rev.id
                and vault.objects.read_ref(snapshot_ref(known.id)) == rev.id
            ):
                return known
        snap = Snapshot(
            new_id("snapshot"), ws.id, rev.id, rev.tree, "durable", created_at=time.time()
        )
        vault.objects.sync()
        vault.objects.update_ref(snapshot_ref(snap.id), rev.id, durable=True)
        self.store.add_snapshot(snap)
        self.events.publish(ev.SNAPSHOT_CREATED, ws.id, snapshot=snap.id, revision=rev.id)
        return snap

    def snapshots(self, task_ref: str | None = None) -> list[Snapshot]:
        if task_ref is None:
            return self.store.list_snapshots()
        return self.store.list_snapshots(self.workspace_of(self.task(task_ref)).id)

    def materialize(self, snapshot_id: str, dest: str | Path) -> tuple[Path, str]:
        """Restore a snapshot's files into a new folder; returns the folder and its tree id."""
        snap = self.store.get_snapshot(snapshot_id)
        target = Path(dest).expanduser().absolute()
        if target.exists() or target.is_symlink():
            raise InputError(f"{target} already exists; give a folder that does not exist yet")
        if self.data.contains(target):
            raise InputError(f"{target} is inside Cairn's data folder; choose a folder outside it")
        if not target.parent.is_dir():
            raise InputError(f"the folder {target.parent} does not exist")
        ws = self.store.get_workspace(snap.workspace_id)
        vault = self.vault_for(ws.source_id)
        commit = self._snapshot_commit(vault, snap)
        tree = materialize(vault, commit, target, label=f"snapshot {snap.id}")
        if tree != snap.tree:
            workspaces.remove_tree(target)
            raise CorruptSnapshot(
                f"snapshot {snap.id} cannot be restored: its files do not hash to the recorded tree"
            )
        return target, tree

    def restore_workspace(self, ws: Workspace, snapshot_id: str) -> str:
        """Materialize a snapshot where a workspace's folder went missing; returns the tree."""
        snap = self.store.get_snapshot(snapshot_id)
        vault = self.vault_for(ws.source_id)
        commit = self._snapshot_commit(vault, snap)
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
        task = next(t for t in self.store.list_tasks() if t.workspace_id == ws.id)
        self.capture(task.id, trigger="restore")
        return tree

    def restore_into_new_workspace(self, task: Task, old: Workspace, snapshot_id: str) -> Workspace:
        """Give the task a new workspace made from a snapshot; the old one is kept, frozen."""
        snap = self.store.get_snapshot(snapshot_id)
        commit = self._snapshot_commit(self.vault_for(old.source_id), snap)
        ws = self._workspace_from_revision(
            old,
            commit,
            snap.tree,
            branch=old.branch,
            trigger="restore",
            label=f"snapshot {snap.id}",
            task_id=task.id,
        )
        if old.state in (WorkspaceState.PREPARED.value, WorkspaceState.ACTIVE.value):
            self.set_workspace_state(old.id, WorkspaceState.FROZEN)
        return ws

    def _workspace_from_revision(
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
        vault = self.vault_for(old.source_id)
        ws_id = new_id("workspace")
        root = self.data.workspace_path(ws_id)
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
        self.store.add_workspace(ws)
        try:
            workspaces.create_tree(
                vault, commit, root, branch=branch, head_commit=old.head_commit, label=label
            )
            vault.objects.update_ref(base_ref(ws_id), commit)
            vault.objects.update_ref(revisions_ref(ws_id), commit)
        except BaseException:
            workspaces.remove_tree(root)
            self.store.delete_workspace_rows(ws_id)
            raise
        with self.store.transaction():
            self.store.add_revision(Revision(commit, ws_id, None, tree, trigger, None, 0, now))
            self.store.update_workspace(ws_id, state=WorkspaceState.PREPARED.value)
            if task_id is not None:
                self.store.update_task(task_id, workspace_id=ws_id)
        return self.store.get_workspace(ws_id)

    def _snapshot_commit(self, vault: Vault, snap: Snapshot) -> str:
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

    def engine_settings(self, engine: str):
        """The engine's settings from the data folder's settings file (issue: engine settings)."""
        from core.engines.base import EngineSettings

        return EngineSettings.from_dict(self.settings().get("engines", {}).get(engine))

    def settings(self) -> dict:
        from core.settings import read_settings, settings_path

        return read_settings(settings_path(self.data.root))

    # -- policy ----------------------------------------------------------------------------------

    def policy_of(self, ws: Workspace) -> Policy:
        return Policy.from_dict(ws.policy)

    def set_policy(self, task_ref: str, **changes: object) -> Policy:
        """A new version of the task's sandbox policy; it applies from the next start or resume."""
        ws = self.workspace_of(self.task(task_ref))
        policy = self.policy_of(ws).changed(**changes)
        self.store.update_workspace(ws.id, policy=policy.to_dict())
        self.events.publish(ev.POLICY_CHANGED, ws.id, version=policy.version)
        return policy

    # -- runs ------------------------------------------------------------------------------------

    def start_run(
        self, task_ref: str, commands: list[str] | None = None, *, prompt: str | None = None
    ) -> Run:
        """A new run of the task's engine: shell commands, or an agent turn with `prompt`."""
        return self.runs.start(task_ref, commands=commands, prompt=prompt)

    # -- lineage: continue and fork ----------------------------------------------------------------

    def continue_task(
        self, task_ref: str, message: str, *, title: str | None = None
    ) -> tuple[Task, Run]:
        """A child task that keeps working in the parent's workspace, resuming the engine's own
        session natively (or, when that is impossible, a new session that says why)."""
        from core.engines.base import MODE_CONTINUE

        parent = self.task(task_ref)
        self.runs.refuse_in_flight(parent)
        last = self.runs.latest_run(parent)
        child = self._child_task(
            parent,
            TaskSource.CONTINUE,
            parent.workspace_id,
            None,
            title or child_title(message, f"{parent.title} (continued)"),
            message,
        )
        try:
            run = self.runs.start(
                child.id,
                prompt=message,
                mode=MODE_CONTINUE,
                session_id=last.engine_session_id if last else None,
            )
        except CairnError:
            self.events.publish(ev.TASK_CREATED, child.id, parent=parent.id, source="continue")
            raise
        self.events.publish(ev.TASK_CREATED, child.id, parent=parent.id, source="continue")
        return self.task(child.id), run

    def fork_task(
        self,
        task_ref: str,
        message: str,
        *,
        at_revision: str | None = None,
        title: str | None = None,
    ) -> tuple[Task, Run | None]:
        """A child task with its own workspace made from any revision of the parent (default the
        latest), its own sandbox, a copy of the parent's engine home and a forked engine session.
        The parent's workspace is never touched."""
        from core.engines.base import MODE_FORK

        parent = self.task(task_ref)
        self.runs.refuse_in_flight(parent)
        rev = self.resolve_revision(parent, at_revision, default="latest")
        old = self.workspace_of(parent)
        child_id = new_id("task")
        ws = self._workspace_from_revision(
            old,
            rev.id,
            rev.tree,
            branch=workspaces.branch_name(title or f"{parent.title} fork", child_id),
            trigger="base",
            label=f"revision {rev.id[:12]} of task {parent.id}",
        )
        ws_id = ws.id
        child = self._child_task(
            parent,
            TaskSource.FORK,
            ws_id,
            rev.id,
            title or child_title(message, f"{parent.title} (fork)"),
            message,
            task_id=child_id,
        )
        self.events.publish(
            ev.TASK_CREATED, child.id, parent=parent.id, source="fork", from_revision=rev.id
        )
        last = self.runs.latest_run(parent)
        parent_session = self.store.session_for(old.id)
        run = self.runs.start(
            child.id,
            prompt=message,
            mode=MODE_FORK,
            session_id=last.engine_session_id if last else None,
            home_seed=self.data.home_path(parent_session.id) if parent_session else None,
        )
        return self.task(child.id), run

    def _child_task(
        self,
        parent: Task,
        source: TaskSource,
        workspace_id: str | None,
        from_revision: str | None,
        title: str,
        message: str,
        *,
        task_id: str | None = None,
    ) -> Task:
        child = Task(
            task_id or new_id("task"),
            title,
            parent.source_id,
            workspace_id,
            parent.engine,
            message,
            parent.id,
            source.value,
            from_revision,
            time.time(),
        )
        self.store.add_task(child)
        return child

    def resume(self, task_ref: str, *, choice: str | None = None, accept_tool_change: bool = False):
        return self.runs.resume(task_ref, choice=choice, accept_tool_change=accept_tool_change)

    def run_files(self, run: Run) -> runs_mod.RunFiles:
        return runs_mod.run_files(self.data.runs_root, run)

    def end_run(self, run_id: str, exit_code: int | None, *, note: str | None = None) -> Run:
        """Take in the last output, record the files the run left, and settle its state."""
        run = self.store.get_run(run_id)
        if run.state not in runs_mod.IN_FLIGHT:
            return run
        runs_mod.OutputTail(self.store, run.id, self.run_files(run)).poll(final=True)
        problem = self._record_engine_session(run)
        if problem and exit_code == 0:
            exit_code, note = 1, problem
        if run.workspace_id and Path(self.store.get_workspace(run.workspace_id).root).is_dir():
            try:
                if exit_code is None:  # lost: what is there is recorded, its resume checkpoints
                    self.capture(run.task_id, trigger="watch", run_id=run.id)
                else:  # ended: the files it left become durable, so they are what comes back
                    self.checkpoint(run.task_id)
            except CairnError as exc:
                log.warning("could not record the files of run %s: %s", run.id, exc)
        if exit_code is None:
            target = RunState.INTERRUPTED
        else:
            target = RunState.SUCCEEDED if exit_code == 0 else RunState.FAILED
        try:
            run = runs_mod.move(
                self.store,
                run_id,
                target,
                exit_code=exit_code,
                note=note or (f"exit code {exit_code}" if exit_code is not None else None),
            )
        except CairnError:
            return self.store.get_run(run_id)  # someone else settled it first
        self.events.publish(
            ev.RUN_STATE, run.id, state=run.state, task_id=run.task_id, exit_code=exit_code
        )
        return run

    def checkpoint(self, task_ref: str):
        """A checkpoint of the task's latest run now (at the step it is on)."""
        from core.checkpoints import write_checkpoint
        from core.engines.base import ToolContract

        task = self.task(task_ref)
        run = self.runs.latest_run(task)
        if run is None:
            raise InputError(f"task {task.id} has no run to checkpoint")
        last = self.store.latest_checkpoint([run.id])
        step = self.run_files(run).step
        pending = str(step) if step is not None else (last.pending_step if last else None)
        contract = ToolContract.from_dict(last.tool_contract if last else None)
        ws = self.workspace_of(task)
        return write_checkpoint(
            self,
            run,
            pending_step=pending,
            tool_contract=contract,
            policy_version=self.policy_of(ws).version,
        )

    def _record_engine_session(self, run: Run) -> str | None:
        """Take the engine's session id from what the run printed; a fork that kept its parent's
        id is an error (returned as the reason)."""
        from core.engines import engine_for

        eng = engine_for(run.engine)
        if not eng.has_sessions:
            return None
        session_id = None
        try:
            with open(self.run_files(run).stdout, encoding="utf-8", errors="replace") as f:
                for line in f:
                    for event in eng.parse_line(line):
                        if event.kind == "session" and event.data.get("session_id"):
                            session_id = event.data["session_id"]
                            break
                    if session_id:
                        break
        except FileNotFoundError:
            return None
        if session_id and session_id != run.engine_session_id:
            self.store.update_run(run.id, engine_session_id=session_id)
        if (
            session_id
            and run.spec.get("mode") == "fork"
            and session_id == run.spec.get("session_id")
        ):
            return (
                f"the engine returned the parent's session id {session_id} for a fork; "
                "a fork must get a new session"
            )
        return None

    def reconcile_run(self, run: Run) -> str:
        from core.reconcile import settle_run

        return settle_run(self, run)

    def reconcile(self, *, catch_up: bool = True):
        from core.reconcile import reconcile

        return reconcile(self, catch_up=catch_up)

    def latest_run(self, task_ref: str) -> Run | None:
        return self.runs.latest_run(self.task(task_ref))

    def in_flight_run(self, task_ref: str) -> Run | None:
        task = self.task(task_ref)
        run = self.runs.latest_run(task)
        return run if run and run.state in runs_mod.IN_FLIGHT else None

    def follow(
        self,
        run_id: str,
        *,
        on_output: Callable[[str, str], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        interval: float = 0.1,
        record: bool | str = False,
    ) -> Run:
        """Observe a run from its saved offsets until it ends (or `should_stop()`).

        With `record`, the run's workspace is also watched meanwhile, so its edits become
        revisions as they happen: in this process (True), or in a child process (RECORD_CHILD,
        for a process that must stay light: a big workspace's index and its captures then
        live elsewhere). Either way the recording stops before the run's final checkpoint, and
        revisions recorded by any process are announced here as they appear. When another
        process records the workspace already, that one goes on."""
        run = self.store.get_run(run_id)
        stop_recording: Callable[[], None] = lambda: None  # noqa: E731
        if record == RECORD_CHILD:
            stop_recording = self._record_in_child(run.task_id, run.workspace_id)
        elif record:
            try:
                self.watch(run.task_id)
                stop_recording = lambda: self.stop_watching(run.workspace_id)  # noqa: E731
            except CairnError:
                pass  # another Cairn process records this workspace, or it is gone
        news = None if record is True else self._revision_news(run.workspace_id)
        try:
            return self._follow(run, on_output, should_stop, interval, stop_recording, news)
        finally:
            stop_recording()

    def _revision_news(self, workspace_id: str | None) -> Callable[[], None] | None:
        """What announces, in this process, the revisions another process records in the
        workspace (each once, in order); None without a workspace."""
        if not workspace_id:
            return None
        latest = self.store.latest_revision(workspace_id)
        seen = [latest.seq if latest else 0]

        def announce() -> None:
            for rev in self.store.list_revisions(workspace_id):
                if rev.seq > seen[0]:
                    seen[0] = rev.seq
                    self.events.publish(
                        ev.REVISION_RECORDED,
                        workspace_id,
                        revision=rev.id,
                        trigger=rev.trigger,
                        files_changed=rev.files_changed,
                        run_id=rev.run_id,
                    )

        return announce

    def _record_in_child(self, task_id: str, workspace_id: str) -> Callable[[], None]:
        """Start `cairnctl watch` for the task; returns what stops it (once, waiting for its
        last capture). Its messages go to the cache folder, not to this process's output."""
        from core.launch import python_command

        log_path = self.data.cache_root / f"{workspace_id}.watch.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            child = subprocess.Popen(
                python_command("core.cli", "--data-dir", str(self.data.root), "watch", task_id),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                close_fds=True,
            )

        def stop() -> None:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(RECORDER_STOP_S)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()

        return stop

    def _follow(
        self,
        run: Run,
        on_output: Callable[[str, str], None] | None,
        should_stop: Callable[[], bool],
        interval: float,
        stop_recording: Callable[[], None],
        news: Callable[[], None] | None,
    ) -> Run:
        from core.reconcile import run_liveness

        run_id = run.id
        self._know_secrets_of(run.task_id)
        tail = runs_mod.OutputTail(self.store, run.id, self.run_files(run), on_output)
        last_check = 0.0
        while not should_stop():
            self.judge.poll()  # answer the run's approval requests while it is observed
            run = self.store.get_run(run_id)
            if run.state not in runs_mod.IN_FLIGHT:
                tail.poll(final=True)
                return run
            files = self.run_files(run)
            tail.files = files
            tail.poll()
            code = files.exit_code
            if code is not None:
                tail.poll(final=True)
                stop_recording()  # its last capture lands before the run's checkpoint
                if news is not None:
                    news()
                return self.end_run(run.id, code)
            if run.state in (RunState.QUEUED.value, RunState.PREPARING.value):
                time.sleep(interval)  # being launched: nothing to look at yet
                continue
            if time.monotonic() - last_check > 1.0:
                last_check = time.monotonic()
                alive, why = run_liveness(self, run)
                if alive is False and files.exit_code is None:
                    stop_recording()
                    return self.end_run(run.id, None, note=f"interrupted: {why}")
                if news is not None:
                    news()
            time.sleep(interval)
        return self.store.get_run(run_id)

    def _know_secrets_of(self, task_id: str) -> None:
        """Let this process redact the secrets a run may print, even when another process
        started it. Best effort: without a keyring there is nothing to learn."""
        try:
            self.credentials.resolve_env(task_id, require=False)
        except CairnError:
            pass

    def session_stats(self, session_id: str) -> dict:
        """Live figures of one sandbox: cpu_percent, memory_bytes, memory_limit_bytes, pids,
        uptime_s (None where the backend cannot tell). A sandbox that is not there, or not as it
        was made, has none: `running` False and a `note` saying why. Takes about a second (the
        engine samples the CPU twice)."""
        from core.sandbox.base import Attached, Gone

        record = next((r for r in self.store.list_sessions() if r.id == session_id), None)
        if record is None:
            raise NotFound(f"no sandbox session {session_id}")
        if record.status != "live":  # attaching would start it again: figures are not worth that
            return {"running": False, "note": f"the sandbox is {record.status}"}
        ws = self.store.get_workspace(record.workspace_id)
        attached = self.sandboxes.attach_as_made(record, ws)
        if isinstance(attached, Attached):
            return attached.live.stats()
        why = attached.reason if isinstance(attached, Gone) else "; ".join(attached.reasons)
        return {"running": False, "note": why}

    def stop(self, task_ref: str, *, grace: float = 10.0) -> dict:
        """Cancel the task's run in flight (TERM, then KILL) and stop its sandbox."""
        task = self.task(task_ref)
        ws = self.workspace_of(task)
        result: dict = {"task_id": task.id, "run": None, "sandbox": None}
        run = self.in_flight_run(task.id)
        record = self.store.session_for(ws.id)
        live = None
        if record is not None:
            from core.sandbox.base import Attached

            attached = self.sandboxes.attach_as_made(record, ws)
            live = attached.live if isinstance(attached, Attached) else None
        if run is not None:
            files = self.run_files(run)
            if live is not None and files.pid:
                live.signal_process(files.pid, "TERM")
                deadline = time.monotonic() + grace
                while files.exit_code is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                if files.exit_code is None:
                    live.signal_process(files.pid, "KILL")
            runs_mod.OutputTail(self.store, run.id, files).poll(final=True)
            self.capture(task.id, trigger="watch", run_id=run.id)
            run = runs_mod.move(
                self.store,
                run.id,
                RunState.CANCELLED,
                exit_code=files.exit_code,
                note="stopped by the user",
            )
            self.events.publish(ev.RUN_STATE, run.id, state=run.state, task_id=task.id)
            result["run"] = run.id
        if live is not None and record is not None:
            live.stop()
            self.store.update_session(record.id, status="stopped")
            result["sandbox"] = record.container_name
        if ws.state == WorkspaceState.ACTIVE.value:
            self.set_workspace_state(ws.id, WorkspaceState.PREPARED)
        return result

    def _workspace_size(self, workspace_id: str) -> int | None:
        """Bytes of the workspace's latest revision (what a restore would write)."""
        rev = self.store.latest_revision(workspace_id)
        if rev is None:
            return None
        ws = self.store.get_workspace(workspace_id)
        try:
            return _tree_size(self.vault_for(ws.source_id), rev.tree)
        except CairnError:
            return None

    def health_checks(self) -> list:
        """The first-run checks (Docker, keyring, git, disk of the data folder) as
        core.health.Check values; never raises, bounded to a few seconds."""
        from core.health import run_checks

        return run_checks(self.data.root)

    def status(self) -> dict:
        """Every sandbox session and snapshot, for `cairnctl status` and the GUI."""
        sessions = []
        try:
            found = {s.container_id: s for s in self.sandboxes.backend.list_sessions()}
            problem = None
        except CairnError as exc:
            found, problem = {}, str(exc)
        for rec in self.store.list_sessions():
            summary = found.get(rec.container_id)
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
                }
            )
        snaps = []
        for snap in self.store.list_snapshots():
            ws = self.store.get_workspace(snap.workspace_id)
            vault = self.vault_for(ws.source_id)
            present = vault.objects.read_ref(snapshot_ref(snap.id)) == snap.revision_id
            snaps.append(
                {
                    **snapshot_json(snap),
                    "age_s": time.time() - snap.created_at,
                    "size": _tree_size(vault, snap.tree) if present else None,
                    "restorable": present,
                }
            )
        return {"sessions": sessions, "snapshots": snaps, "problem": problem}

    # -- artifacts and promotion --
    # Results leave a sandbox only through these: an artifact, a branch in the user's repository
    # (the one write Cairn makes there), or a patch. Each is scanned for secrets first.

    def promote_artifact(
        self,
        task_ref: str,
        *,
        revision: str | None = None,
        path: str | None = None,
        evidence: bytes | None = None,
        evidence_name: str | None = None,
    ):
        """Freeze a file of a revision (default: the latest), or the whole revision as a
        deterministic tar, as a content-addressed artifact with provenance and evidence."""
        from core import artifacts

        task = self.task(task_ref)
        rev = self.resolve_revision(task, revision)
        art = artifacts.promote_artifact(
            self, task, rev, path=path, evidence=evidence, evidence_name=evidence_name
        )
        self.events.publish(
            artifacts.ARTIFACT_PROMOTED,
            task.id,
            artifact=art.id,
            revision=rev.id,
            path=art.path,
            sha256=art.sha256,
        )
        return art

    def promote_to_branch(self, task_ref: str, branch: str, *, revision: str | None = None):
        """Create the branch `branch` in the user's own repository holding a revision's files."""
        from core import artifacts

        task = self.task(task_ref)
        rev = self.resolve_revision(task, revision)
        with held(
            self.data.locks_root,
            "promote",
            task.source_id,
            "another promotion into this repository is in progress",
        ):
            made = artifacts.promote_branch(self, task, rev, branch)
        self.events.publish(
            artifacts.BRANCH_PROMOTED,
            task.id,
            branch=branch,
            commit=made.commit,
            revision=rev.id,
            repository=made.repository,
        )
        return made

    def export_patch(
        self, task_ref: str, *, revision: str | None = None, since: str = "base"
    ) -> bytes:
        """The changes from the import (`base`, or the user's `head`) to a revision, as a patch."""
        from core import artifacts

        task = self.task(task_ref)
        rev = self.resolve_revision(task, revision)
        return artifacts.export_patch(self, task, rev, since=since)

    def artifacts(self, task_ref: str | None = None) -> list:
        from core import artifacts

        ids = None if task_ref is None else [self.task(task_ref).id]
        return artifacts.list_artifacts(self, ids)

    def artifact(self, artifact_id: str):
        from core import artifacts

        return artifacts.get_artifact(self, artifact_id)

    def read_artifact(self, artifact_id: str) -> bytes:
        """The artifact's content, re-hashed now; CorruptArtifact when it is not what was stored."""
        from core import artifacts

        return artifacts.read_artifact(self, artifact_id)

    def verify_artifact(self, artifact_id: str):
        from core import artifacts

        return artifacts.verify_artifact(self, artifact_id)

    def set_setting(self, key: str, value: str) -> str:
        """Set `engines.<engine>.<key>` or `defaults.<key>` in the settings file (validated;
        written atomically). A new default backend or image applies to the next sandbox use."""
        from core import settings

        stored = settings.set_setting(settings.settings_path(self.data.root), key, value)
        if key in _SANDBOX_DEFAULTS:
            self.reset_sandboxes()
        return stored

    def unset_setting(self, key: str) -> bool:
        from core import settings

        removed = settings.unset_setting(settings.settings_path(self.data.root), key)
        if key in _SANDBOX_DEFAULTS:
            self.reset_sandboxes()
        return removed

    def get_setting(self, key: str):
        from core import settings

        return settings.get_setting(settings.settings_path(self.data.root), key)

    def check_setting(self, key: str, value: str) -> str:
        """The value `set_setting` would store, or InputError (one line); nothing is written."""
        from core import settings

        return settings.check_setting(key, value)

    def defaults(self) -> dict[str, str]:
        """The `defaults.<key>` settings that are set (engine, image, network, allow, backend)."""
        from core import settings

        return settings.read_defaults(settings.settings_path(self.data.root))

    def setting_keys(self) -> dict[str, list[str]]:
        """What the settings file takes: the default keys, the engines and each engine's keys,
        and the choices of the defaults that have a fixed set (for forms)."""
        from core import settings
        from core.policy import NETWORK_MODES

        return {
            "defaults": list(settings.DEFAULT_KEYS),
            "engines": settings.known_engines(),
            "engine_keys": settings.engine_keys(),
            "networks": list(NETWORK_MODES),
            "backends": list(settings.BACKENDS),
        }

    # -- risk rules ------------------------------------------------------------------------------
    # The data folder's `risk-rules.json`, when present, replaces the rules Cairn ships; every
    # judge reads the rules in force at each request, so a change applies to the next one.

    def risk_rules(self) -> dict:
        """The rules in force: `text` (the file), `rules` (id, pattern, reason, when, as plain
        values), `version`, `user` (True: the data folder's override; False: Cairn's own),
        `path`, and `problem` (why an override cannot be used, else None)."""
        from core import approvals

        path = approvals.rules_path_for(self.data.root)
        user = path != approvals.RULES_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CairnError(f"the risk rules in {path} cannot be read: {exc.strerror}") from exc
        rules: list[dict] = []
        version, problem = None, None
        try:
            version = approvals.parse_rules(text).version
            rules = self.check_risk_rules(text)
        except InputError as exc:
            problem = exc.message
        return {
            "text": text,
            "rules": rules,
            "version": version,
            "user": user,
            "path": str(path),
            "problem": problem,
        }

    def check_risk_rules(self, text: str) -> list[dict]:
        """The rules `text` holds (as `risk_rules()` lists them), or InputError (one line,
        naming the rule); nothing is written."""
        from core import approvals

        if not isinstance(text, str):
            raise InputError("the risk rules are text (a JSON document)")
        return [
            {"id": r.id, "pattern": r.pattern.pattern, "reason": r.reason, "when": dict(r.when)}
            for r in approvals.parse_rules(text).rules
        ]

    def set_risk_rules(self, text: str) -> dict:
        """Validate `text` as a rules file and make it the data folder's rules (written
        atomically); InputError (one line, naming the rule) writes nothing."""
        from core import approvals
        from core.settings import replace_file

        self.check_risk_rules(text)
        replace_file(
            approvals.user_rules_path(self.data.root), text if text.endswith("\n") else text + "\n"
        )
        return self.risk_rules()

    def reset_risk_rules(self) -> bool:
        """Go back to the rules Cairn ships; whether there was an override to remove."""
        from core import approvals

        try:
            approvals.user_rules_path(self.data.root).unlink()
        except FileNotFoundError:
            return False
        return True

    # -- credentials -----------------------------------------------------------------------------
    # Names only: values go into the keyring through `credentials.secrets.set` and come out only
    # into an exec's environment. core.credentials owns the rules.

    def keyring_status(self):
        """Which keyring holds the secrets and whether it answers (a KeyringStatus). A locked
        keyring may show its unlock prompt and wait for it: call this off the GUI thread."""
        return self.credentials.secrets.check()

    def secret_names(self) -> list[str]:
        """The names of the secrets stored through Cairn, sorted; values are not read."""
        return self.credentials.secrets.names()

    def tasks_granted(self, secret_name: str) -> list[Task]:
        """The tasks holding an active grant of the secret themselves (their descendants may
        inherit it), oldest first."""
        tasks = self.tasks()
        holders: set[str] = set()
        for i in range(0, len(tasks), 500):  # within SQLite's limit on bound parameters
            rows = self.store.grant_rows_for_tasks([t.id for t in tasks[i : i + 500]])
            holders.update(
                r["task_id"]
                for r in rows
                if r["secret_name"] == secret_name and r["revoked_at"] is None
            )
        return [t for t in tasks if t.id in holders]

    # -- approvals -------------------------------------------------------------------------------
    # A run's risky commands wait in its mailbox for a person; core.approvals owns the rules, the
    # rows and the decision files. Any number of Cairn processes may judge at once.

    @property
    def judge(self):
        """This process's approvals judge (made on first use)."""
        from core.approvals import Judge

        with self._lock:
            judge = self.__dict__.get("_judge")
            if judge is None:
                judge = self.__dict__["_judge"] = Judge(self)
            return judge

    def approvals(self, pending_only: bool = True) -> list:
        """Approvals, oldest first: the ones waiting for a person, or (False) every one."""
        return self.judge.list(pending_only=pending_only)

    def judge_pending(self) -> list:
        """Answer what the rules can answer now, apply timeouts, and return what still waits for
        a person (for the GUI's periodic refresh)."""
        self.judge.poll()
        return self.judge.list(pending_only=True)

    def approve(self, approval_id: str, remember: bool = False):
        """Let a waiting command run; `remember` lets this exact command run without asking for
        the rest of the task (a new policy version)."""
        return self.judge.approve(approval_id, remember=remember)

    def deny(self, approval_id: str, reason: str | None = None):
        return self.judge.deny(approval_id, reason=reason)

    # -- workspace lifecycle -------------------------------------------------------------------

    def set_workspace_state(self, workspace_id: str, state: WorkspaceState) -> Workspace:
        ws = self.store.get_workspace(workspace_id)
        workspaces.check_transition(ws.state, state.value)
        self.store.update_workspace(workspace_id, state=state.value)
        self.events.publish(ev.WORKSPACE_STATE, workspace_id, state=state.value, previous=ws.state)
        return self.store.get_workspace(workspace_id)

    # -- housekeeping (core.housekeeping owns the rules) ------------------------------------------

    def archive_task(self, task_ref: str) -> Workspace:
        """Archive the task's workspace (snapshot first; its files go at the next cleanup).
        Refused while a run is in flight, its sandbox is up or it is being recorded."""
        from core import housekeeping

        return housekeeping.archive_task(self, task_ref)

    def unarchive_task(self, task_ref: str) -> Workspace:
        """Bring an archived workspace back, restoring its files from its newest snapshot when a
        cleanup removed them."""
        from core import housekeeping

        return housekeeping.unarchive_task(self, task_ref)

    def data_usage(self):
        """The data folder's disk use by category (core.housekeeping.Usage)."""
        from core import housekeeping

        return housekeeping.data_usage(self)

    def housekeeping_plan(self):
        """What a cleanup would remove now and the disk it frees (core.housekeeping.Plan)."""
        from core import housekeeping

        return housekeeping.plan(self)

    def housekeeping_clean(self, plan):
        """Carry out a plan, re-checking each item (core.housekeeping.Result)."""
        from core import housekeeping

        return housekeeping.clean(self, plan)

    def task_details(self, task_ref: str) -> dict:
        task = self.task(task_ref)
        ws = self.workspace_of(task)
        revs = self.revisions(task.id)
        return {
            "task_id": task.id,
            "title": task.title,
            "engine": task.engine,
            "instructions": task.instructions,
            "source": task.source,
            "parent_task_id": task.parent_task_id,
            "from_revision": task.from_revision,
            "source_path": self.store.get_source(task.source_id).path,
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
            "snapshots": [snapshot_json(s) for s in self.store.list_snapshots(ws.id)],
        }


_SANDBOX_DEFAULTS = ("defaults.backend", "defaults.image")  # the settings a SandboxManager reads


RECORD_CHILD = "child"  # Cairn.follow(record=...): watch the workspace from a child process
RECORDER_STOP_S = 30.0  # how long a child recorder may take to write its last capture

CHILD_TITLE_MAX = 60


def child_title(message: str, fallback: str) -> str:
    """A continuation's or fork's default title: the first line of what it was asked to do
    (shortened), so a lineage reads as the steps taken; `fallback` when the message is empty."""
    line = next((" ".join(l.split()) for l in message.splitlines() if l.strip()), "")
    if not line:
        return fallback
    return line if len(line) <= CHILD_TITLE_MAX else line[: CHILD_TITLE_MAX - 1].rstrip() + "…"


def _default_backend(data: DataDir):
    """Docker unless the user chose the unsafe host backend explicitly: CAIRN_BACKEND wins, else
    the setting `defaults.backend`."""
    import os

    choice = os.environ.get("CAIRN_BACKEND")
    if not choice:
        from core.settings import read_defaults, settings_path

        choice = read_defaults(settings_path(data.root)).get("backend") or "docker"
    if choice == "host":
        from core.sandbox.host import HostBackend

        return HostBackend(data.root, allow_unsafe=True)
    if choice != "docker":
        raise InputError(f"unknown sandbox backend {choice!r} (docker, or host for no isolation)")
    from core.sandbox.docker import DockerBackend

    return DockerBackend(data.root)


def _tree_size(vault: Vault, tree: str) -> int:
    return _tree_size_in(str(vault.git_dir), tree)


@functools.lru_cache(maxsize=4096)
def _tree_size_in(git_dir: str, tree: str) -> int:
    """A tree's bytes, once per tree id (a tree never changes): `status()` asks for every
    snapshot and sandbox each time, and a 100,000-file tree takes seconds to walk."""
    from core.vault.objects import run_git

    out = run_git(["--git-dir", git_dir, "ls-tree", "-r", "-l", "-z", tree]).stdout
    total = 0
    for entry in out.split(b"\0"):
        fields = entry.split(None, 4)
        if len(fields) >= 4 and fields[3].isdigit():
            total += int(fields[3])
    return total


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
