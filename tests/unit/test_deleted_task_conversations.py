"""Deleting a task removes the conversation copies kept at its checkpoints, of the engine sessions
no other task's run names: a Continue child shares its parent's session, so the parent keeps it;
a fork's child reads its parent's copy, so the parent (which cannot be deleted while the child
exists) keeps it until the child is gone. Another task's copies are never touched, and a stored
session id that is not one plain name reaches nothing outside the conversations folder."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from core.app import Cairn
from core.errors import Conflict
from core.models import Checkpoint, Run, Task, TaskSource
from core.revisions import POSITIONS
from core.runs import conversations


@pytest.fixture
def cairn(tmp_path: Path):
    app = Cairn(tmp_path / "data")
    yield app
    app.close()


def project(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "main.txt").write_text("hello\n")
    return path


def session() -> str:
    return str(uuid.uuid4())


def kept(cairn: Cairn, session_id: str) -> Path:
    """A kept transcript of the session, as a checkpoint leaves it."""
    folder = conversations.kept_root(cairn.ctx.data, session_id)
    transcript = folder / ".claude" / "projects" / "-workspace" / f"{session_id}.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text('{"type":"user"}\n')
    return folder


def add_run(
    cairn: Cairn,
    task: Task,
    session_id: str | None,
    spec: dict | None = None,
    checkpoint_session: str | None = None,
) -> Run:
    run = Run(
        f"r_{uuid.uuid4().hex[:12]}",
        task.id,
        "succeeded",
        1,
        "claude-code",
        spec=spec or {},
        engine_session_id=session_id,
        workspace_id=task.workspace_id,
        created_at=time.time(),
    )
    cairn.ctx.store.add_run(run)
    if checkpoint_session is not None:
        snap = cairn.snapshots.take(task.id)
        rev = cairn.ctx.store.get_revision(task.workspace_id, snap.revision_id)
        cairn.ctx.store.add_checkpoint(
            Checkpoint(
                f"ck_{uuid.uuid4().hex[:12]}",
                run.id,
                1,
                f"git:x@{rev.id}",
                rev.tree,
                snap.id,
                None,
                checkpoint_session,
                {},
                1,
                time.time(),
            )
        )
    return run


def child_of(
    cairn: Cairn, parent: Task, source: TaskSource, workspace_id: str | None = None
) -> Task:
    child = Task(
        f"t_{uuid.uuid4().hex[:12]}",
        f"{source.value} of {parent.title}",
        parent.source_id,
        workspace_id or parent.workspace_id,
        "claude-code",
        "more",
        parent.id,
        source.value,
        None,
        time.time(),
    )
    cairn.ctx.store.add_task(child)
    return child


def test_a_continue_child_takes_only_its_own_sessions_copies(cairn, tmp_path):
    parent = cairn.tasks.new(project(tmp_path, "a"), engine="claude-code")
    other = cairn.tasks.new(project(tmp_path, "b"), engine="claude-code")
    shared, own, before_fallback, elsewhere = session(), session(), session(), session()
    add_run(cairn, parent.task, shared, checkpoint_session=shared)
    add_run(cairn, other.task, elsewhere, checkpoint_session=elsewhere)
    child = child_of(cairn, parent.task, TaskSource.CONTINUE)
    # The child continued the parent's session; a later run of it fell back to a new session,
    # its earlier checkpoint still taken in the one before.
    add_run(cairn, child, shared, {"mode": "continue", "session_id": shared})
    add_run(cairn, child, own, checkpoint_session=before_fallback)
    folders = {s: kept(cairn, s) for s in (shared, own, before_fallback, elsewhere)}

    plan = cairn.housekeeping.deletion(child.id)
    assert sorted(plan.conversations) == sorted([own, before_fallback])
    assert any("conversation" in line and own in line for line in plan.what_goes())
    done = cairn.housekeeping.delete(child.id)
    assert done.notes == []
    assert not folders[own].exists() and not folders[before_fallback].exists()
    assert folders[shared].is_dir() and folders[elsewhere].is_dir()  # named by the others

    # The parent, deleted last, takes the session it shared; the other task's copy stays.
    assert cairn.housekeeping.deletion(parent.task.id).conversations == [shared]
    cairn.housekeeping.delete(parent.task.id)
    assert not folders[shared].exists()
    assert folders[elsewhere].is_dir()
    assert sorted(p.name for p in (cairn.ctx.data.root / "conversations").iterdir()) == [elsewhere]


def test_a_forks_parent_keeps_the_copy_its_child_reads_until_the_child_is_gone(cairn, tmp_path):
    made = cairn.tasks.new(project(tmp_path, "a"), engine="claude-code")
    parent, ws = made.task, made.workspace
    parents, forks = session(), session()
    add_run(cairn, parent, parents, checkpoint_session=parents)
    rev = cairn.revisions.resolve(parent, None)
    fork_ws = cairn.snapshots.workspace_from_revision(
        ws, rev.id, rev.tree, branch="cairn/fork-test", trigger="base", label="a fork"
    )
    fork = child_of(cairn, parent, TaskSource.FORK, fork_ws.id)
    # The fork's run forked the parent's session (reading the parent's copy when its home had
    # lost the transcript) and noted the parent's session at its base revision.
    position = {"session_id": parents, "at": "m1", "recorded_at": time.time()}
    spec = {"mode": "fork", "session_id": parents, POSITIONS: {fork_ws.base_revision: position}}
    add_run(cairn, fork, forks, spec, checkpoint_session=forks)
    folders = {s: kept(cairn, s) for s in (parents, forks)}

    with pytest.raises(Conflict, match="child tasks"):
        cairn.housekeeping.delete(parent.id)
    assert folders[parents].is_dir() and folders[forks].is_dir()

    assert cairn.housekeeping.deletion(fork.id).conversations == [forks]
    cairn.housekeeping.delete(fork.id)
    assert not folders[forks].exists() and folders[parents].is_dir()
    cairn.housekeeping.delete(parent.id)
    assert not folders[parents].exists()


def test_a_session_id_that_is_not_a_plain_name_reaches_nothing_else(cairn, tmp_path):
    made = cairn.tasks.new(project(tmp_path, "a"), engine="claude-code")
    other = cairn.tasks.new(project(tmp_path, "b"), engine="claude-code")
    add_run(cairn, made.task, "..", {"session_id": "../workspaces"})
    add_run(cairn, made.task, f"../workspaces/{other.workspace.id}")
    assert cairn.housekeeping.deletion(made.task.id).conversations == []
    cairn.housekeeping.delete(made.task.id)
    assert Path(other.workspace.root).is_dir()
    assert (Path(other.workspace.root) / "main.txt").read_text() == "hello\n"
    assert cairn.ctx.data.root.is_dir()
