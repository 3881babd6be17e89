"""A sandbox removed while its run is in flight is noticed through Docker's event stream: the
run is interrupted within seconds, in words, with no Docker client text, and can be resumed."""

from __future__ import annotations

import contextlib
import threading
import time

from core.app import Cairn
from core.models import RunState
from core.sandbox.events import (
    LABEL_DATA_DIR,
    LABEL_MANAGED,
    LABEL_WORKSPACE,
    SandboxEvent,
    SandboxEventStream,
)
from gui.errors import describe_text
from gui.sandbox_watch import settle_workspace
from tests.support import as_json, cairnctl, wait_for

RAW_DOCKER = ("docker.errors", "404 Client Error", "NotFound", "APIError", "http+docker")


def test_a_container_removed_mid_run_interrupts_the_run_through_the_events(task, docker_client):
    data, task_id, _root = task
    run = as_json(
        cairnctl(data, "run", task_id, "--detach", "--json", "--step", "sleep 20", "--step", "true")
    )
    (session,) = as_json(cairnctl(data, "status", "--json"))["sessions"]
    cairn = Cairn(data)
    events: list[SandboxEvent] = []
    destroyed: list[SandboxEvent] = []
    heard = threading.Event()

    def on_event(event: SandboxEvent) -> None:
        events.append(event)
        if event.action == "destroy":
            destroyed.append(event)
            heard.set()

    stream = SandboxEventStream(data, on_event=on_event)
    stream.start()
    try:
        assert stream.connected.wait(10), "the event stream did not connect"
        wait_for(
            lambda: cairn.runs.latest(task_id).state == RunState.RUNNING.value,
            timeout=60,
            what="the run to be running",
        )
        removed_at = time.monotonic()
        docker_client.containers.get(session["container"]).remove(force=True)
        assert heard.wait(5), "no destroy event within 5 s"
        # Settled from the destroy event heard, not from whatever event came last.
        settled = settle_workspace(cairn, destroyed[0].workspace_id)
        elapsed = time.monotonic() - removed_at
        assert elapsed < 5, f"settled after {elapsed:.1f} s"
        assert not settled.problems
        ended = cairn.runs.latest(task_id)
        seen = f"{settled}; the run {ended.state} ({ended.note}); events {events}"
        assert settled.runs == {run["run_id"]: RunState.INTERRUPTED.value}, seen
        assert ended.state == RunState.INTERRUPTED.value, seen
        assert {e.workspace_id for e in events} == {session["workspace_id"]}
        for text in (ended.note or "", describe_text(ended.note or "")):
            assert not any(raw in text for raw in RAW_DOCKER), text
    finally:
        stream.stop()
        cairn.close()
    # The way out: Resume makes a new sandbox and the run finishes.
    resumed = as_json(cairnctl(data, "resume", task_id, "--detach", "--json"))
    assert resumed["run_id"] == run["run_id"]
    assert resumed["state"] in (RunState.RUNNING.value, RunState.SUCCEEDED.value), resumed


def test_the_stream_hears_its_own_data_folders_sandboxes_only(
    tmp_path, docker_client, sandbox_image
):
    """Another data folder's sandboxes (another Cairn, another test) stay unheard, whatever the
    engine makes of a filter of two labels."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    heard: list[SandboxEvent] = []
    stream = SandboxEventStream(ours, on_event=heard.append)
    stream.start()
    made = []
    try:
        assert stream.connected.wait(10), "the event stream did not connect"
        for folder, ws in ((theirs, "ws_theirs"), (ours, "ws_ours"), (theirs, "ws_theirs2")):
            labels = {
                LABEL_MANAGED: "1",
                LABEL_DATA_DIR: str(folder.resolve()),
                LABEL_WORKSPACE: ws,
            }
            made.append(
                docker_client.containers.run(
                    sandbox_image, ["true"], labels=labels, detach=True, network_mode="none"
                )
            )
        for container in made:
            container.wait(timeout=30)
            container.remove(force=True)
        wait_for(lambda: any(e.action == "destroy" for e in heard), timeout=10, what="our destroy")
        time.sleep(1)  # time for the others' events, were they to come
    finally:
        stream.stop()
        for container in made:
            with contextlib.suppress(Exception):
                container.remove(force=True)
    assert {e.workspace_id for e in heard} == {"ws_ours"}, heard


def test_the_stream_reconnects_and_says_when_it_is_down(tmp_path):
    states: list[str | None] = []
    stream = SandboxEventStream(
        tmp_path,
        on_event=lambda _e: None,
        on_connection=states.append,
        base_url=f"unix://{tmp_path}/no-docker.sock",
        reconnect_delay=0.05,
    )
    stream.start()
    try:
        wait_for(lambda: states, timeout=10, what="the stream to report")
        assert states[0] == "Docker is not running"
        time.sleep(0.3)
        assert stream.running  # it keeps trying
        assert states == ["Docker is not running"]  # said once, not at every attempt
    finally:
        stream.stop()
    assert not stream.running
