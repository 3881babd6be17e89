"""Writing a recorded tree out as a new folder, verified, all or nothing.

Owns turning a commit or tree of the vault into files on disk (restoring a snapshot, forking from a
revision). It never writes into an existing folder: deciding where a tree goes, and what to do
with a folder someone edited, belongs to the workspace and resume logic.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import logging
import os
import queue
import secrets
import shutil
import stat as statmod
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from core.errors import CairnError, Conflict, CorruptSnapshot, InputError, VaultError
from core.vault import Vault, collector_paused, sizes
from core.vault.objects import (
    EMPTY_TREE,
    MODE_EXEC,
    MODE_FILE,
    MODE_GITLINK,
    MODE_LINK,
    MODE_TREE,
    ObjectStore,
    decode_tree,
    git_env,
    object_id,
)
from core.vault.tree_index import TreeIndex

_log = logging.getLogger(__name__)

_BY_GIT: bool | None = None  # git writes the files (None: where it can), or never (False)
_STREAM_ABOVE = 64 * 1024 * 1024  # blobs larger than this are streamed to disk in chunks
_CHUNK = 1 << 20
_FEED_BATCH = 1024  # blob ids sent to git per write
_LOOSE_READ = 1 << 16  # one read takes a whole small loose object
_LOOSE_BATCH = 256  # loose blobs per writer task
_WRITERS = min(4, os.cpu_count() or 2)  # threads creating files and folders
_PACE_PROBE = 2048  # files written each way (inline, then by the writer threads) before choosing
_PACE: str | None = None  # "inline" or "threads": no measuring (benchmarks and tests choose)
_PARALLEL_DIRS = 64  # fewer folders than this are made on the calling thread
_WRITE_BATCH = 64  # files handed to a writer at once...
_WRITE_BATCH_BYTES = 4 << 20  # ...or this many bytes
_UNSAFE_NAMES = {b"", b".", b"..", b".git"}
# Git's checkout writes blobs byte for byte, as Cairn recorded them: no attribute of the tree
# (eol, text, filters, $Id$, re-encoding) converts them, and names git itself would refuse on
# another system's filesystem are written here as they are.
_CHECKOUT_ATTRIBUTES = b"* -text -eol -crlf -ident -filter -working-tree-encoding\n"
_CHECKOUT_CONFIG = b"""[core]
\trepositoryformatversion = 0
\tbare = false
\tfilemode = true
\tsymlinks = true
\tignorecase = false
\tautocrlf = false
\tsafecrlf = false
\tprotectNTFS = false
\tprotectHFS = false
\tsparseCheckout = false
\tfsmonitor = false
[checkout]
\tworkers = 1
"""
_CHECKOUT_NICE = -10  # git's checkout before the rest, where Cairn may (root)
_SETPRIV = shutil.which("setpriv")  # util-linux's: runs git as a workspace's owner
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def materialize(
    vault: Vault,
    commit_or_tree: str,
    dest: Path,
    *,
    label: str,
    owner: tuple[int, int] | None = None,
    stats: dict[bytes, os.stat_result] | None = None,
    checked: bool = False,
    early: EarlyCheckout | None = None,
    git_index: Path | None = None,
    index: TreeIndex | None = None,
) -> str:
    """Write the tree of `commit_or_tree` into the new folder `dest`; return the tree id.

    The files appear at `dest` all at once (a temporary sibling renamed into place) and only after
    every object was verified. A missing or corrupt object raises CorruptSnapshot naming `label`
    and leaves nothing behind. With `owner` (uid, gid; Cairn runs as root) every folder, file
    and link below `dest` belongs to that user before `dest` appears, while `dest` itself stays
    Cairn's and closed to everyone else (0700): nobody can change a file unseen until the caller
    has recorded the files' stat data and opens it (`workspaces.open_to`).

    Git's checkout writes the files (`_Checkout`) while this process reads and checks every
    object; where git cannot (a name it refuses) or did not write the tree as planned, this
    process writes them itself (`_write_blobs`), a file chowned through its open descriptor.

    `stats` receives each file's and link's stat data (path below `dest` → `lstat`), taken once
    it was written, so that whoever records stat data for the new tree need not look again:
    nothing but this process writes in the folder before it appears at `dest`.

    `checked` says every blob of the vault was checked against its id moments ago, as it was
    stored (an import into a vault it created: git's fetch hashes each object it receives, and
    the importer each file it stores): the blobs are then not read a second time, the trees
    still are.

    `early`: a checkout `begin_checkout` started into `dest` before this tree was known (with
    the same `owner`); git takes it from the tree it was given to this one, rewriting only the
    files that differ. Whatever it holds is checked as any checkout of git's is, and thrown
    away (the tree then written here) if it does not match.

    `git_index`: where git's own index of the tree is left, when git wrote every file and
    nothing changed one since (it holds the stat data git took of each as it wrote it); left
    absent otherwise. The caller removes it.

    `index`: the tree as the caller holds it in memory, flushed (an import's base, its trees
    computed from it and every object `checked`): what is to be written is taken from it
    instead of reading every tree from the vault again.
    """
    with collector_paused():
        return _materialize(
            vault,
            commit_or_tree,
            Path(dest),
            label,
            owner,
            stats,
            checked,
            early,
            git_index,
            index,
        )


class EarlyCheckout:
    """A checkout into a new folder's temporary place, started before the tree to write there
    is known: the importer starts one of the user's HEAD while it still reads the folder, so
    that git writes the files beside that reading instead of after it. `materialize(early=)`
    takes it over; `close` throws it away if nothing did."""

    def __init__(self, temp: Path, checkout: _Checkout, first: str):
        self.temp = temp
        self.checkout = checkout
        self.first = first  # the commit or tree git was given
        self.taken = False

    def close(self) -> None:
        if not self.taken:
            self.taken = True
            self.checkout.close()
            shutil.rmtree(self.temp, ignore_errors=True)


def begin_checkout(
    vault: Vault,
    first: str,
    dest: Path,
    *,
    owner: tuple[int, int] | None = None,
    alternates: Sequence[Path] = (),
) -> EarlyCheckout | None:
    """Start git's checkout of `first` (a commit or tree) into the temporary place of the new
    folder `dest`, its objects read from the vault and, read-only, from `alternates` (the
    objects folder of the repository being imported, whose objects are not yet in the vault).
    None when it cannot start (`dest` exists, a path git cannot be given): `materialize` then
    writes the tree as it would have without."""
    dest = Path(dest)
    if _BY_GIT is False or os.path.lexists(dest) or not dest.parent.is_dir():
        return None
    if any(c in os.fsdecode(p) for p in alternates for c in ':"\\\n'):
        return None  # git's list of alternates would need quoting
    temp = _temp_of(dest)
    try:
        _make_top(temp, "a checkout", dest, owner)
    except CairnError:
        return None
    try:
        return EarlyCheckout(temp, _Checkout(vault.objects, first, temp, alternates, owner), first)
    except (OSError, CairnError) as exc:
        _log.debug("no early checkout of %s: %s", first[:12], exc)
        shutil.rmtree(temp, ignore_errors=True)
        return None


def _temp_of(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.restoring-{os.getpid()}-{secrets.token_hex(4)}"


def _materialize(
    vault: Vault,
    commit_or_tree: str,
    dest: Path,
    label: str,
    owner: tuple[int, int] | None,
    stats: dict[bytes, os.stat_result] | None,
    checked: bool,
    early: EarlyCheckout | None,
    git_index: Path | None,
    index: TreeIndex | None,
) -> str:
    if early is not None and early.taken:
        early = None
    try:
        if os.path.lexists(dest):
            raise Conflict(f"cannot restore {label}: {dest} already exists")
        if not dest.parent.is_dir():
            raise InputError(f"cannot restore {label}: the folder {dest.parent} does not exist")
        objects = vault.objects
        tree = _tree_of(objects, commit_or_tree, label)
    except BaseException:
        if early is not None:
            early.close()
        raise
    checkout = None
    if early is not None:
        early.taken = True
        temp, checkout = early.temp, early.checkout
    else:
        temp = _temp_of(dest)
        _make_top(temp, label, dest, owner)
    try:
        root = os.fsencode(temp)
        written = None
        # Git writes the files while the trees and blobs are read and checked here (both cores
        # at work); nothing appears at `dest` unless every object checked out.
        if early is not None and tree != EMPTY_TREE:
            assert checkout is not None
            try:
                if checkout.owner != owner:
                    raise CairnError("begun for another owner")
                checkout.then(_tree_of(objects, early.first, label), tree)
            except CairnError:  # not the tree it was started on: the tree is written here
                checkout.close()
                checkout = None
        elif _BY_GIT is not False and tree != EMPTY_TREE:
            checkout = _Checkout(objects, tree, temp, owner=owner)
        git_wrote = early is not None or checkout is not None
        try:
            if checked and index is not None and index.flushed_as(tree):
                plan = _Plan.of_index(index)
            else:
                plan = _Plan.read(objects, tree, label)
            if checkout is not None and plan.git_writes and tree != EMPTY_TREE:
                if not checked:
                    _verify_blobs(objects, plan, label)
                written = checkout.finish(plan, root, owner, stats)
                if written is not None and git_index is not None and checkout.index_true:
                    os.replace(checkout.git_dir / "index", git_index)
        finally:
            if checkout is not None:
                checkout.close()
        if written is None:
            if git_wrote:  # whatever git wrote goes: this process writes it all
                shutil.rmtree(temp)
                _make_top(temp, label, dest, owner)
            _make_dirs(root, plan.dirs, owner)
            written = _write_blobs(objects, plan, root, label, owner, stats)
        missed = plan.unwritten(written)
        if missed is not None:
            raise CorruptSnapshot(
                f"{label} cannot be restored: {_shown(missed)} was not written as tree "
                f"{tree[:12]} records it"
            )
        if not _rename_noreplace(temp, dest):
            raise Conflict(f"cannot restore {label}: {dest} already exists")
    except BaseException as exc:
        shutil.rmtree(temp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise CairnError(f"cannot restore {label} into {dest}: {exc.strerror or exc}") from None
        raise
    plan.remember_size(objects, tree)
    return tree


def _make_top(temp: Path, label: str, dest: Path, owner: tuple[int, int] | None) -> None:
    """The folder the files are written in before it is renamed to `dest`: closed to everyone
    but Cairn while another user is to own what is inside (see `materialize`)."""
    try:
        os.mkdir(temp, 0o700 if owner is not None else 0o777)
    except OSError as exc:
        raise CairnError(f"cannot restore {label} into {dest}: {exc.strerror}") from None


def _tree_of(objects: ObjectStore, commit_or_tree: str, label: str) -> str:
    sha = commit_or_tree
    if sha.startswith("refs/"):
        ref = objects.read_ref(sha)
        if ref is None:
            raise CorruptSnapshot(f"{label} cannot be restored: {sha} does not exist in the vault")
        sha = ref
    if sha == EMPTY_TREE:
        return sha
    try:
        kind, data = objects.read_object(sha)
    except VaultError as exc:
        raise _object_error(objects, label, sha, "the commit", exc) from None
    if kind == "tree":
        return sha
    if kind != "commit":
        raise CorruptSnapshot(
            f"{label} cannot be restored: object {sha[:12]} is a {kind}, not a commit or a tree"
        )
    try:
        return objects.read_commit(sha).tree
    except VaultError as exc:
        raise _object_error(objects, label, sha, "the commit", exc) from None


def _object_error(
    objects: ObjectStore, label: str, sha: str, where: str, exc: Exception | None = None
) -> CorruptSnapshot:
    """One line saying which object is wrong, where in the tree it is, and whether it is missing."""
    loose = objects.objects_dir / sha[:2] / sha[2:]
    missing = exc is not None and "missing" in str(exc) and not loose.exists()
    state = "is missing" if missing else "is corrupt"
    return CorruptSnapshot(f"{label} cannot be restored: object {sha[:12]} ({where}) {state}")


def _shown(rel: bytes) -> str:
    return os.fsdecode(rel) if rel else "the top folder"


@dataclass
class _Plan:
    """Everything a tree holds, read and verified before anything is written."""

    dirs: list[bytes] = field(default_factory=list)  # parents before children
    blobs: dict[str, list[tuple[bytes, str]]] = field(default_factory=dict)  # id → (path, mode)
    trees: int = 0
    sizes: dict[str, int] = field(default_factory=dict)  # id → bytes, once verified and written
    git_writes: bool = True  # no name git's checkout refuses (".GIT", a link ".gitmodules")

    @classmethod
    def read(cls, objects: ObjectStore, tree: str, label: str) -> _Plan:
        """The tree read a depth at a time: loose trees directly, the packed ones of a depth
        from one `git cat-file --batch` (a round trip per folder costs more than the folder).
        Each tree must hash to its id and be in git's own encoding (canonical modes, entries
        in git's order, no name twice), so that files written exactly as planned make the tree
        again."""
        plan = cls()
        objects_dir = os.fsencode(objects.objects_dir) + b"/"
        level = [(b"", tree)]
        while level:
            bodies: dict[str, bytes] = {}
            packed = []
            for folder, sha in level:
                if sha == EMPTY_TREE or sha in bodies:
                    continue
                data = _read_loose(objects_dir + f"{sha[:2]}/{sha[2:]}".encode(), sha, b"tree")
                if data is False:
                    raise _object_error(objects, label, sha, _shown(folder))
                if data is None:
                    packed.append((folder, sha))
                else:
                    bodies[sha] = data
            if packed:
                bodies.update(_read_packed_trees(objects, packed, label))
            below: list[tuple[bytes, str]] = []
            for folder, sha in level:
                plan._add(folder, sha, bodies.get(sha, b""), below, label)
            level = below
        return plan

    @classmethod
    def of_index(cls, index: TreeIndex) -> _Plan:
        """The plan of a tree held in memory whose trees were computed from it: its names were
        read from disk (no unsafe one there) and its trees are git's encoding of it."""
        plan = cls()
        for folder in sorted(index.dirs, key=lambda f: f.count("/") + (1 if f else 0)):
            plan.trees += 1
            prefix = os.fsencode(folder) + b"/" if folder else b""
            for name, rec in index.dirs[folder].items():
                bname = os.fsencode(name)
                rel = prefix + bname
                lower = bname.lower()
                if rec is None or rec.mode == MODE_GITLINK:
                    plan.dirs.append(rel)  # a folder, or a submodule's place
                else:
                    plan.blobs.setdefault(rec.sha, []).append((rel, rec.mode))
                if lower == b".git" or (
                    rec is not None and rec.mode == MODE_LINK and lower == b".gitmodules"
                ):
                    plan.git_writes = False
        return plan

    def _add(
        self,
        folder: bytes,
        sha: str,
        body: bytes,
        below: list[tuple[bytes, str]],
        label: str,
    ) -> None:
        self.trees += 1
        try:
            entries = decode_tree(body)
        except ValueError:
            raise CorruptSnapshot(
                f"{label} cannot be restored: object {sha[:12]} ({_shown(folder)}) is corrupt"
            ) from None
        last = b""
        length = 0
        for entry in entries:
            name = entry.name
            length += len(entry.mode) + len(name) + 22
            rel = folder + b"/" + name if folder else name
            if name in _UNSAFE_NAMES or b"/" in name or b"\0" in name:
                raise CorruptSnapshot(
                    f"{label} cannot be restored: tree {sha[:12]} "
                    f"({_shown(folder)}) holds the unsafe name {name!r}"
                )
            lower = name.lower()
            if lower == b".git" or (entry.mode == MODE_LINK and lower == b".gitmodules"):
                self.git_writes = False
            key = name + b"/" if entry.mode == MODE_TREE else name
            if key <= last:
                raise CorruptSnapshot(
                    f"{label} cannot be restored: tree {sha[:12]} ({_shown(folder)}) "
                    + ("names an entry twice" if key == last else "is not in git's order")
                )
            last = key
            if entry.mode == MODE_TREE:
                self.dirs.append(rel)
                below.append((rel, entry.sha))
            elif entry.mode in (MODE_FILE, MODE_EXEC, MODE_LINK):
                self.blobs.setdefault(entry.sha, []).append((rel, entry.mode))
            elif entry.mode == MODE_GITLINK:
                self.dirs.append(rel)  # a submodule's place: an empty folder, like git's
            else:
                raise CorruptSnapshot(
                    f"{label} cannot be restored: tree {sha[:12]} "
                    f"({_shown(folder)}) holds the unknown mode {entry.mode}"
                )
        if length != len(body):
            raise CorruptSnapshot(
                f"{label} cannot be restored: object {sha[:12]} ({_shown(folder)}) is corrupt"
            )

    def remember_size(self, objects: ObjectStore, tree: str) -> None:
        """Put the tree's bytes in the vault's memo of sizes: every blob was just written."""
        if all(sha in self.sizes for sha in self.blobs):
            total = sum(self.sizes[sha] * len(targets) for sha, targets in self.blobs.items())
            sizes.remember(objects.git_dir, tree, total)

    def unwritten(self, written: dict[bytes, tuple[str, str]]) -> bytes | None:
        """The first planned file not written with its planned blob and mode, or None when all
        were: then the written files make the planned tree again (its trees are canonical)."""
        for sha, targets in self.blobs.items():
            for rel, mode in targets:
                if written.get(rel) != (mode, sha):
                    return rel
        return None


def _read_packed_trees(
    objects: ObjectStore, wanted: list[tuple[bytes, str]], label: str
) -> dict[str, bytes]:
    """The bodies of the given trees (folder, id) from one `git cat-file --batch`, each checked
    against its id."""
    out: dict[str, bytes] = {}
    order = list(dict.fromkeys(sha for _, sha in wanted))
    where = {sha: folder for folder, sha in reversed(wanted)}
    with _CatFile(objects, order) as cat:
        for sha in order:
            header, data = cat.next_object()
            parts = header.split()
            if len(parts) != 3 or parts[0].decode() != sha or parts[1] != b"tree":
                raise _object_error(
                    objects,
                    label,
                    sha,
                    _shown(where[sha]),
                    VaultError("missing" if header.endswith(b" missing\n") else "unreadable"),
                )
            if data is None or object_id("tree", data) != sha:
                raise _object_error(objects, label, sha, _shown(where[sha]))
            out[sha] = data
    return out


class _CatFile:
    """One `git cat-file --batch` fed `order` by a thread of its own (so that neither side waits
    on a full pipe), read back in that order."""

    def __init__(self, objects: ObjectStore, order: list[str]):
        self.proc = subprocess.Popen(
            ["git", "--git-dir", str(objects.git_dir), "cat-file", "--batch", "--buffer"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=git_env(),
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.out = self.proc.stdout
        stdin = self.proc.stdin

        def feed() -> None:
            try:
                for i in range(0, len(order), _FEED_BATCH):
                    stdin.write(("\n".join(order[i : i + _FEED_BATCH]) + "\n").encode())
                stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass  # git stopped early; the reader reports why

        self.feeder = threading.Thread(target=feed, name="materialize-feed", daemon=True)
        self.feeder.start()

    def __enter__(self) -> _CatFile:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is not None:
            self.proc.kill()
        self.out.close()
        self.proc.wait()
        self.feeder.join()

    def next_object(self) -> tuple[bytes, bytes | None]:
        """The next header and, for a found object of at most _STREAM_ABOVE bytes, its content
        (None for a missing object)."""
        header = self.out.readline()
        parts = header.split()
        if len(parts) != 3 or not parts[2].isdigit():
            return header, None
        size = int(parts[2])
        data = self.out.read(size)
        self.out.read(1)
        return header, data if len(data) == size else None


class _Checkout:
    """`git read-tree -u` writing a tree into the new folder, started at once and left to run
    while the caller reads and checks the plan: git writes a file in a fraction of what it costs
    here. It runs on a git folder of its own (beside the new folder, removed afterwards) that
    reads the vault's objects and makes git write every blob byte for byte (see
    _CHECKOUT_ATTRIBUTES). Git neither checks a blob against its id nor knows `owner`: the
    caller checks every blob while git writes (`_verify_blobs`), and `finish` hands each file
    to its owner and takes its stat data."""

    def __init__(
        self,
        objects: ObjectStore,
        tree: str,
        root: Path,
        alternates: Sequence[Path] = (),
        owner: tuple[int, int] | None = None,
    ):
        self.tree = tree
        self.git_dir = root.with_name(root.name + "-git")
        self.proc: subprocess.Popen | None = None
        self.switcher: threading.Thread | None = None  # see `then`
        self.first_failed: bytes | None = None  # what git said when the first tree failed
        self.closed = False
        # Git makes every file and folder as `owner` (see `_as_owner`): nothing to hand over.
        self.as_owner = _as_owner(owner)
        self.owner = owner
        # Git's index holds the stat data of each file as it is (nothing was chowned since).
        self.index_true = False
        self.git_dir.mkdir(0o700)
        try:
            (self.git_dir / "refs").mkdir()
            (self.git_dir / "info").mkdir()
            (self.git_dir / "HEAD").write_bytes(b"ref: refs/heads/restore\n")
            (self.git_dir / "config").write_bytes(_CHECKOUT_CONFIG)
            (self.git_dir / "info" / "attributes").write_bytes(_CHECKOUT_ATTRIBUTES)
            self.env = git_env(
                GIT_DIR=str(self.git_dir),
                GIT_OBJECT_DIRECTORY=str(objects.objects_dir),
                GIT_INDEX_FILE=str(self.git_dir / "index"),
                GIT_WORK_TREE=str(root),
            )
            if alternates:
                self.env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = ":".join(map(str, alternates))
            self.proc = self._git(["read-tree", "-u", "--reset", tree])
        except BaseException:
            self.close()
            raise

    def _git(self, args: list[str]) -> subprocess.Popen:
        proc = subprocess.Popen(
            [*self.as_owner, "git", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=self.env,
        )
        # Git's checkout is what the new folder waits for: reading the folder being imported
        # or checking the blobs has time to spare. Raising its priority needs root's leave.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, proc.pid, _CHECKOUT_NICE)
        return proc

    def then(self, first: str, tree: str) -> None:
        """As soon as git has written `first` (the tree it was started on), take the folder on
        to `tree`: git's two-tree merge rewrites only the files that differ, and removes those
        `tree` does not hold. A thread waits for the first to start the second."""
        self.tree = tree
        if first != tree:
            self.switcher = threading.Thread(
                target=self._switch, args=(first, tree), name="materialize-switch", daemon=True
            )
            self.switcher.start()

    def _switch(self, first: str, tree: str) -> None:
        proc = self.proc
        assert proc is not None
        _, err = proc.communicate()
        if proc.returncode != 0:
            self.first_failed = err or f"exit code {proc.returncode}".encode()
        elif not self.closed:
            self.proc = self._git(["read-tree", "-u", "-m", first, tree])

    def finish(
        self,
        plan: _Plan,
        root: bytes,
        owner: tuple[int, int] | None,
        stats: dict[bytes, os.stat_result] | None,
    ) -> dict[bytes, tuple[str, str]] | None:
        """Once git is done: the folders it does not make (empty ones, a submodule's place),
        everything given to `owner`, and each file's stat data taken. Returns what was written
        (path → mode, blob id), or None when git did not write the tree as planned: the caller
        then writes it itself."""
        if self.switcher is not None:
            self.switcher.join()
        assert self.proc is not None
        _, err = self.proc.communicate()
        if self.first_failed is not None or self.proc.returncode != 0:
            err = self.first_failed or err
            lines = err.decode(errors="replace").strip().splitlines()
            self._fails(lines[-1] if lines else f"exit code {self.proc.returncode}")
            return None
        handed = owner is not None and bool(self.as_owner)  # git made them as `owner`
        uid = owner[0] if handed and owner is not None else None
        chown = None if handed else owner
        for rel in plan.dirs:
            path = root + b"/" + rel
            try:
                os.mkdir(path)
            except FileExistsError:
                st = os.lstat(path)
                if not statmod.S_ISDIR(st.st_mode):
                    self._fails(f"{_shown(rel)} is not a folder")
                    return None
                if handed:
                    continue
            if owner is not None:
                os.chown(path, *owner, follow_symlinks=False)
        out: dict[bytes, os.stat_result] = {} if stats is None else stats
        written: dict[bytes, tuple[str, str]] = {}
        for sha, targets in plan.blobs.items():
            size = plan.sizes.get(sha)  # None: not read (see `checked`), the first file's size
            for rel, mode in targets:
                path = root + b"/" + rel
                try:
                    if chown is not None:
                        os.chown(path, *chown, follow_symlinks=False)
                    st = os.lstat(path)
                except (FileNotFoundError, NotADirectoryError):
                    self._fails(f"{_shown(rel)} was not written")
                    return None
                kind = statmod.S_IFLNK if mode == MODE_LINK else statmod.S_IFREG
                if size is None:
                    size = plan.sizes[sha] = st.st_size
                if statmod.S_IFMT(st.st_mode) != kind or st.st_size != size:
                    self._fails(f"{_shown(rel)} is not blob {sha[:12]}")
                    return None
                if uid is not None and st.st_uid != uid:
                    self._fails(f"{_shown(rel)} does not belong to user {uid}")
                    return None
                out[rel] = st
                written[rel] = (mode, sha)
        self.index_true = chown is None
        return written

    def _fails(self, why: str) -> None:
        _log.warning(
            "git could not write tree %s (%s); writing it file by file", self.tree[:12], why
        )

    def close(self) -> None:
        """Stop git if it still runs (the plan or a blob was found wrong) and remove its folder."""
        self.closed = True  # no second tree is started from here on
        if self.switcher is not None:  # its thread reads the first process: stopped, not read
            first = self.proc
            if first is not None and first.poll() is None:
                first.kill()
            self.switcher.join()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            self.proc.communicate()
        shutil.rmtree(self.git_dir, ignore_errors=True)


def _as_owner(owner: tuple[int, int] | None) -> list[str]:
    """The command that runs git as `owner` where Cairn runs as root (nothing otherwise): its
    files and folders are then that user's from the start, where a chown of each afterwards
    costs a third of writing them. Git keeps its real user (root) and, of root's powers, only
    those to read and write past permissions: the folder it writes in stays closed to
    `owner` until the caller opens it (see `materialize`)."""
    if owner is None or os.geteuid() != 0 or _SETPRIV is None:
        return []
    argv = _setpriv_argv(_SETPRIV, *owner)
    return argv if _setpriv_works(_SETPRIV) else []


def _setpriv_argv(setpriv: str, uid: int, gid: int) -> list[str]:
    caps = "+dac_override,+dac_read_search"
    return [
        setpriv,
        f"--euid={uid}",
        f"--egid={gid}",
        "--clear-groups",
        f"--inh-caps={caps}",
        f"--ambient-caps={caps}",
        "--",
    ]


@functools.cache
def _setpriv_works(setpriv: str) -> bool:
    """Whether this system lets a process keep those powers as another user (ambient
    capabilities: Linux 4.3 and later, where nothing forbids them), tried once: otherwise every
    checkout would fail and be written here instead, with a warning each time."""
    try:
        probe = subprocess.run(
            [*_setpriv_argv(setpriv, 65534, 65534), "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    if probe.returncode != 0:
        _log.info(
            "files are handed to their owner after git writes them: setpriv cannot run git as them"
        )
    return probe.returncode == 0


def _verify_blobs(objects: ObjectStore, plan: _Plan, label: str) -> None:
    """Check every blob of the plan against its id (and note its size), as `_write_blobs` does
    before writing one: loose ones read here, the others from one `git cat-file --batch`."""
    objects_dir = os.fsencode(objects.objects_dir) + b"/"
    loose = _loose_ids(objects.objects_dir, plan.blobs)
    rest = []
    for sha in plan.blobs:
        if sha in loose:
            data = _read_loose(objects_dir + f"{sha[:2]}/{sha[2:]}".encode(), sha, b"blob")
            if data is False:
                raise _object_error(objects, label, sha, _shown(plan.blobs[sha][0][0]))
            if data is not None:
                plan.sizes[sha] = len(data)
                continue
        rest.append(sha)
    if not rest:
        return
    with _CatFile(objects, rest) as cat:
        out = cat.out
        for sha in rest:
            targets = plan.blobs[sha]
            size = _blob_size(objects, label, sha, targets, out.readline())
            if size > _STREAM_ABOVE:
                ok = _stream_large(out, size, sha, b"", [], None, {})
            else:
                ok = _next_blob(out, size, sha) is not None
            if not ok:
                raise _object_error(objects, label, sha, _shown(targets[0][0]))
            plan.sizes[sha] = size


def _next_blob(out: IO[bytes], size: int, sha: str) -> bytes | None:
    """The next blob of a `git cat-file --batch` stream, its header read (its `size` bytes and
    the newline after them); None when they are cut short or not blob `sha`."""
    data = out.read(size)
    out.read(1)
    check = hashlib.sha1(b"blob %d\0" % size)
    check.update(data)
    return data if len(data) == size and check.hexdigest() == sha else None


def _blob_size(
    objects: ObjectStore, label: str, sha: str, targets: list[tuple[bytes, str]], header: bytes
) -> int:
    """The size a `git cat-file --batch` header gives for the blob `sha`; raises CorruptSnapshot
    when the header says it is missing or not a blob."""
    parts = header.split()
    if len(parts) != 3 or parts[0].decode() != sha or parts[1] != b"blob":
        raise _object_error(
            objects,
            label,
            sha,
            _shown(targets[0][0]),
            VaultError("missing" if header.endswith(b" missing\n") else "unreadable"),
        )
    return int(parts[2])


def _write_blobs(
    objects: ObjectStore,
    plan: _Plan,
    root: bytes,
    label: str,
    owner: tuple[int, int] | None,
    stats: dict[bytes, os.stat_result] | None,
) -> dict[bytes, tuple[str, str]]:
    """Write every file of the plan, each blob checked against its id first; returns what was
    written (path → mode, blob id).

    Loose objects (what the recorder writes) are read, inflated and hashed by the writer threads
    themselves: fewer system calls than git's own loose-object reading, and zlib, hashlib and the
    file writes let the threads overlap. Packed and very large objects then stream from one
    `git cat-file --batch`.
    """
    written: dict[bytes, tuple[str, str]] = {}
    stats_out: dict[bytes, os.stat_result] = {} if stats is None else stats
    rest = _write_loose(objects, plan, root, label, written, owner, stats_out)
    if rest:
        _write_streamed(objects, plan, rest, root, label, written, owner, stats_out)
    return written


def _write_loose(
    objects: ObjectStore,
    plan: _Plan,
    root: bytes,
    label: str,
    written: dict[bytes, tuple[str, str]],
    owner: tuple[int, int] | None,
    stats: dict[bytes, os.stat_result],
) -> list[str]:
    """Write the blobs stored as loose objects; returns the ids left for git (packed or large)."""
    loose = _loose_ids(objects.objects_dir, plan.blobs)
    order = [sha for sha in plan.blobs if sha in loose]
    left_out = [sha for sha in plan.blobs if sha not in loose]
    if not order:
        return left_out
    objects_dir = os.fsencode(objects.objects_dir) + b"/"
    stop = threading.Event()

    def work(shas: list[str]) -> list[str]:
        left = []
        for sha in shas:
            if stop.is_set():
                break
            data = _read_loose(objects_dir + f"{sha[:2]}/{sha[2:]}".encode(), sha, b"blob")
            if data is None:
                left.append(sha)
                continue
            if data is False:
                raise _object_error(objects, label, sha, _shown(plan.blobs[sha][0][0]))
            plan.sizes[sha] = len(data)
            _write_targets(root, sha, data, plan.blobs[sha], owner, stats, written)
        return left

    def in_threads(shas: list[str]) -> list[str]:
        step = max(1, min(_LOOSE_BATCH, len(shas) // _WRITERS + 1))
        with ThreadPoolExecutor(_WRITERS, thread_name_prefix="materialize-write") as pool:
            futures = [pool.submit(work, shas[i : i + step]) for i in range(0, len(shas), step)]
            try:
                return [sha for future in futures for sha in future.result()]
            except BaseException:
                stop.set()  # the other batches end early: the error is what counts
                raise

    pace = _Pace(len(order))
    left: list[str] = []
    at = 0
    while pace.deciding and at < len(order):
        chunk = order[at : at + _PACE_PROBE]
        at += len(chunk)
        pace.before()
        left += work(chunk) if pace.inline else in_threads(chunk)
        pace.wrote(len(chunk))
    rest = order[at:]
    if rest:
        left += work(rest) if pace.inline else in_threads(rest)
    return left + left_out


def _loose_ids(objects_dir: Path, wanted: dict[str, list[tuple[bytes, str]]]) -> set[str]:
    """Which of the `wanted` ids are stored as loose objects, from one listing of each fan-out
    folder they fall in (a blob fetched with a repository is packed: no file to try to open)."""
    by_fan: dict[str, list[str]] = {}
    for sha in wanted:
        by_fan.setdefault(sha[:2], []).append(sha)
    found: set[str] = set()
    for fan, shas in by_fan.items():
        try:
            names = set(os.listdir(objects_dir / fan))
        except OSError:
            continue
        found.update(sha for sha in shas if sha[2:] in names)
    return found


def _read_loose(path: bytes, sha: str, kind: bytes) -> bytes | None | Literal[False]:
    """A loose object's content, verified; None when it is not stored loose (or is too large to
    read whole), False when it is corrupt or not of the `kind` expected."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        compressed = os.read(fd, _LOOSE_READ)
        if len(compressed) == _LOOSE_READ:  # a short read means the end of a regular file
            if os.fstat(fd).st_size > _STREAM_ABOVE:
                return None  # too large to hold in memory: git streams it
            parts = [compressed]
            while chunk := os.read(fd, _CHUNK):
                parts.append(chunk)
            compressed = b"".join(parts)
    finally:
        os.close(fd)
    try:
        inflate = zlib.decompressobj()
        limit = _STREAM_ABOVE + 64  # the content and its header
        raw = inflate.decompress(compressed, limit)
        if inflate.unconsumed_tail or len(raw) >= limit:
            return None  # too large to hold in memory: git streams it
        nul = raw.index(b"\0", 0, 64)
        found, _, size_text = raw[:nul].partition(b" ")
        if found != kind or not inflate.eof or len(raw) != nul + 1 + int(size_text):
            return False
    except (zlib.error, ValueError):
        return False
    if hashlib.sha1(raw).hexdigest() != sha:
        return False
    return raw[nul + 1 :]


def _write_streamed(
    objects: ObjectStore,
    plan: _Plan,
    order: list[str],
    root: bytes,
    label: str,
    written: dict[bytes, tuple[str, str]],
    owner: tuple[int, int] | None,
    stats: dict[bytes, os.stat_result],
) -> None:
    """Stream the given blobs from one `git cat-file --batch`, check each id, write the files."""
    writers = _Writers(root, written, owner, stats)
    pace = _Pace(len(order))
    try:
        with _CatFile(objects, order) as cat:
            out = cat.out
            for sha in order:
                targets = plan.blobs[sha]
                size = _blob_size(objects, label, sha, targets, out.readline())
                if size > _STREAM_ABOVE:
                    writers.drain()
                    ok = _stream_large(out, size, sha, root, targets, owner, stats)
                    if ok:
                        plan.sizes[sha] = size
                        for rel, mode in targets:
                            written[rel] = (mode, sha)
                else:
                    data = _next_blob(out, size, sha)
                    ok = data is not None
                    if data is not None:
                        plan.sizes[sha] = size
                        pace.before()
                        if pace.inline:
                            _write_targets(root, sha, data, targets, owner, stats, written)
                        else:
                            writers.add(sha, data, targets)
                        pace.wrote(len(targets), writers.drain)
                if not ok:
                    raise _object_error(objects, label, sha, _shown(targets[0][0]))
            writers.drain()
    finally:
        writers.stop()


class _Pace:
    """Who writes the files: the thread that reads and checks the blobs (inline), or the writer
    threads. Each way is timed on _PACE_PROBE files, inline first, and the faster one is kept.
    Where making a file costs the kernel little (tmpfs, a fast disk) the threads mostly pass
    the interpreter lock to one another: on this project's 2-vCPU machine they took 1.3-2x the
    time inline writing takes on tmpfs. Where it costs much (its virtual disk) they overlap
    that cost on both cores and take half the time."""

    def __init__(self, files: int):
        forced = _PACE
        if forced is None and (_WRITERS < 2 or files < 2 * _PACE_PROBE):
            forced = "inline"  # no threads to pass work to, or too few files to be worth it
        self.way = forced or "inline"
        self.deciding = forced is None
        self.count = 0
        self.began: float | None = None
        self.took: dict[str, float] = {}

    @property
    def inline(self) -> bool:
        return self.way == "inline"

    def before(self) -> None:
        """A file is about to be written (its timing starts with the first)."""
        if self.deciding and self.began is None:
            self.began = time.perf_counter()

    def wrote(self, files: int, drain: Callable[[], None] | None = None) -> None:
        """`files` were written or handed to the writers; `drain` waits for those handed."""
        if not self.deciding or self.began is None:
            return
        self.count += files
        if self.count < _PACE_PROBE:
            return
        if self.way == "threads" and drain is not None:
            drain()
        now = time.perf_counter()
        self.took[self.way] = (now - self.began) / self.count
        if self.way == "inline":
            self.way = "threads"
        else:
            self.deciding = False
            self.way = min(self.took, key=lambda way: self.took[way])
        self.count, self.began = 0, None


class _Writers:
    """A few threads writing verified blobs to their files, in batches, with bounded memory.
    The threads start with the first batch handed to them."""

    def __init__(
        self,
        root: bytes,
        written: dict[bytes, tuple[str, str]],
        owner: tuple[int, int] | None,
        stats: dict[bytes, os.stat_result],
    ):
        self.root = root
        self.written = written
        self.owner = owner
        self.stats = stats
        self.error: BaseException | None = None
        self.queue: queue.Queue = queue.Queue(maxsize=_WRITERS * 4)
        self.batch: list[tuple[str, bytes, list[tuple[bytes, str]]]] = []
        self.batch_bytes = 0
        self.threads: list[threading.Thread] = []

    def add(self, sha: str, data: bytes, targets: list[tuple[bytes, str]]) -> None:
        if not self.threads:
            self.threads = [
                threading.Thread(target=self._work, name=f"materialize-write-{i}", daemon=True)
                for i in range(_WRITERS)
            ]
            for thread in self.threads:
                thread.start()
        self.batch.append((sha, data, targets))
        self.batch_bytes += len(data)
        if len(self.batch) >= _WRITE_BATCH or self.batch_bytes >= _WRITE_BATCH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self.error is not None:
            raise self.error
        if self.batch:
            self.queue.put(self.batch)
            self.batch, self.batch_bytes = [], 0

    def drain(self) -> None:
        """Wait until everything handed over so far is on disk; raise the first write error."""
        self._flush()
        self.queue.join()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self.batch = []
        for _ in self.threads:
            self.queue.put(None)
        for thread in self.threads:
            thread.join()

    def _work(self) -> None:
        while True:
            batch = self.queue.get()
            try:
                if batch is None:
                    return
                if self.error is not None:
                    continue  # already failing: only empty the queue
                for sha, data, targets in batch:
                    _write_targets(
                        self.root, sha, data, targets, self.owner, self.stats, self.written
                    )
            except BaseException as exc:  # noqa: BLE001 - handed to the reader, which raises it
                self.error = exc
            finally:
                self.queue.task_done()


def _make_dirs(root: bytes, dirs: list[bytes], owner: tuple[int, int] | None) -> None:
    """Create the folders, a depth at a time, on the writer threads (each `owner`'s, if given:
    it is chowned before anything is made inside it)."""
    by_depth: dict[int, list[bytes]] = {}
    for rel in dirs:
        by_depth.setdefault(rel.count(b"/"), []).append(root + b"/" + rel)

    def make(paths: list[bytes]) -> None:
        for path in paths:
            os.mkdir(path)
            if owner is not None:
                os.chown(path, *owner, follow_symlinks=False)

    if len(dirs) < _PARALLEL_DIRS:
        make([root + b"/" + rel for rel in dirs])
        return

    with ThreadPoolExecutor(_WRITERS, thread_name_prefix="materialize-mkdir") as pool:
        for depth in sorted(by_depth):
            paths = by_depth[depth]
            step = max(1, min(256, len(paths) // _WRITERS + 1))
            for future in [
                pool.submit(make, paths[i : i + step]) for i in range(0, len(paths), step)
            ]:
                future.result()


def _write_targets(
    root: bytes,
    sha: str,
    data: bytes,
    targets: list[tuple[bytes, str]],
    owner: tuple[int, int] | None,
    stats: dict[bytes, os.stat_result],
    written: dict[bytes, tuple[str, str]],
) -> None:
    """Write one verified blob to each of its files; record their stat data and what was
    written there."""
    for rel, mode in targets:
        stats[rel] = _write_file(root + b"/" + rel, mode, data, owner)
        written[rel] = (mode, sha)


def _write_file(
    path: bytes, mode: str, data: bytes, owner: tuple[int, int] | None
) -> os.stat_result:
    """Write one file or link; returns its stat data as it stands once written."""
    if mode == MODE_LINK:
        os.symlink(data, path)
        if owner is not None:
            os.chown(path, *owner, follow_symlinks=False)
        return os.lstat(path)
    # Created with 0666/0777 and the process umask applied, as git does on checkout.
    fd = os.open(path, _FILE_FLAGS, 0o777 if mode == MODE_EXEC else 0o666)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        if data:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        return os.fstat(fd)
    finally:
        os.close(fd)


def _stream_large(
    out: IO[bytes],
    size: int,
    sha: str,
    root: bytes,
    targets: list[tuple[bytes, str]],
    owner: tuple[int, int] | None,
    stats: dict[bytes, os.stat_result],
) -> bool:
    """Copy a large blob to its files chunk by chunk, hashing as it goes; False if it is wrong."""
    fds = [
        os.open(root + b"/" + rel, _FILE_FLAGS, 0o777 if mode == MODE_EXEC else 0o666)
        for rel, mode in targets
    ]
    try:
        if owner is not None:
            for fd in fds:
                os.fchown(fd, *owner)
        check = hashlib.sha1(b"blob %d\0" % size)
        left = size
        while left:
            chunk = out.read(min(_CHUNK, left))
            if not chunk:
                return False
            left -= len(chunk)
            check.update(chunk)
            for fd in fds:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        out.read(1)
        for (rel, _mode), fd in zip(targets, fds, strict=True):
            stats[rel] = os.fstat(fd)
        return check.hexdigest() == sha
    finally:
        for fd in fds:
            os.close(fd)


def _rename_noreplace(src: Path, dst: Path) -> bool:
    """Rename `src` to `dst`; False (and nothing renamed) if `dst` appeared meanwhile."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        renameat2 = None
    if renameat2 is not None:
        if (
            renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
            == 0
        ):
            return True
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            return False
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), str(dst))
    if os.path.lexists(dst):  # a filesystem without renameat2: check, then rename
        return False
    os.rename(src, dst)
    return True


__all__ = ["materialize"]
