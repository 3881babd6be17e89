"""Bringing a dropped folder into its vault: the user's HEAD (for a git repository) plus a base
commit of the folder's files as they are on disk, tracked or not, ignored ones left out.

Owns reading the user's folder without ever writing to it, and the base commit. It does not name
the base (the caller records it under the workspace's base ref) nor create workspaces.

A repository's tracked files that `git status` finds unchanged (index and HEAD agree, and the
file on disk matches its index entry by stat data, or by content where the entry is racy) and
that no attribute or setting converts on checkout take their blob ids from HEAD's objects,
fetched into the vault: only modified and untracked files are read and hashed. The index is
read, never refreshed.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import stat as statmod
import subprocess
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from core.datadir import DataDir
from core.errors import InputError, VaultError
from core.vault import Vault
from core.vault.ignore import IgnoreRules
from core.vault.objects import MODE_GITLINK, MODE_LINK, MODE_TREE, ObjectStore, git_env
from core.vault.packs import process_alive, store_files
from core.vault.tree_index import FileRecord, TreeIndex, mode_of

# Where a fetch of the user's HEAD puts its objects until the import goes ahead (git's own
# prefix for quarantined objects, inside the vault's objects folder).
INCOMING_PREFIX = "tmp_objdir-cairn-import-"
# More loose objects than this in a repository: git's fetch packs them (and every other
# object) instead of their being copied and hashed one by one.
_LOOSE_COPIED_AT_MOST = 4096
# Copied packs of at most this many bytes in all are read whole and checked as they are copied
# (git takes a quarter of a second for 100,000 small objects); larger ones, a repository's
# long history or large files, are copied unread: what a workspace is written from is checked
# as it is read (see `materialize`), where reading every object of every commit would cost
# seconds, minutes for a large project.
_PACKS_CHECKED_UP_TO = 32 << 20
_LOOSE_READ_UP_TO = 16 << 20  # a larger loose object is copied unread, as a large pack is
_NAMED_PROBLEMS = 3  # how many unreadable paths an error names before it only counts
_GIT_WARNING = re.compile(rb"^warning: could not open directory '(.*)': (.*)$", re.M)
# `git ls-files -z --debug`: the stat data after each entry's line, and the seconds of its ctime.
_INDEX_STAT_DATA = re.compile(rb"\0  ctime: [^\n]*\n(?:[^\n]*\n){4}")
_INDEX_CTIME = re.compile(rb"\0  ctime: (\d+):")
_INDEX_STAT = re.compile(
    rb"\0  ctime: (\d+):(\d+)\n  mtime: (\d+):(\d+)\n  dev: \d+\tino: (\d+)\n"
    rb"  uid: (\d+)\tgid: (\d+)\n  size: (\d+)\tflags: [0-9a-f]+\n"
)
_U32 = 0xFFFFFFFF  # the index keeps 32 bits of each stat field
# Settings that decide whether `git status` trusts a file's stat data: always git's strictest
# (the person's own config may relax them; an edit must never be taken for the index's blob).
_STRICT_STATUS = [
    "-c", "core.fsmonitor=false",
    "-c", "core.untrackedCache=false",
    "-c", "core.trustctime=true",
    "-c", "core.checkStat=default",
    "-c", "core.filemode=true",
    "-c", "core.symlinks=true",
    "-c", "core.ignoreStat=false",
]  # fmt: skip
# Attributes under which the bytes on disk may differ from the blob (eol and text conversion,
# clean/smudge filters, $Id$ expansion, re-encoding): such files are hashed from disk.
_CONVERSION_ATTRS = {b"text", b"eol", b"crlf", b"filter", b"ident", b"working-tree-encoding"}


@dataclass
class ImportResult:
    kind: str  # "git" | "plain"
    head_commit: str | None  # the user's HEAD commit (None for a plain folder or an unborn branch)
    head_branch: str | None  # the user's current branch, if any
    base_commit: str  # a Cairn commit whose tree is the folder as imported
    base_tree: str
    files: int
    files_hashed: int = 0  # files read and hashed from disk (the rest came from git's index)
    index: TreeIndex | None = field(default=None, repr=False, compare=False)  # the base's tree
    # The repository's own object files were copied into the vault: see `_copy_user_objects`.
    objects_copied: bool = False
    # Every object the import stored was checked against its id on its way in (False: large
    # packs or objects were copied unread; whatever is read of them later is checked then).
    objects_checked: bool = True


# -- validating the dropped path -------------------------------------------------------------------


def check_importable(folder: Path, data_dir: DataDir) -> Path:
    """Resolve `folder` and make sure Cairn can import it; raise InputError (one line) if not."""
    path = _resolve_folder(Path(folder))
    data_root = data_dir.root.resolve()
    if path == data_root:
        raise InputError(f"{path} is Cairn's own data folder, not a project folder")
    if data_root in path.parents:
        raise InputError(f"{path} is inside Cairn's data folder ({data_root})")
    if path in data_root.parents:
        raise InputError(
            f"{path} contains Cairn's data folder ({data_root}); choose a folder that does not"
        )
    git_dir = next((p for p in (path, *path.parents) if p.name == ".git"), None)
    if git_dir is not None:
        raise InputError(
            f"{path} is {'inside ' if git_dir != path else ''}the git folder of the repository "
            f"{git_dir.parent}, not a project folder",
            hint=f"drop {git_dir.parent} itself",
        )
    return path


def enclosing_repository(folder: Path) -> Path | None:
    """The git work tree `folder` lies inside (not at its top), or None: importing it takes the
    folder's files as they are, not the repository's history."""
    for parent in folder.parents:
        try:
            if (parent / ".git").exists():
                return parent
        except OSError:
            return None
    return None


def inside_repository_note(folder: Path) -> str | None:
    """One line for a folder imported from inside a repository's work tree, or None."""
    top = enclosing_repository(folder)
    if top is None:
        return None
    return (
        f"{folder} is inside the git repository {top}: its files are imported as a plain folder, "
        f"without the repository's history (drop {top} to work on the whole repository)"
    )


def _resolve_folder(folder: Path) -> Path:
    shown = folder.expanduser()
    try:
        path = shown.resolve()
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"{shown} does not exist") from None
    except PermissionError:
        raise InputError(f"no permission to reach {shown}") from None
    except (RuntimeError, OSError) as exc:  # a symlink loop, a name too long...
        reason = getattr(exc, "strerror", None) or exc
        raise InputError(f"{shown} cannot be opened: {reason}") from None
    if not statmod.S_ISDIR(st.st_mode):
        kind = "a file" if statmod.S_ISREG(st.st_mode) else "not a regular file"
        raise InputError(f"{shown} is {kind}, not a folder")
    try:
        with os.scandir(path) as it:
            next(it, None)
    except PermissionError:
        raise InputError(f"no permission to read the folder {shown}") from None
    return path


# -- importing -------------------------------------------------------------------------------------


def import_folder(
    vault: Vault, folder: Path, *, on_head: Callable[[str, Path], None] | None = None
) -> ImportResult:
    """Record `folder` in `vault` and return its base commit; the folder is only ever read.

    Unreadable files or folders fail the import before anything is written to the vault. On
    return the base's objects are durable (synced), so the caller may point a ref at it; no ref
    is left behind by the import itself.

    `on_head(commit, objects)` is told the repository's HEAD commit and its objects folder as
    soon as they are known, before the folder is read (the base is often that commit's tree,
    or close to it): the caller may start writing a workspace from it meanwhile.
    """
    path = _resolve_folder(Path(folder))
    if os.path.lexists(path / ".git"):
        return _import_git(vault, path, on_head)
    return _import_plain(vault, path)


@dataclass
class _Listing:
    """What will go into the base, found before anything is written."""

    files: dict[str, tuple[str, os.stat_result | None, str | None]] = field(default_factory=dict)
    # rel → (mode, lstat for files read from disk, blob/commit id for index-only entries)
    index_blobs: dict[str, tuple[str, str]] = field(default_factory=dict)
    # rel → (mode, blob id), for tracked files git status finds unchanged: HEAD's blob
    dirs: set[str] = field(default_factory=set)  # folders to keep even when empty
    nested: list[str] = field(default_factory=list)  # untracked repositories: scanned as files
    problems: list[str] = field(default_factory=list)


def _import_plain(vault: Vault, folder: Path) -> ImportResult:
    listing = _walk_plain(folder, IgnoreRules(folder))
    _raise_unreadable(folder, _shown_problems(listing.problems))
    index = TreeIndex()
    problems: list[str] = []
    files = _record_plain(index, vault.objects, folder, "", listing, problems)
    _raise_unreadable(folder, problems)
    tree = index.flush(vault.objects)
    commit = _write_base(vault, tree, None, kind="plain", branch=None, files=files)
    return ImportResult("plain", None, None, commit, tree, files, files, index)


def _import_git(
    vault: Vault, folder: Path, on_head: Callable[[str, Path], None] | None
) -> ImportResult:
    repo = _UserRepo(folder)
    repo.check_top()
    head = repo.head_commit()
    branch = repo.head_branch()
    if head is not None and on_head is not None:
        on_head(head, repo.git_path("objects"))
    fetch = _HeadFetch(vault, repo, head) if head is not None else None
    try:
        listing = _list_work_tree(repo)
        # Untracked repositories inside: recorded as plain files, under their own ignore rules
        # (the way the workspace's recorder will see them: their `.git` left out).
        nested = {
            rel: _walk_plain(folder / rel, IgnoreRules(folder / rel)) for rel in listing.nested
        }
        for rel, sub in nested.items():
            listing.problems += _shown_problems(sub.problems, rel)
        _raise_unreadable(folder, listing.problems)
    except BaseException:
        if fetch is not None:
            fetch.discard()
        raise

    # Nothing has been written to the vault so far; from here on it is.
    objects = vault.objects
    if fetch is not None:
        fetch.admit()
    index = TreeIndex()
    for rel in sorted(listing.dirs):
        index.ensure_dir(rel)
    for rel, (mode, blob) in listing.index_blobs.items():
        index.set_file(rel, FileRecord(mode, blob))
    missing_blobs: list[tuple[str, str, str]] = []
    problems: list[str] = []
    to_hash: list[tuple[str, str, os.stat_result]] = []
    for rel, (mode, st, sha) in listing.files.items():
        if st is None:
            assert sha is not None
            if mode == MODE_GITLINK or objects.has_object(sha):
                index.set_file(rel, FileRecord(mode, sha))
            else:
                missing_blobs.append((rel, mode, sha))
        else:
            to_hash.append((rel, mode, st))
    for rel, mode, blob in _hash_files(objects, folder, to_hash, problems):
        index.set_file(rel, FileRecord(mode, blob))
    for rel, mode, sha in missing_blobs:
        index.set_file(rel, FileRecord(mode, objects.write_blob(repo.read_blob(sha))))
    hashed = len(to_hash)
    for rel, sub in nested.items():
        hashed += _record_plain(index, objects, folder / rel, rel, sub, problems)
    _raise_unreadable(folder, problems)
    tree = index.flush(objects)
    files = index.file_count()
    commit = _write_base(vault, tree, head, kind="git", branch=branch, files=files)
    copied = fetch is not None and fetch.copied
    return ImportResult(
        "git",
        head,
        branch,
        commit,
        tree,
        files,
        hashed,
        index,
        objects_copied=copied,
        objects_checked=fetch is None or not fetch.unchecked,
    )


def _is_attributes_file(rel: str) -> bool:
    return rel == ".gitattributes" or rel.endswith("/.gitattributes")


def _hash_files(
    objects: ObjectStore,
    folder: Path,
    files: list[tuple[str, str, os.stat_result]],
    problems: list[str],
) -> Iterator[tuple[str, str, str]]:
    """Store each file's bytes as a blob (many at once in one pack: see `packs.store_files`);
    yields (rel, mode, blob id). A file deleted since it was listed is left out, as
    if it had been deleted before; one closed to us since is added to `problems`."""
    stored = store_files(objects, [(os.path.join(folder, rel), st) for rel, _mode, st in files])
    for (rel, mode, _st), got in zip(files, stored, strict=True):
        if isinstance(got, str):
            yield rel, mode, got
        elif isinstance(got, PermissionError):
            problems.append(rel)
        elif not isinstance(got, (FileNotFoundError, NotADirectoryError)):
            raise InputError(
                f"cannot import {folder}: {rel} cannot be read: {got.strerror or got}"
            ) from None


def _record_plain(
    index: TreeIndex,
    objects: ObjectStore,
    root: Path,
    at: str,
    listing: _PlainListing,
    problems: list[str],
) -> int:
    """Put a plain folder's listed folders and files (stored as blobs) into `index` under the
    folder `at` ("" for its top); returns how many files were recorded."""
    prefix = f"{at}/" if at else ""
    if at:
        index.ensure_dir(at)
    for rel in listing.dirs:
        index.ensure_dir(prefix + rel)
    found: list[str] = []
    files = 0
    for rel, mode, blob in _hash_files(objects, root, listing.files, found):
        index.set_file(prefix + rel, FileRecord(mode, blob))
        files += 1
    problems += [prefix + rel for rel in found]
    return files


def _write_base(
    vault: Vault, tree: str, head: str | None, *, kind: str, branch: str | None, files: int
) -> str:
    message = (
        f"Cairn base ({kind} import)\n\n"
        f"Cairn-Trigger: base\n"
        f"Cairn-Run: -\n"
        f"Cairn-Import: {kind}\n"
        f"Cairn-Head: {head or '-'}\n"
        f"Cairn-Branch: {branch or '-'}\n"
        f"Cairn-Files: {files}\n"
    )
    commit = vault.objects.write_commit(tree, [head] if head else [], message)
    vault.objects.sync()
    return commit


class _HeadFetch:
    """The objects of the user's HEAD, fetched into a folder of their own beside the vault's
    objects while the work tree is listed (git's own quarantine for incoming objects), and
    moved among the vault's objects only once the import goes ahead: an import refused for an
    unreadable file leaves the vault as it was. No ref is written for them.

    Into a vault that holds no object yet, the repository's own object files are copied first
    (`_copy_user_objects`) and, unless large, checked (`_check_copies`): git then finds HEAD's
    history complete there and transfers nothing, where its transfer would pack, inflate and
    hash every object again (4.5 s of a 700 MB tree's import). Copy, check and fetch run on a
    thread of their own, beside the listing."""

    def __init__(self, vault: Vault, repo: _UserRepo, head: str):
        self.vault = vault
        folder = repo.folder
        objects_dir = vault.objects.objects_dir
        self.incoming = objects_dir / f"{INCOMING_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        for stale in objects_dir.glob(f"{INCOMING_PREFIX}*"):
            if not process_alive(stale.name[len(INCOMING_PREFIX) :].partition("-")[0]):
                shutil.rmtree(stale, ignore_errors=True)  # what an import that died left
        shallow = vault.git_dir / "shallow"
        try:
            self.shallow_before = shallow.read_bytes() if shallow.exists() else None
            self.incoming.mkdir()
        except OSError as exc:
            raise VaultError(
                f"cannot write to the vault {vault.git_dir}: {exc.strerror or exc}"
            ) from None
        env = git_env(
            GIT_PROTOCOL="version=2",
            GIT_OBJECT_DIRECTORY=str(self.incoming),
            GIT_ALTERNATE_OBJECT_DIRECTORIES=str(objects_dir),
        )
        argv = [
            "git",
            "--git-dir",
            str(vault.git_dir),
            "-c",
            "maintenance.auto=false",
            "fetch",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--quiet",
            "--update-shallow",
            str(folder),
            head,
        ]
        self.folder = folder
        self.repo = repo
        self.copied = False  # the repository's object files were copied in and checked
        self.corrupt: str | None = None  # the object or pack found corrupt when copied
        self.unchecked = False  # objects too large to read whole were copied unread
        self.proc: subprocess.Popen | None = None
        self.failed: BaseException | None = None
        seed = _vault_is_empty(objects_dir)
        self.starter = threading.Thread(
            target=self._start, args=(argv, env, seed), name="import-fetch", daemon=True
        )
        self.starter.start()

    def _start(self, argv: list[str], env: dict[str, str], seed: bool) -> None:
        try:
            if seed:
                try:
                    found = _copy_user_objects(self.repo, self.incoming)
                    if found is not None:
                        packs, self.unchecked = found
                        if sum(p.stat().st_size for p in packs) > _PACKS_CHECKED_UP_TO:
                            self.copied = self.unchecked = True
                        else:
                            self.corrupt = _check_copies(self.vault, packs)
                            self.copied = self.corrupt is None
                except _CorruptCopy as exc:
                    self.corrupt = str(exc)
                except (OSError, InputError):
                    pass
                if not self.copied:  # cut short or not as named: git fetches everything instead
                    self.unchecked = False
                    shutil.rmtree(self.incoming, ignore_errors=True)
                    self.incoming.mkdir()
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
            )
        except BaseException as exc:  # noqa: BLE001 - raised by `admit`
            self.failed = exc

    def admit(self) -> None:
        """Wait for the fetch, then move what it brought among the vault's objects (each pack's
        data before its index, so that git never finds an index without its pack)."""
        self.starter.join()
        if self.failed is not None or self.proc is None:
            self.discard()
            reason = self.failed.strerror if isinstance(self.failed, OSError) else self.failed
            raise VaultError(f"cannot fetch the history of {self.folder}: {reason}")
        _out, err = self.proc.communicate()
        if self.proc.returncode != 0:
            lines = err.decode(errors="replace").strip().splitlines()
            reason = lines[-1] if lines else f"git fetch exited {self.proc.returncode}"
            if self.corrupt is not None:  # git's own words do not say which
                reason = f"{self.corrupt} is corrupt"
            self.discard()
            raise InputError(f"the history of {self.folder} cannot be read: {reason}")
        objects_dir = self.vault.objects.objects_dir
        found = sorted(
            (p for p in self.incoming.rglob("*") if p.is_file()),
            key=lambda p: (p.suffix == ".idx", str(p)),
        )
        for path in found:
            if path.suffix == ".keep":
                continue  # fetch's own, while it had no ref to protect the pack
            target = objects_dir / path.relative_to(self.incoming)
            target.parent.mkdir(exist_ok=True)
            os.replace(path, target)
        shutil.rmtree(self.incoming, ignore_errors=True)

    def discard(self) -> None:
        """Leave the vault as it was before the fetch. The fetch is let finish, never killed: a
        git fetch killed while it updates the list of shallow commits leaves git's lock of it
        behind, and every later fetch of a shallow clone into the vault would fail on it."""
        self.starter.join()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.communicate()
        shutil.rmtree(self.incoming, ignore_errors=True)
        self._forget_shallow()

    def _forget_shallow(self) -> None:
        """Take back the lines the fetch added to the vault's list of shallow commits, under
        git's own lock of it; left as it is while git writes it or another import of the folder
        (which may have added the same lines) is under way, where a stray line is harmless."""
        objects_dir = self.vault.objects.objects_dir
        if any(objects_dir.glob(f"{INCOMING_PREFIX}*")):
            return
        shallow = self.vault.git_dir / "shallow"
        lock = self.vault.git_dir / "shallow.lock"
        replaced = False
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            return
        try:
            try:
                now = shallow.read_bytes()
            except FileNotFoundError:
                now = b""
            before = set((self.shallow_before or b"").splitlines())
            kept = [line for line in now.splitlines() if line in before]
            if kept == now.splitlines():
                return
            if not kept:
                shallow.unlink(missing_ok=True)
                return
            os.write(fd, b"".join(line + b"\n" for line in kept))
            os.close(fd)
            fd = -1
            os.replace(lock, shallow)
            replaced = True  # the lock is gone with it: a lock there now is someone else's
        finally:
            if fd >= 0:
                os.close(fd)
            if not replaced:
                lock.unlink(missing_ok=True)


def _vault_is_empty(objects_dir: Path) -> bool:
    """Whether the vault holds no object yet (an import's quarantines aside)."""
    try:
        names = os.listdir(objects_dir)
        packs = os.listdir(objects_dir / "pack") if "pack" in names else []
        loose = [n for n in names if len(n) == 2 and os.listdir(objects_dir / n)]
    except OSError:  # something unlike a vault of git's: no copying into it
        return False
    return not loose and not any(n.endswith(".pack") for n in packs)


def _copy_user_objects(repo: _UserRepo, incoming: Path) -> tuple[list[Path], bool] | None:
    """Copy the repository's object files (each pack with its index, and the loose objects,
    each hashed as it is copied) into the fetch's quarantine `incoming`, read-only as git keeps
    them; return the packs copied, for `_check_copies`, and whether a loose object too large
    to hold in memory was copied unread. None (nothing copied) for a repository that does not
    hold every object itself (alternates, a shallow or a partial clone), or holds more loose
    objects than git's fetch takes longer to pack than this to hash. Raises _CorruptCopy for a
    loose object whose bytes are not its id."""
    objects = repo.git_path("objects")
    if repo.git_path("shallow").exists() or (objects / "info" / "alternates").exists():
        return None
    pack_dir = objects / "pack"
    packs = set(os.listdir(pack_dir)) if pack_dir.is_dir() else set()
    if any(name.endswith(".promisor") for name in packs):
        return None
    loose: list[tuple[str, str]] = []
    for fan in sorted(os.listdir(objects)):
        if len(fan) == 2 and all(c in "0123456789abcdef" for c in fan):
            loose += [(fan, name) for name in os.listdir(objects / fan) if len(name) == 38]
    if len(loose) > _LOOSE_COPIED_AT_MOST:
        return None
    copies: list[tuple[Path, Path]] = []
    copied: list[Path] = []
    for name in sorted(packs):
        index = name[: -len(".pack")] + ".idx"
        if name.startswith("pack-") and name.endswith(".pack") and index in packs:
            copies += [
                (pack_dir / name, incoming / "pack" / name),
                (pack_dir / index, incoming / "pack" / index),
            ]
            copied.append(incoming / "pack" / name)
    for source, target in copies:
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(source, target)
        os.chmod(target, 0o444)
    unread = False
    for fan, name in loose:
        source, target = objects / fan / name, incoming / fan / name
        (incoming / fan).mkdir(exist_ok=True)
        if source.stat().st_size > _LOOSE_READ_UP_TO:
            shutil.copyfile(source, target)
            unread = True
        else:
            data = source.read_bytes()
            if not _loose_object_is(data, fan + name):
                raise _CorruptCopy(f"its object {fan}{name[:10]}")
            target.write_bytes(data)
        os.chmod(target, 0o444)
    return copied, unread


def _loose_object_is(data: bytes, sha: str) -> bool:
    """Whether `data`, a loose object file, is whole and hashes to `sha`."""
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(data)
        nul = raw.index(b"\0", 0, 64)
        size = int(raw[:nul].partition(b" ")[2])
    except (zlib.error, ValueError):
        return False
    return inflate.eof and len(raw) == nul + 1 + size and hashlib.sha1(raw).hexdigest() == sha


class _CorruptCopy(Exception):
    """A copied object file is not what its name says (the message names it): git's fetch
    brings HEAD's history instead, and fails where HEAD needs that object."""


def _check_copies(vault: Vault, packs: list[Path]) -> str | None:
    """The first of the copied `packs` holding an object that does not hash to the id its
    index gives it (in words), or None: git reads each pack whole and compares the index it
    would write with the one copied (`index-pack --verify`), all packs at once."""
    checks = [
        subprocess.Popen(
            ["git", "--git-dir", str(vault.git_dir), "index-pack", "--verify", str(pack)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=git_env(),
        )
        for pack in packs
    ]
    failed = [pack for pack, check in zip(packs, checks, strict=True) if check.wait() != 0]
    return f"its pack {failed[0].name}" if failed else None


# -- reading the user's repository ---------------------------------------------------------------


def _user_env() -> dict[str, str]:
    """The person's own git setup (their excludes apply), minus anything that could write."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return env


class _UserRepo:
    """Read-only git commands against the person's repository: none of them writes to it."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.env = _user_env()

    def git(
        self, args: list[str], *, input: bytes | None = None, ok: tuple[int, ...] = (0,)
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["git", "-C", str(self.folder), "-c", "core.fsmonitor=false", *args],
            input=input,
            capture_output=True,
            env=self.env,
        )
        if proc.returncode not in ok:
            err = proc.stderr.decode(errors="replace").strip().splitlines()
            said = [line for line in err if line.startswith(("fatal:", "error:"))] or err
            reason = said[0] if said else f"git {args[0]} exited {proc.returncode}"
            raise InputError(f"{self.folder} is a git repository that git cannot read: {reason}")
        return proc

    def check_top(self) -> None:
        """The folder must be the top of its own work tree (a stray `.git` could make git
        answer for a repository further up)."""
        top = self.git(["rev-parse", "--show-toplevel"]).stdout.decode().strip()
        if not top or Path(top).resolve() != self.folder:
            raise InputError(f"{self.folder}/.git is not a usable git repository")

    def head_commit(self) -> str | None:
        proc = self.git(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", "HEAD^{commit}"], ok=(0, 1)
        )
        return (proc.stdout.decode().strip() or None) if proc.returncode == 0 else None

    def head_branch(self) -> str | None:
        proc = self.git(["symbolic-ref", "--quiet", "--short", "HEAD"], ok=(0, 1))
        return (proc.stdout.decode().strip() or None) if proc.returncode == 0 else None

    def ls_files(self, args: list[str]) -> tuple[list[bytes], bytes]:
        proc = self.git(["ls-files", "-z", *args])
        return [p for p in proc.stdout.split(b"\0") if p], proc.stderr

    def ignored(self, paths: list[str]) -> set[str]:
        if not paths:
            return set()
        data = b"\0".join(os.fsencode(p) for p in paths) + b"\0"
        proc = self.git(["check-ignore", "-z", "--stdin", "--no-index"], input=data, ok=(0, 1))
        return {os.fsdecode(p) for p in proc.stdout.split(b"\0") if p}

    def read_blob(self, sha: str) -> bytes:
        return self.git(["cat-file", "blob", sha]).stdout

    def work_tree(self) -> _WorkTree:
        """The index's entries and what `git status` says of the work tree, read side by side
        (three git processes at once: the index, the status, the untracked folders)."""
        before = self._index_files_stamp()
        with ThreadPoolExecutor(3, thread_name_prefix="import-list") as pool:
            index = pool.submit(self.git, ["ls-files", "-z", "--stage", "-v", "--debug"])
            status = pool.submit(
                self.git,
                [
                    *_STRICT_STATUS,
                    "status",
                    "--porcelain=v2",
                    "-z",
                    "--untracked-files=all",
                    "--ignore-submodules=all",
                    "--no-renames",
                ],
            )
            collapsed = pool.submit(
                self.ls_files, ["--others", "--exclude-standard", "--directory"]
            )
            racy_from = min(m for m, _ in before) // 1_000_000_000 if before else None
            listed = _parse_index_listing(index.result().stdout, racy_from)
            changed, untracked = _parse_status(status.result().stdout)
            folders, folder_warnings = collapsed.result()
        after = self._index_files_stamp()
        if listed is None:  # not read whole: the entries from a plain listing, vouching for none
            plain = self.git(["ls-files", "-z", "--stage", "-v"]).stdout
            listed = _parse_plain_listing(plain), None
        entries, ctime_racy = listed
        trusted = ctime_racy is not None and before is not None and before == after
        if trusted and ctime_racy:
            top = os.fsencode(self.folder) + b"/"
            changed |= {
                rel
                for rel, recorded in ctime_racy.items()
                if not _stat_unchanged(top + os.fsencode(rel), recorded)
            }
        return _WorkTree(
            entries,
            changed if trusted else None,
            untracked,
            folders,
            [os.fsdecode(m.group(1)) for m in _GIT_WARNING.finditer(status.result().stderr)]
            + [os.fsdecode(m.group(1)) for m in _GIT_WARNING.finditer(folder_warnings)],
        )

    def git_path(self, name: str) -> Path:
        """Where the repository keeps `name` (its index, objects, shallow list), wherever its git
        folder is (a worktree's, a submodule's)."""
        out = os.fsdecode(self.git(["rev-parse", "--git-path", name]).stdout.strip())
        return Path(out) if os.path.isabs(out) else self.folder / out

    def _index_files_stamp(self) -> list[tuple[int, int]] | None:
        """(mtime, ctime) of the index and of any shared index it may split into."""
        index = self.git_path("index")
        try:
            stamps = [(st.st_mtime_ns, st.st_ctime_ns) for st in [os.stat(index)]]
            for entry in os.scandir(index.parent):
                if entry.name.startswith("sharedindex."):
                    st = entry.stat()
                    stamps.append((st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            return None
        return sorted(stamps)

    def converted(self, paths: list[str], *, cached: bool = False) -> set[str]:
        """Those of `paths` whose bytes on disk may differ from their blob: a text or eol
        conversion (by attribute, or by core.autocrlf for files with no `text` attribute), a
        filter, ident or working-tree-encoding attribute (`cached`: the index's attributes)."""
        autocrlf = self.config("core.autocrlf")
        crlf_by_setting = autocrlf is not None and autocrlf.lower() not in (
            "false",
            "no",
            "off",
            "0",
            "",
        )
        data = b"".join(os.fsencode(p) + b"\0" for p in paths)
        # `--all` names only the attributes a path has (set, unset or a value), so a tree with
        # few attributes answers in a few bytes instead of one line per path and attribute.
        proc = self.git(
            ["check-attr", "-z", "--stdin", *(["--cached"] if cached else []), "--all"],
            input=data,
        )
        fields = proc.stdout.split(b"\0")
        out: set[str] = set()
        text_given: set[str] = set()
        for i in range(0, len(fields) - 2, 3):
            attr, value = fields[i + 1], fields[i + 2]
            if attr not in _CONVERSION_ATTRS:
                continue
            if attr == b"text":
                text_given.add(os.fsdecode(fields[i]))
            if value != b"unset":
                out.add(os.fsdecode(fields[i]))
        if crlf_by_setting:  # core.autocrlf converts every file whose `text` is unspecified
            out.update(p for p in paths if p not in text_given)
        return out

    def config(self, key: str) -> str | None:
        proc = self.git(["config", "--get", key], ok=(0, 1))
        return proc.stdout.decode(errors="replace").strip() if proc.returncode == 0 else None


class _IndexEntry(NamedTuple):
    tag: str  # `git ls-files -v`: H cached, S skip-worktree; lower case: assume-unchanged
    mode: str
    sha: str
    stage: str
    rel: str

    @classmethod
    def parse(cls, line: bytes) -> _IndexEntry:
        meta, tab, raw_path = line.partition(b"\t")
        tag, mode, sha, stage = meta.decode().split(" ")
        if not tab:
            raise ValueError("no path")
        return cls(tag, mode, sha, stage, os.fsdecode(raw_path))


@dataclass
class _WorkTree:
    """What git says of a repository's work tree, before anything is read from it."""

    entries: list[_IndexEntry]
    changed: set[str] | None  # tracked paths git status finds changed; None: trust no entry
    untracked: list[str]  # not ignored; an untracked repository as "path/"
    folders: list[bytes]  # `ls-files --others --directory`: the topmost of each untracked group
    unreadable: list[str]  # folders git could not open


def _parse_index_listing(
    data: bytes, racy_from: int | None
) -> tuple[list[_IndexEntry], dict[str, tuple[int, ...]] | None] | None:
    """`git ls-files -z --stage -v --debug`: every entry, and the stat data git recorded for
    those whose ctime falls in or after the second `racy_from` the index was written in (None
    when `racy_from` is); None when the listing is not entries of that form, one after the
    other. git compares whole seconds of a ctime and its racy check looks at the mtime alone, so
    an edit in that second that kept the mtime would pass its status: such an entry is trusted
    only while the file's stat data is still what git recorded, to the nanosecond."""
    # Each entry is its line, a NUL, then five lines of stat data. A path holds no NUL, so the
    # stat data can only start right after one: splitting there leaves the entries' lines.
    lines = _INDEX_STAT_DATA.split(data)
    ctimes = _INDEX_CTIME.findall(data)
    if lines.pop() or len(lines) != len(ctimes) or data.count(b"\0") != len(ctimes):
        return None  # not a whole listing of entries and their stat data, one NUL each
    try:
        entries = [_IndexEntry.parse(line) for line in lines]
    except ValueError:
        return None
    if racy_from is None:
        return entries, None
    racy = {i for i, sec in enumerate(ctimes) if int(sec) >= racy_from}
    if not racy:
        return entries, {}
    stats = _INDEX_STAT.findall(data)
    if len(stats) != len(entries):
        return entries, None  # stat data of a form not read here: nothing is vouched for
    return entries, {entries[i].rel: tuple(map(int, stats[i])) for i in racy}


def _parse_plain_listing(data: bytes) -> list[_IndexEntry]:
    """`git ls-files -z --stage -v`: every entry. A line of another form refuses the import in
    words naming it, instead of a bare error from deep inside the import."""
    entries = []
    for line in data.split(b"\0"):
        if not line:
            continue
        try:
            entries.append(_IndexEntry.parse(line))
        except ValueError:
            shown = line.decode(errors="replace")[:200]
            raise InputError(
                f"cannot read git's listing of the repository's index: a line reads {shown!r}"
            ) from None
    return entries


def _stat_unchanged(path: bytes, recorded: tuple[int, ...]) -> bool:
    """Whether the file's stat data is still what the index recorded for it: ctime and mtime
    to the nanosecond, inode, owner and size (what `git status` compares, in git's 32 bits)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    c_s, c_ns, m_s, m_ns, ino, uid, gid, size = recorded
    return (
        divmod(st.st_ctime_ns, 1_000_000_000) == (c_s, c_ns)
        and divmod(st.st_mtime_ns, 1_000_000_000) == (m_s, m_ns)
        and st.st_ino & _U32 == ino
        and st.st_uid & _U32 == uid
        and st.st_gid & _U32 == gid
        and st.st_size & _U32 == size
    )


def _parse_status(data: bytes) -> tuple[set[str], list[str]]:
    """`git status --porcelain=v2 -z`: the tracked paths that differ from HEAD or from the
    index in any way (staged, changed on disk, unmerged), and the untracked ones."""
    changed: set[str] = set()
    untracked: list[str] = []
    fields = data.split(b"\0")
    i = 0
    while i < len(fields):
        field_ = fields[i]
        i += 1
        kind = field_[:2]
        if kind == b"1 ":
            changed.add(os.fsdecode(field_.split(b" ", 8)[8]))
        elif kind == b"u ":
            changed.add(os.fsdecode(field_.split(b" ", 10)[10]))
        elif kind == b"2 ":  # a rename or copy, should git report one: both paths count
            changed.add(os.fsdecode(field_.split(b" ", 9)[9]))
            changed.add(os.fsdecode(fields[i]))
            i += 1
        elif kind == b"? ":
            untracked.append(os.fsdecode(field_[2:]))
        elif field_ and kind not in (b"! ", b"# "):
            raise InputError(f"git status printed a line Cairn cannot read: {field_[:80]!r}")
    return changed, untracked


def _list_work_tree(repo: _UserRepo) -> _Listing:
    """The work tree as `git status` sees it: index entries present on disk (with their disk
    content), untracked files that are not ignored, and empty folders that are not ignored.
    A tracked file git status finds unchanged (and no conversion reaches) is vouched for by
    its index entry, whose blob is HEAD's; every other file is looked at here."""
    folder = repo.folder
    top = str(folder) + os.sep
    listing = _Listing()
    real_dirs: dict[str, bool] = {"": True}

    def is_real_dir(rel: str) -> bool:
        # Every folder above a path must be a folder, not a link to one: links are never followed.
        known = real_dirs.get(rel)
        if known is None:
            parent = rel.rpartition("/")[0]
            try:
                known = is_real_dir(parent) and statmod.S_ISDIR(os.lstat(top + rel).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                known = False
            except PermissionError:
                listing.problems.append(rel + "/")
                known = False
            real_dirs[rel] = known
        return known

    readable = _Readability()

    def add_from_disk(rel: str) -> bool:
        if not is_real_dir(rel.rpartition("/")[0]):
            return False
        try:
            st = os.lstat(top + rel)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except PermissionError:
            listing.problems.append(rel)
            return False
        mode = mode_of(st)
        if mode is None or mode == MODE_TREE:
            return False
        if mode != MODE_LINK and not readable(top + rel, st):
            listing.problems.append(rel)
            return False
        listing.files[rel] = (mode, st, None)
        return True

    state = repo.work_tree()
    changed = state.changed
    clean: dict[str, tuple[str, str]] = {}  # rel → (mode, blob id)
    for entry in state.entries:
        tag, mode, sha, rel = entry.tag, entry.mode, entry.sha, entry.rel
        if rel in listing.files or rel in clean:
            continue  # a conflicted path has several stages; the disk decides
        if mode == MODE_GITLINK:
            if (
                is_real_dir(rel.rpartition("/")[0])
                and os.path.isdir(folder / rel)
                and not os.path.islink(folder / rel)
            ):
                listing.files[rel] = (MODE_GITLINK, None, sha)
            continue
        if changed is not None and tag == "H" and entry.stage == "0" and rel not in changed:
            clean[rel] = (mode, sha)
        elif add_from_disk(rel):
            pass
        elif tag in ("S", "s") and not os.path.lexists(folder / rel):
            # Left out by a sparse checkout: git status takes the index's content as it is.
            listing.files[rel] = (mode, None, sha)

    for rel in state.untracked:
        if rel.endswith("/"):  # an untracked repository inside the folder
            listing.nested.append(rel.rstrip("/"))
        else:
            add_from_disk(rel)
    listing.problems += state.unreadable

    # Links are never converted: their blob is the link's target, whatever the attributes say.
    regular = [rel for rel, (mode, _sha) in clean.items() if mode != MODE_LINK]
    converted = repo.converted(regular) if regular else set()
    if regular and any(_is_attributes_file(rel) for rel in listing.files):
        # An attributes file changed since it was checked in: what was in force when the
        # files were checked out counts too.
        converted |= repo.converted(regular, cached=True)
    for rel, (mode, sha) in clean.items():
        if rel in converted:
            add_from_disk(rel)
        else:
            listing.index_blobs[rel] = (mode, sha)

    # Folders holding no listed file: git names the topmost untracked one of each group; the
    # folders below it are walked here, asking git which ones it ignores.
    nested = set(listing.nested)
    level = [os.fsdecode(p).rstrip("/") for p in state.folders if p.endswith(b"/")]
    level = [rel for rel in level if rel not in nested and is_real_dir(rel)]
    while level:
        listing.dirs.update(level)
        below: list[str] = []
        for rel in level:
            try:
                with os.scandir(folder / rel) as it:
                    below += [
                        f"{rel}/{e.name}"
                        for e in it
                        if e.name != ".git" and e.is_dir(follow_symlinks=False)
                    ]
            except PermissionError:
                listing.problems.append(rel + "/")
            except (FileNotFoundError, NotADirectoryError):
                pass
        below = [rel for rel in below if rel not in nested]
        ignored = repo.ignored(below)
        level = [rel for rel in below if rel not in ignored]
    listing.problems = sorted(set(listing.problems))
    return listing


# -- readability -----------------------------------------------------------------------------------


class _Readability:
    """Whether this process may read a file: its permission bits answer for most files without a
    system call; only a file they would refuse is asked about (`access`, which knows ACLs)."""

    def __init__(self) -> None:
        self.uid = os.geteuid()
        self.groups = {os.getegid(), *os.getgroups()}

    def __call__(self, path: str, st: os.stat_result) -> bool:
        if st.st_uid == self.uid:
            bit = statmod.S_IRUSR
        elif st.st_gid in self.groups:
            bit = statmod.S_IRGRP
        else:
            bit = statmod.S_IROTH
        return bool(st.st_mode & bit) or os.access(path, os.R_OK)


@dataclass
class _PlainListing:
    """What a plain folder holds for its revision: the walk of the recorder's full scan (links
    never followed, `.git` and ignored paths left out)."""

    dirs: list[str] = field(default_factory=list)  # every folder below the top, kept if empty
    files: list[tuple[str, str, os.stat_result]] = field(default_factory=list)  # rel, mode, lstat
    problems: list[tuple[str, bool]] = field(default_factory=list)  # unreadable: rel, is a folder


def _walk_plain(root: Path, ignore: IgnoreRules) -> _PlainListing:
    """List a plain folder before anything of it is stored, with the paths it cannot read."""
    out = _PlainListing()
    readable = _Readability()
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(root / rel if rel else root) as it:
                entries = list(it)
        except PermissionError:
            out.problems.append((rel, True))
            continue
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except PermissionError:
                out.problems.append((child, False))
                continue
            except FileNotFoundError:
                continue
            mode = mode_of(st)
            if mode is None or entry.name == ".git" or ignore.matches(child, mode == MODE_TREE):
                continue
            if mode == MODE_TREE:
                out.dirs.append(child)
                stack.append(child)
            elif mode == MODE_LINK or readable(entry.path, st):
                out.files.append((child, mode, st))
            else:
                out.problems.append((child, False))
    return out


def _shown_problems(problems: list[tuple[str, bool]], prefix: str = "") -> list[str]:
    """Unreadable paths as an error names them: below `prefix`, a folder with a slash."""
    shown = []
    for rel, is_dir in problems:
        path = f"{prefix}/{rel}" if prefix and rel else (rel or prefix)
        shown.append((path or ".") + "/" if is_dir else path)
    return sorted(shown)


def _raise_unreadable(folder: Path, problems: list[str]) -> None:
    if not problems:
        return
    named = ", ".join(problems[:_NAMED_PROBLEMS])
    more = len(problems) - _NAMED_PROBLEMS
    tail = f" and {more} more" if more > 0 else ""
    what = "item" if len(problems) == 1 else "items"
    raise InputError(
        f"cannot import {folder}: {len(problems)} {what} cannot be read "
        f"(permission denied): {named}{tail}"
    )


__all__ = ["ImportResult", "check_importable", "import_folder"]
