"""The host backend: the sandbox interface over plain processes, never chosen silently, marked unsafe.

Also covers the interface's value objects (spec validation, session state round trip) that both
backends share.
"""

from __future__ import annotations

import gc
import json
import os
import time
from dataclasses import replace

import pytest

from core.errors import Conflict
from core.sandbox.base import (
    Attached,
    ExecTimeout,
    Gone,
    Mismatch,
    SandboxSpec,
    SessionState,
    UnsafeBackendRefused,
    UnsupportedNetwork,
)
from core.sandbox.host import HostBackend


@pytest.fixture
def spec(tmp_path) -> SandboxSpec:
    (tmp_path / "workspace").mkdir()
    return SandboxSpec(
        workspace_id="ws_host",
        session_id="ses_host",
        snapshot_id="snap_host",
        workspace_root=tmp_path / "workspace",
        home_dir=tmp_path / "home",
        runs_dir=tmp_path / "runs",
        network="open",
    )


@pytest.fixture
def backend(tmp_path) -> HostBackend:
    return HostBackend(tmp_path / "data", allow_unsafe=True)


def test_refused_without_allow_unsafe(tmp_path):
    with pytest.raises(UnsafeBackendRefused, match="without any isolation"):
        HostBackend(tmp_path)


def test_marked_unsafe_and_not_isolated(backend):
    assert HostBackend.unsafe is True
    assert "UNSAFE" in HostBackend.UNSAFE_LABEL
    caps = backend.capabilities
    assert caps.isolated is False
    assert caps.network_modes == frozenset({"open"})
    assert caps.reattach and caps.per_exec_env


@pytest.mark.parametrize("network", ["none", "allowlist"])
def test_cannot_promise_a_closed_network(backend, spec, network):
    with pytest.raises(UnsupportedNetwork):
        backend.create(replace(spec, network=network))


def test_detached_process_writes_its_run_files_and_survives_the_session(backend, spec):
    state, live = backend.create(spec)
    stored = json.dumps(state.to_dict())
    process = live.exec_detached(
        ["sh", "-c", 'for i in 1 2 3; do echo "line $i"; sleep 0.1; done; echo "$HOME $PWD" >&2'],
        run_id="r_host",
    )
    pid = process.pid
    assert (spec.runs_dir / "r_host" / "pid").read_text().strip() == str(pid)
    assert os.getpgid(pid) == pid  # its own process group: closing Cairn does not signal it
    del live, process
    gc.collect()

    result = HostBackend(allow_unsafe=True).attach(SessionState.from_dict(json.loads(stored)), spec)
    assert isinstance(result, Attached)
    run_dir = spec.runs_dir / "r_host"
    deadline = time.monotonic() + 10
    while not (run_dir / "exit_code").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert (run_dir / "exit_code").read_text().strip() == "0"
    assert (run_dir / "stdout").read_text() == "line 1\nline 2\nline 3\n"
    assert (run_dir / "stderr").read_text() == f"{spec.home_dir} {spec.workspace_root}\n"
    deadline = time.monotonic() + 5
    while result.live.process_alive(pid):
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_process_alive_checks_the_run_and_signal_stops_the_group(backend, spec):
    _, live = backend.create(spec)
    process = live.exec_detached(["sh", "-c", "sleep 60 & wait"], run_id="r_long")
    assert live.process_alive(process.pid, run_id="r_long")
    assert not live.process_alive(process.pid, run_id="r_other")
    assert live.signal_process(process.pid, "TERM")
    deadline = time.monotonic() + 5
    while live.process_alive(process.pid):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # The wrapper outlives the group's TERM and records how the command ended.
    deadline = time.monotonic() + 5
    while process.read_exit_code() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert process.read_exit_code() == 143


def test_exec_sees_its_env_and_not_cairns_own(backend, spec, monkeypatch):
    monkeypatch.setenv("CAIRN_PARENT_TOKEN", "parent-secret")
    _, live = backend.create(spec)
    result = live.exec(
        ["sh", "-c", 'echo "$CANARY|${CAIRN_PARENT_TOKEN:-absent}|$HOME"'], env={"CANARY": "c-123"}
    )
    assert result.ok
    assert result.stdout.strip() == f"c-123|absent|{spec.home_dir}"
    assert "c-123" not in json.dumps(live.state.to_dict())


def test_sandbox_paths_map_to_the_host_folders(backend, spec):
    _, live = backend.create(spec)
    result = live.exec(["sh", "-c", "echo hi > x && pwd"], cwd="/workspace")
    assert result.stdout.strip() == str(spec.workspace_root)
    assert (spec.workspace_root / "x").read_text() == "hi\n"
    # Whole arguments naming a sandbox path are translated; text inside a script is not.
    assert live.exec(["cat", "/workspace/x"]).stdout == "hi\n"
    assert live.host_path("/cairn/runs/r_1/stdout") == str(spec.runs_dir / "r_1" / "stdout")


def test_exec_timeout_kills_the_process_group(backend, spec, tmp_path):
    _, live = backend.create(spec)
    marker = tmp_path / "late"
    with pytest.raises(ExecTimeout):
        live.exec(["sh", "-c", f"(sleep 1; touch {marker}) & sleep 30"], timeout=0.3)
    time.sleep(1.5)
    assert not marker.exists()


def test_exec_stream_gives_chunks_then_exit_code(backend, spec):
    _, live = backend.create(spec)
    stream = live.exec_stream(["sh", "-c", "echo a; echo b >&2; exit 3"])
    chunks = list(stream)
    assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"a\n"
    assert b"".join(c.data for c in chunks if c.stream == "stderr") == b"b\n"
    assert stream.exit_code == 3


def test_attach_is_gone_without_the_workspace_and_mismatched_on_another_snapshot(backend, spec):
    state, _ = backend.create(spec)
    assert isinstance(backend.attach(state, replace(spec, snapshot_id="snap_other")), Mismatch)
    spec.workspace_root.rmdir()
    assert isinstance(backend.attach(state, spec), Gone)


def test_recreate_must_carry_the_same_snapshot(backend, spec):
    state, _ = backend.create(spec)
    with pytest.raises(Conflict):
        backend.create(replace(spec, snapshot_id="snap_new"), previous=state)
    again, _ = backend.create(spec, previous=state)
    assert again.generation == state.generation + 1 and again.snapshot_id == spec.snapshot_id


# --- shared value objects ---------------------------------------------------------------------


def test_session_state_round_trips_through_json_and_holds_no_environment(backend, spec):
    state, _ = backend.create(spec)
    data = json.loads(json.dumps(state.to_dict()))
    assert set(data) == {
        "backend",
        "container_id",
        "container_name",
        "image_digest",
        "mounts",
        "generation",
        "snapshot_id",
    }
    assert SessionState.from_dict(data) == state


def test_spec_refuses_bad_values(tmp_path):
    base = dict(
        workspace_id="ws_1",
        session_id="ses_1",
        snapshot_id=None,
        workspace_root=tmp_path,
        home_dir=tmp_path / "h",
        runs_dir=tmp_path / "r",
    )
    with pytest.raises(ValueError, match="network"):
        SandboxSpec(**base, network="wide")
    with pytest.raises(ValueError, match="overlaps"):
        SandboxSpec(**base, extra_mounts=((tmp_path, "/workspace/tools"),))
    with pytest.raises(ValueError, match="root"):
        SandboxSpec(**base, uid=0, gid=0)
    with pytest.raises(ValueError, match="identifier"):
        SandboxSpec(**{**base, "session_id": "../x"})
    spec = SandboxSpec(**base, extra_mounts=((tmp_path, "/opt/engine"),))
    assert [(m.target, m.read_only) for m in spec.mounts()] == [
        ("/workspace", False),
        ("/home/agent", False),
        ("/cairn/runs", False),
        ("/opt/engine", True),
    ]
