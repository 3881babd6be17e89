# ruff: noqa: F811 - the remote host's fixtures are test_remote_sandbox's, imported here
"""The allowlist and the model endpoints on a sandbox host reached over SSH (the SSH "remote
host" of scripts/remote-host.sh): the sandbox reaches the egress proxy on this machine through
the egress tunnel (an exec there carrying the proxy socket's connections), so what is allowed,
what is refused and the credentials stay here; a granted secret reaches the run and is written
nowhere on that host's disk. Claude Code runs there from its binary sent once into a
content-addressed volume, against the scripted model server on this machine's loopback."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import docker
import pytest

from core.sandbox import egress
from core.sandbox.base import SandboxSpec
from core.sandbox.egress_tunnel import tunnel_pid, tunnel_target
from core.sandbox.mirror import QUIET_PERIOD
from core.sandbox.remote import ENGINE_VOLUME_PREFIX
from core.store import Store
from tests.agents.fake_anthropic import Bash, FakeAnthropic, Reply
from tests.integration.claude_support import binary, use_scripted_server  # noqa: F401
from tests.integration.test_remote_sandbox import (  # noqa: F401 (fixtures)
    HOST,
    far_task,
    host_value,
    new_far_task,
    own_server,
    release_remote,
    remote,
    remote_engine,
)
from tests.support import as_json, cairnctl, engine_session_of, release_data_dir, wait_for

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
    assert not (socket_path.parent.parent / "tunnel.serving").exists()


@pytest.fixture
def far_claude(tmp_path, remote, remote_engine, sandbox_image, docker_client, binary):
    """A data folder that knows the remote host, a project folder and a secret's name."""
    data, _, _ = new_far_task(tmp_path, remote, sandbox_image, remote_engine)
    src = tmp_path / "project"
    src.mkdir()
    (src / "README").write_text("a project\n")
    secret = f"claude-far-{uuid.uuid4().hex[:12]}"
    yield data, src, secret
    cairnctl(data, "secret", "rm", secret, check=False)
    release_data_dir(data, docker_client)
    release_remote(data, remote_engine)


@pytest.mark.keyring
def test_claude_code_on_the_remote_host_comes_back_as_revisions(
    far_claude,
    remote,
    remote_engine,
    binary,
    secret_service,
):
    data, src, secret = far_claude
    # The first second of a run starts the mirror there; the file is written after it.
    script = [
        Bash("sleep 3; mkdir -p src && echo 'print(1)' > src/app.py"),
        Reply("Made src/app.py."),
    ]
    with FakeAnthropic(script) as server:
        use_scripted_server(data, binary, server.url, secret)
        cairnctl(data, "config", "set", f"hosts.{HOST}", host_value(remote))
        made = as_json(
            cairnctl(data, "new", str(src), "--engine", "claude-code", "--host", HOST, "--json")
        )
        task, ws = made["task_id"], Path(made["workspace_root"])
        done = as_json(
            cairnctl(data, "continue", task, "-m", "make src/app.py", "--json", timeout=300)
        )
        assert done["state"] == "succeeded", done
        child = done["task_id"]
        assert (ws / "src/app.py").read_text() == "print(1)\n"
        revisions = as_json(cairnctl(data, "revisions", child, "--json"))["revisions"]
        watch = [r for r in revisions if r["trigger"] == "watch" and r["run_id"]]
        first = min((r for r in watch if "src/app.py" in r["paths"]), key=lambda r: r["seq"])
        # Recorded here within a second of the quiet period after it was written there (both
        # engines share this machine's clock).
        sandbox = sandbox_there(data, remote_engine)
        stat = sandbox.exec_run(["stat", "-c", "%.9Y", "/workspace/src/app.py"])
        assert stat.exit_code == 0, stat.output
        delay = first["created_at"] - float(stat.output.decode())
        print(f"src/app.py written there to its revision here: {delay:.3f} s")
        assert 0 < delay <= QUIET_PERIOD + 1.0, delay
        base = next(r for r in revisions if r["trigger"] == "base")
        diff = as_json(cairnctl(data, "diff", child, base["id"], "--json"))
        assert {f["new_path"] for f in diff["files"]} == {"src/app.py"}, diff
        snap = as_json(cairnctl(data, "snapshot", child, "--json"))
        latest = max(revisions, key=lambda r: r["seq"])
        assert snap["state"] == "durable" and snap["tree"] == latest["tree"], (snap, latest)
        checkpoints = Store(data / "cairn.db").list_checkpoints(done["run_id"])
        assert checkpoints, "the run's end made no checkpoint"
        assert server.main_requests(), "the model was never asked"
        # The key was added here by the proxy: the sandbox only ever held a placeholder.
        assert any(line.get("event") == "credential" for line in egress_log(data))

        info = sandbox_there(data, remote_engine).attrs
        assert {m["Type"] for m in info["Mounts"]} == {"volume"}, info["Mounts"]
        (engine,) = [m for m in info["Mounts"] if m["Destination"] == "/cairn/engines"]
        digest = hashlib.sha256(binary.read_bytes()).hexdigest()
        assert engine["Name"] == f"{ENGINE_VOLUME_PREFIX}claude-{digest}" and not engine["RW"]
        volume = remote_engine.volumes.get(engine["Name"])
        assert volume.attrs["Labels"]["cairn.sha256"] == digest  # shared: no data folder's

        # The next turn continues the same session natively (its transcript came back here with
        # the run's last pass, so the check finds it), in the same sandbox there.
        server.add(Bash("echo second > second.txt"), Reply("Second turn."))
        cont = as_json(cairnctl(data, "continue", child, "-m", "now say more", "--json"))
        assert cont["state"] == "succeeded", cont
        path = cont["resume_report"]["path"]
        assert any("native continue" in p for p in path), path
        assert engine_session_of(data, cont["task_id"]) == engine_session_of(data, child)
        assert (ws / "second.txt").read_text() == "second\n"
        last = server.main_requests()[-1]
        assert "make src/app.py" in json.dumps(last.messages)  # the first turn's history


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


def test_an_engine_binary_is_sent_once_and_a_fill_cut_short_is_filled_again(
    tmp_path, remote, remote_engine, sandbox_image
):
    from core.sandbox.hosts import bridge_for, parse_value
    from core.sandbox.remote import ENGINE_MARK, RemoteDockerBackend

    binary = tmp_path / "tool"
    binary.write_bytes(os.urandom(300_000))
    made = SandboxSpec(
        workspace_id="ws_1",
        session_id="ses_1",
        snapshot_id=None,
        workspace_root=tmp_path / "ws",
        home_dir=tmp_path / "home",
        runs_dir=tmp_path / "runs",
        extra_mounts=((binary, "/cairn/engines/tool"),),
    )
    backend = RemoteDockerBackend(
        tmp_path / "data", bridge_for(parse_value(HOST, host_value(remote))), host_name=HOST
    )
    image_id = remote_engine.images.get(sandbox_image).id
    (engine,) = backend.engine_files(made)
    carrier = f"{engine.volume}-carrier"

    def held() -> dict[str, bytes]:
        stream, _ = remote_engine.api.get_archive(carrier, "/v/.")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return {
                m.name.split("/", 1)[-1]: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers()
                if m.isfile()
            }

    try:
        backend._ensure_engine_volumes(made, image_id)
        files = held()
        assert files == {"tool": binary.read_bytes(), ENGINE_MARK: f"{engine.digest}\n".encode()}
        # Filled already: nothing is sent again.
        api = backend.api
        sent: list[str] = []
        put_archive = api.put_archive
        api.put_archive = lambda c, p, d: sent.append(p) or put_archive(c, p, d)  # type: ignore[method-assign]
        backend._ensure_engine_volumes(made, image_id)
        assert sent == []
        # A fill cut short (no mark, half the file): the next sandbox fills it again, whole.
        cut = io.BytesIO()
        with tarfile.open(fileobj=cut, mode="w") as tar:
            half = tarfile.TarInfo("tool")
            half.size = 1000
            tar.addfile(half, io.BytesIO(binary.read_bytes()[:1000]))
            gone = tarfile.TarInfo(ENGINE_MARK)
            gone.size = 4
            tar.addfile(gone, io.BytesIO(b"bad\n"))
        remote_engine.api.put_archive(carrier, "/v", cut.getvalue())
        assert held()["tool"] != binary.read_bytes()
        backend._ensure_engine_volumes(made, image_id)
        assert held() == files and sent == ["/v"]
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            remote_engine.api.remove_container(carrier, force=True)
        with contextlib.suppress(docker.errors.NotFound):
            remote_engine.api.remove_volume(engine.volume, force=True)
    # A package folder: the volume holds the folder itself, links as links.
    package = tmp_path / "package"
    (package / "bin").mkdir(parents=True)
    (package / "bin" / "tool").write_bytes(binary.read_bytes())
    (package / "bin" / "alias").symlink_to("tool")
    folder = replace(made, extra_mounts=((package, "/cairn/engines/tool"),))
    (whole,) = backend.engine_files(folder)
    carrier = f"{whole.volume}-carrier"
    try:
        backend._ensure_engine_volumes(folder, image_id)
        stream, _ = remote_engine.api.get_archive(carrier, "/v/.")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            members = {m.name.split("/", 1)[-1]: m for m in tar.getmembers()}
            assert members["bin/alias"].issym() and members["bin/alias"].linkname == "tool"
            tool = tar.extractfile(members["bin/tool"])
            assert tool is not None and tool.read() == binary.read_bytes()
            assert members["bin/tool"].uid == 0 and members["bin/tool"].mode & 0o022 == 0
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            remote_engine.api.remove_container(carrier, force=True)
        with contextlib.suppress(docker.errors.NotFound):
            remote_engine.api.remove_volume(whole.volume, force=True)
        backend.close()


def test_a_tunnel_whose_host_goes_away_connects_again_when_it_is_back(
    tmp_path, sandbox_image, docker_client, remote_engine, own_server, two_servers
):
    allowed, _ = two_servers
    data, task_id, ws = new_far_task(tmp_path, own_server.settings, sandbox_image, remote_engine)
    fetch = (
        'python3 -c "import urllib.request as u; print(u.urlopen('
        f"'http://127.0.0.1:{allowed}/x', timeout=30).read().decode())\""
    )
    try:
        cairnctl(
            data, "policy", task_id, "--network", "allowlist", "--allow", f"127.0.0.1:{allowed}"
        )
        first = as_json(cairnctl(data, "run", task_id, "--json", "--", "sh", "-c", fetch))
        assert first["state"] == "succeeded", first
        socket_path = next((data / "egress").glob("*/sandbox/egress.sock"))
        pid = tunnel_pid(socket_path)
        serving = socket_path.parent.parent / "tunnel.serving"
        assert pid is not None and serving.exists()
        own_server.stop()  # the host goes away, and the tunnel's connection with it
        wait_for(lambda: not serving.exists(), what="the tunnel to see its connection end")
        output = socket_path.parent.parent / "tunnel.stderr"
        wait_for(lambda: "connecting again" in output.read_text(), what="a retry")
        assert tunnel_pid(socket_path) == pid  # waiting, not gone
        own_server.start()
        wait_for(serving.exists, timeout=60, what="the tunnel to connect again")
        again = as_json(
            cairnctl(data, "run", task_id, "--json", "--", "sh", "-c", fetch + " > b.txt")
        )
        assert again["state"] == "succeeded", again
        assert (ws / "b.txt").read_text().strip() == f"{allowed} /x"
        assert tunnel_pid(socket_path) == pid
    finally:
        release_data_dir(data, docker_client)
        release_remote(data, remote_engine)
