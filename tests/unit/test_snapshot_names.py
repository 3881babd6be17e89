"""Snapshots can be named when taken and renamed later; a name is one trimmed line, blank removes
it, and a snapshot is found by its name as well as by its id."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import events as ev
from core.app import Cairn
from core.errors import InputError, NotFound
from core.vault import sizes
from tests.support import as_json, cairnctl


@pytest.fixture
def cairn(tmp_path: Path):
    app = Cairn(tmp_path / "data")
    yield app
    app.close()


@pytest.fixture
def task_id(cairn, tmp_path: Path) -> str:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.txt").write_text("hello\n")
    return cairn.tasks.new(folder).task.id


def test_a_snapshot_is_named_renamed_and_unnamed(cairn, task_id):
    heard = []
    cairn.ctx.events.subscribe(lambda e: heard.append(e) if e.kind == ev.SNAPSHOT_RENAMED else None)
    snap = cairn.snapshots.take(task_id, name="  before   the refactor ")
    assert snap.name == "before the refactor"
    assert cairn.snapshots.get("before the refactor").id == snap.id
    renamed = cairn.snapshots.rename(snap.id[:10], "known good")
    assert (
        renamed.name == "known good" and cairn.ctx.store.get_snapshot(snap.id).name == "known good"
    )
    assert cairn.views.status()["snapshots"][0]["name"] == "known good"
    assert cairn.snapshots.rename(snap.id, "  ").name is None
    assert [e.payload["name"] for e in heard] == ["before the refactor", "known good", None]
    with pytest.raises(InputError, match="at most"):
        cairn.snapshots.rename(snap.id, "x" * 81)
    with pytest.raises(NotFound):
        cairn.snapshots.get("no such name")


def test_a_name_two_snapshots_share_is_refused_as_a_reference(cairn, task_id, tmp_path):
    first = cairn.snapshots.take(task_id, name="same")
    (Path(cairn.views.task_details(task_id)["workspace_root"]) / "more.txt").write_text("more\n")
    second = cairn.snapshots.take(task_id, name="same")
    assert first.id != second.id
    with pytest.raises(NotFound, match="2 snapshots are named 'same'; give the id"):
        cairn.snapshots.get("same")


def test_cairnctl_names_a_snapshot_and_restores_it_by_name(cairn, task_id, tmp_path):
    data = tmp_path / "data"
    made = as_json(cairnctl(data, "snapshot", task_id, "--name", "first", "--json"))
    assert made["name"] == "first"
    out = cairnctl(data, "snapshot-name", "first", "release 1").stdout
    assert out.strip() == f"snapshot {made['snapshot_id']} is named 'release 1'"
    assert "release 1" in cairnctl(data, "status").stdout
    restored = as_json(cairnctl(data, "materialize", "release 1", str(tmp_path / "out"), "--json"))
    assert (Path(restored["root"]) / "main.txt").read_text() == "hello\n"
    cleared = as_json(cairnctl(data, "snapshot-name", made["snapshot_id"], "--json"))
    assert cleared["name"] is None


def test_a_snapshot_whose_tree_cannot_be_read_is_listed_without_a_size(cairn, task_id, monkeypatch):
    """One damaged snapshot does not fail the whole status: it is listed, its size unknown,
    and the other snapshots keep theirs."""
    good = cairn.snapshots.take(task_id, name="good")
    ws = cairn.ctx.workspace_of(cairn.ctx.task(task_id))
    (Path(ws.root) / "main.txt").write_text("changed\n")
    cairn.revisions.capture(task_id, trigger="external")
    bad = cairn.snapshots.take(task_id, name="bad")
    assert bad.tree != good.tree
    vault = cairn.ctx.vault_for(ws.source_id)
    memo = Path(vault.git_dir) / "cairn-tree-sizes"
    if memo.exists():  # the size must be counted again, from the damaged tree
        kept = [line for line in memo.read_text().splitlines() if not line.startswith(bad.tree)]
        memo.write_text("".join(f"{line}\n" for line in kept))
    monkeypatch.setattr(sizes, "_memos", {})  # nor is it remembered by this process
    loose = Path(vault.git_dir) / "objects" / bad.tree[:2] / bad.tree[2:]
    loose.chmod(0o644)
    loose.write_bytes(b"not a git object")

    listed = {s["name"]: s for s in cairn.views.status()["snapshots"]}
    assert listed["bad"]["size"] is None
    assert listed["good"]["size"] == len("hello\n")


def test_snapshots_of_a_vault_deleted_behind_our_back_are_listed_as_not_restorable(
    cairn, task_id, tmp_path
):
    cairn.snapshots.take(task_id, name="kept")
    ws = cairn.ctx.workspace_of(cairn.ctx.task(task_id))
    vault = Path(cairn.ctx.store.get_source(ws.source_id).vault_path)
    vault.rename(tmp_path / "moved-away")
    cairn.close()
    again = Cairn(tmp_path / "data")  # a new process: the vault is not open yet
    try:
        status = again.views.status()
    finally:
        again.close()
    [listed] = status["snapshots"]
    assert listed["name"] == "kept" and listed["restorable"] is False and listed["size"] is None
