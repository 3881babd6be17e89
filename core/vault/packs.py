"""Storing many files of a folder as blobs at once: one pack instead of a loose object each.

Owns reading, hashing and compressing the files (large ones on threads) and writing what the
vault lacks into a new pack, which git indexes (verifying every object) before it joins the vault's
packs. It decides nothing about which files to store: the importer does.

A loose object costs a file of its own (created, written, renamed into its fan-out folder); for
the hundred thousand files of a big folder that is most of an import's time, where a pack is one
file written front to back. A few files are stored loose, as the recorder stores its edits.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat as statmod
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from core.errors import VaultError
from core.vault.objects import LARGE_FILE, ObjectStore, deflate, run_git

LOOSE_BELOW = 256  # fewer files than this are written as loose objects
TEMP_PREFIX = "tmp_pack_cairn-"  # a pack (and its index) being written: pid, a random part
# and a suffix that is not git's, so that nothing takes it for a pack before it is whole
THREADED_FROM = 1 << 20  # files this large and larger are read and compressed on threads
_LOOKUP = 4096  # new entries whose ids are looked up in the vault at once...
_PENDING_BYTES = 32 << 20  # ...or as many as hold this many bytes
_THREADS = min(4, os.cpu_count() or 2)
_KINDS = {"commit": 1, "tree": 2, "blob": 3}  # the pack's type numbers

# What storing one file gave: its blob id, or the error reading it raised.
Stored = str | OSError


def store_files(objects: ObjectStore, files: Sequence[tuple[str, os.stat_result]]) -> list[Stored]:
    """Store each file (a link: its target) as a blob; returns, in order, its id or the
    OSError that reading it raised (a file deleted or closed to us since it was listed). The
    blobs are in the vault on return, not yet synced (the caller syncs once for all it wrote).

    Small files are read, hashed and compressed on the calling thread: their work is a few
    system calls and microseconds of Python each, and threads taking turns at the interpreter
    lock for it took two to three times as long. Files of a megabyte and more are read on
    threads, whose hashing and compressing run outside the lock, a few at a time."""
    if len(files) < LOOSE_BELOW:
        return [_loose(objects, path, st) for path, st in files]
    out: list[Stored] = [""] * len(files)
    threaded: list[int] = []
    streamed: list[int] = []
    with _writing(objects) as pack:
        for i, (path, st) in enumerate(files):
            # Larger than LARGE_FILE: streamed into a loose object, never held in memory whole.
            if st.st_size > LARGE_FILE and not statmod.S_ISLNK(st.st_mode):
                streamed.append(i)
            elif st.st_size >= THREADED_FROM and not statmod.S_ISLNK(st.st_mode):
                threaded.append(i)
            else:
                out[i] = pack.take(_read(path, st))
        if threaded:
            with ThreadPoolExecutor(_THREADS, thread_name_prefix="import-hash") as pool:
                window: deque[tuple[int, Future[tuple[str, bytes] | OSError]]] = deque()
                for i in threaded:
                    window.append((i, pool.submit(_read, *files[i])))
                    if len(window) >= 2 * _THREADS:  # a few files in memory at a time
                        j, done = window.popleft()
                        out[j] = pack.take(done.result())
                while window:
                    j, done = window.popleft()
                    out[j] = pack.take(done.result())
    for i in streamed:
        out[i] = _loose(objects, *files[i])
    return out


def store_objects(objects: ObjectStore, kind: str, items: list[tuple[str, bytes]]) -> None:
    """Store objects of one kind given as (id, content), those the vault lacks: loose when
    they are few, else in one pack (the ten thousand trees of a new plain folder's base)."""
    if len(items) < LOOSE_BELOW:
        objects.write_objects(kind, items)
        return
    # Asked before compressing: a repository's first import finds its clean trees among the
    # objects it copied, and compressing them only to drop them cost a tenth of a second.
    held = objects.held({sha for sha, _ in items})
    items = [(sha, data) for sha, data in items if sha not in held]
    if not items:
        return
    code = _KINDS[kind]
    with _writing(objects) as pack:
        for sha, data in items:
            pack.take((sha, _entry_header(code, len(data)) + deflate(data)))


@contextmanager
def _writing(objects: ObjectStore) -> Iterator[_PackWriter]:
    """A new pack of the vault's; what stops it being written (a full disk, a folder closed to
    us) is said in one line naming the vault."""
    try:
        with _PackWriter(objects) as pack:
            yield pack
    except OSError as exc:
        raise VaultError(
            f"cannot write to the vault {objects.git_dir}: {exc.strerror or exc}"
        ) from None


def _loose(objects: ObjectStore, path: str, st: os.stat_result) -> Stored:
    try:
        return objects.write_blob_from_path(path, st)
    except OSError as exc:
        return exc


def _read(path: str, st: os.stat_result) -> tuple[str, bytes] | OSError:
    """(blob id, the pack's entry for it) of one file or link; the OSError reading it raised."""
    try:
        if statmod.S_ISLNK(st.st_mode):
            data = os.fsencode(os.readlink(path))
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError as exc:
        return exc
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest(), _entry_header(_KINDS["blob"], len(data)) + deflate(data)


def _entry_header(kind: int, size: int) -> bytes:
    """A pack entry's header: its type and size, seven bits a byte after the first four."""
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


class _PackWriter:
    """A pack being written beside the vault's packs (named as no pack of git's is), joined
    to them only once git has indexed it whole: a reader never finds a pack without its index,
    and an interrupted write leaves a temporary file the next writer removes."""

    def __init__(self, objects: ObjectStore):
        self.objects = objects
        self.folder = objects.objects_dir / "pack"
        self.folder.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(self.folder)
        self.path = self.folder / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}-pack"
        self.file = open(self.path, "xb")  # noqa: SIM115 - closed by __exit__
        self.file.write(_pack_header(0))
        self._index_path = self.path.with_name(self.path.name[: -len("pack")] + "idx")
        self.count = 0
        self.written: set[str] = set()
        self.pending: list[tuple[str, bytes]] = []
        self.pending_bytes = 0

    def __enter__(self) -> _PackWriter:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        try:
            if kind is None:
                self._finish()
        finally:
            self.file.close()
            for path in (self.path, self._index_path):
                path.unlink(missing_ok=True)

    def take(self, read: tuple[str, bytes] | OSError) -> Stored:
        """Queue one file's entry for the pack (written with the others, once it is known
        whether the vault holds its blob); returns its blob id, or the error reading it."""
        if isinstance(read, OSError):
            return read
        self.pending.append(read)
        self.pending_bytes += len(read[1])
        if len(self.pending) >= _LOOKUP or self.pending_bytes >= _PENDING_BYTES:
            self.add_missing(self.pending)
            self.pending, self.pending_bytes = [], 0
        return read[0]

    def add_missing(self, items: list[tuple[str, bytes]]) -> None:
        """Write the entries whose blob the vault (and this pack) does not hold yet."""
        fresh = [(sha, entry) for sha, entry in items if sha not in self.written]
        if not fresh:
            return
        held = self.objects.held({sha for sha, _ in fresh})
        for sha, entry in fresh:
            if sha in held or sha in self.written:
                continue
            self.file.write(entry)
            self.written.add(sha)
            self.count += 1

    def _finish(self) -> None:
        self.add_missing(self.pending)
        if not self.count:
            return
        self.file.seek(0)
        self.file.write(_pack_header(self.count))
        self.file.flush()
        digest = hashlib.sha1()
        with open(self.path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        self.file.seek(0, os.SEEK_END)
        self.file.write(digest.digest())
        self.file.close()
        idx = self._index_path
        proc = run_git(
            [
                "--git-dir",
                str(self.objects.git_dir),
                "index-pack",
                "-o",
                str(idx),
                str(self.path),
            ],
            check=False,
        )
        name = proc.stdout.decode().strip()
        if proc.returncode != 0 or name != digest.hexdigest():
            err = proc.stderr.decode(errors="replace").strip().splitlines()
            raise VaultError(f"git could not index the new pack: {err[-1] if err else name}")
        # Read-only, as git leaves its packs; the pack before its index: git looks for packs
        # through their indexes.
        os.chmod(self.path, 0o444)
        os.chmod(idx, 0o444)
        os.replace(self.path, self.folder / f"pack-{name}.pack")
        os.replace(idx, self.folder / f"pack-{name}.idx")


def _pack_header(count: int) -> bytes:
    return b"PACK" + (2).to_bytes(4, "big") + count.to_bytes(4, "big")


def _remove_abandoned(folder: Path) -> None:
    """Remove the temporary packs of writers that died (their process is gone)."""
    for path in folder.glob(f"{TEMP_PREFIX}*"):
        pid = path.name[len(TEMP_PREFIX) :].partition("-")[0]
        if pid != str(os.getpid()) and not process_alive(pid):
            path.unlink(missing_ok=True)


def process_alive(pid_text: str) -> bool:
    """Whether the process a temporary pack or an import's quarantine folder is named for still
    runs (True when unsure): what another process is still writing is never taken from it."""
    try:
        os.kill(int(pid_text), 0)
    except (ValueError, OverflowError):
        return False  # not a name Cairn gave
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


__all__ = ["LOOSE_BELOW", "Stored", "TEMP_PREFIX", "process_alive", "store_files", "store_objects"]
