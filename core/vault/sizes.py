"""The bytes a recorded tree holds (the sum of its files' and links' blob sizes, what a restore
writes), known without reading every object where that can be helped.

Owns the vault's memo of tree sizes, `cairn-tree-sizes` in the vault's git folder: one line
"<tree id> <bytes>" per tree, appended by whichever process learns a size (a tree never changes,
so a line is true for good). `materialize` writes one for each tree it writes, from the blobs it
has just verified; a tree not in the memo is counted from a tree whose size is known (`near`,
say the workspace's base) and the blobs that differ between the two, and only with no such tree
by asking git for every blob's size, which reads a header of each loose object (seconds for a
100,000-file tree of a plain folder). The memo is a cache: a line lost or cut short costs one
count again, never a wrong answer.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from core.vault.objects import MODE_EXEC, MODE_FILE, MODE_LINK, run_git

SIZES_FILE = "cairn-tree-sizes"
_LINE = re.compile(rb"^([0-9a-f]{40}) ([0-9]{1,19})$", re.MULTILINE)
_BLOB_MODES = frozenset({MODE_FILE, MODE_EXEC, MODE_LINK})


class _Memo:
    """One vault's memo as this process last read it, and the lock that lets one thread at a
    time count a tree (the others then find it in the memo)."""

    def __init__(self, path: Path):
        self.path = path
        self.sizes: dict[str, int] = {}
        self.read_to = 0
        self.lock = threading.Lock()
        self.counting = threading.Lock()

    def get(self, tree: str) -> int | None:
        with self.lock:
            size = self.sizes.get(tree)
            if size is not None:
                return size
            self._read_more()
            return self.sizes.get(tree)

    def _read_more(self) -> None:
        """Take in the lines other processes appended since the last read (whole lines only)."""
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.read_to:  # replaced: read it again
                    self.read_to = 0
                f.seek(self.read_to)
                data = f.read()
        except OSError:
            return
        whole = data.rfind(b"\n") + 1
        for match in _LINE.finditer(data[:whole]):
            self.sizes[match.group(1).decode()] = int(match.group(2))
        self.read_to += whole

    def put(self, tree: str, size: int) -> None:
        with self.lock:
            if self.sizes.get(tree) == size:
                return
            self.sizes[tree] = size
        try:  # one short write with O_APPEND: lines of several processes never interleave
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, f"{tree} {size}\n".encode())
            finally:
                os.close(fd)
        except OSError:
            pass  # only a cache: the next process counts it again


_memos: dict[str, _Memo] = {}
_memos_lock = threading.Lock()


def _memo(git_dir: str | os.PathLike[str]) -> _Memo:
    key = os.fspath(git_dir)
    with _memos_lock:
        memo = _memos.get(key)
        if memo is None:
            memo = _memos[key] = _Memo(Path(key) / SIZES_FILE)
        return memo


def remember(git_dir: str | os.PathLike[str], tree: str, size: int) -> None:
    """Record that `tree` holds `size` bytes (a caller that has just written or read them all)."""
    _memo(git_dir).put(tree, size)


def tree_bytes(git_dir: str | os.PathLike[str], tree: str, *, near: str | None = None) -> int:
    """The bytes of `tree`'s files and links (submodules count nothing). `near`: a tree whose
    size may be known, from which only the blobs that differ are counted. VaultError when git
    cannot read the trees."""
    memo = _memo(git_dir)
    known = memo.get(tree)
    if known is not None:
        return known
    with memo.counting:  # one count per vault at a time: a second asker finds the first's
        known = memo.get(tree)
        if known is not None:
            return known
        size = None
        start = memo.get(near) if near is not None and near != tree else None
        if start is not None and near is not None:
            change = _difference(os.fspath(git_dir), near, tree)
            size = start + change if change is not None else None
        if size is None:
            size = _count_all(os.fspath(git_dir), tree)
        memo.put(tree, size)
        return size


def _count_all(git_dir: str, tree: str) -> int:
    out = run_git(["--git-dir", git_dir, "ls-tree", "-r", "-l", "-z", tree]).stdout
    total = 0
    for entry in out.split(b"\0"):
        fields = entry.split(None, 4)
        if len(fields) >= 4 and fields[3].isdigit():
            total += int(fields[3])
    return total


def _difference(git_dir: str, old: str, new: str) -> int | None:
    """Bytes of `new` minus bytes of `old`, from the entries that differ between them; None
    when a blob's size cannot be told that way (the caller counts `new` whole)."""
    raw = run_git(
        ["--git-dir", git_dir, "diff-tree", "-r", "-z", "--no-renames", "--raw", old, new]
    ).stdout
    fields = raw.split(b"\0")
    signs: list[tuple[str, int]] = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode().lstrip(":").split()
        if len(meta) < 5:
            continue
        old_mode, new_mode, old_sha, new_sha = meta[:4]
        if old_mode in _BLOB_MODES:
            signs.append((old_sha, -1))
        if new_mode in _BLOB_MODES:
            signs.append((new_sha, +1))
    if not signs:
        return 0
    wanted = sorted({sha for sha, _ in signs})
    out = run_git(
        ["--git-dir", git_dir, "cat-file", "--batch-check=%(objectname) %(objectsize)"],
        input=("\n".join(wanted) + "\n").encode(),
    ).stdout
    sizes = {}
    for line in out.decode().splitlines():
        sha, _, size = line.partition(" ")
        if size.isdigit():
            sizes[sha] = int(size)
    if any(sha not in sizes for sha in wanted):
        return None
    return sum(sign * sizes[sha] for sha, sign in signs)
