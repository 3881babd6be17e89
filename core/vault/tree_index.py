"""An in-memory, editable picture of one revision's tree, and the scan that fills it from disk.

Owns turning files on disk into blobs and trees: a full scan (import, catch-up, verification)
and edits along single paths (the recorder), so that writing a new revision costs in proportion
to what changed. It does not decide when to capture; the recorder does.
"""

from __future__ import annotations

import os
import stat as statmod
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.vault.ignore import IgnoreRules
from core.vault.objects import (
    EMPTY_TREE,
    MODE_EXEC,
    MODE_FILE,
    MODE_GITLINK,
    MODE_LINK,
    MODE_TREE,
    ObjectStore,
    TreeEntry,
    encode_tree,
    object_id,
)
from core.vault.packs import store_objects

# A file whose mtime is this close to when we looked at it may change again within the same
# timestamp tick; its cached hash is not trusted (git's "racy" entries). A filesystem that keeps
# whole-second (or two-second) times needs the long window; one whose times have a fraction of a
# second ticks in milliseconds at most (the kernel's coarse clock), and the short one is plenty.
RACY_SECONDS = 2.0
RACY_SECONDS_FINE = 0.1


def racy_window(st: os.stat_result) -> float:
    """How long after a file's mtime its stat data can be trusted to reveal a later change."""
    return RACY_SECONDS_FINE if st.st_mtime_ns % 1_000_000_000 else RACY_SECONDS


StatKey = tuple[int, int, int, int]  # (mtime_ns, ctime_ns, size, inode)


@dataclass
class Looked:
    """The `lstat` of files just written into a new tree, taken once and shared by whoever
    records stat data for them (the workspace's git index, the recorder's stat cache)."""

    seen_at: float = 0.0  # when the looking began: a change after it is never hidden
    stats: dict[bytes, os.stat_result] = field(default_factory=dict)  # path below the top


def stat_key(st: os.stat_result) -> StatKey:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


def mode_of(st: os.stat_result) -> str | None:
    """The git mode for a file, link or folder; None for anything git cannot hold (a socket...)."""
    m = st.st_mode
    if statmod.S_ISLNK(m):
        return MODE_LINK
    if statmod.S_ISREG(m):
        return MODE_EXEC if m & 0o100 else MODE_FILE
    if statmod.S_ISDIR(m):
        return MODE_TREE
    return None


@dataclass(slots=True)
class FileRecord:
    mode: str
    sha: str
    stat: StatKey | None = None
    seen_at: float = 0.0


@dataclass
class ScanProblem:
    path: str
    reason: str


@dataclass
class ScanResult:
    tree: str
    files: int
    problems: list[ScanProblem] = field(default_factory=list)


class TreeIndex:
    """Folders → {name: FileRecord or None (a subfolder)}; trees are written lazily on flush."""

    def __init__(self) -> None:
        self.dirs: dict[str, dict[str, FileRecord | None]] = {"": {}}
        self.tree_ids: dict[str, str] = {}  # folder → tree id, for folders not changed since flush
        self.dirty: set[str] = {""}

    # -- reading -------------------------------------------------------------------------------

    @classmethod
    def from_tree(cls, objects: ObjectStore, tree: str) -> TreeIndex:
        index = cls()
        stack = [("", tree)]
        while stack:
            folder, sha = stack.pop()
            children: dict[str, FileRecord | None] = {}
            for entry in objects.read_tree(sha):
                name = os.fsdecode(entry.name)
                if entry.mode == MODE_TREE:
                    children[name] = None
                    stack.append((_join(folder, name), entry.sha))
                else:
                    children[name] = FileRecord(entry.mode, entry.sha)
            index.dirs[folder] = children
            index.tree_ids[folder] = sha
        index.dirty.clear()
        return index

    def flushed_as(self, tree: str) -> bool:
        """Whether the index is `tree`, as its last flush wrote it and unchanged since."""
        return not self.dirty and self.tree_ids.get("") == tree

    def get(self, rel: str) -> FileRecord | None:
        folder, name = _split(rel)
        return self.dirs.get(folder, {}).get(name)

    def is_dir(self, rel: str) -> bool:
        return rel in self.dirs

    def contains(self, rel: str) -> bool:
        return rel in self.dirs or self.get(rel) is not None

    def files(self) -> dict[str, FileRecord]:
        out = {}
        for folder, children in self.dirs.items():
            for name, rec in children.items():
                if rec is not None:
                    out[_join(folder, name)] = rec
        return out

    def file_count(self) -> int:
        return sum(1 for c in self.dirs.values() for r in c.values() if r is not None)

    # -- editing -------------------------------------------------------------------------------

    def _touch(self, folder: str) -> None:
        # A dirty folder's parents are dirty too and none has a tree id: nothing left to do.
        while folder not in self.dirty:
            self.dirty.add(folder)
            self.tree_ids.pop(folder, None)
            if not folder:
                return
            folder = _split(folder)[0]

    def ensure_dir(self, rel: str) -> None:
        if rel in self.dirs:
            return
        parent, name = _split(rel)
        self.ensure_dir(parent)
        self.dirs[parent][name] = None
        self.dirs[rel] = {}
        self._touch(rel)

    def set_file(self, rel: str, record: FileRecord) -> bool:
        """Record a file; returns whether anything changed."""
        folder, name = _split(rel)
        if rel in self.dirs:
            self.remove(rel)
        self.ensure_dir(folder)
        old = self.dirs[folder].get(name)
        self.dirs[folder][name] = record
        if old is not None and old.mode == record.mode and old.sha == record.sha:
            return False
        self._touch(folder)
        return True

    def remove(self, rel: str) -> bool:
        """Forget a file or a whole folder; returns whether anything was there."""
        folder, name = _split(rel)
        children = self.dirs.get(folder)
        if children is None or name not in children:
            return False
        del children[name]
        if rel in self.dirs:
            prefix = rel + "/"
            for key in [k for k in self.dirs if k == rel or k.startswith(prefix)]:
                del self.dirs[key]
                self.tree_ids.pop(key, None)
                self.dirty.discard(key)
        self._touch(folder)
        return True

    def flush(self, objects: ObjectStore) -> str:
        """Write the trees of changed folders, deepest first; returns the root tree id."""
        written: list[tuple[str, bytes]] = []
        for folder in sorted(
            self.dirty, key=lambda f: f.count("/") + (1 if f else 0), reverse=True
        ):
            if folder not in self.dirs:
                continue
            entries = []
            for name, rec in self.dirs[folder].items():
                bname = os.fsencode(name)
                if rec is None:
                    entries.append(TreeEntry(MODE_TREE, bname, self.tree_ids[_join(folder, name)]))
                else:
                    entries.append(TreeEntry(rec.mode, bname, rec.sha))
            data = encode_tree(entries)
            sha = object_id("tree", data) if entries else EMPTY_TREE
            self.tree_ids[folder] = sha
            written.append((sha, data))
        store_objects(objects, "tree", written)
        self.dirty.clear()
        return self.tree_ids[""]

    # -- from disk -----------------------------------------------------------------------------

    def record_path(
        self,
        objects: ObjectStore,
        root: str,
        rel: str,
        ignore: IgnoreRules,
        problems: list[ScanProblem] | None = None,
    ) -> int:
        """Bring one path (file, link or folder, present or gone) up to date with the disk.

        Returns how many files changed. A folder is scanned whole; a path that became ignored
        is dropped unless the previous revision held it (a tracked file stays tracked).
        """
        full = os.path.join(root, rel)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            return self._remove_counted(rel)
        except PermissionError:
            if problems is not None:
                problems.append(ScanProblem(rel, "permission denied"))
            return 0
        mode = mode_of(st)
        if mode is None:
            return self._remove_counted(rel)
        known = self.contains(rel)
        if not known and ignore.is_ignored(rel, mode == MODE_TREE):
            return 0
        if mode == MODE_TREE:
            changed = self._remove_counted(rel) if self.get(rel) is not None else 0
            # A nested repository is captured as plain files; its own .git never is.
            return changed + self._scan_dir(objects, root, rel, ignore, problems)
        if rel in self.dirs:  # a folder became a file
            self._remove_counted(rel)
        return self._record_file(objects, full, rel, st, mode, problems)

    def _files_under(self, rel: str) -> int:
        prefix = rel + "/"
        return sum(
            1
            for folder, children in self.dirs.items()
            if folder == rel or folder.startswith(prefix)
            for r in children.values()
            if r is not None
        )

    def _remove_counted(self, rel: str) -> int:
        """Remove a path; returns how many files went with it."""
        if rel in self.dirs:
            count = self._files_under(rel)
            self.remove(rel)
            return max(count, 1)
        return 1 if self.remove(rel) else 0

    def _record_file(
        self,
        objects: ObjectStore,
        full: str,
        rel: str,
        st: os.stat_result,
        mode: str,
        problems: list[ScanProblem] | None,
    ) -> int:
        key = stat_key(st)
        old = self.get(rel)
        now = time.time()
        if (
            old is not None
            and old.stat == key
            and old.mode == mode
            and old.seen_at - st.st_mtime > racy_window(st)
        ):
            return 0
        try:
            sha = objects.write_blob_from_path(full, st)
        except FileNotFoundError:
            return self._remove_counted(rel)
        except (PermissionError, IsADirectoryError) as exc:
            if problems is not None:
                problems.append(ScanProblem(rel, exc.strerror or "cannot be read"))
            return 0
        changed = self.set_file(rel, FileRecord(mode, sha, key, now))
        return 1 if changed else 0

    def _scan_dir(
        self,
        objects: ObjectStore,
        root: str,
        rel: str,
        ignore: IgnoreRules,
        problems: list[ScanProblem] | None,
    ) -> int:
        """Make the folder at `rel` (and everything below) equal the disk."""
        changed = 0
        stack = [rel]
        while stack:
            folder = stack.pop()
            full = os.path.join(root, folder) if folder else root
            if folder not in self.dirs:
                if self.get(folder) is not None:
                    self.remove(folder)
                self.ensure_dir(folder)
            seen: set[str] = set()
            try:
                with os.scandir(full) as it:
                    entries = list(it)
            except (PermissionError, NotADirectoryError, FileNotFoundError) as exc:
                if isinstance(exc, PermissionError) and problems is not None:
                    problems.append(ScanProblem(folder or ".", "permission denied"))
                continue
            children = self.dirs[folder]
            for entry in entries:
                name = entry.name
                child = _join(folder, name)
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except PermissionError:
                    if problems is not None:
                        problems.append(ScanProblem(child, "permission denied"))
                    seen.add(name)
                    continue
                mode = mode_of(st)
                if mode is None:
                    continue
                was_known = name in children
                if not was_known and ignore.matches(child, mode == MODE_TREE):
                    continue
                if name == ".git":
                    continue
                seen.add(name)
                if mode == MODE_TREE:
                    if children.get(name) is not None:  # a file became a folder
                        changed += self._remove_counted(child)
                    self.ensure_dir(child)
                    stack.append(child)
                else:
                    old = children.get(name)
                    if (
                        old is not None
                        and old.mode == mode
                        and old.stat == (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
                        and old.seen_at - st.st_mtime > racy_window(st)
                    ):
                        continue  # the stat cache vouches for it (what _record_file checks first)
                    if child in self.dirs:  # a folder became a file
                        changed += self._remove_counted(child)
                    changed += self._record_file(objects, entry.path, child, st, mode, problems)
            for name in [n for n in children if n not in seen]:
                changed += self._remove_counted(_join(folder, name))
        return changed

    def scan(self, objects: ObjectStore, root: str | Path, ignore: IgnoreRules) -> ScanResult:
        """A full, verifying capture: the whole folder, reusing hashes whose stat is unchanged."""
        problems: list[ScanProblem] = []
        root = os.fspath(root)
        self._scan_dir(objects, root, "", ignore, problems)
        tree = self.flush(objects)
        return ScanResult(tree, self.file_count(), problems)


def _split(rel: str) -> tuple[str, str]:
    folder, _, name = rel.rpartition("/")
    return folder, name


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


__all__ = [
    "TreeIndex",
    "FileRecord",
    "ScanResult",
    "ScanProblem",
    "mode_of",
    "stat_key",
    "MODE_GITLINK",
    "Looked",
    "RACY_SECONDS",
    "racy_window",
]
