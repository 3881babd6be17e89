"""Every state a sandbox's container can be found in, and liveness that needs evidence: a paused
sandbox, a workspace deleted while its container ran, a stopped container, and a sandbox at its
pids limit whose live run must not be declared gone. Real Docker, driven through `cairnctl`."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from core.models import Run
from tests.integration.test_runs_resume import latest_run, session, step_of, tree_of_disk
from tests.support import (
    as_json,
    cairnctl,
    cairnctl_argv,
    cairnctl_env,
    no_limits_reason,
    on_podman,
    one_error_line,
    wait_for,
)

pytestmark = pytest.mark.docker

STEPS = [
    "echo s0 >> steps.log && echo a > a.txt",
    "mkdir -p d && echo b > d/b.txt && echo s1 >> steps.log",
    "sleep 8 && echo s2 >> steps.log",
    "cat a.txt d/b.txt > c.txt && echo s3 >> steps.log",
]


def start(data: Path, task_id: str, steps: list[str]) -> None:
    args = ["run", task_id, "--detach", "--json"]
    for s in steps:
        args += ["--step", s]
    as_json(cairnctl(data, *args))


def container(data: Path, docker_client):
    return docker_client.containers.get(session(data)["container"])


def kill_the_run(data: Path, task_id: str, docker_client) -> None:
    """The run's process group killed inside its sandbox, the container left up: the process
    is verifiably gone, so follow makes the run interrupted."""
    run = latest_run(data, task_id)
    pid = (data / "runs" / run.workspace_id / run.exec_id / "pid").read_text().strip()
    # As the sandbox user (root there holds no capability to signal it); each exec leads its
    # own process group, so the group is the wrapper, the script and its step.
    killed = container(data, docker_client).exec_run(
        ["sh", "-c", 'kill -s KILL -- "-$1"', "sh", pid], workdir="/"
    )
    assert killed.exit_code == 0, killed


def follow_json(data: Path, task_id: str) -> dict:
    return as_json(cairnctl(data, "follow", task_id, "--json"))


def at_step_2(data: Path, task_id: str) -> Run:
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 2, what="step 2")
    return latest_run(data, task_id)


def expected_after_all_steps(before: dict[str, bytes]) -> dict[str, bytes]:
    return {**before, "c.txt": b"a\nb\n", "steps.log": b"s0\ns1\ns2\ns3\n"}


def skip_without_limits(docker_client) -> None:
    reason = no_limits_reason(docker_client)
    if reason:
        pytest.skip(reason)


def test_resume_after_docker_pause_unpauses_and_runs_on(task, docker_client):
    skip_without_limits(docker_client)
    data, task_id, ws = task
    start(data, task_id, STEPS)
    at_step_2(data, task_id)
    kill_the_run(data, task_id, docker_client)
    res = follow_json(data, task_id)
    assert res["state"] == "interrupted", res
    before = tree_of_disk(ws)
    c = container(data, docker_client)
    c.pause()
    res = as_json(cairnctl(data, "resume", task_id, "--json"))
    assert res["state"] == "succeeded", res
    assert "sandbox: reattached" in res["report"]["path"], res["report"]
    assert container(data, docker_client).id == c.id
    assert tree_of_disk(ws) == expected_after_all_steps(before)


def test_a_run_whose_sandbox_is_paused_is_not_declared_gone(task, docker_client):
    skip_without_limits(docker_client)
    data, task_id, ws = task
    start(data, task_id, STEPS)
    run = at_step_2(data, task_id)
    c = container(data, docker_client)
    c.pause()
    try:
        report = as_json(cairnctl(data, "reconcile", "--json"))
        assert run.id not in report["interrupted"], report
        assert any("paused" in p for p in report["problems"]), report
        assert latest_run(data, task_id).state == "running"
    finally:
        c.reload()
        if c.status == "paused":
            c.unpause()
    assert follow_json(data, task_id)["state"] == "succeeded"
    assert (ws / "steps.log").read_text() == "s0\ns1\ns2\ns3\n"


def test_resume_after_the_workspace_was_deleted_while_its_container_ran(task, docker_client):
    data, task_id, ws = task
    start(data, task_id, STEPS)
    at_step_2(data, task_id)
    ck = as_json(cairnctl(data, "checkpoint", task_id, "--json"))
    before = tree_of_disk(ws)
    old = container(data, docker_client)
    shutil.rmtree(ws)  # while the container (and the run in it) is up
    kill_the_run(data, task_id, docker_client)
    assert follow_json(data, task_id)["state"] == "interrupted"
    assert old.reload() or old.status == "running"

    res = as_json(cairnctl(data, "resume", task_id, "--json"))
    assert res["state"] == "succeeded", res
    path = res["report"]["path"]
    assert "workspace: restored" in path and "sandbox: recreated" in path, res["report"]
    assert any("no longer" in note and "/workspace" in note for note in res["report"]["notes"])
    assert any(ck["snapshot_id"] in note for note in res["report"]["notes"])
    assert container(data, docker_client).id != old.id
    assert tree_of_disk(ws) == expected_after_all_steps(before)


@pytest.mark.parametrize("how", ["stopped", "created"])
def test_a_stopped_or_never_started_sandbox_is_started_on_resume(task, docker_client, how):
    data, task_id, ws = task
    start(data, task_id, STEPS)
    at_step_2(data, task_id)
    c = container(data, docker_client)
    c.stop(timeout=1)  # its processes die with it: evidence enough
    res = follow_json(data, task_id)
    assert res["state"] == "interrupted", res
    assert "gone" in (latest_run(data, task_id).note or "")
    if how == "created":  # a container made but never started: same name, same everything
        info = docker_client.api.inspect_container(c.id)
        c.remove()
        host_config = docker_client.api.create_host_config(
            binds=[
                f"{m['Source']}:{m['Destination']}:{'rw' if m['RW'] else 'ro'}"
                for m in info["Mounts"]
            ],
            network_mode=info["HostConfig"]["NetworkMode"],
        )
        if on_podman(docker_client):  # the sandbox user is the person's uid on both sides
            host_config["UsernsMode"] = "keep-id"
        docker_client.api.create_container(
            info["Image"],
            command=info["Config"]["Cmd"],
            user=info["Config"]["User"],
            labels=info["Config"]["Labels"],
            name=info["Name"].lstrip("/"),
            working_dir=info["Config"]["WorkingDir"],
            environment=info["Config"]["Env"],
            host_config=host_config,
        )
        cid = docker_client.containers.get(info["Name"].lstrip("/")).id
        from core.store import Store

        store = Store(data / "cairn.db")
        record = store.list_sessions()[0]
        store.update_session(record.id, container_id=cid)
        store.close()
    res = as_json(cairnctl(data, "resume", task_id, "--json"))
    assert res["state"] == "succeeded", res
    assert (ws / "steps.log").read_text() == "s0\ns1\ns2\ns3\n"


def test_docker_errors_become_one_line_and_the_run_stays_interrupted(task, docker_client):
    data, task_id, _ = task
    start(data, task_id, STEPS)
    at_step_2(data, task_id)
    kill_the_run(data, task_id, docker_client)
    assert follow_json(data, task_id)["state"] == "interrupted"
    before = latest_run(data, task_id)
    # A container that is not this data folder's holds the sandbox's name: Docker refuses
    # with 409; the user gets one line, the run stays interrupted and unchanged.
    c = container(data, docker_client)
    name = c.name
    c.remove(force=True)
    squatter = docker_client.containers.run(
        "cairn-test-busybox:1", ["sleep", "300"], name=name, detach=True, network_mode="none"
    )
    try:
        line = one_error_line(cairnctl(data, "resume", task_id, check=False))
        assert "internal error" not in line and "APIError" not in line, line
        after = latest_run(data, task_id)
        assert after.state == "interrupted" and after.attempt == before.attempt
    finally:
        squatter.remove(force=True)
    assert as_json(cairnctl(data, "resume", task_id, "--json"))["state"] == "succeeded"


# Fills the sandbox's pids limit and keeps it full: a slot that a short-lived
# process frees (a `docker exec` from the host, a pipeline of the runner) is
# taken again at once, so the probe below meets a full sandbox every time. (A file, not
# `python3 - <<EOF`: an interpreter reading its program from a pipe waits for a person.)
FILL_PIDS = """cat > /tmp/fill.py <<'EOF'
import os, time
end = time.time() + 15
kids = []
def fill():
    while True:
        try:
            pid = os.fork()
        except OSError:
            return
        if pid == 0:
            time.sleep(max(0.0, end - time.time()))
            os._exit(0)
        kids.append(pid)
def keep_full(until):
    while time.time() < until:
        fill()
        time.sleep(0.002)
fill()
keep_full(time.time() + 1)
open("filled.txt", "w").write(str(len(kids)))
keep_full(end)
for k in kids:
    os.waitpid(k, 0)
EOF
python3 /tmp/fill.py"""


def test_a_sandbox_at_its_pids_limit_keeps_its_live_run(task, docker_client):
    skip_without_limits(docker_client)
    data, task_id, ws = task
    cairnctl(data, "policy", task_id, "--pids", "48")
    start(data, task_id, ["echo s0 >> steps.log", FILL_PIDS, "echo s2 >> steps.log"])
    follower = subprocess.Popen(
        cairnctl_argv(data, "follow", task_id, "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cairnctl_env(),
    )
    try:
        wait_for(lambda: (ws / "filled.txt").exists(), what="the pids to fill", timeout=60)
        # Nothing in the sandbox can fork now: a probe that needs a second process fails.
        probe = container(data, docker_client).exec_run(["sh", "-c", "true | true"])
        assert probe.exit_code != 0, probe
        t0 = time.monotonic()
        report = as_json(cairnctl(data, "reconcile", "--json"))
        run = latest_run(data, task_id)
        assert run.id not in report["interrupted"], report
        assert run.state == "running", run
        assert time.monotonic() - t0 < 12  # still inside the window: the probe really failed
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
    result = as_json(subprocess.CompletedProcess([], 0, out, err))
    assert result["state"] == "succeeded", (result, err)
    assert (ws / "steps.log").read_text() == "s0\ns2\n"
