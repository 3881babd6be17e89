"""Runs that outlive Cairn and the resume ladder, against a real Docker engine and the real
Secret Service, driven through `cairnctl` the way a user (or the GUI) would."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from core.models import Run
from core.runs import output_of
from core.runs.checkpoints import STEPS as CHECKPOINT_STEPS
from core.store import Store
from tests.support import (
    as_json,
    cairnctl,
    cairnctl_argv,
    cairnctl_env,
    on_podman,
    one_error_line,
    stored_container_files,
    wait_for,
)

pytestmark = pytest.mark.docker


def store_of(data: Path) -> Store:
    return Store(data / "cairn.db")


def latest_run(data: Path, task_id: str) -> Run:
    return store_of(data).runs_of([task_id])[-1]


def step_of(data: Path, run: Run) -> int | None:
    f = data / "runs" / run.workspace_id / run.exec_id / "step"
    return int(f.read_text()) if f.exists() and f.read_text().strip().isdigit() else None


def session(data: Path) -> dict:
    sessions = as_json(cairnctl(data, "status", "--json"))["sessions"]
    assert len(sessions) == 1, sessions
    return sessions[0]


def start_steps(data: Path, task_id: str, *steps: str) -> dict:
    args = ["run", task_id, "--detach", "--json"]
    for s in steps:
        args += ["--step", s]
    return as_json(cairnctl(data, *args))


def interrupt_by_removing_container(data: Path, task_id: str, docker_client) -> None:
    docker_client.containers.get(session(data)["container"]).remove(force=True)
    res = as_json(cairnctl(data, "follow", task_id, "--json"))
    assert res["state"] == "interrupted", res


def tree_of_disk(root: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(root.rglob("*")):
        if ".git" in p.relative_to(root).parts or not p.is_file():
            continue
        out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_a_killed_cairn_comes_back_and_observes_every_line_once(task):
    data, task_id, _ = task
    script = "for i in $(seq 1 40); do echo line $i; sleep 0.05; done"
    proc = subprocess.Popen(
        cairnctl_argv(data, "run", task_id, "--", "sh", "-c", script),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cairnctl_env(),
    )
    seen = []
    for line in proc.stdout:  # type: ignore[union-attr]
        seen.append(line)
        if line.strip() == "line 8":
            break
    proc.kill()  # SIGKILL mid-run: no clean-up at all
    proc.wait()
    run = latest_run(data, task_id)
    assert run.state == "running"
    res = as_json(cairnctl(data, "follow", task_id, "--json"))
    assert res["state"] == "succeeded" and res["exit_code"] == 0
    observed = output_of(store_of(data), res["run_id"], "stdout")
    assert observed == "".join(f"line {i}\n" for i in range(1, 41))


def test_container_removed_mid_run_is_interrupted_and_resume_recreates_it(task, docker_client):
    data, task_id, ws = task
    run = start_steps(data, task_id, "echo a >> a.txt", "sleep 10", "echo b > b.txt")
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 1, what="step 1")
    ck = as_json(cairnctl(data, "checkpoint", task_id, "--json"))
    before = session(data)
    container = docker_client.containers.get(before["container"])
    assert container.labels["cairn.snapshot"] == before["snapshot_id"]

    interrupt_by_removing_container(data, task_id, docker_client)
    # The files are hash-equal to the last checkpoint: capture finds exactly its tree.
    cap = as_json(cairnctl(data, "capture", task_id, "--json"))
    tree = store_of(data).get_revision(latest_run(data, task_id).workspace_id, cap["revision"]).tree
    assert tree == ck["tree"]

    res = as_json(cairnctl(data, "resume", task_id, "--json"))
    assert res["state"] == "succeeded", res
    assert "sandbox: recreated" in res["report"]["path"]
    after = session(data)
    assert after["session_id"] == before["session_id"]
    assert after["snapshot_id"] == before["snapshot_id"]  # the same snapshot id, carried over
    assert after["generation"] == before["generation"] + 1
    assert (
        docker_client.containers.get(after["container"]).labels["cairn.snapshot"]
        == before["snapshot_id"]
    )
    assert (ws / "a.txt").read_text() == "a\n"  # step 0 was not run again
    assert (ws / "b.txt").read_text() == "b\n"
    assert res["run_id"] == run["run_id"] and res["attempt"] == 2


def test_a_deleted_workspace_is_restored_from_the_snapshot(task, docker_client):
    data, task_id, ws = task
    start_steps(
        data,
        task_id,
        "echo a > a.txt && mkdir -p d && ln -s ../a.txt d/link",
        "sleep 8",
        "cat a.txt > c.txt",
    )
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 1, what="step 1")
    ck = as_json(cairnctl(data, "checkpoint", task_id, "--json"))
    interrupt_by_removing_container(data, task_id, docker_client)
    expected = tree_of_disk(ws)
    shutil.rmtree(ws)

    res = as_json(cairnctl(data, "resume", task_id, "--json"))
    assert res["state"] == "succeeded", res
    assert "workspace: restored" in res["report"]["path"]
    assert any(ck["snapshot_id"] in note for note in res["report"]["notes"])
    assert os.readlink(ws / "d" / "link") == "../a.txt"
    got = tree_of_disk(ws)
    assert got.pop("c.txt") == b"a\n"
    assert got == expected


def test_a_workspace_edited_by_hand_is_never_overwritten(task, docker_client):
    data, task_id, ws = task
    start_steps(data, task_id, "echo a > a.txt", "sleep 10", "echo done > done.txt")
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 1, what="step 1")
    cairnctl(data, "checkpoint", task_id)
    interrupt_by_removing_container(data, task_id, docker_client)
    (ws / "a.txt").write_text("edited by hand\n")

    proc = cairnctl(data, "resume", task_id, check=False)
    line = one_error_line(proc)
    assert "--on-top" in line and "--restore-into-new" in line and "outside Cairn" in line
    assert (ws / "a.txt").read_text() == "edited by hand\n"
    assert latest_run(data, task_id).state == "interrupted"

    res = as_json(cairnctl(data, "resume", task_id, "--restore-into-new", "--json"))
    assert res["state"] == "succeeded", res
    shown = as_json(cairnctl(data, "show", task_id, "--json"))
    new_root = Path(shown["workspace_root"])
    assert new_root != ws
    assert (new_root / "a.txt").read_text() == "a\n" and (new_root / "done.txt").exists()
    assert (ws / "a.txt").read_text() == "edited by hand\n"  # the edited one is kept as it was


def test_on_top_keeps_outside_edits(task, docker_client):
    data, task_id, ws = task
    start_steps(data, task_id, "echo a > a.txt", "sleep 8", "cat a.txt > copy.txt")
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 1, what="step 1")
    interrupt_by_removing_container(data, task_id, docker_client)
    (ws / "a.txt").write_text("mine\n")
    res = as_json(cairnctl(data, "resume", task_id, "--on-top", "--json"))
    assert res["state"] == "succeeded", res
    assert (ws / "copy.txt").read_text() == "mine\n"
    triggers = [
        r["trigger"] for r in as_json(cairnctl(data, "revisions", task_id, "--json"))["revisions"]
    ]
    assert "external" in triggers


@pytest.mark.keyring
def test_canary_secret_rotation_and_revocation(task, docker_client, secret_service):
    data, task_id, ws = task
    name = f"canary-{uuid.uuid4().hex[:8]}"
    value = f"CANARY-{uuid.uuid4().hex}"
    check = (
        'if [ -n "$TOKEN" ]; then printf %s "$TOKEN" | sha256sum | cut -c1-64; else echo absent; fi'
    )
    try:
        cairnctl(data, "secret", "set", name, input=value)
        cairnctl(data, "grant", task_id, name, "--env", "TOKEN")
        res = as_json(cairnctl(data, "run", task_id, "--json", "--", "sh", "-c", check))
        assert (
            output_of(store_of(data), res["run_id"]).strip()
            == hashlib.sha256(value.encode()).hexdigest()
        )
        # A run that prints the secret (plainly, through env, base64-encoded, on stderr): its
        # files on the host hold a placeholder instead.
        leak = (
            'echo "token=$TOKEN"; env | grep TOKEN; printf %s "$TOKEN" | base64; echo "$TOKEN" >&2'
        )
        res = as_json(cairnctl(data, "run", task_id, "--json", "--", "sh", "-c", leak))
        assert res["state"] == "succeeded"
        shown = output_of(store_of(data), res["run_id"])
        assert "token=[secret:TOKEN]" in shown and "TOKEN=[secret:TOKEN]" in shown
        container_id = docker_client.containers.get(session(data)["container"]).id

        # Nowhere on disk: data folder (database, runs, workspaces), the vault's objects
        # decompressed, Docker's stored container config.
        needle = value.encode()
        for p in data.rglob("*"):
            if p.is_file() and not p.is_symlink():
                assert needle not in p.read_bytes(), f"the canary is in {p}"
        for vault in (data / "vault").glob("*.git"):
            dump = subprocess.run(
                ["git", "--git-dir", str(vault), "cat-file", "--batch-all-objects", "--batch"],
                capture_output=True,
            ).stdout
            assert needle not in dump
        assert needle not in json.dumps(docker_client.api.inspect_container(container_id)).encode()
        for p in stored_container_files(docker_client, container_id):
            assert needle not in p.read_bytes(), f"the canary is in {p}"

        rotated = f"ROTATED-{uuid.uuid4().hex}"
        cairnctl(data, "secret", "set", name, input=rotated)
        res = as_json(cairnctl(data, "run", task_id, "--json", "--", "sh", "-c", check))
        assert (
            output_of(store_of(data), res["run_id"]).strip()
            == hashlib.sha256(rotated.encode()).hexdigest()
        )

        # Revoked between a checkpoint and the resume: the resumed run goes without it.
        start_steps(data, task_id, "sleep 8", check + " > token.txt")
        wait_for(lambda: step_of(data, latest_run(data, task_id)) == 0, what="step 0")
        interrupt_by_removing_container(data, task_id, docker_client)
        cairnctl(data, "revoke", task_id, name)
        res = as_json(cairnctl(data, "resume", task_id, "--json"))
        assert res["state"] == "succeeded", res
        assert (ws / "token.txt").read_text().strip() == "absent"
        assert any(name in step for step in res["report"]["path"] if step.startswith("credentials"))
    finally:
        cairnctl(data, "secret", "rm", name, check=False)


@pytest.mark.keyring
def test_a_policy_tightened_after_a_checkpoint_governs_the_resumed_sandbox(
    task, docker_client, secret_service
):
    data, task_id, ws = task
    name = f"pol-{uuid.uuid4().hex[:8]}"
    try:
        cairnctl(data, "secret", "set", name, input=f"value-{uuid.uuid4().hex}")
        cairnctl(data, "grant", task_id, name, "--env", "TOKEN")
        # Podman sandboxes have no open network: there the wider policy is the allowlist.
        podman = on_podman(docker_client)
        cairnctl(data, "policy", task_id, "--network", "allowlist" if podman else "open")
        probe = (
            "grep -c : /proc/net/dev > {n}-net.txt; "
            'if [ -n "$TOKEN" ]; then echo has; else echo absent; fi > {n}-token.txt'
        )
        start_steps(data, task_id, probe.format(n="before"), "sleep 8", probe.format(n="after"))
        wait_for(lambda: step_of(data, latest_run(data, task_id)) == 1, what="step 1")
        cairnctl(data, "checkpoint", task_id)
        interrupt_by_removing_container(data, task_id, docker_client)
        policy = as_json(
            cairnctl(data, "policy", task_id, "--network", "none", "--secrets", "", "--json")
        )
        assert policy["network"] == "none" and policy["secrets"] == []

        res = as_json(cairnctl(data, "resume", task_id, "--json"))
        assert res["state"] == "succeeded", res
        assert (ws / "before-token.txt").read_text().strip() == "has"
        assert (ws / "after-token.txt").read_text().strip() == "absent"
        info = docker_client.api.inspect_container(session(data)["container"])
        assert info["HostConfig"]["NetworkMode"] == "none"
        if podman:  # the proxy's folder is no longer mounted
            assert "/cairn/egress" not in {m["Destination"] for m in info["Mounts"]}
        else:
            before = int((ws / "before-net.txt").read_text())
            assert before > int((ws / "after-net.txt").read_text()) == 1
    finally:
        cairnctl(data, "secret", "rm", name, check=False)


def test_two_resumes_of_one_lineage_at_once_only_one_proceeds(task, docker_client):
    data, task_id, _ = task
    start_steps(data, task_id, "sleep 6", "sleep 1")
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 0, what="step 0")
    interrupt_by_removing_container(data, task_id, docker_client)
    procs = [
        subprocess.Popen(
            cairnctl_argv(data, "resume", task_id, "--detach", "--json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cairnctl_env(),
        )
        for _ in range(2)
    ]
    outcomes = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0, 2], outcomes
    refused = next(err for code, _, err in outcomes if code == 2)
    assert any(w in refused for w in ("in progress", "is still", "resumed meanwhile")), refused
    res = as_json(cairnctl(data, "follow", task_id, "--json"))
    assert res["state"] == "succeeded"


def test_crash_at_each_checkpoint_step_leaves_the_previous_checkpoint_restorable(tmp_path):
    data = tmp_path / "data"
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("0\n")
    made = as_json(cairnctl(data, "new", str(src), "--json"))
    task_id, ws = made["task_id"], Path(made["workspace_root"])
    store = store_of(data)
    store.add_run(
        Run(
            "r_crashtest",
            task_id,
            "interrupted",
            1,
            "shell",
            {"commands": ["true"]},
            workspace_id=made["workspace_id"],
            attempt=1,
            created_at=time.time(),
        )
    )
    cairnctl(data, "checkpoint", task_id)
    for i, step in enumerate(CHECKPOINT_STEPS):
        (ws / "f.txt").write_text(f"{i + 1}\n")
        proc = cairnctl(
            data, "checkpoint", task_id, check=False, env=cairnctl_env(CAIRN_FAILPOINT=step)
        )
        assert proc.returncode == 137, (step, proc.stderr)
        store = store_of(data)
        checkpoints = store.list_checkpoints("r_crashtest")
        for ck in checkpoints:  # no checkpoint references a missing snapshot
            snap = store.get_snapshot(ck.snapshot_id)
            assert snap.tree == ck.tree
        last = checkpoints[-1]
        out = tmp_path / f"restore-{i}"
        got = as_json(cairnctl(data, "materialize", last.snapshot_id, str(out), "--json"))
        assert got["tree"] == last.tree  # restores hash-exact


def test_failures_are_clear_and_the_task_stays_resumable(task, docker_client, tmp_path):
    data, task_id, _ = task
    # Long enough a first step that the sandbox is removed while it runs, on a loaded machine too.
    start_steps(data, task_id, "sleep 8", "echo ok > ok.txt")
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 0, what="step 0")
    interrupt_by_removing_container(data, task_id, docker_client)

    # The engine's socket is not there: Docker's (DOCKER_HOST), or Podman's (under the runtime
    # folder) when the suite runs against Podman.
    gone = cairnctl_env(DOCKER_HOST="unix:///nonexistent.sock", XDG_RUNTIME_DIR="/nonexistent")
    line = one_error_line(cairnctl(data, "resume", task_id, check=False, env=gone))
    assert "not running" in line
    assert latest_run(data, task_id).state == "interrupted"

    line = one_error_line(
        cairnctl(
            data,
            "resume",
            task_id,
            check=False,
            env=cairnctl_env(CAIRN_SANDBOX_IMAGE="cairn-missing:0"),
        )
    )
    assert "cairn-missing:0" in line
    assert latest_run(data, task_id).state == "interrupted"

    if shutil.which("setpriv") and os.geteuid() == 0:
        subprocess.run(["chown", "-R", "65534:65534", str(data)], check=True)
        subprocess.run(["chmod", "o+x", str(data.parent)], check=True)
        line = one_error_line(cairnctl(data, "resume", task_id, check=False, user=65534))
        assert "permission denied" in line.lower()
        assert latest_run(data, task_id).state == "interrupted"

    res = as_json(cairnctl(data, "resume", task_id, "--json"))
    assert res["state"] == "succeeded", res


@pytest.mark.keyring
def test_a_locked_keyring_refuses_the_run_and_keeps_it_resumable(
    task, docker_client, secret_service
):
    data, task_id, ws = task
    name = f"lock-{uuid.uuid4().hex[:8]}"
    try:
        cairnctl(data, "secret", "set", name, input=f"v-{uuid.uuid4().hex}")
        cairnctl(data, "grant", task_id, name, "--env", "TOKEN")
        start_steps(data, task_id, "sleep 8", "echo ok > ok.txt")
        wait_for(lambda: step_of(data, latest_run(data, task_id)) == 0, what="step 0")
        interrupt_by_removing_container(data, task_id, docker_client)
        line = one_error_line(
            cairnctl(
                data,
                "resume",
                task_id,
                check=False,
                env=cairnctl_env(DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent/bus"),
            )
        )
        assert "keyring" in line
        assert latest_run(data, task_id).state == "interrupted"
        res = as_json(cairnctl(data, "resume", task_id, "--json"))
        assert res["state"] == "succeeded" and (ws / "ok.txt").exists()
    finally:
        cairnctl(data, "secret", "rm", name, check=False)


def test_a_link_planted_in_the_runs_folder_is_never_followed(task, docker_client, tmp_path):
    data, task_id, ws = task
    victim = tmp_path / "victim"
    victim.mkdir()
    before = os.stat(victim)
    plant = (
        "cd /cairn/runs && for d in r_*.1; do ln -s "
        + str(victim)
        + ' "${d%.1}.2"; ln -s '
        + str(victim)
        + ' "${d%.1}.2.x"; done'
    )
    start_steps(data, task_id, plant, "sleep 8", "echo resumed > r.txt")
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 1, what="step 1")
    interrupt_by_removing_container(data, task_id, docker_client)
    res = as_json(cairnctl(data, "resume", task_id, "--json"))
    assert res["state"] == "succeeded" and (ws / "r.txt").exists()
    assert list(victim.iterdir()) == []  # nothing written through the planted link
    after = os.stat(victim)
    assert (after.st_uid, after.st_gid, after.st_mode) == (
        before.st_uid,
        before.st_gid,
        before.st_mode,
    )
    run = latest_run(data, task_id)
    attempt = data / "runs" / run.workspace_id / run.exec_id
    assert attempt.is_dir() and not attempt.is_symlink()
