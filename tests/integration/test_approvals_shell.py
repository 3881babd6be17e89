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
from tests.support import as_json, cairnctl, cairnctl_argv, cairnctl_env, wait_for

PUSH = "git push --force origin main; touch pushed.marker"

pytestmark = pytest.mark.docker


def listed(data: Path, *extra: str) -> list[dict]:
    return as_json(cairnctl(data, "approvals", "--json", *extra))["approvals"]


def waiting_for(data: Path, command: str) -> dict | None:
    return next((a for a in listed(data) if a["command"] == command), None)


def run_steps(data: Path, task_id: str, *steps: str) -> dict:
    args = ["run", task_id, "--detach", "--json"]
    for step in steps:
        args += ["--step", step]
    return as_json(cairnctl(data, *args))


def run_state(data: Path, run_id: str) -> str:
    return Store(data / "cairn.db").get_run(run_id).state


def test_a_risky_step_waits_across_observers_and_a_denial_refuses_it(task):
    data, task_id, ws = task
    run = run_steps(data, task_id, "echo safe > a.txt", PUSH, "echo after > b.txt")
    observer = subprocess.Popen(
        cairnctl_argv(data, "follow", task_id),
        env=cairnctl_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pending = wait_for(lambda: waiting_for(data, PUSH), what="the push to wait for approval")
        assert pending["rule"] == "git-force-push" and "force-push" in pending["reason"]
        assert pending["task_id"] == task_id and pending["state"] == "pending"
        assert (ws / "a.txt").read_text() == "safe\n"  # the first step was allowed at once
        wait_for(lambda: run_state(data, run["run_id"]) == "waiting_approval", what="the state")
    finally:
        observer.kill()  # the observer goes away without any clean-up
        observer.wait()

    # A new process still lists the request: the mailbox files are the truth.
    again = waiting_for(data, PUSH)
    assert again is not None and again["id"] == pending["id"] and again["waiting_s"] > 0
    first = [a for a in listed(data, "--all") if a["command"] == "echo safe > a.txt"]
    assert [(a["state"], a["auto"]) for a in first] == [("auto-allowed", True)]
    time.sleep(1)
    assert not (ws / "pushed.marker").exists()

    cairnctl(data, "deny", pending["id"])
    res = as_json(cairnctl(data, "follow", task_id, "--json"))
    assert (res["state"], res["exit_code"]) == ("failed", 126), res
    assert not (ws / "pushed.marker").exists() and not (ws / "b.txt").exists()
    assert "denied" in output_of(Store(data / "cairn.db"), run["run_id"])
    (decided,) = [a for a in listed(data, "--all") if a["id"] == pending["id"]]
    assert decided["state"] == "denied" and decided["decided_by"]
    assert listed(data) == []


def test_an_approved_risky_step_runs(task):
    data, task_id, ws = task
    step = "git push --force origin main || true; touch pushed.marker"
    run_steps(data, task_id, step)
    pending = wait_for(lambda: waiting_for(data, step), what="the push to wait for approval")
    approved = as_json(cairnctl(data, "approve", pending["id"], "--json"))
    assert approved["state"] == "approved"
    res = as_json(cairnctl(data, "follow", task_id, "--json"))
    assert res["state"] == "succeeded", res
    assert (ws / "pushed.marker").exists()  # approval let the command run


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
    assert [p.name for p in decisions.iterdir()] == [
        Store(data / "cairn.db").runs_of([task_id])[-1].exec_id
    ]  # only Cairn's own folder of decisions
