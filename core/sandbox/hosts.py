"""Sandbox hosts: the container engines Cairn may make sandboxes on, by name.

Owns the names and addresses: the built-in `local` (the local Docker engine, or whatever
DOCKER_HOST names) and `podman` (the person's rootless Podman socket), and the settings' own
`hosts.<name>` entries ("<engine> <address>", where the address is a local socket or, for a
Docker engine on another machine, `ssh://user@host[:port]` followed by `key=FILE` and
`known_hosts=FILE` when they are not the SSH agent and ~/.ssh/known_hosts). Making a host's
backend is core.sandboxes';
testing a host (reachable, API version, image, disk) and sending it an image are
core.host_checks'; which host a task uses is the task's record and `defaults.host`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.errors import InputError
from core.sandbox.ssh_bridge import SshBridge, SshTarget

DOCKER = "docker"
PODMAN = "podman"
ENGINES = (DOCKER, PODMAN)

LOCAL = "local"  # the local Docker engine
DEFAULT_HOST = LOCAL
DOCKER_SOCKET = "/var/run/docker.sock"

PODMAN_ROOTFUL_SOCKET = "/run/podman/podman.sock"

SSH_SCHEME = "ssh://"
SSH_OPTIONS = ("key", "known_hosts")

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
_MAX_ADDRESS = 300


@dataclass(frozen=True)
class SandboxHost:
    """One engine sandboxes can run on: its name, its kind (docker or podman) and where its API
    is (`unix:///path/to/socket`)."""

    name: str
    engine: str
    address: str
    builtin: bool = False
    key_file: str | None = None  # ssh: the private key (else the SSH agent)
    known_hosts: str | None = None  # ssh: the host keys to check against (else ~/.ssh's)

    @property
    def value(self) -> str:
        """The host as the settings store it: `<engine> <address> [key=…] [known_hosts=…]`."""
        options = [f"key={self.key_file}"] if self.key_file else []
        options += [f"known_hosts={self.known_hosts}"] if self.known_hosts else []
        return " ".join([self.engine, self.address, *options])

    @property
    def remote(self) -> bool:
        """Whether the engine is on another machine (reached over SSH): nothing on this
        machine's disk can be mounted into its sandboxes."""
        return self.address.startswith(SSH_SCHEME)

    @property
    def local_docker(self) -> bool:
        """Whether this is the built-in local Docker engine (DOCKER_HOST and Docker's own
        variables choose its address)."""
        return self.builtin and self.name == LOCAL

    @property
    def socket_path(self) -> str | None:
        return self.address[len("unix://") :] if self.address.startswith("unix://") else None


def default_podman_url(uid: int | None = None, runtime_dir: str | None = None) -> str:
    """The person's own Podman socket: `$XDG_RUNTIME_DIR/podman/podman.sock` (rootless), or
    the system one for root."""
    uid = os.getuid() if uid is None else uid
    if uid == 0:
        return f"unix://{PODMAN_ROOTFUL_SOCKET}"
    runtime = runtime_dir or os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"
    return f"unix://{Path(runtime) / 'podman' / 'podman.sock'}"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InputError(
            f"{name!r} is not a host name: use lower-case letters, digits, - and _ "
            "(at most 40), e.g. hosts.podman"
        )
    return name


def parse_value(name: str, value: str) -> SandboxHost:
    """`<engine> <address> [key=FILE] [known_hosts=FILE]` → the host, or InputError naming
    what is wrong. The address is a unix socket on this machine
    (`unix:///run/user/1000/podman/podman.sock`) or a Docker engine reached over SSH
    (`ssh://user@host[:port]`); the key and known_hosts files belong to SSH addresses only."""
    check_name(name)
    parts = value.split() if isinstance(value, str) else []
    if len(parts) < 2 or len(value) > _MAX_ADDRESS:
        raise InputError(
            f"hosts.{name} takes '<engine> <address>', e.g. "
            f"'podman unix:///run/user/1000/podman/podman.sock' or "
            f"'docker ssh://me@build-box key=~/.ssh/id_ed25519', not {value!r}"
        )
    engine, address, *rest = parts
    if engine not in ENGINES:
        raise InputError(
            f"unknown engine {engine!r} for hosts.{name} (known: {', '.join(ENGINES)})"
        )
    if address.startswith(SSH_SCHEME):
        return _parse_ssh(name, engine, address, rest)
    if rest:
        raise InputError(
            f"hosts.{name}: {' '.join(rest)!r} is for SSH hosts only (key=, known_hosts=)"
        )
    if not address.startswith("unix:///"):
        raise InputError(
            f"the address of hosts.{name} must be a unix socket on this machine, "
            f"unix:///path/to/socket, or ssh://user@host[:port], not {address!r}"
        )
    path = Path(address[len("unix://") :])
    if ".." in path.parts:
        raise InputError(f"the address of hosts.{name} must not hold '..': {address!r}")
    return SandboxHost(name, engine, f"unix://{path}")


def _parse_ssh(name: str, engine: str, address: str, options: list[str]) -> SandboxHost:
    if engine != DOCKER:
        raise InputError(
            f"hosts.{name}: only a Docker engine is reached over SSH (write 'docker {address}')"
        )
    target = SshTarget.parse(address)  # the address's own rules, before ssh ever runs
    files: dict[str, str] = {}
    for option in options:
        key, sep, path = option.partition("=")
        if not sep or key not in SSH_OPTIONS or not path:
            raise InputError(
                f"hosts.{name}: {option!r} is not an SSH host option (key=FILE, known_hosts=FILE)"
            )
        if key in files:
            raise InputError(f"hosts.{name} names {key}= twice")
        full = Path(os.path.expanduser(path))
        if not full.is_absolute() or ".." in full.parts:
            raise InputError(
                f"hosts.{name}: {key}= needs an absolute path without '..', not {path!r}"
            )
        files[key] = str(full)
    return SandboxHost(
        name,
        engine,
        target.url,
        key_file=files.get("key"),
        known_hosts=files.get("known_hosts"),
    )


def builtin_hosts(environ: Mapping[str, str] | None = None) -> dict[str, SandboxHost]:
    """`local`: the Docker engine DOCKER_HOST names (its usual socket otherwise); `podman`: this
    user's Podman socket."""
    env = os.environ if environ is None else environ
    docker_address = env.get("DOCKER_HOST") or f"unix://{DOCKER_SOCKET}"
    return {
        LOCAL: SandboxHost(LOCAL, DOCKER, docker_address, builtin=True),
        PODMAN: SandboxHost(
            PODMAN, PODMAN, default_podman_url(runtime_dir=env.get("XDG_RUNTIME_DIR")), True
        ),
    }


def all_hosts(
    configured: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, SandboxHost]:
    """The built-in hosts with the settings' `hosts.<name>` entries over them, by name."""
    hosts = builtin_hosts(environ)
    for name, value in configured.items():
        hosts[name] = parse_value(name, value)
    return hosts


def pick(
    hosts: Mapping[str, SandboxHost], name: str | None, *, where: str = "defaults.host"
) -> SandboxHost:
    """The host called `name` (the default host when None), or InputError listing the known."""
    chosen = name or DEFAULT_HOST
    found = hosts.get(chosen)
    if found is None:
        raise InputError(
            f"no sandbox host {chosen!r} ({where}; known: {', '.join(sorted(hosts))})",
            hint=f"add it: cairnctl config set hosts.{chosen} '<engine> <address>'",
        )
    return found


def bridge_for(host: SandboxHost) -> SshBridge:
    """The SSH bridge to a remote host's engine, with the host's key and known_hosts files
    (not started: `check()` it, then `start()`)."""
    if not host.remote:
        raise InputError(f"host {host.name} is not reached over SSH ({host.address})")
    return SshBridge(
        SshTarget.parse(host.address),
        key_file=Path(host.key_file) if host.key_file else None,
        known_hosts=Path(host.known_hosts) if host.known_hosts else None,
    )
