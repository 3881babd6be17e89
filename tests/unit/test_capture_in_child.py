"""A facade opened with captures_in_child (the desktop app) captures through a child `cairnctl
capture`: the same revision rows and trigger, the revision announced in this process, and a
failure as one clear error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core import events as ev
from core.app import Cairn
from core.errors import CairnError


@pytest.fixture
def facade(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("one\n")
    cairn = Cairn(tmp_path / "data", captures_in_child=True)
    yield cairn, cairn.tasks.new(src)
    cairn.close()


def test_a_capture_in_a_child_records_and_announces_the_revision(facade):
    cairn, made = facade
    seen = []
    cairn.events.subscribe(lambda e: seen.append(e) if e.kind == ev.REVISION_RECORDED else None)
    (Path(made.workspace.root) / "a.txt").write_text("two\n")
    rev, changed = cairn.revisions.capture(made.task.id, trigger="checkpoint")
    assert changed and rev.trigger == "checkpoint" and rev.files_changed == 1
    assert [r.id for r in cairn.revisions.all(made.task.id)][-1] == rev.id
    assert [e.payload["revision"] for e in seen] == [rev.id]

    again, changed = cairn.revisions.capture(made.task.id)
    assert not changed and again.id == rev.id and len(seen) == 1


def test_a_failed_capture_in_a_child_says_why(facade):
    cairn, made = facade
    shutil.rmtree(made.workspace.root)
    with pytest.raises(CairnError) as raised:
        cairn.revisions.capture(made.task.id)
    assert "missing" in str(raised.value) or "does not exist" in str(raised.value)
    assert "\n" not in str(raised.value)
