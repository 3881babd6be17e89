"""The `allowlist` network policy end to end: a detached egress proxy on the host, and a sandbox
with no network that reaches exactly the allowlisted host:port pairs through the forwarder.

Two HTTP servers listen on the host's loopback: `allowed` (in the allowlist) and `other` (not).
Tests marked `docker` run the forwarder as uid 1000 in a container with network none, a read-only
root and all capabilities dropped; the others speak the socket protocol from the host directly.
The container image is built here from the host's own Python (nothing is pulled); set
CAIRN_EGRESS_TEST_IMAGE to run against another image that has python3 (e.g. the sandbox image).
"""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.sandbox import egress
from core.sandbox.egress import SANDBOX_EGRESS_DIR, SANDBOX_SOCKET, EgressPaths

REPO_ROOT = Path(__file__).resolve().parents[2]
FORWARDER_IN_SANDBOX = "/cairn/bin/egress-forward.py"
SANDBOX_UID = 1000
PROXY_PORT = 3128
FORWARD_ALLOWED_PORT = 8001
FORWARD_OTHER_PORT = 8002
WAIT_S = 10.0


# --- Host side: two HTTP servers on loopback ----------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so a tunnel can carry several requests

    def do_GET(self) -> None:
        body = f"{self.server.name} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@dataclass
class Servers:
    allowed: int
    other: int

    @property
    def allowed_pair(self) -> str:
        return f"127.0.0.1:{self.allowed}"

    @property
    def other_pair(self) -> str:
        return f"127.0.0.1:{self.other}"


@pytest.fixture(scope="module")
def servers():
    started = []
    for name in ("allowed", "other"):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.name = name
        threading.Thread(target=server.serve_forever, name=f"http-{name}", daemon=True).start()
        started.append(server)
    yield Servers(allowed=started[0].server_port, other=started[1].server_port)
    for server in started:
        server.shutdown()
        server.server_close()


@dataclass
class Session:
    paths: EgressPaths
    log: Path
    proxy_pid: int | None = None

    def connections(self) -> list[dict]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        return [r for r in map(json.loads, lines) if r["event"] == "connection"]

    def wait_for_connection(self, carried_data: bool = False, **match) -> dict:
        """The first connection log line with these fields (lines are written when it closes);
        with carried_data, one that moved bytes both ways (not a readiness probe)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            for record in self.connections():
                if all(record.get(key) == value for key, value in match.items()) and (
                    not carried_data or (record["bytes_up"] > 0 and record["bytes_down"] > 0)
                ):
                    return record
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line matching {match}; log: {self.connections()}")
            time.sleep(0.05)


@pytest.fixture
def session(tmp_path: Path):
    name = f"egress-test-{uuid.uuid4().hex[:8]}"
    state = Session(
        paths=EgressPaths.for_session(tmp_path / "egress", name), log=tmp_path / "connections.jsonl"
    )
    yield state
    egress.stop(state.paths.socket)


def start_from_a_process_that_exits(session: Session, allow: list[str]) -> tuple[int, int]:
    """Start the proxy with start_detached from a separate Python process that then exits.
    Returns (that process's pid, the proxy's pid)."""
    code = (
        "import sys\n"
        "from core.sandbox.egress import start_detached\n"
        "print(start_detached(sys.argv[1], sys.argv[3:], sys.argv[2], session='test'))\n"
    )
    starter = subprocess.Popen(
        [sys.executable, "-c", code, str(session.paths.socket), str(session.log), *allow],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = starter.communicate(timeout=60)
    assert starter.returncode == 0, err
    session.proxy_pid = int(out.strip())
    return starter.pid, session.proxy_pid


@pytest.fixture
def proxy(session: Session, servers: Servers) -> Session:
    """A detached proxy allowing only the `allowed` server, started by a process that has exited."""
    start_from_a_process_that_exits(session, [servers.allowed_pair])
    return session


class SocketHTTPConnection(http.client.HTTPConnection):
    """http.client over the egress socket: `PROXY` (requests in absolute form, or a CONNECT
    tunnel through set_tunnel) or `FORWARD host:port` (requests in origin form)."""

    def __init__(self, socket_path: Path, header: str):
        super().__init__("egress.invalid", timeout=WAIT_S)
        self.socket_path = socket_path
        self.header = header.encode("ascii") + b"\n"

    def connect(self) -> None:
        self.sock = egress._connect_unix(self.socket_path, WAIT_S)
        self.sock.sendall(self.header)
        if self._tunnel_host:
            self._tunnel()


def get(connection: http.client.HTTPConnection, target: str) -> tuple[int, str]:
    connection.request("GET", target)
    response = connection.getresponse()
    return response.status, response.read().decode()


# --- Host-side tests (no Docker needed) ---------------------------------------------------------


def test_proxy_outlives_the_process_that_started_it(session: Session, servers: Servers) -> None:
    starter_pid, proxy_pid = start_from_a_process_that_exits(session, [servers.allowed_pair])

    assert proxy_pid != starter_pid
    assert egress.running_pid(session.paths.socket) == proxy_pid
    stat_fields = Path(f"/proc/{proxy_pid}/stat").read_text().rsplit(")", 1)[1].split()
    state, parent, session_id = stat_fields[0], int(stat_fields[1]), int(stat_fields[3])
    assert state not in ("Z", "X")
    assert parent != starter_pid and parent != os.getpid()
    assert session_id == proxy_pid  # its own session: no terminal or process group takes it down

    # A fresh process, knowing nothing but the socket path, goes through it. (It connects from the
    # socket's folder: a test folder's path can be longer than AF_UNIX allows.)
    code = (
        "import os, socket, sys\n"
        "os.chdir(os.path.dirname(sys.argv[1]))\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(os.path.basename(sys.argv[1]))\n"
        "s.sendall(b'FORWARD ' + sys.argv[2].encode() + b'\\nGET /fresh HTTP/1.0\\r\\n\\r\\n')\n"
        "data = b''\n"
        "while chunk := s.recv(65536): data += chunk\n"
        "print(data.decode().split('\\r\\n\\r\\n', 1)[1])\n"
    )
    fresh = subprocess.run(
        [sys.executable, "-c", code, str(session.paths.socket), servers.allowed_pair],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.strip() == "allowed /fresh"
    record = session.wait_for_connection(kind="forward", destination=servers.allowed_pair)
    assert record["decision"] == "allowed" and record["session"] == "test"
    assert record["bytes_up"] > 0 and record["bytes_down"] > 0


def test_socket_protocol_allows_only_the_allowlist_and_logs_each_decision(
    proxy: Session, servers: Servers
) -> None:
    socket_path = proxy.paths.socket
    assert get(SocketHTTPConnection(socket_path, f"FORWARD {servers.allowed_pair}"), "/a") == (
        200,
        "allowed /a",
    )
    assert get(SocketHTTPConnection(socket_path, "PROXY"), f"http://{servers.allowed_pair}/b") == (
        200,
        "allowed /b",
    )
    tunnel = SocketHTTPConnection(socket_path, "PROXY")
    tunnel.set_tunnel("127.0.0.1", servers.allowed)
    assert get(tunnel, "/c") == (200, "allowed /c")
    assert get(tunnel, "/d") == (200, "allowed /d")  # one tunnel, several requests
    tunnel.close()

    status, body = get(SocketHTTPConnection(socket_path, "PROXY"), f"http://{servers.other_pair}/x")
    assert status == 403 and "not in allowlist" in body
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        get(SocketHTTPConnection(socket_path, f"FORWARD {servers.other_pair}"), "/y")
    refused_tunnel = SocketHTTPConnection(socket_path, "PROXY")
    refused_tunnel.set_tunnel("127.0.0.1", servers.other)
    with pytest.raises(OSError, match="403"):
        get(refused_tunnel, "/z")

    for kind in ("forward", "http", "connect"):
        allowed = proxy.wait_for_connection(
            kind=kind, destination=servers.allowed_pair, decision="allowed"
        )
        assert allowed["bytes_down"] > 0 and "time" in allowed
        refused = proxy.wait_for_connection(
            kind=kind, destination=servers.other_pair, decision="refused"
        )
        assert (
            refused["reason"] == "not in allowlist"
            and refused["bytes_up"] == refused["bytes_down"] == 0
        )


def test_other_spellings_of_loopback_match_only_what_they_normalise_to(
    proxy: Session, servers: Servers
) -> None:
    socket_path = proxy.paths.socket
    for spelling in ("127.1", "0x7f000001", "2130706433", "[::ffff:127.0.0.1]"):
        # The same address as the allowed entry: allowed, and logged with what it was written as.
        status, body = get(
            SocketHTTPConnection(socket_path, "PROXY"), f"http://{spelling}:{servers.allowed}/"
        )
        assert (status, body) == (200, "allowed /"), spelling
        record = proxy.wait_for_connection(requested=f"{spelling}:{servers.allowed}")
        assert record["destination"] == servers.allowed_pair and record["decision"] == "allowed"
        # Spelled differently, the other port is still the other port.
        status, _ = get(
            SocketHTTPConnection(socket_path, "PROXY"), f"http://{spelling}:{servers.other}/"
        )
        assert status == 403, spelling
    # Other names and addresses for the same server are not the allowed pair.
    for refused in ("localhost", "[::1]", "0.0.0.0", "0"):
        status, _ = get(
            SocketHTTPConnection(socket_path, "PROXY"), f"http://{refused}:{servers.allowed}/"
        )
        assert status == 403, refused
    status, body = get(
        SocketHTTPConnection(socket_path, "PROXY"),
        f"http://127.0.0.1.evil@127.0.0.1:{servers.allowed}/",
    )
    assert status == 400 and "user information" in body


def test_policy_file_replaced_without_a_signal_applies_to_the_next_connection(
    proxy: Session, servers: Servers
) -> None:
    socket_path = proxy.paths.socket
    assert (
        get(SocketHTTPConnection(socket_path, "PROXY"), f"http://{servers.allowed_pair}/")[0] == 200
    )
    # A writer that never signals (or a signal that has not been handled yet): the file is the policy.
    egress.write_policy(proxy.paths.policy_file, [servers.other_pair], "test")
    assert (
        get(SocketHTTPConnection(socket_path, "PROXY"), f"http://{servers.allowed_pair}/")[0] == 403
    )
    assert get(SocketHTTPConnection(socket_path, "PROXY"), f"http://{servers.other_pair}/") == (
        200,
        "other /",
    )
    # An unreadable policy refuses everything rather than keeping the last one.
    proxy.paths.policy_file.write_text("{not json")
    assert (
        get(SocketHTTPConnection(socket_path, "PROXY"), f"http://{servers.other_pair}/")[0] == 403
    )
    assert any(
        json.loads(line)["event"] == "policy_error" for line in proxy.log.read_text().splitlines()
    )


def test_tightening_the_allowlist_cuts_a_live_tunnel(proxy: Session, servers: Servers) -> None:
    tunnel = SocketHTTPConnection(proxy.paths.socket, "PROXY")
    tunnel.set_tunnel("127.0.0.1", servers.allowed)
    assert get(tunnel, "/before") == (200, "allowed /before")

    egress.set_allowlist(proxy.paths.socket, [])

    tunnel.sock.settimeout(WAIT_S)
    assert tunnel.sock.recv(1) == b""  # closed by the proxy, not by the server or a timeout
    record = proxy.wait_for_connection(kind="connect", ended="revoked by policy")
    assert record["decision"] == "allowed" and record["bytes_down"] > 0
    status, _ = get(
        SocketHTTPConnection(proxy.paths.socket, "PROXY"), f"http://{servers.allowed_pair}/after"
    )
    assert status == 403


def test_ensure_running_replaces_a_dead_proxy_whatever_its_pid_file_says(
    proxy: Session, servers: Servers
) -> None:
    socket_path = proxy.paths.socket
    old_pid = proxy.proxy_pid
    assert (
        egress.ensure_running(socket_path, [servers.allowed_pair], proxy.log) == old_pid
    )  # running: kept

    os.kill(old_pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_S
    while egress.running_pid(socket_path) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    # A pid file naming a live, unrelated process is still stale: liveness is its lock, not its pid.
    proxy.paths.pid_file.write_text(f"{os.getpid()}\n")
    assert egress.running_pid(socket_path) is None

    new_pid = egress.ensure_running(socket_path, [servers.allowed_pair], proxy.log)
    assert new_pid not in (old_pid, os.getpid())
    assert egress.running_pid(socket_path) == new_pid
    assert get(SocketHTTPConnection(socket_path, "PROXY"), f"http://{servers.allowed_pair}/") == (
        200,
        "allowed /",
    )
    assert egress.stop(socket_path) is True
    assert egress.running_pid(socket_path) is None and not socket_path.exists()
    assert egress.stop(socket_path) is False


def test_socket_is_the_only_thing_in_the_sandbox_folder(proxy: Session) -> None:
    assert sorted(os.listdir(proxy.paths.sandbox_dir)) == [egress.SOCKET_NAME]
    assert oct(os.stat(proxy.paths.socket).st_mode & 0o777) == "0o666"
    assert oct(os.stat(proxy.paths.sandbox_dir).st_mode & 0o777) == "0o755"
    assert oct(os.stat(proxy.paths.state_dir).st_mode & 0o777) == "0o700"
    assert proxy.paths.policy_file.parent == proxy.paths.pid_file.parent == proxy.paths.state_dir


# --- In a sandbox -------------------------------------------------------------------------------

_IMAGE_RECIPE_VERSION = "2"
_SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
                "site-packages", "dist-packages", "__pycache__"}  # fmt: skip


def _shared_libraries(binary: Path) -> set[Path]:
    output = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    return {Path(match) for match in re.findall(r"(/\S+)", output)}


def _build_python_image(client, tag: str, workdir: Path) -> None:
    """An image holding only the host's Python: its binary, shared libraries and standard library."""
    rootfs = workdir / "rootfs"
    python = Path(os.path.realpath(sys.executable))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    dynload = Path(sysconfig.get_paths()["platstdlib"]) / "lib-dynload"

    def place(source: Path) -> None:
        target = rootfs / str(source).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)

    def skipped(_folder: str, names: list[str]) -> set[str]:
        # config-* holds the static library and build files: large, and not needed to run.
        return {name for name in names if name in _SKIP_STDLIB or name.startswith("config-")}

    shutil.copytree(stdlib, rootfs / str(stdlib).lstrip("/"), ignore=skipped)
    libraries = _shared_libraries(python)
    for module in dynload.glob("*.so"):
        libraries |= _shared_libraries(module)
    for source in {python, *libraries}:
        place(source)
    (rootfs / "usr/bin/python3").symlink_to(python.name)
    for folder in ("tmp", "etc", "cairn/bin", "cairn/egress"):
        (rootfs / folder).mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/passwd").write_text(
        "root:x:0:0::/root:/nonexistent\nsandbox:x:1000:1000::/tmp:/nonexistent\n"
    )
    (rootfs / "etc/group").write_text("root:x:0:\nsandbox:x:1000:\n")
    archive = workdir / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    repository, image_tag = tag.split(":")
    client.api.import_image_from_file(str(archive), repository=repository, tag=image_tag)


@pytest.fixture(scope="session")
def sandbox_image(docker_client, tmp_path_factory) -> str:
    import docker.errors

    chosen = os.environ.get("CAIRN_EGRESS_TEST_IMAGE")
    if chosen:
        return chosen
    fingerprint = hashlib.sha256(
        f"{_IMAGE_RECIPE_VERSION} {sys.version} {sys.executable}".encode()
    ).hexdigest()[:12]
    tag = f"cairn-test-egress:py-{fingerprint}"
    try:
        docker_client.images.get(tag)
    except docker.errors.ImageNotFound:
        _build_python_image(docker_client, tag, tmp_path_factory.mktemp("egress-image"))
    return tag


SANDBOX_CLIENT = r"""
import http.client, json, socket, sys, urllib.request, urllib.error
mode, args = sys.argv[1], sys.argv[2:]
try:
    if mode == "get":  # plain client: http://127.0.0.1:PORT/path (a fixed forward)
        c = http.client.HTTPConnection("127.0.0.1", int(args[0]), timeout=10)
        c.request("GET", args[1]); r = c.getresponse()
        out = {"status": r.status, "body": r.read().decode()}
    elif mode == "urlopen":  # proxy-aware client: follows HTTP_PROXY from the environment
        try:
            r = urllib.request.urlopen(args[0], timeout=10)
            out = {"status": r.status, "body": r.read().decode()}
        except urllib.error.HTTPError as e:
            out = {"status": e.code, "body": e.read().decode(), "egress": e.headers.get("X-Cairn-Egress")}
    elif mode == "tunnel":  # CONNECT through the proxy port, then HTTP inside the tunnel
        c = http.client.HTTPConnection("127.0.0.1", int(args[0]), timeout=10)
        c.set_tunnel(args[1], int(args[2])); c.request("GET", args[3]); r = c.getresponse()
        out = {"status": r.status, "body": r.read().decode()}
    elif mode == "tcp":
        socket.create_connection((args[0], int(args[1])), timeout=5).close()
        out = {"connected": True}
    elif mode == "write":
        open(args[0], "w").close()
        out = {"written": True}
    elif mode == "wait-listening":
        import time
        deadline = time.monotonic() + 10
        for port in map(int, args):
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
                except OSError:
                    if time.monotonic() > deadline: raise
                    time.sleep(0.05)
        out = {"listening": True}
except Exception as e:
    out = {"error": type(e).__name__, "detail": str(e)}
print(json.dumps(out))
"""


@dataclass
class Sandbox:
    container: object
    session: Session

    def run(self, *args: str, environment: dict | None = None) -> dict:
        exit_code, output = self.container.exec_run(
            ["python3", "-c", SANDBOX_CLIENT, *args],
            user=f"{SANDBOX_UID}:{SANDBOX_UID}",
            environment=environment,
        )
        assert exit_code == 0, output.decode(errors="replace")
        return json.loads(output.decode().strip().splitlines()[-1])


@pytest.fixture
def sandbox(docker_client, sandbox_image: str, proxy: Session, servers: Servers):
    """A container with network none, read-only root, all capabilities dropped, the egress folder
    mounted read-only, and the forwarder running in it as uid 1000 (as a launch spec starts it)."""
    from docker.types import Mount

    container = docker_client.containers.run(
        sandbox_image,
        ["python3", "-c", "import signal; signal.pause()"],
        detach=True,
        network_mode="none",
        user=f"{SANDBOX_UID}:{SANDBOX_UID}",
        read_only=True,
        tmpfs={"/tmp": "rw,size=16m"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        pids_limit=64,
        mem_limit="256m",
        labels={"cairn.test": "egress"},
        mounts=[
            Mount(SANDBOX_EGRESS_DIR, str(proxy.paths.sandbox_dir), type="bind", read_only=True),
            Mount(FORWARDER_IN_SANDBOX, str(egress.FORWARDER_SCRIPT), type="bind", read_only=True),
        ],
    )
    try:
        argv = egress.forwarder_argv(
            FORWARDER_IN_SANDBOX,
            proxy_port=PROXY_PORT,
            forwards={
                FORWARD_ALLOWED_PORT: servers.allowed_pair,
                FORWARD_OTHER_PORT: servers.other_pair,
            },
        )
        container.exec_run(argv, user=f"{SANDBOX_UID}:{SANDBOX_UID}", detach=True)
        box = Sandbox(container, proxy)
        ready = box.run(
            "wait-listening", str(PROXY_PORT), str(FORWARD_ALLOWED_PORT), str(FORWARD_OTHER_PORT)
        )
        assert ready == {"listening": True}, ready
        yield box
    finally:
        container.remove(force=True)


PROXY_ENV = {
    "HTTP_PROXY": f"http://127.0.0.1:{PROXY_PORT}",
    "http_proxy": f"http://127.0.0.1:{PROXY_PORT}",
}


@pytest.mark.docker
def test_sandbox_reaches_the_allowlisted_server_and_nothing_else(
    sandbox: Sandbox, servers: Servers
) -> None:
    attrs = sandbox.container.attrs["HostConfig"]
    assert (
        attrs["NetworkMode"] == "none" and attrs["ReadonlyRootfs"] and attrs["CapDrop"] == ["ALL"]
    )
    assert sandbox.container.attrs["Config"]["User"] == f"{SANDBOX_UID}:{SANDBOX_UID}"

    # Allowed: a fixed forward (a client with no proxy support), HTTP_PROXY, and a CONNECT tunnel.
    assert sandbox.run("get", str(FORWARD_ALLOWED_PORT), "/forward") == {
        "status": 200,
        "body": "allowed /forward",
    }
    allowed_url = f"http://{servers.allowed_pair}/proxied"
    assert sandbox.run("urlopen", allowed_url, environment=PROXY_ENV) == {
        "status": 200,
        "body": "allowed /proxied",
    }
    tunneled = sandbox.run("tunnel", str(PROXY_PORT), "127.0.0.1", str(servers.allowed), "/tunnel")
    assert tunneled == {"status": 200, "body": "allowed /tunnel"}

    # Refused: the forward is closed without a reply; the proxy answers 403.
    assert sandbox.run("get", str(FORWARD_OTHER_PORT), "/forward")["error"] in (
        "RemoteDisconnected",
        "ConnectionResetError",
    )
    refused = sandbox.run("urlopen", f"http://{servers.other_pair}/proxied", environment=PROXY_ENV)
    assert refused["status"] == 403 and refused["egress"] == "refused"
    assert (
        "403"
        in sandbox.run("tunnel", str(PROXY_PORT), "127.0.0.1", str(servers.other), "/tunnel")[
            "detail"
        ]
    )

    log = sandbox.session
    for kind in ("forward", "http", "connect"):
        allowed = log.wait_for_connection(
            kind=kind, destination=servers.allowed_pair, carried_data=True
        )
        assert allowed["decision"] == "allowed"
        refused_line = log.wait_for_connection(kind=kind, destination=servers.other_pair)
        assert (
            refused_line["decision"] == "refused" and refused_line["reason"] == "not in allowlist"
        )


def _bridge_gateway(docker_client) -> str | None:
    """The host's address on Docker's default bridge (docker0), where host services are reachable
    from bridged containers. Docker 20.10 does not always report it, so ask the interface."""
    attrs = docker_client.networks.get("bridge").attrs
    for entry in attrs.get("IPAM", {}).get("Config") or []:
        if entry.get("Gateway"):
            return entry["Gateway"]
    name = (attrs.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            request = struct.pack("256s", name.encode()[:15])
            reply = fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(reply[20:24])


@pytest.mark.docker
def test_sandbox_has_no_network_path_to_the_host(sandbox: Sandbox, docker_client) -> None:
    gateway = _bridge_gateway(docker_client)
    if gateway is None:
        pytest.skip("found no address of Docker's default bridge on this host")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind((gateway, 0))
    except OSError as exc:
        listener.close()
        pytest.skip(f"cannot listen on the docker0 address {gateway}: {exc}")
    with listener:
        listener.listen()
        port = listener.getsockname()[1]
        socket.create_connection((gateway, port), timeout=5).close()  # a real service is there

        # From the sandbox there is no route at all (not a refusal by some listener or filter).
        outcome = sandbox.run("tcp", gateway, str(port))
        assert outcome.get("error") == "OSError" and "Errno 101" in outcome["detail"], outcome

    # The egress folder is visible read-only: the socket can be used, not replaced.
    assert sandbox.run("write", f"{SANDBOX_EGRESS_DIR}/planted")["detail"].startswith("[Errno 30]")
    assert "Read-only" in sandbox.run("write", "/etc/planted")["detail"]
    assert sandbox.run("tcp", "127.0.0.1", str(PROXY_PORT)) == {"connected": True}
    assert f"{SANDBOX_EGRESS_DIR}/{egress.SOCKET_NAME}" == SANDBOX_SOCKET


@pytest.mark.docker
def test_tightening_the_allowlist_refuses_the_next_sandbox_connection(
    sandbox: Sandbox, servers: Servers
) -> None:
    assert sandbox.run("get", str(FORWARD_ALLOWED_PORT), "/before")["status"] == 200

    egress.set_allowlist(sandbox.session.paths.socket, [])

    assert sandbox.run("get", str(FORWARD_ALLOWED_PORT), "/after")["error"] in (
        "RemoteDisconnected",
        "ConnectionResetError",
    )
    refused = sandbox.run("urlopen", f"http://{servers.allowed_pair}/after", environment=PROXY_ENV)
    assert refused["status"] == 403
    sandbox.session.wait_for_connection(
        kind="forward", destination=servers.allowed_pair, decision="refused"
    )
    sandbox.session.wait_for_connection(
        kind="http", destination=servers.allowed_pair, decision="refused"
    )


@pytest.mark.docker
def test_a_restarted_proxy_serves_the_running_sandbox(sandbox: Sandbox, servers: Servers) -> None:
    socket_path = sandbox.session.paths.socket
    os.kill(sandbox.session.proxy_pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_S
    while egress.running_pid(socket_path) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "error" in sandbox.run("get", str(FORWARD_ALLOWED_PORT), "/while-down")

    sandbox.session.proxy_pid = egress.ensure_running(
        socket_path, [servers.allowed_pair], sandbox.session.log
    )

    # Same container, same forwarder: the mounted folder shows the new socket.
    assert sandbox.run("get", str(FORWARD_ALLOWED_PORT), "/again") == {
        "status": 200,
        "body": "allowed /again",
    }
