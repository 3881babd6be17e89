"""A new task whose workspace cannot be made leaves nothing behind: no rows, refs or vault."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import tasks as tasks_mod
from core.app import Cairn
from core.errors import CairnError


def _folder(root: Path) -> Path:
    folder = root / "project"
    folder.mkdir()
    (folder / "app.py").write_text("print('hi')\n")
    return folder


def _fail(*_args: object, **_kwargs: object) -> str:
    raise CairnError("the disk is full")


def test_a_failed_first_import_forgets_the_source_task_workspace_and_vault(tmp_path, monkeypatch):
    folder = _folder(tmp_path)
    monkeypatch.setattr(tasks_mod.workspaces, "create_tree", _fail)
    with Cairn(tmp_path / "data") as cairn:
        with pytest.raises(CairnError, match="disk is full"):
            cairn.tasks.new(folder)
        store = cairn.ctx.store
        for table in ("sources", "tasks", "workspaces", "revisions"):
            assert store.query(f"SELECT * FROM {table}") == []
        assert list((tmp_path / "data" / "vault").iterdir()) == []
        assert list((tmp_path / "data" / "workspaces").iterdir()) == []


def test_a_failed_second_import_keeps_the_source_and_its_first_task(tmp_path, monkeypatch):
    folder = _folder(tmp_path)
    with Cairn(tmp_path / "data") as cairn:
        first = cairn.tasks.new(folder)
        monkeypatch.setattr(tasks_mod.workspaces, "create_tree", _fail)
        with pytest.raises(CairnError):
            cairn.tasks.new(folder)
        assert [t.id for t in cairn.tasks.all()] == [first.task.id]
        assert len(cairn.ctx.store.query("SELECT * FROM sources")) == 1
        assert [r.id for r in cairn.revisions.all(first.task.id)] == [first.base_revision]
