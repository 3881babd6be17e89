"""The hand-over of a workspace to the sandbox user (core.sandbox.base.prepare_host_dirs, where
Cairn runs as root): every entry is lchowned, which sets every file's ctime, and the stat cache
goes on vouching for exactly the files it vouched for just before their lchown, so the first
Start's checkpoint is a stat pass, not a rehash. A file edited before the hand-over, one whose
cached stat data was racy, one changed between its lchown and the look after it, and a cache
that cannot be used are never vouched for: the next capture reads them."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

import core.tasks as tasks_module
from core.app import Cairn
from core.ids import new_id
from core.sandbox import base
from core.sandbox.base import SandboxSpec, prepare_host_dirs
from core.vault import statpass
from core.vault.tree_index import TreeIndex, stat_key
from core.watch import _encode_stat_cache, hand_over_workspace
from tests.support import hashed_paths
from tests.unit.test_stat_pass import pass_of, project, tree_of

USER = (1000, 1000)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root hands a workspace over")
real_workspace_owner = base.workspace_owner


@pytest.fixture(autouse=True)
def workspaces_written_as_cairns_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most tests here hand over a workspace whose files are still Cairn's (root's), as one
    written before its import made it the sandbox user's, or restored by root, is: every
    entry is lchowned and the stat cache must keep up with the new ctimes."""
    monkeypatch.setattr(tasks_module, "workspace_owner", lambda uid=None: None)


def new_task(app: Cairn, folder: Path):
    """`app.tasks.new(folder)`, its workspace's files Cairn's own (see above): an import in a
    child process (the app's) made them the sandbox user's, so they are handed back to root and
    the stat cache written again for them, as a restore by root leaves it."""
    made = app.tasks.new(folder)
    root = Path(made.workspace.root)
    if os.geteuid() == 0 and os.lstat(root / "run.sh").st_uid != 0:
        statpass.chown_tree(os.fsencode(root), 0, 0, skip_files_under=os.fsencode(root / ".git"))
        app.revisions.seed_stat_cache(made.workspace.id, root, made.base_revision)
    return made


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return hashed_paths(monkeypatch)


@pytest.fixture(params=[False, True], ids=["in-process", "as-the-app"])
def app(request, tmp_path: Path):
    made = Cairn(tmp_path / "data", captures_in_child=request.param)
    yield made
    made.close()


def spec_of(app: Cairn, made, tmp_path: Path, *, stat_cache: bool = True) -> SandboxSpec:
    ws = made.workspace
    return SandboxSpec(
        workspace_id=ws.id,
        session_id=new_id("session"),
        snapshot_id=None,
        workspace_root=Path(ws.root),
        home_dir=tmp_path / "home",
        runs_dir=tmp_path / "runs",
        uid=USER[0],
        gid=USER[1],
        stat_cache=app.revisions._stat_cache(ws.id) if stat_cache else None,
    )


def owners(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            out[os.path.relpath(path, root)] = (st.st_uid, st.st_gid)
    return out


def capture(app: Cairn, made):
    return app.revisions.capture(made.task.id, trigger="checkpoint")


@as_root
def test_a_handed_over_workspace_is_proved_unchanged_without_a_rehash(app, tmp_path, hashed):
    made = new_task(app, project(tmp_path))
    root = Path(made.workspace.root)
    ctimes = {rel: os.lstat(root / rel).st_ctime_ns for rel in ("run.sh", "pkg0/sub0/mod0.py")}
    time.sleep(0.01)  # the lchown's ctime is a later one
    prepare_host_dirs(spec_of(app, made, tmp_path))

    for rel, owner in owners(root).items():
        regular = (root / rel).is_file() and not (root / rel).is_symlink()
        if rel.startswith(".git/objects/") and regular:
            assert owner == (0, 0), f"{rel} is the vault's and stays so"
        else:
            assert owner == USER, rel
    assert all(os.lstat(root / rel).st_ctime_ns != ctime for rel, ctime in ctimes.items())
    assert pass_of(app, made.workspace.id) == []
    hashed.clear()
    rev, new = capture(app, made)
    assert not new and rev.id == made.base_revision and hashed == []


@as_root
def test_an_edit_made_before_the_hand_over_is_still_recorded(app, tmp_path, hashed):
    made = new_task(app, project(tmp_path))
    root = Path(made.workspace.root)
    target = root / "pkg1" / "sub1" / "mod1.py"
    target.write_text("value = 7\n")  # same size, right after the cache was written
    prepare_host_dirs(spec_of(app, made, tmp_path))

    assert pass_of(app, made.workspace.id) == [("pkg1/sub1/mod1.py", statpass.CHANGED, False)]
    hashed.clear()
    rev, new = capture(app, made)
    assert new
    vault = app.ctx.vault_for(made.workspace.source_id)
    assert ("pkg1/sub1/mod1.py", vault.objects.write_blob(b"value = 7\n")) in tree_of(vault, rev.id)
    if not app.revisions._captures_in_child:  # the child's reads are not counted here
        assert str(target) in hashed and len(hashed) < 5


@as_root
def test_a_file_whose_cached_stat_was_racy_is_not_vouched_for_after_it(tmp_path, hashed):
    """The cache holds the file's current stat data, but taken in the racy window of its
    mtime: the bytes may differ from the cached blob, and the hand-over must not make the
    record look trustworthy."""
    app = Cairn(tmp_path / "data")
    try:
        made = new_task(app, project(tmp_path))
        ws = made.workspace
        target = Path(ws.root) / "pkg0" / "sub0" / "mod0.py"
        vault = app.ctx.vault_for(ws.source_id)
        head = vault.revision_head(ws.id)
        index = TreeIndex.from_tree(vault.objects, vault.tree_of(head))
        target.write_text("value = 9\n")  # the head's blob is "value = 0\n"
        for rel, rec in index.files().items():
            rec.stat, rec.seen_at = stat_key(os.lstat(os.path.join(ws.root, rel))), time.time() + 10
        index.get("pkg0/sub0/mod0.py").seen_at = os.lstat(target).st_mtime + 0.01
        app.revisions._stat_cache(ws.id).write_bytes(_encode_stat_cache(ws.id, head, index))

        prepare_host_dirs(spec_of(app, made, tmp_path))

        assert os.lstat(target).st_uid == USER[0]
        assert pass_of(app, ws.id) == [("pkg0/sub0/mod0.py", statpass.CHANGED, False)]
        hashed.clear()
        rev, new = capture(app, made)
        assert new and hashed == [str(target)]
        assert ("pkg0/sub0/mod0.py", vault.objects.write_blob(b"value = 9\n")) in tree_of(
            vault, rev.id
        )
    finally:
        app.close()


@as_root
def test_a_file_changed_between_its_lchown_and_the_look_after_it_is_reported(tmp_path, monkeypatch):
    app = Cairn(tmp_path / "data")
    try:
        made = new_task(app, project(tmp_path))
        ws = made.workspace
        target = Path(ws.root) / "pkg2" / "sub0" / "mod2.py"
        chown = os.chown

        def chown_then_edit(name, uid, gid, **kwargs):
            chown(name, uid, gid, **kwargs)
            if name == b"mod2.py":
                time.sleep(0.01)
                target.write_text("value = 8\n")

        monkeypatch.setattr(statpass.os, "chown", chown_then_edit)
        data = app.revisions._stat_cache(ws.id).read_bytes()
        folders = statpass.decode(data, *statpass.header_of(data))
        found, refreshed = statpass.hand_over_shard(folders, os.fsencode(ws.root), 0, 1, *USER)

        assert found.suspects == [("pkg2/sub0/mod2.py", statpass.CHANGED, False)]
        files = sum(1 for f in folders for m, *_ in statpass.entries_of(f) if m != b"40000")
        assert len(refreshed) == files - 1
    finally:
        app.close()


@as_root
def test_new_files_folders_and_links_are_handed_over_without_following_links(app, tmp_path):
    made = new_task(app, project(tmp_path))
    root = Path(made.workspace.root)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the workspace's\n")
    (root / "fresh" / "deeper").mkdir(parents=True)
    (root / "fresh" / "deeper" / "a.txt").write_text("a\n")
    (root / "pkg0" / "b.txt").write_text("b\n")
    os.symlink(outside, root / "pkg0" / "out")
    prepare_host_dirs(spec_of(app, made, tmp_path))

    got = owners(root)
    for rel in ("fresh", "fresh/deeper", "fresh/deeper/a.txt", "pkg0/b.txt", "pkg0/out"):
        assert got[rel] == USER, rel
    assert os.stat(outside).st_uid == 0
    found = sorted(pass_of(app, made.workspace.id) or [])
    assert found == [
        ("fresh", statpass.NEW, True),
        ("pkg0/b.txt", statpass.NEW, False),
        ("pkg0/out", statpass.NEW, False),
    ]


@as_root
def test_a_damaged_cache_hands_the_workspace_over_the_plain_way(app, tmp_path, hashed):
    made = new_task(app, project(tmp_path))
    cache = app.revisions._stat_cache(made.workspace.id)
    data = bytearray(cache.read_bytes())
    data[-3] ^= 0xFF
    cache.write_bytes(bytes(data))
    assert not hand_over_workspace(cache, made.workspace.root, *USER)
    assert cache.read_bytes() == bytes(data)  # nothing written over it
    prepare_host_dirs(spec_of(app, made, tmp_path))

    root = Path(made.workspace.root)
    assert all(
        owner == USER
        for rel, owner in owners(root).items()
        if not rel.startswith(".git/objects/") or (root / rel).is_dir()
    )
    rev, new = capture(app, made)
    assert not new and rev.id == made.base_revision  # read again, found the same


@as_root
def test_without_a_stat_cache_the_workspace_is_still_handed_over(app, tmp_path):
    made = new_task(app, project(tmp_path))
    prepare_host_dirs(spec_of(app, made, tmp_path, stat_cache=False))
    assert owners(Path(made.workspace.root))["pkg0/sub0/mod0.py"] == USER


@as_root
def test_a_cache_written_meanwhile_is_not_replaced(tmp_path, monkeypatch):
    """A capture that saves the cache while the hand-over runs wrote a newer one: the hand-over
    leaves it (its own, older, picture would only be refused later)."""
    app = Cairn(tmp_path / "data")
    try:
        made = new_task(app, project(tmp_path))
        cache = app.revisions._stat_cache(made.workspace.id)
        pass_ = base.hand_over_workspace.__globals__["_sharded_pass"]

        def pass_then_rewrite(*args, **kwargs):
            found = pass_(*args, **kwargs)
            newer = bytearray(cache.read_bytes())
            newer[-1] ^= 0x01
            cache.write_bytes(bytes(newer))
            return found

        monkeypatch.setitem(
            base.hand_over_workspace.__globals__, "_sharded_pass", pass_then_rewrite
        )
        before = cache.read_bytes()
        assert hand_over_workspace(cache, made.workspace.root, *USER)
        after = cache.read_bytes()
        assert after != before and after[:-1] == before[:-1]
    finally:
        app.close()


def test_as_another_user_nothing_is_handed_over_and_the_cache_stays(app, tmp_path, monkeypatch):
    made = new_task(app, project(tmp_path))
    cache = app.revisions._stat_cache(made.workspace.id)
    before = cache.read_bytes()
    monkeypatch.setattr(base.os, "geteuid", lambda: 1000)
    prepare_host_dirs(spec_of(app, made, tmp_path))
    assert cache.read_bytes() == before
    assert owners(Path(made.workspace.root))["pkg0/sub0/mod0.py"] == (os.getuid(), os.getgid())
    assert pass_of(app, made.workspace.id) == []


@as_root
def test_a_link_planted_where_a_cached_folder_was_is_not_followed(app, tmp_path):
    """A sandbox user of an earlier generation may replace a folder with a link to anywhere:
    the hand-over (as root) hands the link over and never what it points to."""
    made = new_task(app, project(tmp_path))
    root = Path(made.workspace.root)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "sub0").mkdir(parents=True)
    (elsewhere / "sub0" / "mod0.py").write_text("not the workspace's\n")
    (elsewhere / "keep.txt").write_text("keep\n")
    for rel in ("pkg0/sub0", "pkg0/sub1"):
        for child in (root / rel).iterdir():
            child.unlink()
        (root / rel).rmdir()
    (root / "pkg0").rmdir()
    os.symlink(elsewhere, root / "pkg0")
    prepare_host_dirs(spec_of(app, made, tmp_path))

    assert os.lstat(root / "pkg0").st_uid == USER[0]
    for path in (
        elsewhere,
        elsewhere / "sub0",
        elsewhere / "sub0" / "mod0.py",
        elsewhere / "keep.txt",
    ):
        assert os.lstat(path).st_uid == 0, path
    found = pass_of(app, made.workspace.id) or []
    assert ("pkg0", statpass.CHANGED, False) in found


# -- a new task's workspace is the sandbox user's from the start ----------------------------------


@as_root
def test_a_new_tasks_workspace_leaves_the_hand_over_nothing_to_chown(tmp_path, hashed, monkeypatch):
    """The import writes the workspace as the sandbox user's (Cairn runs as root): the first
    Start's hand-over then changes no file of the tree, so the stat cache and the workspace's git
    index the import left stay true as they are, and the checkpoint's capture is a stat pass."""
    monkeypatch.setattr(tasks_module, "workspace_owner", real_workspace_owner)
    app = Cairn(tmp_path / "data", captures_in_child=True)
    try:
        made = app.tasks.new(project(tmp_path))
        root = Path(made.workspace.root)
        for rel, owner in owners(root).items():
            if not rel.startswith(".git"):
                assert owner == USER, rel
        # Opened once the stat data was recorded, as its parent folder is.
        assert os.lstat(root).st_uid == USER[0]
        assert os.lstat(root).st_mode == os.lstat(root.parent).st_mode
        cache = app.revisions._stat_cache(made.workspace.id)
        before = cache.read_bytes()
        stats = {rel: os.lstat(root / rel) for rel in owners(root) if not rel.startswith(".git")}
        prepare_host_dirs(spec_of(app, made, tmp_path))
        for rel, owner in owners(root).items():
            regular = (root / rel).is_file() and not (root / rel).is_symlink()
            if not (rel.startswith(".git/objects/") and regular):
                assert owner == USER, rel
        assert {rel: os.lstat(root / rel) for rel in stats} == stats  # not a ctime changed
        assert cache.read_bytes() == before
        assert pass_of(app, made.workspace.id) == []
        status = subprocess.run(
            ["git", "-c", "safe.directory=*", "-C", str(root), "diff-files", "--quiet"],
            check=False,
            capture_output=True,
        )
        assert status.returncode == 0  # git's own index still vouches, owner included
        hashed.clear()
        rev, new = capture(app, made)
        assert not new and rev.id == made.base_revision and hashed == []
    finally:
        app.close()


def test_the_workspace_owner_is_the_sandbox_user_only_where_cairn_is_root(monkeypatch):
    monkeypatch.setattr(base.os, "geteuid", lambda: 0)
    assert base.workspace_owner() == (base.FALLBACK_UID, base.FALLBACK_GID)
    assert base.workspace_owner(2000) == (2000, 2000)  # a policy's sandbox user
    monkeypatch.setattr(base.os, "geteuid", lambda: 1000)
    assert base.workspace_owner() is None
    assert base.workspace_owner(2000) is None
