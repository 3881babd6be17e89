"""Renaming a task, editing its instructions before its first run, deleting it with what goes
said first, archiving a shared workspace only when asked, and blank instructions refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.app import Cairn
from core.errors import Conflict, InputError
from core.models import Run, Task, TaskSource


@pytest.fixture
def cairn(tmp_path: Path):
    app = Cairn(tmp_path / "data")
    yield app
    app.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "main.txt").write_text("hello\n")
    return path


def add_child(cairn: Cairn, parent: Task, title: str = "child") -> Task:
    """A Continue child sharing the parent's workspace (as `continue` makes one, minus its run)."""
    child = Task(
        f"t_child{int(time.time() * 1e6)}",
        title,
        parent.source_id,
        parent.workspace_id,
        parent.engine,
        "more",
        parent.id,
        TaskSource.CONTINUE.value,
        None,
        time.time(),
    )
    cairn.ctx.store.add_task(child)
    return child


def add_run(cairn: Cairn, task: Task, state: str) -> None:
    cairn.ctx.store.add_run(
        Run(
            f"r_{task.id}_{state}",
            task.id,
            state,
            0,
            task.engine,
            workspace_id=task.workspace_id,
            created_at=time.time(),
        )
    )


def test_a_task_is_renamed_to_one_trimmed_line(cairn, folder):
    task = cairn.tasks.new(folder).task
    renamed = cairn.tasks.rename(task.id, "  Fix   the\nlogin  ")
    assert renamed.title == "Fix the login"
    assert cairn.tasks.get(task.id).title == "Fix the login"
    with pytest.raises(InputError, match="cannot be blank"):
        cairn.tasks.rename(task.id, "   ")
    with pytest.raises(InputError, match="at most"):
        cairn.tasks.rename(task.id, "x" * 500)


def test_instructions_are_edited_only_before_the_first_run(cairn, folder):
    task = cairn.tasks.new(folder).task
    assert cairn.tasks.edit_instructions(task.id, "make test\n").instructions == "make test"
    with pytest.raises(InputError, match="blank"):
        cairn.tasks.edit_instructions(task.id, " \n ")
    add_run(cairn, task, "succeeded")
    with pytest.raises(Conflict, match="has run already"):
        cairn.tasks.edit_instructions(task.id, "something else")
    assert cairn.tasks.get(task.id).instructions == "make test"


def test_blank_instructions_are_refused_and_none_stays_allowed(cairn, folder):
    with pytest.raises(InputError, match="blank"):
        cairn.tasks.new(folder, instructions="  \n ")
    assert cairn.tasks.all() == []  # refused before anything was made
    # No instructions at all: a task whose commands are given when it is run.
    assert cairn.tasks.new(folder, instructions="").task.instructions == ""


def test_delete_says_what_goes_then_removes_the_task_and_its_workspace(cairn, folder):
    made = cairn.tasks.new(folder, title="doomed")
    plan = cairn.housekeeping.deletion(made.task.id)
    assert plan.refusal is None and plan.workspace_goes
    assert any(made.workspace.root in line for line in plan.what_goes())
    done = cairn.housekeeping.delete(made.task.id)
    assert done.workspace_goes
    assert cairn.tasks.all() == []
    assert not Path(made.workspace.root).exists()
    assert cairn.ctx.store.list_workspaces() == []


def test_delete_keeps_a_shared_workspace_and_refuses_in_flight_runs_and_parents(cairn, folder):
    parent = cairn.tasks.new(folder, title="parent").task
    child = add_child(cairn, parent)
    refusal = cairn.housekeeping.deletion(parent.id).refusal
    assert refusal and "child tasks" in refusal and child.id in refusal
    add_run(cairn, child, "running")
    with pytest.raises(Conflict, match="is running"):
        cairn.housekeeping.delete(child.id)
    cairn.ctx.store.update_run(f"r_{child.id}_running", state="cancelled")
    plan = cairn.housekeeping.deletion(child.id)
    assert not plan.workspace_goes and plan.shared_with == [f"{parent.id} (parent)"]
    cairn.housekeeping.delete(child.id)
    root = Path(cairn.tasks.workspace_of(parent).root)
    assert root.is_dir()  # the parent keeps its workspace
    assert [t.id for t in cairn.tasks.all()] == [parent.id]


def test_archiving_a_shared_workspace_names_every_task_and_needs_a_yes(cairn, folder):
    parent = cairn.tasks.new(folder, title="parent").task
    child = add_child(cairn, parent, "the child")
    with pytest.raises(Conflict) as refused:
        cairn.housekeeping.archive(child.id)
    assert parent.id in str(refused.value) and "parent" in str(refused.value)
    assert cairn.tasks.workspace_of(parent).state == "prepared"
    assert [t.id for t in cairn.housekeeping.sharing(child.id)] == [parent.id]
    ws = cairn.housekeeping.archive(child.id, shared_ok=True)
    assert ws.state == "archived"
    assert cairn.tasks.workspace_of(parent).state == "archived"
