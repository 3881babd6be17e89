"""Revisions: recording a workspace's files into its vault and reading them back.

Owns the recorders (one per watched workspace, with the file lock that keeps one recording process
per workspace), full verifying captures (here or in a child process), the revision rows that
mirror the vault's revision chain, naming revisions (`base`, `latest`, `TASK:REV`) and the diffs
between them; and where the engine's conversation stood when each revision was recorded (kept in
the spec of the workspace's run whose session it is, under `conversation_positions`). Snapshots
of revisions are core.snapshots'; the run a revision belongs to is core.runs'.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from core import events as ev
from core import workspaces
from core.context import Context
from core.diffs import Diff, blob_sizes, diff_revisions, diff_stats
from core.engines import engine_for
from core.errors import CairnError, Conflict, InputError, NotFound, QuotaExceeded
from core.launch import python_command, run_json_command
from core.locks import FileLock, lock_path
from core.models import Revision, RevisionTrigger, Run, Task, Workspace
from core.runs.states import IN_FLIGHT, run_files
from core.vault.ignore import IgnoreRules
from core.vault.tree_index import Looked, TreeIndex
from core.watch import CapturedRevision, Recorder, seed_stat_cache, stat_pass

log = logging.getLogger(__name__)

RECORDER_STOP_S = 30.0  # how long a child recorder may take to write its last capture
# The key of a run's spec that holds, per revision id, where that run's engine session stood
# when the revision was recorded: {"session_id", "at", "recorded_at"}.
POSITIONS = "conversation_positions"
NOTE_PATHS = 10  # paths named in a files note before "and N more"

# What conversation_at found.
AT_LATEST = "latest"  # the revision is the workspace's latest: the whole conversation fits it
AT_POSITION = "position"  # a recorded position (session and point in it)
AT_EMPTY = "empty"  # no conversation had begun when the revision was recorded
AT_UNKNOWN = "unknown"  # a conversation had begun, but no position was recorded


@dataclass(frozen=True)
class ConversationAt:
    """The engine's conversation as it was when a revision was recorded."""

    revision_id: str
    kind: str  # one of the AT_* values
    session_id: str | None = None
    position: str | None = None  # engine-specific: a message uuid, `turn N`
    recorded_with: str | None = None  # the revision the position was recorded with
    reason: str = ""  # for the run's report


class Revisions:
    """A data folder's revisions. Thread-safe; long operations block the caller."""

    def __init__(self, ctx: Context, *, captures_in_child: bool = False):
        """`captures_in_child`: one-off captures (checkpoints, snapshots) of a workspace this
        process does not watch run in a child process, so a big tree's walk and index never
        compete with this process's other threads for the interpreter (the desktop app)."""
        self.ctx = ctx
        self._captures_in_child = captures_in_child
        self._recorders: dict[str, tuple[Recorder, FileLock]] = {}
        self._lock = threading.RLock()

    def close(self) -> None:
        """Stop every recorder this process runs (each writes its last capture first)."""
        with self._lock:
            watched = list(self._recorders)
        for ws_id in watched:
            self.stop_watching(ws_id)

    def all(self, task_ref: str) -> list[Revision]:
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        self.sync_rows(ws)
        return self.ctx.store.list_revisions(ws.id)

    def resolve(self, task: Task, ref: str | None, *, default: str = "latest") -> Revision:
        """`ref` is a revision id (or unambiguous prefix), `base`, `latest`, or `TASK:REV` to name a
        revision of another task of the same source folder."""
        ref = ref or default
        if ":" in ref:
            other_ref, _, other_rev = ref.partition(":")
            other = self.ctx.task(other_ref)
            if other.source_id != task.source_id:
                raise InputError(
                    f"task {other.id} grew from another folder than {task.id}; "
                    "diffs compare tasks of one source folder"
                )
            return self.resolve(other, other_rev or default)
        ws = self.ctx.workspace_of(task)
        self.sync_rows(ws)
        if ref == "latest":
            latest = self.ctx.store.latest_revision(ws.id)
            if latest is None:
                raise NotFound(f"task {task.id} has no revisions")
            return latest
        if ref == "base":
            return self.ctx.store.get_revision(ws.id, ws.base_revision)
        return self.ctx.store.get_revision(ws.id, ref)

    def sync_rows(self, ws: Workspace) -> None:
        """Add rows for revisions the vault has and the store lacks (a crash between the two)."""
        source_vault = self.ctx.vault_for(ws.source_id)
        head = source_vault.revision_head(ws.id)
        if head is None or head == ws.current_revision:
            return
        known = {r.id for r in self.ctx.store.list_revisions(ws.id)}
        for info in source_vault.revision_chain(ws.id, stop_at=known):
            c = info.commit
            self.ctx.store.add_revision(
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

    def _announce(self, rev: Revision) -> None:
        """Tell this process's listeners of a revision (recorded here or by another process)."""
        self.ctx.events.publish(
            ev.REVISION_RECORDED,
            rev.workspace_id,
            revision=rev.id,
            trigger=rev.trigger,
            files_changed=rev.files_changed,
            run_id=rev.run_id,
        )

    def _record(self, ws: Workspace, captured: CapturedRevision) -> None:
        rev = self.ctx.store.add_revision(
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
        self.record_position(ws.id, rev.id)
        self._announce(rev)

    # -- conversation positions ------------------------------------------------------------------

    def record_position(self, workspace_id: str, revision_id: str) -> None:
        """Note where the conversation of the workspace's latest run stands now, as the one that
        goes with `revision_id` (just recorded, or found unchanged by a checkpoint). Engines
        without sessions, or without a conversation yet, note nothing. Never fails a capture."""
        store = self.ctx.store
        try:
            row = store.query_one(
                "SELECT id FROM runs WHERE workspace_id = ? ORDER BY created_at DESC LIMIT 1",
                (workspace_id,),
            )
            if row is None:
                return
            run = store.get_run(row["id"])
            eng = engine_for(run.engine)
            measure = getattr(eng, "conversation_position", None)
            if not eng.has_sessions or measure is None:
                return
            session = store.session_for(workspace_id)
            if session is None:
                return
            rev = store.get_revision(workspace_id, revision_id)
            if rev.trigger == RevisionTrigger.RESTORE.value:
                revs = store.list_revisions(workspace_id)
                if restored_from(revs, rev) is not None and not self._launched_since(
                    [run], revs, rev
                ):
                    # The files went back and the conversation did not: until a run works on
                    # them, conversation_at answers with the one of the revision they went to.
                    return
            found = measure(
                self.ctx.data.home_path(session.id),
                run_files(self.ctx.data.runs_root, run).folder,
                run.engine_session_id,
            )
            if found is None:
                return
            entry = {"session_id": found[0], "at": found[1], "recorded_at": time.time()}
            with store.transaction():
                spec = dict(store.get_run(run.id).spec)
                spec[POSITIONS] = {**(spec.get(POSITIONS) or {}), revision_id: entry}
                store.update_run(run.id, spec=spec)
        except Exception:
            log.exception("could not note the conversation position of revision %s", revision_id)

    def conversation_at(self, workspace_id: str, revision_id: str) -> ConversationAt:
        """The conversation as it was when the revision was recorded: the workspace's latest
        revision goes with the whole conversation; an older one with the last position noted at
        or before it (a revision recorded without one, such as an edit outside Cairn, goes with
        the conversation as the revisions before it left it). After a restore that put an
        earlier revision's files back, and until a run works on them, the conversation is the
        one that goes with that earlier revision."""
        store = self.ctx.store
        revs = store.list_revisions(workspace_id)
        target = store.get_revision(workspace_id, revision_id)
        short = target.id[:12]
        runs = workspace_runs(self.ctx, workspace_id)
        restores = [
            (r, source)
            for r in revs
            if r.seq <= target.seq and (source := restored_from(revs, r)) is not None
        ]
        restore, source = restores[-1] if restores else (None, None)
        latest = bool(revs) and revs[-1].id == target.id
        if latest and (restore is None or self._launched_since(runs, revs, restore)):
            return ConversationAt(target.id, AT_LATEST, reason=f"{short} is the latest revision")
        seq_of = {r.id: r.seq for r in revs}
        best: tuple[tuple[int, float], str, dict] | None = None
        for run in runs:
            for rev_id, entry in (run.spec.get(POSITIONS) or {}).items():
                seq = seq_of.get(rev_id)
                if seq is None or seq > target.seq or not isinstance(entry, dict):
                    continue
                key = (seq, float(entry.get("recorded_at") or 0.0))
                if best is None or key > best[0]:
                    best = (key, rev_id, entry)
        if (
            restore is not None
            and source is not None
            and (best is None or best[0][0] < restore.seq)
        ):
            found = self.conversation_at(workspace_id, source.id)
            return replace(
                found,
                revision_id=target.id,
                reason=f"{found.reason}; revision {restore.id[:12]} restored the files of "
                f"revision {source.id[:12]}",
            )
        if best is not None:
            _, rev_id, entry = best
            return ConversationAt(
                target.id,
                AT_POSITION,
                session_id=entry.get("session_id"),
                position=entry.get("at"),
                recorded_with=rev_id,
                reason=f"noted with revision {rev_id[:12]}",
            )
        began = [
            r
            for r in runs
            if engine_for(r.engine).has_sessions
            and (r.started_at or r.created_at) <= target.created_at
        ]
        # A fork's workspace starts with whatever conversation its first run was given.
        forked = store.query_one(
            "SELECT id FROM tasks WHERE workspace_id = ? AND source = 'fork' LIMIT 1",
            (workspace_id,),
        )
        if began or forked is not None:
            return ConversationAt(
                target.id,
                AT_UNKNOWN,
                reason=f"no conversation position was noted at or before revision {short}",
            )
        return ConversationAt(
            target.id, AT_EMPTY, reason=f"no conversation had begun at revision {short}"
        )

    def _launched_since(self, runs: list[Run], revs: list[Revision], rev: Revision) -> bool:
        """Whether one of the runs launched an attempt on `rev`'s files or later ones: each
        launch writes a checkpoint naming the revision it started from."""
        seq_of = {r.id: r.seq for r in revs}
        for run in runs:
            for ck in self.ctx.store.list_checkpoints(run.id):
                if seq_of.get(ck.workspace_ref.rpartition("@")[2], -1) >= rev.seq:
                    return True
        return False

    def files_note(
        self, workspace: Workspace, revision_id: str, later_id: str | None = None
    ) -> str:
        """For an agent starting on the files of an older revision without its conversation:
        what those files hold, in a few lines (the paths the work had changed by then, and the
        ones it changed afterwards, up to `later_id` or the latest revision, that these files do
        not have)."""
        git_dir = self.ctx.vault_for(workspace.source_id).git_dir
        rev = self.ctx.store.get_revision(workspace.id, revision_id)
        latest = (
            self.ctx.store.get_revision(workspace.id, later_id)
            if later_id
            else self.ctx.store.latest_revision(workspace.id)
        )
        before = _paths(diff_revisions(git_dir, workspace.base_revision, rev.id, max_bytes=1))
        after = (
            _paths(diff_revisions(git_dir, rev.id, latest.id, max_bytes=1))
            if latest is not None and latest.id != rev.id
            else []
        )
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(rev.created_at))
        text = f"The files are those of revision {rev.id[:12]} (recorded {when})."
        text += (
            f" By then the work had changed {_named(before)}."
            if before
            else " By then the work had changed nothing yet."
        )
        if after:
            text += f" Later work changed {_named(after)}; those changes are not in these files."
        return text

    def _stat_cache(self, workspace_id: str) -> Path:
        return self.ctx.data.cache_root / f"{workspace_id}.stat"

    def seed_stat_cache(
        self,
        workspace_id: str,
        root: Path,
        revision: str,
        index: TreeIndex | None = None,
        looked: Looked | None = None,
    ) -> None:
        """Leave the stat cache of a workspace just written from `revision` behind, so that its
        first full capture only compares stat data (`index`: the revision's tree, when the
        caller holds it; `looked`: the files' stat data taken since they were written).
        Best effort: without it that capture hashes every file once."""
        try:
            if index is None:
                vault = self.ctx.vault_for(self.ctx.store.get_workspace(workspace_id).source_id)
                index = TreeIndex.from_tree(vault.objects, vault.tree_of(revision))
            seed_stat_cache(
                self._stat_cache(workspace_id), workspace_id, root, revision, index, looked
            )
        except (OSError, CairnError) as exc:
            log.warning("workspace %s: no stat cache was left behind: %s", workspace_id, exc)

    def _recorder(
        self, ws: Workspace, *, on_problem: Callable[[str], None] | None = None
    ) -> Recorder:
        vault = self.ctx.vault_for(ws.source_id)

        def problem(message: str) -> None:
            self.ctx.events.publish(ev.WORKSPACE_PROBLEM, ws.id, message=message)
            if on_problem:
                on_problem(message)

        return Recorder(
            vault,
            ws.id,
            Path(ws.root),
            on_revision=functools.partial(self._record, ws),
            on_problem=problem,
            run_id=lambda: self.active_run_id(ws.id),
            stat_cache=self._stat_cache(ws.id),
        )

    def active_run_id(self, workspace_id: str) -> str | None:
        """The run in flight in a workspace: its edits are stamped with its id."""
        row = self.ctx.store.query_one(
            f"SELECT id FROM runs WHERE workspace_id = ? AND state IN "
            f"({','.join('?' * len(IN_FLIGHT))}) ORDER BY created_at DESC LIMIT 1",
            (workspace_id, *IN_FLIGHT),
        )
        return row["id"] if row else None

    def watch(self, task_ref: str, *, on_problem: Callable[[str], None] | None = None) -> Recorder:
        """Start recording a task's workspace as it changes; returns the running recorder."""
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        with self._lock:
            if ws.id in self._recorders:
                return self._recorders[ws.id][0]
            workspaces.require_tree(ws)
            self.sync_rows(ws)
            lock = FileLock(lock_path(self.ctx.data.locks_root, "watch", ws.id))
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
        self,
        task_ref: str,
        *,
        trigger: str = "manual",
        run_id: str | None = None,
        verify: bool = True,
    ) -> tuple[Revision, bool]:
        """A full, verifying capture now. Returns the latest revision and whether it is new.

        `verify=False`: when this process watches the workspace, the watcher's pending paths
        are enough (the recorder still looks at everything after an overflow or without a
        watcher), so a workspace whose latest revision is recorded costs no pass over its tree.
        """
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        workspaces.require_tree(ws)
        with self._lock:
            entry = self._recorders.get(ws.id)
        if entry is not None:
            captured = entry[0].capture(trigger, full=verify, run_id=run_id)
        elif self._captures_in_child:
            unchanged = self._proved_unchanged(ws)
            if unchanged is not None:
                self._check_quota(ws)
                return unchanged, False
            return self._capture_in_child(task, ws, trigger, run_id)
        else:
            self.sync_rows(ws)
            recorder = self._recorder(ws)
            try:
                captured = recorder.capture(trigger, full=True, run_id=run_id)
            finally:
                recorder.stop()
        self._check_quota(ws)
        if captured is not None:
            return self.ctx.store.get_revision(ws.id, captured.commit), True
        self.sync_rows(ws)
        latest = self.ctx.store.latest_revision(ws.id)
        assert latest is not None
        return latest, False

    def _proved_unchanged(self, ws: Workspace) -> Revision | None:
        """The latest revision, when a stat pass against the workspace's stat cache (in helper
        processes: nothing of it runs on this process's threads) proves the folder holds exactly
        its tree; None when anything differs or the cache cannot say (a full capture decides)."""
        vault = self.ctx.vault_for(ws.source_id)
        head = vault.revision_head(ws.id)
        if head is None or not os.path.isdir(ws.root):
            return None
        self.sync_rows(ws)
        latest = self.ctx.store.latest_revision(ws.id)
        if latest is None or latest.id != head:
            return None
        suspects = stat_pass(
            self._stat_cache(ws.id),
            ws.root,
            ws.id,
            head,
            latest.tree,
            IgnoreRules(ws.root),
            in_process=False,
        )
        return latest if suspects == [] else None

    def _capture_in_child(
        self, task: Task, ws: Workspace, trigger: str, run_id: str | None
    ) -> tuple[Revision, bool]:
        """`capture` by `cairnctl capture` in a child process; its revision is announced here."""
        argv = python_command(
            "core.cli",
            "--data-dir",
            str(self.ctx.data.root),
            "capture",
            task.id,
            "--trigger",
            trigger,
            "--json",
        )
        if run_id:
            argv += ["--run", run_id]
        out = run_json_command(argv, f"the capture of {ws.root}")
        self.sync_rows(self.ctx.store.get_workspace(ws.id))
        rev = self.ctx.store.get_revision(ws.id, out["revision"])
        if out["changed"]:
            self._announce(rev)
        self._check_quota(ws)
        return rev, bool(out["changed"])

    def _check_quota(self, ws: Workspace) -> None:
        """Report a workspace over its disk quota as a problem event; the capture is kept."""
        if ws.quota_bytes is None:
            return
        try:
            workspaces.check_quota(ws)
        except QuotaExceeded as exc:
            self.ctx.events.publish(ev.WORKSPACE_PROBLEM, ws.id, message=str(exc), problem="quota")

    # -- diffs ---------------------------------------------------------------------------------

    def diff(
        self,
        task_ref: str,
        rev_a: str | None = None,
        rev_b: str | None = None,
        *,
        max_bytes: int = 2_000_000,
        context: int = 3,
        paths: list[str] | None = None,
    ) -> Diff:
        """The diff from `rev_a` (default: the base) to `rev_b` (default: the latest revision);
        `paths` limits it to those files (a renamed file needs both its names)."""
        task = self.ctx.task(task_ref)
        a = self.resolve(task, rev_a, default="base")
        b = self.resolve(task, rev_b, default="latest")
        vault = self.ctx.vault_for(task.source_id)
        return diff_revisions(
            vault.git_dir, a.id, b.id, max_bytes=max_bytes, context=context, paths=paths
        )

    # -- snapshots -----------------------------------------------------------------------------

    def stats(
        self, task_ref: str, pairs: list[tuple[str | None, str]]
    ) -> dict[str, tuple[int, int, int]]:
        """(files changed, lines added, lines removed) of each (parent, revision) pair, by
        revision id, without building hunks."""
        git_dir = self.ctx.vault_for(self.ctx.task(task_ref).source_id).git_dir
        return {rev: diff_stats(git_dir, parent, rev) for parent, rev in pairs}

    def blob_sizes(self, task_ref: str, shas: list[str]) -> dict[str, int]:
        """Sizes of the task's vault blobs by id, without reading them."""
        return blob_sizes(self.ctx.vault_for(self.ctx.task(task_ref).source_id).git_dir, shas)

    def revision_news(self, workspace_id: str | None) -> Callable[[], None] | None:
        """What announces, in this process, the revisions another process records in the
        workspace (each once, in order); None without a workspace."""
        if not workspace_id:
            return None
        latest = self.ctx.store.latest_revision(workspace_id)
        seen = [latest.seq if latest else 0]

        def announce() -> None:
            for rev in self.ctx.store.list_revisions(workspace_id):
                if rev.seq > seen[0]:
                    seen[0] = rev.seq
                    self._announce(rev)

        return announce

    def record_in_child(self, task_id: str, workspace_id: str) -> Callable[[], None]:
        """Start `cairnctl watch` for the task; returns what stops it (once, waiting for its
        last capture). Its messages go to the cache folder, not to this process's output."""
        log_path = self.ctx.data.cache_root / f"{workspace_id}.watch.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            child = subprocess.Popen(
                python_command("core.cli", "--data-dir", str(self.ctx.data.root), "watch", task_id),
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


def restored_from(revs: list[Revision], rev: Revision) -> Revision | None:
    """The earlier revision whose files a restore put back whole (`rev`'s tree is that one's
    and not its parent's), or None: a restore of some files that leaves a mix no revision had,
    or anything but a restore."""
    if rev.trigger != RevisionTrigger.RESTORE.value:
        return None
    before = [r for r in revs if r.seq < rev.seq]
    if not before or before[-1].tree == rev.tree:
        return None
    same = [r for r in before if r.tree == rev.tree]
    return same[-1] if same else None


def workspace_runs(ctx: Context, workspace_id: str) -> list[Run]:
    """Every run that worked in the workspace, oldest first."""
    rows = ctx.store.query(
        "SELECT id FROM runs WHERE workspace_id = ? ORDER BY created_at", (workspace_id,)
    )
    return [ctx.store.get_run(r["id"]) for r in rows]


def _paths(diff: Diff) -> list[str]:
    return [f.path for f in diff.files]


def _named(paths: list[str]) -> str:
    shown = ", ".join(paths[:NOTE_PATHS])
    more = len(paths) - NOTE_PATHS
    return shown + (f" and {more} more" if more > 0 else "")
