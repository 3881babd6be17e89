"""Restores: putting a workspace's files back, in place, as they were at a revision.

Owns restoring named files or folders (or the whole workspace) to a revision's tree and undoing
one revision's change on top of the current files (three-way per file, conflicts reported and
left alone), with the order that keeps every restore undoable: refuse while a run is live, a
verifying capture of the current files, the writes (each atomic, never following a link planted
in the workspace), then the restore recorded as its own revision (trigger `restore`, naming the
revision it came from). Recording and naming revisions are core.revisions'; runs are core.runs'.
"""

from __future__ import annotations

import errno
import os
import posixpath
import secrets
import stat as statmod
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from core import events as ev
from core import workspaces
from core.context import Context
from core.errors import CairnError, Conflict, InputError, VaultError
from core.locks import FileLock, lock_path
from core.models import Revision, RevisionTrigger, Task, Workspace, WorkspaceState
from core.revisions import Revisions
from core.runs.states import IN_FLIGHT
from core.safe_fs import fsync_dir, open_dir, write_new_entry
from core.vault import Vault, revisions_ref
from core.vault.ignore import ALWAYS_IGNORED
from core.vault.objects import (
    EMPTY_TREE,
    MODE_EXEC,
    MODE_FILE,
    MODE_GITLINK,
    MODE_LINK,
    MODE_TREE,
    ObjectStore,
    run_git,
)
from core.vault.tree_index import FileRecord, TreeIndex

# What a restore did to one path.
WRITTEN = "written"
DELETED = "deleted"
CONFLICT = "conflict"
MARKED = "written with conflict markers around the lines edited since; resolve them by hand"
SKIPPED = "skipped"

Entry = tuple[str, str]  # (git mode, blob id)


@dataclass(frozen=True)
class PathOutcome:
    path: str
    action: str  # written | deleted | conflict | skipped
    reason: str = ""


@dataclass
class RestoreResult:
    """What a restore found and did. `revision` is the restore's own revision (None when the
    files already matched or nothing could be written); `before` the revision that held the
    files just before it."""

    task_id: str
    workspace_id: str
    kind: str  # "paths", "workspace" or "undo"
    source: Revision
    before: Revision
    captured_before: bool
    revision: Revision | None
    outcomes: list[PathOutcome] = field(default_factory=list)

    @property
    def conflicts(self) -> list[PathOutcome]:
        return [o for o in self.outcomes if o.action == CONFLICT]

    @property
    def changed(self) -> list[PathOutcome]:
        return [o for o in self.outcomes if o.action in (WRITTEN, DELETED)]


@dataclass
class _Plan:
    writes: dict[str, Entry] = field(default_factory=dict)  # path → what goes there
    deletes: set[str] = field(default_factory=set)  # files (and links) to remove
    remove_dirs: set[str] = field(default_factory=set)  # folders to remove once empty
    make_dirs: set[str] = field(default_factory=set)  # (empty) folders the tree holds
    outcomes: list[PathOutcome] = field(default_factory=list)
    data: dict[str, bytes] = field(default_factory=dict)  # merged contents, by blob id


class Restores:
    """A data folder's restores. Long operations block the caller."""

    def __init__(self, ctx: Context, *, revisions: Revisions):
        self.ctx = ctx
        self.revisions = revisions

    # -- restoring and undoing ---------------------------------------------------------------

    def restore(
        self, task_ref: str, revision: str, paths: list[str] | None = None
    ) -> RestoreResult:
        """Put `paths` (files or folders; all of the workspace when none) back as they were at
        `revision`: bytes and mode, and a path absent there is deleted. Ignored files and the
        workspace's .git are never touched."""
        task, ws, root = self._open(task_ref)
        source = self.revisions.resolve(task, revision)
        scopes = self._scopes(root, paths)
        vault = self.ctx.vault_for(task.source_id)
        src_files, src_dirs = _flatten(vault.objects, source.tree)
        if scopes:
            # Refused before the capture: named nowhere (the revision, the last revision, the
            # disk) is a typo, not a path to restore.
            last = self.revisions.resolve(task, "latest")
            last_files, last_dirs = _flatten(vault.objects, last.tree)
            for scope in scopes:
                if not (
                    _under(src_files, src_dirs, scope)
                    or _under(last_files, last_dirs, scope)
                    or os.path.lexists(os.path.join(root, scope))
                ):
                    raise InputError(
                        f"{scope} is neither in revision {source.id[:12]} nor in the workspace"
                    )
        with self._recording_lock(ws):
            before, captured = self._capture_before(task, ws)
            cur_files, cur_dirs = _flatten(vault.objects, before.tree)
            if scopes:
                for scope in scopes:
                    if not (
                        _under(cur_files, cur_dirs, scope) or _under(src_files, src_dirs, scope)
                    ):
                        raise InputError(
                            f"{scope} is neither in revision {source.id[:12]} nor among the "
                            "workspace's recorded files (an ignored or unknown path?)"
                        )
            plan = _restore_plan(cur_files, cur_dirs, src_files, src_dirs, scopes or [""])
            _check_obstacles(root, plan, cur_files, cur_dirs)
            index = TreeIndex.from_tree(vault.objects, before.tree)
            for scope in scopes or [""]:
                _replace_scope(index, scope, src_files, src_dirs)
            kind = "paths" if scopes else "workspace"
            return self._apply(
                task, ws, root, vault, plan, index, source, before, captured, kind=kind
            )

    def undo(
        self,
        task_ref: str,
        revision: str,
        paths: list[str] | None = None,
        *,
        conflict_markers: bool = False,
    ) -> RestoreResult:
        """Undo one revision's change on top of the current files: the inverse of its diff
        against its parent, merged three-way per file. A file edited since in a way that
        overlaps is reported as a conflict and left as it is; the rest is written. With
        `conflict_markers` (the person's choice), such a text file is written with git's
        conflict markers around the overlapping lines, to resolve by hand."""
        task, ws, root = self._open(task_ref)
        source = self.revisions.resolve(task, revision)
        if source.parent_id is None or source.trigger == RevisionTrigger.BASE.value:
            raise InputError(
                f"revision {source.id[:12]} is the workspace's base; it has no change to undo"
            )
        scopes = self._scopes(root, paths)
        vault = self.ctx.vault_for(task.source_id)
        parent_tree = vault.tree_of(source.parent_id)
        rev_files, _ = _flatten(vault.objects, source.tree)
        old_files, _ = _flatten(vault.objects, parent_tree)
        changed = sorted(
            p for p in set(rev_files) | set(old_files) if rev_files.get(p) != old_files.get(p)
        )
        if scopes:
            for scope in scopes:
                if not any(_in_scope(p, scope) for p in changed):
                    raise InputError(f"revision {source.id[:12]} did not change {scope}")
            changed = [p for p in changed if any(_in_scope(p, s) for s in scopes)]
        with self._recording_lock(ws):
            before, captured = self._capture_before(task, ws)
            cur_files, cur_dirs = _flatten(vault.objects, before.tree)
            plan = _undo_plan(
                vault.objects,
                changed,
                cur_files,
                rev_files,
                old_files,
                source,
                conflict_markers=conflict_markers,
            )
            _check_obstacles(root, plan, cur_files, cur_dirs)
            index = TreeIndex.from_tree(vault.objects, before.tree)
            for path in plan.deletes:
                index.remove(path)
            for path, (mode, sha) in plan.writes.items():
                index.set_file(path, FileRecord(mode, sha))
            return self._apply(
                task, ws, root, vault, plan, index, source, before, captured, kind="undo"
            )

    # -- the order every restore follows -------------------------------------------------------

    def _open(self, task_ref: str) -> tuple[Task, Workspace, Path]:
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        if ws.state == WorkspaceState.ARCHIVED.value:
            raise InputError(
                f"task {task.id} is archived; unarchive it first (cairnctl unarchive {task.id})"
            )
        root = workspaces.require_tree(ws)
        self._refuse_live_run(ws)
        return task, ws, root

    def _refuse_live_run(self, ws: Workspace) -> None:
        """Conflict when a run of any task working in the workspace has not ended."""
        marks = ",".join("?" * len(IN_FLIGHT))
        row = self.ctx.store.query_one(
            f"SELECT id, state FROM runs WHERE state IN ({marks}) AND (workspace_id = ? OR "
            f"task_id IN (SELECT id FROM tasks WHERE workspace_id = ?)) "
            f"ORDER BY created_at DESC LIMIT 1",
            (*IN_FLIGHT, ws.id, ws.id),
        )
        run = self.revisions.active_run_id(ws.id) or (row["id"] if row else None)
        if run is not None:
            state = f" ({row['state']})" if row and row["id"] == run else ""
            raise Conflict(
                f"run {run}{state} is live in workspace {ws.id}; restoring would write under "
                "it — wait for it to end or stop it first"
            )

    @contextmanager
    def _recording_lock(self, ws: Workspace) -> Iterator[None]:
        """The workspace's recording lock, held for the whole restore, so no recorder (in any
        Cairn process) records the files half written."""
        lock = FileLock(lock_path(self.ctx.data.locks_root, "watch", ws.id))
        if not lock.try_acquire():
            pid = lock.holder_pid()
            raise Conflict(
                f"workspace {ws.id} is being recorded by another Cairn process"
                f"{f' ({pid})' if pid else ''} (a window or `cairnctl watch`); close it first"
            )
        try:
            yield
        finally:
            lock.release()

    def _capture_before(self, task: Task, ws: Workspace) -> tuple[Revision, bool]:
        """Record the current files (hand edits included) before anything is written."""
        before, captured = self.revisions.capture(task.id, trigger=RevisionTrigger.EXTERNAL.value)
        self._refuse_live_run(ws)  # a run may have started while the capture ran
        return before, captured

    def _scopes(self, root: Path, paths: list[str] | None) -> list[str]:
        """The named paths relative to the workspace ('/'-separated, normalised), in order and
        each once; an empty list is the whole workspace."""
        out: list[str] = []
        for raw in paths or []:
            rel = _relative(root, raw)
            if rel and rel not in out:
                out.append(rel)
            elif not rel:
                return []  # the workspace's own folder: all of it
        # A path inside another named one is covered by it.
        return [p for p in out if not any(p != q and _in_scope(p, q) for q in out)]

    def _stopped(self, task: Task, before: Revision, exc: CairnError | OSError) -> CairnError:
        """A restore that stopped half way: what it wrote is recorded, and the way back named."""
        why = exc.message if isinstance(exc, CairnError) else (exc.strerror or str(exc))
        try:
            rev, _ = self.revisions.capture(task.id, trigger=RevisionTrigger.RESTORE.value)
            recorded = f"what was written is revision {rev.id[:12]}"
        except (CairnError, OSError):
            recorded = "what was written is not recorded yet"
        return CairnError(
            f"the restore stopped half way ({why}); {recorded} — restore {before.id[:12]} "
            "to go back to the files as they were"
        )

    def _apply(
        self,
        task: Task,
        ws: Workspace,
        root: Path,
        vault: Vault,
        plan: _Plan,
        index: TreeIndex,
        source: Revision,
        before: Revision,
        captured: bool,
        *,
        kind: str,
    ) -> RestoreResult:
        result = RestoreResult(task.id, ws.id, kind, source, before, captured, None, plan.outcomes)
        if not (plan.writes or plan.deletes or plan.remove_dirs or plan.make_dirs):
            return result
        try:
            _write_plan(root, vault.objects, plan)
        except (CairnError, OSError) as exc:
            raise self._stopped(task, before, exc) from exc
        tree = index.flush(vault.objects)
        if tree == before.tree:
            return result
        files_changed = len(plan.writes) + len(plan.deletes)
        try:
            sha = _commit_restore(vault, ws.id, tree, before.id, kind, source, files_changed)
        except VaultError:
            # Another capture moved the revisions meanwhile: record what is on disk on top.
            rev, new = self.revisions.capture(task.id, trigger=RevisionTrigger.RESTORE.value)
            result.revision = rev if new else None
            return result
        self.revisions.sync_rows(self.ctx.store.get_workspace(ws.id))
        rev = self.ctx.store.get_revision(ws.id, sha)
        self.ctx.events.publish(
            ev.REVISION_RECORDED,
            ws.id,
            revision=rev.id,
            trigger=rev.trigger,
            files_changed=rev.files_changed,
            run_id=None,
        )
        result.revision = rev
        return result


# -- paths ---------------------------------------------------------------------------------------


def _relative(root: Path, raw: str) -> str:
    """`raw` (relative to the workspace, or absolute inside it) as a normalised relative path;
    '' for the workspace itself. InputError for a path outside it or inside its .git."""
    text = os.fspath(raw)
    if not text.strip():
        raise InputError("an empty path was given")
    root_s = os.path.abspath(os.fspath(root))
    if os.path.isabs(text):
        full = os.path.normpath(text)
        if full != root_s and not full.startswith(root_s.rstrip(os.sep) + os.sep):
            raise InputError(f"{raw} is outside the workspace ({root_s})")
        rel = os.path.relpath(full, root_s)
    else:
        rel = os.path.normpath(text)
    rel = rel.replace(os.sep, "/")
    if rel == ".":
        return ""
    if rel == ".." or rel.startswith("../"):
        raise InputError(f"{raw} is outside the workspace ({root_s})")
    if ALWAYS_IGNORED in rel.split("/"):
        raise InputError(f"{raw} is inside a .git folder, which revisions never hold")
    return rel


def _in_scope(path: str, scope: str) -> bool:
    return not scope or path == scope or path.startswith(scope + "/")


def _under(files: dict[str, Entry], dirs: set[str], scope: str) -> bool:
    return scope in dirs or any(_in_scope(p, scope) for p in files)


def _parents(path: str) -> list[str]:
    """The folders above a path, outermost first ('' not included)."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _flatten(objects: ObjectStore, tree: str) -> tuple[dict[str, Entry], set[str]]:
    """A tree's files (and links, gitlinks) by path, and its folders."""
    files: dict[str, Entry] = {}
    dirs: set[str] = set()
    stack = [("", tree)]
    while stack:
        folder, sha = stack.pop()
        if sha == EMPTY_TREE:
            continue
        for entry in objects.read_tree(sha):
            name = os.fsdecode(entry.name)
            path = f"{folder}/{name}" if folder else name
            if entry.mode == MODE_TREE:
                dirs.add(path)
                stack.append((path, entry.sha))
            else:
                files[path] = (entry.mode, entry.sha)
    return files, dirs


# -- plans ---------------------------------------------------------------------------------------


def _restore_plan(
    cur_files: dict[str, Entry],
    cur_dirs: set[str],
    src_files: dict[str, Entry],
    src_dirs: set[str],
    scopes: list[str],
) -> _Plan:
    plan = _Plan()

    def inside(path: str) -> bool:
        return any(_in_scope(path, s) for s in scopes)

    for path in sorted(set(cur_files) | set(src_files)):
        if not inside(path):
            continue
        want, have = src_files.get(path), cur_files.get(path)
        if want == have:
            continue
        if want is None:
            plan.deletes.add(path)
            plan.outcomes.append(PathOutcome(path, DELETED))
        elif want[0] == MODE_GITLINK or (have is not None and have[0] == MODE_GITLINK):
            plan.outcomes.append(PathOutcome(path, SKIPPED, "a submodule is not restored"))
        else:
            plan.writes[path] = want
            plan.outcomes.append(PathOutcome(path, WRITTEN))
    for folder in cur_dirs - src_dirs:
        if inside(folder):
            plan.remove_dirs.add(folder)
    for folder in src_dirs - cur_dirs:
        if inside(folder):
            plan.make_dirs.add(folder)
    # A file where a folder now is (or the other way): the old one goes first.
    for path in list(plan.writes):
        if path in cur_dirs:
            plan.remove_dirs.add(path)
    return plan


def _replace_scope(
    index: TreeIndex, scope: str, src_files: dict[str, Entry], src_dirs: set[str]
) -> None:
    """Make the index hold, at and under `scope`, what the source tree holds there."""
    if not scope:
        for name in list(index.dirs[""]):
            index.remove(name)
    else:
        index.remove(scope)
    for folder in sorted(src_dirs):
        if _in_scope(folder, scope):
            index.ensure_dir(folder)
    for path, (mode, sha) in src_files.items():
        if _in_scope(path, scope):
            index.set_file(path, FileRecord(mode, sha))


def _undo_plan(
    objects: ObjectStore,
    changed: list[str],
    cur_files: dict[str, Entry],
    rev_files: dict[str, Entry],
    old_files: dict[str, Entry],
    source: Revision,
    *,
    conflict_markers: bool = False,
) -> _Plan:
    """Per file the revision changed: take it back to the parent's version when nothing changed
    it since, merge when later edits do not overlap, else a conflict (with `conflict_markers`,
    a text file whose edits overlap is written with git's markers instead)."""
    plan = _Plan()
    for path in changed:
        rev, old, cur = rev_files.get(path), old_files.get(path), cur_files.get(path)
        if cur == old:
            continue  # already as it was before the revision
        if cur == rev:
            result: Entry | None = old
        else:
            merged = _merge(objects, path, cur, rev, old, source, conflict_markers)
            if isinstance(merged, str):
                plan.outcomes.append(PathOutcome(path, CONFLICT, merged))
                continue
            result, data, marked = merged
            if marked and result is not None:
                plan.writes[path] = result
                plan.data[result[1]] = data or b""
                plan.outcomes.append(PathOutcome(path, WRITTEN, MARKED))
                continue
            if data is not None and result is not None:
                plan.data[result[1]] = data
        if any(e is not None and e[0] == MODE_GITLINK for e in (rev, old, cur)):
            plan.outcomes.append(PathOutcome(path, SKIPPED, "a submodule is not restored"))
            continue
        if result is None:
            plan.deletes.add(path)
            plan.outcomes.append(PathOutcome(path, DELETED))
        else:
            plan.writes[path] = result
            plan.outcomes.append(PathOutcome(path, WRITTEN))
    return plan


def _merge(
    objects: ObjectStore,
    path: str,
    cur: Entry | None,
    rev: Entry | None,
    old: Entry | None,
    source: Revision,
    conflict_markers: bool = False,
) -> tuple[Entry | None, bytes | None, bool] | str:
    """The three-way result of taking `rev` back to `old` in a file now at `cur` (and whether it
    holds conflict markers), or the reason it conflicts."""
    short = source.id[:12]
    if cur is None or rev is None or old is None:
        if cur is None:
            return f"deleted since revision {short}"
        if rev is None:
            return f"deleted by revision {short} and made again since"
        return f"added by revision {short} and edited since"
    if MODE_LINK in (cur[0], rev[0], old[0]):
        return f"a link changed both by revision {short} and since"
    if cur[0] == rev[0]:
        mode = old[0]
    elif old[0] == rev[0]:
        mode = cur[0]
    else:
        return f"its mode changed both by revision {short} and since"
    if cur[1] == rev[1]:
        return (mode, old[1]), None, False
    if old[1] == rev[1]:
        return (mode, cur[1]), None, False
    with tempfile.TemporaryDirectory(prefix="cairn-undo-") as tmp:
        names = []
        for label, sha in (("current", cur[1]), ("revision", rev[1]), ("before", old[1])):
            name = os.path.join(tmp, label)
            with open(name, "wb") as f:
                f.write(objects.read_blob(sha))
            names.append(name)
        proc = run_git(
            [
                "merge-file",
                "-p",
                "-L",
                f"current {path}",
                "-L",
                f"revision {short}",
                "-L",
                f"before {short}",
                *names,
            ],
            check=False,
        )
    if proc.returncode != 0:
        if proc.returncode > 0 and proc.returncode < 128:
            if conflict_markers:
                data = proc.stdout  # the merge with markers around what overlaps
                return (mode, objects.write_blob(data)), data, True
            return f"edited since revision {short} where the revision changed it"
        return f"cannot be merged ({_last_line(proc.stderr) or 'not text'})"
    data = proc.stdout
    return (mode, objects.write_blob(data)), data, False


def _last_line(raw: bytes) -> str:
    lines = raw.decode(errors="replace").strip().splitlines()
    return lines[-1].removeprefix("error: ") if lines else ""


def _check_obstacles(
    root: Path, plan: _Plan, cur_files: dict[str, Entry], cur_dirs: set[str]
) -> None:
    """Refuse, before anything is written, a restore that would have to remove something the
    revisions do not hold (an ignored file where a folder must go, or inside a folder that must
    become a file)."""
    going = plan.deletes | {p for p in plan.writes if p in cur_files}
    for folder in plan.make_dirs:
        if _kind(root, folder) == "other" and folder not in going:
            raise InputError(
                f"{folder} is in the way of a folder the revision holds and is not in the "
                "revisions (ignored?); move it and try again — nothing was written"
            )
    for path in [*plan.writes, *plan.make_dirs]:
        for folder in _parents(path):
            kind = _kind(root, folder)
            if kind in (None, "dir"):
                continue
            if folder in going:
                continue
            raise InputError(
                f"{folder} is in the way of {path} and is not in the revisions (ignored?); "
                "move it and try again — nothing was written"
            )
        if path in plan.writes and _kind(root, path) == "dir":
            stray = _untracked_in(root, path, cur_files, cur_dirs)
            if stray is not None:
                raise InputError(
                    f"{path} is a folder holding {stray}, which the revisions do not hold "
                    "(ignored?); move it and try again — nothing was written"
                )


def _kind(root: Path, rel: str) -> str | None:
    try:
        st = os.lstat(os.path.join(root, rel))
    except (FileNotFoundError, NotADirectoryError):
        return None
    return "dir" if statmod.S_ISDIR(st.st_mode) else "other"


def _untracked_in(
    root: Path, rel: str, cur_files: dict[str, Entry], cur_dirs: set[str]
) -> str | None:
    for folder, subdirs, names in os.walk(os.path.join(root, rel)):
        base = os.path.relpath(folder, root).replace(os.sep, "/")
        for name in [*subdirs, *names]:
            child = f"{base}/{name}"
            if child not in cur_dirs and child not in cur_files:
                return child
    return None


# -- writing ------------------------------------------------------------------------------------


def _write_plan(root: Path, objects: ObjectStore, plan: _Plan) -> None:
    """Deletions, then emptied folders, then writes (each to a fresh name, then renamed over)."""
    touched: set[str] = set()
    for path in sorted(plan.deletes, reverse=True):
        _unlink(root, path)
        touched.add(posixpath.dirname(path))
    for folder in sorted(plan.remove_dirs, key=lambda f: f.count("/"), reverse=True):
        _rmdir_if_empty(root, folder)
        touched.add(posixpath.dirname(folder))
    for folder in sorted(plan.make_dirs):
        os.close(open_dir(root, folder))
    for path, (mode, sha) in sorted(plan.writes.items()):
        data = plan.data.get(sha)
        if data is None:
            data = objects.read_blob(sha)
        _write_one(root, path, mode, data)
        touched.add(posixpath.dirname(path))
    for folder in touched:
        with suppress(OSError):
            fsync_dir(os.path.join(root, folder) if folder else root)


def _unlink(root: Path, path: str) -> None:
    try:
        fd = open_dir(root, posixpath.dirname(path), create=False)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link where a folder was: nothing of ours is below it
            return
        raise
    try:
        name = posixpath.basename(path)
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            return
        if statmod.S_ISDIR(st.st_mode):
            return  # a folder now: emptied by remove_dirs when it should go
        os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def _rmdir_if_empty(root: Path, folder: str) -> None:
    try:
        os.rmdir(os.path.join(root, folder))
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise


def _write_one(root: Path, path: str, mode: str, data: bytes) -> None:
    fd = open_dir(root, posixpath.dirname(path))
    try:
        name = posixpath.basename(path)
        tmp = f".{name}.{secrets.token_hex(6)}.cairn-restore"
        perm = 0o755 if mode == MODE_EXEC else 0o644
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            st = None
        if st is not None and statmod.S_ISREG(st.st_mode) and mode in (MODE_FILE, MODE_EXEC):
            # Keep the file's own read and write bits; the revision decides the exec bits.
            bits = statmod.S_IMODE(st.st_mode) & 0o666
            perm = bits | ((bits & 0o444) >> 2) if mode == MODE_EXEC else bits
        if st is not None and statmod.S_ISDIR(st.st_mode):
            os.rmdir(name, dir_fd=fd)  # emptied above; a folder in use says so here
        write_new_entry(fd, tmp, data, perm=None if mode == MODE_LINK else perm, fsync=True)
        try:
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            os.unlink(tmp, dir_fd=fd)
            raise
    except OSError as exc:
        raise CairnError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


# -- recording -----------------------------------------------------------------------------------


def _commit_restore(
    vault: Vault,
    workspace_id: str,
    tree: str,
    parent: str,
    kind: str,
    source: Revision,
    files_changed: int,
) -> str:
    """The restore's revision on the workspace's revisions (which must still be at `parent`):
    the same trailers as every revision, and the revision it restored from or undid."""
    what = "undo of" if kind == "undo" else "restored to"
    message = (
        f"Cairn revision (restore): {what} {source.id[:12]}\n\n"
        f"Cairn-Workspace: {workspace_id}\n"
        f"Cairn-Trigger: {RevisionTrigger.RESTORE.value}\n"
        f"Cairn-Run: -\n"
        f"Cairn-Files-Changed: {files_changed}\n"
        f"Cairn-Restore-Source: {source.id}\n"
        f"Cairn-Restore-Kind: {kind}\n"
    )
    sha = vault.objects.write_commit(tree, [parent], message, timestamp=time.time())
    vault.objects.update_ref(revisions_ref(workspace_id), sha, old=parent)
    return sha


def restore_note(vault: Vault, revision_id: str) -> tuple[str, str] | None:
    """(kind, source revision) of a restore's revision; None for any other revision."""
    commit = vault.objects.read_commit(revision_id)
    source = commit.trailer("Cairn-Restore-Source")
    if not source:
        return None
    return commit.trailer("Cairn-Restore-Kind") or "paths", source
