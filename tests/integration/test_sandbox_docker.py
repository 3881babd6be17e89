"""The Docker sandbox backend against a real engine and the locally built Debian image.

Proves the sandbox defaults (non-root, read-only root, no network unless asked, limits), that a
detached run outlives the Python objects that started it, that attach tells Gone/Mismatch/Attached
apart, and that an exec's secret never reaches Docker's stored container config.
"""

from __future__ import annotations

import fcntl
import gc
import json
import os
import re
import socket
import struct
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from core.errors import Conflict
from core.sandbox.base import (
    DEFAULT_IMAGE,
    Attached,
    ExecTimeout,
    Gone,
    ImageMissing,
    Limits,
    Mismatch,
    SandboxError,
    SandboxSpec,
    SandboxUnavailable,
    SessionState,
    UnsupportedNetwork,
    default_sandbox_user,
)
from core.sandbox.docker import DockerBackend
from core.sandboxes import backend_for_host
from tests.support import no_limits_reason, on_podman, stored_container_files

REPO_ROOT = Path(__file__).resolve().parents[2]
BUSYBOX_IMAGE = "cairn-test-busybox:1"
TEST_LABEL = "test.cairn.suite"
# One value per test process: two suites running at once never clean up each other's containers.
TEST_LABEL_VALUE = f"sandbox-docker-{uuid.uuid4().hex[:12]}"
LABEL_SELECTOR = f"{TEST_LABEL}={TEST_LABEL_VALUE}"


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def test_images(docker_client) -> None:
    """The Debian sandbox image and the busybox one, built (offline, cached by tag) when missing."""
    import docker.errors

    missing = []
    for image in (DEFAULT_IMAGE, BUSYBOX_IMAGE):
        try:
            docker_client.images.get(image)
        except docker.errors.ImageNotFound:
            missing.append(image)
    if missing:
        build = subprocess.run(
            ["bash", str(REPO_ROOT / "tests/images/build.sh")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if build.returncode != 0:
            pytest.fail(
                f"tests/images/build.sh could not build {missing}:\n{build.stdout}\n{build.stderr}"
            )


@pytest.fixture(scope="module", autouse=True)
def _remove_leftover_test_containers():
    """Label-filtered teardown for the whole module, in case a test died between create and cleanup."""
    yield
    if _docker_reachable():
        _remove_labelled(LABEL_SELECTOR)


def _docker_reachable() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
        return True
    except Exception:
        return False


def _remove_labelled(selector: str) -> None:
    import docker

    client = docker.from_env()
    try:
        for c in client.containers.list(all=True, filters={"label": selector}):
            c.remove(force=True)
    finally:
        client.close()


@pytest.fixture
def backend(docker_client, test_images, tmp_path, sandbox_host):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    b = backend_for_host(sandbox_host, data_dir)
    yield b
    for c in docker_client.containers.list(
        all=True, filters={"label": [LABEL_SELECTOR, f"cairn.data_dir={b.data_dir}"]}
    ):
        c.remove(force=True)
    b.close()


@pytest.fixture
def make_spec(tmp_path):
    def make(**overrides) -> SandboxSpec:
        workspace = tmp_path / "workspace"
        workspace.mkdir(exist_ok=True)
        values = dict(
            workspace_id="ws_test",
            session_id=f"ses_{uuid.uuid4().hex[:12]}",
            snapshot_id="snap_test",
            workspace_root=workspace,
            home_dir=tmp_path / "home",
            runs_dir=tmp_path / "runs",
            labels={TEST_LABEL: TEST_LABEL_VALUE},
            limits=Limits(pids=256, memory_bytes=512 * 1024**2, cpus=1.0),
        )
        values.update(overrides)
        return SandboxSpec(**values)

    return make


@pytest.fixture
def sandbox(backend, make_spec):
    spec = make_spec()
    state, live = backend.create(spec)
    return spec, state, live


def sh(live, script: str, **kw):
    return live.exec(["sh", "-c", script], **kw)


def host_address(docker_client) -> str:
    """An address of the host a sandbox might try: Docker's bridge gateway, or (rootless Podman
    has no bridge on the host) the host's address on its default route."""
    if not on_podman(docker_client):
        return bridge_gateway(docker_client)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route
        return probe.getsockname()[0]
    finally:
        probe.close()


def bridge_gateway(docker_client) -> str:
    """The host's address on the default Docker bridge (docker0), never an outside address."""
    attrs = docker_client.networks.get("bridge").attrs
    for config in attrs["IPAM"]["Config"] or []:
        if config.get("Gateway") and ":" not in config["Gateway"]:
            return config["Gateway"]
    name = (attrs.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(
            probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15])
        )  # SIOCGIFADDR
    finally:
        probe.close()
    return socket.inet_ntoa(packed[20:24])


class OneShotServer:
    """A TCP server on one address that records whether anybody connected."""

    def __init__(self, host: str):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.host, self.port = self.sock.getsockname()
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(100))
                    conn.sendall(b"pong")
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


CONNECT_SCRIPT = (
    "import socket, sys\n"
    "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)\n"
    "s.sendall(b'ping'); print(s.recv(10).decode())\n"
)


# --- hardening --------------------------------------------------------------------------------


pytestmark = pytest.mark.docker


def test_sandbox_user_is_not_root_even_when_cairn_is_root(sandbox):
    spec, _, live = sandbox
    uid = live.exec(["id", "-u"]).stdout.strip()
    assert uid != "0"
    assert int(uid) == spec.user[0] == default_sandbox_user()[0]
    if os.geteuid() == 0:
        assert spec.user == (1000, 1000)
    else:
        assert spec.user == (os.getuid(), os.getgid())


def test_container_config_is_hardened(sandbox, docker_client):
    spec, state, live = sandbox
    attrs = docker_client.api.inspect_container(state.container_id)
    host = attrs["HostConfig"]
    # Podman lists every capability it dropped; /proc/self/status below shows none is left.
    assert host["CapDrop"] == ["ALL"] or (on_podman(docker_client) and host["CapDrop"])
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["ReadonlyRootfs"] is True
    assert host["Init"] is True
    assert host["NetworkMode"] == "none"
    if no_limits_reason(docker_client) is None:
        assert host["PidsLimit"] == 256
        assert host["Memory"] == 512 * 1024**2
        assert host["NanoCpus"] == 1_000_000_000
    # Podman adds a tmpfs at /var/tmp to every read-only container: memory, gone with it.
    extra = {"/var/tmp"} if on_podman(docker_client) else set()
    assert set(host["Tmpfs"]) == {"/tmp", "/run"} | extra
    assert attrs["Image"] == state.image_digest and state.image_digest.startswith("sha256:")
    if not on_podman(docker_client):  # Podman names the image it was made from by its tag
        assert attrs["Config"]["Image"] == state.image_digest  # made from the id, not the tag
    assert attrs["Name"] == f"/cairn-{spec.session_id}"
    labels = attrs["Config"]["Labels"]
    assert labels["cairn.managed"] == "1"
    assert labels["cairn.workspace"] == spec.workspace_id
    assert labels["cairn.session"] == spec.session_id
    assert labels["cairn.snapshot"] == spec.snapshot_id
    assert labels["cairn.generation"] == "1"
    assert labels["cairn.data_dir"] == live.backend.data_dir
    status = live.exec(["cat", "/proc/self/status"]).stdout
    assert re.search(r"^CapEff:\s+0+$", status, re.M)
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M)


def test_root_filesystem_is_read_only(sandbox):
    _, _, live = sandbox
    for path in ("/x", "/etc/x", "/usr/x", "/usr/bin/x"):
        result = sh(live, f"echo no > {path}")
        assert result.exit_code != 0, path
        assert "Read-only file system" in result.stderr, result.stderr


def test_workspace_and_home_are_writable_and_land_on_the_host(sandbox):
    spec, _, live = sandbox
    result = sh(
        live, 'echo "from the sandbox" > /workspace/x && echo "home file" > "$HOME/x" && echo $HOME'
    )
    assert result.ok, result.stderr
    assert result.stdout.strip() == "/home/agent"
    assert (spec.workspace_root / "x").read_text() == "from the sandbox\n"
    assert (spec.home_dir / "x").read_text() == "home file\n"
    assert (spec.workspace_root / "x").stat().st_uid == spec.user[0]


def test_tmp_is_a_writable_tmpfs(sandbox):
    _, _, live = sandbox
    assert sh(live, "echo t > /tmp/x && cat /tmp/x").stdout == "t\n"
    mounts = live.exec(["cat", "/proc/mounts"]).stdout
    assert re.search(r"^tmpfs /tmp tmpfs rw,nosuid,nodev", mounts, re.M), mounts


def test_host_files_are_not_visible(sandbox):
    _, _, live = sandbox
    name = f"cairn-marker-{uuid.uuid4().hex}"
    markers = [Path("/tmp") / name]
    if os.access("/root", os.W_OK):
        markers.append(Path("/root") / name)
    try:
        for marker in markers:
            marker.write_text("host only")
        for marker in markers:
            assert sh(live, f"test -e {marker}").exit_code == 1, marker
        assert sh(live, f"find / -xdev -name {name} 2>/dev/null").stdout == ""
    finally:
        for marker in markers:
            marker.unlink(missing_ok=True)


# --- network ----------------------------------------------------------------------------------


def test_network_none_has_only_loopback_and_cannot_reach_the_host(sandbox, docker_client):
    _, _, live = sandbox
    dev = live.exec(["cat", "/proc/net/dev"]).stdout.splitlines()[2:]
    assert [line.split(":")[0].strip() for line in dev] == ["lo"]
    server = OneShotServer(host_address(docker_client))
    try:
        result = live.exec(
            ["python3", "-c", CONNECT_SCRIPT, server.host, str(server.port)], timeout=30
        )
        assert result.exit_code != 0
        assert "unreachable" in result.stderr.lower() or "timed out" in result.stderr.lower(), (
            result.stderr
        )
        assert server.received == []
    finally:
        server.close()


def test_network_open_reaches_a_server_on_the_bridge(backend, make_spec, docker_client):
    if on_podman(docker_client):
        with pytest.raises(UnsupportedNetwork, match="no open network"):
            backend.create(make_spec(network="open"))
        return
    _, live = backend.create(make_spec(network="open"))
    server = OneShotServer(bridge_gateway(docker_client))
    try:
        result = live.exec(
            ["python3", "-c", CONNECT_SCRIPT, server.host, str(server.port)], timeout=30
        )
        assert result.ok, result.stderr
        assert result.stdout.strip() == "pong"
        assert server.received == [b"ping"]
    finally:
        server.close()


def test_allowlist_mode_has_no_network_and_mounts_the_egress_folder_read_only(
    backend, make_spec, tmp_path
):
    egress = tmp_path / "egress"
    egress.mkdir()
    (egress / "note").write_text("proxy socket goes here")
    _, live = backend.create(make_spec(network="allowlist", egress_socket_dir=egress))
    dev = live.exec(["cat", "/proc/net/dev"]).stdout.splitlines()[2:]
    assert [line.split(":")[0].strip() for line in dev] == ["lo"]
    assert live.exec(["cat", "/cairn/egress/note"]).stdout == "proxy socket goes here"
    assert sh(live, "echo x > /cairn/egress/other").exit_code != 0


# --- limits -----------------------------------------------------------------------------------


def _cgroup_value(live, v1: str, v2: str) -> str:
    return sh(live, f"cat {v1} 2>/dev/null || cat {v2}").stdout.strip()


def skip_without_limits(docker_client) -> None:
    reason = no_limits_reason(docker_client)
    if reason:
        pytest.skip(reason)


def test_pid_limit_stops_a_fork_bomb_and_the_sandbox_stays_usable(
    backend, make_spec, docker_client
):
    skip_without_limits(docker_client)
    _, live = backend.create(
        make_spec(limits=Limits(pids=64, memory_bytes=256 * 1024**2, cpus=1.0))
    )
    assert _cgroup_value(live, "/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max") == "64"
    bomb = live.exec(
        [
            "sh",
            "-c",
            "i=0; while [ $i -lt 500 ]; do sleep 4 >/dev/null 2>&1 & i=$((i+1)); done; echo spawned all",
        ],
        timeout=60,
    )
    assert "spawned all" not in bomb.stdout
    assert re.search(r"fork|Resource temporarily unavailable", bomb.stderr, re.I), bomb.stderr
    # Once the bomb's sleeps end, the sandbox takes commands again and its process count drops.
    pids_current = "/sys/fs/cgroup/pids/pids.current"
    if live.exec(["test", "-e", pids_current], timeout=10).exit_code != 0:
        pids_current = "/sys/fs/cgroup/pids.current"
    deadline = time.monotonic() + 30
    while True:
        try:
            result = live.exec(["cat", pids_current], timeout=10)
            if result.ok and int(result.stdout) < 10:
                break
        except Exception:  # an exec may itself be refused while the limit is reached
            pass
        assert time.monotonic() < deadline, "the sandbox did not recover after the fork bomb"
        time.sleep(0.5)
    assert sh(live, "echo alive").stdout == "alive\n"


def test_memory_limit_shows_in_the_cgroup(backend, make_spec, docker_client):
    skip_without_limits(docker_client)
    _, live = backend.create(
        make_spec(limits=Limits(pids=128, memory_bytes=256 * 1024**2, cpus=0.5))
    )
    value = _cgroup_value(
        live, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"
    )
    assert int(value) == 256 * 1024**2


def test_stats_report_memory_and_uptime(sandbox, docker_client):
    skip_without_limits(docker_client)
    _, _, live = sandbox
    stats = live.stats()
    assert stats["running"] is True
    assert stats["memory_bytes"] > 0
    assert stats["memory_limit_bytes"] == 512 * 1024**2
    assert stats["uptime_s"] >= 0
    assert stats["cpu_percent"] is not None and stats["cpu_percent"] >= 0


# --- execs ------------------------------------------------------------------------------------


def test_detached_run_outlives_the_live_session_and_is_found_again(
    backend, make_spec, tmp_path, sandbox_host
):
    spec = make_spec()
    state, live = backend.create(spec)
    stored = json.dumps(state.to_dict())
    process = live.exec_detached(
        ["sh", "-c", "for i in $(seq 1 5); do echo line $i; sleep 0.2; done"], run_id="r_detached"
    )
    pid = process.pid
    assert (spec.runs_dir / "r_detached" / "pid").read_text().strip() == str(pid)
    del live, process
    backend.close()
    gc.collect()

    again = backend_for_host(sandbox_host, tmp_path / "data")
    try:
        result = again.attach(SessionState.from_dict(json.loads(stored)), spec)
        assert isinstance(result, Attached), result
        assert result.live.process_alive(pid, run_id="r_detached")
        assert not result.live.process_alive(pid, run_id="r_other")
        run_dir = spec.runs_dir / "r_detached"
        deadline = time.monotonic() + 15
        while not (run_dir / "exit_code").exists():
            assert time.monotonic() < deadline, "no exit_code after 15 s"
            time.sleep(0.05)
        assert (run_dir / "exit_code").read_text().strip() == "0"
        assert (run_dir / "stdout").read_text() == "".join(f"line {i}\n" for i in range(1, 6))
        assert (run_dir / "stderr").read_text() == ""
        assert not result.live.process_alive(pid)
    finally:
        again.close()


def test_detached_run_reports_a_failing_exit_code_and_can_be_signalled(sandbox):
    spec, _, live = sandbox
    failing = live.exec_detached(["sh", "-c", "echo oops >&2; exit 7"], run_id="r_fail")
    assert failing.wait(10) == 7
    assert failing.stderr_path.read_text() == "oops\n"
    long = live.exec_detached(["sleep", "300"], run_id="r_long")
    assert live.process_alive(long.pid, run_id="r_long")
    assert live.signal_process(long.pid, "KILL")
    deadline = time.monotonic() + 10
    while live.process_alive(long.pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert long.read_exit_code() is None  # killed with its wrapper: interrupted, not finished


def test_exec_stream_yields_output_then_the_exit_code(sandbox):
    _, _, live = sandbox
    stream = live.exec_stream(["sh", "-c", "echo one; sleep 0.2; echo two >&2; exit 5"])
    chunks = list(stream)
    assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"one\n"
    assert b"".join(c.data for c in chunks if c.stream == "stderr") == b"two\n"
    assert stream.exit_code == 5


def test_exec_timeout_kills_the_command(sandbox):
    _, _, live = sandbox
    started = time.monotonic()
    with pytest.raises(ExecTimeout):
        live.exec(["sh", "-c", "sleep 300; echo never"], timeout=1)
    assert time.monotonic() - started < 10
    procs = live.exec(["ps", "-eo", "comm"]).stdout.split()
    assert "sleep" in procs  # PID 1's own sleep
    assert procs.count("sleep") == 1


def test_exec_env_secret_never_reaches_the_stored_container_config(sandbox, docker_client):
    spec, state, live = sandbox
    canary = f"cairn-canary-{uuid.uuid4().hex}"
    result = live.exec(["sh", "-c", 'echo "$CAIRN_CANARY"'], env={"CAIRN_CANARY": canary})
    assert result.stdout.strip() == canary
    detached = live.exec_detached(
        ["sh", "-c", 'test -n "$CAIRN_CANARY"'], env={"CAIRN_CANARY": canary}, run_id="r_canary"
    )
    assert detached.wait(10) == 0
    # Under Podman the values went through a pipe in the runs folder: nothing of it is left.
    assert not list(spec.runs_dir.glob(".env-*"))
    attrs = docker_client.api.inspect_container(state.container_id)
    assert canary not in json.dumps(attrs)
    names = {e.split("=", 1)[0] for e in attrs["Config"]["Env"]}
    if on_podman(docker_client):  # what Podman adds to every container
        names -= {"HOSTNAME", "container", "TERM"}
    assert sorted(names) == ["HOME", "LANG", "PATH"]
    stored = stored_container_files(docker_client, state.container_id)
    if not stored:
        pytest.skip("the engine's stored files are not readable here; the inspect check holds")
    for path in stored:
        assert canary.encode() not in path.read_bytes(), f"canary found in {path}"


# --- attach -----------------------------------------------------------------------------------


def test_attach_after_docker_rm_is_gone(sandbox, docker_client):
    spec, state, live = sandbox
    docker_client.api.remove_container(state.container_id, force=True)
    result = live.backend.attach(state, spec)
    assert isinstance(result, Gone)
    assert state.container_name in result.reason


def test_attach_with_a_different_image_digest_is_a_mismatch_and_deletes_nothing(
    sandbox, docker_client
):
    spec, state, live = sandbox
    other = replace(state, image_digest="sha256:" + "0" * 64)
    result = live.backend.attach(other, spec)
    assert isinstance(result, Mismatch)
    assert any("image differs" in r for r in result.reasons), result.reasons
    assert docker_client.api.inspect_container(state.container_id)["State"]["Running"]


def test_attach_with_a_tighter_network_or_other_mounts_is_a_mismatch(sandbox, make_spec, tmp_path):
    spec, state, live = sandbox
    result = live.backend.attach(state, replace(spec, network="open"))
    assert isinstance(result, Mismatch) and any("network differs" in r for r in result.reasons)
    extra = tmp_path / "tools"
    extra.mkdir()
    result = live.backend.attach(state, replace(spec, extra_mounts=((extra, "/opt/tools"),)))
    assert isinstance(result, Mismatch) and any("/opt/tools" in r for r in result.reasons)


def test_attach_restarts_a_stopped_container(sandbox, docker_client):
    spec, state, live = sandbox
    live.stop()
    assert not docker_client.api.inspect_container(state.container_id)["State"]["Running"]
    result = live.backend.attach(state, spec)
    assert isinstance(result, Attached)
    assert docker_client.api.inspect_container(state.container_id)["State"]["Running"]
    assert result.live.exec(["echo", "back"]).stdout == "back\n"


def test_recreate_after_gone_keeps_the_snapshot_and_bumps_the_generation(sandbox, docker_client):
    spec, state, live = sandbox
    live.destroy()
    assert isinstance(live.backend.attach(state, spec), Gone)
    with pytest.raises(Conflict):
        live.backend.create(replace(spec, snapshot_id="snap_other"), previous=state)
    new_state, new_live = live.backend.create(spec, previous=state)
    assert new_state.snapshot_id == state.snapshot_id
    assert new_state.generation == 2
    labels = docker_client.api.inspect_container(new_state.container_id)["Config"]["Labels"]
    assert labels["cairn.generation"] == "2" and labels["cairn.snapshot"] == spec.snapshot_id
    with pytest.raises(Conflict):
        live.backend.create(spec)  # the name is taken by the live one


def test_list_sessions_is_per_data_folder_and_remove_refuses_foreign_containers(
    sandbox, docker_client, tmp_path
):
    spec, state, live = sandbox
    sessions = live.backend.list_sessions()
    assert [(s.container_id, s.session_id, s.snapshot_id, s.status) for s in sessions] == [
        (state.container_id, spec.session_id, spec.snapshot_id, "running")
    ]
    assert sessions[0].image == state.image_digest
    assert DockerBackend(tmp_path / "other-data").list_sessions() == []
    with pytest.raises(SandboxError):
        DockerBackend(tmp_path / "other-data").remove(state.container_id)
    foreign = docker_client.containers.create(
        BUSYBOX_IMAGE, ["true"], labels={TEST_LABEL: TEST_LABEL_VALUE}
    )
    with pytest.raises(SandboxError, match="not a sandbox of this Cairn data folder"):
        live.backend.remove(foreign.id)
    assert live.backend.remove(state.container_id) is True
    assert live.backend.remove(state.container_id) is False
    assert live.backend.list_sessions() == []


def test_busybox_image_runs_detached_work_too(backend, make_spec):
    spec = make_spec(image=BUSYBOX_IMAGE)
    _, live = backend.create(spec)
    process = live.exec_detached(["sh", "-c", "echo fast; id -u"], run_id="r_busybox")
    assert process.wait(10) == 0
    assert process.stdout_path.read_text() == f"fast\n{spec.user[0]}\n"


# --- host folders -----------------------------------------------------------------------------


@pytest.mark.skipif(
    os.geteuid() != 0, reason="ownership hand-over happens only when Cairn runs as root"
)
def test_root_hands_folders_to_the_sandbox_user_but_not_vault_objects(backend, make_spec, tmp_path):
    workspace = tmp_path / "workspace"
    objects = workspace / ".git" / "objects" / "ab"
    objects.mkdir(parents=True)
    vault_object = tmp_path / "vault-object"
    vault_object.write_text("blob")
    os.link(vault_object, objects / "cdef")
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("print(1)\n")
    spec = make_spec()
    _, live = backend.create(spec)
    uid, gid = spec.user
    assert vault_object.stat().st_uid == 0  # the shared inode stays Cairn's
    assert (objects / "cdef").stat().st_uid == 0
    assert objects.stat().st_uid == uid  # folders are fine to hand over
    assert (workspace / "src" / "main.py").stat().st_uid == uid
    assert spec.home_dir.stat().st_uid == uid and spec.runs_dir.stat().st_uid == uid
    assert sh(live, "echo more >> /workspace/src/main.py && mkdir /workspace/.git/objects/ef").ok
    assert sh(live, "echo x > /workspace/.git/objects/ab/cdef").exit_code != 0


# --- errors -----------------------------------------------------------------------------------


def test_unreachable_daemon_is_sandbox_unavailable_quickly(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    started = time.monotonic()
    with pytest.raises(SandboxUnavailable) as info:
        DockerBackend(tmp_path / "data").check()
    assert time.monotonic() - started < 3
    assert "not running" in str(info.value)
    assert "sudo systemctl start docker" in str(info.value)


def test_missing_image_is_image_missing_naming_it(backend, make_spec):
    with pytest.raises(ImageMissing) as info:
        backend.create(make_spec(image="cairn-no-such-image:0"))
    assert "cairn-no-such-image:0" in str(info.value)
    assert info.value.image == "cairn-no-such-image:0"
    assert backend.list_sessions() == []


def test_default_image_tag_matches_the_recipe_version():
    script = (REPO_ROOT / "resources/sandbox/build-image.sh").read_text()
    version = re.search(r"^RECIPE_VERSION=(\S+)$", script, re.M).group(1)
    assert f"cairn-sandbox:{version}" == DEFAULT_IMAGE


def test_socket_permission_and_missing_docker_have_their_own_fixes(monkeypatch, tmp_path):
    backend = DockerBackend(tmp_path / "data", base_url="unix:///var/run/docker.sock")
    denied = backend._unavailable(ConnectionError(PermissionError(13, "Permission denied")))
    assert str(denied) == (
        "permission denied on /var/run/docker.sock (add yourself to the docker group: "
        "sudo usermod -aG docker $USER, then log in again)"
    )
    monkeypatch.setattr("core.sandbox.docker.os.path.exists", lambda path: False)
    monkeypatch.setattr("core.sandbox.docker.shutil.which", lambda name: None)
    missing = backend._unavailable(
        ConnectionError(FileNotFoundError(2, "No such file or directory"))
    )
    assert str(missing) == "Docker is not installed (install it: sudo apt-get install docker.io)"
