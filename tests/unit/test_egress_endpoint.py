"""The egress proxy's model endpoints: the credential is added on the host side, read from the
keyring at each request, and sent only to the endpoint's upstream.

The upstream is a small HTTP server on the host's loopback that records what it receives and can
hold a server-sent-events stream open between two events. The proxy runs in this process with a
fake keyring, or as the detached process with a keyring backend named by PYTHON_KEYRING_BACKEND;
one test uses the real Secret Service when there is one.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import socket
import ssl
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.credentials import KeyringLocked, SecretMissing, SecretStore
from core.sandbox import egress
from core.sandbox.egress import EgressPaths, EgressProxy, Endpoint, EndpointError

WAIT_S = 10.0
API_KEY = "ANTHROPIC_API_KEY"
PLACEHOLDER = "sk-ant-placeholder-not-a-key"


def real_key(label: str = "") -> str:
    return f"sk-ant-api03-real{label}-{uuid.uuid4().hex}"


# --- The upstream: records requests, streams SSE on request ----------------------------------


class Upstream:
    def __init__(self, tls: ssl.SSLContext | None = None):
        self.requests: list[dict[str, Any]] = []
        self.gate = threading.Event()  # the second SSE event waits for it
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def pair(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


def _handler_for(upstream: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                data = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b""):
                            pass
                        return data
                    data += self.rfile.read(size)
                    self.rfile.read(2)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _record(self, body: bytes) -> None:
            upstream.requests.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "headers": [(k.lower(), v) for k, v in self.headers.items()],
                    "body": body,
                }
            )

        def do_POST(self) -> None:
            self._record(self._body())
            if self.path.split("?")[0].endswith("/stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._chunk(b"event: one\ndata: 1\n\n")
                upstream.gate.wait(WAIT_S)
                self._chunk(b"event: two\ndata: 2\n\n")
                self.wfile.write(b"0\r\n\r\n")
                return
            body = json.dumps({"path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST  # noqa: N815 - the name http.server calls

        def do_HEAD(self) -> None:
            self._record(b"")
            self.send_response(200)
            self.send_header("Content-Length", "12")
            self.end_headers()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    return Handler


def headers_of(request: dict[str, Any], name: str) -> list[str]:
    return [v for k, v in request["headers"] if k == name]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


# --- The proxy and a client of its socket -----------------------------------------------------


class FakeKeyring:
    def __init__(self, **values: str):
        self.values = dict(values)
        self.error: BaseException | None = None

    def get(self, name: str) -> str:
        if self.error is not None:
            raise self.error
        if name not in self.values:
            raise SecretMissing(name)
        return self.values[name]


class SocketConnection(http.client.HTTPConnection):
    """http.client over the egress socket, after the first line (`ENDPOINT name`, `FORWARD ...`,
    `PROXY`): what the forwarder in the sandbox relays."""

    def __init__(self, socket_path: Path, line: str):
        super().__init__("sandbox.invalid", timeout=WAIT_S)
        self.socket_path = socket_path
        self.line = line.encode("ascii") + b"\n"
        self.opened = 0

    def connect(self) -> None:
        self.sock = egress._connect_unix(self.socket_path, WAIT_S)
        self.sock.sendall(self.line)
        self.opened += 1


def call(
    connection: http.client.HTTPConnection,
    method: str,
    target: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    **options: Any,
) -> tuple[int, bytes, http.client.HTTPResponse]:
    connection.request(method, target, body=body, headers=headers or {}, **options)
    response = connection.getresponse()
    return response.status, response.read(), response


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for_record(path: Path, **match: Any) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        for record in read_log(path):
            if all(record.get(k) == v for k, v in match.items()):
                return record
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line with {match}: {read_log(path)}")
        time.sleep(0.02)


ProxyMaker = Callable[..., EgressProxy]


@pytest.fixture
def make_proxy(tmp_path: Path) -> Iterator[ProxyMaker]:
    proxies: list[EgressProxy] = []

    def make(
        endpoints: list[Endpoint], secrets: Callable[[str], str] | None, allow: tuple = ()
    ) -> EgressProxy:
        name = f"s{len(proxies)}"
        paths = EgressPaths.for_session(tmp_path / "egress", name)
        proxy = EgressProxy(
            paths.socket,
            list(allow),
            log_path=tmp_path / f"{name}.jsonl",
            session=name,
            endpoints=endpoints,
            secrets=secrets,
        ).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def anthropic(upstream: str, name: str = "claude-code") -> Endpoint:
    return Endpoint(name, upstream, API_KEY, "x-api-key")


def log_path(proxy: EgressProxy) -> Path:
    assert proxy.log.path is not None
    return proxy.log.path


# --- The endpoint -----------------------------------------------------------------------------


def test_the_upstream_sees_the_real_key_and_never_the_placeholder(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    key = real_key()
    proxy = make_proxy([anthropic(f"http://{upstream.pair}")], FakeKeyring(**{API_KEY: key}).get)
    client = SocketConnection(proxy.paths.socket, "ENDPOINT claude-code")
    placeholder = {"x-api-key": PLACEHOLDER, "Authorization": f"Bearer {PLACEHOLDER}"}

    # What Claude Code sends to its base URL: HEAD / and the streamed messages call.
    status, body, response = call(client, "HEAD", "/", headers=placeholder)
    assert (status, body, response.getheader("Content-Length")) == (200, b"", "12")
    status, body, _ = call(
        client, "POST", "/v1/messages?beta=true", body=b'{"model": "m"}', headers=placeholder
    )
    assert status == 200 and json.loads(body) == {"path": "/v1/messages?beta=true"}
    assert client.opened == 1  # one keep-alive connection carried both

    for request in upstream.requests:
        assert headers_of(request, "x-api-key") == [key]
        assert headers_of(request, "authorization") == []  # stripped, not passed on
        assert headers_of(request, "host") == [upstream.pair]
        assert PLACEHOLDER not in json.dumps(request["headers"])
    assert [(r["method"], r["path"]) for r in upstream.requests] == [
        ("HEAD", "/"),
        ("POST", "/v1/messages?beta=true"),
    ]
    assert upstream.requests[1]["body"] == b'{"model": "m"}'


def test_the_upstream_base_path_is_joined_with_the_request_path(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    key = real_key()
    codex = Endpoint("codex", f"http://{upstream.pair}/v1/", "OPENAI_API_KEY", "authorization",
                     "Bearer {}")  # fmt: skip
    proxy = make_proxy([codex], FakeKeyring(OPENAI_API_KEY=key).get)
    client = SocketConnection(proxy.paths.socket, "ENDPOINT codex")
    status, _, _ = call(
        client, "POST", "/responses", body=b"{}", headers={"Authorization": "Bearer placeholder"}
    )
    assert status == 200
    assert upstream.requests[0]["path"] == "/v1/responses"
    assert headers_of(upstream.requests[0], "authorization") == [f"Bearer {key}"]
    # A request path cannot climb out of the base path.
    status, body, _ = call(SocketConnection(proxy.paths.socket, "ENDPOINT codex"), "GET", "/../x")
    assert status == 400 and len(upstream.requests) == 1


def test_a_rotated_key_applies_to_the_next_request_on_the_same_connection(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    first, second = real_key("1"), real_key("2")
    keyring = FakeKeyring(**{API_KEY: first})
    proxy = make_proxy([anthropic(f"http://{upstream.pair}")], keyring.get)
    client = SocketConnection(proxy.paths.socket, "ENDPOINT claude-code")

    assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200
    keyring.values[API_KEY] = second
    assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200
    assert client.opened == 1
    assert [headers_of(r, "x-api-key") for r in upstream.requests] == [[first], [second]]
    client.close()
    record = wait_for_record(log_path(proxy), event="connection", kind="endpoint")
    assert record["requests"] == 2 and record["decision"] == "allowed"


def test_a_deleted_key_gets_the_engine_error_and_no_upstream_request(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    key = real_key()
    keyring = FakeKeyring(**{API_KEY: key})
    proxy = make_proxy([anthropic(f"http://{upstream.pair}")], keyring.get)
    client = SocketConnection(proxy.paths.socket, "ENDPOINT claude-code")
    assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200

    del keyring.values[API_KEY]
    status, body, response = call(client, "POST", "/v1/messages", body=b"{}")

    assert status == 401 and response.getheader("Content-Type") == "application/json"
    error = json.loads(body)
    assert error["type"] == "error" and error["error"]["type"] == "authentication_error"
    message = error["error"]["message"]
    assert message.startswith(f"Cairn: the credential {API_KEY} for the model endpoint claude-code")
    assert "not in the keyring" in message and "cairnctl engine login claude-code" in message
    assert len(upstream.requests) == 1
    logged = wait_for_record(log_path(proxy), event="credential_error")
    assert logged["error"] == message and logged["secret"] == API_KEY


def test_a_locked_keyring_says_so_and_error_texts_never_carry_the_value(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    key = real_key()
    keyring = FakeKeyring(**{API_KEY: key})
    proxy = make_proxy([anthropic(f"http://{upstream.pair}")], keyring.get)
    assert call(SocketConnection(proxy.paths.socket, "ENDPOINT claude-code"), "GET", "/")[0] == 200

    keyring.error = KeyringLocked("Prompt dismissed")
    status, body, _ = call(SocketConnection(proxy.paths.socket, "ENDPOINT claude-code"), "GET", "/")
    assert status == 401 and "the keyring is locked" in json.loads(body)["error"]["message"]

    # A backend whose error text holds the value (seen once, so known to the redactor).
    keyring.error = RuntimeError(f"backend choked on {key}")
    status, body, _ = call(SocketConnection(proxy.paths.socket, "ENDPOINT claude-code"), "GET", "/")
    assert status == 401 and key not in body.decode()
    assert f"[secret:{API_KEY}]" in json.loads(body)["error"]["message"]
    assert key not in log_path(proxy).read_text()
    assert len(upstream.requests) == 1


def test_server_sent_events_flow_before_the_response_ends(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    proxy = make_proxy(
        [anthropic(f"http://{upstream.pair}")], FakeKeyring(**{API_KEY: "k" * 20}).get
    )
    client = SocketConnection(proxy.paths.socket, "ENDPOINT claude-code")
    client.request("POST", "/v1/stream", body=b"{}")
    response = client.getresponse()
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"

    first = b""
    while b"\n\n" not in first:
        first += response.read1(65536)
    assert first == b"event: one\ndata: 1\n\n"
    assert not upstream.gate.is_set()  # the upstream has not finished the response yet

    upstream.gate.set()
    assert response.read() == b"event: two\ndata: 2\n\n"
    # The connection is still good for the next request.
    assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200 and client.opened == 1


def test_request_bodies_arrive_intact_chunked_or_with_expect_continue(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    proxy = make_proxy(
        [anthropic(f"http://{upstream.pair}")], FakeKeyring(**{API_KEY: "k" * 20}).get
    )
    client = SocketConnection(proxy.paths.socket, "ENDPOINT claude-code")
    parts = [b"a" * 100_000, b"", b"b" * 7, bytes(range(256)) * 300]
    status, _, _ = call(
        client, "POST", "/v1/messages", body=iter(parts), encode_chunked=True,
        headers={"Transfer-Encoding": "chunked"},
    )  # fmt: skip
    assert status == 200
    assert upstream.requests[-1]["body"] == b"".join(parts)
    assert headers_of(upstream.requests[-1], "transfer-encoding") == ["chunked"]

    status, _, _ = call(
        client, "POST", "/v1/messages", body=b'{"x": 1}', headers={"Expect": "100-continue"}
    )
    assert status == 200 and upstream.requests[-1]["body"] == b'{"x": 1}'
    assert headers_of(upstream.requests[-1], "expect") == [] and client.opened == 1


def test_forward_and_proxy_modes_never_carry_the_credential(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    key = real_key()
    other = Upstream()
    try:
        proxy = make_proxy(
            [anthropic(f"http://{upstream.pair}")],
            FakeKeyring(**{API_KEY: key}).get,
            allow=(other.pair,),
        )
        headers = {"x-api-key": PLACEHOLDER}
        forward = SocketConnection(proxy.paths.socket, f"FORWARD {other.pair}")
        assert call(forward, "GET", "/forward", headers=headers)[0] == 200
        proxied = SocketConnection(proxy.paths.socket, "PROXY")
        assert call(proxied, "GET", f"http://{other.pair}/proxy", headers=headers)[0] == 200

        assert [r["path"] for r in other.requests] == ["/forward", "/proxy"]
        for request in other.requests:
            assert headers_of(request, "x-api-key") == [PLACEHOLDER]
            assert key not in json.dumps(request["headers"])
        assert egress.credential_uses(log_path(proxy)) == [] and upstream.requests == []
        # The endpoint's upstream is not in the allowlist: only ENDPOINT reaches it.
        refused = SocketConnection(proxy.paths.socket, "PROXY")
        assert call(refused, "GET", f"http://{upstream.pair}/")[0] == 403
    finally:
        other.close()


def test_each_use_is_one_log_line_without_the_value(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    key = real_key()
    proxy = make_proxy([anthropic(f"http://{upstream.pair}")], FakeKeyring(**{API_KEY: key}).get)
    client = SocketConnection(proxy.paths.socket, "ENDPOINT claude-code")
    for _ in range(3):
        assert call(client, "POST", "/v1/messages?beta=true", body=b"{}")[0] == 200
    call(client, "HEAD", "/")

    uses = egress.credential_uses(log_path(proxy))
    assert len(uses) == 4 == len(upstream.requests)
    for use in uses:
        assert use["endpoint"] == "claude-code" and use["secret"] == API_KEY
        assert use["host"] == "127.0.0.1" and use["session"] == "s0"
        assert dt.datetime.fromisoformat(use["time"].replace("Z", "+00:00"))
    assert [use["path"] for use in uses] == ["/v1/messages"] * 3 + ["/"]  # never the query
    client.close()
    wait_for_record(log_path(proxy), event="connection", kind="endpoint")
    assert key not in log_path(proxy).read_text()


def test_an_unknown_or_removed_endpoint_is_refused(
    make_proxy: ProxyMaker, upstream: Upstream
) -> None:
    proxy = make_proxy(
        [anthropic(f"http://{upstream.pair}")], FakeKeyring(**{API_KEY: "k" * 20}).get
    )
    status, body, _ = call(SocketConnection(proxy.paths.socket, "ENDPOINT codex"), "GET", "/")
    assert status == 404 and "codex" in json.loads(body)["error"]["message"]

    client = SocketConnection(proxy.paths.socket, "ENDPOINT claude-code")
    assert call(client, "GET", "/")[0] == 200
    proxy.set_allowlist([], endpoints=[])
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        call(client, "GET", "/")  # the live connection was cut
    assert len(upstream.requests) == 1


# --- TLS to the upstream ----------------------------------------------------------------------


def _make_ca(tmp_path: Path, label: str) -> tuple[Any, Any, Path]:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Cairn test CA {label}")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / f"ca-{label}.pem"
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return key, certificate, path


def _server_context(tmp_path: Path, ca_key: Any, ca: Any) -> ssl.SSLContext:
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "server.pem", tmp_path / "server.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context


@pytest.fixture
def tls_upstream(tmp_path: Path) -> Iterator[tuple[Upstream, Path]]:
    ca_key, ca, ca_file = _make_ca(tmp_path, "trusted")
    server = Upstream(tls=_server_context(tmp_path, ca_key, ca))
    yield server, ca_file
    server.close()


def test_tls_upstream_is_verified_against_ssl_cert_file(
    make_proxy: ProxyMaker, tls_upstream: tuple[Upstream, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, ca_file = tls_upstream
    key = real_key()
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    proxy = make_proxy([anthropic(f"https://{server.pair}")], FakeKeyring(**{API_KEY: key}).get)
    client = SocketConnection(proxy.paths.socket, "ENDPOINT claude-code")
    assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200
    assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200
    assert [headers_of(r, "x-api-key") for r in server.requests] == [[key], [key]]


def test_an_untrusted_tls_upstream_is_refused_with_a_clear_message(
    make_proxy: ProxyMaker,
    tls_upstream: tuple[Upstream, Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    server, _ = tls_upstream
    _, _, other_ca = _make_ca(tmp_path, "other")
    monkeypatch.setenv("SSL_CERT_FILE", str(other_ca))
    proxy = make_proxy(
        [anthropic(f"https://{server.pair}")], FakeKeyring(**{API_KEY: "k" * 20}).get
    )
    status, body, _ = call(SocketConnection(proxy.paths.socket, "ENDPOINT claude-code"), "GET", "/")
    message = json.loads(body)["error"]["message"]
    assert status == 502
    assert "TLS certificate is not trusted" in message and "SSL_CERT_FILE" in message
    assert server.requests == []
    assert wait_for_record(log_path(proxy), event="endpoint_error")["error"] == message


# --- The detached proxy, with a keyring backend of the test's ---------------------------------

_FILE_KEYRING = textwrap.dedent(
    """
    import json, os
    from keyring.backend import KeyringBackend

    class FileKeyring(KeyringBackend):
        priority = 1

        def _values(self):
            try:
                with open(os.environ["CAIRN_TEST_KEYRING_FILE"]) as handle:
                    return json.load(handle)
            except FileNotFoundError:
                return {}

        def get_password(self, service, username):
            return self._values().get(f"{service}/{username}")

        def set_password(self, service, username, password):
            raise NotImplementedError

        def delete_password(self, service, username):
            raise NotImplementedError
    """
)


def test_the_detached_proxy_reads_the_keyring_at_each_request(
    tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend_dir = tmp_path / "backend"
    backend_dir.mkdir()
    (backend_dir / "cairn_test_keyring.py").write_text(_FILE_KEYRING)
    values = tmp_path / "keyring.json"
    monkeypatch.setenv("PYTHONPATH", str(backend_dir))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "cairn_test_keyring.FileKeyring")
    monkeypatch.setenv("CAIRN_TEST_KEYRING_FILE", str(values))
    first, second = real_key("1"), real_key("2")
    values.write_text(json.dumps({f"cairn/{API_KEY}": first}))

    paths = EgressPaths.for_session(tmp_path / "egress", "detached")
    log = tmp_path / "egress.jsonl"
    endpoints = [anthropic(f"http://{upstream.pair}")]
    try:
        pid = egress.ensure_running(paths.socket, [], log, session="detached", endpoints=endpoints)
        assert egress.load_policy(paths.policy_file).endpoints == tuple(endpoints)
        assert egress._protocol_of(paths) == egress.PROTOCOL_VERSION
        client = SocketConnection(paths.socket, "ENDPOINT claude-code")
        assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200
        values.write_text(json.dumps({f"cairn/{API_KEY}": second}))
        assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200
        values.write_text("{}")
        status, body, _ = call(client, "POST", "/v1/messages", body=b"{}")
        assert status == 401 and "cairnctl engine login claude-code" in body.decode()
        assert [headers_of(r, "x-api-key") for r in upstream.requests] == [[first], [second]]

        # Started again with the same endpoints: the running proxy is kept.
        assert egress.ensure_running(paths.socket, [], log, endpoints=endpoints) == pid
        assert len(egress.credential_uses(log)) == 2
        text = log.read_text() + paths.stderr_file.read_text()
        assert first not in text and second not in text
    finally:
        egress.stop(paths.socket)


# --- The real Secret Service --------------------------------------------------------------------


@pytest.mark.keyring
def test_the_real_secret_service_is_read_at_each_request(
    secret_service: Any, make_proxy: ProxyMaker, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SecretStore(f"cairn-test-{uuid.uuid4().hex[:12]}", backend=secret_service)
    # The proxy's own keyring reader, on a service of the test's own.
    monkeypatch.setattr(egress, "_secret_store", store)
    first, second = real_key("1"), real_key("2")
    store.set(API_KEY, first)
    try:
        proxy = make_proxy([anthropic(f"http://{upstream.pair}")], None)
        client = SocketConnection(proxy.paths.socket, "ENDPOINT claude-code")
        assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200
        store.set(API_KEY, second)
        assert call(client, "POST", "/v1/messages", body=b"{}")[0] == 200
        store.delete(API_KEY)
        status, body, _ = call(client, "POST", "/v1/messages", body=b"{}")
        assert status == 401 and "not in the keyring" in body.decode()
        assert [headers_of(r, "x-api-key") for r in upstream.requests] == [[first], [second]]
    finally:
        for name in store.names():
            store.delete(name)


# --- The policy file and the launch spec --------------------------------------------------------


def test_policy_files_carry_endpoints_and_old_ones_still_load(tmp_path: Path) -> None:
    endpoint = Endpoint("codex", "https://api.openai.com/v1", "OPENAI_API_KEY", "Authorization",
                        "Bearer {}")  # fmt: skip
    path = tmp_path / "policy.json"
    egress.write_policy(path, ["example.org:443"], "s", [endpoint])
    policy = egress.load_policy(path)
    assert policy.endpoints == (endpoint,) and policy.allowlist.entries == ["example.org:443"]
    assert json.loads(path.read_text())["format"] == 2
    assert endpoint.header == "authorization" and endpoint.host_header == "api.openai.com"

    path.write_text(json.dumps({"format": 1, "session": "old", "allow": ["example.org:443"]}))
    old = egress.load_policy(path)
    assert old.endpoints == () and old.session == "old"
    assert egress.read_policy(path)[1] == "old"

    # Replacing the allowlist alone keeps the endpoints; giving them replaces them.
    paths = EgressPaths.for_session(tmp_path / "egress", "keep")
    paths.make_dirs()
    egress.write_policy(paths.policy_file, [], "keep", [endpoint])
    egress.set_allowlist(paths.socket, ["example.org:443"])
    assert egress.load_policy(paths.policy_file).endpoints == (endpoint,)
    egress.set_allowlist(paths.socket, [], endpoints=[])
    assert egress.load_policy(paths.policy_file).endpoints == ()


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "bad name"},
        {"upstream": "ftp://example.org"},
        {"upstream": "https://user:pw@example.org"},
        {"upstream": "https://example.org/?q=1"},
        {"header": "x api key"},
        {"template": "Bearer"},
        {"template": "Bearer {0} {1}"},
        {"strip": "authorization"},
    ],
)
def test_a_malformed_endpoint_is_refused_up_front(fields: dict[str, Any]) -> None:
    given = {
        "name": "claude-code",
        "upstream": "https://api.anthropic.com",
        "secret": API_KEY,
        "header": "x-api-key",
        "template": "{}",
        **fields,
    }
    with pytest.raises(EndpointError):
        Endpoint(**given)


def test_the_forwarder_serves_each_endpoint_on_its_own_port(tmp_path: Path) -> None:
    endpoints = [anthropic("https://api.anthropic.com"), "codex"]
    argv = egress.forwarder_argv("/cairn/bin/egress-forward.py", proxy_port=3128,
                                 endpoints=endpoints)  # fmt: skip
    assert argv[-4:] == ["--endpoint", "claude-code=3180", "--endpoint", "codex=3181"]
    assert egress.endpoint_url(0) == "http://127.0.0.1:3180"
    assert egress.endpoint_url(1) == "http://127.0.0.1:3181"
    with pytest.raises(ValueError, match="3180"):
        egress.forwarder_argv("f.py", forwards={3180: "127.0.0.1:3180"}, endpoints=["codex"])


def test_the_forwarder_relays_an_endpoint_port_to_the_socket(
    make_proxy: ProxyMaker, upstream: Upstream, tmp_path: Path
) -> None:
    import subprocess

    key = real_key()
    proxy = make_proxy([anthropic(f"http://{upstream.pair}")], FakeKeyring(**{API_KEY: key}).get)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    forwarder = subprocess.Popen(
        [sys.executable, str(egress.FORWARDER_SCRIPT), "--socket", str(proxy.paths.socket),
         "--endpoint", f"claude-code={port}"],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and forwarder.poll() is None
                time.sleep(0.05)
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
        assert (
            call(client, "POST", "/v1/messages", body=b"{}", headers={"x-api-key": "p"})[0] == 200
        )
        assert headers_of(upstream.requests[0], "x-api-key") == [key]
    finally:
        forwarder.terminate()
        forwarder.wait(WAIT_S)
