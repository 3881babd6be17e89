"""Sandboxes on a Docker engine on another machine, reached over SSH: the SSH "remote host"
(scripts/remote-host.sh: a second Docker engine and an SSH server on 127.0.0.1) is a sandbox
host like the others, and its sandboxes mount nothing of this machine's disk: the workspace,
home and run files live in volumes there, and the run's files come back through the API."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import docker
import pytest

from core.store import Store
from tests.integration.remote_support import ROOT, private_key_copy, remote_settings
from tests.support import as_json, cairnctl, cairnctl_argv, release_data_dir, wait_for

pytestmark = pytest.mark.docker

HOST = "far"


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    settings = remote_settings()
    settings["key"] = str(private_key_copy(settings, tmp_path_factory.mktemp("ssh")))
    return settings


@pytest.fixture(scope="module")
def remote_engine(remote):
    client = docker.DockerClient(base_url=f"unix://{remote['CAIRN_TEST_REMOTE_SOCKET']}")
    yield client
    client.close()


def host_value(remote: dict[str, str]) -> str:
    return (
        f"docker {remote['CAIRN_TEST_SSH_HOST']} key={remote['key']} "
        f"known_hosts={remote['CAIRN_TEST_SSH_KNOWN_HOSTS']}"
    )


def release_remote(data: Path, engine) -> None:
    """What the data folder made on the remote engine: its containers and volumes."""
    label = {"label": f"cairn.data_dir={data.resolve()}"}
    for c in engine.containers.list(all=True, filters=label):
        c.remove(force=True)
    for v in engine.volumes.list(filters=label):
        v.remove(force=True)


def new_far_task(tmp_path: Path, settings: dict[str, str], image: str, engine):
    """(data folder, task id, workspace root) of a new shell task on the remote host named by
    `settings`, with the sandbox image sent there when it is missing or another build of its tag."""
    data = tmp_path / "data"
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("hello\n")
    cairnctl(data, "config", "set", f"hosts.{HOST}", host_value(settings))
    try:
        there = engine.images.get(image).id
    except docker.errors.ImageNotFound:
        there = None
    local = docker.from_env()
    try:
        here = local.images.get(image).id
    finally:
        local.close()
    if there != here:  # missing there, or an older build of the tag
        cairnctl(data, "host", "send-image", HOST, timeout=300)
    made = as_json(cairnctl(data, "new", str(src), "--host", HOST, "--json"))
    return data, made["task_id"], Path(made["workspace_root"])


@pytest.fixture
def far_task(tmp_path, sandbox_image, docker_client, remote, remote_engine):
    made = new_far_task(tmp_path, remote, sandbox_image, remote_engine)
    yield made
    release_data_dir(made[0], docker_client)
    release_remote(made[0], remote_engine)


def start_detached(data: Path, task_id: str, *steps: str) -> None:
    """A shell run of `steps`, started and left to run."""
    cairnctl(data, "run", task_id, "--detach", "--json", *(a for s in steps for a in ("--step", s)))


def follow_in_background(data: Path, task_id: str) -> subprocess.Popen:
    """`cairnctl follow TASK --json` in a process of its own (it mirrors the run's files and
    workspace while it follows)."""
    return subprocess.Popen(
        cairnctl_argv(data, "follow", task_id, "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class OwnSshServer:
    """An SSH server of this test's own in front of the remote engine, to take the host away
    (the server and every connection it carries) and bring it back on the same port."""

    def __init__(self, remote: dict[str, str]):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.settings = dict(remote)
        self.settings.update(self._script("sshd"))

    def _script(self, command: str) -> dict[str, str]:
        done = subprocess.run(
            ["bash", str(ROOT / "scripts/remote-host.sh"), command, str(self.port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)

    def stop(self) -> None:
        self._script("stop-sshd")

    def start(self) -> None:
        self._script("sshd")


@pytest.fixture
def own_server(remote):
    server = OwnSshServer(remote)
    yield server
    server.stop()


def test_the_remote_host_is_tested_like_the_others(far_task, remote):
    data, _, _ = far_task
    done = as_json(cairnctl(data, "host", "check", HOST, "--json"))
    assert done["state"] == "ok", done
    assert any("free where it keeps images" in f for f in done["facts"]), done
    wrong = host_value(remote).replace(
        f"known_hosts={remote['CAIRN_TEST_SSH_KNOWN_HOSTS']}", f"known_hosts={data}/none"
    )
    cairnctl(data, "config", "set", "hosts.stranger", wrong)
    refused = as_json(cairnctl(data, "host", "check", "stranger", "--json", check=False))
    assert refused["state"] == "error" and "host key" in refused["detail"], refused


def test_a_shell_run_on_the_remote_host_mounts_nothing_from_here(
    far_task, docker_client, remote_engine
):
    data, task_id, _ = far_task
    steps = [
        "echo running on $(hostname) as $(id -u)",
        "echo made there > created.txt && cat README",
        "for i in 1 2 3; do echo line $i; done; echo oops >&2",
    ]
    args = ["run", task_id, "--json"]
    for step in steps:
        args += ["--step", step]
    done = as_json(cairnctl(data, *args, timeout=180))
    assert done["state"] == "succeeded", done
    shown = as_json(cairnctl(data, "show", task_id, "--json"))
    output = json.dumps(shown)
    run = data / "runs" / shown["workspace_id"]
    folders = list(run.iterdir())
    assert len(folders) == 1
    stdout = (folders[0] / "stdout").read_text()
    # Each line once, as the sandbox wrote it, mirrored into the local run folder.
    assert "running on cairn as 1000" in stdout and "hello" in stdout
    assert [ln for ln in stdout.splitlines() if ln.startswith("line ")] == [
        "line 1",
        "line 2",
        "line 3",
    ]
    assert "oops" in (folders[0] / "stderr").read_text()
    assert (folders[0] / "exit_code").read_text().strip() == "0"
    assert output  # the run's record is readable
    label = {"label": f"cairn.data_dir={data.resolve()}"}
    assert not docker_client.containers.list(all=True, filters=label)  # nothing made here
    containers = remote_engine.containers.list(all=True, filters=label)
    assert containers
    for c in containers:
        mounts = c.attrs["Mounts"]
        assert mounts and all(m["Type"] == "volume" for m in mounts), (c.name, mounts)
    sandbox = next(c for c in containers if not c.name.endswith("-carrier"))
    targets = {m["Destination"]: m["RW"] for m in sandbox.attrs["Mounts"]}
    assert targets["/workspace"] and targets["/cairn/runs"] and targets["/home/agent"]
    assert not targets["/cairn/tools"] and not targets["/cairn/decisions"]
    assert not targets["/workspace/.git/hooks"] and not targets["/cairn/git"]
    assert sandbox.attrs["HostConfig"]["ReadonlyRootfs"]
    assert sandbox.attrs["HostConfig"]["CapDrop"] == ["ALL"]


def test_a_run_on_the_remote_host_reattaches_to_its_sandbox(far_task, remote_engine):
    data, task_id, _ = far_task
    first = as_json(cairnctl(data, "run", task_id, "--json", "--step", "echo one > one.txt"))
    sandbox = next(
        c
        for c in remote_engine.containers.list(
            filters={"label": f"cairn.data_dir={data.resolve()}"}
        )
        if not c.name.endswith("-carrier")
    )

    def rules_file() -> bytes:
        done = sandbox.exec_run(["stat", "-c", "%i %z", "/cairn/decisions/.rules/exec_rules.py"])
        assert done.exit_code == 0, done.output
        return done.output

    placed = rules_file()
    second = as_json(cairnctl(data, "run", task_id, "--json", "--step", "cat one.txt && echo two"))
    assert first["state"] == second["state"] == "succeeded", (first, second)
    assert "sandbox: reattached" in second["resume_report"]["path"], second
    # Placed again by the second launch, the same bytes: never written there again (the engine
    # removes a file it extracts, and a run starting then would find no rules).
    assert rules_file() == placed
    shown = as_json(cairnctl(data, "show", task_id, "--json"))
    runs = sorted(
        (data / "runs" / shown["workspace_id"]).iterdir(), key=lambda p: p.stat().st_mtime
    )
    assert (runs[-1] / "stdout").read_text().split() == ["one", "two"]


def test_a_host_that_stops_answering_is_unreachable_and_its_run_is_found_again(
    tmp_path, sandbox_image, docker_client, remote_engine, own_server
):
    data, task_id, _ = new_far_task(tmp_path, own_server.settings, sandbox_image, remote_engine)
    try:
        start_detached(data, task_id, "echo before", "sleep 8", "echo after")
        follower = follow_in_background(data, task_id)
        ws_runs = data / "runs"

        def stdout_text() -> str:
            found = list(ws_runs.glob("*/*/stdout"))
            return found[0].read_text() if found else ""

        wait_for(lambda: "before" in stdout_text(), what="the first step's output, mirrored")
        own_server.stop()  # the host goes away: its server and every connection it carried
        status = as_json(cairnctl(data, "status", "--json", timeout=120))
        assert [s["state"] for s in status["sessions"]] == ["host unreachable"], status
        assert "cannot be reached" in status["host_problems"][HOST], status
        time.sleep(2)
        run = Store(data / "cairn.db").runs_of([task_id])[-1]
        assert run.state == "running", run  # unknown is never taken for an end
        assert follower.poll() is None, follower.communicate()  # still following
        assert "after" not in stdout_text()
        own_server.start()  # it answers again: the run is found and followed to its end
        out, err = follower.communicate(timeout=120)
        assert follower.returncode == 0, err
        assert json.loads(out)["state"] == "succeeded", out
        lines = stdout_text().splitlines()
        assert lines.count("before") == 1 and lines.count("after") == 1, lines
    finally:
        release_data_dir(data, docker_client)
        release_remote(data, remote_engine)


def test_files_made_on_the_remote_host_are_local_revisions_diffs_and_snapshots(far_task):
    data, task_id, ws = far_task
    done = as_json(
        cairnctl(
            data,
            "run",
            task_id,
            "--json",
            "--step",
            "mkdir -p src && echo 'print(1)' > src/app.py && sleep 3",
            "--step",
            "echo changed > README && rm -f src/app.py && echo two > two.txt",
            timeout=180,
        )
    )
    assert done["state"] == "succeeded", done
    # The local copy is the remote one, and its revisions were written here.
    assert (ws / "README").read_text() == "changed\n"
    assert (ws / "two.txt").read_text() == "two\n" and not (ws / "src/app.py").exists()
    revisions = as_json(cairnctl(data, "revisions", task_id, "--json"))["revisions"]
    paths = {p for r in revisions for p in r.get("paths") or []}
    assert {"src/app.py", "README", "two.txt"} <= paths, revisions
    watch = [r for r in revisions if r["trigger"] == "watch" and r["run_id"]]
    assert watch, revisions  # recorded while the run ran, not only at its checkpoint
    assert any("src/app.py" in r["paths"] for r in watch), watch  # made and gone there
    base = next(r for r in revisions if r["trigger"] == "base")
    diff = as_json(cairnctl(data, "diff", task_id, base["id"], "--json"))
    assert {f["new_path"] or f["old_path"] for f in diff["files"]} == {"README", "two.txt"}, diff
    snap = as_json(cairnctl(data, "snapshot", task_id, "--json"))
    latest = max(revisions, key=lambda r: r["seq"])
    assert snap["state"] == "durable" and snap["tree"] == latest["tree"], (snap, latest)


def wipe_and_resume(data: Path, task_id: str, ws: Path, remote_engine, *resume_args: str) -> dict:
    """A followed run stopped by the remote engine losing this task's data (its containers and
    volumes) at its second step, then resumed with `resume_args`; the session after it."""
    start_detached(
        data,
        task_id,
        "echo one > one.txt && mkdir -p d && printf 'a\\0b' > d/bin && ln -s one.txt l",
        "sleep 30",
        "echo after > after.txt",
    )
    follower = follow_in_background(data, task_id)
    try:

        def at_second_step() -> bool:
            steps = list(data.glob("runs/*/*/step"))
            return bool(steps) and steps[0].read_text().strip() == "1" and (ws / "l").is_symlink()

        wait_for(at_second_step, timeout=90, what="the run at its second step, mirrored here")
        before = as_json(cairnctl(data, "status", "--json"))["sessions"][0]
        release_remote(data, remote_engine)  # the engine's data for this task is gone
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert json.loads(out)["state"] == "interrupted", (out, err)
    resumed = as_json(cairnctl(data, "resume", task_id, "--json", *resume_args, timeout=300))
    assert resumed["state"] == "succeeded", resumed
    assert "sandbox: recreated" in resumed["report"]["path"], resumed
    after = as_json(cairnctl(data, "status", "--json"))["sessions"][0]
    assert after["snapshot_id"] == before["snapshot_id"], (before, after)
    return after


def local_hashes(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if ".git" in rel.parts or p.is_dir() and not p.is_symlink():
            continue
        data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
        out[str(rel)] = hashlib.sha256(data).hexdigest()
    return out


def test_a_wiped_remote_engine_is_seeded_again_from_the_snapshot(far_task, remote_engine):
    data, task_id, ws = far_task
    wipe_and_resume(data, task_id, ws, remote_engine)
    # The new volume holds exactly the files the checkpoint recorded (and the run's last step).
    sandbox = next(
        c
        for c in remote_engine.containers.list(
            filters={"label": f"cairn.data_dir={data.resolve()}"}
        )
        if not c.name.endswith("-carrier")
    )
    script = (
        "cd /workspace && find . -path ./.git -prune -o ! -type d -print | sort | "
        'while read -r f; do if [ -L "$f" ]; then printf %s "$(readlink "$f")" | sha256sum; '
        'else sha256sum < "$f"; fi | sed "s#  -#  ${f#./}#"; done'
    )
    listing = sandbox.exec_run(["sh", "-c", script], user="1000").output.decode()
    there = dict(reversed(line.split("  ", 1)) for line in listing.strip().splitlines())
    assert there == local_hashes(ws), (there, local_hashes(ws))
    assert {"one.txt", "d/bin", "l", "after.txt", "README"} <= set(there)


def test_a_wiped_remote_engine_resumes_on_the_local_engine(far_task, remote_engine, docker_client):
    data, task_id, ws = far_task
    after = wipe_and_resume(data, task_id, ws, remote_engine, "--host", "local")
    assert after["host"] == "local", after
    assert (ws / "after.txt").read_text() == "after\n" and (ws / "d/bin").read_bytes() == b"a\0b"
    assert docker_client.containers.get(after["container"]).status == "running"


def test_a_file_written_there_is_a_revision_here_within_a_second_of_the_quiet_period(
    far_task, remote_engine
):
    from core.sandbox.mirror import QUIET_PERIOD

    data, task_id, ws = far_task
    # The first seconds of a run start the mirror there; the file is written after them.
    done = as_json(
        cairnctl(data, "run", task_id, "--json", "--step", "sleep 3; echo x > made.txt; sleep 3")
    )
    assert done["state"] == "succeeded", done
    revisions = as_json(cairnctl(data, "revisions", task_id, "--json"))["revisions"]
    first = min(
        (r for r in revisions if r["trigger"] == "watch" and "made.txt" in r["paths"]),
        key=lambda r: r["seq"],
    )
    sandbox = next(
        c
        for c in remote_engine.containers.list(
            filters={"label": f"cairn.data_dir={data.resolve()}"}
        )
        if not c.name.endswith("-carrier")
    )
    stat = sandbox.exec_run(["stat", "-c", "%.9Y", "/workspace/made.txt"])
    assert stat.exit_code == 0, stat.output
    delay = first["created_at"] - float(stat.output.decode())  # one clock: the same machine
    print(f"made.txt written there to its revision here: {delay:.3f} s")
    assert 0 < delay <= QUIET_PERIOD + 1.0, delay
