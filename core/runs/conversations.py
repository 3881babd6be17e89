"""Copies of an engine's conversation files, kept outside the sandbox at each checkpoint.

The engine home is writable by the run: an agent (or anything it runs) can empty it. What Cairn
needs from it to go on with the same conversation (Claude Code's transcript, Codex's rollout)
is copied at every checkpoint into the data folder, and put back when a later attempt finds it
missing. Neither direction follows a link the sandbox may have planted. The engines say which
files hold a conversation (`Engine.conversation_files`); the checkpoints and the ladder call
this module. The copies are keyed by the engine session; deleting a task removes those of the
sessions no remaining run names (`core.housekeeping`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from core.datadir import DataDir
from core.engines.base import Engine

log = logging.getLogger(__name__)

FOLDER = "conversations"
MAX_BYTES = 256 * 1024 * 1024  # a transcript larger than this is not copied


def kept_root(data: DataDir, session_id: str) -> Path:
    return data.root / FOLDER / session_id


def kept_folders(data: DataDir, session_ids: Iterable[str]) -> list[Path]:
    """The folders holding what was kept of these sessions, those there are. An id that is not
    one plain name names none: the engines' ids are, but a stored one is only trusted so far."""
    found = []
    for session_id in sorted(set(session_ids)):
        if not session_id or session_id in (".", "..") or "/" in session_id or "\0" in session_id:
            continue
        path = kept_root(data, session_id)
        if os.path.lexists(path):
            found.append(path)
    return found


def _inside(root: Path, path: Path) -> bool:
    """`path`'s folders, links resolved, stay inside `root` (the file itself is not followed)."""
    try:
        parent = path.parent.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    real_root = root.resolve()
    return parent == real_root or real_root in parent.parents


def _copy(source: Path, target: Path) -> bool:
    """A regular file's bytes and mode to `target` (through a temporary beside it); False when
    the source is not a regular file reached without links."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
        with os.fdopen(os.dup(fd), "rb") as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        os.chmod(tmp, stat.S_IMODE(st.st_mode) | 0o600)
        os.replace(tmp, target)
        return True
    finally:
        os.close(fd)


def keep(
    data: DataDir, engine: Engine, home: Path, session_id: str | None, workspace: str
) -> list[Path]:
    """Copy the session's conversation files from the engine home; returns what was kept
    (relative to the home). Best effort: a checkpoint does not fail for it."""
    if not session_id or not home.is_dir():
        return []
    kept = []
    try:
        files = engine.conversation_files(home, session_id, workspace)
    except OSError as exc:
        log.warning("cannot list the conversation of session %s: %s", session_id, exc)
        return []
    root = kept_root(data, session_id)
    for rel in files:
        source = home / rel
        if rel.is_absolute() or ".." in rel.parts or not _inside(home, source):
            continue
        try:
            if _copy(source, root / rel):
                kept.append(rel)
        except OSError as exc:
            log.warning("cannot keep %s of session %s: %s", rel, session_id, exc)
    return kept


def _folders_in(home: Path, rel: Path, owner: tuple[int, int]) -> Path | None:
    """The folder `rel` goes in, inside `home`, made as needed (owned like the home); None when
    a part of the way is a link or not a folder (planted by the run)."""
    here = home
    for part in rel.parts[:-1]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            os.mkdir(here, 0o700)
            _own(here, owner)
            continue
        if not stat.S_ISDIR(st.st_mode):
            return None
    return here


def _own(path: Path, owner: tuple[int, int]) -> None:
    """Owned by the sandbox's user, who must go on writing it (possible when Cairn is root)."""
    with contextlib.suppress(PermissionError):
        os.chown(path, *owner, follow_symlinks=False)


def restore(data: DataDir, home: Path, session_id: str | None) -> list[Path]:
    """Put the kept conversation files of a session back into the engine home where they are
    missing; returns what was put back (relative to the home)."""
    if not session_id:
        return []
    root = kept_root(data, session_id)
    if not root.is_dir():
        return []
    restored = []
    for source in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = source.relative_to(root)
        target = home / rel
        if os.path.lexists(target):
            continue  # what the home holds is newer than any checkpoint's copy
        try:
            st = os.stat(home)
            owner = (st.st_uid, st.st_gid)
            if _folders_in(home, rel, owner) is None or not _inside(home, target):
                continue
            if _copy(source, target):
                _own(target, owner)
                restored.append(rel)
        except OSError as exc:
            log.warning("cannot put back %s of session %s: %s", rel, session_id, exc)
    return restored
