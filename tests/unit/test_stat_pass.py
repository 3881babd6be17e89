"""The verifying stat pass (core.vault.statpass, core.watch.stat_pass): a workspace unchanged since
its stat cache was written is proved so by stat data alone, on several cores, with no capture and
no index loaded; and it refuses to vouch for what it must not: an edit made right after the
import, a file whose stat data was taken in its racy window, a new file the ignore rules keep,
a deleted one, a damaged or forged cache. The capture that Start and Snapshot Now make from the
desktop app (`captures_in_child`) takes the same pass first."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from core import watch
from core.app import Cairn
from core.engines.base import ToolContract
from core.ids import new_id
from core.models import Run
from core.vault import snapshot_ref, statpass
from core.vault.ignore import IgnoreRules
from core.vault.tree_index import FileRecord, TreeIndex, stat_key
from core.watch import _encode_stat_cache, _helper_argv, stat_pass
from tests.support import hashed_paths


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return hashed_paths(monkeypatch)


@pytest.fixture
def cairn(tmp_path: Path):
    made = Cairn(tmp_path / "data")
    yield made
    made.close()


@pytest.fixture(params=[False, True], ids=["in-process", "as-the-app"])
def app(request, tmp_path: Path):
    """A facade as `cairnctl` opens it, and as the desktop app does (captures in a child)."""
    made = Cairn(tmp_path / "data", captures_in_child=request.param)
    yield made
    made.close()


def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    for i in range(30):
        path = folder / f"pkg{i % 3}" / f"sub{i % 2}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n")
    (folder / "run.sh").write_text("#!/bin/sh\n")
    (folder / "run.sh").chmod(0o755)
    os.symlink("run.sh", folder / "link")
    (folder / ".gitignore").write_text("*.log\nbuild/\n")
    return folder


def pass_of(app: Cairn, ws_id: str, *, in_process: bool = True):
    ws = app.ctx.store.get_workspace(ws_id)
    vault = app.ctx.vault_for(ws.source_id)
    head = vault.revision_head(ws.id)
    return stat_pass(
        app.revisions._stat_cache(ws.id),
        ws.root,
        ws.id,
        head,
        vault.tree_of(head),
        IgnoreRules(ws.root),
        in_process=in_process,
    )


@pytest.mark.parametrize("in_process", [True, False], ids=["here-and-helpers", "helpers-only"])
def test_an_unchanged_workspace_is_proved_so_by_stat_data(cairn, tmp_path, in_process):
    app = cairn
    made = app.tasks.new(project(tmp_path))
    assert pass_of(app, made.workspace.id, in_process=in_process) == []
    root = Path(made.workspace.root)
    (root / "pkg0" / "sub0" / "mod0.py").write_text("value = 'x'\n")
    (root / "pkg1" / "new.py").write_text("new\n")
    (root / "pkg2" / "sub1" / "mod5.py").unlink()
    (root / "debug.log").write_text("ignored\n")
    (root / "build").mkdir()
    found = pass_of(app, made.workspace.id, in_process=in_process)
    assert sorted(found or []) == [
        ("pkg0/sub0/mod0.py", statpass.CHANGED, False),
        ("pkg1/new.py", statpass.NEW, False),
        ("pkg2/sub1/mod5.py", statpass.GONE, False),
    ]


def test_the_first_capture_after_import_is_a_stat_pass_and_sees_an_edit_right_after(
    app, tmp_path, hashed
):
    made = app.tasks.new(project(tmp_path))
    hashed.clear()
    rev, new = app.revisions.capture(made.task.id, trigger="external")
    assert not new and rev.id == made.base_revision and hashed == []

    # Right after: same size, in the same second as the import wrote it.
    target = Path(made.workspace.root) / "pkg1" / "sub1" / "mod1.py"
    target.write_text("value = 7\n")
    rev, new = app.revisions.capture(made.task.id, trigger="external")
    assert new
    vault = app.ctx.vault_for(made.workspace.source_id)
    assert ("pkg1/sub1/mod1.py", vault.objects.write_blob(b"value = 7\n")) in tree_of(vault, rev.id)


def tree_of(vault, commit: str) -> set[tuple[str, str]]:
    out = subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "ls-tree", "-r", "-z", commit],
        capture_output=True,
        check=True,
    ).stdout
    entries = (e.split(b"\t", 1) for e in out.split(b"\0") if e)
    return {(os.fsdecode(path), meta.split()[2].decode()) for meta, path in entries}


def test_a_snapshot_of_a_recorded_workspace_holds_a_change_made_since(app, tmp_path):
    """Snapshot Now (and Start's first snapshot) is cheap for a recorded tree, never stale."""
    made = app.tasks.new(project(tmp_path))
    first = app.snapshots.take(made.task.id)
    assert first.revision_id == made.base_revision
    Path(made.workspace.root, "pkg0", "sub1", "edited.py").write_text("outside\n")
    second = app.snapshots.take(made.task.id)
    assert second.revision_id != made.base_revision
    vault = app.ctx.vault_for(made.workspace.source_id)
    assert "pkg0/sub1/edited.py" in {path for path, _ in tree_of(vault, second.revision_id)}


def test_new_ignored_files_do_not_count_as_a_change_and_others_do(app, tmp_path):
    made = app.tasks.new(project(tmp_path))
    root = Path(made.workspace.root)
    (root / "trace.log").write_text("noise\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("obj\n")
    rev, new = app.revisions.capture(made.task.id, trigger="external")
    assert not new and rev.id == made.base_revision
    (root / "build2").mkdir()
    (root / "build2" / "kept.txt").write_text("kept\n")
    rev, new = app.revisions.capture(made.task.id, trigger="external")
    assert new


def base_tree(app: Cairn, made) -> str:
    return app.ctx.vault_for(made.workspace.source_id).tree_of(made.base_revision)


def vouch_for_all(index: TreeIndex, root: str) -> None:
    """Give every record its file's stat data, taken well after its window."""
    for rel, rec in index.files().items():
        rec.stat, rec.seen_at = stat_key(os.lstat(os.path.join(root, rel))), time.time() + 10


def test_a_file_whose_stat_was_taken_in_its_racy_window_is_looked_at_again(cairn, tmp_path, hashed):
    """The cache holds the file's current stat data, but taken within the racy window of its
    mtime: the bytes may have changed again within that tick, so the pass must not vouch."""
    app = cairn
    made = app.tasks.new(project(tmp_path))
    target = Path(made.workspace.root) / "pkg0" / "sub0" / "mod0.py"
    ws = made.workspace
    vault = app.ctx.vault_for(ws.source_id)
    head = vault.revision_head(ws.id)
    index = TreeIndex.from_tree(vault.objects, vault.tree_of(head))
    # The head's blob is "value = 0\n"; the disk now holds other bytes of the same size,
    # written "in the same tick" as the stat data the cache holds for it.
    target.write_text("value = 9\n")
    st = os.lstat(target)
    vouch_for_all(index, ws.root)
    index.get("pkg0/sub0/mod0.py").seen_at = st.st_mtime + 0.01
    cache = app.revisions._stat_cache(ws.id)
    cache.write_bytes(_encode_stat_cache(ws.id, head, index))

    assert pass_of(app, ws.id) == [("pkg0/sub0/mod0.py", statpass.CHANGED, False)]
    hashed.clear()
    rev, new = app.revisions.capture(made.task.id, trigger="external")
    assert new and str(target) in hashed


def test_a_damaged_or_forged_cache_is_not_used(cairn, tmp_path):
    app = cairn
    made = app.tasks.new(project(tmp_path))
    ws = made.workspace
    cache = app.revisions._stat_cache(ws.id)
    good = cache.read_bytes()
    assert pass_of(app, ws.id) == []

    damaged = bytearray(good)
    damaged[-5] ^= 0xFF
    cache.write_bytes(bytes(damaged))
    assert pass_of(app, ws.id) is None

    # Checksummed again, so only the Merkle check can catch it: a tree body changed.
    start = len(statpass.MAGIC) + 32
    payload = bytearray(good[start:])
    folders = statpass.decode(good, ws.id, made.base_revision, base_tree(app, made))
    body = folders[0].body  # the root's: its last entry is run.sh, a file
    assert body.rsplit(b"\0", 2)[-2].endswith(b"run.sh")
    at = bytes(payload).index(body)
    payload[at + len(body) - 1] ^= 0x01  # the last byte of run.sh's blob id
    cache.write_bytes(statpass.MAGIC + hashlib.sha256(payload).digest() + bytes(payload))
    assert pass_of(app, ws.id) is None

    # A cache of another head is not this one's.
    cache.write_bytes(good)
    assert (
        stat_pass(
            cache,
            ws.root,
            ws.id,
            "0" * 40,
            base_tree(app, made),
            IgnoreRules(ws.root),
        )
        is None
    )


def test_a_cache_whose_records_are_not_the_heads_tree_is_not_used(cairn, tmp_path):
    app = cairn
    made = app.tasks.new(project(tmp_path))
    ws = made.workspace
    vault = app.ctx.vault_for(ws.source_id)
    index = TreeIndex.from_tree(vault.objects, base_tree(app, made))
    vouch_for_all(index, ws.root)
    index.set_file("pkg0/extra.py", FileRecord("100644", "1" * 40, None, 0.0))
    app.revisions._stat_cache(ws.id).write_bytes(
        _encode_stat_cache(ws.id, made.base_revision, index)
    )
    assert pass_of(app, ws.id) is None


def test_the_helper_runs_with_the_standard_library_alone(cairn, tmp_path):
    app = cairn
    made = app.tasks.new(project(tmp_path))
    ws = made.workspace
    out = subprocess.run(
        [
            *_helper_argv(),
            str(app.revisions._stat_cache(ws.id)),
            ws.root,
            "0",
            "1",
            ws.id,
            made.base_revision,
            base_tree(app, made),
        ],
        capture_output=True,
        check=True,
        env={"PATH": os.environ.get("PATH", "")},
    )
    answer = json.loads(out.stdout)
    assert answer["ok"] and answer["suspects"] == []
    assert answer["folders"] == answer["total"] == answer["subtrees"] + 1


def test_a_watch_starts_in_a_stat_pass_and_still_records_the_next_edit(
    cairn, tmp_path, hashed, monkeypatch
):
    made = cairn.tasks.new(project(tmp_path))
    hashed.clear()
    order: list[str] = []
    load, prove = watch.Recorder._load_index, watch.Recorder._proved_unchanged
    monkeypatch.setattr(
        watch.Recorder, "_load_index", lambda self: order.append("load") or load(self)
    )
    monkeypatch.setattr(
        watch.Recorder,
        "_proved_unchanged",
        lambda self: (order.append("pass"), prove(self))[1],
    )
    recorder = cairn.revisions.watch(made.task.id)
    try:
        assert recorder.stats["stat_cache_used"] and recorder.head == made.base_revision
        # The stat pass proved it; the index was loaded afterwards, by the worker.
        assert hashed == [] and order[0] == "pass"
        target = Path(made.workspace.root) / "pkg2" / "sub0" / "mod2.py"
        target.write_text("value = 8\n")  # same size, right after the watch began
        assert recorder.wait_idle(30)
        assert recorder.head != made.base_revision
        vault = cairn.ctx.vault_for(made.workspace.source_id)
        blob = vault.objects.write_blob(b"value = 8\n")
        assert ("pkg2/sub0/mod2.py", blob) in tree_of(vault, recorder.head)
    finally:
        cairn.revisions.stop_watching(made.workspace.id)


def a_run(app: Cairn, made) -> Run:
    now = time.time()
    run = Run(
        new_id("run"),
        made.task.id,
        "preparing",
        0,
        "shell",
        {"prompt": "echo hi"},
        attempt=1,
        workspace_id=made.workspace.id,
        created_at=now,
        started_at=now,
    )
    app.ctx.store.add_run(run)
    return run


def test_starts_checkpoint_of_a_workspace_edited_outside_cairn_records_the_edit(app, tmp_path):
    """What Start does before it launches: a snapshot, then a checkpoint (verifying capture,
    durable snapshot, row). Unchanged, both cost a stat pass and name the base; edited outside
    Cairn before Start, the checkpoint's snapshot holds the edit."""
    made = app.tasks.new(project(tmp_path))
    snap = app.snapshots.take(made.task.id)
    contract = ToolContract(None)
    ck = app.runs.checkpoints.write(
        a_run(app, made), pending_step="0", tool_contract=contract, policy_version=1
    )
    assert snap.revision_id == made.base_revision and ck.snapshot_id == snap.id

    Path(made.workspace.root, "pkg1", "sub0", "mod4.py").write_text("value = 5\n")  # same size
    ck = app.runs.checkpoints.write(
        a_run(app, made), pending_step="0", tool_contract=contract, policy_version=1
    )
    rev = ck.workspace_ref.rpartition("@")[2]
    assert rev != made.base_revision and ck.snapshot_id != snap.id
    vault = app.ctx.vault_for(made.workspace.source_id)
    assert vault.objects.read_ref(snapshot_ref(ck.snapshot_id)) == rev
    blob = vault.objects.write_blob(b"value = 5\n")
    assert ("pkg1/sub0/mod4.py", blob) in tree_of(vault, rev)


def test_a_new_sessions_snapshot_is_the_latest_revisions_without_a_pass(app, tmp_path, monkeypatch):
    """What a first Start snapshots for its new sandbox session: the latest recorded revision,
    with no pass over the tree (the checkpoint right after captures in full, and is what a
    resume restores): an edit made before Start is not in it, but in the checkpoint's."""
    made = app.tasks.new(project(tmp_path))
    Path(made.workspace.root, "pkg1", "sub0", "mod4.py").write_text("value = 5\n")
    passes = []
    real = watch._sharded_pass

    def counted(*args, **kwargs):
        passes.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(watch, "_sharded_pass", counted)
    snap = app.snapshots.of_latest_revision(made.task.id)
    assert snap.revision_id == made.base_revision and passes == []
    assert app.snapshots.of_latest_revision(made.task.id).id == snap.id  # kept, not a second

    ck = app.runs.checkpoints.write(
        a_run(app, made), pending_step="0", tool_contract=ToolContract(None), policy_version=1
    )
    rev = ck.workspace_ref.rpartition("@")[2]
    assert rev != made.base_revision and ck.snapshot_id != snap.id and passes
    vault = app.ctx.vault_for(made.workspace.source_id)
    assert ("pkg1/sub0/mod4.py", vault.objects.write_blob(b"value = 5\n")) in tree_of(vault, rev)
    assert app.snapshots.of_latest_revision(made.task.id).id == ck.snapshot_id
