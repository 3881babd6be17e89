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
checks one shard of the folders and prints its findings as JSON; it imports nothing but the
standard library, so a helper process starts in milliseconds.
"""

from __future__ import annotations

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


def check_totals(findings: Findings, folders: int) -> None:
    """The shards' sums: every folder checked once, and each one but the root named by exactly
    one subtree entry (no folder of the cache is outside the head's tree)."""
    if findings.folders != folders or findings.subtrees != folders - 1:
        raise CacheMismatch("the stat cache's folders are not the head's tree")


def main(argv: list[str]) -> int:
    cache, root, shard, shards, workspace, head, tree = argv
    try:
        with open(cache, "rb") as f:
            data = f.read()
        folders = decode(data, workspace, head, tree)
        found = check_shard(folders, os.fsencode(root), int(shard), int(shards))
        answer = {
            "ok": True,
            "total": len(folders),
            "folders": found.folders,
            "subtrees": found.subtrees,
            "suspects": found.suspects,
        }
    except (OSError, CacheMismatch) as exc:
        answer = {"ok": False, "why": str(exc)}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
