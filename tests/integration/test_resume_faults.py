"""A resume that fails before it launches changes nothing: the next one continues at the step
the last launched attempt reached, and every step runs exactly once. Against a real Docker
engine (and, for the keyring faults, the real Secret Service), driven through `cairnctl`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.models import Run
from tests.integration.test_runs_resume import (
    interrupt_by_removing_container,
    latest_run,
    step_of,
    store_of,
)
from tests.support import REPO, as_json, cairnctl, cairnctl_argv, cairnctl_env, one_error_line
from tests.support import wait_for as _wait_for

pytestmark = pytest.mark.docker

STEPS = [
    "echo s0 >> steps.log",
    "echo s1 >> steps.log",
    "sleep 4 && echo s2 >> steps.log",
    "echo s3 >> steps.log",
]
ALL_STEPS = "s0\ns1\ns2\ns3\n"
HANG_LIMIT_S = 45  # a silent daemon is reported well within this


def start_steps(data: Path, task_id: str, steps: list[str]) -> dict:
    args = ["run", task_id, "--detach", "--json"]
    for s in steps:
        args += ["--step", s]
    return as_json(cairnctl(data, *args))


def interrupted_at_step_2(data: Path, task_id: str, docker_client) -> Run:
    start_steps(data, task_id, STEPS)
    _wait_for(lambda: step_of(data, latest_run(data, task_id)) == 2, what="step 2")
    interrupt_by_removing_container(data, task_id, docker_client)
    run = latest_run(data, task_id)
    assert run.state == "interrupted" and step_of(data, run) == 2
    return run


def unchanged(before: Run, after: Run) -> None:
    """The run as the failed attempt found it: only its note says what happened."""
    assert after.state == "interrupted"
    for name in ("attempt", "output_offset", "stderr_offset", "spec", "workspace_id", "exit_code"):
        assert getattr(after, name) == getattr(before, name), name


def checkpoints_of(data: Path, run_id: str) -> list[str]:
    return [ck.id for ck in store_of(data).list_checkpoints(run_id)]


def resume_succeeds_at_step_2(data: Path, task_id: str, ws: Path, before: Run) -> None:
    res = as_json(cairnctl(data, "resume", task_id, "--json"))
    assert res["state"] == "succeeded", res
    assert "engine: shell continues at step 2" in res["report"]["path"], res["report"]
    assert res["attempt"] == before.attempt + 1
    assert (ws / "steps.log").read_text() == ALL_STEPS  # every step once, in order


# -- the faults ----------------------------------------------------------------------------------


class SilentDaemon:
    """A unix socket that accepts connections and never answers (a hung Docker daemon)."""

    def __init__(self) -> None:
        # Short: unix socket paths are limited to about 100 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="cairn-hang-"))
        self.path = self.dir / "docker.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        self.sock.listen(16)
        self.held: list[socket.socket] = []
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)  # read nothing, answer nothing

    def close(self) -> None:
        self.closed.set()
        self.sock.close()
        for conn in self.held:
            conn.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def silent_daemon() -> Iterator[SilentDaemon]:
    daemon = SilentDaemon()
    yield daemon
    daemon.close()


def failing_resume(data: Path, task_id: str, **env: str) -> tuple[str, float]:
    t0 = time.monotonic()
    proc = cairnctl(
        data, "resume", task_id, check=False, env=cairnctl_env(**env), timeout=HANG_LIMIT_S + 30
    )
    return one_error_line(proc), time.monotonic() - t0


def test_docker_socket_dead(task, docker_client):
    data, task_id, ws = task
    before = interrupted_at_step_2(data, task_id, docker_client)
    cks = checkpoints_of(data, before.id)
    line, _ = failing_resume(
        data, task_id, DOCKER_HOST=f"unix:///nonexistent-{uuid.uuid4().hex[:8]}.sock"
    )
    assert "not running" in line and "nonexistent" in line
    after = latest_run(data, task_id)
    unchanged(before, after)
    assert "not running" in (after.note or "")
    assert checkpoints_of(data, before.id) == cks
    resume_succeeds_at_step_2(data, task_id, ws, before)


def test_docker_socket_that_never_answers(task, docker_client, silent_daemon):
    data, task_id, ws = task
    before = interrupted_at_step_2(data, task_id, docker_client)
    line, took = failing_resume(data, task_id, DOCKER_HOST=f"unix://{silent_daemon.path}")
    assert took < HANG_LIMIT_S, took
    assert "did not answer" in line and str(silent_daemon.path) in line, line
    unchanged(before, latest_run(data, task_id))
    resume_succeeds_at_step_2(data, task_id, ws, before)


def test_sandbox_image_untagged(task, docker_client):
    data, task_id, ws = task
    before = interrupted_at_step_2(data, task_id, docker_client)
    missing = f"cairn-untagged-{uuid.uuid4().hex[:8]}:1"
    line, _ = failing_resume(data, task_id, CAIRN_SANDBOX_IMAGE=missing)
    assert missing in line and "missing" in line
    unchanged(before, latest_run(data, task_id))
    # The same through the setting a person changes.
    cairnctl(data, "config", "set", "defaults.image", missing)
    line, _ = failing_resume(data, task_id)
    assert missing in line
    unchanged(before, latest_run(data, task_id))
    cairnctl(data, "config", "unset", "defaults.image")
    resume_succeeds_at_step_2(data, task_id, ws, before)


@pytest.fixture
def granted(task, secret_service) -> Iterator[tuple[Path, str, Path]]:
    """The task with a secret granted, so each launch reads the keyring."""
    data, task_id, ws = task
    name = f"fault-{uuid.uuid4().hex[:8]}"
    cairnctl(data, "secret", "set", name, input=f"v-{uuid.uuid4().hex}")
    cairnctl(data, "grant", task_id, name, "--env", "TOKEN")
    yield data, task_id, ws
    cairnctl(data, "secret", "rm", name, check=False)


@pytest.mark.keyring
def test_keyring_unavailable(granted, docker_client, tmp_path):
    data, task_id, ws = granted
    before = interrupted_at_step_2(data, task_id, docker_client)
    cks = checkpoints_of(data, before.id)
    line, _ = failing_resume(
        data, task_id, DBUS_SESSION_BUS_ADDRESS=f"unix:path={tmp_path}/no-bus-here"
    )
    assert "keyring" in line
    unchanged(before, latest_run(data, task_id))
    assert checkpoints_of(data, before.id) == cks
    resume_succeeds_at_step_2(data, task_id, ws, before)


LOCK_KEYRING = textwrap.dedent("""
    from contextlib import closing
    import secretstorage

    with closing(secretstorage.dbus_init()) as bus:
        collection = secretstorage.get_default_collection(bus)
        collection.lock()
        assert collection.is_locked()
""")


def resume_with_a_locked_keyring(data: Path, task_id: str, tmp_path: Path) -> str:
    """`cairnctl resume` in a private D-Bus session whose keyring was unlocked and then locked:
    reading a secret needs a prompt that never comes. Neither the keyring the other tests use
    nor a developer's own is touched."""
    for tool in ("dbus-run-session", "gnome-keyring-daemon"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install gnome-keyring dbus-x11)")
    lock = tmp_path / "lock.py"
    lock.write_text(LOCK_KEYRING)
    home, runtime = tmp_path / "keyring-data", tmp_path / "keyring-run"
    home.mkdir()
    runtime.mkdir(mode=0o700)
    env = {
        k: v
        for k, v in cairnctl_env().items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")
    }
    env.update(XDG_DATA_HOME=str(home), XDG_RUNTIME_DIR=str(runtime))
    shell = (
        'echo "" | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1; '
        '"$1" "$2" && shift 2 && exec "$@"'
    )
    proc = subprocess.run(
        ["dbus-run-session", "--", "sh", "-c", shell, "sh", sys.executable, str(lock),
         *cairnctl_argv(data, "resume", task_id)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip
    # The private bus and the prompter it cannot show write to the same stderr: Cairn's own
    # lines are the ones that start with its name.
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("cairnctl")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.keyring
def test_keyring_locked(granted, docker_client, tmp_path):
    data, task_id, ws = granted
    before = interrupted_at_step_2(data, task_id, docker_client)
    line = resume_with_a_locked_keyring(data, task_id, tmp_path)
    assert "keyring is locked" in line, line
    unchanged(before, latest_run(data, task_id))
    resume_succeeds_at_step_2(data, task_id, ws, before)


def test_faults_one_after_another_still_run_every_step_once(task, docker_client, silent_daemon):
    data, task_id, ws = task
    before = interrupted_at_step_2(data, task_id, docker_client)
    for env in (
        {"DOCKER_HOST": "unix:///nonexistent.sock"},
        {"CAIRN_SANDBOX_IMAGE": "cairn-untagged:0"},
        {"DOCKER_HOST": f"unix://{silent_daemon.path}"},
    ):
        failing_resume(data, task_id, **env)
        unchanged(before, latest_run(data, task_id))
    resume_succeeds_at_step_2(data, task_id, ws, before)


def test_a_failed_resume_is_parked_with_its_reason_and_no_process_started(task, docker_client):
    data, task_id, _ = task
    before = interrupted_at_step_2(data, task_id, docker_client)
    failing_resume(data, task_id, CAIRN_SANDBOX_IMAGE="cairn-untagged:0")
    after = latest_run(data, task_id)
    assert after.note and after.note.startswith("resume failed: ") and "\n" not in after.note
    assert "cairn-untagged:0" in after.note
    # The next attempt's folder holds no process: nothing was launched.
    nxt = data / "runs" / before.workspace_id / f"{before.id}.{before.attempt + 1}"
    assert not (nxt / "pid").exists()
    assert os.path.isdir(data / "runs" / before.workspace_id / before.exec_id)
