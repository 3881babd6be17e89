"""Each workspace's share of the data folder, with the tasks that use it: its files, run logs and
engine home, counted once (hard links to the vault stay the vault's), largest first; the shares
and the categories agree with the total."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.app import Cairn
from core.housekeeping import disk_bytes
from core.models import SessionRecord, Task, TaskSource


@pytest.fixture
def cairn(tmp_path: Path):
    app = Cairn(tmp_path / "data")
    yield app
    app.close()


def folder(tmp_path: Path, name: str, size: int) -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "big.bin").write_bytes(b"x" * size)
    return path


def test_each_workspace_has_its_share_with_every_task_that_uses_it(cairn, tmp_path):
    small = cairn.tasks.new(folder(tmp_path, "small", 1000), title="small").task
    big = cairn.tasks.new(folder(tmp_path, "big", 400_000), title="big").task
    child = Task(
        "t_child_share", "big, continued", big.source_id, big.workspace_id, big.engine, "more",
        big.id, TaskSource.CONTINUE.value, None, time.time(),
    )  # fmt: skip
    cairn.ctx.store.add_task(child)
    assert big.workspace_id
    runs = cairn.ctx.data.runs_root / big.workspace_id / "r_1.1"
    runs.mkdir(parents=True)
    (runs / "stdout").write_bytes(b"o" * 50_000)
    now = time.time()
    cairn.ctx.store.put_session(
        SessionRecord("sess_share", big.workspace_id, "docker", None, None, None,
                      created_at=now, updated_at=now)
    )  # fmt: skip
    home = cairn.ctx.data.home_path("sess_share")
    home.mkdir(parents=True)
    (home / ".history").write_bytes(b"h" * 30_000)

    usage = cairn.housekeeping.usage()
    first, second = usage.shares
    assert first.workspace_id == big.workspace_id and second.workspace_id == small.workspace_id
    assert first.titles == ("big", "big, continued") and first.task_ids == (big.id, child.id)
    assert first.parts["runs"] >= 50_000 and first.parts["home"] >= 30_000
    assert first.parts["files"] >= 400_000
    assert first.bytes == sum(first.parts.values())
    # Every workspace's share lies within the categories it is taken from.
    assert sum(s.parts["files"] for s in usage.shares) <= usage.parts["workspaces"]
    assert sum(s.parts["runs"] for s in usage.shares) <= usage.parts["runs"]
    stdout = runs / "stdout"
    assert first.parts["runs"] >= disk_bytes(stdout.stat())
    as_json = usage.to_json()["shares"][0]
    assert as_json["titles"] == ["big", "big, continued"] and as_json["state"] == "prepared"
