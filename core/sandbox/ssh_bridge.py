"""A Docker engine on another machine, reached over SSH with the system's `ssh` client.

The bridge is a Unix socket of Cairn's own: every connection made to it is carried by
`ssh … docker system dial-stdio` to the engine on the far side, so the Docker API client talks
HTTP to a local socket and never learns about SSH. The `ssh` options are Cairn's, not whatever a
config file says:

- BatchMode: never a prompt (a passphrase, a password or an unknown host key fails instead);
- StrictHostKeyChecking=yes against `known_hosts` (the person's own, or a file they name): a host
  key that is unknown or has changed refuses the connection;
- the key file the settings name, or the person's SSH agent (SSH_AUTH_SOCK);
- one shared connection (ControlMaster) for all the API calls, so a call costs a channel, not a
  handshake; keep-alives so a dead link is noticed.

`check()` runs one command over the same options and turns ssh's failures into sentences a
person can act on (the host key, the key, the address, a missing Docker CLI there).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from core.errors import CairnError, InputError

DEFAULT_CONNECT_TIMEOUT_S = 10
# A host name or address as ssh takes it: letters, digits, dots, dashes, colons (IPv6 in []).
_HOST_RE = re.compile(r"[A-Za-z0-9._-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")
_USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,31}")


class SshUnavailable(CairnError):
    """The far side cannot be reached, or refused us; the message says which and what to do."""


@dataclass(frozen=True)
class SshTarget:
    """`ssh://[user@]host[:port]`."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, url: str) -> SshTarget:
        if not isinstance(url, str) or not url.startswith("ssh://"):
            raise InputError(f"{url!r} is not an SSH address: write ssh://user@host[:port]")
        rest = url[len("ssh://") :].rstrip("/")
        user = None
        if "@" in rest:
            user, rest = rest.rsplit("@", 1)
            if not _USER_RE.fullmatch(user):
                raise InputError(f"{user!r} in {url!r} is not a user name")
        host, port = rest, None
        match = re.fullmatch(r"(.+):(\d{1,5})", rest)
        if match and not rest.endswith("]"):
            host, port = match.group(1), int(match.group(2))
            if not 0 < port < 65536:
                raise InputError(f"{port} in {url!r} is not a port")
        if not _HOST_RE.fullmatch(host) or host.startswith("-"):
            raise InputError(f"{host!r} in {url!r} is not a host name or address")
        return cls(host, user, port)

    @property
    def url(self) -> str:
        who = f"{self.user}@" if self.user else ""
        where = f":{self.port}" if self.port else ""
        return f"ssh://{who}{self.host}{where}"

    @property
    def destination(self) -> str:
        host = self.host.strip("[]")
        return f"{self.user}@{host}" if self.user else host


class SshBridge:
    """The local socket in front of one remote engine. `start()` returns its `unix://` URL."""

    def __init__(
        self,
        target: SshTarget,
        *,
        key_file: Path | None = None,
        known_hosts: Path | None = None,
        ssh: str = "ssh",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    ):
        self.target = target
        self.key_file = Path(key_file) if key_file else None
        self.known_hosts = Path(known_hosts) if known_hosts else None
        self.ssh = ssh
        self.connect_timeout = connect_timeout
        self._folder: Path | None = None
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._children: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    # -- the ssh command ---------------------------------------------------------------------

    def ssh_argv(self, *command: str) -> list[str]:
        """`ssh` with Cairn's options, to run `command` on the far side."""
        return [*self._ssh_options(), "--", self.target.destination, *command]

    def _ssh_options(self) -> list[str]:
        """The `ssh` program and Cairn's options, up to the destination."""
        program = shutil.which(self.ssh)
        if program is None:
            raise SshUnavailable("there is no ssh client on this machine (Debian: openssh-client)")
        argv = [
            program,
            *("-o", "BatchMode=yes"),
            *("-o", "StrictHostKeyChecking=yes"),
            *("-o", f"ConnectTimeout={max(1, round(self.connect_timeout))}"),
            *("-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3"),
            *("-o", "ForwardAgent=no", "-o", "ForwardX11=no", "-o", "RequestTTY=no"),
            *("-o", "LogLevel=ERROR"),
        ]
        if self.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.key_file is not None:
            argv += ["-o", "IdentitiesOnly=yes", "-i", str(self.key_file)]
        if self._folder is not None:
            argv += [
                *("-o", "ControlMaster=auto"),
                *("-o", f"ControlPath={self._folder / 'master'}"),
                *("-o", "ControlPersist=60"),
            ]
        if self.target.port:
            argv += ["-p", str(self.target.port)]
        return argv

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """Run one command on the far side with Cairn's options (bounded): its exit code and
        output; SshUnavailable when it did not answer in time."""
        try:
            return subprocess.run(
                self.ssh_argv(*command),
                capture_output=True,
                text=True,
                timeout=self.connect_timeout + 20,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise SshUnavailable(
                f"{self.target.url} did not answer within {self.connect_timeout + 20:g} s"
            ) from None

    def check(self) -> str:
        """The remote engine's API version, or SshUnavailable saying why it cannot be had."""
        done = self.run("docker", "version", "--format", "{{.Server.APIVersion}}")
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
        raise SshUnavailable(explain(self.target, done.returncode, done.stderr, self.known_hosts))

    def free_bytes(self, path: str) -> int | None:
        """The free space of the far side's filesystem holding `path` (or its nearest folder
        that can be looked at); None when it cannot be told."""
        script = (
            'd=$1; while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname -- "$d"); done; '
            'df -Pk -- "$d"'
        )
        try:
            done = self.run("sh", "-c", shlex.quote(script), "sh", shlex.quote(path))
        except SshUnavailable:
            return None
        lines = done.stdout.strip().splitlines()
        fields = lines[-1].split() if done.returncode == 0 and len(lines) >= 2 else []
        return int(fields[3]) * 1024 if len(fields) >= 4 and fields[3].isdigit() else None

    # -- the socket ----------------------------------------------------------------------------

    def start(self) -> str:
        if self._listener is not None:
            return self.url
        self._folder = Path(tempfile.mkdtemp(prefix="cairn-ssh-"))
        os.chmod(self._folder, 0o700)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self._folder / "docker.sock"))
        listener.listen(16)
        self._listener = listener
        self._thread = threading.Thread(target=self._serve, name="ssh-bridge", daemon=True)
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        if self._folder is None:
            raise RuntimeError("the bridge is not started")
        return f"unix://{self._folder / 'docker.sock'}"

    def _serve(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                self._carry(conn)
            finally:
                conn.close()  # the ssh child holds its own copy

    def _carry(self, conn: socket.socket) -> None:
        """One API connection: ssh reads and writes the accepted socket itself."""
        try:
            child = subprocess.Popen(
                self.ssh_argv("docker", "system", "dial-stdio"),
                stdin=conn.fileno(),
                stdout=conn.fileno(),
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except (OSError, SshUnavailable):
            return
        with self._lock:
            self._children = {c for c in self._children if c.poll() is None}
            self._children.add(child)

    def close(self) -> None:
        self._closed.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            children, self._children = self._children, set()
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
        if self._folder is not None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                # Ends the shared connection (ControlPersist would keep it a minute).
                subprocess.run(
                    [*self._ssh_options(), "-O", "exit", "--", self.target.destination],
                    capture_output=True,
                    timeout=10,
                    stdin=subprocess.DEVNULL,
                )
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        self._listener = None

    def __enter__(self) -> SshBridge:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def explain(target: SshTarget, code: int, stderr: str, known_hosts: Path | None) -> str:
    """ssh's failure, as a sentence about what to do."""
    text = stderr.strip()
    where = target.url
    hosts_file = str(known_hosts) if known_hosts else "~/.ssh/known_hosts"
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return (
            f"the host key of {where} has changed since it was recorded in {hosts_file}: "
            "if the machine was reinstalled, remove its old line there; otherwise do not connect"
        )
    if "Host key verification failed" in text or "No ED25519 host key is known" in text:
        return (
            f"the host key of {where} is not in {hosts_file}: connect once with "
            f"`ssh {target.destination}` and check the fingerprint, or add it there"
        )
    if "Permission denied" in text:
        return (
            f"{where} refused the SSH key ({text.splitlines()[-1]}): name a key file in the "
            "host's settings or add the key to your SSH agent"
        )
    for words in ("Connection refused", "timed out", "No route to host", "Could not resolve"):
        if words in text:
            return f"{where} cannot be reached: {text.splitlines()[-1]}"
    if code == 127 or "docker: not found" in text or "command not found" in text:
        return f"{where} has no `docker` command: install Docker's CLI there"
    if "Cannot connect to the Docker daemon" in text or "permission denied" in text.lower():
        return f"the SSH user on {where} cannot use its Docker engine: {text.splitlines()[-1]}"
    last = text.splitlines()[-1] if text else f"ssh exited with {code}"
    return f"{where} did not answer as a Docker host: {last}"
