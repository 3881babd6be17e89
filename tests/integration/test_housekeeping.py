"""Housekeeping on a real data folder (real vaults, real git; no sandbox): the plan says exactly
what a cleanup frees, checkpoints and live tasks are untouched, and items that stopped
qualifying between plan and clean are skipped."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from core import housekeeping
from core.app import Cairn
from core.errors import Conflict
from core.ids import new_id
from core.models import Run
from core.vault import snapshot_ref
from tests.support import as_json, cairnctl

OLD = time.time() - 3 * 86400  # older than the grace period


def du(root: Path) -> int:
    """Disk used by the data folder, as `du` sees it, without what a cleanup itself adds: the
    database (its event) and lock files (made on first use, then kept)."""
    out = subprocess.run(
        ["du", "-s", "-B1", "--exclude=cairn.db*", "--exclude=*.lock", str(root)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(out.split()[0])


def hashes(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            p = Path(dirpath, name)
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def make_repo(path: Path) -> Path:
    path.mkdir()
    (path / "README.md").write_text("# service\n")
    (path / "app.py").write_text("print('hello')\n")
    git = ["git", "-c", "user.name=T", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], cwd=path, check=True)
    return path


def orphan(app: Cairn, source_id: str, data: bytes) -> Path:
    """A vault object nothing reaches (as an interrupted capture leaves), made old."""
    vault = app.ctx.vault_for(source_id)
    sha = vault.objects.write_blob(data)
    path = vault.git_dir / "objects" / sha[:2] / sha[2:]
    os.utime(path, (OLD, OLD))
    return path


def fake_run(app: Cairn, task_id: str, state: str = "succeeded") -> Run:
    task = app.tasks.get(task_id)
    run = Run(
        new_id("run"),
        task.id,
        state,
        1,
        "shell",
        workspace_id=task.workspace_id,
        created_at=time.time(),
    )
    app.ctx.store.add_run(run)
    return run


@pytest.fixture
def world(tmp_path, data_dir):
    """Two tasks of one git folder, one of a plain folder; revisions, snapshots, checkpoints and
    orphan vault objects (one also hard-linked into a workspace made after it)."""
    repo = make_repo(tmp_path / "repo")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("notes\n" * 1000)
    app = Cairn(data_dir)
    t1 = app.tasks.new(repo, title="Fix login").task
    ws1 = Path(app.tasks.workspace_of(t1).root)
    (ws1 / "app.py").write_text("print('fixed')\n")
    (ws1 / "big.bin").write_bytes(os.urandom(200_000))
    app.revisions.capture(t1.id)
    fake_run(app, t1.id)
    ck1 = app.runs.checkpoint(t1.id)
    expected = {ck1.id: hashes(ws1)}
    (ws1 / "later.txt").write_text("after the checkpoint\n")
    app.revisions.capture(t1.id)

    linked = orphan(app, t1.source_id, os.urandom(50_000))  # linked into ws2 below
    t2 = app.tasks.new(repo, title="Add logout").task
    ws2 = Path(app.tasks.workspace_of(t2).root)
    (ws2 / "logout.py").write_text("def logout(): pass\n")
    app.revisions.capture(t2.id)
    fake_run(app, t2.id)
    ck2 = app.runs.checkpoint(t2.id)
    expected[ck2.id] = hashes(ws2)

    t3 = app.tasks.new(plain, title="Plain notes").task
    ws3 = Path(app.tasks.workspace_of(t3).root)
    (ws3 / "more.txt").write_text("more\n" * 5000)
    app.snapshots.take(t3.id)
    lone = orphan(app, t1.source_id, os.urandom(30_000))
    fresh = app.ctx.vault_for(t1.source_id).objects.write_blob(os.urandom(10_000))  # too young
    yield {
        "app": app,
        "t1": t1,
        "t2": t2,
        "t3": t3,
        "expected": expected,
        "linked": linked,
        "lone": lone,
        "fresh": fresh,
        "data": data_dir,
    }
    app.close()


def test_usage_counts_like_du_and_attributes_shared_objects_to_the_vault(world):
    app = world["app"]
    usage = app.housekeeping.usage()
    out = subprocess.run(
        ["du", "-s", "-B1", str(world["data"])], check=True, capture_output=True, text=True
    ).stdout
    assert usage.total == int(out.split()[0])
    assert set(usage.parts) == set(housekeeping.CATEGORIES)
    assert usage.parts["vault"] > 0 and usage.parts["workspaces"] > 0
    assert usage.parts["database"] > 0
    # A workspace's .git/objects are hard links to the vault's: counted once, as the vault's.
    ws2 = Path(app.tasks.workspace_of(world["t2"]).root)
    linked = ws2 / ".git" / "objects" / world["linked"].parent.name / world["linked"].name
    assert os.path.samefile(linked, world["linked"])


def test_archive_then_clean_frees_exactly_the_plan_and_keeps_history(world, tmp_path):
    app, t1, t2, t3 = world["app"], world["t1"], world["t2"], world["t3"]
    ws1 = app.tasks.workspace_of(t1)
    app.housekeeping.archive(t1.id)
    app.housekeeping.archive(t3.id)
    assert app.tasks.workspace_of(t1).state == "archived"

    plan = app.housekeeping.plan()
    kinds = sorted(i.kind for i in plan.items)
    assert kinds == ["archived_workspace", "archived_workspace", "vault_objects"]
    objects = next(i for i in plan.items if i.kind == "vault_objects")
    assert objects.count == 2  # the young object is not in the plan
    names = {
        str(world["linked"].relative_to(world["linked"].parents[1])),
        str(world["lone"].relative_to(world["lone"].parents[1])),
    }
    assert set(objects.objects) == names
    # The linked orphan still has a link in the live workspace of t2: removing the vault's link
    # frees nothing, so only the lone one counts.
    assert objects.bytes == os.lstat(world["lone"]).st_blocks * 512
    tree_item = next(i for i in plan.items if i.workspace_id == ws1.id)
    assert "Fix login" in tree_item.description and ws1.id in tree_item.description
    assert tree_item.bytes > 200_000

    before = du(world["data"])
    result = app.housekeeping.clean(plan)
    after = du(world["data"])
    assert not result.skipped, result.skipped
    assert result.freed == plan.total == before - after
    assert not Path(ws1.root).exists()
    assert not world["lone"].exists()
    assert app.ctx.vault_for(t1.source_id).objects.has_object(world["fresh"])

    # Every checkpoint's snapshot still restores, hash-exact.
    for ck in app.ctx.store.list_checkpoints():
        dest = tmp_path / f"restored-{ck.id}"
        root, tree = app.snapshots.materialize(ck.snapshot_id, dest)
        assert tree == ck.tree
        assert hashes(root) == world["expected"][ck.id]
    # History of the archived task stays browsable; the live task works as before.
    assert len(app.revisions.all(t1.id)) >= 3
    assert app.revisions.diff(t1.id).files
    ws2 = Path(app.tasks.workspace_of(t2).root)
    (ws2 / "logout.py").write_text("def logout(): return True\n")
    rev, new = app.revisions.capture(t2.id)
    assert new
    assert any(f.path == "logout.py" for f in app.revisions.diff(t2.id).files)
    # As root, the workspace is the sandbox user's: git trusts it only when told to.
    subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(ws2), "fsck", "--no-dangling"],
        check=True,
        capture_output=True,
    )
    # Nothing is left to do.
    assert app.housekeeping.plan().empty

    # Un-archiving restores the files from the newest snapshot.
    ws = app.housekeeping.unarchive(t1.id)
    assert ws.state == "prepared"
    assert (Path(ws.root) / "later.txt").read_text() == "after the checkpoint\n"
    assert (
        hashes(Path(ws.root))["big.bin"]
        == world["expected"][app.ctx.store.list_checkpoints()[0].id]["big.bin"]
    )
    subprocess.run(["git", "-C", ws.root, "status", "--short"], check=True, capture_output=True)


def test_items_that_stopped_qualifying_are_skipped(world):
    app, t1 = world["app"], world["t1"]
    app.housekeeping.archive(t1.id)
    plan = app.housekeeping.plan()
    assert {i.kind for i in plan.items} == {"archived_workspace", "vault_objects"}

    # Between plan and clean: the workspace is un-archived, and a checkpoint comes to reference
    # a snapshot of a commit made of one of the planned objects.
    app.housekeeping.unarchive(t1.id)
    vault = app.ctx.vault_for(t1.source_id)
    lone_sha = world["lone"].parent.name + world["lone"].name
    from core.vault.objects import TreeEntry

    tree = vault.objects.write_tree([TreeEntry("100644", b"kept.bin", lone_sha)])
    commit = vault.objects.write_commit(tree, [], "kept by a checkpoint")
    from core.models import Checkpoint, Snapshot

    ws = app.tasks.workspace_of(t1)
    snap = Snapshot(new_id("snapshot"), ws.id, commit, tree, "durable", created_at=time.time())
    vault.objects.update_ref(snapshot_ref(snap.id), commit, durable=True)
    app.ctx.store.add_snapshot(snap)
    run = fake_run(app, t1.id)
    app.ctx.store.add_checkpoint(
        Checkpoint(
            new_id("checkpoint"),
            run.id,
            1,
            f"git:{snapshot_ref(snap.id)}@{commit}",
            tree,
            snap.id,
            None,
            None,
            {},
            1,
            time.time(),
        )
    )

    result = app.housekeeping.clean(plan)
    reasons = {s.item.kind: s.reason for s in result.skipped}
    assert "no longer archived" in reasons["archived_workspace"]
    assert Path(ws.root).is_dir()
    assert world["lone"].exists()
    assert any("became reachable" in n for n in result.notes)
    assert not world["linked"].exists()  # the other planned object still qualified
    root, got = app.snapshots.materialize(snap.id, world["data"].parent / "kept")
    assert got == tree


def test_archive_refuses_while_a_run_is_in_flight(world):
    app, t2 = world["app"], world["t2"]
    fake_run(app, t2.id, state="running")
    with pytest.raises(Conflict, match="in flight"):
        app.housekeeping.archive(t2.id)
    assert app.tasks.workspace_of(t2).state == "prepared"


def test_an_interrupted_cleanup_is_finished_or_undone(world):
    app, t1 = world["app"], world["t1"]
    vault = app.ctx.vault_for(t1.source_id)
    # A crash after moving a tree to trash/, and one after quarantining a needed object.
    leftover = world["data"] / "workspaces" / f"{housekeeping.TRASH_PREFIX}ws-crashed"
    leftover.mkdir()
    (leftover / "file").write_bytes(os.urandom(20_000))
    quarantine = vault.git_dir / f"{housekeeping.QUARANTINE_PREFIX}1-dead"
    quarantine.mkdir()
    head = vault.revision_head(app.tasks.workspace_of(t1).id)
    head_path = vault.git_dir / "objects" / head[:2] / head[2:]
    os.rename(head_path, quarantine / head)
    plan = app.housekeeping.plan()
    # The vault cannot be walked while its head is set aside: nothing of it is planned.
    assert [i.kind for i in plan.items] == ["leftover"]
    assert any("cannot be walked" in n for n in plan.notes)
    before = du(world["data"])
    quarantine_dir = os.lstat(quarantine).st_blocks * 512  # put back, not freed by the plan
    result = app.housekeeping.clean(plan)
    assert result.freed == plan.total == before - du(world["data"]) - quarantine_dir
    assert not leftover.exists()
    # The quarantined object is put back, never deleted: the history is whole again.
    assert head_path.exists() and not quarantine.exists()
    assert any("put back" in n for n in result.notes)
    assert app.revisions.all(t1.id)[-1].id == head
    assert app.revisions.diff(t1.id).files
    assert [i.kind for i in app.housekeeping.plan().items] == ["vault_objects"]


def test_cairnctl_housekeeping_dry_run_then_yes(world):
    app, t3, data = world["app"], world["t3"], world["data"]
    ws3 = app.tasks.workspace_of(t3)
    out = cairnctl(data, "archive", t3.id)
    assert "archived" in out.stdout
    dry = as_json(cairnctl(data, "housekeeping", "--json"))
    assert dry["dry_run"] and dry["result"] is None
    assert Path(ws3.root).is_dir()
    planned = dry["plan"]["total"]
    assert planned > 0
    text = cairnctl(data, "housekeeping", "--dry-run").stdout
    assert "will free" in text and ws3.id in text and "iB" in text
    before = du(data)
    done = as_json(cairnctl(data, "housekeeping", "--yes", "--json"))
    assert done["result"]["freed"] == planned == before - du(data)
    assert not Path(ws3.root).exists()
    again = as_json(cairnctl(data, "housekeeping", "--json"))
    assert again["plan"]["items"] == []
    bad = cairnctl(data, "archive", "no-such-task", check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_deleted_tasks_pack_is_freed_and_a_pack_still_reached_is_kept(tmp_path, data_dir):
    """A big folder's import stores its files as one pack: once its task is deleted and nothing
    else reaches any of them, the cleanup frees the pack whole; the next import's pack, which a
    task still reaches, stays; a pack an interrupted cleanup set aside is put back."""
    folder = tmp_path / "plain"
    folder.mkdir()
    for i in range(300):  # a pack, not loose objects
        (folder / f"f{i}.txt").write_text(f"first {i}\n" * 20)
    app = Cairn(data_dir)
    try:
        first = app.tasks.new(folder, title="First").task
        vault = app.ctx.vault_for(first.source_id)
        packs = vault.git_dir / "objects" / "pack"
        (old_pack,) = packs.glob("pack-*.pack")
        for i in range(300):
            (folder / f"f{i}.txt").write_text(f"second {i}\n" * 20)
        second = app.tasks.new(folder, title="Second").task
        assert second.source_id == first.source_id
        (new_pack,) = set(packs.glob("pack-*.pack")) - {old_pack}
        for path in packs.iterdir():
            os.utime(path, (OLD, OLD))
        app.housekeeping.delete(first.id)

        plan = app.housekeeping.plan()
        (item,) = [i for i in plan.items if i.kind == housekeeping.KIND_OBJECTS]
        assert item.objects == (f"pack/{old_pack.name}",), item
        assert item.count >= 300
        files = [old_pack.with_suffix(s) for s in (".pack", ".idx")]
        # The second workspace was made with links to every vault object: the vault's own
        # links go now, the blocks with the last of them.
        assert all(os.lstat(p).st_nlink == 2 for p in files)
        assert item.bytes == 0
        before = du(data_dir)
        result = app.housekeeping.clean(plan)
        assert not result.skipped, result.skipped
        assert result.freed == item.bytes == before - du(data_dir)
        assert not any(p.exists() for p in files) and new_pack.exists()
        ws = Path(app.tasks.workspace_of(second).root)
        assert hashes(ws) == hashes(folder)
        assert (
            subprocess.run(
                [
                    "git",
                    "--git-dir",
                    str(vault.git_dir),
                    "fsck",
                    "--connectivity-only",
                    "--no-dangling",
                ],
                capture_output=True,
            ).returncode
            == 0
        )
        assert not [i for i in app.housekeeping.plan().items if i.kind == "vault_objects"]

        # A crash after setting the live pack aside: the next cleanup puts it back, index last.
        quarantine = vault.git_dir / f"{housekeeping.QUARANTINE_PREFIX}1-dead"
        quarantine.mkdir()
        for suffix in (".idx", ".pack"):
            os.rename(new_pack.with_suffix(suffix), quarantine / new_pack.with_suffix(suffix).name)
        assert any("cannot be walked" in n for n in app.housekeeping.plan().notes)
        app.housekeeping.clean(app.housekeeping.plan())
        assert new_pack.exists() and new_pack.with_suffix(".idx").exists()
        assert not quarantine.exists()
        assert app.revisions.diff(second.id) is not None
    finally:
        app.close()
