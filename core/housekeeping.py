"""Housekeeping: how much disk the data folder uses, and giving back what nothing needs any more.

Owns measuring the data folder (by category, and each workspace's share with the tasks that use
it), planning a cleanup (the files of archived workspaces, their stopped sandbox containers, vault
objects that nothing reaches, leftovers of an interrupted cleanup, and what deleted tasks left on
a remote sandbox host: their sandbox, carrier and volumes there) and carrying a plan out, and
moving a task's workspace into and out of the archived state. Rows are the store's, objects the
vault's, the lifecycle table the workspaces module's.

Disk is measured the way `du` does: `st_blocks * 512` of every file, folder and link, each inode
once. A cleanup frees a file's blocks only when its last link goes, so the plan follows links
across items (in the order `clean` carries them out) and says exactly what will be freed.

What is never removed: a workspace's rows, revisions and snapshots (history stays browsable and
an archived workspace stays restorable from its snapshots), anything reachable from any ref of a
vault (revisions, base and snapshot refs, import refs of an import in progress) or from any commit
or tree the store names (revisions, snapshots, the checkpoints referencing them, workspaces'
base and head commits, artifacts), and vault objects younger than the grace period.

Snapshot refs are kept, even those of archived workspaces that no checkpoint references: a
snapshot's commit is a revision on its workspace's revisions chain, which stays for the history,
so dropping the ref would free nothing and would only leave the archived workspace without a way
back (un-archiving restores the tree from its newest snapshot).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core import events as ev
from core import runs as runs_mod
from core import workspaces
from core.context import Context
from core.errors import CairnError, Conflict, CorruptSnapshot, InputError, NotFound, VaultError
from core.locks import FileLock, held, lock_path
from core.models import Checkpoint, Run, SessionRecord, Source, Task, Workspace, WorkspaceState
from core.revisions import POSITIONS, Revisions
from core.runs import conversations
from core.runs.liveness import Sandboxes
from core.sandbox import egress
from core.sandbox.base import SessionSummary
from core.sandbox.remote import HostUnreachable, RemoteDockerBackend, SessionParts
from core.snapshots import Snapshots
from core.vault import Vault, base_ref, revisions_ref, snapshot_ref
from core.vault.objects import PackIndex, run_git

# Vault objects nothing reaches are removed only once they are this old: a capture, an import
# or a snapshot writes its objects before the ref that reaches them.
GRACE_SECONDS = 24 * 3600

TRASH_PREFIX = ".trash-"  # in workspaces/: a tree taken out of place, being deleted
QUARANTINE_PREFIX = "cairn-prune-"  # inside a vault: objects set aside until the vault checks out

CATEGORIES = ("vault", "workspaces", "homes", "runs", "artifacts", "cache", "database", "other")
_FOLDERS = {
    "vault": "vault",
    "workspaces": "workspaces",
    "homes": "homes",
    "runs": "runs",
    "artifacts": "artifacts",
    "cache": "cache",
}
_DATABASE = ("cairn.db", "cairn.db-wal", "cairn.db-shm", "cairn.db-journal")

KIND_LEFTOVER = "leftover"
KIND_WORKSPACE = "archived_workspace"
KIND_OBJECTS = "vault_objects"
KIND_CONTAINER = "sandbox_container"
KIND_REMOTE = "remote_sandbox"  # a deleted task's sandbox and volumes on a remote host

# One JSON record per session whose remote host did not answer when its task was deleted: the
# host to ask again, so a later cleanup removes what is left there (in the data folder).
REMOTE_LEFTOVERS = "remote-leftovers"
# What a remote host holds of a session the store does not know, with no record of its task's
# deletion, is a leftover only once it is this old: a sandbox being made there has its volumes
# before its session is stored.
REMOTE_GRACE_SECONDS = 3600.0

# A sandbox container in one of these states runs nothing and may be removed for an archived
# workspace (the backend's words; anything else, running or paused included, is left alone).
STOPPED_CONTAINER_STATES = ("exited", "created", "dead")

# What of the data folder belongs to one workspace: top-level folder → how its entries are named.
_SHARE_PARTS = {
    "workspaces": "files",
    "runs": "runs",
    "homes": "home",
    "approvals": "other",
    "egress": "other",
    "cache": "other",
}


def disk_bytes(st: os.stat_result) -> int:
    """The disk an inode occupies (what `du` counts)."""
    return st.st_blocks * 512


# -- values ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    """What one workspace holds of the data folder (its files, run logs, engine home, and the
    rest: approvals, proxy folder, stat cache), and the tasks that use it: a Continue child
    shares its parent's workspace. The vault is every task's of a source folder, so it is in no
    share."""

    workspace_id: str
    state: str
    task_ids: tuple[str, ...]
    titles: tuple[str, ...]
    bytes: int
    parts: dict[str, int]

    def to_json(self) -> dict:
        data = asdict(self)
        data["task_ids"], data["titles"] = list(self.task_ids), list(self.titles)
        return data


@dataclass(frozen=True)
class Usage:
    """The data folder's disk use: the total, one figure per category (CATEGORIES) and each
    workspace's share, largest first."""

    root: str
    total: int
    parts: dict[str, int]
    shares: tuple[Share, ...] = ()

    def to_json(self) -> dict:
        return {
            "root": self.root,
            "total": self.total,
            "parts": dict(self.parts),
            "shares": [s.to_json() for s in self.shares],
        }


@dataclass(frozen=True)
class PlanItem:
    """One thing a cleanup removes, and the disk that frees (following links, in plan order)."""

    kind: str  # KIND_LEFTOVER | KIND_WORKSPACE | KIND_OBJECTS
    description: str  # for people: the task, the workspace, the path
    bytes: int
    path: str  # the folder removed (a tree, a leftover) or the vault
    count: int = 0  # files or objects removed
    workspace_id: str | None = None
    task_titles: tuple[str, ...] = ()
    source_id: str | None = None
    objects: tuple[str, ...] = ()  # KIND_OBJECTS: paths under the vault's objects/ folder
    host: str | None = None  # KIND_REMOTE, KIND_CONTAINER: its sandbox host (None: the default)

    def to_json(self) -> dict:
        data = asdict(self)
        data["task_titles"] = list(self.task_titles)
        data.pop("objects")
        return data


@dataclass(frozen=True)
class Plan:
    """What a cleanup would do now; `clean` re-checks every item before acting on it."""

    items: tuple[PlanItem, ...]
    usage: Usage
    notes: tuple[str, ...] = ()  # what was left out and why (a damaged vault...)
    grace_seconds: float = GRACE_SECONDS
    created_at: float = 0.0

    @property
    def total(self) -> int:
        return sum(item.bytes for item in self.items)

    @property
    def empty(self) -> bool:
        return not self.items

    def to_json(self) -> dict:
        return {
            "usage": self.usage.to_json(),
            "items": [i.to_json() for i in self.items],
            "total": self.total,
            "notes": list(self.notes),
            "grace_seconds": self.grace_seconds,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class Skipped:
    item: PlanItem
    reason: str


@dataclass
class Result:
    """What a cleanup did: the disk actually freed (measured while removing), item by item."""

    freed: int = 0
    done: list[PlanItem] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "freed": self.freed,
            "done": [i.to_json() for i in self.done],
            "skipped": [{"item": s.item.to_json(), "reason": s.reason} for s in self.skipped],
            "notes": list(self.notes),
        }


# -- walking -----------------------------------------------------------------------------------


def _walk(top: str | os.PathLike[str]) -> Iterator[tuple[str, os.stat_result]]:
    """`top` and everything under it, by lstat (links are not followed); unreadable parts are
    left out."""
    try:
        st = os.lstat(top)
    except OSError:
        return
    yield os.fspath(top), st
    if not stat.S_ISDIR(st.st_mode):
        return
    stack = [os.fspath(top)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    yield entry.path, est
                    if stat.S_ISDIR(est.st_mode):
                        stack.append(entry.path)
        except OSError:
            continue


def _category(name: str) -> str:
    if name in _DATABASE:
        return "database"
    return _FOLDERS.get(name, "other")


def data_usage(ctx: Context) -> Usage:
    """The data folder's size, broken down by what it holds (the same figure `du -s -B1` gives).

    Each inode is counted once, in the first category it is met in, and the vault is walked
    first: a workspace's `.git/objects` are hard links to the vault's objects, so they count as
    the vault's, and a workspace's figure is what is its own (its files, its own git objects).
    """
    root = ctx.data.root
    parts = dict.fromkeys(CATEGORIES, 0)
    seen: set[tuple[int, int]] = set()
    owned: dict[tuple[str, str], int] = {}  # (top-level folder, its entry) → bytes
    try:
        names = os.listdir(root)
        parts["other"] += disk_bytes(os.lstat(root))
    except OSError as exc:
        raise CairnError(f"cannot read the data folder {root}: {exc.strerror}") from exc
    for name in sorted(names, key=lambda n: (CATEGORIES.index(_category(n)), n)):
        category = _category(name)
        top = os.fspath(root / name)
        shared = name in _SHARE_PARTS
        for path, st in _walk(top):
            if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            size = disk_bytes(st)
            parts[category] += size
            if shared and len(path) > len(top):
                entry = path[len(top) + 1 :].split(os.sep, 1)[0]
                owned[(name, entry)] = owned.get((name, entry), 0) + size
    return Usage(str(root), sum(parts.values()), parts, _shares(ctx, owned))


def _shares(ctx: Context, owned: dict[tuple[str, str], int]) -> tuple[Share, ...]:
    """Each workspace's bytes from `owned`: workspaces/, runs/, approvals/ and cache/ entries
    are named by the workspace, homes/ and egress/ entries by its sandbox sessions."""
    workspaces_by_id = {ws.id: ws for ws in ctx.store.list_workspaces()}
    of_session = {rec.id: rec.workspace_id for rec in ctx.store.list_sessions()}
    tasks: dict[str, list[Task]] = {}
    for task in ctx.store.list_tasks():
        if task.workspace_id:
            tasks.setdefault(task.workspace_id, []).append(task)
    figures: dict[str, dict[str, int]] = {}
    for (folder, entry), size in owned.items():
        if folder in ("homes", "egress"):
            ws_id = of_session.get(entry)
        elif folder == "cache":
            ws_id = entry.removesuffix(".stat")
        else:
            ws_id = entry
        if ws_id not in workspaces_by_id:
            continue
        part = _SHARE_PARTS[folder]
        ws_parts = figures.setdefault(ws_id, dict.fromkeys(("files", "runs", "home", "other"), 0))
        ws_parts[part] += size
    shares = [
        Share(
            ws_id,
            workspaces_by_id[ws_id].state,
            tuple(t.id for t in tasks.get(ws_id, [])),
            tuple(t.title for t in tasks.get(ws_id, [])),
            sum(ws_parts.values()),
            ws_parts,
        )
        for ws_id, ws_parts in figures.items()
    ]
    return tuple(sorted(shares, key=lambda s: (-s.bytes, s.workspace_id)))


class _Ledger:
    """Links removed so far in a plan: a file's blocks are freed by the removal of its last link."""

    def __init__(self) -> None:
        self._removed: dict[tuple[int, int], int] = {}

    def take(self, st: os.stat_result) -> int:
        if stat.S_ISDIR(st.st_mode) or st.st_nlink <= 1:
            return disk_bytes(st)
        key = (st.st_dev, st.st_ino)
        n = self._removed.get(key, 0) + 1
        self._removed[key] = n
        return disk_bytes(st) if n == st.st_nlink else 0

    def take_tree(self, top: str | os.PathLike[str]) -> tuple[int, int]:
        """(bytes freed, files removed) by removing `top` and everything under it."""
        freed = files = 0
        for _path, st in _walk(top):
            freed += self.take(st)
            files += not stat.S_ISDIR(st.st_mode)
        return freed, files


# -- removing, measured ------------------------------------------------------------------------


def _entries(path: str) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except PermissionError:  # a folder an agent made unreadable: it is ours to delete
        os.chmod(path, 0o700)
        with os.scandir(path) as it:
            return list(it)


def _unlink_measured(path: str, st: os.stat_result) -> int:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return 0
    except PermissionError:
        os.chmod(os.path.dirname(path), 0o700)
        os.unlink(path)
    return disk_bytes(st) if st.st_nlink <= 1 else 0


def remove_measured(top: str | os.PathLike[str]) -> int:
    """Delete `top` (a file or a whole tree, links not followed); returns the disk freed, i.e.
    the blocks of every folder and of every file whose last link this removed."""
    top = os.fspath(top)
    try:
        st = os.lstat(top)
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return _unlink_measured(top, st)
    freed = 0
    stack: list[tuple[str, os.stat_result, bool]] = [(top, st, False)]
    while stack:
        path, pst, expanded = stack.pop()
        if expanded:
            try:
                os.rmdir(path)
            except PermissionError:
                os.chmod(os.path.dirname(path), 0o700)
                os.rmdir(path)
            freed += disk_bytes(pst)
            continue
        stack.append((path, pst, True))
        for entry in _entries(path):
            try:
                est = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(est.st_mode):
                stack.append((entry.path, est, False))
            else:
                freed += _unlink_measured(entry.path, est)
    return freed


# -- archiving ---------------------------------------------------------------------------------


def _still_archived_and_idle(ctx: Context, workspace_id: str) -> tuple[Workspace | None, str]:
    """The workspace when it is still archived with no run in flight; else None and why not (a
    plan's item is checked again when it is carried out)."""
    try:
        ws = ctx.store.get_workspace(workspace_id)
    except NotFound:
        return None, f"workspace {workspace_id} no longer exists"
    if ws.state != WorkspaceState.ARCHIVED.value:
        return None, f"workspace {ws.id} is {ws.state} now, no longer archived"
    run = _in_flight_run(ctx, ws.id)
    if run:
        return None, f"workspace {ws.id} has run {run} in flight"
    return ws, ""


def _in_flight_run(ctx: Context, workspace_id: str) -> str | None:
    marks = ",".join("?" * len(runs_mod.IN_FLIGHT))
    row = ctx.store.query_one(
        f"SELECT id, state FROM runs WHERE state IN ({marks}) AND (workspace_id = ? OR task_id IN "
        f"(SELECT id FROM tasks WHERE workspace_id = ?)) ORDER BY created_at DESC LIMIT 1",
        (*runs_mod.IN_FLIGHT, workspace_id, workspace_id),
    )
    return f"{row['id']} ({row['state']})" if row else None


def _watch_lock(ctx: Context, workspace_id: str) -> FileLock | None:
    """The workspace's recording lock, held; None when someone records it (this process too)."""
    lock = FileLock(lock_path(ctx.data.locks_root, "watch", workspace_id))
    return lock if lock.try_acquire() else None


def sharing_tasks(ctx: Context, task: Task) -> list[Task]:
    """The other tasks whose workspace is the task's (Continue children and their parents share
    one), oldest first."""
    if not task.workspace_id:
        return []
    return [
        t for t in ctx.store.list_tasks() if t.workspace_id == task.workspace_id and t.id != task.id
    ]


def _names(tasks: list[Task]) -> str:
    return ", ".join(f"{t.id} ({t.title})" for t in tasks)


def sandbox_up(ctx: Context, sandboxes: Sandboxes | None, ws: Workspace) -> bool | None:
    """Whether the workspace's sandbox container exists and runs: True, False, or None when the
    backend cannot be asked (without a backend to ask, the store's last word is taken)."""
    record = ctx.store.session_for(ws.id)
    if record is None:
        return False
    if sandboxes is None:
        return record.status == "live"
    try:
        manager = sandboxes.get()
        found = manager.backend_of(manager.host_of(record)).list_sessions()
    except CairnError:
        return None
    summary = next((s for s in found if s.container_id == record.container_id), None)
    return summary is not None and summary.status in ("running", "paused", "restarting")


def release_vanished_sandbox(ctx: Context, sandboxes: Sandboxes | None, ws: Workspace) -> Workspace:
    """A workspace the store calls ACTIVE (its sandbox up) whose sandbox is in fact stopped or
    gone goes back to PREPARED, so what needs a stopped sandbox (archive, delete) is not refused
    for a sandbox nobody can stop. Anything else is left as it is."""
    if ws.state != WorkspaceState.ACTIVE.value or _in_flight_run(ctx, ws.id):
        return ws
    if sandbox_up(ctx, sandboxes, ws) is False:
        ws = ctx.set_workspace_state(ws.id, WorkspaceState.PREPARED)
        record = ctx.store.session_for(ws.id)
        if record is not None and record.status == "live":
            ctx.store.update_session(record.id, status="stopped")
    return ws


def archive_task(
    ctx: Context,
    revisions: Revisions,
    snapshots: Snapshots,
    task_ref: str,
    *,
    sandboxes: Sandboxes | None = None,
    shared_ok: bool = False,
) -> Workspace:
    """Move the task's workspace to ARCHIVED: its rows, revisions and snapshots stay, and its
    files go at the next cleanup. The latest files are captured into a snapshot first, so the
    workspace can be restored. Nothing running is stopped: a run in flight, a sandbox that is up
    or a recorder at work refuses the archive; a sandbox that vanished does not. A workspace
    other tasks share (Continue children) is archived for all of them, so it is refused unless
    `shared_ok`, naming them."""
    task = ctx.task(task_ref)
    ws = ctx.workspace_of(task)
    if ws.state == WorkspaceState.ARCHIVED.value:
        return ws
    others = sharing_tasks(ctx, task)
    if others and not shared_ok:
        raise Conflict(
            f"workspace {ws.id} is shared with {_names(others)}; archiving it archives it for "
            "every one of them — confirm to go on",
            hint="cairnctl archive TASK --yes",
        )
    ws = release_vanished_sandbox(ctx, sandboxes, ws)
    _refuse_busy(ctx, ws)
    workspaces.check_transition(ws.state, WorkspaceState.ARCHIVED.value)
    lock = _watch_lock(ctx, ws.id)
    if lock is None:
        raise Conflict(
            f"workspace {ws.id} is being recorded (a window or `cairnctl watch` "
            "follows it); close that first — archiving stops nothing"
        )
    try:
        if Path(ws.root).is_dir():
            snapshots.take(task.id)
        else:
            rev = ctx.store.latest_revision(ws.id)
            if rev is not None:
                snapshots.make(task.id, rev)
        with ctx.store.transaction():
            ws = ctx.store.get_workspace(ws.id)
            _refuse_busy(ctx, ws)
            workspaces.check_transition(ws.state, WorkspaceState.ARCHIVED.value)
            ctx.store.update_workspace(ws.id, state=WorkspaceState.ARCHIVED.value)
    finally:
        lock.release()
    ctx.events.publish(
        ev.WORKSPACE_STATE, ws.id, state=WorkspaceState.ARCHIVED.value, previous=ws.state
    )
    return ctx.store.get_workspace(ws.id)


def _refuse_busy(ctx: Context, ws: Workspace) -> None:
    run = _in_flight_run(ctx, ws.id)
    if run:
        raise Conflict(
            f"workspace {ws.id} has run {run} in flight; archiving stops nothing — "
            "wait for it to end or stop it first"
        )
    if ws.state == WorkspaceState.ACTIVE.value:
        raise Conflict(
            f"the sandbox of workspace {ws.id} is up; stop the task first "
            "(Stop, or `cairnctl stop TASK`) — archiving stops nothing"
        )


def unarchive_task(ctx: Context, revisions: Revisions, task_ref: str) -> Workspace:
    """Bring an archived workspace back to PREPARED; when a cleanup removed its files, they are
    restored (verified) from its newest restorable snapshot."""
    task = ctx.task(task_ref)
    ws = ctx.workspace_of(task)
    if ws.state != WorkspaceState.ARCHIVED.value:
        raise InputError(f"workspace {ws.id} of task {task.id} is {ws.state}, not archived")
    root = Path(ws.root)
    staged: Path | None = None
    snap_tree: str | None = None
    if not root.is_dir():
        vault = ctx.vault_for(ws.source_id)
        snap = next(
            (
                s
                for s in reversed(ctx.store.list_snapshots(ws.id))
                if vault.objects.read_ref(snapshot_ref(s.id)) == s.revision_id
            ),
            None,
        )
        if snap is None:
            raise CorruptSnapshot(
                f"workspace {ws.id} has no files on disk and no restorable snapshot"
            )
        staged = ctx.data.workspaces_root / f".restore-{ws.id}-{secrets.token_hex(4)}"
        tree = workspaces.create_tree(
            vault,
            snap.revision_id,
            staged,
            branch=ws.branch,
            head_commit=ws.head_commit,
            label=f"snapshot {snap.id}",
        )
        if tree != snap.tree:
            workspaces.remove_tree(staged)
            raise CorruptSnapshot(
                f"snapshot {snap.id} cannot be restored: its files do not hash to the recorded tree"
            )
        snap_tree = tree
    try:
        with ctx.store.transaction():
            current = ctx.store.get_workspace(ws.id)
            workspaces.check_transition(current.state, WorkspaceState.PREPARED.value)
            if staged is not None:
                if root.exists() or root.is_symlink():
                    raise Conflict(f"{root} appeared while the workspace was being restored")
                os.rename(staged, root)
                staged = None
            elif not root.is_dir():
                raise Conflict(f"the files of workspace {ws.id} were removed meanwhile; try again")
            ctx.store.update_workspace(ws.id, state=WorkspaceState.PREPARED.value)
    finally:
        if staged is not None:
            workspaces.remove_tree(staged)
    ctx.events.publish(
        ev.WORKSPACE_STATE,
        ws.id,
        state=WorkspaceState.PREPARED.value,
        previous=WorkspaceState.ARCHIVED.value,
    )
    if snap_tree is not None:
        revisions.capture(task.id, trigger="restore")
    return ctx.store.get_workspace(ws.id)


# -- deleting ----------------------------------------------------------------------------------


@dataclass
class Deletion:
    """What deleting one task removes (or removed), and why it cannot be deleted now."""

    task_id: str
    title: str
    workspace_id: str | None
    workspace_root: str | None
    workspace_goes: bool  # no other task shares the workspace: it goes with the task
    shared_with: list[str]  # "id (title)" of the tasks that keep the shared workspace
    runs: int
    revisions: int
    snapshots: int
    container: str | None
    # Engine sessions whose conversation, kept at the task's checkpoints, no other task's run
    # names: their copies go with the task.
    conversations: list[str] = field(default_factory=list)
    refusal: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def what_goes(self) -> list[str]:
        """Each thing that goes, in words (the confirmation lists exactly these)."""
        out = [f"task {self.task_id} ({self.title}) and its {self.runs} run(s) with their output"]
        if self.workspace_goes:
            out.append(
                f"workspace {self.workspace_id}: its files at {self.workspace_root}, "
                f"{self.revisions} revision(s) and {self.snapshots} snapshot(s)"
            )
            if self.container:
                out.append(f"its sandbox container {self.container} and the engine's home")
        elif self.workspace_id:
            out.append(
                f"(workspace {self.workspace_id} stays: {', '.join(self.shared_with)} share it)"
            )
        if self.conversations:
            out.append(
                "the engine's conversation kept at its checkpoints "
                f"(session {', '.join(self.conversations)})"
            )
        return out


def deletion_of(ctx: Context, sandboxes: Sandboxes | None, task: Task) -> Deletion:
    others = sharing_tasks(ctx, task)
    ws = ctx.store.get_workspace(task.workspace_id) if task.workspace_id else None
    record = ctx.store.session_for(ws.id) if ws else None
    runs = ctx.store.runs_of([task.id])
    goes = ws is not None and not others
    d = Deletion(
        task_id=task.id,
        title=task.title,
        workspace_id=ws.id if ws else None,
        workspace_root=ws.root if ws else None,
        workspace_goes=goes,
        shared_with=[f"{t.id} ({t.title})" for t in others],
        runs=len(runs),
        revisions=len(ctx.store.list_revisions(ws.id)) if goes and ws else 0,
        snapshots=len(ctx.store.list_snapshots(ws.id)) if goes and ws else 0,
        container=record.container_name if goes and record else None,
        conversations=_conversations_going(ctx, task, runs),
    )
    in_flight = next((r for r in runs if r.state in runs_mod.IN_FLIGHT), None)
    children = [t for t in ctx.store.list_tasks() if t.parent_task_id == task.id]
    if in_flight is not None:
        d.refusal = (
            f"run {in_flight.id} of task {task.id} is {in_flight.state}; stop it or wait for it "
            "to end first"
        )
    elif children:
        d.refusal = (
            f"task {task.id} has child tasks {_names(children)}, which grew from it; "
            "delete them first"
        )
    elif goes and ws is not None:
        ws = release_vanished_sandbox(ctx, sandboxes, ws)
        up = sandbox_up(ctx, sandboxes, ws) if ws.state == WorkspaceState.ACTIVE.value else False
        if up:
            d.refusal = (
                f"the sandbox of workspace {ws.id} is up; stop the task first "
                "(Stop, or `cairnctl stop TASK`)"
            )
        elif up is None:
            d.refusal = (
                f"the sandbox of workspace {ws.id} was last seen up and its host cannot be "
                "asked now; stop the task when its host answers, then delete it"
            )
    return d


def delete_task(ctx: Context, sandboxes: Sandboxes | None, task: Task) -> Deletion:
    d = deletion_of(ctx, sandboxes, task)
    if d.refusal:
        raise Conflict(f"task {task.id} cannot be deleted: {d.refusal}")
    ws = ctx.store.get_workspace(d.workspace_id) if d.workspace_goes and d.workspace_id else None
    lock = _watch_lock(ctx, ws.id) if ws is not None else None
    if ws is not None and lock is None:
        raise Conflict(
            f"workspace {ws.id} is being recorded (a window or `cairnctl watch` follows it); "
            "close that first"
        )
    try:
        record = ctx.store.session_for(ws.id) if ws is not None else None
        if record is not None:
            _remove_sandbox(ctx, sandboxes, record, d, task)
        snaps = ctx.store.list_snapshots(ws.id) if ws is not None else []
        _delete_rows(ctx, task.id, ws.id if ws is not None else None)
        if ws is not None:
            _delete_workspace_files(ctx, ws, record.id if record else None, snaps, d)
        _delete_conversations(ctx, d)
    finally:
        if lock is not None:
            lock.release()
    ctx.events.publish(
        ev.TASK_DELETED, task.id, workspace_id=d.workspace_id, workspace_gone=d.workspace_goes
    )
    return d


def _remove_sandbox(
    ctx: Context, sandboxes: Sandboxes | None, record: SessionRecord, d: Deletion, task: Task
) -> None:
    """The workspace's sandbox, on its own host. On a remote host its carrier and volumes go
    too; a remote host that does not answer keeps them, recorded (REMOTE_LEFTOVERS) so a later
    cleanup removes them when it answers, and the deletion goes on: everything here is the
    record, nothing there is."""
    if sandboxes is None:
        d.notes.append("the sandbox backend was not asked; an old container may remain")
        return
    manager = sandboxes.get()
    socket = manager.egress_paths(record.id).socket
    try:
        if egress.running_pid(socket):
            egress.stop(socket)
    except (CairnError, OSError) as exc:
        d.notes.append(f"the network proxy of the sandbox could not be stopped: {exc}")
    host = manager.host_of(record)
    try:
        backend = manager.backend_of(host)
    except InputError as exc:  # a host taken out of the settings: nothing can be asked of it
        _record_remote_leftover(ctx, host, record, task)
        d.notes.append(
            f"sandbox host {host} is no longer in the settings, so whatever session "
            f"{record.id} holds there stays; set hosts.{host} again and a cleanup "
            f"(Housekeeping) removes it ({exc.message})"
        )
        return
    try:
        if isinstance(backend, RemoteDockerBackend):
            backend.remove_session(record.id)
        elif record.container_id:
            backend.remove(record.container_id)
    except HostUnreachable as exc:
        _record_remote_leftover(ctx, host, record, task)
        d.notes.append(
            f"sandbox host {host} did not answer, so the sandbox and volumes of session "
            f"{record.id} stay there; a cleanup (Housekeeping) removes them when it answers "
            f"({exc.message})"
        )
    except CairnError as exc:
        raise Conflict(f"the sandbox could not be removed, so nothing was deleted: {exc}") from exc


def _leftovers_root(ctx: Context) -> Path:
    return ctx.data.root / REMOTE_LEFTOVERS


def _record_remote_leftover(ctx: Context, host: str, record: SessionRecord, task: Task) -> None:
    root = _leftovers_root(ctx)
    root.mkdir(parents=True, exist_ok=True)
    entry = {
        "host": host,
        "session_id": record.id,
        "workspace_id": record.workspace_id,
        "task_id": task.id,
        "title": task.title,
        "since": time.time(),
    }
    tmp = root / f".{record.id}.json.tmp"
    tmp.write_text(json.dumps(entry))
    os.replace(tmp, root / f"{record.id}.json")


def remote_leftovers(ctx: Context) -> dict[str, dict]:
    """The recorded leftovers on remote hosts, by session (unreadable records are skipped)."""
    out: dict[str, dict] = {}
    root = _leftovers_root(ctx)
    if not root.is_dir():
        return out
    for path in sorted(root.glob("*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(entry, dict) and entry.get("session_id") == path.stem and entry.get("host"):
            out[path.stem] = entry
    return out


def _forget_remote_leftover(ctx: Context, session_id: str) -> None:
    (_leftovers_root(ctx) / f"{session_id}.json").unlink(missing_ok=True)


def _delete_rows(ctx: Context, task_id: str, workspace_id: str | None) -> None:
    """The task's rows, and its workspace's when it goes, in one transaction (children first:
    the store checks its references)."""
    # Proposed as Store.delete_task_rows(task_id, workspace_id): the store owns its SQL.
    with ctx.store.transaction() as conn:
        runs = "(SELECT id FROM runs WHERE task_id = ?)"
        conn.execute(f"DELETE FROM approvals WHERE run_id IN {runs}", (task_id,))
        conn.execute(f"DELETE FROM checkpoints WHERE run_id IN {runs}", (task_id,))
        conn.execute("DELETE FROM runs WHERE task_id = ?", (task_id,))
        conn.execute("DELETE FROM credential_grants WHERE task_id = ?", (task_id,))
        conn.execute("DELETE FROM artifacts WHERE task_id = ?", (task_id,))
        conn.execute("DELETE FROM leases WHERE lineage_id = ?", (task_id,))
        conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
        if workspace_id is not None:
            snaps = "(SELECT id FROM snapshots WHERE workspace_id = ?)"
            conn.execute(f"DELETE FROM checkpoints WHERE snapshot_id IN {snaps}", (workspace_id,))
            conn.execute("DELETE FROM session_states WHERE workspace_id = ?", (workspace_id,))
            conn.execute("DELETE FROM revisions WHERE workspace_id = ?", (workspace_id,))
            conn.execute("DELETE FROM snapshots WHERE workspace_id = ?", (workspace_id,))
            conn.execute("DELETE FROM workspaces WHERE id = ?", (workspace_id,))


def _delete_workspace_files(
    ctx: Context, ws: Workspace, session_id: str | None, snaps: list, d: Deletion
) -> None:
    """The workspace's files, refs, run files, stat cache, approvals, engine home and proxy
    folder. The rows are gone already: what fails here is a leftover for the note, not an error
    (the vault's unreachable objects go at the next housekeeping)."""
    try:
        vault = ctx.vault_for(ws.source_id)
        for ref in (base_ref(ws.id), revisions_ref(ws.id), *(snapshot_ref(s.id) for s in snaps)):
            if vault.objects.read_ref(ref):
                vault.objects.delete_ref(ref)
    except CairnError as exc:
        d.notes.append(f"refs of workspace {ws.id} remain in the vault: {exc}")
    paths = [
        Path(ws.root),
        ctx.data.runs_root / ws.id,
        ctx.data.root / "approvals" / ws.id,
        _stat_cache(ctx, ws.id),
    ]
    if session_id:
        paths += [ctx.data.home_path(session_id), ctx.data.root / "egress" / session_id]
    for path in paths:
        try:
            remove_measured(path)
        except OSError as exc:
            d.notes.append(f"{path} could not be removed: {exc.strerror or exc}")


def _engine_sessions(runs: list[Run], checkpoints: list[Checkpoint]) -> set[str]:
    """The engine sessions whose kept conversation these runs may read: each run's own, the one
    it continued or forked (a fork's child reads its parent's copy), those at the conversation
    positions it noted (a later fork at one of its revisions starts there), and the sessions
    their checkpoints were taken in."""
    named: set[str | None] = set()
    for run in runs:
        named.add(run.engine_session_id)
        named.add(run.spec.get("session_id"))
        for entry in (run.spec.get(POSITIONS) or {}).values():
            if isinstance(entry, dict):
                named.add(entry.get("session_id"))
    named.update(ck.engine_session_id for ck in checkpoints)
    return {s for s in named if isinstance(s, str) and s}


def _still_named(ctx: Context, task_id: str) -> set[str]:
    """Engine sessions the runs of every task but this one name."""
    others = [r for r in ctx.store.list_runs() if r.task_id != task_id]
    ids = {r.id for r in others}
    return _engine_sessions(others, [ck for ck in ctx.store.list_checkpoints() if ck.run_id in ids])


def _conversations_going(ctx: Context, task: Task, runs: list[Run]) -> list[str]:
    """The sessions whose kept conversation goes with the task: named by its runs and by no
    other task's (a Continue child shares its parent's session; a task with children is not
    deleted, so a fork's child never loses the parent's copy it reads)."""
    mine = _engine_sessions(runs, [ck for r in runs for ck in ctx.store.list_checkpoints(r.id)])
    going = mine - _still_named(ctx, task.id)
    return [p.name for p in conversations.kept_folders(ctx.data, going)]


def _delete_conversations(ctx: Context, d: Deletion) -> None:
    """The kept conversations of the deleted task's sessions; who names them is read again once
    its rows are gone, so a session another run came to name meanwhile stays."""
    going = set(d.conversations) - _still_named(ctx, d.task_id)
    for path in conversations.kept_folders(ctx.data, going):
        try:
            remove_measured(path)
        except OSError as exc:
            d.notes.append(f"{path} could not be removed: {exc.strerror or exc}")


# -- reachability ------------------------------------------------------------------------------


def _named_by_store(ctx: Context, source_id: str) -> set[str]:
    """Every commit and tree the store names for the source's workspaces."""
    q = ctx.store.query
    ws_ids = "(SELECT id FROM workspaces WHERE source_id = ?)"
    names: set[str] = set()
    for row in q(
        "SELECT base_revision, head_commit, current_revision FROM workspaces WHERE source_id = ?",
        (source_id,),
    ):
        names.update(v for v in row if v)
    for row in q(f"SELECT id, tree FROM revisions WHERE workspace_id IN {ws_ids}", (source_id,)):
        names.update((row["id"], row["tree"]))
    for row in q(
        f"SELECT revision_id, tree FROM snapshots WHERE workspace_id IN {ws_ids}", (source_id,)
    ):
        names.update((row["revision_id"], row["tree"]))
    for row in q(
        f"SELECT c.workspace_ref, c.tree FROM checkpoints c JOIN snapshots s ON "
        f"c.snapshot_id = s.id WHERE s.workspace_id IN {ws_ids}",
        (source_id,),
    ):
        names.add(row["tree"])
        names.add(row["workspace_ref"].rpartition("@")[2])
    for row in q(
        "SELECT revision_id FROM artifacts WHERE revision_id IS NOT NULL AND task_id IN "
        "(SELECT id FROM tasks WHERE source_id = ?)",
        (source_id,),
    ):
        names.add(row["revision_id"])
    return {n for n in names if len(n) == 40}


def _present(vault: Vault, shas: set[str]) -> list[str]:
    if not shas:
        return []
    proc = run_git(
        ["--git-dir", str(vault.git_dir), "cat-file", "--batch-check"],
        input="".join(f"{s}\n" for s in sorted(shas)).encode(),
    )
    return [
        line.split()[0]
        for line in proc.stdout.decode().splitlines()
        if line and not line.endswith(" missing")
    ]


def _reachable(ctx: Context, vault: Vault, source_id: str) -> set[str]:
    """Every object reachable from the vault's refs or from what the store names; a vault whose
    history cannot be walked completely (a missing object) raises, so nothing is removed."""
    roots = _present(vault, _named_by_store(ctx, source_id))
    proc = run_git(
        ["--git-dir", str(vault.git_dir), "rev-list", "--objects", "--all", "--stdin"],
        input="".join(f"{r}\n" for r in roots).encode(),
        check=False,
    )
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise VaultError(
            f"the vault {vault.git_dir} cannot be walked completely "
            f"({err[-1] if err else 'git exit ' + str(proc.returncode)})"
        )
    return {line[:40] for line in proc.stdout.decode().splitlines() if len(line) >= 40}


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _unreachable(
    vault: Vault, reachable: set[str], cutoff: float
) -> list[tuple[str, os.stat_result]]:
    """Loose objects (and unfinished object writes) no root reaches, untouched since `cutoff`:
    (path under objects/, lstat). Packs are `_unreachable_packs`."""
    out: list[tuple[str, os.stat_result]] = []
    objects = vault.git_dir / "objects"
    try:
        fans = sorted(
            e.name
            for e in os.scandir(objects)
            if len(e.name) == 2 and _is_hex(e.name) and e.is_dir(follow_symlinks=False)
        )
    except OSError:
        return out
    for fan in fans:
        try:
            entries = sorted(os.scandir(objects / fan), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if len(name) == 38 and _is_hex(name):
                if fan + name in reachable:
                    continue
            elif not name.startswith("tmp_obj_"):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mtime <= cutoff:
                out.append((f"{fan}/{name}", st))
    return out


# A pack's files, in the order they are set aside (its index first: git no longer looks in it)
# and put back in the other order (its index last).
PACK_FILES = (".idx", ".rev", ".pack")
_PACK_NAME = re.compile(r"pack-[0-9a-f]{40}(?:[0-9a-f]{24})?")


@dataclass(frozen=True)
class _Pack:
    rel: str  # "pack/pack-<id>.pack", under objects/
    files: tuple[tuple[Path, os.stat_result], ...]
    count: int  # the objects it holds


def _pack_state(objects: Path, name: str, reachable: set[str], cutoff: float) -> _Pack | str | None:
    """The pack `name` (pack-<id>) when none of its objects is reachable and none of its files
    changed since `cutoff`; else why not ("reachable", "touched"), or None when it is not a
    pack Cairn can read (kept: an index of another version, a `.keep` beside it)."""
    folder = objects / "pack"
    if not _PACK_NAME.fullmatch(name) or (folder / f"{name}.keep").exists():
        return None
    files = []
    for suffix in PACK_FILES:
        try:
            files.append((folder / f"{name}{suffix}", os.lstat(folder / f"{name}{suffix}")))
        except FileNotFoundError:
            if suffix != ".rev":
                return None
    if any(not stat.S_ISREG(st.st_mode) for _, st in files):
        return None
    try:
        index = PackIndex.open(folder / f"{name}.idx")
    except (OSError, ValueError):
        return None
    try:
        count = index.fanout[255]
        if any(sha in reachable for sha in index.ids()):
            return "reachable"
    finally:
        index.close()
    if any(st.st_mtime > cutoff for _, st in files):
        return "touched"
    return _Pack(f"pack/{name}.pack", tuple(files), count)


def _unreachable_packs(vault: Vault, reachable: set[str], cutoff: float) -> list[_Pack]:
    """Packs none of whose objects a root reaches (a deleted task's import, say), untouched
    since `cutoff`. A pack some of whose objects are reachable is kept whole."""
    objects = vault.git_dir / "objects"
    try:
        names = sorted(
            n[: -len(".idx")] for n in os.listdir(objects / "pack") if n.endswith(".idx")
        )
    except OSError:
        return []
    found = []
    for name in names:
        pack = _pack_state(objects, name, reachable, cutoff)
        if isinstance(pack, _Pack):
            found.append(pack)
    return found


# -- planning ----------------------------------------------------------------------------------


def _leftovers(ctx: Context) -> list[os.DirEntry]:
    """Trees a cleanup had moved aside when it was interrupted."""
    try:
        with os.scandir(ctx.data.workspaces_root) as it:
            return sorted((e for e in it if e.name.startswith(TRASH_PREFIX)), key=lambda e: e.name)
    except FileNotFoundError:
        return []


def _owned_tree(ctx: Context, ws: Workspace) -> Path | None:
    """The workspace's folder when it is a real folder directly under the data folder's
    workspaces/ (anything else is never deleted by a cleanup)."""
    root = Path(ws.root)
    try:
        st = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    if os.path.realpath(root.parent) != os.path.realpath(ctx.data.workspaces_root):
        return None
    return root


def _stat_cache(ctx: Context, workspace_id: str) -> Path:
    return ctx.data.cache_root / f"{workspace_id}.stat"


def plan(
    ctx: Context,
    *,
    grace_seconds: float = GRACE_SECONDS,
    now: float | None = None,
    sandboxes: Sandboxes | None = None,
) -> Plan:
    """What a cleanup would remove now and the disk each item frees. Reads only. Without
    `sandboxes`, sandbox containers are not looked at."""
    now = time.time() if now is None else now
    usage = data_usage(ctx)
    ledger = _Ledger()
    items: list[PlanItem] = []
    notes: list[str] = []

    for entry in _leftovers(ctx):
        freed, files = ledger.take_tree(entry.path)
        items.append(
            PlanItem(
                KIND_LEFTOVER,
                f"leftover of an interrupted cleanup: {entry.path}",
                freed,
                entry.path,
                files,
            )
        )

    titles: dict[str, list[str]] = {}
    for task in ctx.store.list_tasks():
        if task.workspace_id:
            titles.setdefault(task.workspace_id, []).append(task.title)
    for ws in ctx.store.list_workspaces(states=(WorkspaceState.ARCHIVED.value,)):
        root = _owned_tree(ctx, ws)
        cache = _stat_cache(ctx, ws.id)
        if root is None and Path(ws.root).exists():
            notes.append(
                f"the files of archived workspace {ws.id} at {ws.root} are not in the "
                "data folder's workspaces/; they are left alone"
            )
        freed = files = 0
        if root is not None:
            freed, files = ledger.take_tree(root)
        if cache.is_file():
            more, n = ledger.take_tree(cache)
            freed, files = freed + more, files + n
        if root is None and not files:
            continue
        names = tuple(titles.get(ws.id, ()))
        who = ", ".join(f"“{t}”" for t in names) or "no task"
        items.append(
            PlanItem(
                KIND_WORKSPACE,
                f"files of archived workspace {ws.id} ({who}) at {ws.root}",
                freed,
                ws.root,
                files,
                workspace_id=ws.id,
                task_titles=names,
                source_id=ws.source_id,
            )
        )

    if sandboxes is not None:
        items += _stopped_containers(ctx, sandboxes, titles, notes)
        items += _remote_leftover_items(ctx, sandboxes, notes)

    for source in ctx.store.list_sources():
        try:
            vault = ctx.vault_for(source.id)
            reachable = _reachable(ctx, vault, source.id)
            found = _unreachable(vault, reachable, now - grace_seconds)
            packs = _unreachable_packs(vault, reachable, now - grace_seconds)
        except CairnError as exc:
            notes.append(f"the vault of {source.path} is left alone: {exc}")
            continue
        if _quarantines(vault):
            notes.append(
                f"an interrupted cleanup set objects of {source.path} aside; the next "
                "cleanup puts them back"
            )
        if not found and not packs:
            continue
        freed = sum(ledger.take(st) for _rel, st in found)
        freed += sum(ledger.take(st) for pack in packs for _path, st in pack.files)
        count = len(found) + sum(pack.count for pack in packs)
        items.append(
            PlanItem(
                KIND_OBJECTS,
                f"{count} vault objects of {source.path} that no revision, "
                "snapshot or checkpoint reaches (left by deleted tasks, interrupted captures "
                "or imports)",
                freed,
                str(vault.git_dir),
                count,
                source_id=source.id,
                objects=(*(rel for rel, _st in found), *(pack.rel for pack in packs)),
            )
        )
    return Plan(tuple(items), usage, tuple(notes), grace_seconds, now)


def _stopped_containers(
    ctx: Context, sandboxes: Sandboxes, titles: dict[str, list[str]], notes: list[str]
) -> list[PlanItem]:
    """The sandbox containers of archived workspaces that run nothing (an archived task's
    sandbox is stopped by construction: archiving refuses one that is up). Docker keeps their
    writable layer; un-archiving and running again makes the next generation."""
    archived = {
        ws.id: ws for ws in ctx.store.list_workspaces(states=(WorkspaceState.ARCHIVED.value,))
    }
    if not archived:
        return []
    manager = sandboxes.get()
    # The default host, and every other host an archived workspace's sandbox is on.
    hosts = {manager.host_of(r) for r in ctx.store.list_sessions() if r.workspace_id in archived}
    found: list[tuple[str | None, SessionSummary]] = []
    try:
        found += [(None, s) for s in manager.backend.list_sessions()]
    except CairnError as exc:
        notes.append(f"sandbox containers are left alone: the sandbox backend said: {exc}")
    for name in sorted(hosts - {manager.host}):
        try:
            found += [(name, s) for s in manager.backend_of(name).list_sessions()]
        except CairnError as exc:
            notes.append(f"sandbox containers on host {name} are left alone: {exc}")
    items = []
    for host, summary in found:
        ws = archived.get(summary.workspace_id or "")
        if ws is None or summary.status not in STOPPED_CONTAINER_STATES:
            continue
        names = tuple(titles.get(ws.id, ()))
        who = ", ".join(f"“{t}”" for t in names) or "no task"
        backend = manager.backend_of(host)
        there = (
            f" on host {host or manager.host}, with its carrier and volumes there"
            if isinstance(backend, RemoteDockerBackend)
            else f" on host {host}"
            if host
            else ""
        )
        items.append(
            PlanItem(
                KIND_CONTAINER,
                f"{summary.status} sandbox container {summary.container_name} of archived "
                f"workspace {ws.id} ({who}){there}",
                0,  # Docker's disk, not the data folder's
                summary.container_id,
                1,
                workspace_id=ws.id,
                task_titles=names,
                source_id=summary.session_id,
                host=host,
            )
        )
    return items


def _remote_hosts(ctx: Context, sandboxes: Sandboxes) -> list[str]:
    """The remote hosts to look at: the default one, every host a session is on, and every host
    a deleted task's leftovers are recorded on."""
    manager = sandboxes.get()
    names = {manager.host, *(manager.host_of(r) for r in ctx.store.list_sessions())}
    names |= {e["host"] for e in remote_leftovers(ctx).values()}
    out = []
    for name in sorted(names):
        try:
            if isinstance(manager.backend_of(name), RemoteDockerBackend):
                out.append(name)
        except CairnError:
            continue  # a host no longer in the settings: nothing can be asked of it
    return out


def _remote_leftover_items(ctx: Context, sandboxes: Sandboxes, notes: list[str]) -> list[PlanItem]:
    """What sessions with no record in the store (their task deleted) left on remote hosts:
    their sandbox, carrier and volumes there, by their labels; a host that does not answer is
    a note, and its recorded leftovers wait for it."""
    records = remote_leftovers(ctx)
    known = {r.id for r in ctx.store.list_sessions()}
    manager = sandboxes.get()
    now = time.time()
    items = []
    for host in _remote_hosts(ctx, sandboxes):
        waiting = [e for e in records.values() if e["host"] == host]
        backend = manager.backend_of(host)
        assert isinstance(backend, RemoteDockerBackend)
        try:
            found = backend.session_parts()
        except CairnError as exc:
            if waiting:
                notes.append(
                    f"sandbox host {host} did not answer: what {len(waiting)} deleted task(s) "
                    f"left there stays until it does ({exc})"
                )
            continue
        left = {s: p for s, p in found.items() if _left_behind(s, p, known, records, now)}
        for entry in waiting:  # recorded, and nothing there any more: the record goes
            left.setdefault(entry["session_id"], SessionParts(entry["session_id"]))
        for session_id, parts in sorted(left.items()):
            entry = records.get(session_id) or {}
            title = entry.get("title")
            whose = f"deleted task “{title}”" if title else "a task no longer here"
            items.append(
                PlanItem(
                    KIND_REMOTE,
                    f"on sandbox host {host}, what {whose} left (session {session_id}): "
                    f"{parts.words()}",
                    0,  # the remote engine's disk, not the data folder's
                    session_id,
                    len(parts.containers) + len(parts.volumes),
                    workspace_id=parts.workspace_id or entry.get("workspace_id"),
                    task_titles=(title,) if title else (),
                    host=host,
                )
            )
    return items


# -- cleaning ----------------------------------------------------------------------------------


def clean(
    ctx: Context, the_plan: Plan, *, now: float | None = None, sandboxes: Sandboxes | None = None
) -> Result:
    """Carry out `the_plan`, item by item in its order, re-checking each under the locks that
    matter; an item that no longer qualifies is skipped with the reason.

    Order on disk, for crash safety: an archived workspace's folder is first renamed to
    `workspaces/.trash-*` inside a store write transaction that re-reads the workspace's state
    (so the decision and the move are one step for every other writer: an un-archive either
    happens before and the folder stays, or after and finds it gone and restores it), then
    deleted from there. Files first, and no row changes: the row already says "archived",
    which means "no files on disk"; a crash leaves either the folder in place (planned again)
    or a `.trash-*` folder (planned as a leftover). Vault objects are moved into a quarantine
    folder inside the vault, the vault is walked again, and only then deleted; a failed walk
    puts them back, and a quarantine left by a crash is put back at the next cleanup.

    Limits: the grace period protects objects being written now; an old unreachable object
    that a writer reuses (same content) between the walk and its ref update is caught only when
    that ref lands before the second walk. Captures of a workspace recorded by a watcher are
    excluded by its lock; one-off captures by another process are not.
    """
    now = time.time() if now is None else now
    result = Result()
    cutoff = now - the_plan.grace_seconds
    _put_back_quarantines(ctx, result)
    for item in the_plan.items:
        try:
            if item.kind == KIND_LEFTOVER:
                reason = _clean_leftover(ctx, item, result)
            elif item.kind == KIND_WORKSPACE:
                reason = _clean_workspace(ctx, item, result)
            elif item.kind == KIND_OBJECTS:
                reason = _clean_objects(ctx, item, result, cutoff)
            elif item.kind == KIND_CONTAINER:
                reason = _clean_container(ctx, sandboxes, item)
            elif item.kind == KIND_REMOTE:
                reason = _clean_remote(ctx, sandboxes, item)
            else:
                reason = f"unknown kind of item {item.kind!r}"
        except (CairnError, OSError) as exc:
            reason = f"failed: {exc}"
        if reason:
            result.skipped.append(Skipped(item, reason))
        else:
            result.done.append(item)
    if result.done:
        ctx.events.publish(
            ev.HOUSEKEEPING_DONE,
            None,
            freed=result.freed,
            items=len(result.done),
            skipped=len(result.skipped),
        )
    return result


def _clean_container(ctx: Context, sandboxes: Sandboxes | None, item: PlanItem) -> str | None:
    """Remove an archived workspace's stopped container, checked again first: the workspace
    still archived with no run in flight, the container still there and still stopped. Its
    session record then says "gone" and its network proxy is stopped."""
    assert item.workspace_id
    if sandboxes is None:
        return "the sandbox backend was not asked"
    ws, why = _still_archived_and_idle(ctx, item.workspace_id)
    if ws is None:
        return why
    manager = sandboxes.get()
    backend = manager.backend_of(item.host) if item.host else manager.backend
    summary = next((s for s in backend.list_sessions() if s.container_id == item.path), None)
    if summary is None:
        return "the container is gone already"
    if summary.status not in STOPPED_CONTAINER_STATES:
        return f"the container is {summary.status} now"
    if isinstance(backend, RemoteDockerBackend) and summary.session_id:
        backend.remove_session(summary.session_id)  # its carrier and volumes too
    else:
        backend.remove(item.path)
    for record in ctx.store.list_sessions():
        if record.container_id == item.path:
            ctx.store.update_session(record.id, status="gone")
            socket = manager.egress_paths(record.id).socket
            try:
                if egress.running_pid(socket):
                    egress.stop(socket)
            except (CairnError, OSError):
                pass  # a proxy left running serves nothing: its sandbox is gone
    return None


def _left_behind(
    session_id: str, parts: SessionParts, known: set[str], records: dict[str, dict], now: float
) -> bool:
    """Whether what a remote host holds of a session is a deleted task's: the store does not
    know the session, and its deletion is recorded or it is older than REMOTE_GRACE_SECONDS."""
    if session_id in known:
        return False
    return session_id in records or now - parts.made_at >= REMOTE_GRACE_SECONDS


def _clean_remote(ctx: Context, sandboxes: Sandboxes | None, item: PlanItem) -> str | None:
    """Remove what a deleted task left on a remote host, checked again first: its session still
    has no record here. Its leftovers record goes once the host has nothing of it."""
    if sandboxes is None:
        return "the sandbox backend was not asked"
    session_id = item.path
    assert item.host
    backend = sandboxes.get().backend_of(item.host)
    if not isinstance(backend, RemoteDockerBackend):
        return f"host {item.host} is not a remote sandbox host any more"
    known = {r.id for r in ctx.store.list_sessions()}
    try:
        parts = backend.session_parts().get(session_id)
        if parts is not None and not _left_behind(
            session_id, parts, known, remote_leftovers(ctx), time.time()
        ):
            return f"session {session_id} is in use again"
        backend.remove_session(session_id)
    except HostUnreachable as exc:
        return f"sandbox host {item.host} did not answer; tried again at the next cleanup ({exc})"
    _forget_remote_leftover(ctx, session_id)
    return None


def _clean_leftover(ctx: Context, item: PlanItem, result: Result) -> str | None:
    path = Path(item.path)
    if not path.name.startswith(TRASH_PREFIX) or os.path.realpath(path.parent) != os.path.realpath(
        ctx.data.workspaces_root
    ):
        return f"{path} is not a leftover of a cleanup"
    if not (path.exists() or path.is_symlink()):
        return f"{path} is gone already"
    result.freed += remove_measured(path)
    return None


def _clean_workspace(ctx: Context, item: PlanItem, result: Result) -> str | None:
    assert item.workspace_id
    lock = _watch_lock(ctx, item.workspace_id)
    if lock is None:
        return f"workspace {item.workspace_id} is being recorded"
    try:
        trash = (
            ctx.data.workspaces_root / f"{TRASH_PREFIX}{item.workspace_id}-{secrets.token_hex(4)}"
        )
        moved = False
        with ctx.store.transaction():
            ws, why = _still_archived_and_idle(ctx, item.workspace_id)
            if ws is None:
                return why
            root = _owned_tree(ctx, ws)
            if root is not None:
                os.rename(root, trash)
                moved = True
        if moved:
            result.freed += remove_measured(trash)
        result.freed += remove_measured(_stat_cache(ctx, item.workspace_id))
    finally:
        lock.release()
    return None


def _clean_objects(ctx: Context, item: PlanItem, result: Result, cutoff: float) -> str | None:
    assert item.source_id
    try:
        source: Source = ctx.store.get_source(item.source_id)
    except NotFound:
        return f"the source folder {item.source_id} no longer exists"
    vault = ctx.vault_for(source.id)
    with ExitStack() as stack:
        try:
            stack.enter_context(
                held(
                    ctx.data.locks_root,
                    "housekeeping",
                    source.id,
                    "another cleanup is working on this vault",
                )
            )
            stack.enter_context(
                held(ctx.data.locks_root, "import", source.path, f"{source.path} is being imported")
            )
        except Conflict as exc:
            return str(exc)
        for ws in ctx.store.list_workspaces():
            if ws.source_id != source.id:
                continue
            lock = _watch_lock(ctx, ws.id)
            if lock is None:
                return f"workspace {ws.id} of this vault is being recorded; try again later"
            stack.callback(lock.release)
        _restore_quarantines(vault)
        reachable = _reachable(ctx, vault, source.id)
        objects = vault.git_dir / "objects"
        quarantine = vault.git_dir / f"{QUARANTINE_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        moved: list[tuple[Path, Path]] = []
        needed = touched = 0
        for rel in item.objects:
            fan, _, name = rel.partition("/")
            if fan == "pack":
                state = _pack_state(objects, name.removesuffix(".pack"), reachable, cutoff)
                if state == "reachable":
                    needed += 1
                elif state == "touched":
                    touched += 1
                elif isinstance(state, _Pack):
                    quarantine.mkdir(exist_ok=True)
                    for path, _st in state.files:
                        target = quarantine / path.name
                        os.rename(path, target)
                        moved.append((path, target))
                continue
            if fan + name in reachable:
                needed += 1
                continue
            path = objects / rel
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if st.st_mtime > cutoff:
                touched += 1
                continue
            quarantine.mkdir(exist_ok=True)
            target = quarantine / (fan + name)
            os.rename(path, target)
            moved.append((path, target))
        try:
            _reachable(ctx, vault, source.id)
        except VaultError as exc:
            for path, target in reversed(moved):  # a pack's index last
                if not path.exists():
                    os.rename(target, path)
            remove_measured(quarantine)
            return f"the vault changed during the cleanup and was left as it was ({exc})"
        if quarantine.exists():
            # The quarantine folder was made by this cleanup: its own blocks are not freed.
            made = disk_bytes(os.lstat(quarantine))
            result.freed += remove_measured(quarantine) - made
    if needed:
        result.notes.append(
            f"{needed} objects of {source.path} became reachable since the plan "
            "(a new ref or checkpoint) and were kept"
        )
    if touched:
        result.notes.append(
            f"{touched} objects of {source.path} were written again since the plan and were kept"
        )
    if (needed or touched) and not moved:
        return "no object of the plan still qualifies"
    return None


def _quarantines(vault: Vault) -> list[str]:
    try:
        with os.scandir(vault.git_dir) as it:
            return [
                e.path
                for e in it
                if e.name.startswith(QUARANTINE_PREFIX) and e.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return []


def _put_back_quarantines(ctx: Context, result: Result) -> None:
    """Before anything else: undo what an interrupted cleanup had set aside in any vault."""
    for source in ctx.store.list_sources():
        try:
            vault = ctx.vault_for(source.id)
            if not _quarantines(vault):
                continue
            with held(
                ctx.data.locks_root,
                "housekeeping",
                source.id,
                "another cleanup is working on this vault",
            ):
                _restore_quarantines(vault)
            result.notes.append(
                f"objects an interrupted cleanup had set aside in the vault of "
                f"{source.path} were put back"
            )
        except (CairnError, OSError) as exc:
            result.notes.append(f"the vault of {source.path}: {exc}")


def _restore_quarantines(vault: Vault) -> None:
    """Put back objects a crashed cleanup had set aside: they are judged again from scratch."""
    objects = vault.git_dir / "objects"

    def index_last(entry: os.DirEntry) -> tuple[bool, str]:
        return entry.name.endswith(".idx"), entry.name

    for folder in _quarantines(vault):
        for obj in sorted(os.scandir(folder), key=index_last):
            if obj.name.startswith("pack-"):
                path = objects / "pack" / obj.name
            else:
                path = objects / obj.name[:2] / obj.name[2:]
            if path.exists():
                os.unlink(obj.path)
            else:
                path.parent.mkdir(exist_ok=True)
                os.rename(obj.path, path)
        os.rmdir(folder)


class Housekeeping:
    """The data folder's disk use, archiving tasks, and the cleanup whose preview is what it
    frees."""

    def __init__(
        self,
        ctx: Context,
        *,
        revisions: Revisions,
        snapshots: Snapshots,
        sandboxes: Sandboxes | None = None,
    ):
        self.ctx = ctx
        self.revisions = revisions
        self.snapshots = snapshots
        self._sandboxes = sandboxes

    def archive(self, task_ref: str, *, shared_ok: bool = False) -> Workspace:
        """Archive the task's workspace (snapshot first; its files go at the next cleanup).
        Refused while a run is in flight, its sandbox is up or it is being recorded, and, unless
        `shared_ok`, when other tasks share the workspace (the refusal names them)."""
        return archive_task(
            self.ctx,
            self.revisions,
            self.snapshots,
            task_ref,
            sandboxes=self._sandboxes,
            shared_ok=shared_ok,
        )

    def sharing(self, task_ref: str) -> list[Task]:
        """The other tasks that share the task's workspace (what archiving it also archives)."""
        return sharing_tasks(self.ctx, self.ctx.task(task_ref))

    def deletion(self, task_ref: str) -> Deletion:
        """What deleting the task would remove, and why it cannot be deleted now (if so)."""
        return deletion_of(self.ctx, self._sandboxes, self.ctx.task(task_ref))

    def delete(self, task_ref: str) -> Deletion:
        """Delete the task: its runs, checkpoints, approvals, grants and artifacts' rows, and —
        when no other task shares it — its workspace (files, revisions, snapshots, sandbox,
        engine home, run files). Refused while a run is in flight or it has child tasks."""
        return delete_task(self.ctx, self._sandboxes, self.ctx.task(task_ref))

    def unarchive(self, task_ref: str) -> Workspace:
        """Bring an archived workspace back, restoring its files from its newest snapshot when a
        cleanup removed them."""
        return unarchive_task(self.ctx, self.revisions, task_ref)

    def usage(self) -> Usage:
        """The data folder's disk use by category."""
        return data_usage(self.ctx)

    def plan(self, *, grace_seconds: float = GRACE_SECONDS, now: float | None = None) -> Plan:
        """What a cleanup would remove now and the disk it frees (and the stopped sandbox
        containers of archived workspaces it removes)."""
        return plan(self.ctx, grace_seconds=grace_seconds, now=now, sandboxes=self._sandboxes)

    def clean(self, the_plan: Plan, *, now: float | None = None) -> Result:
        """Carry out a plan, re-checking each item."""
        return clean(self.ctx, the_plan, now=now, sandboxes=self._sandboxes)
