"""A local copy of a workspace that lives in a sandbox on another machine, kept equal to it.

Owns following the in-sandbox watcher (resources/sandbox/workspace-watch.py), pulling the files it
names, full comparison passes (after an overflow or a reconnect) and writing into the local folder
without ever leaving it; how a program runs in the sandbox and how its files are read (exec or
archive streams over the connection) is the `SandboxFiles` the caller gives. Recording revisions
of the local copy stays the recorder's job (`on_changed` tells it what moved).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import json
import logging
import os
import secrets
import shutil
import stat as statmod
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from core.errors import CairnError
from core.launch import resource_path
from core.safe_fs import write_new_entry
from core.vault.objects import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE, object_id
from core.vault.tree_index import StatKey, mode_of, racy_window, stat_key

log = logging.getLogger(__name__)

HELPER_SCRIPT = resource_path("sandbox", "workspace-watch.py")  # copied into the sandbox
HELPER_IN_SANDBOX = "/cairn/tools/workspace-watch.py"
# Where the sandbox's scan keeps its stat cache unless told: writable by the sandbox user and
# outside the workspace. On the sandbox's tmpfs it lasts as long as the container, so the first
# full pass after a recreate hashes every file once; a volume of its own makes it last longer.
SCAN_CACHE_IN_SANDBOX = "/tmp/cairn-workspace-scan"
# The recorder's numbers (core/watch.py's Recorder defaults); a test keeps them equal.
QUIET_PERIOD = 0.25
MAX_INTERVAL = 3.0
# What reads files in the sandbox when the archive API is not used: paths NUL-separated on
# stdin, a tar stream of just those entries (no recursion into folders) on stdout, and a path
# that is gone meanwhile is skipped with a warning instead of failing the whole read.
TAR_READ_ARGV = (
    *("tar", "-c", "-f", "-", "--null", "--no-recursion", "--ignore-failed-read", "-T", "-"),
)

_PULL_BATCH = 256  # paths per read_files call at most
_PULL_BYTES = 32 << 20  # and, when a scan said their sizes, about this many bytes
_RETRY_FIRST_S = 1.0
_RETRY_MAX_S = 30.0
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_MODES = {MODE_FILE: 0o644, MODE_EXEC: 0o755}

_T = TypeVar("_T")
Entry = tuple[str, str | None, bytes | None]  # (path, git mode or None, bytes or None: gone)


class LineStream(Protocol):
    """The standard output of one program in the sandbox, a line at a time. Iteration ends when
    the program ends or the connection drops. The program's stdin is attached and held open
    while the stream lives: the watcher exits when it ends (`--exit-with-stdin`), since a Docker
    exec whose connection closes keeps running with its stdout going nowhere but has its stdin
    closed. `close()` may be called from another thread while a line is awaited: it ends the
    iteration soon (shut the exec's socket down, which closes the program's stdin)."""

    def __iter__(self) -> Iterator[str]: ...

    def close(self) -> None: ...


class SandboxFiles(Protocol):
    """What the mirror needs from the sandbox host."""

    def lines(self, argv: Sequence[str]) -> LineStream:
        """Start `argv` in the sandbox (as the sandbox user) and stream its stdout."""
        ...

    def read_files(self, paths: Sequence[str]) -> Iterable[Entry]:
        """The entries at `paths` (relative to the workspace root, POSIX): for each one
        `(path, mode, data)`: mode "100644"/"100755" with the file's bytes, "120000" with the
        link's target, "40000" (a folder; data b"", its files are not included), or data None
        when the path is gone or is something else. A path left out of the answer counts as
        gone, so `tar -c --no-recursion --ignore-failed-read` (TAR_READ_ARGV, read with
        `entries_from_tar`) is enough. May raise anything when the connection fails."""
        ...


class RemoteUnreadable(CairnError):
    """The sandbox host's copy of the workspace cannot be read (connection lost, helper gone)."""


class _Refused(Exception):
    """A path the mirror will not write (outside the folder, through a link, excluded)."""


def entries_from_tar(stream: io.BufferedIOBase | Any) -> Iterator[Entry]:
    """The entries of a tar stream (read as it arrives) as `read_files` yields them."""
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            name = member.name
            while name.startswith("./"):
                name = name[2:]
            name = name.rstrip("/")
            if member.isdir():
                yield name, MODE_TREE, b""
            elif member.issym():
                yield name, MODE_LINK, os.fsencode(member.linkname)
            elif member.isreg():
                f = archive.extractfile(member)
                data = f.read() if f is not None else b""
                yield name, MODE_EXEC if member.mode & 0o100 else MODE_FILE, data
            else:
                yield name, None, None


def safe_parts(rel: str, exclude: frozenset[str] = frozenset()) -> list[str]:
    """The components of a relative POSIX path the mirror may write, or _Refused."""
    if not rel or rel.startswith("/") or "\0" in rel:
        raise _Refused(f"refusing the path {rel!r}: not a relative path")
    parts = rel.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise _Refused(f"refusing the path {rel!r}: it has an empty, '.' or '..' part")
        if part in exclude:
            raise _Refused(f"refusing the path {rel!r}: {part} is never copied")
    return parts


class WorkspaceMirror:
    """Keeps `local_root` equal to the sandbox's `remote_root`.

    One thread follows the sandbox (`run`, or the thread `start` makes); `sync` and `pull` may
    also be called from other threads (one pass at a time), `stop` from any thread.
    `on_changed` gets the relative paths written or deleted locally (a folder's path when the
    whole folder went), on the thread that pulled; `on_problem` gets one line per trouble.
    """

    def __init__(
        self,
        files: SandboxFiles,
        local_root: Path,
        *,
        scan_cache: str = SCAN_CACHE_IN_SANDBOX,
        remote_root: str = "/workspace",
        helper: str = HELPER_IN_SANDBOX,
        python: str = "python3",
        exclude: Iterable[str] = (),
        quiet_period: float = QUIET_PERIOD,
        max_interval: float = MAX_INTERVAL,
        on_changed: Callable[[list[str]], None] | None = None,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self._files = files
        self.local_root = Path(local_root)
        self.remote_root = remote_root
        self.scan_cache = scan_cache
        self.helper = helper
        self.python = python
        self.exclude = frozenset(exclude)
        self.quiet_period = quiet_period
        self.max_interval = max_interval
        self._on_changed = on_changed
        self._on_problem = on_problem
        # Local files whose bytes the mirror knows: path -> (stat data, mode, blob id, seen at).
        self._known: dict[str, tuple[StatKey, str, str, float]] = {}
        self._last_parent: tuple[str, int] | None = None  # see _open_parent
        self._stop = threading.Event()  # the following ends
        # Passes in progress at stop() end early; one asked for after it (a last sync before a
        # checkpoint) runs whole.
        self._interrupt = threading.Event()
        self._follower: threading.Thread | None = None
        self._passes = threading.RLock()  # one pull or full pass at a time
        self._streams: list[LineStream] = []  # the watcher's and a scan's, closed by stop()
        self._streams_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._want_full = False
        self.state = "stopped"  # connecting | following | unreachable | stopped
        self.last_problem: str | None = None
        self.stats = {
            "batches": 0,  # batches of changed paths followed
            "rescans": 0,  # full passes the watcher asked for (start, overflow, unwatched)
            "pulled": 0,  # paths asked of read_files
            "deleted": 0,  # local paths deleted
            "hashed_local": 0,  # local files hashed to compare them
            "remote_files": 0,  # files in the sandbox's last scan
            "remote_hashed": 0,  # of which its stat cache did not vouch for
        }

    # -- the programs run in the sandbox -------------------------------------------------------

    def _excludes(self) -> list[str]:
        return [arg for name in sorted(self.exclude) for arg in ("--exclude", name)]

    def watch_argv(self) -> list[str]:
        return [
            self.python,
            self.helper,
            "watch",
            self.remote_root,
            "--quiet",
            repr(self.quiet_period),
            "--max-interval",
            repr(self.max_interval),
            "--exit-with-stdin",
            *self._excludes(),
        ]

    def scan_argv(self) -> list[str]:
        return [
            self.python,
            self.helper,
            "scan",
            self.remote_root,
            "--cache",
            self.scan_cache,
            *self._excludes(),
        ]

    # -- following -----------------------------------------------------------------------------

    def start(self) -> None:
        """Follow the sandbox on a thread of the mirror's own until `stop`."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="cairn-mirror", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop following and wait for the thread: the watcher's stream and a scan in progress
        are closed, a pull stops after the read in progress (the next start's full pass
        catches up)."""
        self._stop.set()
        self._interrupt.set()
        with self._streams_lock:
            streams = list(self._streams)
        for stream in streams:
            self._close(stream)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.state = "stopped"

    def wait_ready(self, timeout: float) -> bool:
        """True once the full pass that opens the current connection is done."""
        return self._ready.wait(timeout)

    def run(self) -> None:
        """Follow the sandbox until `stop`: reconnect after a drop (each new connection starts
        with a full pass), telling `on_problem` once per drop."""
        delay = _RETRY_FIRST_S
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.follow()
                return
            except RemoteUnreadable as exc:
                if self._stop.is_set():
                    return
                self.state = "unreachable"
                self._problem(str(exc))
            except Exception as exc:  # a fault here must not end the following for good
                log.exception("the workspace mirror of %s failed", self.local_root)
                if self._stop.is_set():
                    return
                self._problem(f"the workspace mirror of {self.local_root} failed: {exc}")
            if time.monotonic() - began > _RETRY_MAX_S:
                delay = _RETRY_FIRST_S  # it had been working: try again soon
            self._stop.wait(delay)
            delay = min(delay * 2, _RETRY_MAX_S)
        self.state = "stopped"

    def follow(self) -> None:
        """One connection: start the watcher, pull what it reports, full passes when it asks.
        Returns when stopped; raises RemoteUnreadable when the sandbox side cannot be read."""
        self._follower = threading.current_thread()
        try:
            self._follow()
        finally:
            self._follower = None

    def _follow(self) -> None:
        self.state = "connecting"
        self._ready.clear()
        self._interrupt.clear()
        if self._stop.is_set():
            return
        stream = self._open(self.watch_argv(), "start the watcher")
        started = False
        try:
            for line in self._guarded(stream, "read the watcher"):
                if self._stop.is_set():
                    return
                message = _parse(line)
                started = started or message is not None
                if message is None:
                    continue
                if "error" in message:
                    raise RemoteUnreadable(
                        f"the workspace watcher in the sandbox stopped: {message['error']}"
                    )
                if "rescan" in message:
                    self.stats["rescans"] += 1
                    self.sync()
                    self.state = "following"
                    self._ready.set()
                elif "changed" in message:
                    paths = [p for p in message.get("changed") or [] if isinstance(p, str)]
                    complete = [p for p in message.get("complete") or [] if isinstance(p, str)]
                    self.stats["batches"] += 1
                    self.pull(paths, complete=complete)
                    if self._want_full:
                        self.sync()
        finally:
            self._close(stream)
        if self._stop.is_set():
            return
        if not started:
            raise RemoteUnreadable(
                f"the workspace watcher did not start in the sandbox ({self.python} "
                f"{self.helper} said nothing); check that the image has python3 and the "
                f"sandbox's tools folder holds the helper"
            )
        raise RemoteUnreadable(
            "the connection to the sandbox's workspace watcher ended; "
            "its changes are pulled again when it answers"
        )

    def _open(self, argv: list[str], what: str) -> LineStream:
        stream = self._remote(lambda: self._files.lines(argv), what)
        with self._streams_lock:
            self._streams.append(stream)
        if self._interrupt.is_set():
            self._close(stream)
        return stream

    def _close(self, stream: LineStream) -> None:
        with self._streams_lock:
            self._streams = [s for s in self._streams if s is not stream]
        try:
            stream.close()
        except Exception:  # the stream is being abandoned either way
            log.debug("closing a stream from the sandbox failed", exc_info=True)

    def _remote(self, call: Callable[[], _T], what: str) -> _T:
        try:
            return call()
        except RemoteUnreadable:
            raise
        except Exception as exc:  # whatever the transport raises (its own CairnError too)
            raise _unreadable(what, exc) from exc

    def _guarded(self, stream: LineStream, what: str) -> Iterator[str]:
        """The stream's lines; a failure of the transport is RemoteUnreadable (or the end, when
        the mirror is stopping and closed it)."""
        lines = iter(stream)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                return
            except RemoteUnreadable:
                raise
            except Exception as exc:  # whatever the transport raises (its own CairnError too)
                if self._interrupt.is_set():
                    return
                raise _unreadable(what, exc) from exc
            yield line

    # -- pulling -------------------------------------------------------------------------------

    def pull(self, paths: Iterable[str], *, complete: Iterable[str] = ()) -> list[str]:
        """Bring these paths (files, links, folders, gone ones) to what the sandbox holds now;
        returns the paths changed locally (also told to `on_changed`). `complete` names folders
        whose every path is among `paths` (made or moved in whole): anything else the local
        copy holds under them is deleted."""
        with self._passes:
            self._own_pass()
            try:
                return self._pull_named(list(paths), list(complete))
            finally:
                self._forget_parent()

    def _own_pass(self) -> None:
        """Under _passes: a pass asked for by another thread than the follower (after stop, or
        beside it) is not cut short by a stop that came before it."""
        if threading.current_thread() is not self._follower:
            self._interrupt.clear()

    def _pull_named(self, paths: list[str], complete: list[str]) -> list[str]:
        wanted: list[str] = []
        for rel in dict.fromkeys(paths):
            try:
                safe_parts(rel, self.exclude)
            except _Refused as exc:
                self._problem(str(exc))
                continue
            wanted.append(rel)
        changed = self._pull(wanted)
        named = set(wanted)
        for folder in complete:
            if folder in named:
                changed += self._prune(folder, named)
        self._tell(changed)
        return changed

    def _prune(self, folder: str, keep: set[str]) -> list[str]:
        """Delete what the local folder holds that `keep` does not name (outermost first)."""
        stale = [rel for rel in self._local_tree(folder, ids=False) if rel not in keep]
        gone: list[str] = []
        for rel in sorted(stale, key=lambda p: (p.count("/"), p)):
            if not _under_any(rel, gone) and self._apply(rel, None, None):
                gone.append(rel)
        return gone

    def _pull(self, wanted: list[str], sizes: dict[str, int] | None = None) -> list[str]:
        # Parents before children: a folder that replaced a file is a folder before its files
        # are written.
        wanted.sort(key=lambda p: (p.count("/"), p))
        changed: list[str] = []
        for chunk in _chunks(wanted, sizes or {}):
            if self._interrupt.is_set():
                break  # the next connection's full pass brings the rest
            answered = self._remote(functools.partial(self._read, chunk), "read files")
            self.stats["pulled"] += len(chunk)
            for rel in chunk:
                mode, data = answered.get(rel, (None, None))
                if self._apply(rel, mode, data):
                    changed.append(rel)
        return changed

    def _read(self, chunk: list[str]) -> dict[str, tuple[str | None, bytes | None]]:
        asked = set(chunk)
        answered: dict[str, tuple[str | None, bytes | None]] = {}
        for path, mode, data in self._files.read_files(chunk):
            if path in asked:  # anything else is not what was asked for: never written
                answered[path] = (mode, data)
        return answered

    def _apply(self, rel: str, mode: str | None, data: bytes | None) -> bool:
        """Make one local path what the sandbox said; True when the local folder changed."""
        try:
            parts = safe_parts(rel, self.exclude)
            if data is None or mode is None:
                return self._delete(parts)
            if mode == MODE_TREE:
                return self._make_dir(parts)
            if mode == MODE_LINK or mode in _FILE_MODES:
                return self._write(parts, mode, data)
            self._problem(f"{rel}: the sandbox reported an unknown kind of file ({mode})")
            return False
        except _Refused as exc:
            self._want_full = True
            self._problem(str(exc))
            return False
        except OSError as exc:
            self._want_full = True
            self._problem(
                f"cannot write {rel} into the local copy {self.local_root}: {exc.strerror or exc}"
            )
            return False

    # -- the local folder (every step relative to a folder opened without following links) ----

    def _open_parent(self, parts: list[str], *, create: bool) -> int | None:
        """The folder that holds parts[-1]; None (create False) when a folder on the way is not
        there or is not a folder. A link or a file on the way is never followed nor replaced.
        The last folder opened is kept for the next path in the same folder (a pull writes
        folder by folder) until the mirror removes a folder or the pass ends."""
        folder = "/".join(parts[:-1])
        last = self._last_parent
        if last is not None and last[0] == folder:
            return os.dup(last[1])
        fd = self._walk_to_parent(parts, create=create)
        if fd is not None:
            self._forget_parent()
            self._last_parent = (folder, os.dup(fd))
        return fd

    def _forget_parent(self) -> None:
        last, self._last_parent = self._last_parent, None
        if last is not None:
            os.close(last[1])

    def _walk_to_parent(self, parts: list[str], *, create: bool) -> int | None:
        try:
            fd = os.open(self.local_root, _DIR_FLAGS)
        except FileNotFoundError:
            if not create:
                return None
            self.local_root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.local_root, _DIR_FLAGS)
        try:
            for i, part in enumerate(parts[:-1]):
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    os.mkdir(part, 0o755, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    if not create:
                        os.close(fd)
                        return None
                    where = "/".join(parts[: i + 1])
                    raise _Refused(
                        f"refusing {'/'.join(parts)}: {where} is not a folder in the local copy"
                    ) from None
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise

    def _delete(self, parts: list[str]) -> bool:
        rel = "/".join(parts)
        fd = self._open_parent(parts, create=False)
        if fd is None:
            return False
        try:
            try:
                st = os.lstat(parts[-1], dir_fd=fd)
            except FileNotFoundError:
                return False
            if statmod.S_ISDIR(st.st_mode):
                self._forget_tree(rel)
                self._forget_parent()  # it may be that folder or one inside it
                shutil.rmtree(parts[-1], dir_fd=fd)
            else:
                self._known.pop(rel, None)
                os.unlink(parts[-1], dir_fd=fd)
            self.stats["deleted"] += 1
            return True
        finally:
            os.close(fd)

    def _make_dir(self, parts: list[str]) -> bool:
        rel = "/".join(parts)
        fd = self._open_parent(parts, create=True)
        assert fd is not None
        try:
            try:
                st = os.lstat(parts[-1], dir_fd=fd)
            except FileNotFoundError:
                st = None
            if st is not None and statmod.S_ISDIR(st.st_mode):
                return False
            if st is not None:
                self._known.pop(rel, None)
                os.unlink(parts[-1], dir_fd=fd)
            os.mkdir(parts[-1], 0o755, dir_fd=fd)
            return True
        finally:
            os.close(fd)

    def _write(self, parts: list[str], mode: str, data: bytes) -> bool:
        rel = "/".join(parts)
        blob = object_id("blob", data)
        fd = self._open_parent(parts, create=True)
        assert fd is not None
        name = parts[-1]
        try:
            if self._local_id(fd, name, rel) == (mode, blob):
                return False
            tmp = f".{name[:40]}.{secrets.token_hex(6)}.cairn-tmp"
            try:
                write_new_entry(fd, tmp, data, perm=_FILE_MODES.get(mode))
                try:
                    os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    self._forget_tree(rel)
                    self._forget_parent()
                    shutil.rmtree(name, dir_fd=fd)  # a folder became a file
                    os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
                raise
            seen_at = time.time()
            st = os.lstat(name, dir_fd=fd)
            self._known[rel] = (stat_key(st), mode, blob, seen_at)
            return True
        finally:
            os.close(fd)

    def _forget_tree(self, rel: str) -> None:
        """Forget what the mirror knew of the files in a folder it removes."""
        prefix = rel + "/"
        for key in [k for k in self._known if k.startswith(prefix)]:
            del self._known[key]

    def _local_id(self, fd: int, name: str, rel: str) -> tuple[str, str] | None:
        """(mode, blob id) of a local file or link, None when it is neither."""
        seen_at = time.time()  # before the lstat: a later change is never hidden
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            return None
        mode = mode_of(st)
        if mode not in (MODE_FILE, MODE_EXEC, MODE_LINK):
            return None
        known = self._known.get(rel)
        if (
            known is not None
            and known[0] == stat_key(st)
            and known[1] == mode
            and known[3] - st.st_mtime > racy_window(st)
        ):
            return mode, known[2]
        try:
            if mode == MODE_LINK:
                data = os.fsencode(os.readlink(name, dir_fd=fd))
            else:
                with open(
                    os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd), "rb"
                ) as f:
                    data = f.read()
        except FileNotFoundError:
            return None
        self.stats["hashed_local"] += 1
        blob = object_id("blob", data)
        assert mode is not None
        self._known[rel] = (stat_key(st), mode, blob, seen_at)
        return mode, blob

    # -- full passes ---------------------------------------------------------------------------

    def sync(self) -> list[str]:
        """Compare the whole sandbox copy with the local folder (the sandbox's scan, with its stat
        cache) and pull only what differs; delete what the sandbox lacks. Returns (and tells)
        the paths changed locally."""
        with self._passes:
            self._own_pass()
            try:
                return self._sync()
            finally:
                self._forget_parent()

    def _sync(self) -> list[str]:
        self._want_full = False
        remote, sizes, problems = self._scan()
        local = self._local_tree()
        changed: list[str] = []
        # What the sandbox lacks: outermost first, so a gone folder goes whole.
        gone_dirs: list[str] = []
        for rel in sorted(local, key=lambda p: (p.count("/"), p)):
            if rel in remote or _under_any(rel, problems):
                continue
            if _under_any(rel, gone_dirs):
                continue
            if local[rel][0] == MODE_TREE:
                gone_dirs.append(rel)
            if self._apply(rel, None, None):
                changed.append(rel)
        wanted: list[str] = []
        for rel, (mode, blob) in remote.items():
            here = local.get(rel)
            if mode == MODE_TREE:
                if here is None or here[0] != MODE_TREE:
                    wanted.append(rel)
            elif here is None or here != (mode, blob):
                wanted.append(rel)
        changed += self._pull(wanted, sizes)
        self._tell(changed)
        return changed

    def _scan(self) -> tuple[dict[str, tuple[str, str | None]], dict[str, int], list[str]]:
        stream = self._open(self.scan_argv(), "start a scan")
        remote: dict[str, tuple[str, str | None]] = {}
        sizes: dict[str, int] = {}
        problems: list[str] = []
        done = False
        try:
            for line in self._guarded(stream, "read the scan"):
                message = _parse(line)
                if message is None:
                    continue
                if "error" in message:
                    raise RemoteUnreadable(
                        f"cannot scan the workspace in the sandbox: {message['error']}"
                    )
                if message.get("done") is True:
                    done = True
                    # What the sandbox's scan had to hash (its stat cache vouched for the rest).
                    self.stats["remote_files"] = int(message.get("files") or 0)
                    self.stats["remote_hashed"] = int(message.get("hashed") or 0)
                    break
                path = message.get("path")
                if not isinstance(path, str):
                    continue
                try:
                    safe_parts(path, self.exclude)
                except _Refused as exc:
                    self._problem(str(exc))
                    continue
                if "problem" in message:
                    problems.append(path)
                    self._problem(f"{path} in the sandbox: {message['problem']}; left as it was")
                    continue
                mode = message.get("mode")
                if mode == MODE_TREE:
                    remote[path] = (MODE_TREE, None)
                elif mode in (MODE_FILE, MODE_EXEC, MODE_LINK) and isinstance(
                    message.get("id"), str
                ):
                    remote[path] = (mode, message["id"])
                    size = message.get("size")
                    if isinstance(size, int):
                        sizes[path] = size
        finally:
            self._close(stream)
        if not done:
            # Half a list must never delete the other half.
            raise RemoteUnreadable(
                "the scan of the workspace in the sandbox ended before it finished; "
                "nothing was deleted"
            )
        return remote, sizes, problems

    def _local_tree(
        self, under: str = "", *, ids: bool = True
    ) -> dict[str, tuple[str, str | None]]:
        """Every local path (under a folder, when given; excluded names left out) with its mode
        and, with `ids`, its blob id (None for a folder), hashing only files the mirror has not
        seen since their last change."""
        out: dict[str, tuple[str, str | None]] = {}
        try:
            if under:
                parts = safe_parts(under, self.exclude)
                parent = self._open_parent(parts, create=False)
                if parent is None:
                    return out
                try:
                    top = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
                finally:
                    os.close(parent)
            else:
                top = os.open(self.local_root, _DIR_FLAGS)
        except FileNotFoundError:
            if not under:
                self.local_root.mkdir(parents=True, exist_ok=True)
            return out
        except (_Refused, OSError):
            return out
        stack: list[tuple[str, int]] = [(under, top)]
        while stack:
            folder, fd = stack.pop()
            try:
                for name in sorted(os.listdir(fd)):
                    if name in self.exclude:
                        continue
                    rel = f"{folder}/{name}" if folder else name
                    try:
                        st = os.lstat(name, dir_fd=fd)
                    except FileNotFoundError:
                        continue
                    if statmod.S_ISDIR(st.st_mode):
                        out[rel] = (MODE_TREE, None)
                        try:
                            stack.append((rel, os.open(name, _DIR_FLAGS, dir_fd=fd)))
                        except OSError:
                            continue
                        continue
                    got = self._local_id(fd, name, rel) if ids else (mode_of(st) or "", None)
                    # A socket or a fifo is never the sandbox's: "other" gets it replaced.
                    out[rel] = got if got is not None and got[0] else ("other", None)
            finally:
                os.close(fd)
        return out

    # -- telling -------------------------------------------------------------------------------

    def _tell(self, changed: list[str]) -> None:
        if not changed or self._on_changed is None:
            return
        try:
            self._on_changed(changed)
        except Exception:
            log.exception("on_changed failed")

    def _problem(self, message: str) -> None:
        self.last_problem = message
        log.warning("%s", message)
        if self._on_problem is not None:
            try:
                self._on_problem(message)
            except Exception:
                log.exception("on_problem failed")


def _unreadable(what: str, exc: BaseException) -> RemoteUnreadable:
    return RemoteUnreadable(f"cannot {what} of the workspace in the sandbox: {_one_line(exc)}")


def _chunks(paths: list[str], sizes: dict[str, int]) -> Iterator[list[str]]:
    """The paths in reads of at most _PULL_BATCH paths and about _PULL_BYTES bytes (a larger
    file is read alone), so a full pass of big files never holds them all at once."""
    chunk: list[str] = []
    held = 0
    for rel in paths:
        size = sizes.get(rel, 0)
        if chunk and (len(chunk) >= _PULL_BATCH or held + size > _PULL_BYTES):
            yield chunk
            chunk, held = [], 0
        chunk.append(rel)
        held += size
    if chunk:
        yield chunk


def _parse(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line:
        return None
    try:
        message = json.loads(line)
    except ValueError:
        log.debug("not a line of the workspace helper: %r", line[:200])
        return None
    return message if isinstance(message, dict) else None


def _under_any(rel: str, folders: list[str]) -> bool:
    return any(rel == f or rel.startswith(f + "/") for f in folders)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


__all__ = [
    "HELPER_IN_SANDBOX",
    "HELPER_SCRIPT",
    "SCAN_CACHE_IN_SANDBOX",
    "TAR_READ_ARGV",
    "Entry",
    "LineStream",
    "RemoteUnreadable",
    "SandboxFiles",
    "WorkspaceMirror",
    "entries_from_tar",
    "safe_parts",
]
