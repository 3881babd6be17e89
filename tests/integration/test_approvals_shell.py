"""Approvals by click with the shell engine in a real sandbox, driven through `cairnctl` as a user
(or the GUI) would: a risky step waits for a person across observer restarts, a denial refuses
it, an approval lets it run, and the sandbox can never write a decision itself."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from core import mailbox
from core.runs import output_of
from core.store import Store
from core.workspaces import set_git_config
from tests.support import (
    as_json,
    cairnctl,
    cairnctl_argv,
    cairnctl_env,
    git,
    release_data_dir,
    wait_for,
)

# A repository in /tmp and a bare remote in the workspace: the push's evidence is the remote's ref.
REPO = (
    "cd /tmp && git init -q r && cd r && "
    "git -c user.email=a@b -c user.name=a commit -q --allow-empty -m one && "
    "git init -q --bare /workspace/remote.git"
)
PUSH_ARGV = ["git", "push", "--force", "/workspace/remote.git", "HEAD:refs/heads/main"]
PUSH = f"{REPO} && {' '.join(PUSH_ARGV)} || echo refused > /workspace/refused.txt"

pytestmark = pytest.mark.docker


def listed(data: Path, *extra: str) -> list[dict]:
    return as_json(cairnctl(data, "approvals", "--json", *extra))["approvals"]


def waiting_for(data: Path, argv: list[str]) -> dict | None:
    return next((a for a in listed(data) if a["details"].get("argv") == argv), None)


def run_steps(data: Path, task_id: str, *steps: str) -> dict:
    args = ["run", task_id, "--detach", "--json"]
    for step in steps:
        args += ["--step", step]
    return as_json(cairnctl(data, *args))


def run_state(data: Path, run_id: str) -> str:
    return Store(data / "cairn.db").get_run(run_id).state


def pushed(ws: Path) -> bool:
    return (ws / "remote.git" / "refs" / "heads" / "main").exists()


def test_a_risky_program_waits_across_observers_and_a_denial_refuses_only_it(task):
    data, task_id, ws = task
    run = run_steps(data, task_id, "echo safe > a.txt", PUSH, "echo after > b.txt")
    observer = subprocess.Popen(
        cairnctl_argv(data, "follow", task_id),
        env=cairnctl_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pending = wait_for(lambda: waiting_for(data, PUSH_ARGV), what="the push to wait")
        assert pending["rule"] == "git-force-push" and "force-push" in pending["reason"]
        assert pending["task_id"] == task_id and pending["state"] == "pending"
        details = pending["details"]
        assert details["program"] == "/usr/bin/git" and details["cwd"] == "/tmp/r"
        assert details["script"] == {
            "step": 1,
            "commands": ["echo safe > a.txt", PUSH, "echo after > b.txt"],
        }
        assert (ws / "a.txt").read_text() == "safe\n"  # allowed at once, inside the sandbox
        wait_for(lambda: run_state(data, run["run_id"]) == "waiting_approval", what="the state")
    finally:
        observer.kill()  # the observer goes away without any clean-up
        observer.wait()

    # A new process still lists the request: the mailbox files are the truth.
    again = waiting_for(data, PUSH_ARGV)
    assert again is not None and again["id"] == pending["id"] and again["waiting_s"] > 0
    time.sleep(1)
    assert not pushed(ws)

    cairnctl(data, "deny", pending["id"], "--reason", "not today")
    res = as_json(cairnctl(data, "follow", task_id, "--json"))
    # The denied program never ran; the script saw an ordinary failure and went on.
    assert res["state"] == "succeeded", res
    assert not pushed(ws) and (ws / "refused.txt").exists() and (ws / "b.txt").exists()
    assert "denied" in output_of(Store(data / "cairn.db"), run["run_id"])
    (decided,) = [a for a in listed(data, "--all") if a["id"] == pending["id"]]
    assert decided["state"] == "denied" and decided["decided_by"]
    assert decided["details"]["note"] == "not today"
    assert listed(data) == []


def test_an_approved_risky_program_runs(task):
    data, task_id, ws = task
    run_steps(data, task_id, PUSH)
    pending = wait_for(lambda: waiting_for(data, PUSH_ARGV), what="the push to wait")
    approved = as_json(cairnctl(data, "approve", pending["id"], "--json"))
    assert approved["state"] == "approved"
    res = as_json(cairnctl(data, "follow", task_id, "--json"))
    assert res["state"] == "succeeded", res
    assert pushed(ws) and not (ws / "refused.txt").exists()  # approval let the push run


def test_the_sandbox_cannot_write_a_decision(task):
    data, task_id, ws = task
    step = (
        'touch /cairn/decisions/x 2> ro.txt; mkdir -p "/cairn/decisions/$CAIRN_EXEC_ID" '
        "2>> ro.txt; touch /cairn/decisions/x"
    )
    run_steps(data, task_id, step)
    res = as_json(cairnctl(data, "follow", task_id, "--json"))
    assert res["state"] == "failed" and res["exit_code"] not in (0, 126), res
    assert "Read-only file system" in (ws / "ro.txt").read_text()
    decisions = mailbox.decisions_root(
        data.resolve(), Store(data / "cairn.db").get_task(task_id).workspace_id
    )
    assert not (decisions / "x").exists()
    ours = {".rules", Store(data / "cairn.db").runs_of([task_id])[-1].exec_id}
    assert {p.name for p in decisions.iterdir()} <= ours  # only Cairn's own folders


THREE_LINES = [
    "git push --force origin main || true; echo pushed > pushed.txt",
    "mkdir -p .git/hooks; echo hacked > .git/hooks/pre-commit && rm -f app.py",
    "echo after > after.txt",
]


@pytest.fixture
def repo_task(tmp_path, sandbox_image, docker_client):
    """A task on a git repository whose origin is a bare repository inside the workspace."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "app.py").write_text("print('app')\n")
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "app.py")
    git(src, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "one")
    git(src, "init", "-q", "--bare", "remote.git")
    data = tmp_path / "data"
    made = as_json(cairnctl(data, "new", str(src), "--json"))
    ws = Path(made["workspace_root"])
    # A `main` to push, and an origin: set on the host, the way Cairn changes a workspace's git.
    git(ws, "branch", "-f", "main")
    set_git_config(ws, "remote.origin.url", "/workspace/remote.git")
    yield data, made["task_id"], ws
    release_data_dir(data, docker_client)


def test_each_risky_program_of_a_script_waits_on_its_own_card(repo_task):
    data, task_id, ws = repo_task
    run_steps(data, task_id, *THREE_LINES)

    (push,) = wait_for(lambda: listed(data), what="the push's card")
    assert (push["rule"], push["details"]["argv"]) == (
        "git-force-push",
        ["git", "push", "--force", "origin", "main"],
    )
    assert push["details"]["script"] == {"step": 0, "commands": THREE_LINES}
    time.sleep(1)
    assert not pushed(ws) and not (ws / "pushed.txt").exists()  # held until decided
    cairnctl(data, "approve", push["id"])

    (hook,) = wait_for(lambda: listed(data), what="the hook write's card")
    assert (hook["rule"], hook["details"]["argv"]) == (
        "git-hooks-write",
        ["mkdir", "-p", ".git/hooks"],
    )
    assert hook["details"]["script"]["step"] == 1
    assert pushed(ws) and (ws / "pushed.txt").exists()  # the approved push ran, and only it
    time.sleep(1)
    assert (ws / "app.py").exists() and not (ws / "after.txt").exists()
    cairnctl(data, "deny", hook["id"])

    res = as_json(cairnctl(data, "follow", task_id, "--json"))
    # The hook write fails (read-only), so `&& rm -f app.py` never runs and the step fails.
    assert res["state"] == "failed", res
    assert (ws / "app.py").read_text() == "print('app')\n"
    assert sorted(p.name for p in (ws / ".git" / "hooks").iterdir()) == []
    assert not (ws / "after.txt").exists()
    decided = {a["id"]: a["state"] for a in listed(data, "--all")}
    assert decided == {push["id"]: "approved", hook["id"]: "denied"}
