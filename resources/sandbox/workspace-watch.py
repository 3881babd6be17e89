#!/usr/bin/env python3
"""Workspace watcher, run inside a sandbox whose workspace lives on another machine than Cairn.

    workspace-watch.py watch ROOT [--exclude NAME]... [--quiet SECONDS] [--max-interval SECONDS]
                             [--exit-with-stdin]
    workspace-watch.py scan ROOT --cache FILE [--exclude NAME]...

`watch` watches ROOT and every folder below it with inotify (the local recorder's event set:
created, modified, attributes, close-write, deleted, moved from/to; never open or access events,
which overflow the kernel's queue on large trees) and writes one JSON object per line on stdout:

    {"rescan": "start"}        the watches are in place: do a full pass now (also "overflow",
                               when the kernel's queue overflowed, and "unwatched: PATH (WHY)",
                               when a folder could not be watched: then again every few seconds)
    {"changed": [PATH, ...],   paths (relative, POSIX) created, modified or deleted: the reader
     "complete": [FOLDER, ...]} decides which by looking. A folder created or moved in is listed
                               with everything in it, and named in "complete": whatever the
                               reader holds under it that the batch does not name is stale
    {"error": "WHY"}           the last line before exiting 1 (ROOT gone, no inotify)

A batch is written once nothing happened for the quiet period, and at most every maximum
interval under constant writes (Cairn passes its recorder's numbers). It exits 0 when stdout is
closed, on SIGTERM, and with --exit-with-stdin when stdin ends: a Docker exec whose connection
closes keeps its program running with stdout going nowhere, but closes the program's stdin.

`scan` prints one JSON object per entry of ROOT, then {"done": true, "files": N, "hashed": K}:

    {"path": P, "mode": "100644" | "100755" | "120000", "size": N, "id": BLOB}
    {"path": P, "mode": "40000"}                  a folder
    {"path": P, "problem": "permission denied"}   left as the reader had it

BLOB is git's blob id (sha1 of "blob SIZE\\0" and the bytes; a link's target for 120000). FILE
(outside ROOT, or under an excluded name such as ROOT/.git) keeps each file's stat data and id,
so the next scan hashes only files whose stat data changed; a stat taken within the file time
granularity of the file's mtime is never trusted (git's racy rule), so a change in the same
tick is never hidden.

NAME (any number) is left out wherever it appears as a path component (`.git`). Python 3.7 or
later, standard library only; Linux.
"""

# ruff: noqa: UP031 - %-formatting, like supervisor.py: it runs on the image's python3

import argparse
import contextlib
import ctypes
import errno
import hashlib
import json
import os
import select
import signal
import stat
import struct
import sys
import time

QUIET_PERIOD = 0.25  # the defaults of Cairn's recorder (core/watch.py); the caller passes its own
MAX_INTERVAL = 3.0
RACY_SECONDS = 2.0  # core/vault/tree_index.py's windows: whole-second and finer file times
RACY_SECONDS_FINE = 0.1
UNWATCHED_RESCAN_SECONDS = 15.0  # how often to ask for a full pass while a folder is unwatched
MAX_PENDING = 20000  # more changed paths than this in one batch: a full pass is cheaper
CACHE_MAGIC = "cairn-workspace-scan 1"

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

# The local recorder's filter turned into a mask the way watchdog does it (its InotifyEmitter):
# created, modified (and attributes), deleted, moved, close-write, and the folder's own deletion.
EVENT_MASK = (
    IN_DELETE_SELF
    | IN_CREATE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_MODIFY
    | IN_ATTRIB
    | IN_DELETE
    | IN_CLOSE_WRITE
)
WATCH_FLAGS = IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK
_EVENT_HEAD = struct.Struct("iIII")  # wd, mask, cookie, len


class Fatal(Exception):
    pass


class StdoutClosed(Exception):
    pass


def emit(obj, flush=True):
    try:
        sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
        if flush:
            sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError) as exc:
        raise StdoutClosed() from exc


quote = json.encoder.encode_basestring_ascii  # a JSON string (the C encoder, when there is one)


def write_line(text):
    """One line of the scan's output, written without a flush (the scan's lines are many)."""
    try:
        sys.stdout.write(text)
    except (BrokenPipeError, ValueError, OSError) as exc:
        raise StdoutClosed() from exc


def join(folder, name):
    return folder + "/" + name if folder else name


def excluded(rel, exclude):
    return bool(exclude) and any(part in exclude for part in rel.split("/"))


# -- watch ---------------------------------------------------------------------------------------


class Watcher:
    def __init__(self, root, exclude, quiet, max_interval, exit_with_stdin=False):
        self.root = os.path.abspath(root)
        self.exclude = frozenset(exclude)
        self.quiet = quiet
        self.max_interval = max_interval
        self.exit_with_stdin = exit_with_stdin
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise Fatal("cannot start inotify: %s" % os.strerror(err))
        self.fd = fd
        self.paths = {}  # wd -> folder (relative; "" is ROOT)
        self.wds = {}  # folder -> wd
        self.pending = set()
        self.complete = set()  # new folders whose every path is in `pending`
        self.rescan = None  # why a full pass is wanted, or None
        self.first = None  # when the first unreported change came
        self.last = 0.0  # when the latest one came
        self.unwatched = {}  # folder -> why it could not be watched
        self.next_unwatched_rescan = None

    # Watches --------------------------------------------------------------------------------

    def add_watch(self, rel):
        """Watch one folder; False when it is not there (any more) or cannot be watched."""
        full = os.fsencode(join(self.root, rel) if rel else self.root)
        wd = self.libc.inotify_add_watch(self.fd, full, EVENT_MASK | WATCH_FLAGS)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return False
            why = os.strerror(err)
            if err == errno.ENOSPC:
                why = "the inotify watch limit is reached (fs.inotify.max_user_watches)"
            self.unwatched[rel] = why
            self.want_rescan("unwatched: %s (%s)" % (rel or ".", why))
            return False
        old = self.paths.get(wd)
        if old is not None and old != rel:
            self.wds.pop(old, None)
        self.paths[wd] = rel
        self.wds[rel] = wd
        self.unwatched.pop(rel, None)
        return True

    def add_tree(self, rel, report):
        """Watch a folder and every folder below it; with `report`, every path in it is a change
        (it was created or moved in, and files made before its watch existed were not seen).
        True when every folder in it was watched and listed."""
        stack = [rel]
        whole = True
        while stack:
            folder = stack.pop()
            if not self.add_watch(folder):
                whole = False
                continue
            try:
                with os.scandir(join(self.root, folder) if folder else self.root) as it:
                    entries = list(it)
            except OSError:
                whole = False
                continue
            for entry in entries:
                name = entry.name
                if name in self.exclude:
                    continue
                child = join(folder, name)
                if report:
                    self.note(child)
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(child)
                except OSError:
                    whole = False
        return whole

    def drop_tree(self, rel):
        """Forget the watches of a folder that moved away (its new place gets its own)."""
        prefix = rel + "/"
        for folder in [f for f in self.wds if f == rel or f.startswith(prefix)]:
            wd = self.wds.pop(folder)
            self.paths.pop(wd, None)
            self.libc.inotify_rm_watch(self.fd, wd)
        for folder in [f for f in self.unwatched if f == rel or f.startswith(prefix)]:
            del self.unwatched[folder]

    # Changes --------------------------------------------------------------------------------

    def touch(self):
        now = time.monotonic()
        if self.first is None:
            self.first = now
        self.last = now

    def note(self, rel):
        if self.rescan is None:
            self.pending.add(rel)
            if len(self.pending) > MAX_PENDING:
                self.want_rescan("many changes")
        self.touch()

    def want_rescan(self, why):
        if self.rescan is None or self.rescan == "many changes":
            self.rescan = why
        self.pending.clear()
        self.complete.clear()
        self.touch()

    def read_events(self):
        while True:
            try:
                data = os.read(self.fd, 256 * 1024)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not data:
                return
            self.handle(data)

    def handle(self, data):
        offset, size = 0, len(data)
        while offset + _EVENT_HEAD.size <= size:
            wd, mask, _cookie, length = _EVENT_HEAD.unpack_from(data, offset)
            raw = data[offset + _EVENT_HEAD.size : offset + _EVENT_HEAD.size + length]
            offset += _EVENT_HEAD.size + length
            name = os.fsdecode(raw.split(b"\0", 1)[0])
            if mask & IN_Q_OVERFLOW:
                self.want_rescan("overflow")
                continue
            folder = self.paths.get(wd)
            if folder is None:
                continue
            if mask & IN_IGNORED or mask & IN_UNMOUNT:
                self.paths.pop(wd, None)
                if self.wds.get(folder) == wd:
                    del self.wds[folder]
                if folder == "" and not os.path.isdir(self.root):
                    raise Fatal("%s is gone" % self.root)
                continue
            if not name:  # an event on the watched folder itself (its deletion)
                if folder == "":
                    if mask & IN_DELETE_SELF:
                        raise Fatal("%s was deleted" % self.root)
                    continue
                self.note(folder)
                continue
            if name in self.exclude:
                continue
            rel = join(folder, name)
            if mask & IN_ISDIR:
                if mask & IN_MOVED_FROM or mask & IN_DELETE:
                    self.drop_tree(rel)
                elif (
                    mask & (IN_CREATE | IN_MOVED_TO)
                    and self.add_tree(rel, report=True)
                    and self.rescan is None
                ):
                    self.complete.add(rel)
            self.note(rel)

    # The loop -------------------------------------------------------------------------------

    def due(self):
        if self.rescan is None and not self.pending:
            due = None
        else:
            first = self.first if self.first is not None else time.monotonic()
            due = min(self.last + self.quiet, first + self.max_interval)
        if self.unwatched and self.next_unwatched_rescan is not None:
            nxt = self.next_unwatched_rescan
            due = nxt if due is None else min(due, nxt)
        return due

    def flush(self):
        if self.rescan is not None:
            why, self.rescan = self.rescan, None
            self.pending.clear()
            self.first = None
            if why in ("overflow", "many changes") or why.startswith("unwatched"):
                # Events were lost: folders made meanwhile have no watch yet.
                self.add_tree("", report=False)
                self.rescan = None  # the walk may have asked again; this pass covers it
                self.pending.clear()
            self.complete.clear()
            emit({"rescan": why})
        elif self.pending:
            paths, self.pending = sorted(self.pending), set()
            complete, self.complete = sorted(self.complete), set()
            self.first = None
            emit({"changed": paths, "complete": complete} if complete else {"changed": paths})
        if self.unwatched:
            self.next_unwatched_rescan = time.monotonic() + UNWATCHED_RESCAN_SECONDS
        else:
            self.next_unwatched_rescan = None

    def stdin_open(self, fd, revents):
        """False once stdin has ended (what arrives on it is read and dropped)."""
        if revents & select.POLLIN:
            try:
                return bool(os.read(fd, 4096))
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
        return not revents & (select.POLLHUP | select.POLLERR | select.POLLNVAL)

    def run(self):
        if not os.path.isdir(self.root):
            raise Fatal("%s is not a folder" % self.root)
        self.add_tree("", report=False)
        if "" not in self.wds:
            raise Fatal("cannot watch %s: %s" % (self.root, self.unwatched.get("", "gone")))
        self.pending.clear()
        self.first = None
        why = self.rescan or "start"
        self.rescan = None
        emit({"rescan": why})
        if self.unwatched:
            self.next_unwatched_rescan = time.monotonic() + UNWATCHED_RESCAN_SECONDS
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        out = sys.stdout.fileno()
        poller.register(out, 0)  # only POLLERR/POLLHUP: the reader went away
        stdin = sys.stdin.fileno() if self.exit_with_stdin else -1
        if stdin >= 0:
            poller.register(stdin, select.POLLIN)
        while True:
            now = time.monotonic()
            nxt = self.next_unwatched_rescan
            if self.unwatched and nxt is not None and now >= nxt and self.rescan is None:
                # Changes below an unwatched folder are seen by full passes only.
                self.want_rescan("unwatched: %s" % ", ".join(sorted(self.unwatched)[:3]))
                self.first = self.last = now - self.quiet
            due = self.due()
            if due is not None and due <= now:
                self.flush()
                continue
            timeout = None if due is None else max(0, int((due - now) * 1000) + 1)
            for fd, revents in poller.poll(timeout):
                if fd == out and revents & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                    raise StdoutClosed()
                if fd == stdin and not self.stdin_open(stdin, revents):
                    raise StdoutClosed()
                if fd == self.fd:
                    self.read_events()


# -- scan ----------------------------------------------------------------------------------------


def racy_window(st):
    return RACY_SECONDS_FINE if st.st_mtime_ns % 1_000_000_000 else RACY_SECONDS


def git_mode(st):
    m = st.st_mode
    if stat.S_ISLNK(m):
        return "120000"
    if stat.S_ISREG(m):
        return "100755" if m & 0o100 else "100644"
    if stat.S_ISDIR(m):
        return "40000"
    return None


def blob_id_of_file(path, size):
    h = hashlib.sha1(b"blob %d\0" % size)
    seen = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1024 * 1024)
            if not chunk:
                break
            h.update(chunk)
            seen += len(chunk)
    if seen != size:
        # Written while we read: hash what we read; the stat data will not match next time.
        h = hashlib.sha1(b"blob %d\0" % seen)
        with open(path, "rb") as f:
            h.update(f.read(seen))
    return h.hexdigest(), seen


def load_cache(path, root):
    """The cache's entries, or None when the file is not a cache of ROOT (missing, damaged,
    another root's)."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.readline().rstrip("\n") != CACHE_MAGIC:
                return None
            doc = json.load(f)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("root") != root:
        return None
    entries = doc.get("entries")
    return entries if isinstance(entries, dict) else None


def save_cache(path, root, entries):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(CACHE_MAGIC + "\n")
            # dumps, not dump: dump streams through the pure-Python encoder (ten times slower).
            f.write(json.dumps({"root": root, "entries": entries}, separators=(",", ":")))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        sys.stderr.write("workspace-watch: cannot save the scan cache %s: %s\n" % (path, exc))


def scan(root, cache_path, exclude):
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise Fatal("%s is not a folder" % root)
    cache_path = os.path.abspath(cache_path)
    exclude = frozenset(exclude)
    inside = cache_path == root or cache_path.startswith(root.rstrip("/") + "/")
    if inside and not excluded(cache_path[len(root) :].strip("/"), exclude):
        # It would be listed (and watched) as a file of the workspace.
        raise Fatal(
            "the scan cache %s must be outside %s or under an excluded name" % (cache_path, root)
        )
    loaded = load_cache(cache_path, root)
    old = loaded or {}
    new = {}
    files = hashed = 0
    stack = [""]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(join(root, folder) if folder else root) as it:
                names = sorted(e.name for e in it)
        except FileNotFoundError:
            continue
        except OSError as exc:
            emit({"path": folder or ".", "problem": exc.strerror or str(exc)}, flush=False)
            continue
        subfolders = []
        for name in names:
            if name in exclude:
                continue
            rel = join(folder, name)
            full = join(root, rel)
            seen_at = time.time()  # before the lstat: a later change is never hidden
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue
            except OSError as exc:
                emit({"path": rel, "problem": exc.strerror or str(exc)}, flush=False)
                continue
            mode = git_mode(st)
            if mode is None:
                continue
            if mode == "40000":
                write_line('{"path":%s,"mode":"40000"}\n' % quote(rel))
                subfolders.append(rel)
                continue
            key = [st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, mode]
            rec = old.get(rel)
            blob = None
            if (
                isinstance(rec, list)
                and len(rec) == 7
                and rec[:5] == key
                and isinstance(rec[6], (int, float))
                and rec[6] - st.st_mtime > racy_window(st)
            ):
                blob, size, stamp = rec[5], st.st_size, rec[6]
            if blob is None:
                try:
                    if mode == "120000":
                        target = os.fsencode(os.readlink(full))
                        size = len(target)
                        blob = hashlib.sha1(b"blob %d\0" % size + target).hexdigest()
                    else:
                        blob, size = blob_id_of_file(full, st.st_size)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    emit({"path": rel, "problem": exc.strerror or str(exc)}, flush=False)
                    continue
                hashed += 1
                stamp = seen_at
            files += 1
            new[rel] = key + [blob, stamp]
            write_line(
                '{"path":%s,"mode":"%s","size":%d,"id":"%s"}\n' % (quote(rel), mode, size, blob)
            )
        stack.extend(reversed(subfolders))
    if loaded is None or new != loaded:  # an unchanged tree leaves the file as it was
        save_cache(cache_path, root, new)
    emit({"done": True, "files": files, "hashed": hashed})


# -- main ----------------------------------------------------------------------------------------


def _stop(signum, frame):
    raise SystemExit(0)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="workspace-watch.py")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch")
    w.add_argument("root")
    w.add_argument("--exclude", action="append", default=[])
    w.add_argument("--quiet", type=float, default=QUIET_PERIOD)
    w.add_argument("--max-interval", type=float, default=MAX_INTERVAL)
    w.add_argument("--exit-with-stdin", action="store_true")
    s = sub.add_parser("scan")
    s.add_argument("root")
    s.add_argument("--cache", required=True)
    s.add_argument("--exclude", action="append", default=[])
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        if args.command == "watch":
            Watcher(
                args.root, args.exclude, args.quiet, args.max_interval, args.exit_with_stdin
            ).run()
        else:
            scan(args.root, args.cache, args.exclude)
    except StdoutClosed:
        # Nobody reads any more: leave without a traceback, and without flushing into the void.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 0
    except Fatal as exc:
        sys.stderr.write("workspace-watch: %s\n" % exc)
        with contextlib.suppress(StdoutClosed):
            emit({"error": str(exc)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
