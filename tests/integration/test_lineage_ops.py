"""Continue and Fork with the shell engine: the parent's files are never touched by a fork,
and nothing continues a lineage while one of its runs is in flight."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.integration.test_runs_resume import latest_run, step_of, wait_for
from tests.support import as_json, cairnctl, one_error_line

pytestmark = pytest.mark.docker


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            p = Path(dirpath) / name
            h.update(str(p.relative_to(root)).encode() + b"\0")
            h.update(os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
    return h.hexdigest()


def test_continue_keeps_working_in_the_parents_workspace(task):
    data, parent, ws = task
    first = as_json(cairnctl(data, "run", parent, "--json", "--", "sh", "-c", "echo 1 > n.txt"))
    assert first["state"] == "succeeded"
    child = as_json(cairnctl(data, "continue", parent, "-m", "echo 2 >> n.txt", "--json"))
    assert child["state"] == "succeeded" and child["parent_task_id"] == parent
    assert (ws / "n.txt").read_text() == "1\n2\n"
    shown = as_json(cairnctl(data, "show", child["task_id"], "--json"))
    assert shown["workspace_root"] == str(ws) and shown["source"] == "continue"


def test_fork_from_an_earlier_revision_leaves_the_parent_untouched(task):
    data, parent, ws = task
    as_json(cairnctl(data, "run", parent, "--json", "--", "sh", "-c", "echo v1 > f.txt"))
    early = as_json(cairnctl(data, "revisions", parent, "--json"))["revisions"][-1]["id"]
    as_json(
        cairnctl(
            data, "run", parent, "--json", "--", "sh", "-c", "echo v2 > f.txt; echo x > later.txt"
        )
    )
    before = tree_hash(ws)

    child = as_json(
        cairnctl(
            data,
            "fork",
            parent,
            "--at",
            early,
            "-m",
            "cat f.txt > seen.txt; echo fork > f.txt",
            "--json",
        )
    )
    assert child["state"] == "succeeded" and child["from_revision"] == early
    fork_ws = Path(child["workspace_root"])
    assert fork_ws != ws
    assert (fork_ws / "seen.txt").read_text() == "v1\n" and not (fork_ws / "later.txt").exists()
    assert tree_hash(ws) == before  # the parent's files, hash-unchanged
    tasks = {t["task_id"]: t for t in as_json(cairnctl(data, "tasks", "--json"))["tasks"]}
    assert tasks[child["task_id"]]["parent_task_id"] == parent
    assert tasks[child["task_id"]]["source"] == "fork"
    # The fork got a sandbox of its own.
    sessions = as_json(cairnctl(data, "status", "--json"))["sessions"]
    assert len({s["workspace_id"] for s in sessions}) == 2


def test_nothing_continues_a_lineage_in_flight(task):
    data, parent, _ = task
    cairnctl(data, "run", parent, "--detach", "--", "sleep", "30")
    wait_for(lambda: step_of(data, latest_run(data, parent)) == 0, what="the run to start")
    line = one_error_line(cairnctl(data, "continue", parent, "-m", "echo no", check=False))
    assert "wait for it to end or stop it" in line
    line = one_error_line(cairnctl(data, "fork", parent, "-m", "echo no", check=False))
    assert "wait for it to end or stop it" in line
    cairnctl(data, "stop", parent)
    assert (
        as_json(cairnctl(data, "continue", parent, "-m", "echo yes", "--json"))["state"]
        == "succeeded"
    )


def test_an_unknown_engine_is_refused_before_anything_is_made(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    data = tmp_path / "data"
    line = one_error_line(cairnctl(data, "new", str(src), "--engine", "nope", check=False))
    assert "unknown engine" in line
    assert not (data / "vault").exists() or not any((data / "vault").iterdir())


def test_a_forks_revision_promoted_as_a_branch_lands_in_the_users_repository(
    tmp_path, sandbox_image
):
    from tests.support import git

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.txt").write_text("v0\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=Me", "-c", "user.email=me@example.com", "commit", "-qm", "start")
    refs_before = git(repo, "for-each-ref", "--format=%(refname)").split()
    data = tmp_path / "data"
    made = as_json(cairnctl(data, "new", str(repo), "-m", "echo parent > app.txt", "--json"))
    fork = as_json(
        cairnctl(
            data,
            "fork",
            made["task_id"],
            "--at",
            "base",
            "-m",
            "echo fork > app.txt; echo new > extra.txt",
            "--json",
        )
    )
    assert fork["state"] == "succeeded"
    rev = as_json(cairnctl(data, "revisions", fork["task_id"], "--json"))["revisions"][-1]
    cairnctl(data, "promote", fork["task_id"], "--branch", "cairn/from-fork", "--json")
    refs_after = git(repo, "for-each-ref", "--format=%(refname)").split()
    assert sorted(set(refs_after) - set(refs_before)) == ["refs/heads/cairn/from-fork"]
    assert set(refs_before) <= set(refs_after)
    assert git(repo, "rev-parse", "cairn/from-fork^{tree}").strip() == rev["tree"]
    assert git(repo, "show", "cairn/from-fork:app.txt") == "fork\n"
    assert (repo / "app.txt").read_text() == "v0\n"  # the user's files are untouched
    for c in (
        __import__("docker")
        .from_env()
        .containers.list(all=True, filters={"label": f"cairn.data_dir={data.resolve()}"})
    ):
        c.remove(force=True)
