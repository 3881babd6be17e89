# ruff: noqa: F811 - the remote host's fixtures are test_remote_sandbox's, imported here
"""The allowlist and the model endpoints on a sandbox host reached over SSH (the SSH "remote
host" of scripts/remote-host.sh): the sandbox reaches the egress proxy on this machine through
the egress tunnel (an exec there carrying the proxy socket's connections), so what is allowed,
what is refused and the credentials stay here; a granted secret reaches the run and is written
nowhere on that host's disk."""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.sandbox import egress
from core.sandbox.egress_tunnel import tunnel_pid, tunnel_target
from tests.integration.test_remote_sandbox import (  # noqa: F401 (fixtures)
    HOST,
    far_task,
    host_value,
    remote,
    remote_engine,
)
from tests.support import as_json, cairnctl

pytestmark = pytest.mark.docker

PROBE = """
import hashlib, json, os, sys, urllib.error, urllib.request

allowed, other = sys.argv[1:3]
for name in ("NO_PROXY", "no_proxy"):  # loopback goes through the proxy here, to be judged there
    os.environ.pop(name, None)
proxy = urllib.request.ProxyHandler({"http": os.environ["HTTP_PROXY"]})
direct = urllib.request.ProxyHandler({})


def get(url, handler):
    try:
        reply = urllib.request.build_opener(handler).open(url, timeout=30)
        return [reply.status, reply.read().decode()]
    except urllib.error.HTTPError as exc:
        return [exc.code, exc.headers.get("X-Cairn-Egress")]
    except Exception as exc:
        return ["error", type(exc).__name__, str(exc)]


out = {
    "forward": get(f"http://127.0.0.1:{allowed}/forward", direct),
    "proxied": get(f"http://127.0.0.1:{allowed}/proxied", proxy),
    "refused": get(f"http://127.0.0.1:{other}/proxied", proxy),
    "token": hashlib.sha256(os.environ.get("TOKEN", "").encode()).hexdigest(),
}
with open("probe.json", "w") as f:
    json.dump(out, f)
"""


class Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"{self.server.server_address[1]} {self.path}".encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def two_servers() -> Iterator[tuple[int, int]]:
    """Two HTTP servers on this machine's loopback: (allowed port, other port)."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), Answer) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield servers[0].server_address[1], servers[1].server_address[1]
    for server in servers:
        server.shutdown()
        server.server_close()


def sandbox_there(data: Path, engine):
    """The data folder's sandbox on the remote engine (not its carrier)."""
    label = {"label": f"cairn.data_dir={data.resolve()}"}
    (found,) = [
        c
        for c in engine.containers.list(all=True, filters=label)
        if not c.name.endswith("-carrier")
    ]
    return found


def egress_log(data: Path) -> list[dict]:
    lines = []
    for log in (data / "egress").glob("*/egress.log"):
        lines += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return lines


def files_holding(root: Path, needle: str) -> list[str]:
    """The files under `root` (a folder of the other host) that hold `needle`."""
    done = subprocess.run(
        ["grep", "-r", "-l", "-F", "-a", "--", needle, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: found nowhere
    return done.stdout.split()


@pytest.mark.keyring
def test_the_allowlist_on_the_remote_host_is_this_machines_and_a_secret_stays_off_its_disk(
    far_task, remote_engine, two_servers, secret_service
):
    data, task_id, ws = far_task
    allowed, other = two_servers
    name = f"canary-{uuid.uuid4().hex[:8]}"
    value = f"CANARY-{uuid.uuid4().hex}"
    (ws / "probe.py").write_text(PROBE)
    try:
        cairnctl(data, "secret", "set", name, input=value)
        cairnctl(data, "grant", task_id, name, "--env", "TOKEN")
        cairnctl(
            data, "policy", task_id, "--network", "allowlist", "--allow", f"127.0.0.1:{allowed}"
        )
        run = as_json(
            cairnctl(
                data,
                "run",
                task_id,
                "--json",
                "--",
                "python3",
                "probe.py",
                str(allowed),
                str(other),
            )
        )
        assert run["state"] == "succeeded", run
        probe = json.loads((ws / "probe.json").read_text())
        # Allowed: the same-port forward and the proxy; refused by the proxy here, with 403.
        assert probe["forward"] == [200, f"{allowed} /forward"], probe
        assert probe["proxied"] == [200, f"{allowed} /proxied"], probe
        assert probe["refused"] == [403, "refused"], probe
        # The secret reached the run (through the exec's environment).
        assert probe["token"] == hashlib.sha256(value.encode()).hexdigest()
        decisions = {
            (line.get("kind"), line.get("destination"), line.get("decision"))
            for line in egress_log(data)
            if line.get("event") == "connection"
        }
        assert ("forward", f"127.0.0.1:{allowed}", "allowed") in decisions, decisions
        assert ("http", f"127.0.0.1:{allowed}", "allowed") in decisions, decisions
        assert ("http", f"127.0.0.1:{other}", "refused") in decisions, decisions

        # The sandbox there mounts no folder of this machine, and the relay's folder is a tmpfs.
        info = sandbox_there(data, remote_engine).attrs
        assert {m["Type"] for m in info["Mounts"]} == {"volume"}, info["Mounts"]
        assert "/cairn/egress" in info["HostConfig"]["Tmpfs"]
        socket_path = next((data / "egress").glob("*/sandbox/egress.sock"))
        assert tunnel_target(socket_path) == info["Id"]

        # Nowhere on the other host's disk: the engine's data (containers' configs and layers,
        # the volumes) and everything else of that host's state folder.
        root = Path(remote_engine.info()["DockerRootDir"]).parent
        assert files_holding(root, value) == []
        # The search reaches the volumes: the probe's answer (the secret's hash) is found there.
        assert any("/volumes/" in f for f in files_holding(root, probe["token"]))
        assert value not in json.dumps(info)
    finally:
        cairnctl(data, "secret", "rm", name, check=False)


def test_a_dropped_tunnel_connects_again_and_a_policy_without_the_proxy_ends_it(
    far_task, two_servers, remote_engine
):
    data, task_id, ws = far_task
    allowed, _ = two_servers
    (ws / "probe.py").write_text(PROBE)
    cairnctl(data, "policy", task_id, "--network", "allowlist", "--allow", f"127.0.0.1:{allowed}")
    fetch = f"python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{allowed}/x', timeout=30).read().decode())\""
    first = as_json(cairnctl(data, "run", task_id, "--json", "--", "sh", "-c", fetch + " > a.txt"))
    assert first["state"] == "succeeded", first
    assert (ws / "a.txt").read_text().strip() == f"{allowed} /x"
    socket_path = next((data / "egress").glob("*/sandbox/egress.sock"))
    pid = tunnel_pid(socket_path)
    assert pid is not None
    # The connection drops (its relay there is killed): the tunnel connects again by itself.
    container = sandbox_there(data, remote_engine)
    container.exec_run(["pkill", "-f", "egress-relay.py"], user="1000:1000")
    time.sleep(0.5)
    again = as_json(cairnctl(data, "run", task_id, "--json", "--", "sh", "-c", fetch + " > b.txt"))
    assert again["state"] == "succeeded", again
    assert (ws / "b.txt").read_text().strip() == f"{allowed} /x"
    assert tunnel_pid(socket_path) == pid
    output = (socket_path.parent.parent / "tunnel.stderr").read_text()
    assert "connecting again" in output
    # A policy without the proxy: the proxy stops, and the tunnel with it.
    cairnctl(data, "policy", task_id, "--network", "none")
    done = as_json(cairnctl(data, "run", task_id, "--json", "--", "true"))
    assert done["state"] == "succeeded", done
    assert egress.running_pid(socket_path) is None and tunnel_pid(socket_path) is None


def test_a_tunnel_to_a_sandbox_that_is_not_there_says_so(tmp_path, remote):
    from core.sandbox.egress_tunnel import TunnelError, ensure_tunnel
    from core.sandbox.hosts import bridge_for, parse_value

    paths = egress.EgressPaths.for_session(tmp_path / "egress", "ses_none")
    egress.start_detached(paths.socket, [], tmp_path / "egress.log")
    bridge = bridge_for(parse_value(HOST, host_value(remote)))
    try:
        with pytest.raises(TunnelError, match="No such container"):
            ensure_tunnel(paths.socket, "cairn-no-such-sandbox", bridge)
        assert tunnel_pid(paths.socket) is None
    finally:
        egress.stop(paths.socket)
