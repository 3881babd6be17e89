"""The sandbox backend interface: specs, serialized session state, live sessions and attach
results.

Owns what every backend promises and the host-folder preparation both backends share; leaves the
Docker and host mechanics to core.sandbox.docker/host, and when to create, attach or recreate to
resume.
"""

from __future__ import annotations

import abc
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from core.errors import CairnError, Conflict, NotFound
from core.safe_fs import ensure_dir
from core.vault.statpass import chown_tree
from core.watch import hand_over_workspace
from core.workspaces import PROTECTED_GIT_PATHS, protect_git

# Where things live inside every sandbox. The engine contract depends on `/workspace` staying put:
# a native engine resume needs the same workspace path as the session it continues.
CONTAINER_WORKSPACE = "/workspace"
CONTAINER_HOME = "/home/agent"
CONTAINER_RUNS = "/cairn/runs"
CONTAINER_EGRESS = "/cairn/egress"

# The workspace's `.git` is a mount of its own (so it cannot be renamed, removed or replaced from
# inside), and the parts through which a later git command runs code are mounted read-only over
# it: hooks, config, and commondir (which would move both elsewhere). Everything git itself writes
# (index, objects, refs, logs, HEAD, ORIG_HEAD, COMMIT_EDITMSG, lock files) stays writable.
CONTAINER_GIT_DIR = f"{CONTAINER_WORKSPACE}/.git"
PROTECTED_GIT_TARGETS = tuple(f"{CONTAINER_GIT_DIR}/{name}" for name in PROTECTED_GIT_PATHS)
# Cairn's git config for every git in the sandbox (read-only): GIT_CONFIG_GLOBAL names it, so a
# ~/.gitconfig written into the writable home is never read.
CONTAINER_GIT_SETTINGS = "/cairn/git"
SANDBOX_GIT_CONFIG = f"{CONTAINER_GIT_SETTINGS}/config"
RESERVED_TARGETS = (
    CONTAINER_WORKSPACE,
    CONTAINER_HOME,
    CONTAINER_RUNS,
    CONTAINER_EGRESS,
    CONTAINER_GIT_SETTINGS,
)

# The git settings every exec in a protected sandbox starts with. GIT_CONFIG_GLOBAL and NOSYSTEM:
# only Cairn's read-only file, never one in the home or the image. The GIT_CONFIG_COUNT entries
# are command-level config, which outranks every repository's own config: no hooks and no
# fsmonitor in any repository (also ones the run makes itself), and no bare repository found
# by walking up from a folder. A command can still set its own environment; that is a program
# start the supervisor judges, not something planted for later.
GIT_PROTECTION_ENV = {
    "GIT_CONFIG_GLOBAL": SANDBOX_GIT_CONFIG,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_COUNT": "3",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": "/dev/null",
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
    "GIT_CONFIG_KEY_2": "safe.bareRepository",
    "GIT_CONFIG_VALUE_2": "explicit",
}

# In the order a person chooses from: the default first, the most open last.
NETWORK_NONE = "none"  # loopback only
NETWORK_ALLOWLIST = "allowlist"  # loopback, plus the host-side egress proxy's allowlist
NETWORK_OPEN = "open"  # a normal bridge
NETWORK_MODES = (NETWORK_NONE, NETWORK_ALLOWLIST, NETWORK_OPEN)

# The default image: built offline by resources/sandbox/build-image.sh (its RECIPE_VERSION is the
# tag; a unit test keeps the two in step).
DEFAULT_IMAGE = "cairn-sandbox:1"

# Fallback sandbox user when Cairn runs as root: the sandbox never runs as root itself.
FALLBACK_UID = 1000
FALLBACK_GID = 1000

# Files a detached process leaves in its run folder (host: runs/<run_id>/, sandbox:
# /cairn/runs/<run_id>/).
RUN_PID_FILE = "pid"
RUN_STDOUT_FILE = "stdout"
RUN_STDERR_FILE = "stderr"
RUN_EXIT_CODE_FILE = "exit_code"

# The detached wrapper: records its pid, runs the command with output to the run files, then writes
# the exit code through a rename so a reader never sees a half-written number. Nothing outside
# holds a connection to it, so closing Cairn does not stop it. `$1` is the run folder, the rest the
# command.
# The wrapper outlives a TERM sent to its process group (a stop) and writes the exit code the
# command ended with; the command itself gets TERM's default action back.
DETACHED_WRAPPER = (
    'd="$1"; shift; '
    'echo "$$" > "$d/pid.tmp" && mv -f "$d/pid.tmp" "$d/pid"; '
    "trap '' TERM; "
    '( trap - TERM; exec "$@" ) < /dev/null > "$d/stdout" 2> "$d/stderr"; '
    "rc=$?; "
    'echo "$rc" > "$d/exit_code.tmp" && mv -f "$d/exit_code.tmp" "$d/exit_code"; '
    'exit "$rc"'
)

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --- errors -----------------------------------------------------------------------------------


class SandboxError(CairnError):
    """A sandbox operation failed."""


class SandboxUnavailable(SandboxError):
    """The backend cannot be used on this machine right now; the hint says how to fix it."""

    @classmethod
    def not_installed(cls) -> SandboxUnavailable:
        return cls("Docker is not installed", hint="install it: sudo apt-get install docker.io")

    @classmethod
    def not_running(cls, where: str) -> SandboxUnavailable:
        return cls(
            f"the Docker daemon is not running (no answer at {where})",
            hint="start it: sudo systemctl start docker",
        )

    @classmethod
    def permission_denied(cls, socket_path: str) -> SandboxUnavailable:
        return cls(
            f"permission denied on {socket_path}",
            hint=(
                "add yourself to the docker group: sudo usermod -aG docker $USER, then log in again"
            ),
        )


class ImageMissing(SandboxError):
    """The sandbox image is not on this machine; Cairn never pulls one."""

    def __init__(self, image: str, *, hint: str | None = None):
        if hint is None:
            if image.split(":", 1)[0] == DEFAULT_IMAGE.split(":", 1)[0]:
                hint = "build it with resources/sandbox/build-image.sh"
            else:
                hint = (
                    "build or load it locally (docker build / docker load); "
                    "Cairn never pulls images"
                )
        super().__init__(f"sandbox image {image} is missing", hint=hint)
        self.image = image


class SandboxGone(SandboxError):
    """The sandbox an operation needed went away while it was under way."""


class ProbeFailed(SandboxError):
    """A look inside the sandbox could not run (no process could start there, Docker refused the
    exec): the answer is unknown, never a death."""


class UnsafeBackendRefused(SandboxError):
    """An unisolated backend was asked for without saying so explicitly."""


class UnsupportedNetwork(SandboxError):
    """The spec asks for a network mode the backend cannot provide."""


class ExecTimeout(SandboxError):
    """An attached exec ran past its timeout and was killed."""

    def __init__(self, argv: Sequence[str], timeout: float, *, stdout: str = "", stderr: str = ""):
        super().__init__(f"{_short_argv(argv)} did not finish within {timeout:g} s and was stopped")
        self.stdout = stdout
        self.stderr = stderr


def _short_argv(argv: Sequence[str], limit: int = 60) -> str:
    text = " ".join(argv)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- value objects ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, so the caller always knows which resume modes exist."""

    reattach: bool
    recreate_from_snapshot: bool
    per_exec_env: bool
    network_modes: frozenset[str]
    isolated: bool

    def __post_init__(self) -> None:
        unknown = set(self.network_modes) - set(NETWORK_MODES)
        if unknown:
            raise ValueError(f"unknown network modes: {sorted(unknown)}")


@dataclass(frozen=True)
class Limits:
    """Resource ceilings for one sandbox."""

    pids: int = 1024
    memory_bytes: int = 4 * 1024**3
    cpus: float = 2.0
    tmp_bytes: int = 512 * 1024**2

    def __post_init__(self) -> None:
        if (
            self.pids < 16
            or self.memory_bytes < 16 * 1024**2
            or self.cpus <= 0
            or self.tmp_bytes <= 0
        ):
            raise ValueError(f"unusable sandbox limits: {self}")


@dataclass(frozen=True)
class MountSpec:
    """One bind mount: a host folder seen at `target` inside the sandbox."""

    source: str
    target: str
    read_only: bool

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "read_only": self.read_only}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MountSpec:
        return cls(str(data["source"]), str(data["target"]), bool(data["read_only"]))


def default_sandbox_user() -> tuple[int, int]:
    """The host user's uid:gid, or 1000:1000 when Cairn runs as root (the sandbox is never root)."""
    if os.geteuid() == 0:
        return FALLBACK_UID, FALLBACK_GID
    return os.getuid(), os.getgid()


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a backend needs to make (or recognise) one workspace session's sandbox."""

    workspace_id: str
    session_id: str
    snapshot_id: str | None
    workspace_root: Path
    home_dir: Path
    runs_dir: Path
    extra_mounts: tuple[tuple[Path, str], ...] = ()
    image: str = DEFAULT_IMAGE
    network: str = "none"
    egress_socket_dir: Path | None = None
    limits: Limits = field(default_factory=Limits)
    uid: int | None = None
    gid: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    # Cairn's git settings folder (holding `config`), mounted read-only at /cairn/git. When set,
    # the workspace's .git is mounted with its hooks, config and commondir read-only, and every
    # exec starts with GIT_PROTECTION_ENV.
    git_settings_dir: Path | None = None
    # The workspace's stat cache (core.vault.statpass): the hand-over to the sandbox user keeps it
    # vouching for the files it vouched for (an lchown changes every file's ctime).
    stat_cache: Path | None = None

    def __post_init__(self) -> None:
        for name in ("workspace_id", "session_id"):
            if not _ID_RE.match(getattr(self, name) or ""):
                raise ValueError(f"{name} {getattr(self, name)!r} is not a valid identifier")
        if self.snapshot_id is not None and not _ID_RE.match(self.snapshot_id):
            raise ValueError(f"snapshot_id {self.snapshot_id!r} is not a valid identifier")
        if self.network not in NETWORK_MODES:
            raise ValueError(f"network must be one of {list(NETWORK_MODES)}, not {self.network!r}")
        # Normalise paths once so mounts compare equal across processes.
        object.__setattr__(self, "workspace_root", _abs(self.workspace_root))
        object.__setattr__(self, "home_dir", _abs(self.home_dir))
        object.__setattr__(self, "runs_dir", _abs(self.runs_dir))
        if self.egress_socket_dir is not None:
            object.__setattr__(self, "egress_socket_dir", _abs(self.egress_socket_dir))
        if self.git_settings_dir is not None:
            object.__setattr__(self, "git_settings_dir", _abs(self.git_settings_dir))
        extra = tuple((_abs(host), str(target)) for host, target in self.extra_mounts)
        for _, target in extra:
            if not target.startswith("/") or target == "/":
                raise ValueError(f"mount target {target!r} must be an absolute path below /")
            for reserved in RESERVED_TARGETS:
                if _overlaps(target, reserved):
                    raise ValueError(f"mount target {target!r} overlaps Cairn's {reserved}")
        object.__setattr__(self, "extra_mounts", extra)
        object.__setattr__(self, "labels", dict(self.labels))
        if (self.uid is None) != (self.gid is None):
            raise ValueError("give both uid and gid, or neither")
        if self.uid == 0:
            raise ValueError("the sandbox user must not be root")

    @property
    def user(self) -> tuple[int, int]:
        if self.uid is not None and self.gid is not None:
            return self.uid, self.gid
        return default_sandbox_user()

    @property
    def protects_git(self) -> bool:
        return self.git_settings_dir is not None

    def mounts(self) -> list[MountSpec]:
        """The bind mounts in a fixed order: workspace (with its protected .git), home, runs,
        egress, Cairn's git settings, then the extra ones. Each folder's mount comes before the
        mounts inside it."""
        out = [MountSpec(str(self.workspace_root), CONTAINER_WORKSPACE, False)]
        if self.protects_git:
            git_dir = self.workspace_root / ".git"
            out.append(MountSpec(str(git_dir), CONTAINER_GIT_DIR, False))
            out.extend(
                MountSpec(str(git_dir / name), target, True)
                for name, target in zip(PROTECTED_GIT_PATHS, PROTECTED_GIT_TARGETS, strict=True)
            )
        out += [
            MountSpec(str(self.home_dir), CONTAINER_HOME, False),
            MountSpec(str(self.runs_dir), CONTAINER_RUNS, False),
        ]
        if self.egress_socket_dir is not None:  # the allowlist's proxy, or a model endpoint
            # Read-only: the sandbox may connect to the proxy's socket but not replace it.
            out.append(MountSpec(str(self.egress_socket_dir), CONTAINER_EGRESS, True))
        if self.git_settings_dir is not None:
            out.append(MountSpec(str(self.git_settings_dir), CONTAINER_GIT_SETTINGS, True))
        out.extend(MountSpec(str(host), target, True) for host, target in self.extra_mounts)
        return out

    def environment(self) -> dict[str, str]:
        """Fixed variables every exec in this sandbox starts with (never secrets)."""
        return dict(GIT_PROTECTION_ENV) if self.protects_git else {}

    def run_dir(self, run_id: str) -> Path:
        check_run_id(run_id)
        return self.runs_dir / run_id


def _abs(path: Path | str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(str(path))))


def _overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def check_run_id(run_id: str) -> str:
    if not _ID_RE.match(run_id or ""):
        raise ValueError(f"run id {run_id!r} is not a valid identifier")
    return run_id


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """A copy of an exec's environment, refusing names and values Docker or exec cannot carry."""
    out: dict[str, str] = {}
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not _ENV_NAME_RE.match(name):
            raise ValueError(f"environment variable name {name!r} is not valid")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"environment variable {name} needs a string value without NUL bytes")
        out[name] = value
    return out


@dataclass
class SessionState:
    """What a backend needs to find its sandbox again. No secrets, no grants, no environment
    values."""

    backend: str
    container_id: str | None
    container_name: str | None
    image_digest: str | None
    mounts: list[MountSpec]
    generation: int
    snapshot_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "container_id": self.container_id,
            "container_name": self.container_name,
            "image_digest": self.image_digest,
            "mounts": [m.to_dict() for m in self.mounts],
            "generation": self.generation,
            "snapshot_id": self.snapshot_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionState:
        return cls(
            backend=str(data["backend"]),
            container_id=data.get("container_id"),
            container_name=data.get("container_name"),
            image_digest=data.get("image_digest"),
            mounts=[MountSpec.from_dict(m) for m in data.get("mounts") or []],
            generation=int(data.get("generation") or 0),
            snapshot_id=data.get("snapshot_id"),
        )


@dataclass(frozen=True)
class SessionSummary:
    """One sandbox found on the machine (for reconcile and the GUI's sandbox list)."""

    container_id: str
    container_name: str
    workspace_id: str | None
    session_id: str | None
    snapshot_id: str | None
    generation: int | None
    status: str  # "running", "exited", or the backend's own word for anything else
    image: str
    created: datetime


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class OutputChunk:
    stream: str  # "stdout" or "stderr"
    data: bytes


class ExecStream(abc.ABC):
    """Output of a running exec as it comes; `exit_code` is known once iteration has finished."""

    exit_code: int | None = None

    @abc.abstractmethod
    def __iter__(self) -> Iterator[OutputChunk]: ...

    def close(self) -> None:  # noqa: B027 - optional for backends with nothing to release
        pass

    def __enter__(self) -> ExecStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class DetachedProcess:
    """A background process in a sandbox, known by its run folder on the host."""

    run_id: str
    pid: int
    run_dir: Path

    @property
    def stdout_path(self) -> Path:
        return self.run_dir / RUN_STDOUT_FILE

    @property
    def stderr_path(self) -> Path:
        return self.run_dir / RUN_STDERR_FILE

    def read_exit_code(self) -> int | None:
        return read_exit_code(self.run_dir)

    def wait(self, timeout: float, poll: float = 0.05) -> int | None:
        """The exit code once the file appears, or None when `timeout` passes first."""
        deadline = time.monotonic() + timeout
        while True:
            code = self.read_exit_code()
            if code is not None or time.monotonic() >= deadline:
                return code
            time.sleep(poll)


def read_exit_code(run_dir: Path) -> int | None:
    try:
        text = (run_dir / RUN_EXIT_CODE_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


def read_pid(run_dir: Path) -> int | None:
    try:
        text = (run_dir / RUN_PID_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def reset_run_dir(run_dir: Path, uid: int, gid: int) -> None:
    """Create a run folder for a new detached process, dropping a previous attempt's pid/exit code.
    The runs folder is writable from the sandbox: a link planted at this name is replaced, never
    followed (Cairn may be root here)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    ensure_dir(run_dir.parent, run_dir.name)
    for name in (RUN_PID_FILE, RUN_EXIT_CODE_FILE, "pid.tmp", "exit_code.tmp"):
        (run_dir / name).unlink(missing_ok=True)
    if _should_chown(uid):
        _chown_tree(run_dir, uid, gid)


def wait_for_pid(run_dir: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        pid = read_pid(run_dir)
        if pid is not None:
            return pid
        code = read_exit_code(run_dir)
        if code is not None:  # finished before we looked; the pid file is still there normally
            pid = read_pid(run_dir)
            if pid is not None:
                return pid
        if time.monotonic() >= deadline:
            raise SandboxError(
                f"the detached process for {run_dir.name} did not start within {timeout:g} s",
                hint=f"see {run_dir / RUN_STDERR_FILE}",
            )
        time.sleep(0.01)


@dataclass(frozen=True)
class Attached:
    live: LiveSession


@dataclass(frozen=True)
class Gone:
    reason: str


@dataclass(frozen=True)
class Mismatch:
    reasons: list[str]


AttachResult = Attached | Gone | Mismatch


# --- the interface ----------------------------------------------------------------------------


class LiveSession(abc.ABC):
    """A running sandbox and the processes in it, held in memory only."""

    def __init__(self, state: SessionState, spec: SandboxSpec):
        self.state = state
        self.spec = spec

    @abc.abstractmethod
    def exec_detached(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = CONTAINER_WORKSPACE,
        run_id: str,
    ) -> DetachedProcess:
        """Start `argv` in the background; output to runs/<run_id>/stdout|stderr, then exit_code."""

    @abc.abstractmethod
    def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = CONTAINER_WORKSPACE,
        timeout: float = 60.0,
    ) -> ExecResult:
        """Run a short command attached; raises ExecTimeout (after killing it) past `timeout`."""

    @abc.abstractmethod
    def exec_stream(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = CONTAINER_WORKSPACE,
    ) -> ExecStream:
        """Run a command and hand its output over as it comes."""

    @abc.abstractmethod
    def process_alive(self, pid: int, *, run_id: str | None = None) -> bool:
        """True while the process runs; with `run_id`, only if it is that run's wrapper. False
        only on evidence (no such process, a zombie, another command); ProbeFailed when the
        sandbox could not be asked."""

    @abc.abstractmethod
    def signal_process(self, pid: int, signal_name: str = "TERM") -> bool:
        """Send a signal to a detached process's group; False when it was already gone."""

    def visible_path(self, sandbox_path: str) -> str:
        """A path named as inside a sandbox (/workspace/..., /cairn/...), as this session's
        processes see it. The same in a container; the host backend maps it to a host folder."""
        return sandbox_path

    def send_home_files(  # noqa: B027
        self, paths: Sequence[str], *, if_missing: Sequence[str] = ()
    ) -> None:
        """Make the engine home the sandbox runs in hold `paths` (relative to the home) as the
        local home (`spec.home_dir`) holds them now, a path missing here removed there, and the
        `if_missing` paths where it has nothing at them; leave the rest of it alone. Nothing to
        do where the sandbox's home is that folder (a bind mount); a sandbox on another machine
        has its own copy, sent these before a launch."""

    def sync_run(self, run_id: str, *, force: bool = False) -> None:  # noqa: B027
        """Bring the run folder `run_id` up to date where Cairn reads it (runs/<ws>/<run>/).
        Nothing to do where the sandbox writes that folder itself (a bind mount); a sandbox on
        another machine mirrors it from there. `force`: now, not at most every few moments."""

    @abc.abstractmethod
    def stats(self) -> dict[str, Any]:
        """{"cpu_percent", "memory_bytes", "memory_limit_bytes", "pids", "uptime_s"} (None when
        unknown)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the sandbox, keeping it (and everything on the host) for a later attach."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """Remove the sandbox itself. Host folders (workspace, home, runs) are never touched."""


class SandboxBackend(abc.ABC):
    """A way to make and find sandboxes. Every method either does its job or raises a CairnError."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    unsafe: ClassVar[bool] = False
    # The sandboxes are on another machine: their run files are mirrored here
    # (LiveSession.sync_run), and a host that does not answer is "host unreachable".
    remote: ClassVar[bool] = False

    @abc.abstractmethod
    def check(self) -> None:
        """Raise SandboxUnavailable (with its fix) when this backend cannot be used now."""

    @abc.abstractmethod
    def create(
        self, spec: SandboxSpec, *, previous: SessionState | None = None
    ) -> tuple[SessionState, LiveSession]:
        """Make a new sandbox for `spec`. With `previous` (a gone sandbox's state) it is the next
        generation of that session and must carry the same snapshot id."""

    @abc.abstractmethod
    def attach(self, state: SessionState, spec: SandboxSpec) -> AttachResult:
        """Find the sandbox `state` describes: Attached, Gone, or Mismatch with the reasons."""

    def look(self, state: SessionState, spec: SandboxSpec) -> AttachResult:
        """Find the sandbox `state` describes without changing it (never started, unpaused or
        recreated), to look at its processes: Attached when it runs, Gone with the evidence
        when it is absent or stopped; a SandboxError when it cannot be told now. Backends whose
        `attach` changes nothing may leave this as it is."""
        return self.attach(state, spec)

    @abc.abstractmethod
    def list_sessions(self) -> list[SessionSummary]:
        """This data folder's sandboxes on the machine, running or not."""

    @abc.abstractmethod
    def remove(self, container_id_or_name: str) -> bool:
        """Remove one of this data folder's sandboxes; False when it was already gone."""


def next_generation(spec: SandboxSpec, previous: SessionState | None) -> int:
    """The generation of a new sandbox; refuses to carry a different snapshot than the session
    had."""
    if previous is None:
        return 1
    if previous.snapshot_id != spec.snapshot_id:
        raise Conflict(
            f"the session carries snapshot {previous.snapshot_id}, not {spec.snapshot_id}",
            hint="recreate the sandbox with the persisted snapshot id",
        )
    return previous.generation + 1


# --- host folders -----------------------------------------------------------------------------


def _should_chown(uid: int) -> bool:
    return os.geteuid() == 0 and uid != 0


def workspace_owner(uid: int | None = None) -> tuple[int, int] | None:
    """Whom a new workspace's files should belong to: the sandbox user a first Start hands them
    to (`uid`, a policy's, or the default), when Cairn runs as root; None otherwise. Written as
    theirs from the start, the files leave that hand-over nothing to chown, and the stat data
    the import leaves behind (the stat cache, the workspace's git index) stays true after it."""
    user = (uid, uid) if uid is not None else default_sandbox_user()
    return user if _should_chown(user[0]) else None


def prepare_host_dirs(spec: SandboxSpec, *, hand_over: bool = True) -> None:
    """Make the host folders a sandbox mounts exist and writable for the sandbox user.

    When Cairn runs as root the sandbox user is someone else, so the workspace, home and runs
    folders are handed to it; the regular files under <workspace>/.git/objects are left alone: they
    are hard links shared with the vault, and chowning one would hand the vault's inode to the
    sandbox user. With the workspace's stat cache the workspace is handed over in the stat pass's
    helper processes, which keep the cache vouching for the files it vouched for (the lchown
    changes their ctime): a Start on a big workspace then does not rehash it. `hand_over=False`
    (the host backend, whose processes run as Cairn itself) only makes the folders.
    """
    if not spec.workspace_root.is_dir():
        raise NotFound(f"workspace folder {spec.workspace_root} does not exist")
    if spec.protects_git:
        # Before the sandbox exists: nothing inside can change these paths while they are checked.
        protect_git(spec.workspace_root)
    spec.home_dir.mkdir(parents=True, exist_ok=True)
    spec.runs_dir.mkdir(parents=True, exist_ok=True)
    uid, gid = spec.user
    if not hand_over or not _should_chown(uid):
        return
    root = spec.workspace_root
    _chown_one(root, uid, gid)
    if spec.stat_cache is None or not hand_over_workspace(spec.stat_cache, str(root), uid, gid):
        _chown_tree(root, uid, gid, skip_files_under=root / ".git" / "objects")
    _chown_tree(spec.home_dir, uid, gid)
    # Only the runs folder itself: each run's folder is handed over when a process starts in it.
    _chown_one(spec.runs_dir, uid, gid)


def _chown_one(path: Path | str, uid: int, gid: int) -> None:
    st = os.lstat(path)
    if st.st_uid != uid or st.st_gid != gid:
        os.lchown(path, uid, gid)


def _chown_tree(root: Path, uid: int, gid: int, *, skip_files_under: Path | None = None) -> None:
    chown_tree(
        os.fsencode(root),
        uid,
        gid,
        skip_files_under=os.fsencode(skip_files_under) if skip_files_under is not None else None,
    )
