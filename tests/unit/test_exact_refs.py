"""References are exact: a task, run, snapshot or revision is named by its id or a prefix of it,
character for character. `_`, `%` and other pattern characters match only themselves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import NotFound
from core.models import Revision, Run, Snapshot, Source, Task, Workspace
from core.store import Store

REPO_ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ["_", "%", "%%", "task%", "task_%", "_ask", "*", "?", "[t]*", "task*", ""]


def cairnctl(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )


@pytest.fixture
def one_task(tmp_path: Path) -> tuple[Path, str]:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    data = tmp_path / "data"
    made = cairnctl(data, "new", str(folder), "--title", "only")
    assert made.returncode == 0, made.stderr
    task_id = made.stdout.split()[1]
    assert task_id.startswith("t_")
    return data, task_id


@pytest.mark.parametrize("ref", ["_", "%", "t%", "_\\_%", "t*"])
def test_show_and_archive_refuse_a_pattern_character(one_task, ref):
    data, task_id = one_task
    for command in ("show", "archive"):
        proc = cairnctl(data, command, ref)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert f"no task with id {ref!r}" in proc.stderr
        assert task_id not in proc.stdout + proc.stderr
    shown = cairnctl(data, "show", task_id)
    assert shown.returncode == 0 and "archived" not in shown.stdout


def test_prefixes_still_name_the_task(one_task):
    data, task_id = one_task
    for ref in (task_id, task_id[:-1], task_id[:5], "t_", "t"):
        proc = cairnctl(data, "show", ref)
        assert proc.returncode == 0, (ref, proc.stderr)
        assert task_id in proc.stdout


def test_the_case_of_a_reference_matters(one_task):
    data, task_id = one_task
    proc = cairnctl(data, "show", task_id.upper())
    assert proc.returncode == 2 and "no task with id" in proc.stderr


# -- the store's look-ups, for every kind of reference ------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "cairn.db")
    s.add_source(Source("source_1", "/home/me/repo", "git", "/data/vault/source_1.git", 1.0))
    s.add_workspace(
        Workspace(
            "workspace_a1",
            "source_1",
            "/data/workspaces/workspace_a1",
            "b" * 40,
            None,
            "cairn/x",
            None,
            "prepared",
            created_at=1.0,
            updated_at=1.0,
        )
    )
    for task_id in ("task_abc1", "task_abd2"):
        s.add_task(
            Task(task_id, "t", "source_1", "workspace_a1", "shell", "", None, "new", None, 1.0)
        )
    s.add_run(Run("run_x1", "task_abc1", "succeeded", 0, "shell", created_at=1.0))
    s.add_run(Run("run_y1", "task_abd2", "succeeded", 0, "shell", created_at=2.0))
    s.add_snapshot(Snapshot("snapshot_q1", "workspace_a1", "b" * 40, "c" * 40, "durable"))
    s.add_revision(Revision("b" * 40, "workspace_a1", None, "c" * 40, "base", None, 0, 1.0))
    return s


@pytest.mark.parametrize("ref", PATTERNS)
def test_no_pattern_character_names_any_row(store, ref):
    with pytest.raises(NotFound, match="no task"):
        store.find_task(ref)
    with pytest.raises(NotFound, match="no run"):
        store.find_run(ref)
    with pytest.raises(NotFound, match="no snapshot"):
        store.find_snapshot(ref)
    with pytest.raises(NotFound, match="no revision"):
        store.get_revision("workspace_a1", ref)


def test_ids_and_unambiguous_prefixes_name_their_row(store):
    assert store.find_task("task_abc1").id == "task_abc1"
    assert store.find_task("task_abc").id == "task_abc1"
    assert store.find_task("task_abd").id == "task_abd2"
    assert store.find_run("run_y").id == "run_y1"
    assert store.find_snapshot("snap").id == "snapshot_q1"
    assert store.get_revision("workspace_a1", "bbbb").id == "b" * 40
    with pytest.raises(NotFound, match="matches 2 tasks"):
        store.find_task("task_ab")
    with pytest.raises(NotFound, match="matches 2 runs"):
        store.find_run("run_")


def test_references_that_sqlite_cannot_hold_name_nothing(store):
    for ref in ("task_\udcff", "task_\0", "\udcff"):
        with pytest.raises(NotFound, match="no task"):
            store.find_task(ref)
        with pytest.raises(NotFound, match="no task"):
            store.get_task(ref)
