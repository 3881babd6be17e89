"""The Docker sandbox backend: one hardened container per workspace session, found again by
label.

Owns container creation, attach checks and execs through docker-py; leaves secrets (each exec's
env), the egress proxy behind /cairn/egress, and the decision to recreate after Gone/Mismatch to
others.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from core.errors import CairnError, Conflict, exception_chain
from core.sandbox.base import (
    CONTAINER_HOME,
    CONTAINER_RUNS,
    CONTAINER_WORKSPACE,
    DETACHED_WRAPPER,
    NETWORK_MODES,
    NETWORK_OPEN,
    PROTECTED_GIT_TARGETS,
    Attached,
    AttachResult,
    Capabilities,
    DetachedProcess,
    ExecResult,
    ExecStream,
    ExecTimeout,
    Gone,
    ImageMissing,
    LiveSession,
    Mismatch,
    MountSpec,
    OutputChunk,
    ProbeFailed,
    SandboxBackend,
    SandboxError,
    SandboxGone,
    SandboxSpec,
    SandboxUnavailable,
    SessionState,
    SessionSummary,
    check_env,
    check_run_id,
    next_generation,
    prepare_host_dirs,
    read_pid,
    reset_run_dir,
)

if TYPE_CHECKING:  # docker is imported when first used: starting Cairn does not wait for it
    from docker import APIClient, DockerClient
    from docker.types.daemon import CancellableStream

LABEL_MANAGED = "cairn.managed"
LABEL_WORKSPACE = "cairn.workspace"
LABEL_SESSION = "cairn.session"
LABEL_SNAPSHOT = "cairn.snapshot"
LABEL_GENERATION = "cairn.generation"
LABEL_DATA_DIR = "cairn.data_dir"
RESERVED_LABELS = frozenset(
    {
        LABEL_MANAGED,
        LABEL_WORKSPACE,
        LABEL_SESSION,
        LABEL_SNAPSHOT,
        LABEL_GENERATION,
        LABEL_DATA_DIR,
    }
)

DEFAULT_SOCKET = "/var/run/docker.sock"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONNECT_TIMEOUT_S = 10
API_TIMEOUT_S = 120
DETACHED_START_TIMEOUT_S = 15
STOP_TIMEOUT_S = 5
REMOVAL_WAIT_S = 30
PROBE_TIMEOUT_S = 20
RUN_TMPFS_OPTIONS = "rw,nosuid,nodev,noexec,size=16m"


def container_name_for(session_id: str) -> str:
    return f"cairn-{session_id}"


_F = TypeVar("_F", bound=Callable[..., Any])


def docker_call(what: str) -> Callable[[_F], _F]:
    """Every Docker failure of the wrapped call becomes one CairnError line with its fix: an
    unreachable or silent daemon SandboxUnavailable, a container that went away SandboxGone,
    anything Docker refused SandboxError. Nothing from docker-py reaches a person raw."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except CairnError:
                raise
            except Exception as exc:
                backend = self if isinstance(self, DockerBackend) else self.backend
                raise backend.translate(exc, what) from exc

        return call  # type: ignore[return-value]

    return wrap


class DockerBackend(SandboxBackend):
    """Sandboxes as local Docker containers, hardened by default: read-only root, every capability
    dropped, no new privileges, a non-root user, limits, and no network unless the policy says."""

    name = "docker"
    capabilities = Capabilities(
        reattach=True,
        recreate_from_snapshot=True,
        per_exec_env=True,
        network_modes=frozenset(NETWORK_MODES),
        isolated=True,
    )

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        base_url: str | None = None,
        client: DockerClient | None = None,
    ):
        """`data_dir` is the Cairn data folder: its sandboxes carry it as a label, so two data
        folders never adopt each other's containers. `base_url` overrides DOCKER_HOST; `client`
        is a ready docker.DockerClient to use instead of connecting."""
        self.data_dir = str(Path(data_dir).expanduser().resolve())
        self._base_url = base_url
        self._client = client
        self._lock = threading.Lock()

    # --- connection -------------------------------------------------------------------------

    def _where(self) -> str:
        return self._base_url or os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"

    @property
    def address(self) -> str:
        """Where the engine's API is (unix://…), for whatever else talks to the same engine."""
        return self._where()

    @property
    def api(self) -> APIClient:
        """The low-level docker-py API client, connecting on first use."""
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client.api

    def _connect(self) -> DockerClient:
        import docker

        try:
            if self._base_url:
                client = docker.DockerClient(base_url=self._base_url, timeout=CONNECT_TIMEOUT_S)
            else:
                client = docker.from_env(timeout=CONNECT_TIMEOUT_S)
            client.api.timeout = API_TIMEOUT_S
            return client
        except Exception as exc:  # docker-py wraps every transport failure differently
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> SandboxUnavailable:
        where = self._where()
        socket_path = where[len("unix://") :] if where.startswith("unix://") else None
        chain = exception_chain(exc)
        text = " ".join(str(e) for e in chain)
        if any(isinstance(e, PermissionError) for e in chain) or "Permission denied" in text:
            return SandboxUnavailable.permission_denied(socket_path or where)
        missing_socket = socket_path is not None and not os.path.exists(socket_path)
        if (
            missing_socket
            and socket_path == DEFAULT_SOCKET
            and shutil.which("dockerd") is None
            and shutil.which("docker") is None
        ):
            return SandboxUnavailable.not_installed()
        refused = any(isinstance(e, (FileNotFoundError, ConnectionRefusedError)) for e in chain)
        if missing_socket or refused or "Connection refused" in text or "No such file" in text:
            return SandboxUnavailable.not_running(where)
        return SandboxUnavailable(
            f"Docker at {where} did not answer ({_first_line(text)})",
            hint="check that the daemon runs: docker info",
        )

    def translate(self, exc: BaseException, what: str) -> CairnError:
        """A docker-py failure while doing `what`, as one line with a fix."""
        import docker.errors
        import requests.exceptions

        if isinstance(exc, CairnError):
            return exc
        if isinstance(exc, docker.errors.NotFound):
            return SandboxGone(
                f"could not {what}: Docker no longer has it ({_api_message(exc)})",
                hint="resume the task: its sandbox is made again",
            )
        if isinstance(exc, docker.errors.APIError):
            code = exc.status_code or "?"
            return SandboxError(
                f"could not {what}: Docker refused it ({code}: {_api_message(exc)})",
                hint="resume the task again; if it keeps failing, docker info shows the daemon",
            )
        if isinstance(
            exc, (requests.exceptions.RequestException, docker.errors.DockerException, OSError)
        ):
            return self._unavailable(exc)
        return SandboxError(f"could not {what}: {type(exc).__name__}: {_first_line(str(exc))}")

    def check(self) -> None:
        """A bounded ping: a daemon that accepts connections but never answers is reported after
        CONNECT_TIMEOUT_S, not waited on."""
        try:
            api: Any = self.api  # docker-py's ping takes no timeout of its own
            api._result(api._get(api._url("/_ping"), timeout=CONNECT_TIMEOUT_S))
        except SandboxUnavailable:
            raise
        except Exception as exc:
            raise self._unavailable(exc) from exc

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # --- create -----------------------------------------------------------------------------

    @docker_call("look up the sandbox image")
    def resolve_image(self, image: str) -> dict[str, Any]:
        """The local image's inspect data; ImageMissing when it is not here (never pulls)."""
        import docker.errors

        try:
            return self.api.inspect_image(image)
        except docker.errors.ImageNotFound as exc:
            raise ImageMissing(image) from exc
        except docker.errors.NotFound as exc:
            raise ImageMissing(image) from exc

    @docker_call("send the sandbox image")
    def send_image(self, image: str, target: DockerBackend) -> str:
        """Copy `image` from this engine to `target` (`docker save | docker load` over the two
        engines' APIs, streamed: never through a registry, never written to a file here); the
        image's id on `target`."""
        self.resolve_image(image)  # ImageMissing, naming it, when this engine lacks it too
        for line in target.api.load_image(self.api.get_image(image)):
            problem = line.get("error") if isinstance(line, dict) else None
            if problem:
                raise SandboxError(
                    f"{target.address} could not load {image}: {_first_line(str(problem))}"
                )
        return str(target.resolve_image(image)["Id"])

    def labels_for(
        self, spec: SandboxSpec, generation: int, snapshot_id: str | None
    ) -> dict[str, str]:
        clash = RESERVED_LABELS & set(spec.labels)
        if clash:
            raise ValueError(
                f"labels {sorted(clash)} are Cairn's own and cannot be given in a spec"
            )
        return {
            **spec.labels,
            LABEL_MANAGED: "1",
            LABEL_WORKSPACE: spec.workspace_id,
            LABEL_SESSION: spec.session_id,
            LABEL_SNAPSHOT: snapshot_id or "",
            LABEL_GENERATION: str(generation),
            LABEL_DATA_DIR: self.data_dir,
        }

    def live_session(
        self, state: SessionState, spec: SandboxSpec, container_id: str
    ) -> DockerLiveSession:
        """The live session of one of this backend's running containers."""
        return DockerLiveSession(self, state, spec, container_id)

    def network_mode(self, spec: SandboxSpec) -> str:
        """The engine's network for the spec: a bridge under `open`, else none (`allowlist`
        reaches the host's proxy through the mounted egress socket, not a network)."""
        return "bridge" if spec.network == NETWORK_OPEN else "none"

    def check_spec(self, spec: SandboxSpec) -> None:
        """Refuse, before anything is made, what this engine cannot give the spec."""

    def tmpfs_mounts(self, spec: SandboxSpec) -> dict[str, str]:
        """The sandbox's tmpfs mounts (target: options): /tmp and /run."""
        return {
            "/tmp": f"rw,nosuid,nodev,size={spec.limits.tmp_bytes}",
            "/run": RUN_TMPFS_OPTIONS,
        }

    def engine_host_config(self, spec: SandboxSpec) -> dict[str, Any]:
        """Host-config fields this engine needs beyond Docker's (none for Docker itself)."""
        return {}

    # What a sandbox's mounts are: folders of this machine bound in (`bind`), or volumes of the
    # engine (`volume`, for an engine on another machine; core.sandbox.remote).
    mount_type: Literal["bind", "volume"] = "bind"

    def sandbox_mounts(self, spec: SandboxSpec) -> list[MountSpec]:
        """The sandbox's mounts, in order: for binds the spec's own (a source is a folder here)."""
        return spec.mounts()

    def prepare(self, spec: SandboxSpec, image_id: str) -> None:
        """Make what the sandbox mounts exist and usable for its user, before it is created."""
        prepare_host_dirs(spec)

    @docker_call("create the sandbox")
    def create(
        self, spec: SandboxSpec, *, previous: SessionState | None = None
    ) -> tuple[SessionState, LiveSession]:
        import docker.errors
        import docker.types

        api = self.api
        self.check_spec(spec)
        generation = next_generation(spec, previous)
        image = self.resolve_image(spec.image)
        image_id = image["Id"]
        self.prepare(spec, image_id)
        uid, gid = spec.user
        mounts = self.sandbox_mounts(spec)
        limits = spec.limits
        cpus = min(float(limits.cpus), float(os.cpu_count() or 1))
        host_config = api.create_host_config(
            mounts=[
                docker.types.Mount(
                    m.target,
                    m.source,
                    type=self.mount_type,
                    read_only=m.read_only,
                    # A volume keeps what Cairn put there: never the image's folder copied over it.
                    no_copy=self.mount_type == "volume",
                )
                for m in mounts
            ],
            tmpfs=self.tmpfs_mounts(spec),
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=limits.pids,
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,
            nano_cpus=int(cpus * 1e9),
            network_mode=self.network_mode(spec),
            init=True,
        )
        host_config.update(self.engine_host_config(spec))
        # Only fixed, non-secret values: Docker writes the create config to disk. Secrets go into
        # each exec's environment.
        environment = {
            "HOME": CONTAINER_HOME,
            "PATH": _image_path(image),
            "LANG": "C.UTF-8",
            **spec.environment(),
        }
        name = container_name_for(spec.session_id)
        try:
            created = api.create_container(
                image=image_id,
                command=["sleep", "infinity"],
                user=f"{uid}:{gid}",
                environment=environment,
                working_dir=CONTAINER_WORKSPACE,
                labels=self.labels_for(spec, generation, spec.snapshot_id),
                name=name,
                hostname="cairn",
                host_config=host_config,
            )
        except docker.errors.APIError as exc:
            # Podman says 500 where Docker says 409.
            if exc.status_code == 409 or "already in use" in _api_message(exc):
                raise Conflict(
                    f"a sandbox named {name} already exists",
                    hint="attach to it, or remove it before creating a new one",
                ) from exc
            if exc.status_code == 404:
                raise ImageMissing(spec.image) from exc
            raise SandboxError(f"Docker refused to create {name}: {_api_message(exc)}") from exc
        container_id = created["Id"]
        try:
            api.start(container_id)
            info = api.inspect_container(container_id)
            if not info["State"]["Running"]:
                error = info["State"].get("Error") or "no error given"
                raise SandboxError(f"{name} stopped right after it started: {error}")
        except Exception as exc:
            # The container is ours and half made; nothing else refers to it yet.
            with contextlib.suppress(docker.errors.APIError):
                api.remove_container(container_id, force=True)
            if isinstance(exc, SandboxError):
                raise
            raise SandboxError(f"{name} could not be started: {_api_message(exc)}") from exc
        state = SessionState(
            backend=self.name,
            container_id=container_id,
            container_name=name,
            image_digest=image_id,
            mounts=mounts,
            generation=generation,
            snapshot_id=spec.snapshot_id,
        )
        return state, self.live_session(state, spec, container_id)

    # --- attach -----------------------------------------------------------------------------

    @docker_call("reattach to the sandbox")
    def attach(self, state: SessionState, spec: SandboxSpec) -> AttachResult:
        """Reattach in whatever state the container is: paused → unpaused, exited or created →
        started; dead, being removed, or not coming up → Mismatch (removed and made again);
        mounts bound to a folder that is no longer the live one (compared by device and inode)
        → Mismatch."""
        found = self._inspect(state)
        if not isinstance(found, dict):
            return found
        info = found
        reasons = self.compare(info, state, spec)
        if reasons:
            return Mismatch(reasons)
        name = state.container_name or info["Id"][:12]
        status = _status(info)
        if status == "paused":
            try:
                self.api.unpause(info["Id"])
            except Exception as exc:  # noqa: BLE001 - a container that stays paused is replaced
                return Mismatch(
                    [f"{name} was paused and could not be unpaused: {_api_message(exc)}"]
                )
            info = self.api.inspect_container(info["Id"])
        elif status in ("exited", "created"):
            try:
                self.api.start(info["Id"])
            except Exception as exc:  # noqa: BLE001 - e.g. a mount source that is gone
                return Mismatch(
                    [f"{name} was {status} and could not be started: {_api_message(exc)}"]
                )
            info = self.api.inspect_container(info["Id"])
        elif status != "running":
            return Mismatch([f"{name} is {status}"])
        if _status(info) != "running":
            why = info["State"].get("Error") or f"exit code {info['State'].get('ExitCode')}"
            return Mismatch([f"{name} did not stay up ({_status(info)}: {why})"])
        stale = self._stale_mounts(info, spec)
        if stale:
            return Mismatch(stale)
        return Attached(self.live_session(state, spec, info["Id"]))

    @docker_call("look at the sandbox")
    def look(self, state: SessionState, spec: SandboxSpec) -> AttachResult:
        """The container as it is, changing nothing: a stopped or absent one is Gone (the
        evidence), a paused one cannot be looked into (SandboxError)."""
        if state.backend != self.name:
            return Mismatch([f"the session state belongs to the {state.backend} backend"])
        found = self._inspect(state)
        if not isinstance(found, dict):
            return found
        name = state.container_name or found["Id"][:12]
        status = _status(found)
        if status == "paused":
            raise SandboxError(
                f"the sandbox {name} is paused: its processes cannot be looked at",
                hint=f"docker unpause {name}, or resume the task",
            )
        if status != "running":
            code = found["State"].get("ExitCode")
            return Gone(f"container {name} is {status}" + (f" (exit code {code})" if code else ""))
        return Attached(self.live_session(state, spec, found["Id"]))

    def _inspect(self, state: SessionState) -> dict[str, Any] | Gone | Mismatch:
        """The container `state` names, or why it is not there."""
        import docker.errors

        if state.backend != self.name:
            return Mismatch([f"the session state belongs to the {state.backend} backend"])
        ref = state.container_id or state.container_name
        if not ref:
            return Gone("the session state names no container")
        try:
            return self.api.inspect_container(ref)
        except docker.errors.NotFound:
            replaced = self._replacement(state)
            if replaced is not None:
                what = f"container {state.container_name} was replaced by another one"
                return Mismatch([f"{what} ({replaced[:12]})"])
            short_id = (state.container_id or "")[:12]
            return Gone(f"container {state.container_name or ref} ({short_id}) no longer exists")

    def _stale_mounts(self, info: Mapping[str, Any], spec: SandboxSpec) -> list[str]:
        """Bind mounts whose host folder was deleted (or replaced) since the container started:
        the path is the same, the folder it holds is not. Seen from the host through the
        container's root (/proc/<pid>/root), or, where that is closed, by `stat` inside."""
        pid = int((info.get("State") or {}).get("Pid") or 0)
        # The writable folders, and the workspace's protected git paths: a config Cairn rewrote
        # on the host as a new file is not the one the container's mount still holds.
        mounts = [m for m in spec.mounts() if not m.read_only or m.target in PROTECTED_GIT_TARGETS]
        seen: dict[str, tuple[int, int] | None] = {}
        for m in mounts:
            try:
                st = os.stat(f"/proc/{pid}/root{m.target}") if pid > 0 else None
                seen[m.target] = (st.st_dev, st.st_ino) if st else None
            except OSError:
                seen[m.target] = None
        if any(v is None for v in seen.values()):
            seen.update(self._stat_inside(info["Id"], [t for t, v in seen.items() if v is None]))
        reasons = []
        for m in mounts:
            inside = seen.get(m.target)
            try:
                st = os.stat(m.source)
                host: tuple[int, int] | None = (st.st_dev, st.st_ino)
            except OSError:
                host = None
            if inside is not None and host != inside:
                reasons.append(
                    f"mount {m.target} holds a {'folder' if os.path.isdir(m.source) else 'file'} "
                    f"that is no longer {m.source} "
                    "(it was deleted or replaced while the sandbox ran)"
                )
        return reasons

    def _stat_inside(self, container_id: str, targets: list[str]) -> dict[str, tuple[int, int]]:
        if not targets:
            return {}
        try:
            exec_id = self.api.exec_create(
                container_id, ["stat", "-c", "%n %d %i", *targets], user="", workdir="/"
            )["Id"]
            out = self.api.exec_start(exec_id, demux=True)[0] or b""
        except Exception:  # noqa: BLE001 - no answer means no evidence either way
            return {}
        found = {}
        for line in out.decode(errors="replace").splitlines():
            parts = line.rsplit(" ", 2)
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                found[parts[0]] = (int(parts[1]), int(parts[2]))
        return found

    def _replacement(self, state: SessionState) -> str | None:
        import docker.errors

        if not state.container_name or not state.container_id:
            return None
        try:
            other = self.api.inspect_container(state.container_name)
        except docker.errors.NotFound:
            return None
        return other["Id"] if other["Id"] != state.container_id else None

    def compare(self, info: Mapping[str, Any], state: SessionState, spec: SandboxSpec) -> list[str]:
        """Why the inspected container is not the sandbox `state` and `spec` describe ([] if it
        is)."""
        reasons: list[str] = []
        actual_image = info.get("Image")
        if actual_image != state.image_digest:
            reasons.append(
                f"image differs: container runs {actual_image}, "
                f"the state records {state.image_digest}"
            )
        if spec.image.startswith("sha256:") and spec.image != actual_image:
            reasons.append(
                f"image differs: container runs {actual_image}, the spec asks for {spec.image}"
            )
        if spec.snapshot_id != state.snapshot_id:
            reasons.append(
                f"snapshot differs: the state carries {state.snapshot_id}, "
                f"the spec {spec.snapshot_id}"
            )
        actual_labels = (info.get("Config") or {}).get("Labels") or {}
        for key, want in self.labels_for(spec, state.generation, state.snapshot_id).items():
            have = actual_labels.get(key)
            if have != want:
                reasons.append(f"label {key} is {have!r}, expected {want!r}")
        source = "Name" if self.mount_type == "volume" else "Source"
        actual_mounts = {
            MountSpec(m.get(source, ""), m.get("Destination", ""), not m.get("RW", True))
            for m in info.get("Mounts") or []
            if m.get("Type") == self.mount_type
        }
        expected_now = set(self.sandbox_mounts(spec))
        for label, expected in (("state", set(state.mounts)), ("spec", expected_now)):
            for m in sorted(expected - actual_mounts, key=lambda m: m.target):
                reasons.append(
                    f"mount {m.source} -> {m.target} ({'ro' if m.read_only else 'rw'}) "
                    f"from the {label} is not on the container"
                )
            for m in sorted(actual_mounts - expected, key=lambda m: m.target):
                reasons.append(
                    f"mount {m.source} -> {m.target} ({'ro' if m.read_only else 'rw'}) "
                    f"on the container is not in the {label}"
                )
        actual_env = set((info.get("Config") or {}).get("Env") or [])
        missing_env = sorted(
            k for k, v in spec.environment().items() if f"{k}={v}" not in actual_env
        )
        if missing_env:
            reasons.append(
                "the sandbox's protective settings differ: "
                f"{', '.join(missing_env)} not as the spec asks"
            )
        uid, gid = spec.user
        actual_user = (info.get("Config") or {}).get("User")
        if actual_user != f"{uid}:{gid}":
            reasons.append(
                f"user differs: container runs as {actual_user!r}, the spec asks for {uid}:{gid}"
            )
        want_network = self.network_mode(spec)
        actual_network = (info.get("HostConfig") or {}).get("NetworkMode")
        if actual_network != want_network:
            reasons.append(
                f"network differs: container has {actual_network!r}, the spec asks for "
                f"{spec.network!r} ({want_network})"
            )
        return list(dict.fromkeys(reasons))

    # --- listing and removal ----------------------------------------------------------------

    def _filters(self) -> dict[str, Any]:
        return {"label": [f"{LABEL_MANAGED}=1", f"{LABEL_DATA_DIR}={self.data_dir}"]}

    @docker_call("list the sandboxes")
    def list_sessions(self) -> list[SessionSummary]:
        out = []
        for c in self.api.containers(all=True, filters=self._filters()):
            labels = c.get("Labels") or {}
            generation = labels.get(LABEL_GENERATION)
            out.append(
                SessionSummary(
                    container_id=c["Id"],
                    container_name=(c.get("Names") or ["/"])[0].lstrip("/"),
                    workspace_id=labels.get(LABEL_WORKSPACE),
                    session_id=labels.get(LABEL_SESSION),
                    snapshot_id=labels.get(LABEL_SNAPSHOT) or None,
                    generation=int(generation) if generation and generation.isdigit() else None,
                    status=c.get("State") or "unknown",
                    image=c.get("ImageID") or c.get("Image") or "",
                    created=datetime.fromtimestamp(c.get("Created", 0), tz=UTC),
                )
            )
        return sorted(out, key=lambda s: s.created)

    @docker_call("remove the sandbox")
    def remove(self, container_id_or_name: str) -> bool:
        """Remove one of this data folder's containers; one already being removed is waited
        for (up to REMOVAL_WAIT_S), so its name is free when this returns."""
        import docker.errors

        try:
            info = self.api.inspect_container(container_id_or_name)
        except docker.errors.NotFound:
            return False
        labels = (info.get("Config") or {}).get("Labels") or {}
        if labels.get(LABEL_MANAGED) != "1" or labels.get(LABEL_DATA_DIR) != self.data_dir:
            raise SandboxError(
                f"{container_id_or_name} is not a sandbox of this Cairn data folder; "
                "Cairn leaves it alone"
            )
        try:
            self.api.remove_container(info["Id"], force=True)
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: a removal is already in progress
                raise
        deadline = time.monotonic() + REMOVAL_WAIT_S
        while time.monotonic() < deadline:
            try:
                self.api.inspect_container(info["Id"])
            except docker.errors.NotFound:
                return True
            time.sleep(0.2)
        raise SandboxError(
            f"{container_id_or_name} was still being removed after {REMOVAL_WAIT_S} s",
            hint="docker info shows whether the daemon is stuck; resume again once it is gone",
        )


class DockerExecStream(ExecStream):
    def __init__(self, api: APIClient, exec_id: str):
        self._api = api
        self.exec_id = exec_id
        self._gen: CancellableStream[tuple[bytes | None, bytes | None]] | None = None

    def __iter__(self) -> Iterator[OutputChunk]:
        gen = self._gen = self._api.exec_start(self.exec_id, stream=True, demux=True)
        try:
            for out, err in gen:
                if out:
                    yield OutputChunk("stdout", out)
                if err:
                    yield OutputChunk("stderr", err)
        finally:
            gen.close()
        self.exit_code = _exec_exit_code(self._api, self.exec_id)

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()


class DockerLiveSession(LiveSession):
    """A running container of this backend."""

    def __init__(
        self, backend: DockerBackend, state: SessionState, spec: SandboxSpec, container_id: str
    ):
        super().__init__(state, spec)
        self.backend = backend
        self.container_id = container_id

    @property
    def _api(self) -> APIClient:
        return self.backend.api

    def _user(self) -> str:
        uid, gid = self.spec.user
        return f"{uid}:{gid}"

    def _exec_create(
        self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str, *, stdin: bool = False
    ) -> str:
        if not argv:
            raise ValueError("an exec needs a command")
        created = self._api.exec_create(
            self.container_id,
            cmd=[str(a) for a in argv],
            stdout=True,
            stderr=True,
            stdin=stdin,
            tty=False,
            user=self._user(),
            environment=check_env(env),
            workdir=cwd,
        )
        return created["Id"]

    def _prepare_run(self, run_id: str) -> None:
        """The run's folder, ready for a new process: a previous attempt's pid and exit code
        gone, handed to the sandbox user."""
        uid, gid = self.spec.user
        reset_run_dir(self.spec.run_dir(run_id), uid, gid)

    def _started_pid(self, run_id: str) -> int | None:
        """The detached process's pid, once its wrapper has written it."""
        return read_pid(self.spec.run_dir(run_id))

    @docker_call("start the run in the sandbox")
    def exec_detached(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = CONTAINER_WORKSPACE,
        run_id: str,
    ) -> DetachedProcess:
        check_run_id(run_id)
        run_dir = self.spec.run_dir(run_id)
        self._prepare_run(run_id)
        wrapped = ["sh", "-c", DETACHED_WRAPPER, "cairn-run", f"{CONTAINER_RUNS}/{run_id}", *argv]
        exec_id = self._exec_create(wrapped, env, cwd)
        self._api.exec_start(exec_id, detach=True)
        deadline = time.monotonic() + DETACHED_START_TIMEOUT_S
        next_inspect = time.monotonic() + 0.1
        while True:
            pid = self._started_pid(run_id)
            if pid is not None:
                return DetachedProcess(run_id=run_id, pid=pid, run_dir=run_dir)
            now = time.monotonic()
            if now >= next_inspect:
                # An exec that cannot start at all (no such cwd, no sh) never writes its pid file.
                info = self._api.exec_inspect(exec_id)
                if (
                    not info.get("Running")
                    and info.get("ExitCode") is not None
                    and self._started_pid(run_id) is None
                ):
                    raise SandboxError(
                        f"run {run_id} could not start in {self.state.container_name} "
                        f"(exit code {info.get('ExitCode')}; is {cwd} there?)"
                    )
                next_inspect = now + 0.2
            if now >= deadline:
                raise SandboxError(
                    f"run {run_id} did not start within {DETACHED_START_TIMEOUT_S} s"
                )
            time.sleep(0.005)

    @docker_call("run a command in the sandbox")
    def exec_stream(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = CONTAINER_WORKSPACE,
    ) -> ExecStream:
        return DockerExecStream(self._api, self._exec_create(argv, env, cwd))

    @docker_call("run a command in the sandbox")
    def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = CONTAINER_WORKSPACE,
        timeout: float = 60.0,
    ) -> ExecResult:
        stream = DockerExecStream(self._api, self._exec_create(argv, env, cwd))
        out: list[bytes] = []
        err: list[bytes] = []
        failure: list[BaseException] = []

        def pump() -> None:
            try:
                for chunk in stream:
                    (out if chunk.stream == "stdout" else err).append(chunk.data)
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                failure.append(exc)

        reader = threading.Thread(target=pump, name="cairn-exec", daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            self._kill_exec(stream.exec_id)
            reader.join(5)
            raise ExecTimeout(argv, timeout, stdout=_text(out), stderr=_text(err))
        if failure:
            raise failure[0]
        return ExecResult(
            stream.exit_code if stream.exit_code is not None else -1, _text(out), _text(err)
        )

    def _kill_exec(self, exec_id: str) -> None:
        """Kill a timed-out exec and its process group (each exec leads its own session)."""
        host_pid = int(self._api.exec_inspect(exec_id).get("Pid") or 0)
        if host_pid <= 0:
            return
        ns_pid = _namespaced_pid(host_pid)
        if ns_pid is not None:
            self._quiet_exec(
                [
                    "sh",
                    "-c",
                    'kill -s KILL -- "-$1" 2>/dev/null || kill -s KILL "$1"',
                    "sh",
                    str(ns_pid),
                ]
            )
            return
        with contextlib.suppress(OSError):
            os.kill(host_pid, 9)

    def _quiet_exec(self, argv: Sequence[str]) -> int:
        exec_id = self._exec_create(argv, None, "/")
        self._api.exec_start(exec_id)
        return _exec_exit_code(self._api, exec_id)

    @docker_call("look at the run's process")
    def process_alive(self, pid: int, *, run_id: str | None = None) -> bool:
        if pid <= 0:
            return False
        # The probe forks nothing (shell built-ins only), so it still answers in a sandbox at
        # its pids limit; it says "alive" or "dead" in words, and anything else — no shell
        # could start, Docker refused the exec — is no answer, never a death.
        # Not this check itself: in a recreated sandbox the pid namespace hands out the same
        # numbers again, so the recorded pid can be this very shell (whose arguments hold the
        # marker). Its children do not exist yet when /proc/$1/stat is read.
        script = (
            '[ "$1" != "$$" ] || { echo dead; exit 0; }; '
            'read -r line < "/proc/$1/stat" 2>/dev/null || { echo dead; exit 0; }; '
            's=${line##*) }; [ "${s%% *}" != Z ] || { echo dead; exit 0; }; '
            '[ -n "$2" ] || { echo alive; exit 0; }; '
            'c=; read -r c < "/proc/$1/cmdline" 2>/dev/null; '
            # cmdline's NULs are dropped by read: the marker must not run on into a digit
            # (attempt 2 is not attempt 21).
            'case "$c" in *"$2"[!0-9]*|*"$2") echo alive;; *) echo dead;; esac'
        )
        marker = f"{CONTAINER_RUNS}/{check_run_id(run_id)}" if run_id else ""
        code, out, err = self._probe(["sh", "-c", script, "sh", str(pid), marker])
        verdict = out.strip()
        if verdict == "alive":
            return True
        if verdict == "dead":
            return False
        raise ProbeFailed(
            f"could not look at process {pid} in {self.state.container_name}: "
            + _first_line(err or out or f"the probe ended with exit code {code}"),
            hint="this is retried; the run is left as it is",
        )

    def _probe(self, argv: Sequence[str]) -> tuple[int, str, str]:
        """A short exec as the sandbox user: (exit code, stdout, stderr); bounded."""
        result = self.exec(argv, env={}, cwd="/", timeout=PROBE_TIMEOUT_S)
        return result.exit_code, result.stdout, result.stderr

    @docker_call("signal the run's process")
    def signal_process(self, pid: int, signal_name: str = "TERM") -> bool:
        if pid <= 0 or not signal_name.isalnum():
            raise ValueError(f"bad pid or signal: {pid} {signal_name}")
        script = 'kill -s "$1" -- "-$2" 2>/dev/null || kill -s "$1" "$2" 2>/dev/null'
        return self._quiet_exec(["sh", "-c", script, "sh", signal_name, str(pid)]) == 0

    @docker_call("read the sandbox's figures")
    def stats(self) -> dict[str, Any]:
        info = self._api.inspect_container(self.container_id)
        started = _parse_docker_time(info["State"].get("StartedAt"))
        running = bool(info["State"].get("Running"))
        out: dict[str, Any] = {
            "running": running,
            "uptime_s": (datetime.now(UTC) - started).total_seconds()
            if running and started
            else None,
            "cpu_percent": None,
            "memory_bytes": None,
            "memory_limit_bytes": (info.get("HostConfig") or {}).get("Memory") or None,
            "pids": None,
        }
        if not running:
            return out
        # Docker takes two samples for the cpu figure: this call lasts about a second.
        raw = self._api.stats(self.container_id, stream=False)
        cpu, pre = raw.get("cpu_stats") or {}, raw.get("precpu_stats") or {}
        cpu_delta = (cpu.get("cpu_usage") or {}).get("total_usage", 0) - (
            pre.get("cpu_usage") or {}
        ).get("total_usage", 0)
        system_delta = cpu.get("system_cpu_usage", 0) - pre.get("system_cpu_usage", 0)
        online = (
            cpu.get("online_cpus")
            or len((cpu.get("cpu_usage") or {}).get("percpu_usage") or [])
            or 1
        )
        if system_delta > 0 and cpu_delta >= 0:
            out["cpu_percent"] = round(cpu_delta / system_delta * online * 100.0, 2)
        mem = raw.get("memory_stats") or {}
        if "usage" in mem:
            details = mem.get("stats") or {}
            cache = details.get(
                "total_inactive_file", details.get("inactive_file", details.get("cache", 0))
            )
            out["memory_bytes"] = max(0, int(mem["usage"]) - int(cache or 0))
        out["pids"] = (raw.get("pids_stats") or {}).get("current")
        return out

    @docker_call("stop the sandbox")
    def stop(self) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.NotFound):
            self._api.stop(self.container_id, timeout=STOP_TIMEOUT_S)

    @docker_call("remove the sandbox")
    def destroy(self) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.NotFound):
            self._api.remove_container(self.container_id, force=True)


# --- helpers ----------------------------------------------------------------------------------


def _exec_exit_code(api: APIClient, exec_id: str, wait_s: float = 5.0) -> int:
    # The output stream can close a moment before Docker marks the exec finished.
    deadline = time.monotonic() + wait_s
    while True:
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        if time.monotonic() >= deadline:
            raise SandboxError(f"Docker did not report an exit code for exec {exec_id[:12]}")
        time.sleep(0.01)


def _namespaced_pid(host_pid: int) -> int | None:
    """The pid a host process has inside its container (from /proc/<pid>/status NSpid)."""
    try:
        with open(f"/proc/{host_pid}/status") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def _status(info: Mapping[str, Any]) -> str:
    """The container's state in Docker's words: running, paused, exited, created, dead,
    removing, restarting."""
    state = info.get("State") or {}
    status = state.get("Status")
    if status:
        return str(status)
    if state.get("Paused"):
        return "paused"
    return "running" if state.get("Running") else "exited"


def _image_path(image: Mapping[str, Any]) -> str:
    for item in (image.get("Config") or {}).get("Env") or []:
        if item.startswith("PATH="):
            return item[len("PATH=") :]
    return DEFAULT_PATH


def _text(parts: list[bytes]) -> str:
    return b"".join(parts).decode("utf-8", errors="replace")


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no detail"
    return line if len(line) <= 200 else line[:199] + "…"


def _api_message(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    return _first_line(str(explanation or exc))


def _parse_docker_time(value: str | None) -> datetime | None:
    if not value or value.startswith("0001-"):
        return None
    text = value.rstrip("Z")
    if "." in text:
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]}"
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    except ValueError:
        return None
