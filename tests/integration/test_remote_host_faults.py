"""A remote sandbox host whose Docker engine stops and starts again under a run, on a remote host
of this module's own (scripts/remote-host.sh with CAIRN_REMOTE_INSTANCE: its own engine, bridge,
data and SSH server), so stopping its engine disturbs no other test. Its SSH server keeps
answering: only the engine behind it goes away."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import docker
import pytest

from core import approvals
from core.app import Cairn
from core.models import RunState
from core.sandbox.events import SandboxEvent, SandboxEventStream
from core.store import Store
from gui.sandbox_watch import events_address, settle_workspace
from tests.integration.remote_support import ROOT, private_key_copy
from tests.integration.test_remote_sandbox import (
    follow_in_background,
    new_far_task,
    release_remote,
    start_detached,
)
from tests.support import as_json, cairnctl, one_error_line, release_data_dir, wait_for

pytestmark = pytest.mark.docker

INSTANCE = "4"  # this module's remote host (scripts/remote-host.sh CAIRN_REMOTE_INSTANCE)


class OwnRemoteHost:
    """A remote host of this module's own, whose engine the tests stop and start."""

    def __init__(self, folder: Path):
        if os.geteuid() != 0:
            pytest.skip("a remote host of the test's own needs root (scripts/remote-host.sh)")
        self.settings = self._script("start")
        self.settings["key"] = str(private_key_copy(self.settings, folder))
        self.socket = self.settings["CAIRN_TEST_REMOTE_SOCKET"]

    def _script(self, command: str, live_restore: bool = True) -> dict[str, str]:
        env = dict(os.environ, CAIRN_REMOTE_INSTANCE=INSTANCE)
        env["CAIRN_REMOTE_LIVE_RESTORE"] = "1" if live_restore else "0"
        done = subprocess.run(
            ["bash", str(ROOT / "scripts/remote-host.sh"), command],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        if done.returncode != 0:
            if command == "start":
                pytest.skip(f"the test's remote host did not start: {done.stderr.strip()[-300:]}")
            raise AssertionError(f"remote-host.sh {command}: {done.stderr.strip()[-500:]}")
        return dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)

    def stop_engine(self) -> None:
        self._script("stop-engine")

    def start_engine(self, *, live_restore: bool = True) -> None:
        self._script("start-engine", live_restore=live_restore)

    def engine(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=f"unix://{self.socket}")


@pytest.fixture(scope="module")
def own_host(tmp_path_factory):
    host = OwnRemoteHost(tmp_path_factory.mktemp("ssh"))
    yield host
    host.start_engine()  # as the module found it: running, with --live-restore


@pytest.fixture
def own_task(tmp_path, sandbox_image, docker_client, own_host):
    own_host.start_engine()
    engine = own_host.engine()
    made = new_far_task(tmp_path, own_host.settings, sandbox_image, engine)
    try:
        yield made
    finally:
        own_host.start_engine()  # a failed test may have left it stopped
        release_data_dir(made[0], docker_client)
        fresh = own_host.engine()
        release_remote(made[0], fresh)
        fresh.close()
        engine.close()


def stdout_of(data: Path) -> str:
    found = list(data.glob("runs/*/*/stdout"))
    return found[0].read_text() if found else ""


def session_states(data: Path) -> list[str]:
    status = as_json(cairnctl(data, "status", "--json", timeout=120))
    return [s["state"] for s in status["sessions"]]


def test_an_engine_stopped_mid_run_is_unreachable_and_its_run_is_reattached(own_task, own_host):
    data, task_id, ws = own_task
    start_detached(data, task_id, "echo before", "sleep 4", "echo after > after.txt; echo after")
    follower = follow_in_background(data, task_id)
    try:
        wait_for(lambda: "before" in stdout_of(data), timeout=90, what="the first step, here")
        own_host.stop_engine()  # live-restore: the sandbox runs on without its engine
        stopped = time.monotonic()
        status = as_json(cairnctl(data, "status", "--json", timeout=120))
        assert [s["state"] for s in status["sessions"]] == ["host unreachable"], status
        assert "far" in status["host_problems"], status
        run = Store(data / "cairn.db").runs_of([task_id])[-1]
        assert run.state == "running", run  # an engine that does not answer ends nothing
        assert follower.poll() is None, follower.communicate()
        # The run ends there while its engine is away; it is found ended when it answers.
        time.sleep(max(0.0, 6 - (time.monotonic() - stopped)))
        own_host.start_engine()
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert json.loads(out)["state"] == "succeeded", out
    lines = stdout_of(data).splitlines()
    assert lines.count("before") == 1 and lines.count("after") == 1, lines
    assert (ws / "after.txt").is_file(), err  # mirrored after the engine came back
    assert (ws / "after.txt").read_text() == "after\n"
    assert session_states(data) == ["running"]


def test_an_engine_stopped_without_live_restore_interrupts_the_run_and_resume_ends_it(
    own_task, own_host
):
    data, task_id, ws = own_task
    own_host.stop_engine()
    own_host.start_engine(live_restore=False)  # its containers die when it stops
    start_detached(data, task_id, "echo one > one.txt", "sleep 12", "echo after > after.txt")
    follower = follow_in_background(data, task_id)
    try:

        def at_second_step() -> bool:
            steps = list(data.glob("runs/*/*/step"))
            return bool(steps) and steps[0].read_text().strip() == "1" and (ws / "one.txt").exists()

        wait_for(at_second_step, timeout=90, what="the run at its second step, mirrored here")
        # The engine stops its sandbox before it goes: the follower may see that end first.
        own_host.stop_engine()
        assert session_states(data) == ["host unreachable"]
        own_host.start_engine()
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
    # The sandbox died with its engine: the run is interrupted (its volumes are there), not gone.
    assert json.loads(out)["state"] == "interrupted", (out, err)
    assert session_states(data) == ["stopped"]
    resumed = as_json(cairnctl(data, "resume", task_id, "--json", timeout=300))
    assert resumed["state"] == "succeeded", resumed
    assert "sandbox: reattached" in resumed["report"]["path"], resumed  # restarted on its volumes
    assert (ws / "after.txt").read_text() == "after\n" and (ws / "one.txt").exists()


def labelled(engine: docker.DockerClient, data: Path) -> tuple[list[str], list[str]]:
    """(container names, volume names) the data folder has on a remote engine."""
    label = {"label": f"cairn.data_dir={data.resolve()}"}
    containers = sorted(c.name for c in engine.containers.list(all=True, filters=label))
    volumes = sorted(v.name for v in engine.volumes.list(filters=label))
    return containers, volumes


def run_and_stop(data: Path, task_id: str) -> None:
    done = as_json(cairnctl(data, "run", task_id, "--json", "--step", "echo x > x.txt"))
    assert done["state"] == "succeeded", done
    cairnctl(data, "stop", task_id, "--json")


def test_deleting_a_task_removes_its_sandbox_carrier_and_volumes_on_the_remote_host(
    own_task, own_host
):
    data, task_id, ws = own_task
    run_and_stop(data, task_id)
    engine = own_host.engine()
    containers, volumes = labelled(engine, data)
    assert len(containers) == 2 and len(volumes) == 7, (containers, volumes)  # and its carrier
    plan = as_json(cairnctl(data, "housekeeping", "--json", timeout=120))["plan"]
    assert not [i for i in plan["items"] if i["kind"] == "remote_sandbox"], plan  # in use
    done = as_json(cairnctl(data, "delete", task_id, "--yes", "--json"))
    assert not done["deleted"]["notes"], done
    assert labelled(engine, data) == ([], [])
    assert not ws.exists()
    engine.close()


def test_a_task_deleted_while_its_host_does_not_answer_is_cleaned_up_when_it_answers(
    own_task, own_host
):
    data, task_id, ws = own_task
    done = as_json(cairnctl(data, "run", task_id, "--json", "--step", "echo x > x.txt"))
    assert done["state"] == "succeeded", done
    session = as_json(cairnctl(data, "status", "--json"))["sessions"][0]["session_id"]
    own_host.stop_engine()
    try:
        # Its sandbox was up when last seen: never removed unseen, nor its task deleted.
        refused = one_error_line(cairnctl(data, "delete", task_id, "--yes", check=False))
        assert "its host cannot be asked now" in refused, refused
        assert ws.is_dir()
    finally:
        own_host.start_engine()
    cairnctl(data, "stop", task_id, "--json")
    own_host.stop_engine()
    try:
        done = as_json(cairnctl(data, "delete", task_id, "--yes", "--json", timeout=120))
        notes = done["deleted"]["notes"]
        assert any("did not answer" in n and session in n for n in notes), done
        assert not ws.exists()  # the deletion went on: the record is here, not there
        assert (data / "remote-leftovers" / f"{session}.json").is_file()
        waiting = as_json(cairnctl(data, "housekeeping", "--json", timeout=120))["plan"]
        assert not [i for i in waiting["items"] if i["kind"] == "remote_sandbox"], waiting
        assert any("far did not answer" in n for n in waiting["notes"]), waiting
        # A cleanup while it still does not answer keeps the record.
        cairnctl(data, "housekeeping", "--yes", "--json", timeout=120)
        assert (data / "remote-leftovers" / f"{session}.json").is_file()
    finally:
        own_host.start_engine()
    engine = own_host.engine()
    containers, volumes = labelled(engine, data)
    assert len(containers) == 2 and len(volumes) == 7, (containers, volumes)
    plan = as_json(cairnctl(data, "housekeeping", "--json", timeout=120))["plan"]
    items = [i for i in plan["items"] if i["kind"] == "remote_sandbox"]
    assert [(i["path"], i["host"], i["count"]) for i in items] == [(session, "far", 9)], plan
    cleaned = as_json(cairnctl(data, "housekeeping", "--yes", "--json", timeout=120))
    assert not cleaned["result"]["skipped"], cleaned
    assert labelled(engine, data) == ([], [])
    assert not (data / "remote-leftovers" / f"{session}.json").exists()
    again = as_json(cairnctl(data, "housekeeping", "--json", timeout=120))["plan"]
    assert not [i for i in again["items"] if i["kind"] == "remote_sandbox"], again
    engine.close()


def test_the_detached_judge_answers_a_remote_run_that_nothing_follows(own_task, own_host):
    """The app closed: no Cairn process follows the run, so only the detached judge reads its
    requests there, and only it sends a person's decision back."""
    data, task_id, _ = own_task
    bare = "/tmp/pushed.git"
    start_detached(
        data,
        task_id,
        f"git init -q --bare {bare}",
        f"git push -q {bare} HEAD:refs/heads/main && echo pushed",
    )
    assert approvals.judge_pid(data.resolve()) is not None

    def card() -> dict | None:
        listed = as_json(cairnctl(data, "approvals", "--json"))["approvals"]
        return next((a for a in listed if a["rule"] == "git-push"), None)

    waiting = wait_for(card, timeout=90, what="the push's request, brought here by the judge")
    engine = own_host.engine()
    try:
        sandbox = next(
            c
            for c in engine.containers.list(filters={"label": f"cairn.data_dir={data.resolve()}"})
            if not c.name.endswith("-carrier")
        )

        def pushed() -> bool:
            return sandbox.exec_run(["git", "--git-dir", bare, "rev-parse", "main"]).exit_code == 0

        time.sleep(1)
        assert not pushed()  # held there until a decision arrives
        cairnctl(data, "approve", waiting["id"])
        wait_for(pushed, timeout=60, what="the push, once the judge sent the decision there")
    finally:
        engine.close()
    out = as_json(cairnctl(data, "follow", task_id, "--json", timeout=120))
    assert out["state"] == "succeeded", out
    assert "pushed" in stdout_of(data)
    shown = as_json(cairnctl(data, "approvals", "--all", "--json"))["approvals"]
    assert [(a["rule"], a["state"]) for a in shown] == [("git-push", "approved")], shown


def test_the_apps_event_watch_listens_to_a_remote_default_host(own_task, own_host):
    """The window's sandbox watch on a data folder whose default host is the remote one: it
    says why while the host's engine does not answer, connects through the SSH bridge when it
    does, and hears a sandbox there die, which settles its run."""
    data, task_id, _ = own_task
    cairnctl(data, "config", "set", "defaults.host", "far")
    cairn = Cairn(data)
    states: list[str | None] = []
    deaths: list[SandboxEvent] = []
    address = events_address(cairn)
    assert callable(address)  # the bridge, asked at each connection
    stream = SandboxEventStream(
        data,
        on_event=lambda e: deaths.append(e) if e.action == "die" else None,
        on_connection=states.append,
        base_url=address,
        reconnect_delay=0.2,
    )
    own_host.stop_engine()
    try:
        stream.start()
        wait_for(lambda: states, timeout=60, what="the stream to say it is down")
        assert states[0] and states[0].startswith("sandbox host far cannot be reached"), states
    finally:
        own_host.start_engine()
    try:
        assert stream.connected.wait(60), states
        assert states[-1] is None, states
        start_detached(data, task_id, "sleep 60")
        wait_for(
            lambda: cairn.runs.latest(task_id).state == RunState.RUNNING.value,
            timeout=90,
            what="the run to be running",
        )
        engine = own_host.engine()
        sandbox = next(
            c
            for c in engine.containers.list(filters={"label": f"cairn.data_dir={data.resolve()}"})
            if not c.name.endswith("-carrier")
        )
        sandbox.kill()
        engine.close()
        wait_for(lambda: deaths, timeout=10, what="the sandbox's die event, from the remote host")
        settled = settle_workspace(cairn, deaths[-1].workspace_id)
        assert list(settled.runs.values()) == [RunState.INTERRUPTED.value], settled
    finally:
        stream.stop()
        cairn.close()


def test_a_cleanup_removes_an_archived_tasks_sandbox_and_volumes_there_and_it_runs_again(
    own_task, own_host
):
    data, task_id, ws = own_task
    run_and_stop(data, task_id)
    cairnctl(data, "archive", task_id, "--json", timeout=120)
    engine = own_host.engine()
    try:
        plan = as_json(cairnctl(data, "housekeeping", "--json", timeout=120))["plan"]
        items = [i for i in plan["items"] if i["kind"] == "sandbox_container"]
        assert [i["host"] for i in items] == ["far"], plan
        assert "with its carrier and volumes there" in items[0]["description"], items
        cleaned = as_json(cairnctl(data, "housekeeping", "--yes", "--json", timeout=120))
        assert not cleaned["result"]["skipped"], cleaned
        assert labelled(engine, data) == ([], [])
        # Un-archived, it runs again: new volumes filled from the local snapshot.
        cairnctl(data, "unarchive", task_id, "--json", timeout=120)
        done = as_json(cairnctl(data, "run", task_id, "--json", "--step", "cat x.txt"))
        assert done["state"] == "succeeded", done
        assert "x" in stdout_of_last(data)
        assert (ws / "x.txt").read_text() == "x\n"
    finally:
        engine.close()


def stdout_of_last(data: Path) -> str:
    runs = sorted(data.glob("runs/*/*/stdout"), key=lambda p: p.stat().st_mtime)
    return runs[-1].read_text() if runs else ""
