"""The stat cache's file format, and the verifying stat pass that reads it on several cores.

Owns the bytes of a workspace's stat cache (the recorder's and the import's) and the pass that
proves, by comparing stat data only, that a workspace still holds exactly the tree the cache was
written for. It decides nothing about revisions: the recorder asks it and acts on the answer.

The file: a magic line, the SHA-256 of the payload, then the payload: a JSON header (workspace,
head revision, head tree, folder count), a table of folders (tree id, path, tree body and entry
count), the folders' paths, their tree bodies (git's own tree encoding, so each hashes to its
tree id) and one stat record per tree entry, in the body's order. The pass trusts nothing it did
not check: the bodies must hash, from the root down, to the head's tree (a Merkle check, split
between the shards), and a file is vouched for only when its kind and stat data are unchanged
and it was not racy when they were taken (the rules of core.vault.tree_index).

Run as a script (`python -S -I statpass.py CACHE ROOT SHARD SHARDS WORKSPACE HEAD TREE`) it
checks one shard of the folders and prints its findings as JSON (with `hand-over` first and
`UID GID` last, it also hands the shard's entries to that user: see `hand_over_shard`); it
imports nothing but the standard library, so a helper process starts in milliseconds.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat as statmod
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

MAGIC = b"CAIRN-STAT-CACHE 2\n"
_DIGEST = 32
_TABLE = struct.Struct("<20sIII")  # tree id, path length, body length, entries
STAT = struct.Struct("<qqqqd")  # mtime_ns, ctime_ns, size, inode, seen_at (-1: no stat data)
NO_STAT = STAT.pack(0, 0, 0, 0, -1.0)
REFRESHED = struct.Struct("<IIq")  # folder number, entry number, ctime_ns (the hand-over's answer)
_ENTRY = re.compile(rb"([0-7]+) ([^\0]+)\0(.{20})", re.S)
_TREE_MODE = b"40000"
_RACY_FINE = 0.1  # tree_index.RACY_SECONDS_FINE and RACY_SECONDS: the same rules
_RACY = 2.0
# Kinds of findings: a path to look at again (CHANGED: its stat data, kind or racy state;
# GONE: cached, not on disk; NEW: on disk, not cached (the caller applies the ignore rules);
# UNREADABLE: its folder could not be listed).
CHANGED, GONE, NEW, UNREADABLE = "changed", "gone", "new", "unreadable"


class CacheMismatch(Exception):
    """The cache is damaged, or is not the one of this workspace's head."""


@dataclass
class Folder:
    path: bytes  # "" for the root; "/"-separated, as on disk
    tree_id: bytes  # 20 bytes
    body: bytes  # git's encoding of the folder's tree
    stats: bytes  # STAT.size bytes per entry of the body, in its order
    entries: int


@dataclass
class Findings:
    """One shard's answer (or the sum of all shards')."""

    folders: int = 0
    subtrees: int = 0
    suspects: list[tuple[str, str, bool]] = field(default_factory=list)  # (rel, kind, is_dir)

    def add(self, other: Findings) -> None:
        self.folders += other.folders
        self.subtrees += other.subtrees
        self.suspects += other.suspects


# -- writing -------------------------------------------------------------------------------------


def encode(workspace_id: str, head: str, tree: str, folders: Iterable[Folder]) -> bytes:
    """The cache file's bytes; `folders` start with the root."""
    table, paths, bodies, stats = [], [], [], []
    for f in folders:
        table.append(_TABLE.pack(f.tree_id, len(f.path), len(f.body), f.entries))
        paths.append(f.path)
        bodies.append(f.body)
        stats.append(f.stats)
    header = json.dumps(
        {"workspace": workspace_id, "head": head, "tree": tree, "folders": len(table)}
    ).encode()
    payload = b"".join([struct.pack("<I", len(header)), header, *table, *paths, *bodies, *stats])
    return MAGIC + hashlib.sha256(payload).digest() + payload


# -- reading -------------------------------------------------------------------------------------


def decode(data: bytes, workspace_id: str, head: str, tree: str) -> list[Folder]:
    """The folders of a cache written for this workspace's `head` (whose tree is `tree`), root
    first; CacheMismatch when it is damaged or another head's. Not yet checked against the tree:
    `check_folder` does that, folder by folder."""
    if not data.startswith(MAGIC):
        raise CacheMismatch("not a stat cache of this version")
    start = len(MAGIC) + _DIGEST
    payload = memoryview(data)[start:]
    if hashlib.sha256(payload).digest() != data[len(MAGIC) : start]:
        raise CacheMismatch("the stat cache is damaged")
    try:
        (hlen,) = struct.unpack_from("<I", payload, 0)
        header = json.loads(bytes(payload[4 : 4 + hlen]))
        if header["workspace"] != workspace_id or header["head"] != head or header["tree"] != tree:
            raise CacheMismatch("the stat cache was written for another revision")
        count = int(header["folders"])
        pos = 4 + hlen
        table = list(_TABLE.iter_unpack(payload[pos : pos + count * _TABLE.size]))
        pos += count * _TABLE.size
        folders = []
        paths_at = pos
        bodies_at = paths_at + sum(t[1] for t in table)
        stats_at = bodies_at + sum(t[2] for t in table)
        if stats_at + sum(t[3] for t in table) * STAT.size != len(payload):
            raise CacheMismatch("the stat cache's length is wrong")
        for tree_id, plen, blen, entries in table:
            slen = entries * STAT.size
            folders.append(
                Folder(
                    bytes(payload[paths_at : paths_at + plen]),
                    tree_id,
                    bytes(payload[bodies_at : bodies_at + blen]),
                    bytes(payload[stats_at : stats_at + slen]),
                    entries,
                )
            )
            paths_at += plen
            bodies_at += blen
            stats_at += slen
    except (KeyError, ValueError, TypeError, struct.error) as exc:
        raise CacheMismatch(f"the stat cache cannot be read ({exc})") from None
    if not folders or folders[0].path != b"" or folders[0].tree_id.hex() != tree:
        raise CacheMismatch("the stat cache's root is not the head's tree")
    return folders


def entries_of(folder: Folder) -> list[tuple[bytes, bytes, bytes, tuple]]:
    """(mode, name, sha, stat record) for each entry; CacheMismatch if the folder's body does
    not hash to its tree id or cannot be parsed whole."""
    body = folder.body
    if hashlib.sha1(b"tree %d\0" % len(body) + body).digest() != folder.tree_id:
        raise CacheMismatch(f"folder {folder.path!r} of the stat cache is not its tree")
    parsed = _ENTRY.findall(body)
    if len(parsed) != folder.entries or sum(len(m) + len(n) + 22 for m, n, _ in parsed) != len(
        body
    ):
        raise CacheMismatch(f"folder {folder.path!r} of the stat cache cannot be parsed")
    return [
        (m, n, s, st) for (m, n, s), st in zip(parsed, STAT.iter_unpack(folder.stats), strict=True)
    ]


# -- the pass ------------------------------------------------------------------------------------


# The bits of st_mode the comparison looks at (the kind, and the owner's execute bit git keeps),
# and what they hold for each git mode. A link whose bits differ is only looked at again.
_KIND_BITS = statmod.S_IFMT(0o7777777) | 0o100
_KIND_OF = {
    b"100644": statmod.S_IFREG,
    b"100755": statmod.S_IFREG | 0o100,
    b"120000": statmod.S_IFLNK | 0o100,
}
_UNTRUSTED = ()  # no stat data, a gitlink, or racy when it was taken: always looked at again


def _expected(mode: bytes, rec: tuple[int, int, int, int, float]) -> tuple:
    """What a file's lstat must show for the cache to vouch for it: (mtime_ns, ctime_ns, size,
    inode, kind bits), or _UNTRUSTED. Racy is decided from the cached times (equal to the disk's
    whenever the rest matches), with a microsecond to spare against rounding."""
    mtime_ns, ctime_ns, size, ino, seen_at = rec
    kind = _KIND_OF.get(mode)
    if kind is None or seen_at < 0:
        return _UNTRUSTED
    window = _RACY_FINE if mtime_ns % 1_000_000_000 else _RACY
    if not seen_at - mtime_ns / 1e9 > window + 1e-6:
        return _UNTRUSTED
    return (mtime_ns, ctime_ns, size, ino, kind)


def check_shard(folders: list[Folder], root: bytes, shard: int, shards: int) -> Findings:
    """Check every `shards`-th folder from `shard` against the disk: its body against its tree
    id and its subfolders' ids, and each entry's stat data. CacheMismatch when the cache does
    not hold together (the caller then cannot use it)."""
    ids = {f.path: f.tree_id for f in folders}
    out = Findings()
    suspects = out.suspects
    bits = _KIND_BITS
    for folder in folders[shard::shards]:
        out.folders += 1
        path = folder.path
        prefix = path + b"/" if path else b""
        expected: dict[bytes, tuple | None] = {}
        for mode, name, sha, rec in entries_of(folder):
            if mode == _TREE_MODE:
                if ids.get(prefix + name) != sha:
                    raise CacheMismatch(f"folder {prefix + name!r} is missing from the stat cache")
                out.subtrees += 1
                expected[name] = None
            else:
                expected[name] = _expected(mode, rec)
        try:
            with os.scandir(root + b"/" + path if path else root) as it:
                listed = list(it)
        except OSError:
            suspects.append((os.fsdecode(path), UNREADABLE, True))
            continue
        for entry in listed:
            name = entry.name
            if name == b".git":
                continue
            want = expected.pop(name, False)
            if want is None:
                if not entry.is_dir(follow_symlinks=False):
                    suspects.append((os.fsdecode(prefix + name), CHANGED, False))
                continue
            if want is _UNTRUSTED:
                suspects.append((os.fsdecode(prefix + name), CHANGED, False))
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                suspects.append((os.fsdecode(prefix + name), CHANGED, False))
                continue
            if want is False:
                m = st.st_mode
                if statmod.S_ISREG(m) or statmod.S_ISLNK(m) or statmod.S_ISDIR(m):
                    suspects.append((os.fsdecode(prefix + name), NEW, statmod.S_ISDIR(m)))
                continue
            if want != (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode & bits):
                suspects.append((os.fsdecode(prefix + name), CHANGED, False))
        for name, want in expected.items():
            suspects.append((os.fsdecode(prefix + name), GONE, want is None))
    return out


# -- the hand-over --------------------------------------------------------------------------------
#
# Where Cairn runs as root, a sandbox's first start hands the workspace to the sandbox user: an
# lchown of every entry, which sets each file's ctime, so the stat cache would vouch for nothing
# afterwards. The hand-over pass does the stat pass's checks and the lchowns together: a cached
# file whose stat data the cache vouched for just before its lchown, and whose lstat right after
# it differs in ctime alone, gets that ctime in the cache. A file that differed before (edited
# since the cache was written, racy, without stat data) is chowned, reported and not vouched for.


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _open_folder(top: bytes, rel: bytes) -> int:
    """A descriptor of the folder `rel` ("/"-separated, "" for `top` itself) under `top`, opened
    one component at a time without following a link: Cairn may be root here, and a link planted
    where a folder was must never lead the hand-over outside the workspace."""
    fd = os.open(top, _DIR_FLAGS)
    try:
        for part in rel.split(b"/") if rel else ():
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _chown_at(fd: int, name: bytes, st: os.stat_result, uid: int, gid: int) -> bool:
    """lchown the entry `name` of the open folder `fd` to uid:gid unless it is theirs already;
    whether it was chowned."""
    if st.st_uid == uid and st.st_gid == gid:
        return False
    os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
    return True


def _listing(fd: int) -> list[tuple[bytes, os.DirEntry]]:
    with os.scandir(fd) as it:
        return [(os.fsencode(entry.name), entry) for entry in it]


def chown_tree(top: bytes, uid: int, gid: int, *, skip_files_under: bytes | None = None) -> None:
    """Hand `top` and everything under it to uid:gid, leaving the regular files under
    `skip_files_under` alone (known from the folder's listing, without an lstat). Links are
    handed over, never followed; each folder is opened from `top` without following one."""
    st = os.lstat(top)
    if not statmod.S_ISDIR(st.st_mode):
        if _owner(st) != (uid, gid):
            os.lchown(top, uid, gid)
        return
    _chown_below(top, b"", uid, gid, skip_files_under)


def _chown_below(top: bytes, rel: bytes, uid: int, gid: int, skip: bytes | None) -> None:
    """`rel` under `top` (a folder) and everything under it, as `chown_tree` says."""
    stack = [rel]
    while stack:
        folder = stack.pop()
        full = top + b"/" + folder if folder else top
        in_skipped = skip is not None and (full == skip or full.startswith(skip + b"/"))
        try:
            fd = _open_folder(top, folder)
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone meanwhile: nothing left to hand over
        try:
            if _owner(os.fstat(fd)) != (uid, gid):
                os.fchown(fd, uid, gid)
            for name, entry in _listing(fd):
                is_dir = entry.is_dir(follow_symlinks=False)
                if in_skipped and not is_dir and entry.is_file(follow_symlinks=False):
                    continue
                if is_dir:
                    stack.append(folder + b"/" + name if folder else name)
                    continue  # handed over when it is opened
                try:
                    _chown_at(fd, name, entry.stat(follow_symlinks=False), uid, gid)
                except FileNotFoundError:
                    continue
        finally:
            os.close(fd)


def _owner(st: os.stat_result) -> tuple[int, int]:
    return st.st_uid, st.st_gid


def hand_over_shard(
    folders: list[Folder], root: bytes, shard: int, shards: int, uid: int, gid: int
) -> tuple[Findings, list[tuple[int, int, int]]]:
    """`check_shard`, handing every entry of the shard's folders (and everything under a folder
    the cache does not hold, and under `.git` but the regular files of the root's .git/objects,
    which are the vault's) to uid:gid on the way; folders are opened without following a link.
    Also returns (folder number, entry number, ctime_ns) for each cached file whose ctime alone
    our own lchown changed."""
    ids = {f.path: f.tree_id for f in folders}
    out = Findings()
    suspects = out.suspects
    refreshed: list[tuple[int, int, int]] = []
    bits = _KIND_BITS
    objects = root + b"/.git/objects"
    for number in range(shard, len(folders), shards):
        folder = folders[number]
        out.folders += 1
        path = folder.path
        prefix = path + b"/" if path else b""
        expected: dict[bytes, tuple[int, tuple | None]] = {}
        for index, (mode, name, sha, rec) in enumerate(entries_of(folder)):
            if mode == _TREE_MODE:
                if ids.get(prefix + name) != sha:
                    raise CacheMismatch(f"folder {prefix + name!r} is missing from the stat cache")
                out.subtrees += 1
                expected[name] = (index, None)
            else:
                expected[name] = (index, _expected(mode, rec))
        try:
            fd = _open_folder(root, path)
        except OSError:
            suspects.append((os.fsdecode(path), UNREADABLE, True))
            continue
        try:
            listed = _listing(fd)
            for name, entry in listed:
                if name == b".git":
                    if entry.is_dir(follow_symlinks=False):
                        _chown_below(root, prefix + name, uid, gid, objects if not path else None)
                    else:
                        _chown_at(fd, name, entry.stat(follow_symlinks=False), uid, gid)
                    continue
                index, want = expected.pop(name, (-1, False))
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    if want is not False:
                        suspects.append((os.fsdecode(prefix + name), CHANGED, False))
                    continue
                m = st.st_mode
                if want is False:
                    if statmod.S_ISREG(m) or statmod.S_ISLNK(m) or statmod.S_ISDIR(m):
                        suspects.append((os.fsdecode(prefix + name), NEW, statmod.S_ISDIR(m)))
                    if statmod.S_ISDIR(m):
                        _chown_below(root, prefix + name, uid, gid, None)
                    else:
                        _chown_at(fd, name, st, uid, gid)
                    continue
                if want is None:
                    if not statmod.S_ISDIR(m):
                        suspects.append((os.fsdecode(prefix + name), CHANGED, False))
                    _chown_at(fd, name, st, uid, gid)  # a cached folder's own shard goes inside
                    continue
                seen = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, m & bits)
                if want is _UNTRUSTED or want != seen:
                    suspects.append((os.fsdecode(prefix + name), CHANGED, False))
                    _chown_at(fd, name, st, uid, gid)
                    continue
                if not _chown_at(fd, name, st, uid, gid):
                    continue
                try:
                    after = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    suspects.append((os.fsdecode(prefix + name), CHANGED, False))
                    continue
                if (after.st_mtime_ns, after.st_size, after.st_ino, after.st_mode & bits) == (
                    seen[0],
                    seen[2],
                    seen[3],
                    seen[4],
                ) and _owner(after) == (uid, gid):
                    refreshed.append((number, index, after.st_ctime_ns))
                else:
                    suspects.append((os.fsdecode(prefix + name), CHANGED, False))
        finally:
            os.close(fd)
        for name, (_index, want) in expected.items():
            suspects.append((os.fsdecode(prefix + name), GONE, want is None))
    return out, refreshed


def header_of(data: bytes) -> tuple[str, str, str]:
    """(workspace, head, tree) the cache says it was written for; CacheMismatch when it cannot
    be read. Nothing in it is checked yet: `decode` with these checks the rest."""
    try:
        start = len(MAGIC) + _DIGEST
        (hlen,) = struct.unpack_from("<I", data, start)
        header = json.loads(data[start + 4 : start + 4 + hlen])
        return str(header["workspace"]), str(header["head"]), str(header["tree"])
    except (KeyError, ValueError, TypeError, struct.error) as exc:
        raise CacheMismatch(f"the stat cache cannot be read ({exc})") from None


def refreshed_of(text: str) -> list[tuple[int, int, int]]:
    """The refreshed entries of a helper's answer (as `main` encodes them)."""
    return list(REFRESHED.iter_unpack(base64.b64decode(text, validate=True)))


def with_ctimes(data: bytes, refreshed: Iterable[tuple[int, int, int]]) -> bytes:
    """The cache `data` (already decoded whole by the caller's pass) with the given entries'
    ctimes replaced: (folder number, entry number, ctime_ns), as `hand_over_shard` reports them.
    The tree bodies are untouched, so the cache still hashes to the same head's tree."""
    start = len(MAGIC) + _DIGEST
    payload = bytearray(data[start:])
    (hlen,) = struct.unpack_from("<I", payload, 0)
    count = int(json.loads(bytes(payload[4 : 4 + hlen]))["folders"])
    pos = 4 + hlen
    table = list(_TABLE.iter_unpack(payload[pos : pos + count * _TABLE.size]))
    stats_at = pos + count * _TABLE.size + sum(t[1] + t[2] for t in table)
    first_record = []
    for _tree_id, _plen, _blen, entries in table:
        first_record.append(stats_at)
        stats_at += entries * STAT.size
    if stats_at != len(payload):
        raise CacheMismatch("the stat cache's length is wrong")
    for number, index, ctime_ns in refreshed:
        if not 0 <= index < table[number][3]:
            raise CacheMismatch("a refreshed entry is not in the stat cache")
        struct.pack_into("<q", payload, first_record[number] + index * STAT.size + 8, ctime_ns)
    return MAGIC + hashlib.sha256(payload).digest() + bytes(payload)


def check_totals(findings: Findings, folders: int) -> None:
    """The shards' sums: every folder checked once, and each one but the root named by exactly
    one subtree entry (no folder of the cache is outside the head's tree)."""
    if findings.folders != folders or findings.subtrees != folders - 1:
        raise CacheMismatch("the stat cache's folders are not the head's tree")


def main(argv: list[str]) -> int:
    owner = None
    if argv and argv[0] == "hand-over":
        uid, gid = int(argv[-2]), int(argv[-1])
        owner, argv = (uid, gid), argv[1:-2]
    cache, root, shard, shards, workspace, head, tree = argv
    try:
        with open(cache, "rb") as f:
            data = f.read()
        folders = decode(data, workspace, head, tree)
        refreshed: list[tuple[int, int, int]] = []
        if owner is None:
            found = check_shard(folders, os.fsencode(root), int(shard), int(shards))
        else:
            found, refreshed = hand_over_shard(
                folders, os.fsencode(root), int(shard), int(shards), *owner
            )
        answer = {
            "ok": True,
            "total": len(folders),
            "folders": found.folders,
            "subtrees": found.subtrees,
            "suspects": found.suspects,
            "refreshed": base64.b64encode(
                b"".join([REFRESHED.pack(*r) for r in refreshed])
            ).decode(),
        }
    except (OSError, CacheMismatch) as exc:
        answer = {"ok": False, "why": str(exc)}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
