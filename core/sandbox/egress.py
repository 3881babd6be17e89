"""The `allowlist` network policy's egress proxy: a host process serving one sandbox's unix socket
that connects only to allowlisted host:port pairs and logs every decision as one JSON line.

Owns destination matching, the socket protocol spoken by the in-sandbox forwarder
(resources/sandbox/egress-forward.py), the model endpoints that add a credential on the host side,
and the detached proxy process (start, find, reload, stop). Leaves the allowlist's and the
endpoints' contents to the policy and the engines, the secrets to the OS keyring
(core.credentials), and mounts and launch specs to the sandbox backends. start_detached runs this
module as its own process (`python -m core.sandbox.egress`, or the bundle's module switch), so it
imports little: the standard library, core.errors, core.locks, core.launch and core.redact; the
keyring (core.credentials) only once a model endpoint is used.

Layout, per sandbox session (`egress/<session>/` under the data folder):

    egress/<session>/                 0700, never mounted: egress.pid (flock held while serving),
                                      egress-policy.json, egress.stderr
    egress/<session>/sandbox/         0755, bind-mounted read-only at /cairn/egress
    egress/<session>/sandbox/egress.sock   0666, so the sandbox user (another uid) can connect

Only the socket is visible to the sandbox: with the sandbox user's uid equal to the host user's,
file modes protect nothing, so the policy and pid files live outside the mount. The folder, not
the socket file, is mounted, so a restarted proxy's new socket is what the running sandbox sees.

Protocol on the socket: the first line names what the connection is for, then bytes follow.
    FORWARD <host>:<port>\\n   relay there if allowed; closed without a reply if not
    PROXY\\n                   an HTTP proxy request follows: `CONNECT host:port` or an
                              absolute-form `GET http://host[:port]/...`; refusals get 403
    ENDPOINT <name>\\n         HTTP/1.1 requests for the model endpoint `name` follow (keep-alive):
                              each goes to that endpoint's upstream only, with the credential read
                              from the keyring for that request put into its header
A connection that closes before sending a byte is a liveness probe and is not logged.

A model endpoint is how an engine reaches its model without its key entering the sandbox: the
engine's variable holds a placeholder, its base URL is `endpoint_url(i)` (the forwarder's port for
the endpoint), and the proxy replaces the placeholder header with the real credential, read from
the keyring at each request so a rotated or revoked key applies to the next one. Each use is one
`credential` line in the log (endpoint, host, secret name, time; never the value). The allowlist
does not apply to an endpoint's upstream, and the other modes never add a credential.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as _dt
import fcntl
import ipaddress
import json
import os
import re
import signal
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from core.errors import CairnError
from core.launch import python_command, resource_path, stop_process
from core.locks import flock_holder_pid
from core.redact import get_redactor

SANDBOX_EGRESS_DIR = "/cairn/egress"
SOCKET_NAME = "egress.sock"
SANDBOX_SOCKET = f"{SANDBOX_EGRESS_DIR}/{SOCKET_NAME}"
FORWARDER_SCRIPT = resource_path("sandbox", "egress-forward.py")
# Addresses that always mean "the sandbox itself", so a proxied client must reach them directly.
LOCAL_NAMES = ("127.0.0.1", "localhost", "::1")

POLICY_FORMAT = 2  # 2 added "endpoints"; a file without them (format 1) has none
# What the running proxy speaks, written beside its pid file once it serves: 2 knows ENDPOINT.
PROTOCOL_VERSION = 2
ENDPOINT_PORT_BASE = 3180  # the forwarder's port for endpoint i is ENDPOINT_PORT_BASE + i
ENDPOINT_IDLE_S = 300.0  # a keep-alive client connection waiting this long for a request is closed
ENDPOINT_RESPONSE_TIMEOUT_S = 900.0  # a model may think for minutes before its response head
UPSTREAM_REUSE_S = 30.0  # an idle upstream connection older than this is not reused
SECRET_TIMEOUT_S = 10.0  # a keyring that does not answer (a locked one waiting on a prompt)
HEADER_LIMIT = 1024  # the FORWARD/PROXY line
HTTP_HEAD_LIMIT = 64 * 1024  # request line and headers of a proxy request
HEADER_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 256
RELAY_CHUNK = 64 * 1024
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
_UNIX_PATH_MAX = 107  # sun_path is 108 bytes including the terminating NUL


class EgressError(CairnError):
    """The egress proxy could not be started, found, reconfigured or stopped. A CairnError, so a
    run whose sandbox needs the proxy is parked with this reason rather than left preparing."""


class EgressAlreadyRunning(EgressError):
    """Another proxy holds this socket's pid file."""


class DestinationError(ValueError):
    """A destination that is not a well-formed host:port (refused, never resolved)."""


# --- Destinations -----------------------------------------------------------------------------

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-z]*")
_PORT = re.compile(r"[0-9]{1,5}")
_HEX_PART = re.compile(r"0x[0-9a-f]+")
_OCTAL_PART = re.compile(r"0[0-7]*")
_DECIMAL_PART = re.compile(r"[1-9][0-9]*")


@dataclass(frozen=True, order=True)
class Destination:
    """A normalised host (lower-case name, dotted-quad IPv4 or compressed IPv6) and a port."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def is_ip(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True


def normalize_host(raw: str) -> str:
    """The canonical form of a host as a resolver would read it, or DestinationError.

    Names are lower-cased and lose one trailing dot. Anything a resolver would take as an IPv4
    literal (`127.1`, `0x7f000001`, `017700000001`, `2130706433`) becomes its dotted quad, and
    IPv6 literals become compressed form, with IPv4-mapped ones (`::ffff:127.0.0.1`) turned into
    the IPv4 address they reach. So `127.1` matches only an entry for `127.0.0.1`, and a name
    matches only the same name. Non-ASCII names are refused: clients send the xn-- form.
    """
    if not isinstance(raw, str) or not raw:
        raise DestinationError("empty host")
    if not raw.isascii():
        raise DestinationError(f"non-ASCII host {raw!r}: use its xn-- form")
    host = raw.lower()
    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]")):
            raise DestinationError(f"unbalanced brackets in host {raw!r}")
        return _normalize_ipv6(host[1:-1], raw)
    if ":" in host:
        return _normalize_ipv6(host, raw)
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise DestinationError(f"invalid host {raw!r}")
    labels = host.split(".")
    # A name whose last label is a number is an IPv4 literal to the resolver (inet_aton rules),
    # so it is parsed as one, strictly, and refused when it is not a valid one.
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        return _normalize_ipv4(labels, raw)
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise DestinationError(f"invalid host name {raw!r}")
    return host


def _normalize_ipv4(parts: list[str], raw: str) -> str:
    if len(parts) > 4:
        raise DestinationError(f"invalid IPv4 literal {raw!r}")
    values = []
    for part in parts:
        # Explicit patterns: int() alone would also take spaces, signs and underscores.
        if _HEX_PART.fullmatch(part):
            values.append(int(part[2:], 16))
        elif _OCTAL_PART.fullmatch(part):
            values.append(int(part, 8))
        elif _DECIMAL_PART.fullmatch(part):
            values.append(int(part, 10))
        else:
            raise DestinationError(f"invalid IPv4 literal {raw!r}")
    # inet_aton: every part but the last is one byte; the last fills the remaining bytes.
    *leading, last = values
    if any(value > 0xFF for value in leading) or last >= 256 ** (4 - len(leading)):
        raise DestinationError(f"invalid IPv4 literal {raw!r}")
    number = last
    for index, value in enumerate(leading):
        number |= value << (8 * (3 - index))
    return str(ipaddress.IPv4Address(number))


def _normalize_ipv6(text: str, raw: str) -> str:
    if "%" in text:
        raise DestinationError(f"IPv6 zone ids are not allowed: {raw!r}")
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        raise DestinationError(f"invalid IPv6 literal {raw!r}") from None
    mapped = address.ipv4_mapped
    return str(mapped) if mapped is not None else address.compressed


def parse_port(text: str) -> int:
    if not _PORT.fullmatch(text or "") or not 0 < int(text) < 65536:
        raise DestinationError(f"invalid port {text!r}")
    return int(text)


def parse_destination(text: str, default_port: int | None = None) -> Destination:
    """`host:port` (IPv6 hosts in brackets) as a normalised Destination, or DestinationError."""
    if not isinstance(text, str) or not text:
        raise DestinationError("empty destination")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise DestinationError(f"unbalanced brackets in {text!r}")
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise DestinationError(f"invalid destination {text!r}")
        port_text = rest[1:] if rest else None
    else:
        if text.count(":") > 1:
            raise DestinationError(f"IPv6 literals need brackets: {text!r}")
        host, sep, port_text = text.partition(":")
        port_text = port_text if sep else None
    if port_text is None:
        if default_port is None:
            raise DestinationError(f"no port in {text!r}")
        port = default_port
    else:
        port = parse_port(port_text)
    return Destination(normalize_host(host), port)


class Allowlist:
    """The set of destinations a proxy may connect to: exact host and port after normalisation."""

    def __init__(self, entries: Iterable[str] = ()):
        if isinstance(entries, str):
            raise TypeError("entries must be a list of host:port strings, not one string")
        destinations = set()
        for entry in entries:
            destination = parse_destination(entry)
            if destination.is_ip and ipaddress.ip_address(destination.host).is_unspecified:
                raise DestinationError(f"{entry!r} is not a destination (it means any address)")
            destinations.add(destination)
        self._destinations = frozenset(destinations)

    @property
    def entries(self) -> list[str]:
        return [str(destination) for destination in sorted(self._destinations)]

    def allows(self, destination: Destination) -> bool:
        return destination in self._destinations

    def __len__(self) -> int:
        return len(self._destinations)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Allowlist) and other._destinations == self._destinations

    def __repr__(self) -> str:
        return f"Allowlist({self.entries!r})"


@dataclass(frozen=True)
class ProxyRequest:
    """What an HTTP proxy request asks for: a tunnel (CONNECT) or one absolute-form request."""

    kind: str  # "connect" or "http"
    destination: Destination
    requested: str  # the authority exactly as the client wrote it
    head: bytes  # for "http": the request head to send upstream; for "connect": b""


class ProxyRequestError(ValueError):
    """A proxy request that is malformed or names an invalid destination (answered with a 4xx)."""

    def __init__(self, status: int, message: str, requested: str = ""):
        super().__init__(message)
        self.status = status
        self.requested = requested


_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
}


def parse_proxy_request(head: bytes) -> ProxyRequest:
    """Parse a proxy request head (request line and headers, up to the blank line).

    An absolute-form request is rewritten to origin form with `Connection: close`, so that one
    client connection reaches exactly one destination.
    """
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise ProxyRequestError(400, "request head is not ASCII") from None
    lines = text.split("\r\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ProxyRequestError(400, "empty request")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        raise ProxyRequestError(400, f"malformed request line {lines[0][:200]!r}")
    method, target, version = parts
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or line[0] in " \t":
            raise ProxyRequestError(400, f"malformed header line {line[:200]!r}")
        headers.append((name, value.strip()))

    if method.upper() == "CONNECT":
        if "@" in target or "/" in target:
            raise ProxyRequestError(400, "CONNECT needs host:port", target)
        return ProxyRequest("connect", _destination_or_400(target, None), target, b"")

    scheme, sep, rest = target.partition("://")
    if not sep:
        raise ProxyRequestError(
            400, "not a proxy request (use an absolute http:// URL or CONNECT)", target
        )
    if scheme.lower() != "http":
        raise ProxyRequestError(400, f"{scheme}:// needs CONNECT", target)
    split = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
    authority, path = rest[:split], rest[split:]
    if "@" in authority:
        raise ProxyRequestError(400, "user information in the URL is not allowed", authority)
    destination = _destination_or_400(authority, 80)
    path = path.split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path

    named_by_connection = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }
    dropped = _HOP_BY_HOP | named_by_connection | {"host"}
    # The Host header is replaced by the URL's authority (as RFC 9112 asks of a proxy), so a
    # request to an allowed address cannot name another virtual host served at that address.
    kept = [("Host", authority)] + [(n, v) for n, v in headers if n.lower() not in dropped]
    kept.append(("Connection", "close"))
    upstream = [f"{method} {path} {version}"] + [f"{n}: {v}" for n, v in kept]
    return ProxyRequest(
        "http", destination, authority, ("\r\n".join(upstream) + "\r\n\r\n").encode("ascii")
    )


def _destination_or_400(text: str, default_port: int | None) -> Destination:
    try:
        return parse_destination(text, default_port)
    except DestinationError as exc:
        raise ProxyRequestError(400, str(exc), text) from None


# --- Model endpoints ------------------------------------------------------------------------------

_ENDPOINT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
DEFAULT_STRIP = ("authorization", "x-api-key")


class EndpointError(ValueError):
    """A model endpoint that cannot be served as given (refused before anything starts)."""


@dataclass(frozen=True)
class Endpoint:
    """A model endpoint served on the socket as `ENDPOINT <name>`: requests go to `upstream` (the
    real base URL, e.g. `https://api.anthropic.com` or `http://127.0.0.1:8080` for a local model
    server) with the headers in `strip` dropped and `header: template.format(<secret>)` set, the
    secret read from the keyring at each request. Name it after the engine: its errors tell the
    person to run `cairnctl engine login <name>`."""

    name: str
    upstream: str
    secret: str
    header: str
    template: str = "{}"
    strip: tuple[str, ...] = DEFAULT_STRIP

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _ENDPOINT_NAME.fullmatch(self.name):
            raise EndpointError(f"invalid endpoint name {self.name!r}")
        if not isinstance(self.secret, str) or not _ENDPOINT_NAME.fullmatch(self.secret):
            raise EndpointError(f"invalid secret name {self.secret!r} for endpoint {self.name}")
        if not isinstance(self.header, str) or not _HEADER_NAME.fullmatch(self.header):
            raise EndpointError(f"invalid header name {self.header!r} for endpoint {self.name}")
        object.__setattr__(self, "header", self.header.lower())
        if isinstance(self.strip, str):
            raise EndpointError("strip must be a list of header names, not one string")
        strip = tuple(dict.fromkeys(str(name).lower() for name in self.strip))
        if not all(_HEADER_NAME.fullmatch(name) for name in strip):
            raise EndpointError(f"invalid header name in strip for endpoint {self.name}")
        object.__setattr__(self, "strip", strip)
        try:
            probe = self.template.format("value")
        except (AttributeError, IndexError, KeyError, ValueError):
            raise EndpointError(
                f"invalid header template {self.template!r} for endpoint {self.name}: "
                "use {} where the secret goes"
            ) from None
        if "value" not in probe or any(c in probe for c in "\r\n\0"):
            raise EndpointError(
                f"invalid header template {self.template!r} for endpoint {self.name}"
            )
        self._parsed()  # refuses a bad upstream now, not at the first request

    def _parsed(self) -> tuple[str, Destination, str]:
        try:
            url = urlsplit(self.upstream)
            port = url.port
        except (TypeError, ValueError) as exc:
            raise EndpointError(f"invalid upstream {self.upstream!r}: {exc}") from None
        if url.scheme not in ("http", "https") or not url.hostname:
            raise EndpointError(
                f"invalid upstream {self.upstream!r} for endpoint {self.name}: "
                "use an http:// or https:// URL"
            )
        if url.username is not None or url.password is not None or url.query or url.fragment:
            raise EndpointError(
                f"invalid upstream {self.upstream!r} for endpoint {self.name}: "
                "no user, query or fragment"
            )
        host = url.hostname
        try:
            destination = Destination(
                normalize_host(f"[{host}]" if ":" in host else host),
                port or (443 if url.scheme == "https" else 80),
            )
        except DestinationError as exc:
            raise EndpointError(f"invalid upstream host for endpoint {self.name}: {exc}") from None
        return url.scheme, destination, url.path.rstrip("/")

    @property
    def scheme(self) -> str:
        return self._parsed()[0]

    @property
    def destination(self) -> Destination:
        """The upstream's normalised host and port: the only place this endpoint connects to."""
        return self._parsed()[1]

    @property
    def base_path(self) -> str:
        """The upstream URL's path without its trailing slash ("" or e.g. "/v1")."""
        return self._parsed()[2]

    @property
    def host_header(self) -> str:
        scheme, destination, _ = self._parsed()
        host = f"[{destination.host}]" if ":" in destination.host else destination.host
        default = 443 if scheme == "https" else 80
        return host if destination.port == default else f"{host}:{destination.port}"

    def upstream_path(self, target: str) -> str:
        """The path to ask the upstream for: its base path joined with the request's
        (`https://api.openai.com/v1` + `/responses` is `/v1/responses`)."""
        return self.base_path + target

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "upstream": self.upstream,
            "secret": self.secret,
            "header": self.header,
            "template": self.template,
            "strip": list(self.strip),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Endpoint:
        if not isinstance(data, Mapping):
            raise EndpointError("an endpoint must be an object")
        try:
            return cls(
                name=data["name"],
                upstream=data["upstream"],
                secret=data["secret"],
                header=data["header"],
                template=data.get("template", "{}"),
                strip=tuple(data.get("strip", DEFAULT_STRIP)),
            )
        except (KeyError, TypeError) as exc:
            raise EndpointError(f"incomplete endpoint {data!r}: {exc}") from None


def _check_endpoints(endpoints: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
    if isinstance(endpoints, Endpoint):
        raise TypeError("endpoints must be a list of Endpoint, not one Endpoint")
    checked = tuple(endpoints)
    for endpoint in checked:
        if not isinstance(endpoint, Endpoint):
            raise TypeError(f"not an Endpoint: {endpoint!r}")
    names = [endpoint.name for endpoint in checked]
    if len(set(names)) != len(names):
        raise EndpointError(f"endpoint names must differ: {names}")
    return checked


def endpoint_port(index: int) -> int:
    """The loopback port in the sandbox where the forwarder serves the endpoint at `index`."""
    if index < 0:
        raise ValueError(f"invalid endpoint index {index}")
    return ENDPOINT_PORT_BASE + index


def endpoint_url(index: int) -> str:
    """The base URL an engine in the sandbox uses for the endpoint at `index` (in the order given
    to the proxy and to forwarder_argv). It stands for the upstream's base URL: a request for
    `endpoint_url(i) + "/responses"` goes to `<upstream>/responses`."""
    return f"http://127.0.0.1:{endpoint_port(index)}"


def credential_uses(log_path: os.PathLike | str) -> list[dict[str, Any]]:
    """The `credential` lines of a session's egress log, oldest first (empty when there is none)."""
    try:
        with open(log_path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return []
    uses = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        if isinstance(record, dict) and record.get("event") == "credential":
            uses.append(record)
    return uses


# --- Files beside the socket --------------------------------------------------------------------


@dataclass(frozen=True)
class EgressPaths:
    """Where one proxy's files live, all derived from its socket path (see the module docstring)."""

    socket: Path

    @classmethod
    def for_session(cls, egress_root: os.PathLike | str, session: str) -> EgressPaths:
        if not session or "/" in session or session in (".", ".."):
            raise ValueError(f"invalid session name {session!r}")
        return cls(Path(egress_root) / session / "sandbox" / SOCKET_NAME)

    def __post_init__(self) -> None:
        object.__setattr__(self, "socket", Path(os.path.abspath(self.socket)))

    @property
    def sandbox_dir(self) -> Path:
        """The folder to bind-mount (read-only) at SANDBOX_EGRESS_DIR: it holds the socket only."""
        return self.socket.parent

    @property
    def state_dir(self) -> Path:
        return self.socket.parent.parent

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.socket.stem}.pid"

    @property
    def policy_file(self) -> Path:
        return self.state_dir / f"{self.socket.stem}-policy.json"

    @property
    def tunnel_pid_file(self) -> Path:
        """The pid file of the tunnel carrying a remote sandbox's connections to this proxy
        (core.sandbox.egress_tunnel), locked while it runs."""
        return self.state_dir / "tunnel.pid"

    @property
    def stderr_file(self) -> Path:
        return self.state_dir / f"{self.socket.stem}.stderr"

    def make_dirs(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        self.sandbox_dir.mkdir(exist_ok=True)
        # The sandbox user is another uid: it must be able to reach the socket in this folder.
        os.chmod(self.sandbox_dir, 0o755)


@dataclass(frozen=True)
class PolicyFile:
    """What a policy file holds."""

    allowlist: Allowlist
    session: str | None
    endpoints: tuple[Endpoint, ...] = ()


def load_policy(path: os.PathLike | str) -> PolicyFile:
    """The whole policy file; ValueError/OSError when unusable. A file of format 1 (written before
    endpoints existed) has none."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or not isinstance(data.get("allow"), list):
        raise ValueError(f"{path}: expected an object with an 'allow' list")
    if not all(isinstance(entry, str) for entry in data["allow"]):
        raise ValueError(f"{path}: 'allow' must hold host:port strings")
    session = data.get("session")
    raw_endpoints = data.get("endpoints") or []
    if not isinstance(raw_endpoints, list):
        raise ValueError(f"{path}: 'endpoints' must be a list")
    endpoints = _check_endpoints(Endpoint.from_dict(entry) for entry in raw_endpoints)
    return PolicyFile(
        Allowlist(data["allow"]), session if isinstance(session, str) else None, endpoints
    )


def read_policy(path: os.PathLike | str) -> tuple[Allowlist, str | None]:
    """The allowlist and session name in a policy file; ValueError/OSError when unusable."""
    policy = load_policy(path)
    return policy.allowlist, policy.session


def write_policy(
    path: os.PathLike | str,
    allow: Iterable[str],
    session: str | None = None,
    endpoints: Iterable[Endpoint] = (),
) -> Allowlist:
    """Validate `allow` and `endpoints` and replace the policy file atomically (a reader sees old
    or new, whole)."""
    allowlist = Allowlist(allow)
    checked = _check_endpoints(endpoints)
    path = Path(path)
    document = {
        "format": POLICY_FORMAT,
        "session": session,
        "allow": allowlist.entries,
        "endpoints": [endpoint.to_dict() for endpoint in checked],
    }
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return allowlist


# --- The proxy --------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _EventLog:
    """Appends one JSON object per line; reopened on reload so the file can be rotated."""

    def __init__(self, path: os.PathLike | str | None, session: str):
        self.path = Path(path) if path is not None else None
        self.session = session
        self._handle: TextIO | None = None
        self._lock = threading.Lock()
        self.reopen()

    def reopen(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # Held until close() or the next reopen(), not for one block.
                self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, event: str, **fields: object) -> None:
        record = {"time": _now(), "session": self.session, "event": event, **fields}
        line = json.dumps(record, separators=(",", ":"), sort_keys=False) + "\n"
        with self._lock:
            if self._handle is not None:
                self._handle.write(line)
                self._handle.flush()

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None


class _Connection:
    def __init__(self, kind: str):
        self.kind = kind
        self.started = time.monotonic()
        self.destination: Destination | None = None
        self.endpoint: str | None = None
        self.requests = 0
        self.requested: str | None = None
        self.bytes_up = 0
        self.bytes_down = 0
        self.relay: asyncio.Task | None = None
        self.revoked = False


class _Refused(Exception):
    def __init__(self, reason: str, status: int = 403):
        super().__init__(reason)
        self.reason = reason
        self.status = status


def _unix_path(path: Path, dir_fd: int | None) -> str:
    """A path to use for bind/connect: through /proc/self/fd when the real one is too long."""
    text = str(path)
    if len(os.fsencode(text)) <= _UNIX_PATH_MAX or dir_fd is None:
        return text
    return f"/proc/self/fd/{dir_fd}/{path.name}"


def _connect_unix(path: Path, timeout: float) -> socket.socket:
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(_unix_path(path, dir_fd))
        except BaseException:
            sock.close()
            raise
        return sock
    finally:
        os.close(dir_fd)


_FileStamp = tuple[int, int, int, int]


def _file_stamp(path: Path) -> _FileStamp | None:
    """What changes when the file is replaced or rewritten: device, inode, size, mtime."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class EgressProxy:
    """Serves one socket; connects only to destinations its allowlist holds.

    With `policy_path`, the allowlist is that file: it is re-read when `reload()` is called (SIGHUP
    in the detached process) and whenever the file has changed at the start of a connection, so a
    tightened policy applies to every connection opened after the file is replaced. A policy file
    that cannot be read refuses everything. A reload also cuts live connections the new policy no
    longer allows. Without `policy_path`, the allowlist is `allow`, changed by `set_allowlist`.
    """

    def __init__(
        self,
        socket_path: os.PathLike | str,
        allow: Iterable[str] | None = None,
        *,
        policy_path: os.PathLike | str | None = None,
        log_path: os.PathLike | str | None = None,
        session: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        endpoints: Iterable[Endpoint] | None = None,
        secrets: Callable[[str], str] | None = None,
    ):
        self.paths = EgressPaths(Path(socket_path))
        self.policy_path = Path(policy_path) if policy_path is not None else None
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self._policy_stamp: _FileStamp | None = None
        self._policy_session: str | None = None
        self._endpoints: dict[str, Endpoint] = {}
        if self.policy_path is not None:
            if allow is not None or endpoints is not None:
                write_policy(self.policy_path, allow or (), session, endpoints or ())
            policy = self._read_policy_file(self.policy_path, fail_closed=False)
            self._allowlist = policy.allowlist
            self._endpoints = {endpoint.name: endpoint for endpoint in policy.endpoints}
        else:
            self._allowlist = Allowlist(allow or ())
            self._endpoints = {e.name: e for e in _check_endpoints(endpoints or ())}
        # `secrets(name)` gives a secret's current value; by default the OS keyring, read on a
        # thread of its own (a keyring call blocks, and a locked one may wait on a prompt).
        self._secrets = secrets or _keyring_secret
        self._secret_thread: ThreadPoolExecutor | None = None
        self._tls: ssl.SSLContext | None = None
        self.session = session or self._policy_session or self.paths.state_dir.name
        self.log = _EventLog(log_path, self.session)
        self._listener: socket.socket | None = None
        self._socket_inode: tuple[int, int] | None = None
        self._connections: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._thread_error: BaseException | None = None

    # Policy -------------------------------------------------------------------------------------

    @property
    def allowlist(self) -> Allowlist:
        return self._allowlist

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(self._endpoints.values())

    def _read_policy_file(self, path: Path, *, fail_closed: bool) -> PolicyFile:
        stamp = _file_stamp(path)
        try:
            policy = load_policy(path)
        except (OSError, ValueError) as exc:
            if not fail_closed:
                raise EgressError(f"cannot read the egress policy {path}: {exc}") from None
            self._policy_stamp = stamp
            self.log.write("policy_error", error=str(exc), allow=[], endpoints=[])
            return PolicyFile(Allowlist(), None)
        self._policy_stamp = stamp
        self._policy_session = policy.session
        return policy

    def _refresh_if_changed(self) -> None:
        path = self.policy_path
        if path is not None and _file_stamp(path) != self._policy_stamp:
            self._apply(
                self._read_policy_file(path, fail_closed=True), reason="policy file changed"
            )

    def _apply(self, policy: PolicyFile, *, reason: str) -> None:
        allowlist = policy.allowlist
        endpoints = {endpoint.name: endpoint for endpoint in policy.endpoints}
        changed = allowlist != self._allowlist or endpoints != self._endpoints
        self._allowlist = allowlist
        self._endpoints = endpoints
        if changed:
            self.log.write(
                "policy", reason=reason, allow=allowlist.entries, endpoints=sorted(endpoints)
            )
        for connection in list(self._connections):
            if connection.endpoint is not None:
                # An endpoint connection checks its endpoint at each request; one that is gone
                # is cut at once, so no request of a removed endpoint is in flight after this.
                revoked = connection.endpoint not in endpoints
            else:
                revoked = connection.destination is not None and not allowlist.allows(
                    connection.destination
                )
            if revoked:
                connection.revoked = True
                if connection.relay is not None:
                    connection.relay.cancel()

    def reload(self) -> None:
        """Re-read the policy file (and reopen the log); safe to call from any thread."""

        def do_reload() -> None:
            self.log.reopen()
            if self.policy_path is not None:
                self._apply(
                    self._read_policy_file(self.policy_path, fail_closed=True), reason="reload"
                )

        self._call_in_loop(do_reload)

    def set_allowlist(
        self, allow: Iterable[str], endpoints: Iterable[Endpoint] | None = None
    ) -> None:
        """Replace the allowlist, and the endpoints when given (through the policy file when
        there is one); any thread."""
        allowlist = Allowlist(allow)
        kept = self.endpoints if endpoints is None else _check_endpoints(endpoints)
        if self.policy_path is not None:
            write_policy(self.policy_path, allowlist.entries, self.session, kept)
            self.reload()
        else:
            policy = PolicyFile(allowlist, self.session, kept)
            self._call_in_loop(lambda: self._apply(policy, reason="set"))

    def _call_in_loop(self, function: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            function()
            return
        if _running_loop() is loop:
            function()
            return
        done = threading.Event()

        def run() -> None:
            try:
                function()
            finally:
                done.set()

        loop.call_soon_threadsafe(run)
        done.wait(5.0)

    # Listening ----------------------------------------------------------------------------------

    def bind(self) -> None:
        """Create the listening socket (replacing a stale one), connectable by any uid."""
        self.paths.make_dirs()
        path = self.paths.socket
        try:
            existing = os.lstat(path)
        except FileNotFoundError:
            existing = None
        if existing is not None:
            if not stat.S_ISSOCK(existing.st_mode):
                raise EgressError(
                    f"{path} exists and is not a socket",
                    hint="remove it: only the proxy's socket belongs there",
                )
            os.unlink(path)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(_unix_path(path, dir_fd))
            os.chmod(path, 0o666)
            listener.listen(64)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        finally:
            os.close(dir_fd)
        st = os.lstat(path)
        self._socket_inode = (st.st_dev, st.st_ino)
        self._listener = listener

    def _unlink_own_socket(self) -> None:
        try:
            st = os.lstat(self.paths.socket)
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) == self._socket_inode:
            os.unlink(self.paths.socket)

    async def serve(
        self, *, handle_signals: bool = False, ready: Callable[[], None] | None = None
    ) -> None:
        """Serve until `close()` (or SIGTERM/SIGINT with handle_signals; SIGHUP then reloads).
        `ready()` is called once connections are accepted and the signal handlers are in place."""
        if self._listener is None:
            self.bind()
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        if handle_signals:
            self._loop.add_signal_handler(signal.SIGHUP, self.reload)
            self._loop.add_signal_handler(signal.SIGTERM, self._stopping.set)
            self._loop.add_signal_handler(signal.SIGINT, self._stopping.set)
        server = await asyncio.start_unix_server(
            self._handle, sock=self._listener, limit=HTTP_HEAD_LIMIT
        )
        self.log.write(
            "start", pid=os.getpid(), socket=str(self.paths.socket), allow=self._allowlist.entries
        )
        if ready is not None:
            ready()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for connection in list(self._connections):
                if connection.relay is not None:
                    connection.relay.cancel()
            await server.wait_closed()
            self._unlink_own_socket()
            self.log.write("stop", pid=os.getpid())
            self._listener = None
            if self._secret_thread is not None:
                # A keyring call stuck on a prompt must not keep the process from ending.
                self._secret_thread.shutdown(wait=False, cancel_futures=True)
                self._secret_thread = None

    def start(self) -> EgressProxy:
        """Serve from a background thread of this process; returns once the socket listens."""
        ready = threading.Event()

        def run() -> None:
            try:
                asyncio.run(self.serve(ready=ready.set))
            except BaseException as exc:  # noqa: BLE001 - reported to the caller of start()
                self._thread_error = exc
                ready.set()

        self.bind()
        self._thread = threading.Thread(
            target=run, name=f"egress-proxy-{self.session}", daemon=True
        )
        self._thread.start()
        ready.wait(START_TIMEOUT_S)
        if self._thread_error is not None:
            raise EgressError(f"egress proxy failed to start: {self._thread_error}")
        return self

    def close(self) -> None:
        """Stop serving (from another thread than the proxy's), remove the socket, close the log."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop has just finished
                loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            self._unlink_own_socket()
        self.log.close()

    def __enter__(self) -> EgressProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Connections --------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection("unknown")
        upstream: asyncio.StreamWriter | None = None
        decision, reason, error = None, None, None
        try:
            try:
                line = await asyncio.wait_for(reader.readline(), HEADER_TIMEOUT_S)
            except (TimeoutError, ValueError, ConnectionError):
                line = b"?"  # a stalled or oversized header is refused like a malformed one
            if not line:
                return  # a liveness probe
            if len(self._connections) >= self.max_connections:
                raise _Refused("too many connections", 503)
            text = line.rstrip(b"\r\n")
            if len(line) > HEADER_LIMIT or not line.endswith(b"\n"):
                raise _Refused("malformed header line")
            if text.startswith(b"FORWARD "):
                connection.kind = "forward"
                requested = text[len(b"FORWARD ") :].decode("ascii", "replace")
                connection.requested = requested
                try:
                    destination = parse_destination(requested)
                except DestinationError as exc:
                    raise _Refused(f"invalid destination: {exc}") from None
                connection.destination = destination
                self._check(destination)
                upstream_reader, upstream = await self._open_upstream(destination)
                self._check(destination)  # the policy may have changed while connecting
                first = b""
            elif text == b"PROXY":
                connection.kind = "proxy"
                request = await self._read_proxy_request(reader, connection)
                connection.kind = request.kind
                connection.destination = request.destination
                self._check(request.destination)
                upstream_reader, upstream = await self._open_upstream(
                    request.destination, writer=writer
                )
                self._check(request.destination)
                if request.kind == "connect":
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    first = b""
                else:
                    first = request.head
            elif text.startswith(b"ENDPOINT "):
                connection.kind = "endpoint"
                name = text[len(b"ENDPOINT ") :].decode("ascii", "replace")
                connection.requested = name[:200]
                self._refresh_if_changed()
                endpoint = self._endpoints.get(name)
                if endpoint is None:
                    # The request is read first, so the client gets the answer, not a broken pipe.
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
                    raise _Refused("no such endpoint")
                connection.endpoint = name
                connection.destination = endpoint.destination
                decision = "allowed"
                self._connections.add(connection)
                connection.relay = asyncio.ensure_future(
                    self._serve_endpoint(name, reader, writer, connection)
                )
                try:
                    await connection.relay
                except asyncio.CancelledError:
                    if not connection.revoked:
                        raise
                except (ConnectionError, OSError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
                return
            else:
                connection.requested = text[:200].decode("ascii", "replace")
                raise _Refused("malformed header line")

            decision = "allowed"
            self._connections.add(connection)
            if first:
                upstream.write(first)
                connection.bytes_up += len(first)
            connection.relay = asyncio.ensure_future(
                self._relay(reader, writer, upstream_reader, upstream, connection)
            )
            try:
                await connection.relay
            except asyncio.CancelledError:
                if not connection.revoked:
                    raise
            except (ConnectionError, OSError) as exc:
                error = f"{type(exc).__name__}: {exc}"
        except _Refused as refusal:
            decision, reason = "refused", refusal.reason
            if connection.kind in ("proxy", "connect", "http"):
                await _send_refusal(writer, refusal.status, refusal.reason)
            elif connection.kind == "endpoint":
                message = f"Cairn: no model endpoint {connection.requested!r} serves this sandbox"
                await _send_json_error(writer, 404, "not_found_error", message)
        except _UpstreamFailed as failure:
            decision, error = "allowed", failure.message
        except (ConnectionError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            decision = decision or "refused"
            reason = reason or "client connection failed"
        finally:
            self._connections.discard(connection)
            for stream in (upstream, writer):
                if stream is not None:
                    stream.close()
            if decision is not None:
                self._log_connection(connection, decision, reason, error)

    def _check(self, destination: Destination) -> None:
        self._refresh_if_changed()
        if not self._allowlist.allows(destination):
            raise _Refused("not in allowlist")

    async def _read_proxy_request(
        self, reader: asyncio.StreamReader, connection: _Connection
    ) -> ProxyRequest:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            raise _Refused("request head too large", 431) from None
        except (TimeoutError, asyncio.IncompleteReadError):
            raise _Refused("incomplete request head", 400) from None
        try:
            request = parse_proxy_request(head)
        except ProxyRequestError as exc:
            connection.requested = exc.requested or None
            raise _Refused(f"bad request: {exc}", exc.status) from None
        connection.requested = request.requested
        return request

    async def _open_upstream(
        self, destination: Destination, *, writer: asyncio.StreamWriter | None = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to an allowed destination. A proxy request's client (`writer`) is answered
        with 502 when that fails; a forward is just closed."""
        try:
            # The checked, normalised host is what gets resolved and connected, never the raw text.
            return await asyncio.wait_for(
                asyncio.open_connection(destination.host, destination.port, limit=RELAY_CHUNK),
                self.connect_timeout,
            )
        except (TimeoutError, OSError) as exc:
            message = f"connect failed: {type(exc).__name__}: {exc}".rstrip(": ")
            if writer is not None:
                await _send_refusal(writer, 502, message, refused=False)
            raise _UpstreamFailed(message) from None

    async def _relay(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
        connection: _Connection,
    ) -> None:
        async def pump(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counter: str
        ) -> None:
            while True:
                data = await reader.read(RELAY_CHUNK)
                if not data:
                    break
                writer.write(data)
                setattr(connection, counter, getattr(connection, counter) + len(data))
                await writer.drain()
            if writer.can_write_eof() and not writer.is_closing():
                with contextlib.suppress(OSError):
                    writer.write_eof()

        up = asyncio.ensure_future(pump(client_reader, upstream_writer, "bytes_up"))
        down = asyncio.ensure_future(pump(upstream_reader, client_writer, "bytes_down"))
        try:
            # Half-closes pass through; a failure on either side ends both.
            done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                error = task.exception()
                if error is not None:
                    raise error
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)

    # Model endpoints ----------------------------------------------------------------------------

    async def _serve_endpoint(
        self,
        name: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: _Connection,
    ) -> None:
        """Serve HTTP/1.1 requests for one endpoint on one client connection, one after another,
        each with the credential as it is in the keyring when that request is made."""
        upstream: _UpstreamConnection | None = None
        first = True
        try:
            while True:
                request = await self._read_endpoint_request(reader, writer, first=first)
                if request is None:
                    return
                first = False
                self._refresh_if_changed()
                endpoint = self._endpoints.get(name)
                if endpoint is None:
                    message = f"Cairn: the model endpoint {name} is no longer configured"
                    await _send_json_error(writer, 404, "not_found_error", message, request)
                    return
                connection.requests += 1
                keep, upstream = await self._forward_request(
                    endpoint, request, reader, writer, upstream, connection
                )
                if not keep:
                    return
        finally:
            if upstream is not None:
                upstream.close()

    async def _read_endpoint_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, first: bool
    ) -> _HttpRequest | None:
        """The next request on a keep-alive connection; None when the client is done (closed,
        or idle too long). A malformed request is answered and ends the connection."""
        try:
            head = await asyncio.wait_for(
                reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S if first else ENDPOINT_IDLE_S
            )
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                await _send_json_error(writer, 400, "invalid_request_error", "incomplete request")
            return None
        except asyncio.LimitOverrunError:
            message = "Cairn: the request head is too large"
            await _send_json_error(writer, 431, "invalid_request_error", message)
            return None
        except (TimeoutError, ConnectionError):
            return None
        try:
            return _parse_endpoint_request(head)
        except _HttpError as exc:
            await _send_json_error(writer, exc.status, "invalid_request_error", f"Cairn: {exc}")
            return None

    async def _forward_request(
        self,
        endpoint: Endpoint,
        request: _HttpRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: _UpstreamConnection | None,
        connection: _Connection,
    ) -> tuple[bool, _UpstreamConnection | None]:
        """Send one request upstream with the credential and relay its response. Returns whether
        the client connection can carry another request, and the upstream connection to reuse."""
        value, problem = await self._current_secret(endpoint)
        if value is None:
            self.log.write(
                "credential_error",
                endpoint=endpoint.name,
                host=endpoint.destination.host,
                secret=endpoint.secret,
                error=problem,
            )
            await _refuse(reader, writer, request, 401, "authentication_error", problem)
            return False, upstream
        if upstream is not None and not upstream.reusable(endpoint):
            upstream.close()
            upstream = None
        if upstream is None:
            try:
                upstream = await self._open_endpoint_upstream(endpoint)
            except _UpstreamFailed as failure:
                self.log.write(
                    "endpoint_error",
                    endpoint=endpoint.name,
                    host=endpoint.destination.host,
                    error=failure.message,
                )
                await _refuse(reader, writer, request, 502, "api_error", failure.message)
                return False, None
        self.log.write(
            "credential",
            endpoint=endpoint.name,
            host=endpoint.destination.host,
            secret=endpoint.secret,
            method=request.method,
            path=endpoint.upstream_path(request.path).split("?", 1)[0][:300],
        )
        head = request.upstream_head(endpoint, value)
        del value
        if request.expects_continue:
            # Answered here, so the upstream sees a plain request and the client sends its body.
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        upstream.writer.write(head)
        try:
            connection.bytes_up += await _relay_body(
                reader, upstream.writer, request.framing, "client"
            )
            response = await self._read_endpoint_response(endpoint, request, upstream)
        except _BodyError as exc:
            upstream.close()
            if exc.side == "client":
                return False, None
            await _send_json_error(writer, 502, "api_error", exc.message(endpoint), request)
            return False, None
        writer.write(response.client_head(keep_alive=request.keep_alive))
        await writer.drain()
        try:
            connection.bytes_down += await _relay_body(
                upstream.reader, writer, response.framing, "upstream"
            )
        except _BodyError:
            # Cut in the middle of a response: the client can only see the connection end.
            upstream.close()
            return False, None
        upstream.used = time.monotonic()
        if not response.keep_alive:
            upstream.close()
            upstream = None
        return request.keep_alive and response.framing != "close", upstream

    async def _current_secret(self, endpoint: Endpoint) -> tuple[str | None, str]:
        """(the value, "") or (None, why it cannot be had, with the fix). Read now, never cached:
        a rotated or revoked secret applies to this request."""
        if self._secret_thread is None:
            self._secret_thread = ThreadPoolExecutor(1, thread_name_prefix="egress-keyring")
        loop = asyncio.get_running_loop()
        login = f"`cairnctl engine login {endpoint.name}`"
        what = f"Cairn: the credential {endpoint.secret} for the model endpoint {endpoint.name}"
        try:
            value = await asyncio.wait_for(
                loop.run_in_executor(self._secret_thread, self._secrets, endpoint.secret),
                SECRET_TIMEOUT_S,
            )
        except TimeoutError:
            return None, (
                f"{what} cannot be read: the keyring did not answer within "
                f"{SECRET_TIMEOUT_S:g} s (is it locked?); unlock your desktop keyring and try again"
            )
        except Exception as exc:  # noqa: BLE001 - every keyring failure becomes the client's answer
            return None, _redact(_secret_problem(what, login, exc))
        if not isinstance(value, str) or not value:
            return None, f"{what} is not in the keyring; sign in with {login}"
        if any(c in value for c in "\r\n\0") or not _is_latin1(endpoint.template.format(value)):
            return None, (
                f"{what} holds characters a request header cannot carry; "
                f"store it again with {login}"
            )
        get_redactor().register(endpoint.secret, value)
        return value, ""

    async def _open_endpoint_upstream(self, endpoint: Endpoint) -> _UpstreamConnection:
        destination = endpoint.destination
        tls: ssl.SSLContext | None = None
        if endpoint.scheme == "https":
            if self._tls is None:
                # Verifies the certificate and the name; honours SSL_CERT_FILE / SSL_CERT_DIR.
                self._tls = ssl.create_default_context()
            tls = self._tls
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    destination.host,
                    destination.port,
                    ssl=tls,
                    server_hostname=destination.host if tls is not None else None,
                    limit=HTTP_HEAD_LIMIT,
                ),
                self.connect_timeout,
            )
        except ssl.SSLCertVerificationError as exc:
            reason = exc.verify_message or exc.reason or str(exc)
            raise _UpstreamFailed(
                f"Cairn: the model endpoint {endpoint.name} at {endpoint.upstream} was refused: "
                f"its TLS certificate is not trusted ({reason}); for a private certificate "
                "authority, set SSL_CERT_FILE for Cairn"
            ) from None
        except (TimeoutError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            raise _UpstreamFailed(
                _redact(
                    f"Cairn: cannot reach the model endpoint {endpoint.name} at "
                    f"{endpoint.upstream}: {detail}"
                )
            ) from None
        return _UpstreamConnection(endpoint, reader, writer)

    async def _read_endpoint_response(
        self, endpoint: Endpoint, request: _HttpRequest, upstream: _UpstreamConnection
    ) -> _HttpResponse:
        await upstream.writer.drain()
        while True:
            try:
                head = await asyncio.wait_for(
                    upstream.reader.readuntil(b"\r\n\r\n"), ENDPOINT_RESPONSE_TIMEOUT_S
                )
            except asyncio.IncompleteReadError:
                raise _BodyError("upstream", "closed the connection without a response") from None
            except asyncio.LimitOverrunError:
                raise _BodyError("upstream", "sent a response head that is too large") from None
            except TimeoutError:
                raise _BodyError("upstream", "did not answer in time") from None
            except (ConnectionError, OSError) as exc:
                raise _BodyError("upstream", f"{type(exc).__name__}: {exc}") from None
            try:
                response = _parse_response(head, request.method)
            except _HttpError as exc:
                raise _BodyError("upstream", str(exc)) from None
            if response.status >= 200:
                return response
            # 1xx interim answers (100 Continue, 103 Early Hints) are not passed on.

    def _log_connection(
        self, connection: _Connection, decision: str, reason: str | None, error: str | None
    ) -> None:
        destination = str(connection.destination) if connection.destination is not None else None
        # `destination` is the normalised pair that was checked (null when the request named none
        # that parses); `requested` is the text as the client wrote it, when it differs.
        fields: dict[str, object] = {
            "kind": connection.kind,
            "destination": destination,
            "decision": decision,
        }
        if connection.requested is not None and connection.requested != destination:
            fields["requested"] = connection.requested[:300]
        if reason:
            fields["reason"] = reason
        if error:
            fields["error"] = error
        if connection.revoked:
            fields["ended"] = "revoked by policy"
        if connection.endpoint is not None:
            fields["endpoint"] = connection.endpoint
            fields["requests"] = connection.requests
        fields["bytes_up"] = connection.bytes_up
        fields["bytes_down"] = connection.bytes_down
        fields["duration_ms"] = round((time.monotonic() - connection.started) * 1000)
        self.log.write("connection", **fields)


class _UpstreamFailed(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def _send_refusal(
    writer: asyncio.StreamWriter, status: int, reason: str, *, refused: bool = True
) -> None:
    titles = {
        400: "Bad Request",
        403: "Forbidden",
        431: "Request Header Fields Too Large",
        502: "Bad Gateway",
        503: "Service Unavailable",
    }
    body = f"cairn egress: {reason}\n".encode("utf-8", "replace")
    head = (
        f"HTTP/1.1 {status} {titles.get(status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n"
        f"X-Cairn-Egress: {'refused' if refused else 'failed'}\r\n\r\n"
    ).encode("ascii")
    try:
        writer.write(head + body)
        await asyncio.wait_for(writer.drain(), 5.0)
    except (TimeoutError, OSError):
        pass


# --- Model endpoints: HTTP/1.1 on both sides ------------------------------------------------------

# Headers that belong to one connection, never forwarded (RFC 9110 7.6.1), and those the proxy sets
# itself for the upstream.
_ENDPOINT_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_SET_UPSTREAM = frozenset({"host", "content-length", "expect"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_STATUS_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
}

_Framing = int | str  # a Content-Length, "chunked", or "close" (a response read to its end)


class _HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _BodyError(Exception):
    """A message that could not be relayed whole; `side` says whose fault ("client"/"upstream")."""

    def __init__(self, side: str, detail: str):
        super().__init__(detail)
        self.side = side
        self.detail = detail

    def message(self, endpoint: Endpoint) -> str:
        return _redact(
            f"Cairn: the model endpoint {endpoint.name} at {endpoint.upstream} failed: "
            f"{self.detail}"
        )


def _split_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    """The start line and the headers of a message head; _HttpError(400) when malformed."""
    text = head.decode("latin-1")
    lines = text.split("\r\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise _HttpError(400, "empty message")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            # Also refuses obsolete line folding (a line starting with a space).
            raise _HttpError(400, f"malformed header line {line[:100]!r}")
        value = value.strip(" \t")
        if any(c in value for c in "\r\n\0"):
            raise _HttpError(400, f"malformed header {name!r}")
        headers.append((name, value))
    return lines[0], headers


def _tokens(headers: list[tuple[str, str]], name: str) -> list[str]:
    return [
        token.strip().lower()
        for key, value in headers
        if key.lower() == name
        for token in value.split(",")
        if token.strip()
    ]


def _content_length(headers: list[tuple[str, str]]) -> int | None:
    values = {value.strip() for key, value in headers if key.lower() == "content-length"}
    if not values:
        return None
    if len(values) != 1 or not next(iter(values)).isdigit() or len(next(iter(values))) > 18:
        raise _HttpError(400, "invalid Content-Length")
    return int(next(iter(values)))


@dataclass
class _HttpRequest:
    method: str
    path: str  # origin form: starts with "/"
    headers: list[tuple[str, str]]
    framing: _Framing
    keep_alive: bool
    expects_continue: bool

    def upstream_head(self, endpoint: Endpoint, value: str) -> bytes:
        """The head to send upstream: the client's headers without those that belong to its
        connection or carry its placeholder credential, with the upstream's Host, the real
        credential and the body's framing."""
        named = set(_tokens(self.headers, "connection"))
        dropped = {*_ENDPOINT_HOP_BY_HOP, *_SET_UPSTREAM, *named, *endpoint.strip, endpoint.header}
        lines = [f"{self.method} {endpoint.upstream_path(self.path)} HTTP/1.1"]
        lines.append(f"Host: {endpoint.host_header}")
        lines += [f"{n}: {v}" for n, v in self.headers if n.lower() not in dropped]
        lines.append(f"{endpoint.header}: {endpoint.template.format(value)}")
        if self.framing == "chunked":
            lines.append("Transfer-Encoding: chunked")
        elif self.framing or _content_length(self.headers) is not None:
            lines.append(f"Content-Length: {self.framing}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _parse_endpoint_request(head: bytes) -> _HttpRequest:
    start, headers = _split_head(head)
    parts = start.split(" ")
    if (
        len(parts) != 3
        or not _TOKEN.fullmatch(parts[0])
        or parts[2]
        not in (
            "HTTP/1.1",
            "HTTP/1.0",
        )
    ):
        raise _HttpError(400, f"malformed request line {start[:100]!r}")
    method, target, version = parts
    if "://" in target.split("?", 1)[0]:
        # Absolute form: the endpoint decides where it goes, so only the path is kept.
        rest = target.split("://", 1)[1]
        split = min((rest.find(c) for c in "/?" if c in rest), default=len(rest))
        target = rest[split:] or "/"
        if target.startswith("?"):
            target = "/" + target
    if not target.startswith("/") or not target.isascii() or not target.isprintable():
        raise _HttpError(400, f"invalid request target {target[:100]!r}")
    if ".." in target.split("?", 1)[0].split("/"):
        raise _HttpError(400, "a request path may not leave the endpoint's base path")
    codings = _tokens(headers, "transfer-encoding")
    length = _content_length(headers)
    framing: _Framing
    if codings:
        if codings != ["chunked"]:
            raise _HttpError(400, f"unsupported Transfer-Encoding {', '.join(codings)}")
        if length is not None:
            raise _HttpError(400, "both Transfer-Encoding and Content-Length")
        framing = "chunked"
    else:
        framing = length or 0
    connection = _tokens(headers, "connection")
    keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
    expects = "100-continue" in _tokens(headers, "expect")
    return _HttpRequest(method, target, headers, framing, keep_alive, expects)


@dataclass
class _HttpResponse:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    framing: _Framing
    keep_alive: bool  # whether the upstream connection can carry another request

    def client_head(self, *, keep_alive: bool) -> bytes:
        named = set(_tokens(self.headers, "connection"))
        dropped = (_ENDPOINT_HOP_BY_HOP - {"transfer-encoding"}) | named
        lines = [f"HTTP/1.1 {self.status} {self.reason}".rstrip()]
        lines += [f"{n}: {v}" for n, v in self.headers if n.lower() not in dropped]
        open_after = keep_alive and self.framing != "close"
        lines.append(f"Connection: {'keep-alive' if open_after else 'close'}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _parse_response(head: bytes, method: str) -> _HttpResponse:
    start, headers = _split_head(head)
    version, _, rest = start.partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or not (len(code) == 3 and code.isdigit()):
        raise _HttpError(502, f"malformed status line {start[:100]!r}")
    status = int(code)
    codings = _tokens(headers, "transfer-encoding")
    framing: _Framing
    if method == "HEAD" or status < 200 or status in (204, 304):
        framing = 0
    elif codings:
        framing = "chunked" if codings[-1] == "chunked" else "close"
    else:
        length = _content_length(headers)
        framing = "close" if length is None else length
    keep_alive = (
        version == "HTTP/1.1"
        and "close" not in _tokens(headers, "connection")
        and framing != "close"
    )
    return _HttpResponse(status, reason, headers, framing, keep_alive)


async def _refuse(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    request: _HttpRequest,
    status: int,
    kind: str,
    message: str,
) -> None:
    """Answer a request that will not be sent upstream, ending the connection. The body the
    client is sending is read (and dropped) first: a client still writing it when the connection
    closed would see a broken pipe instead of the answer. A client waiting for `100 Continue`
    sends none."""
    if not request.expects_continue and request.framing != "close":
        with contextlib.suppress(_BodyError):
            await _relay_body(reader, None, request.framing, "client")
    await _send_json_error(writer, status, kind, message, request)


async def _relay_body(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter | None,
    framing: _Framing,
    source: str,
) -> int:
    """Copy one message body as it arrives (each piece written and flushed at once, so a stream of
    server-sent events flows event by event); returns the body's size. A chunked body is passed
    on as chunks of the same sizes, without extensions or trailers. With no `writer` the body is
    read and dropped."""
    sink = "upstream" if source == "client" else "client"

    async def read(call: Any) -> bytes:
        try:
            return bytes(await asyncio.wait_for(call, ENDPOINT_RESPONSE_TIMEOUT_S))
        except asyncio.IncompleteReadError:
            raise _BodyError(source, "the message ended early") from None
        except asyncio.LimitOverrunError:
            raise _BodyError(source, "a chunk line is too long") from None
        except TimeoutError:
            raise _BodyError(source, "stalled") from None
        except (ConnectionError, OSError) as exc:
            raise _BodyError(source, f"{type(exc).__name__}: {exc}") from None

    async def send(data: bytes) -> None:
        if writer is None:
            return
        try:
            writer.write(data)
            await writer.drain()
        except (ConnectionError, OSError) as exc:
            raise _BodyError(sink, f"{type(exc).__name__}: {exc}") from None

    async def copy(remaining: int | None) -> int:
        copied = 0
        while remaining is None or remaining > 0:
            size = RELAY_CHUNK if remaining is None else min(remaining, RELAY_CHUNK)
            data = await read(reader.read(size))
            if not data:
                if remaining is None:
                    return copied
                raise _BodyError(source, "the message ended early")
            await send(data)
            copied += len(data)
            if remaining is not None:
                remaining -= len(data)
        return copied

    if framing == "close":
        return await copy(None)
    if isinstance(framing, int):
        return await copy(framing)
    total = 0
    while True:
        line = await read(reader.readuntil(b"\r\n"))
        size_text = line[:-2].split(b";", 1)[0].strip(b" \t")
        if not _CHUNK_SIZE.fullmatch(size_text):
            raise _BodyError(source, "malformed chunk size")
        size = int(size_text, 16)
        if size == 0:
            while await read(reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers are not passed on
            await send(b"0\r\n\r\n")
            return total
        await send(b"%x\r\n" % size)
        total += await copy(size)
        if await read(reader.readexactly(2)) != b"\r\n":
            raise _BodyError(source, "malformed chunk end")
        await send(b"\r\n")


class _UpstreamConnection:
    """A connection to an endpoint's upstream, kept between requests of one client connection."""

    def __init__(
        self, endpoint: Endpoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ):
        self.endpoint = endpoint
        self.reader = reader
        self.writer = writer
        self.used = time.monotonic()

    def reusable(self, endpoint: Endpoint) -> bool:
        return (
            endpoint.upstream == self.endpoint.upstream
            and not self.writer.is_closing()
            and not self.reader.at_eof()
            and time.monotonic() - self.used < UPSTREAM_REUSE_S
        )

    def close(self) -> None:
        self.writer.close()


async def _send_json_error(
    writer: asyncio.StreamWriter,
    status: int,
    kind: str,
    message: str,
    request: _HttpRequest | None = None,
) -> None:
    """An error in the shape the engines' APIs use, so the engine shows Cairn's message."""
    message = _redact(message)
    document = {"type": "error", "error": {"type": kind, "message": message}}
    body = json.dumps(document).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {_STATUS_TITLES.get(status, 'Error')}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n"
        "X-Cairn-Egress: failed\r\n\r\n"
    ).encode("ascii")
    try:
        writer.write(head if request is not None and request.method == "HEAD" else head + body)
        await asyncio.wait_for(writer.drain(), 5.0)
    except (TimeoutError, OSError):
        pass


def _redact(text: str) -> str:
    return get_redactor().redact(text)


def _is_latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


_secret_store: Any = None


def _keyring_secret(name: str) -> str:
    """The secret's current value in the OS keyring (read now, never cached)."""
    global _secret_store
    # Only a proxy that serves a model endpoint needs the keyring.
    from core.credentials import SecretStore

    if _secret_store is None:
        _secret_store = SecretStore()
    return str(_secret_store.get(name))


def _secret_problem(what: str, login: str, exc: BaseException) -> str:
    from core.credentials import KeyringLocked, KeyringUnavailable, SecretMissing

    if isinstance(exc, SecretMissing):
        return f"{what} is not in the keyring; sign in with {login}"
    if isinstance(exc, KeyringLocked):
        return (
            f"{what} cannot be read: the keyring is locked; unlock your desktop keyring "
            "(gnome-keyring / KWallet) and try again"
        )
    if isinstance(exc, KeyringUnavailable):
        return (
            f"{what} cannot be read: no usable keyring ({exc.detail}); start or unlock your "
            f"desktop keyring, then sign in with {login} if the credential is not there"
        )
    return f"{what} cannot be read: {type(exc).__name__}: {exc}; sign in again with {login}"


# --- The detached process -----------------------------------------------------------------------


def running_pid(socket_path: os.PathLike | str) -> int | None:
    """The pid of the proxy serving this socket, or None when none is (a stale pid file is none).

    Liveness is the pid file's flock, held by the proxy for as long as it runs: unlike a pid,
    it cannot be fooled by a recycled pid or a zombie.
    """
    return flock_holder_pid(EgressPaths(Path(socket_path)).pid_file)


def _socket_answers(socket_path: Path, timeout: float = 2.0) -> bool:
    try:
        _connect_unix(socket_path, timeout).close()
    except OSError:
        return False
    return True


def start_detached(
    socket_path: os.PathLike | str,
    allow: Iterable[str],
    log_path: os.PathLike | str,
    *,
    session: str | None = None,
    python: str | None = None,
    timeout: float = START_TIMEOUT_S,
    endpoints: Iterable[Endpoint] = (),
) -> int:
    """Start a proxy for `socket_path` in its own session, detached from this process, and
    return its pid once the socket accepts connections. It keeps serving after this process
    (the GUI) exits, and reads the keyring for its `endpoints` through the D-Bus session of
    this process's environment. Its stdout/stderr go to `<socket stem>.stderr` beside the pid
    file; its connection log is `log_path`. Raises EgressAlreadyRunning if one serves the socket
    already, and EgressError (a CairnError) for any other reason it could not start.
    """
    paths = EgressPaths(Path(socket_path))
    try:
        return _start_detached(paths, allow, log_path, session, python, timeout, endpoints)
    except OSError as exc:  # its folder, policy or output file, or the interpreter
        raise EgressError(f"the egress proxy cannot start: {exc}") from None


def _start_detached(
    paths: EgressPaths,
    allow: Iterable[str],
    log_path: os.PathLike | str,
    session: str | None,
    python: str | None,
    timeout: float,
    endpoints: Iterable[Endpoint],
) -> int:
    paths.make_dirs()
    pid = running_pid(paths.socket)
    if pid is not None:
        raise EgressAlreadyRunning(f"an egress proxy (pid {pid}) already serves {paths.socket}")
    write_policy(paths.policy_file, allow, session, endpoints)
    argv = python_command(
        "core.sandbox.egress",
        "--socket", str(paths.socket),
        "--policy", str(paths.policy_file),
        "--pid-file", str(paths.pid_file),
        "--log", os.path.abspath(log_path),
        "--detach",
        python=python,
    )  # fmt: skip
    if session:
        argv += ["--session", session]
    with open(paths.stderr_file, "ab") as output:
        # The file keeps every start's output; only this start's explains this start's failure.
        since = os.fstat(output.fileno()).st_size
        try:
            # The child forks the server and exits when it listens (or has failed): no zombie is
            # left behind for this process to reap, and no pipe stays open to wait on.
            result = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                cwd="/",
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            stop(paths.socket)  # in case the server got as far as serving after all
            raise _start_failed(
                f"the egress proxy did not start within {timeout:g} s", paths, since
            ) from None
    if result.returncode == 3:
        raise EgressAlreadyRunning(f"an egress proxy already serves {paths.socket}")
    if result.returncode != 0:
        raise _start_failed("the egress proxy failed to start", paths, since)
    pid = running_pid(paths.socket)
    if pid is None:
        raise _start_failed("the egress proxy exited right after starting", paths, since)
    return pid


def _start_failed(what: str, paths: EgressPaths, since: int) -> EgressError:
    """One line: what failed and the last line the proxy printed this time. The whole output
    is named as well when there is more of it than that line (a traceback, say)."""
    lines = _output_lines(paths.stderr_file, since)
    detail = lines[-1].removeprefix("egress proxy: ")[:300] if lines else "no output"
    hint = f"its output is in {paths.stderr_file}" if len(lines) > 1 else None
    return EgressError(f"{what}: {detail}", hint=hint)


def ensure_running(
    socket_path: os.PathLike | str,
    allow: Iterable[str],
    log_path: os.PathLike | str,
    *,
    session: str | None = None,
    python: str | None = None,
    endpoints: Iterable[Endpoint] = (),
) -> int:
    """The pid of a proxy serving `socket_path` with exactly `allow` and `endpoints`: the running
    one (its policy replaced, as current settings always win) or a new one when the pid file is
    stale, the socket does not answer, or the running proxy predates model endpoints and some
    are asked for. Any failure is an EgressError (a CairnError)."""
    paths = EgressPaths(Path(socket_path))
    endpoints = _check_endpoints(endpoints)
    try:
        pid = running_pid(paths.socket)
        if pid is not None and endpoints and _protocol_of(paths) < PROTOCOL_VERSION:
            stop(paths.socket)  # started by an older Cairn: it cannot serve the endpoints
            pid = None
        if pid is not None and _socket_answers(paths.socket):
            set_allowlist(paths.socket, allow, session=session, endpoints=endpoints)
            return pid
        if pid is not None:
            stop(paths.socket)
        try:
            return start_detached(
                paths.socket,
                allow,
                log_path,
                session=session,
                python=python,
                endpoints=endpoints,
            )
        except EgressAlreadyRunning:
            # Another caller won the race to start it; use that one, with this policy.
            set_allowlist(paths.socket, allow, session=session, endpoints=endpoints)
            pid = running_pid(paths.socket)
            if pid is None:
                raise
            return pid
    except OSError as exc:  # the policy file or the proxy's folder
        raise EgressError(f"the egress proxy cannot be set up: {exc}") from None


def set_allowlist(
    socket_path: os.PathLike | str,
    allow: Iterable[str],
    *,
    session: str | None = None,
    endpoints: Iterable[Endpoint] | None = None,
) -> Allowlist:
    """Replace the policy file and tell the running proxy (SIGHUP). Connections opened after this
    returns see the new allowlist even before the signal is handled (the proxy checks the file
    at each connection and each endpoint request); the signal also cuts live connections it no
    longer allows. The endpoints are replaced when given and kept when None."""
    paths = EgressPaths(Path(socket_path))
    current: PolicyFile | None = None
    if (session is None or endpoints is None) and paths.policy_file.exists():
        try:
            current = load_policy(paths.policy_file)
        except (OSError, ValueError):
            current = None
    if session is None and current is not None:
        session = current.session
    if endpoints is None:
        endpoints = current.endpoints if current is not None else ()
    paths.make_dirs()
    allowlist = write_policy(paths.policy_file, allow, session, endpoints)
    pid = running_pid(paths.socket)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGHUP)
    return allowlist


def stop(socket_path: os.PathLike | str, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the proxy serving `socket_path` (SIGTERM, then SIGKILL), and the tunnel carrying a
    remote sandbox's connections to it; True if a proxy was running."""
    paths = EgressPaths(Path(socket_path))
    tunnel = flock_holder_pid(paths.tunnel_pid_file)
    if tunnel is not None and not stop_process(
        tunnel, lambda: flock_holder_pid(paths.tunnel_pid_file) is not None, timeout
    ):
        raise EgressError(f"egress tunnel pid {tunnel} did not stop")
    pid = running_pid(paths.socket)
    if pid is None:
        return False
    if not stop_process(pid, lambda: running_pid(paths.socket) is not None, timeout):
        raise EgressError(f"egress proxy pid {pid} did not stop")
    return True


def _protocol_file(pid_file: Path) -> Path:
    return pid_file.with_suffix(".protocol")


def _protocol_of(paths: EgressPaths) -> int:
    """What the running proxy speaks (1 when it did not say: it predates the file)."""
    try:
        text = _protocol_file(paths.pid_file).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return 1
    return int(text) if text.isdigit() else 1


def _output_lines(path: Path, since: int, limit: int = 8192) -> list[str]:
    """The non-empty lines written to `path` after offset `since` (at most its last `limit`
    bytes)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(since, size - limit))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


# --- Launch-spec helpers -----------------------------------------------------------------------


def forwarder_argv(
    script: str,
    *,
    proxy_port: int | None = None,
    forwards: Mapping[int, str] | None = None,
    endpoints: Sequence[Endpoint | str] = (),
    socket_path: str = SANDBOX_SOCKET,
    python: str = "python3",
) -> list[str]:
    """The in-sandbox command that runs the forwarder: an HTTP proxy port, fixed forwards
    `{local port: "host:port"}`, and the model endpoints (by name, in order: the i-th is served
    on `endpoint_port(i)`), each checked here so a typo fails before the sandbox starts."""
    argv = [python, script, "--socket", socket_path]
    ports: dict[int, str] = {}

    def claim(port: int, what: str) -> int:
        if port in ports:
            raise ValueError(f"port {port} is wanted for {ports[port]} and for {what}")
        ports[port] = what
        return port

    if proxy_port is not None:
        argv += ["--proxy", str(claim(int(proxy_port), "the HTTP proxy"))]
    for local_port, destination in sorted((forwards or {}).items()):
        checked = parse_destination(destination)
        argv += ["--forward", f"{claim(int(local_port), f'the forward to {checked}')}={checked}"]
    for index, endpoint in enumerate(endpoints):
        name = endpoint.name if isinstance(endpoint, Endpoint) else endpoint
        if not isinstance(name, str) or not _ENDPOINT_NAME.fullmatch(name):
            raise EndpointError(f"invalid endpoint name {name!r}")
        argv += ["--endpoint", f"{name}={claim(endpoint_port(index), f'the endpoint {name}')}"]
    return argv


def proxy_environment(proxy_port: int) -> dict[str, str]:
    """Variables that send proxy-aware clients in the sandbox through the forwarder's proxy port.
    Loopback stays direct: there it means the sandbox itself (and its fixed forwards)."""
    url = f"http://127.0.0.1:{int(proxy_port)}"
    no_proxy = ",".join(LOCAL_NAMES)
    return {
        "HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
        "NO_PROXY": no_proxy, "no_proxy": no_proxy,
    }  # fmt: skip


# --- Command line -------------------------------------------------------------------------------


def _acquire_pid_file(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    # running_pid() takes a shared lock for a moment to look: retry briefly before giving up.
    for _ in range(50):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            time.sleep(0.02)
    os.close(fd)
    raise EgressAlreadyRunning(f"another egress proxy holds {path}")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m core.sandbox.egress",
        description=(
            "Serve a sandbox's egress socket, connecting only to allowlisted host:port pairs."
        ),
    )
    parser.add_argument("--socket", required=True, help="the unix socket to serve")
    parser.add_argument(
        "--allow",
        action="append",
        metavar="HOST:PORT",
        help="an allowed destination (repeatable); written to the policy file",
    )
    parser.add_argument(
        "--policy",
        help="the JSON policy file, re-read on SIGHUP (default: beside the socket's folder)",
    )
    parser.add_argument("--log", required=True, help="the JSON-lines connection log")
    parser.add_argument("--session", help="the session name written in each log line")
    parser.add_argument(
        "--pid-file", help="held locked while serving (default: beside the socket's folder)"
    )
    parser.add_argument(
        "--detach", action="store_true", help="fork into a new session; exit once listening"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    paths = EgressPaths(Path(args.socket))
    policy = Path(os.path.abspath(args.policy)) if args.policy else paths.policy_file
    pid_file = Path(os.path.abspath(args.pid_file)) if args.pid_file else paths.pid_file
    log_path = os.path.abspath(args.log)

    ready_fd = None
    if args.detach:
        read_end, ready_fd = os.pipe()
        if os.fork() > 0:
            os.close(ready_fd)
            with os.fdopen(read_end, "rb") as pipe:
                message = pipe.read().decode("utf-8", "replace")
            if message.startswith("ready"):
                return 0
            # The server said why on the pipe, not on the output this process shares with it,
            # so the reason is printed once, as the last line.
            status, _, reason = message.partition(": ")
            reason = reason.strip() or "exited before it was ready"
            print(f"egress proxy: {reason}", file=sys.stderr)
            return 3 if status == "running" else 1
        os.close(read_end)
        os.setsid()
        os.chdir("/")

    def report(text: str) -> bool:
        """Tell the waiting parent, when detached; False when there is none to tell."""
        if ready_fd is None:
            return False
        os.write(ready_fd, text.encode("utf-8", "replace"))
        return True

    try:
        paths.make_dirs()
        pid_fd = _acquire_pid_file(pid_file)
    except EgressAlreadyRunning as exc:
        if not report(f"running: {exc}"):
            print(f"egress proxy: {exc}", file=sys.stderr)
        return 3
    # Until serve() installs its handler, a reload request must not kill the process.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        proxy = EgressProxy(
            paths.socket, args.allow, policy_path=policy, log_path=log_path, session=args.session
        )
        proxy.bind()
    except (EgressError, OSError, ValueError) as exc:
        if not report(f"error: {exc}"):
            print(f"egress proxy: {exc}", file=sys.stderr)
        return 1

    def ready() -> None:
        # Said before the pid is there, so whoever finds the pid finds what this process speaks.
        with contextlib.suppress(OSError):
            _protocol_file(pid_file).write_text(f"{PROTOCOL_VERSION}\n", encoding="ascii")
        # The pid is written only now, so whoever finds it can signal a process that handles it.
        os.ftruncate(pid_fd, 0)
        os.pwrite(pid_fd, f"{os.getpid()}\n".encode("ascii"), 0)
        if ready_fd is not None:
            report("ready")
            os.close(ready_fd)

    try:
        asyncio.run(proxy.serve(handle_signals=True, ready=ready))
    finally:
        proxy.log.close()
        os.close(pid_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
