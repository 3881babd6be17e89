"""First-run checks: is Docker installed, running and reachable, is there a real keyring, a recent
enough git and room on the disk of the data folder, and what each agent engine has of what its
first run needs (its binary found, signed in, its endpoint reachable under a new task's default
policy); each answer with one line to fix it.

Owns probing those and phrasing what was found; the sandbox backend, the keyring store
(core.credentials), the vault and the engines' sign-in (core.signin) keep their own checks for the
moment they are used. Nothing here raises: a probe that fails unexpectedly or hangs is itself
reported as an error check.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from core import signin
from core.credentials import Credentials, SecretStore
from core.engines import ENGINES
from core.errors import CairnError, exception_chain
from core.sandbox.base import DEFAULT_IMAGE
from core.sandbox.docker import DEFAULT_SOCKET
from core.sandbox.hosts import DOCKER, LOCAL, PODMAN, SandboxHost, bridge_for
from core.sandbox.ssh_bridge import SshBridge
from core.settings import Settings
from core.signin import EngineStatus, Problem

OK = "ok"
WARNING = "warning"
ERROR = "error"
STATES = (OK, WARNING, ERROR)

DOCKER_TIMEOUT_S = 3.0  # per Docker probe (connect, then the API's version call)
GIT_TIMEOUT_S = 3.0
DEADLINE_S = 6.0  # the whole run: checks run side by side and a late one is reported as such

# Why 2.29: the importer fetches with `--no-write-fetch-head` (git 2.29) and workspaces are made
# with `git init --initial-branch` (2.28). Older gits fail at the first import.
MIN_GIT = (2, 29)
MIN_GIT_TEXT = "2.29"

GIB = 1024**3
DISK_ERROR_BYTES = 1 * GIB
DISK_WARNING_BYTES = 5 * GIB

INSTALL_DOCKER = "sudo apt install docker.io"
START_DOCKER = "sudo systemctl start docker"
RESTART_DOCKER = "sudo systemctl restart docker"
JOIN_DOCKER_GROUP = "sudo usermod -aG docker $USER"
INSTALL_GIT = "sudo apt install git"
INSTALL_KEYRING = "sudo apt install gnome-keyring"


@dataclass(frozen=True)
class Check:
    """One finding: `state` is ok, warning or error; `detail` and `fix` are one line each.

    `command` is the shell command inside `fix`, when there is one to copy.
    """

    id: str
    title: str
    state: str
    detail: str
    fix: str | None = None
    command: str | None = None
    engine: str | None = None  # the agent engine this check is about
    facts: tuple[str, ...] = ()  # what was found, one line each (an engine's path, version…)
    problems: tuple[Problem, ...] = ()  # every problem with its fix (`fix` is the first one's)
    note: str | None = None  # a plain word beside the check (why a sign-in cannot be used)
    host: str | None = None  # the sandbox host this check is about

    @property
    def ok(self) -> bool:
        return self.state == OK

    def actions(self) -> list[str]:
        """What the GUI may offer for the problems (core.signin's ACTION_*), each once."""
        return list(dict.fromkeys(p.action for p in self.problems if p.action))


@dataclass(frozen=True)
class Summary:
    """What the checks mean for the user: can sandboxes run with Docker, may they go on."""

    sandboxes: bool  # Docker sandboxes can be made now
    may_continue: bool  # always: without Docker, tasks can still be browsed (and the host offered)
    errors: int
    warnings: int
    headline: str


def summary(checks: Sequence[Check]) -> Summary:
    # The default sandbox host when it is not the local Docker engine, else Docker itself.
    docker = next((c for c in checks if c.id == "host"), None) or next(
        (c for c in checks if c.id == "docker"), None
    )
    sandboxes = docker is not None and docker.ok
    errors = sum(1 for c in checks if c.state == ERROR)
    warnings = sum(1 for c in checks if c.state == WARNING)
    if not sandboxes:
        what = "The sandbox host" if docker is not None and docker.id == "host" else "Docker"
        headline = (
            f"{what} is not usable, so sandboxes cannot run: tasks can still be browsed, "
            "compared and created, and runs can use the host backend (no isolation)."
        )
    elif errors:
        headline = "Sandboxes can run, but some checks failed: see how to fix them below."
    elif warnings and all(c.engine for c in checks if c.state == WARNING):
        headline = (
            "Sandboxes can run shell tasks; an agent engine needs a step before its first "
            "run: see below."
        )
    elif warnings:
        headline = "Cairn can run; some things deserve a look."
    else:
        headline = "Everything Cairn needs is in place."
    return Summary(sandboxes, True, errors, warnings, headline)


# -- running them --------------------------------------------------------------------------------

TITLES = {
    "docker": "Docker",
    "host": "Sandbox host",
    "keyring": "Keyring",
    "git": "Git",
    "disk": "Disk space",
}


def engine_check_id(engine: str) -> str:
    return f"engine-{engine}"


def _title(check_id: str) -> str:
    if check_id.startswith("engine-"):
        name = check_id[len("engine-") :]
        engine = ENGINES.get(name)
        return f"{(engine.label if engine else '') or name} engine"
    return TITLES.get(check_id, check_id)


def run_checks(
    data_root: str | os.PathLike[str],
    *,
    which: Callable[[str], str | None] = shutil.which,
    docker_host: str | None = None,
    probe_socket: Callable[[str, float], None] | None = None,
    docker_version: Callable[[str, float], str] | None = None,
    keyring_backend: Any = None,
    git: str = "git",
    disk_usage: Callable[[str], Any] = shutil.disk_usage,
    docker_timeout: float = DOCKER_TIMEOUT_S,
    deadline: float = DEADLINE_S,
    engines: Sequence[str] | None = None,
    engine_status: Callable[[str], EngineStatus] | None = None,
    host: SandboxHost | None = None,
    image: str | None = None,
    host_facts: Callable[[str, str, float], EngineFacts] | None = None,
) -> list[Check]:
    """Every check, in a fixed order (docker, keyring, git, disk, then one per agent engine),
    within `deadline` seconds.

    `which` looks a program up on PATH; `docker_host` overrides DOCKER_HOST; `probe_socket` and
    `docker_version` replace the raw socket connect and the API call; `keyring_backend` replaces
    `keyring.get_keyring()`; `git` is the git program; `disk_usage` is `shutil.disk_usage`'s kind;
    `engines` the agent engines to check (all of them by default) and `engine_status` what tells
    an engine's status (core.signin.status on the data folder's settings and the keyring).
    `host` is the default sandbox host: when it is not the local Docker engine, its check
    (reachable, API version, `image` there, free disk; `host_facts` replaces the API calls)
    takes the Docker check's place.
    """
    if engine_status is None:
        settings = Settings(data_root)
        # Signing in touches only the keyring, never grants: no store is needed.
        credentials = Credentials(None, SecretStore(backend=keyring_backend))

        def engine_status(name: str) -> EngineStatus:
            return signin.status(credentials, name, settings)

    status_of = engine_status
    probes: dict[str, Callable[[], Check]] = {}
    if host is not None and not host.local_docker:
        chosen = host
        probes["host"] = lambda: check_host(
            chosen,
            image or DEFAULT_IMAGE,
            which=which,
            probe_socket=probe_socket,
            facts_of=host_facts,
            disk_usage=disk_usage,
            timeout=docker_timeout,
        )
    else:
        probes["docker"] = lambda: check_docker(
            which=which,
            docker_host=docker_host,
            probe_socket=probe_socket,
            docker_version=docker_version,
            timeout=docker_timeout,
        )
    probes.update(
        {
            "keyring": lambda: check_keyring(keyring_backend),
            "git": lambda: check_git(git),
            "disk": lambda: check_disk(data_root, disk_usage=disk_usage),
        }
    )
    for engine in signin.agent_engines() if engines is None else engines:
        probes[engine_check_id(engine)] = partial(check_engine, engine, status_of)
    results: dict[str, Check] = {}
    threads = []
    for check_id, probe in probes.items():
        thread = threading.Thread(
            target=_run_one, args=(check_id, probe, results), name=f"health-{check_id}", daemon=True
        )
        thread.start()
        threads.append(thread)
    end = time.monotonic() + deadline
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    out = []
    for check_id in probes:
        found = results.get(check_id)
        if found is None:  # still waiting: a hung daemon or a keyring unlock prompt
            late = "engine" if check_id.startswith("engine-") else check_id
            fix, command = _LATE_FIX.get(late, (None, None))
            title = _title(check_id)
            found = Check(
                check_id,
                title,
                ERROR,
                f"the {title[:1].lower() + title[1:]} check did not finish within {deadline:g} s",
                fix,
                command,
                engine=check_id[len("engine-") :] if late == "engine" else None,
            )
        out.append(found)
    return out


_LATE_FIX: dict[str, tuple[str, str | None]] = {
    "docker": (f"restart the Docker daemon: {RESTART_DOCKER}", RESTART_DOCKER),
    "host": ("check that the sandbox host's engine answers, then check again", None),
    "keyring": (
        "unlock your desktop keyring (it may be waiting for its password), then check again",
        None,
    ),
    "engine": (
        "unlock your desktop keyring if it asks for its password, then check again",
        None,
    ),
}


def _run_one(check_id: str, probe: Callable[[], Check], results: dict[str, Check]) -> None:
    try:
        results[check_id] = probe()
    except Exception as exc:  # noqa: BLE001 - a failed probe is a finding, never a crash
        results[check_id] = Check(
            check_id,
            _title(check_id),
            ERROR,
            f"the check failed: {_describe(exc)}",
            None,
        )


def _describe(exc: BaseException) -> str:
    text = _first_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 200 else line[:199] + "…"


# -- agent engines -------------------------------------------------------------------------------


def check_engine(engine: str, status_of: Callable[[str], EngineStatus]) -> Check:
    """One agent engine: found (path, version), signed in, its endpoint reachable under a new
    task's default policy. A problem is a warning: Cairn runs, that engine's tasks do not."""
    st = status_of(engine)
    facts = tuple(signin.facts(st))
    check_id, title = engine_check_id(engine), _title(engine_check_id(engine))
    if st.ok:
        label = st.signed_in_label or "its credential"
        version = f" {st.found.version}" if st.found.version else ""
        detail = f"ready: {st.found.path or 'found'}{version}, signed in with {label}"
        return Check(check_id, title, OK, detail, engine=engine, facts=facts, note=st.note)
    first = st.issues[0]
    command = first.command if first.fix and first.command and first.command in first.fix else None
    return Check(
        check_id,
        title,
        WARNING,
        first.what,
        first.fix,
        command,
        engine=engine,
        facts=facts,
        problems=st.issues,
        note=st.note,
    )


# -- docker --------------------------------------------------------------------------------------


def _docker_not_installed(where: str) -> Check:
    return Check(
        "docker",
        "Docker",
        ERROR,
        f"Docker is not installed: no docker or dockerd program on PATH and no socket at {where}",
        f"install it: {INSTALL_DOCKER}",
        INSTALL_DOCKER,
    )


def _docker_not_running(where: str, why: str) -> Check:
    return Check(
        "docker",
        "Docker",
        ERROR,
        f"Docker is installed but its daemon is not running ({why} at {where})",
        f"start it: {START_DOCKER}",
        START_DOCKER,
    )


def _docker_permission(path: str) -> Check:
    return Check(
        "docker",
        "Docker",
        ERROR,
        f"Docker runs, but your user may not use it: permission denied on {path}",
        f"add yourself to the docker group: {JOIN_DOCKER_GROUP}, then log out and in again",
        JOIN_DOCKER_GROUP,
    )


def _docker_no_answer(where: str, why: str) -> Check:
    return Check(
        "docker",
        "Docker",
        ERROR,
        f"the Docker daemon at {where} did not answer ({why})",
        f"restart it: {RESTART_DOCKER}",
        RESTART_DOCKER,
    )


def _unix_path(where: str) -> str | None:
    if where.startswith("unix://"):
        return where[len("unix://") :]
    if where.startswith("/"):
        return where
    return None


def connect_unix(path: str, timeout: float) -> None:
    """Open and close a connection to a unix socket: OSError says why it cannot be used."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    finally:
        sock.close()


def docker_api_version(base_url: str, timeout: float) -> str:
    """The engine's version through docker-py, every call bounded by `timeout`."""
    import docker

    # The stubs say int; docker-py hands the value to requests, which takes seconds as a float.
    client = docker.APIClient(base_url=base_url, timeout=timeout)  # type: ignore[arg-type]
    try:
        return str(client.version().get("Version") or "(unknown version)")
    finally:
        client.close()


def _is_permission(exc: BaseException) -> bool:
    return isinstance(exc, PermissionError) or (
        isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM)
    )


def check_docker(
    *,
    which: Callable[[str], str | None] = shutil.which,
    docker_host: str | None = None,
    probe_socket: Callable[[str, float], None] | None = None,
    docker_version: Callable[[str, float], str] | None = None,
    timeout: float = DOCKER_TIMEOUT_S,
) -> Check:
    """Installed (programs on PATH or a socket), running (it answers), permitted (the socket)."""
    where = docker_host or os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    installed = any(which(name) for name in ("docker", "dockerd"))
    path = _unix_path(where)
    if path is not None:
        try:
            os.stat(path)
        except PermissionError:
            return _docker_permission(path)  # the socket's folder is closed to this user
        except OSError:
            if not installed:
                return _docker_not_installed(where)
            return _docker_not_running(where, "no socket")
        try:
            (probe_socket or connect_unix)(path, timeout)
        except OSError as exc:
            if _is_permission(exc):
                return _docker_permission(path)
            if isinstance(exc, (ConnectionRefusedError, FileNotFoundError)):
                return _docker_not_running(where, "the socket refuses connections")
            if isinstance(exc, TimeoutError):
                return _docker_no_answer(where, f"no connection within {timeout:g} s")
            return _docker_no_answer(where, exc.strerror or _describe(exc))
    try:
        version = (docker_version or docker_api_version)(where, timeout)
    except Exception as exc:  # noqa: BLE001 - docker-py wraps transport failures in many ways
        chain = exception_chain(exc)
        text = " ".join(str(e) for e in chain)
        if any(_is_permission(e) for e in chain) or "Permission denied" in text:
            return _docker_permission(path or where)
        if any(isinstance(e, TimeoutError) for e in chain) or "timed out" in text.lower():
            return _docker_no_answer(where, f"no answer within {timeout:g} s")
        if (
            any(isinstance(e, (ConnectionRefusedError, FileNotFoundError)) for e in chain)
            or "Connection refused" in text
            or "No such file" in text
        ):
            if not installed and path is None:
                return _docker_not_installed(where)
            return _docker_not_running(where, "connection refused")
        return _docker_no_answer(where, _describe(exc))
    return Check("docker", "Docker", OK, f"Docker {version} is running at {where}")


# -- keyring -------------------------------------------------------------------------------------


def _keyring_name(backend: Any) -> str:
    inner = getattr(backend, "backends", None)
    if inner:
        backend = inner[0]  # a chainer: its first backend is the one in charge
    name = getattr(backend, "name", None)
    if isinstance(name, str) and name:
        return name
    cls = type(backend)
    return f"{cls.__module__}.{cls.__qualname__}"


def check_keyring(backend: Any = None) -> Check:
    """A real OS keyring (named), a plaintext or unrecognised one (warning), or none (error).

    `backend` defaults to what `keyring` picks; core.credentials decides what kind it is.
    """
    store = SecretStore(backend=backend)
    status = store.check()
    name = _keyring_name(store.backend)
    if status.usable and status.real:
        return Check("keyring", "Keyring", OK, f"secrets are kept in the OS keyring ({name})")
    if status.usable and status.kind == "plaintext":
        return Check(
            "keyring",
            "Keyring",
            WARNING,
            f"secrets would be stored unencrypted in a plain file ({name}, keyrings.alt)",
            "install gnome-keyring (or another Secret Service) and remove keyrings.alt: "
            f"{INSTALL_KEYRING}",
            INSTALL_KEYRING,
        )
    if status.usable:
        return Check(
            "keyring",
            "Keyring",
            WARNING,
            f"secrets are kept by {name}, which is not the OS keyring",
            "use your desktop keyring (gnome-keyring, KWallet): set "
            "PYTHON_KEYRING_BACKEND=keyring.backends.SecretService.Keyring",
        )
    if status.locked:
        return Check(
            "keyring",
            "Keyring",
            ERROR,
            f"the keyring is locked: secrets cannot be stored or read ({name})",
            "unlock your desktop keyring (gnome-keyring / KWallet), then check again",
        )
    detail = status.message
    prefix = "no usable keyring: "
    if detail.startswith(prefix):
        detail = detail[len(prefix) :].split("; ")[0]
    return Check(
        "keyring",
        "Keyring",
        ERROR,
        f"no usable keyring: {detail}; secrets cannot be stored",
        f"install and unlock gnome-keyring or another Secret Service: {INSTALL_KEYRING}",
        INSTALL_KEYRING,
    )


# -- git -----------------------------------------------------------------------------------------

_GIT_VERSION_RE = re.compile(r"git version (\d+)\.(\d+)(?:\.(\d+))?")


def check_git(git: str = "git", *, timeout: float = GIT_TIMEOUT_S) -> Check:
    """git on PATH (or the program given), at least MIN_GIT."""
    fix = f"install git {MIN_GIT_TEXT} or newer: {INSTALL_GIT}"
    try:
        proc = subprocess.run(
            [git, "--version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "LC_ALL": "C"},
        )
    except FileNotFoundError:
        return Check(
            "git", "Git", ERROR, f"git is not installed (no {git} program found)", fix, INSTALL_GIT
        )
    except PermissionError:
        return Check(
            "git", "Git", ERROR, f"{git} cannot be run: permission denied", fix, INSTALL_GIT
        )
    except subprocess.TimeoutExpired:
        return Check(
            "git",
            "Git",
            ERROR,
            f"{git} --version did not finish within {timeout:g} s",
            fix,
            INSTALL_GIT,
        )
    match = _GIT_VERSION_RE.search(proc.stdout)
    if proc.returncode != 0 or match is None:
        said = _first_line(proc.stdout or proc.stderr) or f"exit {proc.returncode}"
        return Check(
            "git",
            "Git",
            ERROR,
            f"{git} --version did not report a version ({said})",
            fix,
            INSTALL_GIT,
        )
    found = tuple(int(part or 0) for part in match.groups())
    text = ".".join(str(p) for p in found)
    if found[:2] < MIN_GIT:
        return Check(
            "git",
            "Git",
            ERROR,
            f"git {text} is too old: Cairn needs git {MIN_GIT_TEXT} or newer",
            fix,
            INSTALL_GIT,
        )
    return Check("git", "Git", OK, f"git {text} (Cairn needs {MIN_GIT_TEXT} or newer)")


# -- disk ----------------------------------------------------------------------------------------


def _existing_parent(path: Path) -> Path:
    path = path.expanduser().absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or "/")


def _gib(size: float) -> str:
    return f"{size / GIB:.1f} GiB"


def check_disk(
    data_root: str | os.PathLike[str], *, disk_usage: Callable[[str], Any] = shutil.disk_usage
) -> Check:
    """Free space on the data folder's filesystem (its nearest existing parent before it exists)."""
    root = Path(data_root)
    where = _existing_parent(root)
    free = disk_usage(str(where)).free
    detail = f"{_gib(free)} free on the disk of the data folder ({where})"
    fix = (
        "free some space on that disk, or choose another data folder (--data-dir or CAIRN_DATA_DIR)"
    )
    if free < DISK_ERROR_BYTES:
        return Check(
            "disk",
            "Disk space",
            ERROR,
            f"only {detail}: workspaces and revisions need at least 1 GiB",
            fix,
        )
    if free < DISK_WARNING_BYTES:
        return Check(
            "disk",
            "Disk space",
            WARNING,
            f"only {detail}: less than 5 GiB fills up quickly with workspaces",
            fix,
        )
    return Check("disk", "Disk space", OK, detail)


# -- sandbox hosts -------------------------------------------------------------------------------

ACTION_SEND_IMAGE = "send-image"
START_PODMAN = "systemctl --user enable --now podman.socket"
NO_LIMITS_NOTE = (
    "memory, cpu and pids limits are not applied here (rootless on cgroups v1), "
    "and sandboxes cannot be paused"
)
INSTALL_PODMAN = "sudo apt install podman uidmap catatonit"


@dataclass(frozen=True)
class EngineFacts:
    """What a sandbox host's engine says about itself and the sandbox image."""

    version: str
    api_version: str
    image_id: str | None  # None: the image is not on the host
    root_dir: str | None  # where the engine keeps images and containers
    limits: bool = True  # False: it applies no memory, cpu or pids limits (rootless, cgroups v1)


def engine_facts(address: str, image: str, timeout: float) -> EngineFacts:
    """Ask the engine at `address` (Docker's API, also Podman's) for its version, the image and
    its storage folder; every call bounded by `timeout`."""
    import docker
    import docker.errors

    client = docker.APIClient(base_url=address, timeout=timeout)  # type: ignore[arg-type]
    try:
        version = client.version()
        try:
            image_id: str | None = str(client.inspect_image(image)["Id"])
        except docker.errors.NotFound:
            image_id = None
        info = client.info()
        root = info.get("DockerRootDir")
        rootless = any("rootless" in str(o) for o in info.get("SecurityOptions") or [])
        podman = any(
            "podman" in str(c.get("Name", "")).lower() for c in version.get("Components") or []
        )
        if podman and not rootless:  # Podman says so only on its own API
            own: Any = client
            libpod = own._result(own._get(f"{own.base_url}/v4.0.0/libpod/info"), json=True)
            rootless = bool(((libpod.get("host") or {}).get("security") or {}).get("rootless"))
        return EngineFacts(
            str(version.get("Version") or "(unknown version)"),
            str(version.get("ApiVersion") or "?"),
            image_id,
            str(root) if root else None,
            limits=not (rootless and str(info.get("CgroupVersion")) == "1"),
        )
    finally:
        client.close()


def _host_title(host: SandboxHost) -> str:
    kind = "Podman" if host.engine == PODMAN else "Docker over SSH" if host.remote else "Docker"
    return f"Sandbox host {host.name} ({kind})"


def _host_start_fix(host: SandboxHost) -> tuple[str, str]:
    if host.engine == PODMAN:
        return f"start your Podman service: {START_PODMAN}", START_PODMAN
    return f"start it: {START_DOCKER}", START_DOCKER


def check_host(
    host: SandboxHost,
    image: str,
    *,
    which: Callable[[str], str | None] = shutil.which,
    probe_socket: Callable[[str, float], None] | None = None,
    facts_of: Callable[[str, str, float], EngineFacts] | None = None,
    disk_usage: Callable[[str], Any] = shutil.disk_usage,
    timeout: float = DOCKER_TIMEOUT_S,
    bridge_of: Callable[[SandboxHost], SshBridge] = bridge_for,
) -> Check:
    """One sandbox host: reachable, its API version, the sandbox image there (else the offer to
    send it from the local Docker engine), and the free disk where the engine keeps its data.
    A host reached over SSH is asked through its bridge (`bridge_of`), its disk by `df` there."""
    title = _host_title(host)
    where = host.address

    def problem(detail: str, fix: str | None = None, command: str | None = None) -> Check:
        return Check("host", title, ERROR, detail, fix, command, host=host.name)

    if host.remote:
        bridge = bridge_of(host)
        try:
            bridge.check()
        except CairnError as exc:  # ssh's failure in words: the host key, the key, the address
            return problem(exc.message, exc.hint or _SSH_FIX.format(name=host.name))
        try:
            api = bridge.start()
            return _engine_check(
                host, title, api, image, facts_of, bridge.free_bytes, timeout, problem
            )
        finally:
            bridge.close()
    path = _unix_path(where)
    if path is not None:
        try:
            os.stat(path)
        except PermissionError:
            return problem(f"permission denied on {path}", "use a socket your user may open")
        except OSError:
            if host.engine == PODMAN and which("podman") is None:
                return problem(
                    "Podman is not installed", f"install it: {INSTALL_PODMAN}", INSTALL_PODMAN
                )
            if host.engine == DOCKER and not any(which(n) for n in ("docker", "dockerd")):
                return problem(
                    f"Docker is not installed (no socket at {where})",
                    f"install it: {INSTALL_DOCKER}",
                    INSTALL_DOCKER,
                )
            return problem(f"nothing answers at {where} (no socket)", *_host_start_fix(host))
        try:
            (probe_socket or connect_unix)(path, timeout)
        except OSError as exc:
            if _is_permission(exc):
                return problem(f"permission denied on {path}", "use a socket your user may open")
            return problem(
                f"{where} refuses connections ({_describe(exc)})", *_host_start_fix(host)
            )

    def local_free(root: str) -> int | None:
        try:
            return int(disk_usage(str(_existing_parent(Path(root)))).free)
        except OSError:
            return None

    return _engine_check(host, title, where, image, facts_of, local_free, timeout, problem)


_SSH_FIX = (
    "check the host's address, key and known_hosts: "
    "cairnctl config set hosts.{name} 'docker ssh://user@host key=FILE known_hosts=FILE'"
)


def _engine_check(
    host: SandboxHost,
    title: str,
    api: str,
    image: str,
    facts_of: Callable[[str, str, float], EngineFacts] | None,
    free_of: Callable[[str], int | None],
    timeout: float,
    problem: Callable[..., Check],
) -> Check:
    """The engine's part of a host check, through its API at `api`: version, image, disk."""
    where = host.address
    try:
        found = (facts_of or engine_facts)(api, image, timeout)
    except Exception as exc:  # noqa: BLE001 - docker-py wraps transport failures in many ways
        return problem(
            f"the engine at {where} did not answer ({_describe(exc)})", *_host_start_fix(host)
        )
    facts = [f"{found.version} at {where}, API {found.api_version}"]
    if found.image_id is None:
        facts.append(f"the sandbox image {image} is not there")
    else:
        facts.append(f"the sandbox image {image} is there ({found.image_id[:19]})")
    state, detail = OK, "ready"
    fix: str | None = None
    command: str | None = None
    free = free_of(found.root_dir) if found.root_dir else None
    if free is not None:
        facts.append(f"{_gib(free)} free where it keeps images and sandboxes ({found.root_dir})")
        if free < DISK_ERROR_BYTES:
            state, detail = ERROR, f"only {_gib(free)} free on the host's disk"
            fix = "free some space on that disk (sandboxes need at least 1 GiB)"
        elif free < DISK_WARNING_BYTES:
            state, detail = WARNING, f"only {_gib(free)} free on the host's disk"
            fix = "free some space on that disk"
    note = None
    if not found.limits:  # sandboxes run, without their ceilings: said, not refused
        note = NO_LIMITS_NOTE
        facts.append(note)
    problems: tuple[Problem, ...] = ()
    if found.image_id is None:
        state = ERROR
        detail = f"the sandbox image {image} is not on host {host.name}"
        if host.name == LOCAL:
            fix = "build it: resources/sandbox/build-image.sh"
            command = "resources/sandbox/build-image.sh"
        else:
            fix = (
                "send it from the local Docker engine (Send Image in Settings, or "
                f"cairnctl host send-image {host.name}); Cairn never pulls images"
            )
            command = f"cairnctl host send-image {host.name}"
        problems = (Problem(detail, fix, command, ACTION_SEND_IMAGE),)
    return Check(
        "host",
        title,
        state,
        detail,
        fix,
        command,
        facts=tuple(facts),
        problems=problems,
        note=note,
        host=host.name,
    )
