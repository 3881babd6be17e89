"""The revision recorder: watches one workspace and records its files as revisions in the vault.

Owns when and what to capture (debounced watched paths, overflow and catch-up full captures, the
fallback scans) and the stat cache; hashing is the tree index's job, commits are the vault's.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import logging
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver, EventQueue, ObservedWatch

from core.errors import CairnError, Conflict, NotFound, VaultError
from core.launch import is_frozen, python_command
from core.vault import Vault, statpass
from core.vault.ignore import IgnoreRules
from core.vault.objects import (
    MODE_EXEC,
    MODE_FILE,
    MODE_GITLINK,
    MODE_LINK,
)
from core.vault.tree_index import (
    RACY_SECONDS_FINE,
    FileRecord,
    Looked,
    ScanProblem,
    TreeIndex,
    mode_of,
    racy_window,
    stat_key,
)

log = logging.getLogger(__name__)

# What the observer delivers. Without a filter, open/close-nowrite events overflow inotify on large
# trees. FileAttribEvent is here because `chmod +x` arrives only as an attribute change; it adds
# nothing to the inotify mask (FileModifiedEvent already asks for IN_ATTRIB).
WATCHED_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileAttribEvent,
]

_SETTLE_SECONDS = 0.05  # wait_idle: how long "nothing in flight" must hold
_DRAIN_SECONDS = 0.2  # capture(): at most this long for in-flight events to arrive
_SAFETY_NET_SECONDS = 60.0  # full captures when queue overflows cannot be detected
_OVERFLOW_REPORT_SECONDS = 30.0
_WATCH_LIMIT_ERRNOS = (errno.ENOSPC, errno.EMFILE, errno.ENOMEM)


@dataclass(frozen=True)
class CapturedRevision:
    """A revision the recorder just wrote."""

    commit: str
    parent: str | None
    tree: str
    trigger: str
    run_id: str | None
    files_changed: int
    created_at: float
    full: bool


# -- the observer --------------------------------------------------------------------------------
#
# watchdog 7 handles an inotify queue overflow inside InotifyWatchGroup.on_queue_overflow (it
# rebuilds its watches) and never tells the event handler, and it silently skips sub-folders it
# could not watch (the watch limit). The three small subclasses below report both. They lean on
# watchdog internals; when those differ, `_make_observer` falls back to the stock observer and the
# recorder adds periodic full captures as a safety net.

try:
    import dataclasses as _dc

    from watchdog.observers.inotify import InotifyEmitter, InotifyObserver, InotifyWatchGroup

    @_dc.dataclass
    class _ReportingWatchGroup(InotifyWatchGroup):
        on_overflow: Callable[[], None] | None = None
        on_watch_limit: Callable[[bytes], None] | None = None

        def on_queue_overflow(self) -> None:
            super().on_queue_overflow()
            if self.on_overflow is not None:
                self.on_overflow()

        def _add_callback(self, path: bytes) -> None:
            super()._add_callback(path)
            # watchdog swallowed a failure to add the watch; ctypes still holds its errno.
            if (
                path not in self._active_callbacks_by_path
                and self.on_watch_limit is not None
                and ctypes.get_errno() in _WATCH_LIMIT_ERRNOS
                and os.path.isdir(path)
            ):
                self.on_watch_limit(path)

    class _ReportingEmitter(InotifyEmitter):
        def __init__(
            self,
            event_queue: EventQueue,
            watch: ObservedWatch,
            *,
            on_overflow: Callable[[], None] | None = None,
            on_watch_limit: Callable[[bytes], None] | None = None,
            **kwargs: Any,
        ) -> None:
            super().__init__(event_queue, watch, **kwargs)
            self._on_overflow = on_overflow
            self._on_watch_limit = on_watch_limit
            self.reports_overflow = False

        def on_thread_start(self) -> None:
            try:
                group = _ReportingWatchGroup(
                    self._inotify_fd,
                    os.fsencode(self.watch.path),
                    is_recursive=self.watch.is_recursive,
                    event_mask=self.get_event_mask_from_filter(),
                    follow_symlink=self.watch.follow_symlink,
                    on_overflow=self._on_overflow,
                    on_watch_limit=self._on_watch_limit,
                )
            except (TypeError, AttributeError):  # watchdog's internals changed
                log.warning(
                    "cannot hook inotify overflow reports; relying on periodic full captures"
                )
                super().on_thread_start()
                return
            self._inotify = group
            self.reports_overflow = True

        def buffered_events(self) -> int:
            """Events read from the kernel but not yet handed on (moves wait here to be paired)."""
            group = self._inotify
            try:
                return len(group._move_event_grouper._queue._queue) if group is not None else 0
            except AttributeError:
                return 0

    class _RecorderObserver(InotifyObserver):
        def __init__(
            self, *, on_overflow: Callable[[], None], on_watch_limit: Callable[[bytes], None]
        ) -> None:
            super().__init__()
            try:
                self._emitter_class = _ReportingEmitter
                self._emitter_kwargs.update(on_overflow=on_overflow, on_watch_limit=on_watch_limit)
            except AttributeError:
                self.stop()  # closes the inotify instance the base class opened
                raise

        def unread_bytes(self) -> int:
            """Bytes of events the kernel holds that nobody has read yet."""
            import fcntl
            import struct
            import termios

            buf = fcntl.ioctl(self._inotify_fd._inotify_fd, termios.FIONREAD, b"\0\0\0\0")
            return struct.unpack("i", buf)[0]

    _HAVE_INOTIFY = True
except Exception:  # noqa: BLE001 - not Linux, or other watchdog internals  # pragma: no cover
    _HAVE_INOTIFY = False


def _make_observer(
    on_overflow: Callable[[], None], on_watch_limit: Callable[[bytes], None]
) -> BaseObserver:
    """A started-able observer; may raise OSError when inotify has no instance left."""
    if _HAVE_INOTIFY:
        try:
            return _RecorderObserver(on_overflow=on_overflow, on_watch_limit=on_watch_limit)
        except (AttributeError, TypeError):  # pragma: no cover - watchdog's internals changed
            pass
    from watchdog.observers import Observer

    return Observer()


def _reports_overflow(observer: BaseObserver) -> bool:
    return bool(observer.emitters) and all(
        getattr(e, "reports_overflow", False) for e in observer.emitters
    )


def _events_in_flight(observer: BaseObserver) -> int:
    """Best effort: events somewhere between the kernel and our handler."""
    count = 0
    unread_bytes = getattr(observer, "unread_bytes", None)  # only on _RecorderObserver
    if unread_bytes is not None:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            count += unread_bytes()
    count += getattr(observer.event_queue, "unfinished_tasks", 0)
    for emitter in list(observer.emitters):
        count += getattr(emitter, "buffered_events", lambda: 0)()
    return count


class _EventCollector(FileSystemEventHandler):
    """Runs on the observer's thread: turns events into workspace paths, nothing more."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def dispatch(self, event: FileSystemEvent) -> None:
        try:
            self._recorder._on_event(event)
        except Exception:  # raised here, it would end the observer's thread: capture it all
            log.exception("cannot handle %r", event)
            self._recorder._want_full()


# -- the stat cache ------------------------------------------------------------------------------
#
# One file per workspace, in core.vault.statpass's format: the head's tree bodies (which must hash,
# from the root down, to the head's tree) and each entry's stat data. It is trusted only when its
# records rebuild exactly the head revision's tree; anything else costs a rehash, never a wrong
# revision.

_MODES = {m.encode(): m for m in (MODE_FILE, MODE_EXEC, MODE_LINK, MODE_GITLINK)}
_STAT_PASS_TIMEOUT_S = 600.0


def _cache_folders(index: TreeIndex) -> tuple[str, list[statpass.Folder]]:
    """The root tree id and the folders of the index, root first, as the cache holds them."""
    ids: dict[str, bytes] = {}
    out: dict[str, statpass.Folder] = {}
    no_stat = statpass.NO_STAT
    pack = statpass.STAT.pack
    for folder in sorted(index.dirs, key=lambda f: f.count("/") + (1 if f else 0), reverse=True):
        items = []
        prefix = folder + "/" if folder else ""
        for name, rec in index.dirs[folder].items():
            bname = os.fsencode(name)
            if rec is None:
                items.append((bname + b"/", b"40000", bname, ids[prefix + name], no_stat))
            else:
                stat = pack(*rec.stat, rec.seen_at) if rec.stat is not None else no_stat
                items.append((bname, rec.mode.encode(), bname, bytes.fromhex(rec.sha), stat))
        items.sort()  # git's order: a folder's name sorts as if it ended with "/"
        body = b"".join([b"%s %s\0%s" % (mode, name, sha) for _, mode, name, sha, _ in items])
        tree_id = hashlib.sha1(b"tree %d\0" % len(body) + body).digest()
        ids[folder] = tree_id
        out[folder] = statpass.Folder(
            os.fsencode(folder), tree_id, body, b"".join([i[4] for i in items]), len(items)
        )
    root = out.pop("")
    return root.tree_id.hex(), [root, *out.values()]


def _encode_stat_cache(workspace_id: str, head: str, index: TreeIndex) -> bytes:
    tree, folders = _cache_folders(index)
    return statpass.encode(workspace_id, head, tree, folders)


def _decode_stat_cache(
    data: bytes, workspace_id: str, head: str, head_tree: str
) -> TreeIndex | None:
    """The index the cache describes, or None when it is not exactly the head's tree."""
    try:
        folders = statpass.decode(data, workspace_id, head, head_tree)
        ids = {f.path: f.tree_id for f in folders}
        dirs: dict[str, dict[str, FileRecord | None]] = {}
        tree_ids: dict[str, str] = {}
        subtrees = 0
        for folder in folders:
            prefix = folder.path + b"/" if folder.path else b""
            out: dict[str, FileRecord | None] = {}
            for mode, name, sha, (mtime_ns, ctime_ns, size, ino, seen_at) in statpass.entries_of(
                folder
            ):
                if mode == b"40000":
                    if ids.get(prefix + name) != sha:
                        return None
                    subtrees += 1
                    out[os.fsdecode(name)] = None
                    continue
                out[os.fsdecode(name)] = FileRecord(
                    _MODES[mode],
                    sha.hex(),
                    None if seen_at < 0 else (mtime_ns, ctime_ns, size, ino),
                    max(seen_at, 0.0),
                )
            key = os.fsdecode(folder.path)
            dirs[key] = out
            tree_ids[key] = folder.tree_id.hex()
        if subtrees != len(folders) - 1 or len(dirs) != len(folders):
            return None
    except (statpass.CacheMismatch, KeyError, ValueError):  # any damage: not ours to trust
        return None
    index = TreeIndex()
    index.dirs = dirs
    index.tree_ids = tree_ids
    index.dirty = set()
    return index


def _helper_argv() -> list[str]:
    """What runs one shard of the stat pass in a helper process: the module as a script with
    nothing but the standard library (a few milliseconds to start), or the bundle's entry."""
    if is_frozen():
        return python_command("core.vault.statpass")
    return [sys.executable, "-S", "-I", statpass.__file__]


def stat_pass_shards() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def stat_pass(
    cache: Path,
    root: str,
    workspace_id: str,
    head: str,
    tree: str,
    ignore: IgnoreRules,
    *,
    in_process: bool = True,
) -> list[tuple[str, str, bool]] | None:
    """A full, verifying stat pass of the workspace against its stat cache, one shard of the
    folders per core (helper processes, and this one unless `in_process` is false). Returns the
    paths whose stat data does not vouch for the head's tree (new paths the ignore rules leave
    out are not among them: an empty list proves the workspace holds exactly the head's tree),
    or None when the cache cannot be used."""
    if not cache.is_file():
        return None
    found = _sharded_pass(cache, root, (workspace_id, head, tree), in_process=in_process)
    if found is None:
        return None
    return [
        (rel, kind, is_dir)
        for rel, kind, is_dir in found.suspects
        if kind != statpass.NEW or not ignore.matches(rel, is_dir)
    ]


def hand_over_workspace(cache: Path, root: str, uid: int, gid: int) -> bool:
    """Hand every entry of the workspace at `root` to uid:gid (but the regular files of its
    .git/objects, the vault's) in the stat pass's helper processes, and keep the stat cache
    vouching for the files it vouched for just before: each one whose lstat matched the cache
    right before our lchown, and differs after it in ctime alone, gets its new ctime in the cache.
    False when the cache cannot be used (missing, damaged, not hashing to its tree): the caller
    then hands the folder over the plain way, and the next capture hashes what it must."""
    try:
        data = cache.read_bytes()
        header = statpass.header_of(data)
    except (OSError, statpass.CacheMismatch):
        return False
    refreshed: list[tuple[int, int, int]] = []
    found = _sharded_pass(cache, root, header, owner=(uid, gid), refreshed=refreshed)
    if found is None:
        return False
    try:
        patched = statpass.with_ctimes(data, refreshed)
        # Only over the cache the pass read: one a capture wrote meanwhile is newer.
        if refreshed and cache.read_bytes() == data:
            _write_cache_file(cache, patched)
    except (OSError, statpass.CacheMismatch) as exc:
        log.warning("the stat cache %s keeps the ctimes before the hand-over: %s", cache, exc)
    return True


def _sharded_pass(
    cache: Path,
    root: str,
    header: tuple[str, str, str],
    *,
    in_process: bool = False,
    owner: tuple[int, int] | None = None,
    refreshed: list[tuple[int, int, int]] | None = None,
) -> statpass.Findings | None:
    """One shard of the cache's folders per core, each in a helper process (and one in this
    process when `in_process`): the stat pass, or with `owner` the hand-over pass, whose
    refreshed entries are added to `refreshed`. None when the cache cannot be used."""
    shards = stat_pass_shards()
    first = 0 if in_process else None
    helpers: list[subprocess.Popen[bytes]] = []
    found = statpass.Findings()
    total = None
    mode = ["hand-over"] if owner is not None else []
    tail = [str(owner[0]), str(owner[1])] if owner is not None else []
    try:
        for shard in range(0 if first is None else 1, shards):
            helpers.append(
                subprocess.Popen(
                    [
                        *_helper_argv(),
                        *mode,
                        os.fspath(cache),
                        root,
                        str(shard),
                        str(shards),
                        *header,
                        *tail,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    close_fds=True,
                )
            )
        if first is not None:
            try:
                data = cache.read_bytes()
                folders = statpass.decode(data, *header)
                found.add(statpass.check_shard(folders, os.fsencode(root), first, shards))
                total = len(folders)
            except (OSError, statpass.CacheMismatch):
                return None
        for helper in helpers:
            out, _ = helper.communicate(timeout=_STAT_PASS_TIMEOUT_S)
            answer: dict[str, Any] = (
                json.loads(out) if helper.returncode == 0 and out else {"ok": False}
            )
            if not answer.get("ok"):
                return None
            if total is not None and answer["total"] != total:
                return None
            total = answer["total"]
            found.add(
                statpass.Findings(
                    answer["folders"],
                    answer["subtrees"],
                    [(rel, kind, bool(is_dir)) for rel, kind, is_dir in answer["suspects"]],
                )
            )
            if refreshed is not None:
                refreshed += statpass.refreshed_of(answer["refreshed"])
        assert total is not None
        statpass.check_totals(found, total)
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        struct.error,
        subprocess.SubprocessError,
        statpass.CacheMismatch,
    ):
        return None
    finally:
        for helper in helpers:
            if helper.poll() is None:
                helper.kill()
                helper.wait()
    return found


def seed_stat_cache(
    path: Path,
    workspace_id: str,
    root: Path,
    revision: str,
    index: TreeIndex,
    looked: Looked | None = None,
) -> int:
    """Write the stat cache of a workspace whose files were just written from `revision` (whose
    tree `index` holds), so that the recorder's first full capture is a pass of `lstat`s instead
    of hashing every file again. Returns how many files it vouches for; a file whose kind on
    disk is not the revision's is left without stat data (and is hashed by that capture).

    The files written last are still racy when they are first looked at; on a filesystem with
    fine timestamps they are looked at again once their window has passed (a tenth of a second
    at most), so that the cache vouches for them too. `looked`: the `lstat`s already taken of
    these files since they were written (by `workspaces.create_tree`), used instead of new ones.
    """
    top = os.fspath(root) + os.sep
    records: list[tuple[str, FileRecord]] = []
    taken: list[tuple[str, FileRecord, os.stat_result]] = []
    stats = looked.stats if looked is not None else {}
    for folder, children in index.dirs.items():
        prefix = top + folder + "/" if folder else top
        for name, rec in children.items():
            if rec is not None:
                rec.stat, rec.seen_at = None, 0.0
                if rec.mode == MODE_GITLINK:
                    continue
                st = stats.get(os.fsencode(folder + "/" + name if folder else name))
                if st is None:
                    records.append((prefix + name, rec))
                else:
                    taken.append((prefix + name, rec, st))
    racy = _seed_stats(records)
    if taken and looked is not None:
        racy += _seed_taken(taken, looked.seen_at)
    if racy:
        newest = max(mtime for mtime, _ in racy)
        time.sleep(max(0.0, min(newest + RACY_SECONDS_FINE - time.time(), RACY_SECONDS_FINE)))
        _seed_stats([record for _, record in racy])
    vouched = sum(1 for _, rec in records if rec.stat is not None)
    _write_cache_file(path, _encode_stat_cache(workspace_id, revision, index))
    return vouched


def _write_cache_file(path: Path, data: bytes) -> None:
    """Replace the stat cache file whole (a temporary file renamed over it), or leave it as it
    was and raise."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _seed_stats(
    records: list[tuple[str, FileRecord]],
) -> list[tuple[float, tuple[str, FileRecord]]]:
    """Give each record the stat data of its file (when of the record's kind); returns those
    still racy on a filesystem with fine timestamps, with their mtimes."""
    seen_at = time.time()  # before any lstat: a change after it is never hidden by the cache
    looked = []
    for full, rec in records:
        try:
            looked.append((full, rec, os.lstat(full)))
        except OSError:
            continue
    return _seed_taken(looked, seen_at)


def _seed_taken(
    looked: list[tuple[str, FileRecord, os.stat_result]], seen_at: float
) -> list[tuple[float, tuple[str, FileRecord]]]:
    """`_seed_stats` with the `lstat`s taken already, from `seen_at` on."""
    racy = []
    for full, rec, st in looked:
        if mode_of(st) == rec.mode:
            rec.stat, rec.seen_at = stat_key(st), seen_at
            window = racy_window(st)
            if window == RACY_SECONDS_FINE and seen_at - st.st_mtime <= window:
                racy.append((st.st_mtime, (full, rec)))
    return racy


# -- the recorder --------------------------------------------------------------------------------


class _RootGone(Exception):
    pass


class Recorder:
    """Records one workspace's files as revisions: watched paths after a quiet period, everything
    on start, on overflow and on demand.

    Threads: the observer's thread only collects paths; one worker thread captures; `capture()`
    may be called from any thread and waits for a capture in progress. Callbacks run on the
    thread that captured (the worker, or the caller of `capture`/`start`/`stop`) or, for some
    problems, on the observer's thread.
    """

    def __init__(
        self,
        vault: Vault,
        workspace_id: str,
        root: Path,
        *,
        on_revision: Callable[[CapturedRevision], None] | None = None,
        on_problem: Callable[[str], None] | None = None,
        quiet_period: float = 0.25,
        max_interval: float = 3.0,
        run_id: Callable[[], str | None] = lambda: None,
        stat_cache: Path | None = None,
    ) -> None:
        self.vault = vault
        self.workspace_id = workspace_id
        self.root = Path(root)
        self._root = os.path.abspath(os.fspath(root))
        self._prefix = self._root.rstrip(os.sep) + os.sep
        self._on_revision = on_revision
        self._on_problem = on_problem
        self.quiet_period = quiet_period
        self.max_interval = max_interval
        self._current_run = run_id
        self._stat_cache = Path(stat_cache) if stat_cache is not None else None

        # The index, the head and commits: one capture at a time.
        self._lock = threading.Lock()
        self._index: TreeIndex | None = None
        self._head: str | None = None
        self._head_tree: str | None = None
        self._index_matches_head = False
        self._cache_dirty = False  # the index learnt something the stat cache file does not hold
        self._cache_lock = threading.Lock()
        self._ignore = IgnoreRules(self._root)  # used under _lock only
        self._event_ignore = IgnoreRules(self._root)  # used on the observer's thread only

        # What is waiting to be captured, and the worker's schedule.
        self._cond = threading.Condition()
        self._pending: set[str] = set()
        self._full_wanted = False
        self._first_event: float | None = None
        self._last_event = 0.0
        self._not_before = 0.0
        self._capturing = False
        self._stopping = False
        self._root_event = False
        self._poll_interval: float | None = None
        self._last_full_done = time.monotonic()
        self._fulls_started = 0  # full captures begun, and the number of the last finished
        self._last_full_finished = 0

        self._observer: BaseObserver | None = None
        self._worker: threading.Thread | None = None
        self._mode = "stopped"  # watching | scanning (no watcher) | stopped
        self._reported: set[str] = set()
        self._notes: list[str] = []  # problems found under _lock, told once it is released
        self._overflow_told = -_OVERFLOW_REPORT_SECONDS
        self._stats = {
            "captures": 0,
            "full_captures": 0,
            "overflows": 0,
            "last_capture_ms": 0.0,
            "last_full_capture_ms": 0.0,
            "last_files_changed": 0,
            "stat_cache_used": False,
        }

    # -- public ------------------------------------------------------------------------------

    @property
    def head(self) -> str | None:
        return self._head

    @property
    def mode(self) -> str:
        """'watching', 'scanning' (no usable watcher: periodic full captures), 'lost' (the
        workspace folder was deleted) or 'stopped'."""
        return self._mode

    @property
    def stats(self) -> dict[str, Any]:
        with self._cond:
            out: dict[str, Any] = dict(self._stats)
            out["pending"] = len(self._pending)
            out["mode"] = self._mode
        return out

    def start(self, trigger: str = "watch") -> CapturedRevision | None:
        """Load the head's index, start watching, then capture whatever changed while nobody
        watched (a full capture). Returns that revision, or None when nothing changed."""
        if self._mode not in ("stopped", "lost"):
            raise Conflict(f"workspace {self.workspace_id} is already being recorded")
        if not os.path.isdir(self._root):
            raise NotFound(f"workspace folder {self._root} does not exist")
        # The index is loaded by the first capture (or left to the worker when a stat pass
        # proves the workspace unchanged): a big workspace's watch starts in a stat pass.
        with self._cond:
            self._stopping = False
            self._root_event = False
            self._pending.clear()
            self._full_wanted = False
            self._first_event = None
            self._last_full_done = time.monotonic()
            self._poll_interval = None
            self._mode = "stopped"
        self._event_ignore.reset()
        self._start_observer()
        try:
            # Before the worker starts, which would load the index first: the capture of an
            # unchanged workspace is then a stat pass. Events meanwhile wait in the pending set.
            captured = self.capture(trigger, full=True)
        except BaseException:
            self._halt()
            self._mode = "stopped"
            raise
        self._worker = threading.Thread(
            target=self._work, name=f"cairn-recorder-{self.workspace_id}", daemon=True
        )
        self._worker.start()
        return captured

    def stop(self) -> None:
        """Capture what is pending, stop watching, save the stat cache."""
        self._halt()
        lost = self._mode == "lost"
        self._mode = "stopped"
        with self._cond:
            outstanding = bool(self._pending or self._full_wanted)
        if outstanding and not lost:
            try:
                self._capture_now("watch", full=False, run_id=None)
            except (CairnError, OSError) as exc:
                self._problem(
                    f"the last changes of workspace {self.workspace_id} could not be "
                    f"recorded: {exc}"
                )
        if not lost:
            self._save_stat_cache()

    def capture(
        self, trigger: str = "manual", *, full: bool = False, run_id: str | None = None
    ) -> CapturedRevision | None:
        """Record the workspace now (watched paths, or everything when `full`); None when the
        tree did not change. Thread-safe; waits for a capture in progress."""
        if not full and self._observer is not None:
            self._drain(_DRAIN_SECONDS)
        if self._observer is None or self._mode == "scanning":
            full = True  # nothing collects paths: only a full capture sees the changes
        return self._capture_now(trigger, full=full, run_id=run_id)

    def _halt(self) -> None:
        """Stop the observer, then the worker (after the capture it may be running)."""
        self._stop_observer()
        worker = self._worker
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if worker is not None and worker is not threading.current_thread():
            worker.join()
        self._worker = None

    def _capture_now(
        self, trigger: str, *, full: bool, run_id: str | None
    ) -> CapturedRevision | None:
        try:
            captured, was_full = self._capture(trigger, full=full, run_id=run_id)
        except _RootGone:
            self._lose_root()
            raise NotFound(f"workspace folder {self._root} is gone; nothing was recorded") from None
        finally:
            self._tell_notes()
        if was_full:
            self._save_stat_cache()
        self._announce(captured)
        return captured

    def wait_idle(self, timeout: float) -> bool:
        """True once everything written before the call is recorded (or found unchanged)."""
        deadline = time.monotonic() + timeout
        if self._mode == "scanning":
            with self._cond:
                begun = self._fulls_started  # a full capture that begins after this call
                while self._last_full_finished <= begun:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._mode != "scanning":
                        return self._last_full_finished > begun
                    self._cond.wait(left)
            return True
        quiet_since: float | None = None
        while True:
            now = time.monotonic()
            if self._busy():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= _SETTLE_SECONDS:
                return True
            if now >= deadline:
                return False
            time.sleep(0.01)

    # -- events (observer thread) --------------------------------------------------------------

    def _on_event(self, event: FileSystemEvent) -> None:
        paths = [event.src_path]
        dest = getattr(event, "dest_path", "")
        if dest:
            paths.append(dest)
        added = False
        full = False
        for raw in paths:
            path = os.fsdecode(raw)
            if path == self._root:
                if isinstance(event, DirDeletedEvent):
                    with self._cond:
                        self._root_event = True
                        self._cond.notify_all()
                continue
            if not path.startswith(self._prefix):
                continue
            rel = path[len(self._prefix) :]
            if os.sep != "/":  # pragma: no cover - Linux only today
                rel = rel.replace(os.sep, "/")
            if rel == ".git" or rel.startswith(".git/") or "/.git/" in rel or rel.endswith("/.git"):
                continue
            if rel in self._pending:
                added = True
                continue
            if self._event_ignore.is_ignored(rel, event.is_directory):
                index = self._index
                # Tracked stays tracked (not loaded yet: the capture decides).
                if index is not None and not index.contains(rel):
                    continue
            if rel == ".gitignore" or rel.endswith("/.gitignore"):
                self._event_ignore.reset()
                full = True
            with self._cond:
                self._pending.add(rel)
            added = True
        if added or full:
            now = time.monotonic()
            with self._cond:
                if full:
                    self._full_wanted = True
                if self._first_event is None:
                    self._first_event = now
                self._last_event = now
                self._cond.notify_all()

    def _want_full(self) -> None:
        now = time.monotonic()
        with self._cond:
            self._full_wanted = True
            if self._first_event is None:
                self._first_event = now
            self._last_event = now
            self._cond.notify_all()

    def _on_overflow(self) -> None:
        now = time.monotonic()
        with self._cond:
            self._stats["overflows"] += 1
            self._full_wanted = True
            if self._first_event is None:
                self._first_event = now
            self._last_event = now
            self._cond.notify_all()
            tell = now - self._overflow_told > _OVERFLOW_REPORT_SECONDS
            if tell:
                self._overflow_told = now
        if tell:  # a burst overflows many times; say it once
            self._problem(
                f"too many changes at once in workspace {self.workspace_id} (the inotify "
                f"queue overflowed); recording everything with a full capture",
                dedupe=False,
            )

    def _on_watch_limit(self, path: bytes) -> None:
        with self._cond:
            if self._poll_interval is not None and self._mode == "scanning":
                return
            self._mode = "scanning"
            self._poll_interval = self._scan_interval()
            self._cond.notify_all()
        self._problem(
            f"cannot watch {os.fsdecode(path)}: the inotify watch limit is reached "
            f"(raise fs.inotify.max_user_watches); workspace {self.workspace_id} is "
            f"now recorded by periodic full captures"
        )

    # -- the worker ----------------------------------------------------------------------------

    def _due(self, now: float) -> float | None:
        due = None
        if self._pending or self._full_wanted:
            first = self._first_event if self._first_event is not None else now
            due = min(self._last_event + self.quiet_period, first + self.max_interval)
        if self._poll_interval is not None:
            poll = self._last_full_done + self._poll_interval
            due = poll if due is None else min(due, poll)
        if due is not None:
            due = max(due, self._not_before)
        return due

    def _work(self) -> None:
        while True:
            if self._index is None and not self._stopping:
                self._load_index_quietly()
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    if self._root_event:
                        self._root_event = False
                        job = "root"
                        break
                    now = time.monotonic()
                    due = self._due(now)
                    if due is not None and due <= now:
                        if (
                            self._poll_interval is not None
                            and now >= self._last_full_done + self._poll_interval
                        ):
                            self._full_wanted = True
                        job = "capture"
                        break
                    self._cond.wait(None if due is None else due - now)
            if job == "root":
                if not self._root_present():
                    self._lose_root()
                    return
                self._rewatch()
                continue
            try:
                captured, was_full = self._capture("watch", full=False, run_id=None)
            except _RootGone:
                self._tell_notes()
                self._lose_root()
                return
            except Exception as exc:  # keep recording; retry everything a little later
                log.exception("capture of workspace %s failed", self.workspace_id)
                self._tell_notes()
                with self._cond:
                    self._full_wanted = True
                    self._not_before = time.monotonic() + self.max_interval
                self._problem(
                    f"recording a revision of workspace {self.workspace_id} failed: {exc}",
                    dedupe=False,
                )
                continue
            self._tell_notes()
            with self._cond:
                self._not_before = 0.0
            if captured is not None and was_full:
                self._save_stat_cache()
            self._announce(captured)

    def _capture(
        self, trigger: str, *, full: bool, run_id: str | None
    ) -> tuple[CapturedRevision | None, bool]:
        """One capture under the lock; returns the revision (None: unchanged) and whether it
        was a full one."""
        objects = self.vault.objects
        t0 = time.perf_counter()
        with self._lock:
            with self._cond:
                paths = self._pending
                self._pending = set()
                full = full or self._full_wanted
                self._full_wanted = False
                self._first_event = None
                self._capturing = True
                if full:
                    self._fulls_started += 1
                    full_id = self._fulls_started
            try:
                if self._index is None:
                    if full and self._proved_unchanged():
                        self._note_capture(t0, full, 0, learnt=False)
                        return None, full
                    self._load_index()
                index = self._index
                assert index is not None
                if not self._root_present():
                    raise _RootGone()
                problems: list[ScanProblem] = []
                if full:
                    self._ignore.reset()
                    changed = index.record_path(objects, self._root, "", self._ignore, problems)
                else:
                    changed = 0
                    for rel in _outermost(paths):
                        changed += index.record_path(
                            objects, self._root, rel, self._ignore, problems
                        )
                tree = index.flush(objects)
                if not self._root_present():
                    # The folder vanished while we looked: what we saw is not the workspace.
                    self._index = None
                    raise _RootGone()
                for p in problems:
                    self._notes.append(
                        f"{p.path}: {p.reason} (left as it was in the last revision)"
                    )
                if self._head is not None and tree == self._head_tree:
                    self._index_matches_head = True
                    self._note_capture(t0, full, 0)
                    return None, full
                run = (
                    run_id
                    if run_id is not None
                    else (self._run_in_flight() if trigger == "watch" else None)
                )
                created = time.time()
                commit = self._commit(tree, trigger, run, changed, created)
                if commit is None:  # the ref moved to a revision with this very tree
                    self._note_capture(t0, full, 0)
                    return None, full
                # self._head is the parent actually used (it moves if someone else wrote one).
                captured = CapturedRevision(
                    commit, self._head, tree, trigger, run, changed, created, full
                )
                self._head, self._head_tree = commit, tree
                self._index_matches_head = True
                self._note_capture(t0, full, changed)
                return captured, full
            except _RootGone:
                self._index_matches_head = False
                raise
            except BaseException:
                # What was pending is consumed; the next capture looks at everything.
                self._index_matches_head = False
                with self._cond:
                    self._full_wanted = True
                raise
            finally:
                with self._cond:
                    self._capturing = False
                    if full:
                        self._last_full_done = time.monotonic()
                        self._last_full_finished = full_id
                    self._cond.notify_all()

    def _commit(
        self, tree: str, trigger: str, run: str | None, changed: int, created: float
    ) -> str | None:
        try:
            return self.vault.commit_revision(
                self.workspace_id,
                tree,
                self._head,
                trigger=trigger,
                run_id=run,
                files_changed=changed,
                timestamp=created,
            )
        except VaultError:
            current = self.vault.revision_head(self.workspace_id)
            if current == self._head:
                raise
        # Someone else wrote a revision (a restore, another process): record on top of theirs.
        self._notes.append(
            f"the revisions of workspace {self.workspace_id} moved to "
            f"{(current or 'nothing')[:12]} behind the recorder; recording on top"
        )
        self._head = current
        self._head_tree = self.vault.tree_of(current) if current else None
        if current is not None and tree == self._head_tree:
            return None
        return self.vault.commit_revision(
            self.workspace_id,
            tree,
            current,
            trigger=trigger,
            run_id=run,
            files_changed=changed,
            timestamp=created,
        )

    def _run_in_flight(self) -> str | None:
        try:
            return self._current_run()
        except Exception:
            log.exception("the run_id callback failed; recording without a run")
            return None

    def _note_capture(self, t0: float, full: bool, changed: int, *, learnt: bool = True) -> None:
        ms = (time.perf_counter() - t0) * 1000.0
        if learnt:
            self._cache_dirty = True
        with self._cond:
            self._stats["captures"] += 1
            self._stats["last_capture_ms"] = ms
            self._stats["last_files_changed"] = changed
            if full:
                self._stats["full_captures"] += 1
                self._stats["last_full_capture_ms"] = ms
                if self._mode == "scanning":
                    self._poll_interval = self._scan_interval()

    def _announce(self, captured: CapturedRevision | None) -> None:
        if captured is None or self._on_revision is None:
            return
        try:
            self._on_revision(captured)
        except Exception:
            log.exception("on_revision failed for %s", captured.commit)

    # -- index and stat cache ------------------------------------------------------------------

    def _load_index(self) -> None:
        """Under _lock: the head revision and its index (from the stat cache when it matches)."""
        self._head = self.vault.revision_head(self.workspace_id)
        self._head_tree = self.vault.tree_of(self._head) if self._head else None
        self._index_matches_head = True
        self._stats["stat_cache_used"] = False
        if self._head is None:
            self._index = TreeIndex()
            return
        assert self._head_tree is not None
        if self._stat_cache is not None:
            try:
                data = self._stat_cache.read_bytes()
            except OSError:
                data = b""
            index = (
                _decode_stat_cache(data, self.workspace_id, self._head, self._head_tree)
                if data
                else None
            )
            if index is not None:
                self._index = index
                self._stats["stat_cache_used"] = True
                return
        self._index = TreeIndex.from_tree(self.vault.objects, self._head_tree)

    def _proved_unchanged(self) -> bool:
        """Under _lock, with no index loaded: whether a stat pass against the stat cache proves
        that the workspace holds exactly its head's tree. Any doubt (no cache, another head's,
        a path whose stat data does not vouch for it) is a no: the caller captures the slow way."""
        if self._stat_cache is None:
            return False
        head = self.vault.revision_head(self.workspace_id)
        if head is None:
            return False
        if not self._root_present():
            raise _RootGone()
        tree = self.vault.tree_of(head)
        self._ignore.reset()
        suspects = stat_pass(
            self._stat_cache, self._root, self.workspace_id, head, tree, self._ignore
        )
        if suspects is None or suspects:
            return False
        if not self._root_present():
            raise _RootGone()
        self._head, self._head_tree = head, tree
        self._index_matches_head = True
        self._stats["stat_cache_used"] = True
        return True

    def _load_index_quietly(self) -> None:
        """On the worker: load the index a stat pass left unloaded, before the first event's
        capture needs it (a failure is that capture's to report)."""
        with self._lock:
            if self._index is not None:
                return
            try:
                self._load_index()
            except Exception:  # the next capture loads it again and says why
                log.exception("cannot load the index of workspace %s", self.workspace_id)
                self._index = None

    def _save_stat_cache(self) -> None:
        if self._stat_cache is None:
            return
        with self._cache_lock:  # saves land in the order their pictures were taken
            with self._lock:
                if (
                    self._index is None
                    or self._head is None
                    or not self._index_matches_head
                    or not self._cache_dirty
                ):
                    return
                data = _encode_stat_cache(self.workspace_id, self._head, self._index)
                self._cache_dirty = False
            self._write_stat_cache(data)

    def _write_stat_cache(self, data: bytes) -> None:
        path = self._stat_cache
        assert path is not None
        try:
            _write_cache_file(path, data)
        except OSError as exc:
            self._cache_dirty = True
            self._problem(f"cannot save the stat cache {path}: {exc.strerror or exc}")

    # -- the observer and the workspace folder -------------------------------------------------

    def _start_observer(self) -> None:
        try:
            observer = _make_observer(self._on_overflow, self._on_watch_limit)
            try:
                observer.schedule(
                    _EventCollector(self), self._root, recursive=True, event_filter=WATCHED_EVENTS
                )
                observer.start()
            except BaseException:
                observer.stop()
                raise
        except OSError as exc:
            why = (
                "the inotify watch limit is reached (raise fs.inotify.max_user_watches)"
                if exc.errno == errno.ENOSPC
                else "no inotify instance is left (raise fs.inotify.max_user_instances)"
                if exc.errno == errno.EMFILE
                else f"the watcher failed ({exc})"
            )
            with self._cond:
                self._mode = "scanning"
                self._poll_interval = self._scan_interval()
            self._problem(
                f"cannot watch workspace {self.workspace_id}: {why}; recording it by "
                f"periodic full captures instead"
            )
            return
        self._observer = observer
        with self._cond:
            if self._mode != "scanning":  # the watch limit may already have been reported
                self._mode = "watching"
                self._poll_interval = None if _reports_overflow(observer) else _SAFETY_NET_SECONDS

    def _rewatch(self) -> None:
        """The folder was replaced by another one at the same path: the old watches died with
        the old folder. Watch the new one and capture it whole."""
        self._problem(
            f"workspace folder {self._root} was replaced; watching the new one", dedupe=False
        )
        self._stop_observer()
        self._start_observer()
        now = time.monotonic()
        with self._cond:
            self._full_wanted = True
            self._first_event = self._first_event or now
            self._last_event = now
            self._cond.notify_all()

    def _stop_observer(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            if observer is not threading.current_thread():
                observer.join(timeout=10)

    def _scan_interval(self) -> float:
        # Every few seconds, but slow enough that scanning takes at most a fifth of the time.
        return max(self.max_interval, 2.0, 5.0 * self._stats["last_full_capture_ms"] / 1000.0)

    def _root_present(self) -> bool:
        try:
            return os.path.isdir(self._root)
        except OSError:
            return False

    def _lose_root(self) -> None:
        """The workspace folder is gone: say so, stop watching, write nothing."""
        with self._cond:
            if self._mode == "lost":
                return
        self._stop_observer()
        with self._cond:
            self._mode = "lost"
            self._pending.clear()
            self._full_wanted = False
            self._stopping = True
            self._cond.notify_all()
        self._problem(
            f"workspace folder {self._root} was deleted; recording of workspace "
            f"{self.workspace_id} stopped (no revision was written for the deletion)",
            dedupe=False,
        )

    def _tell_notes(self) -> None:
        while self._notes:
            try:
                message = self._notes.pop(0)
            except IndexError:  # another thread told it
                return
            self._problem(message)

    def _problem(self, message: str, *, dedupe: bool = True) -> None:
        if dedupe:
            if message in self._reported:
                return
            self._reported.add(message)
        log.warning("%s", message)
        if self._on_problem is not None:
            try:
                self._on_problem(message)
            except Exception:
                log.exception("on_problem failed")

    # -- idleness ------------------------------------------------------------------------------

    def _busy(self) -> bool:
        with self._cond:
            if self._pending or self._full_wanted or self._capturing or self._root_event:
                return True
        observer = self._observer
        return observer is not None and _events_in_flight(observer) > 0

    def _drain(self, timeout: float) -> None:
        """Give events already in the kernel a moment to reach the pending set."""
        observer = self._observer
        deadline = time.monotonic() + timeout
        while observer is not None and time.monotonic() < deadline:
            if _events_in_flight(observer) == 0:
                return
            time.sleep(0.005)


def _outermost(paths: set[str]) -> list[str]:
    """The pending paths without those under another pending path (a folder is scanned whole)."""
    chosen: set[str] = set()
    out = []
    for rel in sorted(paths, key=lambda p: (p.count("/"), p)):
        parts = rel.split("/")
        if any("/".join(parts[:i]) in chosen for i in range(1, len(parts))):
            continue
        chosen.add(rel)
        out.append(rel)
    return out


__all__ = ["CapturedRevision", "Recorder", "WATCHED_EVENTS"]
