"""The desktop app's facade (`captures_in_child`) imports a folder for a new task in a child
`cairnctl new`: hashing and writing a big folder's files would hold this process's interpreter
lock, and so stall the window, for seconds. The task comes back as the in-process import makes it
(title, engine, instructions, host, note), it is announced here, and a refusal keeps its words."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import events as ev
from core import tasks as tasks_module
from core.app import Cairn
from core.errors import CairnError


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    made = Cairn(tmp_path / "data", captures_in_child=True)

    def not_here(*_args, **_kwargs):
        raise AssertionError("the import ran in this process")

    monkeypatch.setattr(tasks_module, "import_folder", not_here)
    yield made
    made.close()


def folder(tmp_path: Path, name: str = "project") -> Path:
    made = tmp_path / name
    (made / "src").mkdir(parents=True)
    (made / "src" / "app.py").write_text("print('hi')\n")
    return made


def test_a_folder_is_imported_in_a_child_and_the_task_announced_here(app, tmp_path):
    heard = []
    app.events.subscribe(heard.append)
    source = folder(tmp_path, "-looks-like-an-option")
    made = app.tasks.new(
        source, title="-a title", engine="shell", instructions="-n echo hi", host="local"
    )

    task = app.tasks.get(made.task.id)
    assert (task.title, task.engine, task.instructions, task.host) == (
        "-a title",
        "shell",
        "-n echo hi",
        "local",
    )
    assert made.workspace.id == task.workspace_id
    assert Path(made.workspace.root, "src", "app.py").read_text() == "print('hi')\n"
    assert made.base_revision == app.ctx.store.latest_revision(task.workspace_id).id
    assert made.note is None
    created = [e for e in heard if e.kind == ev.TASK_CREATED]
    assert [e.subject for e in created] == [task.id]
    # The child left the stat cache behind: the first capture here is a stat pass.
    rev, new = app.revisions.capture(task.id)
    assert not new and rev.id == made.base_revision


def test_without_instructions_the_task_has_none(app, tmp_path):
    made = app.tasks.new(folder(tmp_path), engine="shell")
    assert app.tasks.get(made.task.id).instructions == ""
    assert app.tasks.get(made.task.id).title == "project"


def test_a_refusal_keeps_its_words_and_leaves_nothing(app, tmp_path):
    with pytest.raises(CairnError, match="does not exist"):
        app.tasks.new(tmp_path / "missing", title="t", engine="shell", instructions="echo")
    with pytest.raises(CairnError, match="unknown engine 'nosuch'"):
        app.tasks.new(folder(tmp_path), title="t", engine="nosuch", instructions="echo")
    assert app.tasks.all() == []
