"""Workspaces: the tree a task works in, its own `.git`, and its lifecycle.

Owns creating a workspace tree from a vault revision, the parts of its `.git` a sandbox may only
read (hooks, config, commondir: written here, on the host), the lifecycle transition table, quota
and expiry checks. Recording revisions is the recorder's job; rows are the store's; mounting the
protected parts read-only is the sandbox backend's.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import shutil
import stat
import struct
import time
from collections.abc import Callable
from pathlib import Path

from core import humanize
from core.errors import CairnError, IllegalTransition, QuotaExceeded
from core.models import Workspace
from core.models import WorkspaceState as S
from core.safe_fs import write_file
from core.vault import Vault
from core.vault.materialize import EarlyCheckout, begin_checkout, materialize
from core.vault.objects import git_env, run_git
from core.vault.tree_index import Looked, TreeIndex

# Allowed lifecycle moves. ACTIVE means a sandbox is up; FROZEN accepts no new runs (its files
# are kept as they are); ARCHIVED has no tree on disk but stays restorable from its snapshots.
TRANSITIONS: dict[S, frozenset[S]] = {
    S.ALLOCATED: frozenset({S.PREPARED, S.DESTROYED}),
    S.PREPARED: frozenset({S.ACTIVE, S.FROZEN, S.ARCHIVED, S.DESTROYED}),
    S.ACTIVE: frozenset({S.PREPARED, S.FROZEN, S.DESTROYED}),
    S.FROZEN: frozenset({S.PREPARED, S.ARCHIVED, S.DESTROYED}),
    S.ARCHIVED: frozenset({S.PREPARED, S.DESTROYED}),
    S.DESTROYED: frozenset(),
}

# States whose tree is on disk and may change.
LIVE_STATES = (S.PREPARED.value, S.ACTIVE.value)

log = logging.getLogger(__name__)

_GITLINK = 0o160000
_U32 = 0xFFFFFFFF  # a git index keeps 32 bits of each stat field

# The parts of a workspace's `.git` through which a later git command runs code: hooks, and the
# config (hooksPath, fsmonitor, filters, textconv, sshCommand, includes...). `commondir` would
# move both elsewhere (git reads config and hooks from the common dir), so it is pinned to the
# `.git` folder itself. A sandbox sees these read-only; only Cairn writes them, on the host.
GIT_HOOKS = "hooks"
GIT_CONFIG = "config"
GIT_COMMONDIR = "commondir"
COMMONDIR_SELF = ".\n"  # "the common dir is this folder": what git assumes without the file
PROTECTED_GIT_PATHS = (GIT_HOOKS, GIT_CONFIG, GIT_COMMONDIR)

# Keys a workspace's local config may hold: what `git init` and Cairn write, and plain branch and
# remote bookkeeping. Anything else (a command, a filter, a hooks path, an include) was planted
# before the config was protected and is dropped the next time Cairn prepares the sandbox.
_SAFE_CONFIG_KEY = re.compile(
    r"^(?:core\.(?:repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|"
    r"precomposeunicode|symlinks|autocrlf|eol|safecrlf)"
    r"|user\.(?:name|email)"
    r"|extensions\.(?:objectformat)"
    r"|branch\.[^\n]+\.(?:remote|merge|rebase|description)"
    r"|remote\.[^\n]+\.(?:url|pushurl|fetch|push|tagopt|mirror|prune))$"
)
_DEFAULT_CONFIG = (
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
    "\tlogallrefupdates = true\n[user]\n\tname = Cairn\n\temail = cairn@localhost\n"
)


def check_transition(current: str, target: str) -> None:
    cur, tgt = S(current), S(target)
    if tgt not in TRANSITIONS[cur]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[cur])) or "nothing"
        raise IllegalTransition(
            f"a workspace cannot go from {cur.value} to {tgt.value} (from {cur.value}: {allowed})"
        )


def branch_name(title: str, task_id: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-") or "task"
    return f"cairn/{slug}-{task_id.split('_', 1)[-1][-6:]}"


def create_tree(
    vault: Vault,
    revision: str,
    root: Path,
    *,
    branch: str,
    head_commit: str | None,
    label: str,
    owner: tuple[int, int] | None = None,
    looked: Looked | None = None,
    checked: bool = False,
    early: EarlyCheckout | None = None,
    index: TreeIndex | None = None,
) -> str:
    """Materialize `revision` at `root` and give it a `.git` of its own on `branch`.

    The `.git` shares the vault's objects by hard links (a copy only across filesystems), sits on
    `branch` at the user's HEAD (or at the base for a folder without history) and has an index
    of that commit, so `git status` inside shows the same uncommitted work the user had.
    With `owner`, the files are that user's from the start (see `materialize`). `looked`
    receives the stat data the index was written with, for the caller's stat cache. `checked`,
    `early` and `index`: see `materialize`. Returns the tree id. On failure nothing is left at
    `root`.
    """
    git_index = root.with_name(f".{root.name}.index-{secrets.token_hex(4)}")
    try:
        tree = materialize(
            vault,
            revision,
            root,
            label=label,
            owner=owner,
            stats=looked.stats if looked is not None else None,
            checked=checked,
            early=early,
            git_index=git_index,
            index=index,
        )
        try:
            _init_git(
                vault,
                root,
                branch=branch,
                commit=head_commit or revision,
                written=tree,
                looked=looked,
                git_index=git_index if git_index.exists() else None,
            )
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
    finally:
        git_index.unlink(missing_ok=True)
    return tree


def begin_tree(
    vault: Vault, first: str, root: Path, *, owner: tuple[int, int] | None, objects: Path
) -> EarlyCheckout | None:
    """Start writing the workspace at `root` from `first` (the user's HEAD, its objects read
    from the repository's `objects` folder) while the import still reads the folder; the
    `create_tree` given it takes git's checkout from there to the base. None when it cannot."""
    return begin_checkout(vault, first, root, owner=owner, alternates=[objects])


def open_to(root: Path, owner: tuple[int, int]) -> None:
    """Hand the workspace folder itself to `owner` and open it as its parent folder is, once the
    stat data of the files `create_tree` wrote as theirs has been recorded: until then it was
    Cairn's alone (see `materialize`), so no edit fell between a write and that record."""
    os.chmod(root, stat.S_IMODE(os.stat(root.parent).st_mode))
    os.chown(root, *owner, follow_symlinks=False)


def _init_git(
    vault: Vault,
    root: Path,
    *,
    branch: str,
    commit: str,
    written: str,
    looked: Looked | None,
    git_index: Path | None = None,
) -> None:
    git_dir = root / ".git"
    run_git(["init", "--quiet", "--initial-branch", branch, str(root)])
    for hook in (git_dir / "hooks").glob("*"):
        hook.unlink()
    _link_objects(vault.objects.objects_dir, git_dir / "objects")
    # A repository `git init` has just made: its branch and identity are written as git would
    # write them, without a git process each.
    ref = git_dir / "refs" / "heads" / branch
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(commit + "\n")
    with open(git_dir / "config", "a") as config:
        config.write("[user]\n\tname = Cairn\n\temail = cairn@localhost\n")
    # No refresh after it: the files written in the index's own second are racy to git, and a
    # refresh in that same second would read them all only to leave them racy; the first
    # `git status` inside compares their content once, as git does for any racy entry.
    if git_index is None or not _take_git_index(vault, root, commit, written, git_index):
        _write_git_index(vault, root, commit, written, looked or Looked())
    elif looked is not None:
        looked.seen_at = time.time()
    protect_git(root)


def _take_git_index(vault: Vault, root: Path, commit: str, written: str, index: Path) -> bool:
    """Make `index`, git's own index of the tree `written` as its checkout wrote it (see
    `materialize`), the workspace's index of `commit`: git's one-tree merge keeps the stat data
    of every entry whose blob and mode `commit` shares, and leaves the others to be read (they
    show as the changes they are). False when git cannot (the caller writes one itself)."""
    if vault.tree_of(commit) != written:
        proc = run_git(
            ["--git-dir", str(vault.git_dir), "read-tree", "-i", "-m", commit],
            env=git_env(GIT_INDEX_FILE=str(index)),
            check=False,
        )
        if proc.returncode != 0:
            return False
    write_file(root / ".git", "index", index.read_bytes())
    return True


def _write_git_index(vault: Vault, root: Path, commit: str, written: str, looked: Looked) -> None:
    """The workspace's git index: `commit`'s tree, with the stat data of each file that was
    just written with that very blob and mode (the tree `written`), so that git inside needs no
    pass reading every file to know they are unchanged. Files that differ from `commit` get no
    stat data: git reads them, and shows them as the changes they are."""
    git_dir = str(vault.git_dir)
    listing = run_git(["--git-dir", git_dir, "ls-tree", "-r", "-z", "--full-tree", commit])
    changed = run_git(
        [
            "--git-dir",
            git_dir,
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--name-only",
            commit,
            written,
        ]
    )
    differ = {p for p in changed.stdout.split(b"\0") if p}
    entries: list[tuple[bytes, int, bytes]] = []
    for line in listing.stdout.split(b"\0"):
        if not line:
            continue
        meta, _, path = line.partition(b"\t")
        mode, _kind, sha = meta.split(b" ")
        entries.append((path, int(mode, 8), bytes.fromhex(sha.decode())))
    entries.sort(key=lambda e: e[0])
    top = os.fsencode(root) + b"/"
    out = bytearray(b"DIRC" + struct.pack(">II", 2, len(entries)))
    # Files the caller's `materialize` just wrote come with their stat data: nothing but that
    # call wrote in the folder since (see `materialize`), so it stands from here on.
    looked.seen_at = time.time()
    stats = looked.stats
    for path, mode, sha in entries:
        fields = (0,) * 10
        if mode != _GITLINK and path not in differ:
            try:
                st = stats.get(path) or os.lstat(top + path)
                stats[path] = st
                fields = (
                    st.st_ctime_ns // 1_000_000_000 & _U32,
                    st.st_ctime_ns % 1_000_000_000,
                    st.st_mtime_ns // 1_000_000_000 & _U32,
                    st.st_mtime_ns % 1_000_000_000,
                    st.st_dev & _U32,
                    st.st_ino & _U32,
                    mode,
                    st.st_uid & _U32,
                    st.st_gid & _U32,
                    st.st_size & _U32,
                )
            except OSError:
                pass
        if fields[6] == 0:
            fields = (*fields[:6], mode, *fields[7:])
        start = len(out)
        out += struct.pack(">10I", *fields) + sha + struct.pack(">H", min(len(path), 0xFFF))
        out += path
        out += b"\0" * (8 - (len(out) - start) % 8)  # one to eight NULs, as git pads
    out += hashlib.sha1(out).digest()
    write_file(root / ".git", "index", bytes(out))


def protect_git(root: Path) -> list[str]:
    """Make the workspace's `.git` ready to be mounted with its hooks, config and commondir
    read-only, and return what had to be repaired (in words).

    Runs on the host before a sandbox is made, when nothing in a sandbox can change these paths:
    `.git` must be a real folder (never a link a bind mount would follow); the hooks folder a
    real folder holding no hooks (any found were written before it was protected and are moved
    to `.git/hooks.disabled/`); the config a regular file of its own (a link, or a hard link
    shared with a writable file, is replaced by a copy) holding only plain keys; `commondir`
    naming `.git` itself. A workspace whose `.git` is missing gets a new, empty repository.
    """
    root = Path(root)
    git_dir = root / ".git"
    notes: list[str] = []
    try:
        st = os.lstat(git_dir)
    except FileNotFoundError:
        run_git(["init", "--quiet", str(root)])
        _clear_samples(git_dir / GIT_HOOKS)
        notes.append(".git was missing: a new, empty repository was made")
        st = os.lstat(git_dir)
    if not stat.S_ISDIR(st.st_mode):
        raise CairnError(
            f"{git_dir} is not a folder (a link or a file was put there); Cairn will not mount it",
            hint="move it away, then restore the workspace from a snapshot",
        )
    if not os.path.lexists(git_dir / "HEAD"):
        # Emptied from inside (its protected paths stay): the sandbox cannot `git init` there
        # any more, so Cairn does, keeping whatever is left.
        run_git(["init", "--quiet", str(root)])
        _clear_samples(git_dir / GIT_HOOKS)
        notes.append(".git had no HEAD: it was initialised again")
    notes += _protect_hooks(git_dir)
    notes += _protect_config(git_dir)
    notes += _protect_commondir(git_dir)
    for note in notes:
        log.warning("workspace %s: %s", root.name, note)
    return notes


def _clear_samples(hooks: Path) -> None:
    for hook in hooks.glob("*"):
        if hook.name.endswith(".sample") and not hook.is_symlink() and hook.is_file():
            hook.unlink()


def _protect_hooks(git_dir: Path) -> list[str]:
    hooks = git_dir / GIT_HOOKS
    notes: list[str] = []
    try:
        st = os.lstat(hooks)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        _move_aside(hooks, git_dir / f"{GIT_HOOKS}.disabled")
        notes.append(f".git/{GIT_HOOKS} was not a folder: moved to .git/{GIT_HOOKS}.disabled/")
        st = None
    if st is None:
        hooks.mkdir(mode=0o755)
        return notes
    found = sorted(e.name for e in os.scandir(hooks) if not e.name.endswith(".sample"))
    for name in found:
        _move_aside(hooks / name, git_dir / f"{GIT_HOOKS}.disabled")
    if found:
        notes.append(f"hooks {', '.join(found)} were moved to .git/{GIT_HOOKS}.disabled/")
    return notes


def _move_aside(path: Path, folder: Path) -> None:
    folder.mkdir(mode=0o700, exist_ok=True)
    os.rename(path, folder / f"{path.name}.{time.time_ns()}")


def _protect_config(git_dir: Path) -> list[str]:
    path = git_dir / GIT_CONFIG
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        write_file(git_dir, GIT_CONFIG, _DEFAULT_CONFIG)
        return [".git/config was missing: Cairn's default was written"]
    if not stat.S_ISREG(st.st_mode):
        _move_aside(path, git_dir / "config.disabled")
        write_file(git_dir, GIT_CONFIG, _DEFAULT_CONFIG)
        return [".git/config was not a file: moved to .git/config.disabled/, default written"]
    listed = run_git(["config", "--file", str(path), "--list", "--null"], check=False)
    if listed.returncode != 0:
        _move_aside(path, git_dir / "config.disabled")
        write_file(git_dir, GIT_CONFIG, _DEFAULT_CONFIG)
        return [".git/config could not be read: moved to .git/config.disabled/, default written"]
    entries = [
        tuple(item.split("\n", 1)) if "\n" in item else (item, None)
        for item in listed.stdout.decode(errors="surrogateescape").split("\0")
        if item
    ]
    dropped = sorted({key for key, _ in entries if not _SAFE_CONFIG_KEY.match(key)})
    if not dropped and st.st_nlink == 1:
        return []
    # A fresh file (a new inode) with the plain keys only, in their order.
    fresh = git_dir / f".config.{time.time_ns()}.tmp"
    try:
        fresh.write_text("")
        for key, value in entries:
            if key in dropped:
                continue
            args = ["config", "--file", str(fresh), "--add", key]
            run_git(args + ([value] if value is not None else ["true"]))
        os.replace(fresh, path)
    finally:
        fresh.unlink(missing_ok=True)
    notes = []
    if dropped:
        notes.append(f".git/config held {', '.join(dropped)}: dropped")
    if st.st_nlink != 1:
        notes.append(".git/config shared its file with another name: replaced by a copy")
    return notes


def _protect_commondir(git_dir: Path) -> list[str]:
    path = git_dir / GIT_COMMONDIR
    try:
        st = os.lstat(path)
        current = path.read_text() if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 else None
    except (FileNotFoundError, UnicodeDecodeError):
        st, current = None, None
    if current == COMMONDIR_SELF:
        return []
    write_file(git_dir, GIT_COMMONDIR, COMMONDIR_SELF)
    return [] if st is None else [".git/commondir pointed elsewhere: it names .git again"]


def set_git_config(root: Path, key: str, value: str) -> None:
    """Change one key of a workspace's local git config: the way Cairn changes it, since a
    sandbox only reads it. Written in place (the same file), so a running sandbox, whose read-only
    mount holds that file, sees the change."""
    path = Path(root) / ".git" / GIT_CONFIG
    scratch = path.parent / f".config.{time.time_ns()}.tmp"
    try:
        shutil.copyfile(path, scratch, follow_symlinks=False)
        run_git(["config", "--file", str(scratch), key, value])
        data = scratch.read_bytes()
    finally:
        scratch.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _link_objects(src: Path, dst: Path) -> None:
    """Share the vault's objects with a workspace: hard links, or copies across filesystems."""
    for dirpath, dirnames, filenames in os.walk(src):
        # An import's quarantined objects (tmp_objdir-*) are not the vault's until moved in.
        dirnames[:] = [d for d in dirnames if not d.startswith("tmp_")]
        rel = os.path.relpath(dirpath, src)
        if rel == "info" or rel.startswith("info" + os.sep):
            continue
        target = dst / rel if rel != "." else dst
        target.mkdir(parents=True, exist_ok=True)
        for name in filenames:
            if name.startswith("tmp_") or name.endswith(".lock"):
                continue
            s, d = os.path.join(dirpath, name), target / name
            if d.exists():
                continue
            try:
                os.link(s, d)
            except OSError:
                shutil.copy2(s, d)


def remove_tree(root: Path) -> None:
    """Delete a workspace tree, including files an agent made read-only."""

    def _onerror(
        func: Callable[[str], object], path: str, _exc: object
    ) -> None:  # pragma: no cover - depends on odd permissions
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
            func(path)

    if root.exists():
        shutil.rmtree(root, onerror=_onerror)


def tree_size(root: Path) -> int:
    """Bytes used by the files under `root` (links and folders count as zero)."""
    total = 0
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def check_quota(ws: Workspace, *, size: int | None = None) -> int:
    """Raise QuotaExceeded when the workspace uses more disk than its quota; returns the size."""
    used = tree_size(Path(ws.root)) if size is None else size
    if ws.quota_bytes is not None and used > ws.quota_bytes:
        raise QuotaExceeded(
            f"workspace {ws.id} uses {humanize.size(used)}, over its quota of "
            f"{humanize.size(ws.quota_bytes)}"
        )
    return used


def is_expired(ws: Workspace, now: float | None = None) -> bool:
    return ws.expires_at is not None and (now or time.time()) >= ws.expires_at


def require_tree(ws: Workspace) -> Path:
    """The workspace's root, or a clear error when it is not on disk."""
    root = Path(ws.root)
    if ws.state not in LIVE_STATES and ws.state != S.FROZEN.value:
        raise CairnError(f"workspace {ws.id} is {ws.state}; its files are not on disk")
    if not root.is_dir():
        raise CairnError(
            f"the workspace folder {root} is missing (deleted outside Cairn); "
            "restore it from a snapshot"
        )
    return root
