"""The Podman sandbox backend: the Docker backend against Podman's Docker-compatible API
(`podman system service`), so a person without Docker gets the same hardened sandboxes.

Owns what Podman does differently: rootless Podman runs containers in a user namespace, so the
sandbox's user is mapped onto the person's own uid (`keep-id`) and the workspace stays theirs on
both sides; its own networking (slirp4netns, pasta) may be missing, so a sandbox has no network
but loopback and reaches an allowlist through the mounted egress socket, as under Docker.
Podman also keeps each exec's configuration, environment included, in its state database on
disk, so an exec's variables (secrets among them) never go in the exec's configuration here:
they pass through a pipe in the run folder that a small shell prologue reads before the command
starts. Everything else (labels, mounts, execs, attach checks) is the Docker backend's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.sandbox.base import (
    CONTAINER_RUNS,
    NETWORK_ALLOWLIST,
    NETWORK_NONE,
    NETWORK_OPEN,
    Capabilities,
    SandboxError,
    SandboxSpec,
    SandboxUnavailable,
    SessionState,
    UnsupportedNetwork,
    check_env,
)
from core.sandbox.docker import CONNECT_TIMEOUT_S, DockerBackend, DockerLiveSession, docker_call
from core.sandbox.hosts import default_podman_url

LIBPOD_API = "4.0.0"  # the oldest API version of Podman 4, which Debian 12 has
ENV_PIPE_WAIT_S = 30.0  # how long a pipe waits for its exec to read it
# Reads the exec's variables from the pipe named by $1, then runs the command in their place.
ENV_PROLOGUE = 'set -a; . "$1" || exit 127; set +a; shift; exec "$@"'
START_SERVICE = "systemctl --user enable --now podman.socket"
START_SERVICE_BY_HAND = "podman system service --time=0 &"


class PodmanBackend(DockerBackend):
    """Sandboxes as Podman containers, hardened as the Docker ones are. Rootless Podman maps the
    sandbox user onto the person's uid (so Cairn must run as the person whose Podman it is), and
    offers no `open` network: its user-mode networking may not work on this machine."""

    name = "podman"
    capabilities = Capabilities(
        reattach=True,
        recreate_from_snapshot=True,
        per_exec_env=True,
        network_modes=frozenset({NETWORK_NONE, NETWORK_ALLOWLIST}),
        isolated=True,
    )

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        base_url: str | None = None,
        client: Any = None,
    ):
        super().__init__(data_dir, base_url=base_url or default_podman_url(), client=client)
        self._rootless: bool | None = None
        self._uid = os.getuid()
        self._info_lock = threading.Lock()

    def _unavailable(self, exc: BaseException) -> SandboxUnavailable:
        found = super()._unavailable(exc)
        where = self.address
        socket_path = where[len("unix://") :] if where.startswith("unix://") else None
        if socket_path and not os.path.exists(socket_path) and shutil.which("podman") is None:
            return SandboxUnavailable(
                "Podman is not installed", hint="install it: sudo apt-get install podman uidmap"
            )
        if "not running" in found.message or "did not answer" in found.message:
            return SandboxUnavailable(
                f"the Podman service is not running (no answer at {where})",
                hint=f"start it: {START_SERVICE} (or {START_SERVICE_BY_HAND})",
            )
        if "permission denied" in found.message:
            return SandboxUnavailable(
                f"permission denied on {where}",
                hint="use your own Podman socket: Cairn must run as the user whose Podman it is",
            )
        return found

    @docker_call("ask Podman how it runs")
    def rootless(self) -> bool:
        """Whether the service runs rootless (its containers live in a user namespace)."""
        return self._service()[0]

    @docker_call("ask Podman how it runs")
    def service_uid(self) -> int:
        """The uid the rootless service runs as: the one `keep-id` maps the sandbox user onto."""
        return self._service()[1]

    def _service(self) -> tuple[bool, int]:
        with self._info_lock:
            if self._rootless is None:
                # Podman's own API says it; the Docker-compatible /info does not.
                api: Any = self.api
                url = f"{api.base_url}/v{LIBPOD_API}/libpod/info"
                host = api._result(api._get(url, timeout=CONNECT_TIMEOUT_S), json=True)["host"]
                uidmap = (host.get("idMappings") or {}).get("uidmap") or []
                self._rootless = bool((host.get("security") or {}).get("rootless"))
                self._uid = next(
                    (int(m["host_id"]) for m in uidmap if m.get("container_id") == 0), os.getuid()
                )
            return self._rootless, self._uid

    def check_spec(self, spec: SandboxSpec) -> None:
        if spec.network == NETWORK_OPEN:
            raise UnsupportedNetwork(
                "a Podman sandbox has no open network (Podman's own networking is not used)",
                hint="use the network policy 'allowlist' (through Cairn's proxy) or 'none'",
            )
        uid, _gid = spec.user
        if self.rootless() and uid != self.service_uid():
            raise SandboxError(
                f"a rootless Podman sandbox runs as the uid of Podman's user, "
                f"{self.service_uid()}, not as uid {uid}",
                hint="run Cairn as the user whose Podman it is, and leave the policy's uid unset",
            )

    def network_mode(self, spec: SandboxSpec) -> str:
        return "none"

    def compare(self, info: Mapping[str, Any], state: SessionState, spec: SandboxSpec) -> list[str]:
        reasons = super().compare(info, state, spec)
        if spec.network not in self.capabilities.network_modes:
            reasons.append(
                f"network differs: the spec asks for {spec.network!r}, "
                "which a Podman sandbox does not have"
            )
        return reasons

    def engine_host_config(self, spec: SandboxSpec) -> dict[str, Any]:
        # keep-id: the person's uid is the same number inside, so the sandbox user owns the
        # workspace and home on both sides (without it the person is root in the container and
        # the sandbox user a subordinate uid that cannot write there).
        return {"UsernsMode": "keep-id"} if self.rootless() else {}

    def live_session(
        self, state: SessionState, spec: SandboxSpec, container_id: str
    ) -> DockerLiveSession:
        return PodmanLiveSession(self, state, spec, container_id)


class PodmanLiveSession(DockerLiveSession):
    """A running Podman container: execs as under Docker, with their variables sent through a
    pipe instead of the exec's configuration, which Podman writes to disk."""

    def _exec_create(
        self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str, *, stdin: bool = False
    ) -> str:
        values = check_env(env)
        if not values or not argv:
            return super()._exec_create(argv, values, cwd, stdin=stdin)
        pipe = EnvPipe(self.spec.runs_dir, values, self.spec.user)
        inside = f"{CONTAINER_RUNS}/{pipe.path.name}"
        try:
            exec_id = super()._exec_create(
                ["sh", "-c", ENV_PROLOGUE, "cairn-env", inside, *argv], None, cwd, stdin=stdin
            )
        except BaseException:
            pipe.remove()
            raise
        pipe.start()
        return exec_id


class EnvPipe:
    """A named pipe holding one exec's variables as shell assignments: nothing of them is ever
    on a disk. A thread writes them once the exec opens the pipe, then removes it (also when no
    exec reads it within ENV_PIPE_WAIT_S)."""

    def __init__(self, folder: Path, env: Mapping[str, str], user: tuple[int, int]):
        self.path = folder / f".env-{uuid.uuid4().hex}"
        self._data = "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()).encode()
        os.mkfifo(self.path, 0o600)  # a fresh name: fails rather than use anything planted
        if os.geteuid() == 0 and user[0] != 0:
            os.chown(self.path, *user)
        self._thread = threading.Thread(target=self._feed, name="cairn-env-pipe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _feed(self) -> None:
        deadline = time.monotonic() + ENV_PIPE_WAIT_S
        try:
            while True:
                try:
                    fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
                    break
                except OSError as exc:  # ENXIO: no reader yet
                    if exc.errno != errno.ENXIO or time.monotonic() >= deadline:
                        return
                    time.sleep(0.005)
            os.set_blocking(fd, True)
            with contextlib.suppress(OSError), os.fdopen(fd, "wb") as out:
                out.write(self._data)
        finally:
            self.remove()

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
