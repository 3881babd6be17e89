"""Git objects in a vault, written and read directly: blobs, trees, commits and refs.

Owns the byte format of git objects and the atomic writes of loose objects and refs. It knows
nothing of workspaces or revisions; the recorder and importer build on it. Packed objects are
read through one long-lived `git cat-file --batch` process per store.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import mmap
import os
import re
import secrets
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import VaultError
from core.safe_fs import fsync_dir

MODE_FILE = "100644"
MODE_EXEC = "100755"
MODE_LINK = "120000"
MODE_TREE = "40000"
MODE_GITLINK = "160000"

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
LARGE_FILE = 64 * 1024 * 1024  # above this a blob is streamed instead of read whole
_BULK_LOOKUP = 32  # more objects than this are looked up with one git process, not one each
_LIST_LOOSE_ABOVE = 256  # more ids than this are looked for by listing their fan-out folders
_REF_LOCK_WAIT_S = 2.0
# When the vault's last complete sync began (ns since the epoch); a loose commit written well
# before that is durable with all it names. The margin covers file times taken from the kernel's
# coarse clock and filesystems that keep whole seconds.
_SYNCED = "cairn-synced"
_STAMP_TICK_WAIT_S = 0.05  # longer than a tick of the coarsest kernel clock (10 ms)
_SYNC_MARGIN_NS = (
    2_000_000_000  # a ref's lock is held for one small write; longer means a crashed writer
)
_DirStamp = tuple[int, int, int, int]  # mtime_ns, ctime_ns, size, inode

# Git without the user's or system's configuration: a byte-exact, predictable tool.
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
}


def git_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    env.update(extra)
    return env


def run_git(
    args: list[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """Run git with Cairn's clean environment; raise VaultError with git's own words on failure."""
    proc = subprocess.run(
        ["git", *args], cwd=cwd, input=input, capture_output=True, env=env or git_env()
    )
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise VaultError(
            f"git {args[0]} failed: {err[-1] if err else 'exit ' + str(proc.returncode)}"
        )
    return proc


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    name: bytes
    sha: str


@dataclass(frozen=True)
class Commit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    timestamp: int
    message: str

    def trailer(self, key: str) -> str | None:
        prefix = f"{key}: "
        for line in self.message.splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        return None


def object_id(kind: str, data: bytes) -> str:
    h = hashlib.sha1(f"{kind} {len(data)}\0".encode())
    h.update(data)
    return h.hexdigest()


def deflate(data: bytes) -> bytes:
    """`data` compressed as git stores an object (zlib, the fastest level), with a window and
    hash table no larger than the data needs: the full ones take a quarter of a megabyte, which
    the allocator maps and unmaps on every call, so a small object cost 80-100 us to compress
    where it now costs 5-15 us. The stream is the same kind; a few percent larger at most."""
    bits = max(9, min(15, (len(data) + 262).bit_length()))
    packer = zlib.compressobj(1, zlib.DEFLATED, bits, max(1, min(8, bits - 7)))
    return packer.compress(data) + packer.flush()


class PackIndex:
    """The object ids of one pack, from its index file (version 2, what git writes): an id is
    looked for in the sorted ids the index's fan-out table gives for its first byte, one search
    of the mapped bytes, no Python loop over them."""

    _MAGIC = b"\xfftOc\x00\x00\x00\x02"
    _NAMES = 8 + 256 * 4  # where the ids begin

    def __init__(self, data: mmap.mmap):
        if data[:8] != self._MAGIC:
            raise ValueError("not a pack index of version 2")
        self.fanout = struct.unpack_from(">256I", data, 8)
        if len(data) < self._NAMES + 20 * self.fanout[255]:
            raise ValueError("a pack index cut short")
        self.data = data

    @classmethod
    def open(cls, path: Path) -> PackIndex:
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return cls(data)
        except ValueError:
            data.close()
            raise

    def __contains__(self, raw: bytes) -> bool:
        first = raw[0]
        start = self._NAMES + 20 * (self.fanout[first - 1] if first else 0)
        end = self._NAMES + 20 * self.fanout[first]
        at = self.data.find(raw, start, end)
        while at >= 0 and (at - start) % 20:  # a match across two ids: look further
            at = self.data.find(raw, at + 1, end)
        return at >= 0

    def ids(self) -> Iterator[str]:
        """Every id of the pack, in order, as hex."""
        end = self._NAMES + 20 * self.fanout[255]
        for at in range(self._NAMES, end, 20):
            yield self.data[at : at + 20].hex()

    def close(self) -> None:
        self.data.close()


def _tree_sort_key(entry: TreeEntry) -> bytes:
    return entry.name + b"/" if entry.mode == MODE_TREE else entry.name


def encode_tree(entries: list[TreeEntry]) -> bytes:
    out = bytearray()
    for e in sorted(entries, key=_tree_sort_key):
        out += e.mode.encode() + b" " + e.name + b"\0" + bytes.fromhex(e.sha)
    return bytes(out)


def decode_tree(data: bytes) -> list[TreeEntry]:
    entries = []
    i, n = 0, len(data)
    while i < n:
        sp = data.index(b" ", i)
        nul = data.index(b"\0", sp)
        mode = data[i:sp].decode()
        entries.append(TreeEntry(mode, data[sp + 1 : nul], data[nul + 1 : nul + 21].hex()))
        i = nul + 21
    return entries


def _syncfs(path: Path) -> None:
    """Flush the filesystem holding `path` (syncfs(2)); fall back to a global sync."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    os.sync()


def _time_after_last_write(stamp: Path) -> int:
    """Make the file `stamp` and return a file time later than that of every file written
    before the call. File times come from a coarse clock (a tick of a few milliseconds), so a
    file written just before the stamp often has the stamp's very time, and a sync begun then
    could not vouch for it: the stamp is touched again until its time moves past the first one
    (a tick at most; the first time is kept if the clock never moves)."""
    stamp.write_bytes(b"")
    first = os.stat(stamp).st_mtime_ns
    deadline = time.monotonic() + _STAMP_TICK_WAIT_S
    while time.monotonic() < deadline:
        os.utime(stamp)
        now = os.stat(stamp).st_mtime_ns
        if now > first:
            return now
        time.sleep(0.001)
    return first


def _new_temp_object(folder: Path) -> tuple[int, Path]:
    """A new file of our own for an object being written into `folder`: exclusive, so that two
    processes (or a stale file of a crashed one with a recycled pid) never share it; named
    `tmp_obj_*`, so that housekeeping knows an abandoned one."""
    for _ in range(16):
        tmp = folder / f"tmp_obj_{os.getpid()}_{threading.get_ident()}_{secrets.token_hex(4)}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), tmp
        except FileExistsError:
            continue
    raise VaultError(f"cannot make a temporary object file in {folder}")


def _take_ref_lock(name: str, lock: Path) -> int:
    """Create the ref's `.lock` file (git's own protocol). Another writer holds it only for the
    moment of its write, so a taken lock is waited for briefly; its folder may vanish meanwhile
    (git prunes emptied ref folders when it deletes a ref), so it is made again."""
    deadline = time.monotonic() + _REF_LOCK_WAIT_S
    pause = 0.001
    while True:
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            return os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            pass  # the folder went between mkdir and open: make it again
        except FileExistsError as exc:
            if time.monotonic() >= deadline:
                raise VaultError(f"the ref {name} is being updated by someone else") from exc
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class ObjectStore:
    """The object database and refs of one bare vault repository."""

    def __init__(self, git_dir: Path):
        self.git_dir = Path(git_dir)
        self.objects_dir = self.git_dir / "objects"
        self._lock = threading.Lock()
        self._batch: subprocess.Popen | None = None
        self._batch_check: subprocess.Popen | None = None
        self._known_dirs: set[str] = set()
        self._elsewhere_key: tuple[_DirStamp | None, ...] | None = None  # see _may_hold_elsewhere
        self._elsewhere = True
        self._pack_indexes: dict[str, PackIndex] = {}  # see _packed; packs never change

    # -- plumbing processes ------------------------------------------------------------------

    def _popen(self, mode: str) -> subprocess.Popen:
        return subprocess.Popen(
            ["git", "--git-dir", str(self.git_dir), "cat-file", mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=git_env(),
        )

    def close(self) -> None:
        with self._lock:
            for proc in (self._batch, self._batch_check):
                if proc is not None:
                    try:
                        if proc.stdin is not None:
                            proc.stdin.close()
                        proc.wait(timeout=5)
                    except (OSError, subprocess.TimeoutExpired):
                        proc.kill()
            self._batch = self._batch_check = None
            for index in self._pack_indexes.values():
                index.close()
            self._pack_indexes.clear()

    def __del__(self) -> None:  # pragma: no cover - best effort
        # A finalizer must not raise: at interpreter exit what close() touches may be gone.
        with contextlib.suppress(Exception):
            self.close()

    def _ask(self, which: str, sha: str) -> tuple[bytes, subprocess.Popen]:
        proc = self._batch if which == "--batch" else self._batch_check
        if proc is None or proc.poll() is not None:
            proc = self._popen(which)
            if which == "--batch":
                self._batch = proc
            else:
                self._batch_check = proc
        assert proc.stdin and proc.stdout
        proc.stdin.write(sha.encode() + b"\n")
        proc.stdin.flush()
        return proc.stdout.readline(), proc

    # -- objects -----------------------------------------------------------------------------

    def _loose_path(self, sha: str) -> Path:
        return self.objects_dir / sha[:2] / sha[2:]

    def _may_hold_elsewhere(self) -> bool:
        """Whether objects may live outside the loose files (packs or alternates).

        A vault that only has loose objects needs no round trip to git to know an object is
        missing. Cached on the pack folder's and the alternates file's change times; a stale answer
        can only cause a duplicate loose copy of a packed object, which git tolerates.
        """
        key: list[_DirStamp | None] = []
        for path in (self.objects_dir / "pack", self.objects_dir / "info" / "alternates"):
            try:
                st = os.stat(path)
                key.append((st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino))
            except FileNotFoundError:
                key.append(None)
        if tuple(key) != self._elsewhere_key:
            try:
                packs = key[0] is not None and any(
                    name.endswith(".pack") for name in os.listdir(self.objects_dir / "pack")
                )
            except OSError:
                packs = True
            self._elsewhere = packs or key[1] is not None
            self._elsewhere_key = tuple(key)
        return self._elsewhere

    def has_object(self, sha: str) -> bool:
        if self._loose_path(sha).exists():
            return True
        if not self._may_hold_elsewhere():
            return False
        packed, unsure = self._packed({sha})
        if packed or not unsure:
            return bool(packed)
        with self._lock:
            header, _ = self._ask("--batch-check", sha)
        return not header.endswith(b"missing\n") and bool(header)

    def object_sizes(self, shas: set[str]) -> dict[str, tuple[str, int]]:
        """Kind and size of each of `shas` the vault holds (missing ones are left out), from one
        `git cat-file --batch-check` for all of them."""
        if not shas:
            return {}
        proc = run_git(
            ["--git-dir", str(self.git_dir), "cat-file", "--batch-check", "--buffer"],
            input="".join(f"{sha}\n" for sha in shas).encode(),
        )
        out = {}
        for line in proc.stdout.decode().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit():
                out[parts[0]] = (parts[1], int(parts[2]))
        return out

    def write_object(self, kind: str, data: bytes, *, sha: str | None = None) -> str:
        sha = sha or object_id(kind, data)
        path = self._loose_path(sha)
        if path.exists() or self.has_object(sha):
            return sha
        raw = f"{kind} {len(data)}\0".encode() + data
        self._write_loose(path, deflate(raw))
        return sha

    def held(self, shas: set[str]) -> set[str]:
        """Those of `shas` the vault holds, loose or packed. Loose ones are found by listing
        their fan-out folders when there are many; packed ones in the packs' own indexes (git
        asked about an id it lacks rescans its packs each time, some 35 us an id); git is asked
        only about what neither tells (objects of an alternate, an index of another version)."""
        if len(shas) > _LIST_LOOSE_ABOVE:
            found = shas & self._loose_ids({sha[:2] for sha in shas})
        else:
            found = {sha for sha in shas if self._loose_path(sha).exists()}
        rest = shas - found
        if rest and self._may_hold_elsewhere():
            packed, unsure = self._packed(rest)
            found |= packed
            if unsure:
                found.update(self.object_sizes(unsure))
        return found

    def _loose_ids(self, fans: set[str]) -> set[str]:
        out: set[str] = set()
        for fan in fans:
            try:
                names = os.listdir(self.objects_dir / fan)
            except (FileNotFoundError, NotADirectoryError):
                continue
            out.update(fan + name for name in names if len(name) == 38)
        return out

    def _packed(self, shas: set[str]) -> tuple[set[str], set[str]]:
        """(those of `shas` in the vault's packs, those the packs' indexes cannot tell about)."""
        folder = self.objects_dir / "pack"
        try:
            names = {n for n in os.listdir(folder) if n.startswith("pack-") and n.endswith(".idx")}
        except FileNotFoundError:
            names = set()
        indexes = []
        unreadable = False
        with self._lock:
            for gone in set(self._pack_indexes) - names:
                self._pack_indexes.pop(gone).close()
            for name in sorted(names):
                index = self._pack_indexes.get(name)
                if index is None:
                    try:
                        index = self._pack_indexes[name] = PackIndex.open(folder / name)
                    except (OSError, ValueError):
                        unreadable = True
                        continue
                indexes.append(index)
        found = {sha for sha in shas if any(bytes.fromhex(sha) in i for i in indexes)}
        alternates = (self.objects_dir / "info" / "alternates").exists()
        return found, (shas - found if unreadable or alternates else set())

    def write_objects(self, kind: str, items: list[tuple[str, bytes]]) -> None:
        """Write many objects of one kind, given as (id, content): those the vault lacks, found
        with one look-up for all of them (a tree of thousands of folders is one round trip)."""
        todo = dict(items)
        if len(todo) > _BULK_LOOKUP:
            for sha in self.held(set(todo)):
                del todo[sha]
            for sha, data in todo.items():
                raw = f"{kind} {len(data)}\0".encode() + data
                self._write_loose(self._loose_path(sha), deflate(raw))
            return
        for sha, data in todo.items():
            self.write_object(kind, data, sha=sha)

    def _write_loose(self, path: Path, compressed: bytes) -> None:
        folder = path.parent
        if folder.name not in self._known_dirs:
            folder.mkdir(exist_ok=True)
            self._known_dirs.add(folder.name)
        try:
            fd, tmp = _new_temp_object(folder)
        except FileNotFoundError:
            # A cleanup in another process removed the emptied fan-out folder since it was seen.
            folder.mkdir(exist_ok=True)
            fd, tmp = _new_temp_object(folder)
        try:
            with open(fd, "wb") as f:
                f.write(compressed)
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def write_blob(self, data: bytes) -> str:
        return self.write_object("blob", data)

    def write_blob_from_path(self, path: str | os.PathLike[str], st: os.stat_result) -> str:
        """Store the file (or the link's target text) at `path`; returns the blob id."""
        import stat as statmod

        if statmod.S_ISLNK(st.st_mode):
            return self.write_blob(os.fsencode(os.readlink(path)))
        if st.st_size <= LARGE_FILE:
            with open(path, "rb") as f:
                return self.write_blob(f.read())
        return self._write_large_blob(path)

    def _write_large_blob(self, path: str | os.PathLike[str]) -> str:
        # Hash first (the size must lead the header), then compress in a second pass; a file that
        # changed between passes is hashed again.
        for _ in range(3):
            size = os.stat(path).st_size
            h = hashlib.sha1(f"blob {size}\0".encode())
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            sha = h.hexdigest()
            if self.has_object(sha):
                return sha
            target = self._loose_path(sha)
            target.parent.mkdir(exist_ok=True)
            fd, tmp = _new_temp_object(target.parent)
            comp = zlib.compressobj(1)
            check = hashlib.sha1(f"blob {size}\0".encode())
            seen = 0
            with open(fd, "wb") as dst, open(path, "rb") as src:
                dst.write(comp.compress(f"blob {size}\0".encode()))
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    seen += len(chunk)
                    check.update(chunk)
                    dst.write(comp.compress(chunk))
                dst.write(comp.flush())
            if seen == size and check.hexdigest() == sha:
                os.chmod(tmp, 0o444)
                os.replace(tmp, target)
                return sha
            os.unlink(tmp)
        raise VaultError(f"{path} kept changing while it was being recorded")

    def read_object(self, sha: str) -> tuple[str, bytes]:
        """Read and verify an object: its content must hash to its id."""
        path = self._loose_path(sha)
        try:
            with open(path, "rb") as f:
                raw = zlib.decompress(f.read())
            header, _, data = raw.partition(b"\0")
            kind, _, size = header.decode().partition(" ")
            if int(size) != len(data):
                raise VaultError(f"object {sha} is truncated")
        except FileNotFoundError:
            kind, data = self._read_packed(sha)
        except (zlib.error, ValueError, UnicodeDecodeError) as exc:
            raise VaultError(f"object {sha} is corrupt ({exc})") from exc
        except OSError as exc:
            raise VaultError(f"object {sha} cannot be read ({exc.strerror or exc})") from exc
        if object_id(kind, data) != sha:
            raise VaultError(f"object {sha} is corrupt (its content does not match its id)")
        return kind, data

    def _read_packed(self, sha: str) -> tuple[str, bytes]:
        with self._lock:
            header, proc = self._ask("--batch", sha)
            parts = header.split()
            if len(parts) != 3:
                raise VaultError(f"object {sha} is missing from the vault")
            size = int(parts[2])
            assert proc.stdout
            data = proc.stdout.read(size)
            proc.stdout.read(1)
        return parts[1].decode(), data

    def read_blob(self, sha: str) -> bytes:
        kind, data = self.read_object(sha)
        if kind != "blob":
            raise VaultError(f"object {sha} is a {kind}, not a blob")
        return data

    def write_tree(self, entries: list[TreeEntry]) -> str:
        return self.write_object("tree", encode_tree(entries))

    def read_tree(self, sha: str) -> list[TreeEntry]:
        if sha == EMPTY_TREE:
            return []
        kind, data = self.read_object(sha)
        if kind != "tree":
            raise VaultError(f"object {sha} is a {kind}, not a tree")
        return decode_tree(data)

    def write_commit(
        self, tree: str, parents: list[str], message: str, *, timestamp: float | None = None
    ) -> str:
        ts = int(timestamp if timestamp is not None else time.time())
        who = f"Cairn <cairn@localhost> {ts} +0000"
        lines = [f"tree {tree}"] + [f"parent {p}" for p in parents]
        lines += [f"author {who}", f"committer {who}", "", message.rstrip("\n"), ""]
        return self.write_object("commit", "\n".join(lines).encode())

    def read_commit(self, sha: str) -> Commit:
        kind, data = self.read_object(sha)
        if kind != "commit":
            raise VaultError(f"object {sha} is a {kind}, not a commit")
        head, _, message = data.decode(errors="replace").partition("\n\n")
        tree, parents, ts = "", [], 0
        for line in head.splitlines():
            key, _, value = line.partition(" ")
            if key == "tree":
                tree = value
            elif key == "parent":
                parents.append(value)
            elif key == "committer":
                ts = int(value.rsplit(" ", 2)[-2])
        return Commit(sha, tree, tuple(parents), ts, message)

    # -- refs --------------------------------------------------------------------------------

    def read_ref(self, name: str) -> str | None:
        path = self.git_dir / name
        try:
            value = path.read_text().strip()
            if _SHA_RE.match(value):
                return value
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            pass
        packed = self.git_dir / "packed-refs"
        if packed.exists():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + name) and _SHA_RE.match(line[:40]):
                    return line[:40]
        return None

    def update_ref(
        self, name: str, new: str, *, old: str | None = None, durable: bool = False
    ) -> None:
        """Point `name` at `new`, atomically; when `old` is given the ref must still hold it."""
        if not name.startswith("refs/"):
            raise VaultError(f"refusing to write the ref {name!r}")
        path = self.git_dir / name
        lock = path.with_name(path.name + ".lock")
        fd = _take_ref_lock(name, lock)
        try:
            current = self.read_ref(name)
            if old is not None and current != old:
                raise VaultError(
                    f"the ref {name} moved (expected {old[:12]}, found "
                    f"{(current or 'nothing')[:12]})"
                )
            os.write(fd, new.encode() + b"\n")
            if durable:
                os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(lock, path)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            # Only our own lock: once it has become the ref, a `.lock` here is the next writer's.
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
            raise
        if durable:
            fsync_dir(path.parent)

    def delete_ref(self, name: str) -> None:
        run_git(["--git-dir", str(self.git_dir), "update-ref", "-d", name])

    def list_refs(self, prefix: str) -> dict[str, str]:
        proc = run_git(
            [
                "--git-dir",
                str(self.git_dir),
                "for-each-ref",
                "--format=%(objectname) %(refname)",
                prefix,
            ]
        )
        out = {}
        for line in proc.stdout.decode().splitlines():
            sha, _, ref = line.partition(" ")
            out[ref] = sha
        return out

    def sync(self) -> None:
        """Make every object written so far durable (one syncfs of the vault's filesystem)."""
        # The sync's start in the filesystem's own clock: a file made just before it.
        stamp = self.git_dir / f"{_SYNCED}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            began: int | None = _time_after_last_write(stamp)
        except OSError:
            began = None
        _syncfs(self.git_dir)
        if began is not None:
            self._note_synced(stamp, began)

    def sync_commit(self, commit: str) -> None:
        """Make `commit` and everything it names durable: nothing to do when the vault's last
        sync began after the commit was written (its trees and blobs are written before it),
        else one sync. A syncfs flushes every dirty file of the filesystem (a workspace just
        written beside the vault, say) and may take seconds; a ref needs none when its objects
        are already on disk."""
        try:
            written = self._written_at(commit)
            synced = int((self.git_dir / _SYNCED).read_text().strip())
        except (OSError, ValueError):
            written, synced = 0, -1
        # Strictly before: a file of the same clock tick may have been written after the stamp.
        if written and written < synced:
            return
        self.sync()

    def _written_at(self, sha: str) -> int:
        """When the object `sha` was written, in the filesystem's file times: its loose file's,
        or, for a packed object, the newest pack's (whichever pack holds it, it was written no
        later than that); OSError when neither can be told."""
        try:
            return os.stat(self._loose_path(sha)).st_mtime_ns
        except FileNotFoundError:
            pass
        with os.scandir(self.objects_dir / "pack") as listing:
            packs = [e.stat().st_mtime_ns for e in listing if e.name.endswith(".pack")]
        if not packs:
            raise FileNotFoundError(f"object {sha} is neither loose nor in a pack")
        return max(packs)

    def _note_synced(self, stamp: Path, began: int) -> None:
        """Remember when the last complete sync began (only ever moving forward)."""
        marker = self.git_dir / _SYNCED
        with self._lock:
            try:
                if int(marker.read_text().strip()) >= began:
                    stamp.unlink()
                    return
            except (OSError, ValueError):
                pass
            try:
                stamp.write_text(f"{began}\n")
                os.replace(stamp, marker)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(stamp)
