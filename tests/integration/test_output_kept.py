"""A run with a granted secret keeps all of its output: a line printed just before the sandbox is
killed, or before the user stops the run, is stored (with the secret hidden), and the live output
does not lag behind what the run printed. Real Docker and the real Secret Service."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from core.app import Cairn
from core.models import Run
from tests.support import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.keyring]


@pytest.fixture
def granted(task, secret_service):
    """(data folder, task id, secret value): a long secret granted to the task as $TOKEN."""
    data, task_id, _ = task
    name = f"kept-{uuid.uuid4().hex[:8]}"
    # Long, as real keys are: the filter once held back this many bytes, across line ends.
    value = f"KEPT-{uuid.uuid4().hex}{uuid.uuid4().hex}"
    with Cairn(data) as cairn:
        cairn.credentials.secrets.set(name, value)
        cairn.credentials.grant(task_id, name, "TOKEN")
    try:
        yield data, task_id, value
    finally:
        with Cairn(data) as cairn:
            cairn.credentials.secrets.delete(name)


def read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def current(cairn: Cairn, run: Run) -> Run:
    return cairn.ctx.store.get_run(run.id)


def test_a_line_printed_before_the_sandbox_is_killed_is_stored(granted, docker_client):
    data, task_id, value = granted
    with Cairn(data) as cairn:
        run = cairn.runs.start(task_id, commands=['echo "the last line token=$TOKEN"', "sleep 300"])
        stdout = cairn.runs.files(current(cairn, run)).stdout
        # Live: the line is in the run's file while the run still goes on.
        wait_for(
            lambda: b"the last line" in read(stdout),
            timeout=60,
            what="the line to reach the run's stdout while it runs",
        )
        ws = cairn.tasks.workspace_of(cairn.tasks.get(task_id))
        record = cairn.ctx.store.session_for(ws.id)
        assert record is not None
        # SIGKILL to every process in the sandbox at once: nothing can be written after this.
        docker_client.containers.get(record.container_name).kill()
        wait_for(
            lambda: cairn.runs.settle(current(cairn, run)) == "interrupted",
            timeout=60,
            what="the run to be interrupted",
        )
        shown = cairn.runs.output(run.id)
    assert "the last line token=[secret:TOKEN]" in shown
    assert value not in shown
    assert value.encode() not in read(stdout)


def test_a_stopped_run_keeps_everything_it_printed_to_the_last_byte(granted):
    data, task_id, value = granted
    with Cairn(data) as cairn:
        run = cairn.runs.start(
            task_id,
            commands=[
                'echo "before the stop $TOKEN"',
                'printf "half a line, then %s" "$TOKEN" >&2',
                # The unfinished line is the last thing the run prints before the stop.
                "printf 'no line end yet'; sleep 300",
            ],
        )
        stdout = cairn.runs.files(current(cairn, run)).stdout
        wait_for(
            lambda: read(stdout).endswith(b"no line end yet"),
            timeout=60,
            what="the unfinished line to reach the run's stdout",
        )
        cairn.runs.stop(task_id)
        run = current(cairn, run)
        # TERM ended it (no KILL after the grace period), and the end was recorded as it was.
        assert (run.state, run.exit_code) == ("cancelled", 143), run
        out = cairn.runs.output(run.id, "stdout")
        err = cairn.runs.output(run.id, "stderr")
    assert "before the stop [secret:TOKEN]\n" in out
    assert out.endswith("no line end yet")
    assert err.endswith("half a line, then [secret:TOKEN]")
    assert value not in out + err
