"""The in-sandbox workspace watcher (resources/sandbox/workspace-watch.py), run on the host against
temporary folders: the batches it reports, its rescans, its exits, and its scan with the stat
cache and the racy rule."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import importlib.util
import inspect
import json
import os
import queue
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.launch import resource_path

HELPER = resource_path("sandbox", "workspace-watch.py")


def _load_helper():
    spec = importlib.util.spec_from_file_location("workspace_watch", HELPER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ww = _load_helper()


class Watch:
    """The helper's `watch` in a child process, its lines read on a thread."""

    def __init__(self, root: Path, *args: str, quiet: float = 0.25, max_interval: float = 3.0):
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPER), "watch", str(root), "--quiet", str(quiet)]
            + ["--max-interval", str(max_interval), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.messages: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.messages.put((time.monotonic(), json.loads(line)))
        self.messages.put((time.monotonic(), None))

    def next(self, timeout: float = 10.0) -> dict:
        _, message = self.messages.get(timeout=timeout)
        return message

    def changed_until(self, wanted: set[str], timeout: float = 10.0) -> set[str]:
        """Every path reported until all of `wanted` were (batches joined)."""
        seen: set[str] = set()
        deadline = time.monotonic() + timeout
        while not wanted <= seen:
            message = self.next(max(0.01, deadline - time.monotonic()))
            assert message is not None, "the watcher ended"
            seen |= set(message.get("changed", []))
        return seen

    def quiet_for(self, seconds: float) -> list[dict]:
        out = []
        deadline = time.monotonic() + seconds
        while True:
            try:
                out.append(self.next(max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def watching(root: Path):
    started: list[Watch] = []

    def start(*args: str, **kwargs) -> Watch:
        w = Watch(root, *args, **kwargs)
        started.append(w)
        assert w.next() == {"rescan": "start"}
        return w

    yield start
    for w in started:
        w.close()


# -- the same numbers as the local recorder ------------------------------------------------------


def test_the_event_mask_is_the_local_recorders_filter():
    from watchdog.observers.inotify import InotifyEmitter

    from core.watch import WATCHED_EVENTS

    fake = SimpleNamespace(
        _event_filter=set(WATCHED_EVENTS), watch=SimpleNamespace(is_recursive=True)
    )
    mask = int(InotifyEmitter.get_event_mask_from_filter(fake))
    assert mask == ww.EVENT_MASK
    assert not ww.EVENT_MASK & 0x20  # IN_OPEN
    assert not ww.EVENT_MASK & 0x01  # IN_ACCESS


def test_the_timing_and_racy_windows_are_the_recorders():
    from core.sandbox import mirror
    from core.vault import tree_index
    from core.watch import Recorder

    defaults = inspect.signature(Recorder.__init__).parameters
    assert ww.QUIET_PERIOD == mirror.QUIET_PERIOD == defaults["quiet_period"].default
    assert ww.MAX_INTERVAL == mirror.MAX_INTERVAL == defaults["max_interval"].default
    assert (ww.RACY_SECONDS, ww.RACY_SECONDS_FINE) == (
        tree_index.RACY_SECONDS,
        tree_index.RACY_SECONDS_FINE,
    )


# -- watch ---------------------------------------------------------------------------------------


def test_a_file_created_modified_renamed_and_deleted_is_reported(root, watching):
    w = watching()
    (root / "a.txt").write_text("one")
    assert "a.txt" in w.changed_until({"a.txt"})
    with open(root / "a.txt", "a") as f:
        f.write("two")
    assert w.changed_until({"a.txt"})
    os.rename(root / "a.txt", root / "b.txt")
    assert {"a.txt", "b.txt"} <= w.changed_until({"a.txt", "b.txt"})
    os.chmod(root / "b.txt", 0o755)
    assert w.changed_until({"b.txt"})
    os.unlink(root / "b.txt")
    assert w.changed_until({"b.txt"})


def test_a_new_folder_is_watched_and_its_files_are_listed_with_it(root, watching):
    w = watching()
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "e" / "f.txt").write_text("x")
    messages = []
    while not {"d", "d/e", "d/e/f.txt"} <= {p for m in messages for p in m["changed"]}:
        messages.append(w.next())
    # The new folder is named complete: the batch lists everything in it.
    assert any("d" in m.get("complete", []) for m in messages), messages
    # Files made later in the new folders are seen through their own watches.
    (root / "d" / "e" / "g.txt").write_text("y")
    assert w.changed_until({"d/e/g.txt"})


def test_a_renamed_folder_reports_both_places_and_is_watched_at_the_new_one(root, watching):
    (root / "old" / "sub").mkdir(parents=True)
    (root / "old" / "sub" / "f.txt").write_text("x")
    w = watching()
    os.rename(root / "old", root / "new")
    seen = w.changed_until({"old", "new", "new/sub", "new/sub/f.txt"})
    assert not any(p.startswith("old/") for p in seen)
    (root / "new" / "sub" / "g.txt").write_text("y")
    assert "new/sub/g.txt" in w.changed_until({"new/sub/g.txt"})
    # A folder moved in from outside the root arrives with its files.
    outside = root.parent / "outside"
    (outside / "in").mkdir(parents=True)
    (outside / "in" / "h.txt").write_text("z")
    os.rename(outside, root / "moved")
    w.changed_until({"moved", "moved/in", "moved/in/h.txt"})
    # One moved out is forgotten: what happens to it afterwards is not reported.
    os.rename(root / "moved", root.parent / "gone")
    w.changed_until({"moved"})
    (root.parent / "gone" / "in" / "later.txt").write_text("q")
    assert all(
        not m.get("changed") or "moved/in/later.txt" not in m["changed"] for m in w.quiet_for(0.6)
    )


def test_excluded_names_are_never_reported(root, watching):
    (root / ".git").mkdir()
    w = watching("--exclude", ".git")
    (root / ".git" / "index").write_text("x")
    (root / "sub" / ".git").mkdir(parents=True)
    (root / "sub" / ".git" / "HEAD").write_text("y")
    (root / "kept.txt").write_text("z")
    seen = w.changed_until({"kept.txt", "sub"})
    seen |= {p for m in w.quiet_for(0.5) for p in m.get("changed", [])}
    assert not any(".git" in p.split("/") for p in seen), seen


def test_a_burst_within_the_quiet_period_is_one_batch(root, watching):
    w = watching(quiet=1.0, max_interval=30.0)
    for i in range(30):
        (root / f"f{i}.txt").write_text(str(i))
    batches = [m for m in w.quiet_for(3.0) if m is not None]
    assert len(batches) == 1, batches
    assert set(batches[0]["changed"]) == {f"f{i}.txt" for i in range(30)}


def test_constant_writes_still_give_a_batch_every_maximum_interval(root, watching):
    w = watching(quiet=0.3, max_interval=0.8)
    stop = time.monotonic() + 3.0
    i = 0
    while time.monotonic() < stop:  # never quiet for 0.3 s
        (root / "busy.txt").write_text(str(i))
        i += 1
        time.sleep(0.05)
    batches = [m for m in w.quiet_for(0.6) if m is not None]
    # Three seconds of writes with a batch due every 0.8 s at most: several, not one at the end.
    assert len(batches) >= 3, batches
    assert all(m == {"changed": ["busy.txt"]} for m in batches)


@contextlib.contextmanager
def helper_process(root: Path, *args: str):
    """The helper's `watch` with all three pipes, killed and reaped afterwards."""
    proc = subprocess.Popen(
        [sys.executable, str(HELPER), "watch", str(root), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert json.loads(proc.stdout.readline()) == {"rescan": "start"}
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            pipe.close()


def test_it_exits_cleanly_when_nobody_reads_any_more(root):
    with helper_process(root) as proc:
        proc.stdout.close()  # no write is needed for it to notice
        assert proc.wait(10) == 0
        assert proc.stderr.read() == b""


def test_with_exit_with_stdin_it_ends_when_stdin_does(root):
    with helper_process(root, "--exit-with-stdin") as proc:
        proc.stdin.write(b"anything sent is ignored\n")
        proc.stdin.flush()
        (root / "f").write_text("x")
        assert json.loads(proc.stdout.readline()) == {"changed": ["f"]}
        proc.stdin.close()
        assert proc.wait(10) == 0
        assert proc.stderr.read() == b""


def test_it_exits_cleanly_on_sigterm(root):
    w = Watch(root)
    assert w.next() == {"rescan": "start"}
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(10) == 0
    assert w.proc.stderr.read() == b""
    w.close()


def test_a_root_that_is_not_a_folder_is_one_error_line(tmp_path):
    w = Watch(tmp_path / "missing")
    message = w.next()
    assert "error" in message and "missing" in message["error"]
    assert w.proc.wait(10) == 1
    w.close()


def test_a_deleted_root_ends_the_watcher_with_an_error(root, watching):
    w = watching()
    root.rmdir()
    message = w.next()
    assert "error" in message
    assert w.proc.wait(10) == 1


# -- rescans ------------------------------------------------------------------------------------


def test_a_real_queue_overflow_gives_a_rescan_and_watching_goes_on(root, watching):
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    w = watching(quiet=0.1)
    w.proc.send_signal(signal.SIGSTOP)  # nobody reads: the kernel's queue fills up
    try:
        a = os.open(root / "a", os.O_WRONLY | os.O_CREAT)
        b = os.open(root / "b", os.O_WRONLY | os.O_CREAT)
        for _ in range(limit // 2 + 1000):  # alternating, so the kernel cannot merge them
            os.write(a, b"x")
            os.write(b, b"y")
        os.close(a)
        os.close(b)
    finally:
        w.proc.send_signal(signal.SIGCONT)
    messages = [w.next()]
    while "rescan" not in messages[-1]:
        messages.append(w.next())
    assert messages[-1] == {"rescan": "overflow"}
    (root / "after.txt").write_text("still watched")
    assert "after.txt" in w.changed_until({"after.txt"})


# The next ones drive the watcher in-process: what the kernel does not let a test provoke.


def _event(wd: int, mask: int, name: bytes = b"") -> bytes:
    padded = name + b"\0" * (16 - len(name) % 16) if name else b""
    return struct.pack("iIII", wd, mask, 0, len(padded)) + padded


def test_a_queue_overflow_asks_for_a_rescan_and_rewatches_new_folders(root, capsys):
    watcher = ww.Watcher(str(root), [], 0.25, 3.0)
    watcher.add_tree("", report=False)
    (root / "made-while-overflowing").mkdir()  # its creation event was lost
    watcher.handle(_event(watcher.wds[""], 0x20, b"x") + _event(-1, ww.IN_Q_OVERFLOW))
    assert watcher.rescan == "overflow" and not watcher.pending
    watcher.flush()
    assert json.loads(capsys.readouterr().out) == {"rescan": "overflow"}
    assert "made-while-overflowing" in watcher.wds
    os.close(watcher.fd)


def test_a_folder_that_cannot_be_watched_asks_for_rescans(root, capsys, monkeypatch):
    (root / "a").mkdir()
    (root / "b").mkdir()
    watcher = ww.Watcher(str(root), [], 0.25, 3.0)
    real = watcher.libc

    class Libc:
        def inotify_add_watch(self, fd, path, mask):
            if path.endswith(b"/b"):
                ctypes.set_errno(errno.ENOSPC)
                return -1
            return real.inotify_add_watch(fd, path, mask)

        def inotify_rm_watch(self, fd, wd):
            return real.inotify_rm_watch(fd, wd)

    watcher.libc = Libc()
    watcher.add_tree("", report=False)
    assert "a" in watcher.wds and "b" not in watcher.wds
    assert watcher.rescan.startswith("unwatched: b (the inotify watch limit")
    watcher.flush()
    assert json.loads(capsys.readouterr().out)["rescan"].startswith("unwatched: b")
    # While b is unwatched, full passes keep being asked for.
    assert watcher.next_unwatched_rescan is not None
    os.close(watcher.fd)


def test_too_many_changed_paths_become_one_rescan(root, capsys, monkeypatch):
    monkeypatch.setattr(ww, "MAX_PENDING", 5)
    watcher = ww.Watcher(str(root), [], 0.25, 3.0)
    watcher.add_tree("", report=False)
    wd = watcher.wds[""]
    watcher.handle(b"".join(_event(wd, ww.IN_CREATE, b"f%d" % i) for i in range(10)))
    assert watcher.rescan == "many changes" and not watcher.pending
    os.close(watcher.fd)


# -- scan ----------------------------------------------------------------------------------------


def _scan(root: Path, cache: Path, *args: str) -> tuple[dict[str, dict], dict]:
    proc = subprocess.run(
        [sys.executable, str(HELPER), "scan", str(root), "--cache", str(cache), *args],
        capture_output=True,
        check=True,
    )
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert lines[-1].get("done") is True
    return {m["path"]: m for m in lines[:-1]}, lines[-1]


def _git_id(path: Path) -> str:
    return subprocess.run(
        ["git", "hash-object", "--no-filters", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _age(*paths: Path, seconds: float = 60.0) -> None:
    for p in paths:
        t = time.time() - seconds
        os.utime(p, (t, t), follow_symlinks=False)


def test_scan_lists_every_entry_with_gits_mode_and_blob_id(root, tmp_path):
    (root / "plain.txt").write_bytes(b"hello\n")
    (root / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "sub" / "deeper" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    (root / "empty").mkdir()
    os.symlink("sub/deeper", root / "link")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: x\n")
    entries, done = _scan(root, tmp_path / "state" / "cache", "--exclude", ".git")
    assert set(entries) == {
        "plain.txt",
        "run.sh",
        "sub",
        "sub/deeper",
        "sub/deeper/big.bin",
        "empty",
        "link",
    }
    assert entries["plain.txt"]["mode"] == "100644"
    assert entries["run.sh"]["mode"] == "100755"
    assert entries["link"]["mode"] == "120000"
    assert entries["sub"] == {"path": "sub", "mode": "40000"}
    for rel in ("plain.txt", "run.sh", "sub/deeper/big.bin"):
        assert entries[rel]["id"] == _git_id(root / rel)
        assert entries[rel]["size"] == (root / rel).stat().st_size
    link_id = (
        subprocess.run(
            ["git", "hash-object", "--stdin"], input=b"sub/deeper", capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    assert entries["link"]["id"] == link_id
    assert done == {"done": True, "files": 4, "hashed": 4}


def test_a_second_scan_hashes_only_files_whose_stat_data_changed(root, tmp_path):
    for i in range(20):
        (root / f"f{i}.txt").write_text(f"file {i}\n")
    _age(*root.iterdir())
    cache = tmp_path / "state" / "cache"
    _, first = _scan(root, cache)
    assert first["hashed"] == 20
    _, second = _scan(root, cache)
    assert second["hashed"] == 0
    (root / "f3.txt").write_text("changed, longer\n")
    _age(root / "f3.txt")
    (root / "f4.txt").unlink()
    (root / "new.txt").write_text("new\n")
    entries, third = _scan(root, cache)
    assert third == {"done": True, "files": 20, "hashed": 2}
    assert entries["f3.txt"]["id"] == _git_id(root / "f3.txt")
    assert "f4.txt" not in entries


def test_a_stat_taken_within_the_racy_window_is_not_trusted(root, tmp_path):
    cache = tmp_path / "cache"
    fresh, old = root / "fresh.txt", root / "old.txt"
    fresh.write_text("a\n")
    old.write_text("b\n")
    _age(old)
    # An mtime after the look (a clock step, or a write in the same tick) is always racy.
    ahead = time.time_ns() + 5_000_000_123
    os.utime(fresh, ns=(ahead, ahead))
    _scan(root, cache)
    _, again = _scan(root, cache)
    assert again["hashed"] == 1  # fresh.txt again; old.txt trusted
    _, still = _scan(root, cache)
    assert still["hashed"] == 1
    os.utime(fresh, ns=(ahead - 60_000_000_000, ahead - 60_000_000_000))
    _scan(root, cache)
    _, settled = _scan(root, cache)
    assert settled["hashed"] == 0


def test_whole_second_file_times_get_the_long_window(root):
    f = root / "f"
    f.write_text("x")
    os.utime(f, ns=(1_700_000_000_000_000_000,) * 2)
    assert ww.racy_window(os.stat(f)) == ww.RACY_SECONDS
    os.utime(f, ns=(1_700_000_000_000_000_001,) * 2)
    assert ww.racy_window(os.stat(f)) == ww.RACY_SECONDS_FINE


def test_a_same_size_rewrite_in_the_same_tick_is_still_seen(root, tmp_path):
    cache = tmp_path / "cache"
    f = root / "f.txt"
    f.write_text("aaaa\n")
    entries, _ = _scan(root, cache)
    first_ns = f.stat().st_mtime_ns
    f.write_text("bbbb\n")
    os.utime(f, ns=(first_ns, first_ns))  # same size, same mtime
    entries, _ = _scan(root, cache)
    assert entries["f.txt"]["id"] == _git_id(f)


def test_a_damaged_cache_costs_a_rehash_never_a_wrong_id(root, tmp_path):
    cache = tmp_path / "cache"
    (root / "f.txt").write_text("x\n")
    _age(root / "f.txt")
    _scan(root, cache)
    for damage in (b"garbage", ww.CACHE_MAGIC.encode() + b'\n{"root": 1}', b""):
        cache.write_bytes(damage)
        entries, done = _scan(root, cache)
        assert done["hashed"] == 1 and entries["f.txt"]["id"] == _git_id(root / "f.txt")
    # A cache of another root is not used either.
    other = tmp_path / "other"
    other.mkdir()
    _scan(other, cache)
    _, done = _scan(root, cache)
    assert done["hashed"] == 1


def test_a_cache_inside_the_root_is_refused_unless_excluded(root):
    proc = subprocess.run(
        [sys.executable, str(HELPER), "scan", str(root), "--cache", str(root / "c")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "outside" in json.loads(proc.stdout)["error"]
    assert not (root / "c").exists()
    # Under an excluded name it is never listed, so it may live in the workspace's volume.
    (root / ".git").mkdir()
    (root / "f").write_text("x")
    entries, done = _scan(root, root / ".git" / "cairn-scan", "--exclude", ".git")
    assert set(entries) == {"f"} and (root / ".git" / "cairn-scan").exists()


def test_an_unreadable_file_or_folder_is_a_problem_line(tmp_path):
    # As a user who cannot read them (root reads everything: the scan then runs as nobody).
    top = Path(tempfile.mkdtemp(prefix="cairn-scan-"))
    try:
        os.chmod(top, 0o755)
        root = top / "root"
        (root / "closed").mkdir(parents=True)
        (root / "closed" / "inside").write_text("x")
        (root / "secret").write_text("x")
        (root / "open.txt").write_text("y")
        for p in (root / "closed", root / "secret"):
            p.chmod(0)
        os.chmod(root, 0o755)
        cache = top / "cache"
        argv = [sys.executable, str(HELPER), "scan", str(root), "--cache", str(cache)]
        if os.geteuid() == 0:
            os.chown(top, 65534, 65534)
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
        proc = subprocess.run(argv, capture_output=True, check=True)
        lines = [json.loads(x) for x in proc.stdout.splitlines()]
        entries = {m["path"]: m for m in lines if "path" in m}
        assert entries["secret"]["problem"] == "Permission denied"
        assert entries["closed"]["problem"] == "Permission denied"
        assert entries["open.txt"]["mode"] == "100644"
        assert lines[-1] == {"done": True, "files": 1, "hashed": 1}
    finally:
        for p in (top / "root" / "closed", top / "root" / "secret"):
            with contextlib.suppress(OSError):
                p.chmod(0o700)
        shutil.rmtree(top, ignore_errors=True)
