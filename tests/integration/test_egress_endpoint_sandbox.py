"""A model endpoint seen from inside a real sandbox: the engine's variable holds a placeholder, the
forwarder serves the endpoint on 127.0.0.1:3180, and the host-side proxy puts the real key into
each request for the upstream. The container is made as sandboxes are: the sandbox image, network
none, read-only root, all capabilities dropped, uid 1000, the egress folder mounted read-only.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.credentials import SecretMissing
from core.sandbox import egress
from core.sandbox.egress import SANDBOX_EGRESS_DIR, EgressPaths, EgressProxy, Endpoint

pytestmark = pytest.mark.docker

FORWARDER_IN_SANDBOX = "/cairn/bin/egress-forward.py"
SANDBOX_UID = 1000
PLACEHOLDER = "sk-ant-placeholder-not-a-key"
WAIT_S = 10.0

CLIENT = r"""
import json, os, sys, time, urllib.request, urllib.error
port = int(sys.argv[1])
deadline = time.monotonic() + 10
while True:
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/messages?beta=true", data=b'{"model": "m"}',
            headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            print(json.dumps({"status": response.status, "body": response.read().decode()}))
        break
    except urllib.error.HTTPError as exc:
        print(json.dumps({"status": exc.code, "body": exc.read().decode()}))
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)  # the forwarder is still starting
"""


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(
            {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}
        )
        body = b'{"type": "message"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def upstream() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    handler = type("Handler", (_Upstream,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], seen
    server.shutdown()
    server.server_close()


def test_the_sandbox_reaches_its_model_with_the_key_it_never_holds(
    docker_client: Any, sandbox_image: str, upstream: tuple[int, list], tmp_path: Path
) -> None:
    from docker.types import Mount

    port, seen = upstream
    key = f"sk-ant-api03-real-{uuid.uuid4().hex}"
    values = {"ANTHROPIC_API_KEY": key}

    def secrets(name: str) -> str:
        if name not in values:
            raise SecretMissing(name)
        return values[name]

    endpoint = Endpoint("claude-code", f"http://127.0.0.1:{port}", "ANTHROPIC_API_KEY", "x-api-key")
    paths = EgressPaths.for_session(tmp_path / "egress", f"endpoint-{uuid.uuid4().hex[:8]}")
    log = tmp_path / "egress.jsonl"
    proxy = EgressProxy(
        paths.socket, [], log_path=log, session="endpoint", endpoints=[endpoint], secrets=secrets
    ).start()
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
        labels={"cairn.test": "egress-endpoint"},
        mounts=[
            Mount(SANDBOX_EGRESS_DIR, str(paths.sandbox_dir), type="bind", read_only=True),
            Mount(FORWARDER_IN_SANDBOX, str(egress.FORWARDER_SCRIPT), type="bind", read_only=True),
        ],
    )
    try:
        argv = egress.forwarder_argv(FORWARDER_IN_SANDBOX, endpoints=[endpoint])
        container.exec_run(argv, user=f"{SANDBOX_UID}:{SANDBOX_UID}", detach=True)
        # What an engine's exec gets: the placeholder, never the key.
        environment = {
            "ANTHROPIC_API_KEY": PLACEHOLDER,
            "ANTHROPIC_BASE_URL": egress.endpoint_url(0),
        }

        def run(*command: str) -> str:
            code, output = container.exec_run(
                list(command), user=f"{SANDBOX_UID}:{SANDBOX_UID}", environment=environment
            )
            assert code == 0, output.decode(errors="replace")
            return output.decode()

        answer = json.loads(run("python3", "-c", CLIENT, "3180").strip().splitlines()[-1])
        assert answer == {"status": 200, "body": '{"type": "message"}'}
        assert len(seen) == 1 and seen[0]["path"] == "/v1/messages?beta=true"
        assert seen[0]["headers"]["x-api-key"] == key
        assert seen[0]["headers"]["host"] == f"127.0.0.1:{port}"

        shown = run("env")
        assert f"ANTHROPIC_API_KEY={PLACEHOLDER}" in shown and key not in shown
        assert key not in json.dumps(container.attrs)

        # Revoked in the keyring: the next request from the sandbox gets Cairn's answer.
        del values["ANTHROPIC_API_KEY"]
        answer = json.loads(run("python3", "-c", CLIENT, "3180").strip().splitlines()[-1])
        assert answer["status"] == 401
        assert "cairnctl engine login claude-code" in json.loads(answer["body"])["error"]["message"]
        assert len(seen) == 1

        deadline = time.monotonic() + WAIT_S
        while len(egress.credential_uses(log)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        uses = egress.credential_uses(log)
        assert [(u["endpoint"], u["host"], u["secret"]) for u in uses] == [
            ("claude-code", "127.0.0.1", "ANTHROPIC_API_KEY")
        ]
        assert key not in log.read_text()
    finally:
        container.remove(force=True)
        proxy.close()
