"""Named locks between Cairn processes (the GUI, `cairnctl`, a crashed one): flock on files
under the data folder's `locks/`, released by the kernel when a holder dies.

Owns acquiring and releasing; callers choose names and what a held lock means to a user.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import Conflict


class FileLock:
    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def holder_pid(self) -> int | None:
        try:
            return int(self.path.read_text().strip() or 0) or None
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def flock_holder_pid(pid_file: Path) -> int | None:
    """The pid written in a pid file whose owner holds an flock on it for as long as it runs, or
    None when nobody holds it. Unlike a bare pid, the lock cannot be fooled by a stale file, a
    recycled pid or a zombie."""
    try:
        fd = os.open(pid_file, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        for _ in range(50):  # the lock is taken a moment before the pid is written
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            if text.isdigit():
                return int(text)
            time.sleep(0.01)
        return None
    finally:
        os.close(fd)


def lock_path(locks_root: Path, kind: str, key: str) -> Path:
    digest = hashlib.sha1(key.encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return locks_root / f"{kind}-{digest}.lock"


@contextmanager
def held(
    locks_root: Path, kind: str, key: str, busy_message: str, *, wait: float = 0.0
) -> Iterator[FileLock]:
    """Hold the named lock for the block.

    With `wait` 0 a lock that is taken raises Conflict(busy_message) at once. With `wait` > 0 the
    caller waits its turn for up to that many seconds, then gets Conflict(busy_message) naming
    the process that still holds it and how long it waited.
    """
    lock = FileLock(lock_path(locks_root, kind, key))
    if not _acquire(lock, wait):
        pid = lock.holder_pid()
        holder = f"process {pid}" if pid else "another process"
        waited = f"; still held after {_seconds(wait)} of waiting" if wait > 0 else ""
        raise Conflict(f"{busy_message} ({holder}{waited})")
    try:
        yield lock
    finally:
        lock.release()


def _acquire(lock: FileLock, wait: float) -> bool:
    """Take the lock, polling until `wait` seconds have passed (the kernel's flock has no timeout,
    and a blocking flock could not be given one without signals)."""
    deadline = time.monotonic() + max(0.0, wait)
    pause = _FIRST_POLL_S
    while not lock.try_acquire():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, _LAST_POLL_S)
    return True


_FIRST_POLL_S = 0.01
_LAST_POLL_S = 0.25


def _seconds(value: float) -> str:
    return f"{value:g} s"
