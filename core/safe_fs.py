"""Writing on the host into folders a sandbox can also write (run folders, engine homes) without
ever following a link the sandbox planted there.

Owns the no-follow walk (each component opened with O_NOFOLLOW relative to its parent) and
atomic writes through a fresh temporary name; callers choose what to write where.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from core.errors import CairnError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a folder's entries durable (after a rename into it or an unlink in it)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parts(rel: str | os.PathLike[str]) -> list[str]:
    parts = [p for p in Path(rel).parts if p not in ("", ".")]
    if any(p == ".." or p.startswith("/") for p in parts):
        raise CairnError(f"refusing an unsafe path {rel!s}")
    return parts


def open_dir(root: Path, rel: str | os.PathLike[str] = "", *, create: bool = True) -> int:
    """A file descriptor for `root/rel`, made of real folders only: a link (or a file) found
    where a folder should be is removed and replaced by a folder when `create` is set. `root`
    itself is Cairn's own folder; it is made when missing."""
    if create:
        Path(root).mkdir(parents=True, exist_ok=True)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in _parts(rel):
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except (NotADirectoryError, OSError) as exc:
                # O_NOFOLLOW on a link gives ELOOP; a file gives ENOTDIR.
                if not create or exc.errno not in (20, 40):
                    raise
                os.unlink(part, dir_fd=fd)
                os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def ensure_dir(root: Path, rel: str | os.PathLike[str]) -> Path:
    """Make `root/rel` a real folder (replacing any planted link) and return its path."""
    os.close(open_dir(root, rel))
    return Path(root, *_parts(rel))


def write_new_entry(
    fd: int, name: str, data: bytes, *, perm: int | None, fsync: bool = False
) -> None:
    """Make a new entry `name` in the folder `fd`: a file holding `data` with permissions
    `perm`, or, with `perm` None, a link to `data`. Fails when the name exists (O_EXCL): meant
    for a fresh temporary name that is renamed over the real one afterwards."""
    if perm is None:
        os.symlink(os.fsdecode(data), name, dir_fd=fd)
        return
    out = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=fd,
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(out, view) :]
        os.fchmod(out, perm)
        if fsync:
            os.fsync(out)
    finally:
        os.close(out)


def write_file(
    root: Path, rel: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o644
) -> Path:
    """Write `root/rel` atomically; a link planted at that name is replaced, never followed."""
    parts = _parts(rel)
    if not parts:
        raise CairnError("no file name given")
    if isinstance(data, str):
        data = data.encode()
    fd = open_dir(root, os.path.join(*parts[:-1]) if len(parts) > 1 else "")
    try:
        tmp = f".{parts[-1]}.{secrets.token_hex(6)}.tmp"
        out = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode,
            dir_fd=fd,
        )
        try:
            os.write(out, data)
            os.fchmod(out, mode)
        finally:
            os.close(out)
        os.replace(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)
    return Path(root, *parts)
