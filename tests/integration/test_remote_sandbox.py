"""Sandboxes on a Docker engine on another machine, reached over SSH: the SSH "remote host"
(scripts/remote-host.sh: a second Docker engine and an SSH server on 127.0.0.1) is a sandbox
host like the others, and its sandboxes mount nothing of this machine's disk: the workspace,
home and run files live in volumes there, and the run's files come back through the API."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from tests.integration.remote_support import private_key_copy, remote_settings
from tests.support import as_json, cairnctl, release_data_dir

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


@pytest.fixture
def far_task(tmp_path, sandbox_image, docker_client, remote, remote_engine):
    """(data folder, task id, workspace root) of a new shell task on the remote host, with the
    sandbox image sent there when it is missing."""
    data = tmp_path / "data"
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("hello\n")
    cairnctl(data, "config", "set", f"hosts.{HOST}", host_value(remote))
    try:
        remote_engine.images.get(sandbox_image)
    except docker.errors.ImageNotFound:
        cairnctl(data, "host", "send-image", HOST, timeout=300)
    made = as_json(cairnctl(data, "new", str(src), "--host", HOST, "--json"))
    yield data, made["task_id"], Path(made["workspace_root"])
    release_data_dir(data, docker_client)
    release_remote(data, remote_engine)


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
    second = as_json(cairnctl(data, "run", task_id, "--json", "--step", "cat one.txt && echo two"))
    assert first["state"] == second["state"] == "succeeded", (first, second)
    assert "sandbox: reattached" in second["resume_report"]["path"], second
    shown = as_json(cairnctl(data, "show", task_id, "--json"))
    runs = sorted(
        (data / "runs" / shown["workspace_id"]).iterdir(), key=lambda p: p.stat().st_mtime
    )
    assert (runs[-1] / "stdout").read_text().split() == ["one", "two"]
