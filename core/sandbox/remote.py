"""The remote Docker backend: sandboxes on a Docker engine on another machine, reached over SSH
(core.sandbox.ssh_bridge), with nothing of this machine's disk mounted into them.

Owns what living on another machine changes. The workspace, the engine home, the run folder,
the approval decisions, the in-sandbox tools and Cairn's git settings are volumes of that engine
(`cairn-<session>-<part>`), never bind mounts. A never-started *carrier* container per session
holds every one of them writable (at /v/<part>), so Cairn fills them with tar streams
(`put_archive`) whether the sandbox runs or not: the workspace and home from this machine's
copies when a volume is new; the tools, git settings and decisions at every creation and
attach, and the decisions again before each exec there, each time only the files that differ
from what the session's record (`remote-pushed/`) says the volume holds, since the engine
removes a file before it writes it again and the sandbox may be reading it. The run files
come back the other way: `sync_run` mirrors one run folder into the local `runs/` folder, the
output files appended from the size they have here (so each byte arrives exactly once and the
local observation code reads them as it reads a local sandbox's), the small files (pid,
exit_code, step, approval requests) whole.

The egress proxy stays on this machine: the sandbox gets an empty tmpfs at /cairn/egress, where
the relay that the egress tunnel keeps running there serves the proxy's socket
(core.sandbox.egress_tunnel), so `allowlist` and the model endpoints work as they do here.

An engine's binary (Claude Code's native executable, mounted from this machine elsewhere) is a
volume there named by the file's sha256 (`cairn-engine-<name>-<sha256>`), filled once through a
carrier of its own, its completion mark written after the file, and mounted read-only at the
binary's folder by every sandbox of that engine.

Everything about containers, execs and attach checks is the Docker backend's; the SSH transport
and its failures in words are the bridge's; a connection that fails mid-way is explained by the
bridge's `check()`, never passed on as a raw "connection aborted".
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import socket
import stat
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from core.errors import CairnError
from core.launch import resource_path
from core.mailbox import DECISIONS_IN_SANDBOX, decisions_root
from core.safe_fs import ensure_dir
from core.sandbox.base import (
    CONTAINER_EGRESS,
    CONTAINER_GIT_SETTINGS,
    CONTAINER_HOME,
    CONTAINER_RUNS,
    CONTAINER_WORKSPACE,
    NETWORK_ALLOWLIST,
    NETWORK_NONE,
    NETWORK_OPEN,
    PROTECTED_GIT_TARGETS,
    RUN_EXIT_CODE_FILE,
    RUN_PID_FILE,
    Attached,
    AttachResult,
    Capabilities,
    LiveSession,
    MountSpec,
    SandboxError,
    SandboxSpec,
    SandboxUnavailable,
    SessionState,
    SessionSummary,
    check_run_id,
    prepare_host_dirs,
    read_pid,
)
from core.sandbox.docker import (
    API_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    LABEL_DATA_DIR,
    LABEL_MANAGED,
    LABEL_SESSION,
    LABEL_WORKSPACE,
    DockerBackend,
    DockerLiveSession,
    docker_call,
)
from core.sandbox.egress import SOCKET_NAME, running_pid
from core.sandbox.egress_tunnel import ensure_tunnel
from core.sandbox.mirror import TAR_READ_ARGV, Entry, WorkspaceMirror, entries_from_tar
from core.sandbox.ssh_bridge import SshBridge, SshUnavailable

if TYPE_CHECKING:
    from docker import DockerClient

LABEL_ROLE = "cairn.role"  # on carriers and volumes: what they are for
LABEL_SHA256 = "cairn.sha256"  # on an engine binary's volume: its content
ROLE_CARRIER = "carrier"
ROLE_ENGINE = "engine"
ENGINE_MOUNT_ROOT = "/cairn/engines"
ENGINE_VOLUME_PREFIX = "cairn-engine-"
ENGINE_MARK = ".cairn-complete"  # written after the binary: the volume holds it whole
_FILE_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}")
CARRIER_ROOT = "/v"
HOME_SCAN_CACHE = "/tmp/cairn-home-scan"  # the home mirror's scan cache (the container's tmpfs)
TOOLS_IN_SANDBOX = "/cairn/tools"
HOOKS_IN_SANDBOX = next(t for t in PROTECTED_GIT_TARGETS if t.endswith("/hooks"))
RESOURCES_SANDBOX = resource_path("sandbox")

# The volumes of one session, by part, and where the sandbox sees each (read-only or not).
WORKSPACE, HOME, RUNS, DECISIONS, TOOLS, GIT, HOOKS = (
    "workspace",
    "home",
    "runs",
    "decisions",
    "tools",
    "git",
    "hooks",
)
PARTS = (WORKSPACE, HOME, RUNS, DECISIONS, TOOLS, GIT, HOOKS)
# Cairn's own parts: written only by Cairn, read by the running sandbox at any moment (a run's
# supervisor loads the program rules as it starts). The engine rewrites a file it extracts
# (removed, then written), so a file is sent only when it differs from what the session's
# record says its volume holds: an unchanged one is never missing there, not even for a moment.
OWN_PARTS = (TOOLS, GIT, DECISIONS)
PUSHED_FOLDER = "remote-pushed"  # in the data folder: that record, one file per session
# Folders of this machine the spec names that are volumes there; any other is refused.
STANDARD_EXTRA_TARGETS = (TOOLS_IN_SANDBOX, DECISIONS_IN_SANDBOX)

# Run files read whole at each look (small, and rewritten rather than appended); every other
# file of a run folder only grows and is read from the size it already has here.
WHOLE_FILES = ("pid", "exit_code", "step")
WHOLE_FOLDERS = ("requests/",)
SYNC_INTERVAL_S = 0.2  # a run's files are looked at no more often than this
# Lists a run folder's files and prints each one's new bytes, framed:
#   W <size> <name>\n<size bytes>          a small file, whole
#   A <offset> <count> <name>\n<count bytes>   an output file's bytes from <offset>
# and `E` last, so a stream cut short is seen (and dropped) rather than half written. An output
# file only grows, so the bytes after the size read first are always there to be read.
SYNC_SCRIPT = r"""
export LC_ALL=C
d="$1"; shift
[ -d "$d" ] || { echo E; exit 0; }
cd "$d" || exit 3
find . -type f ! -name '*.tmp' | while IFS= read -r f; do
  f=${f#./}
  case "$f" in
    pid|exit_code|step|requests/*)
      [ -f "$f" ] || continue
      c=$(cat -- "$f" 2>/dev/null; echo x) || continue
      c=${c%x}
      printf 'W %s %s\n%s' "${#c}" "$f" "$c"
      continue;;
  esac
  s=$(wc -c < "$f" 2>/dev/null) || continue
  off=0
  for a in "$@"; do case "$a" in "$f="*) off=${a#"$f="};; esac; done
  [ "$s" -lt "$off" ] && off=0
  if [ "$s" -gt "$off" ]; then
    n=$((s - off))
    printf 'A %s %s %s\n' "$off" "$n" "$f"
    tail -c +$((off + 1)) -- "$f" | head -c "$n"
  fi
done
echo E
"""
# The launch's files of the engine home, sent before it starts (send_home_files): run as the
# sandbox user in the home with `N name...`, each of the first N names removed first (a file the
# engine left, or a link planted there, is replaced, not written through), then the files this
# machine has, from the tar on stdin, those of the other names only where there is nothing.
HOME_FILES_SCRIPT = (
    'cd "$1" && n=$2 && shift 2 && while [ "$n" -gt 0 ]; do rm -f -- "$1" || exit; shift; '
    "n=$((n - 1)); done && exec tar -x -f - --no-same-owner --skip-old-files"
)

PREPARE_RUN_SCRIPT = (
    'mkdir -p -- "$1" && cd -- "$1" && rm -f -- pid exit_code pid.tmp exit_code.tmp'
)


class HostUnreachable(SandboxUnavailable):
    """The remote sandbox host does not answer (the SSH connection or its engine): its
    sandboxes and runs are unknown, never gone."""


Fill = tuple[str, Path | None, tuple[int, int]]  # (volume part, local folder, owner uid:gid)


@dataclass
class SessionParts:
    """What one session of this data folder holds on a remote engine: its containers (the
    sandbox and its carrier) and its volumes, by name."""

    session_id: str
    workspace_id: str | None = None
    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    made_at: float = 0.0  # when the newest of them was made (epoch seconds; 0 when unknown)

    def words(self) -> str:
        held = [*self.containers, *(f"volume {v}" for v in self.volumes)]
        return ", ".join(held) or "nothing"


def _epoch(stamp: Any) -> float:
    """Docker's RFC 3339 time (a volume's CreatedAt) as epoch seconds; 0 when unreadable."""
    if not isinstance(stamp, str):
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class EngineFile:
    """An engine binary a remote sandbox mounts: the local file (None for a sandbox found as it
    was made), the volume holding it there and the folder that volume is mounted at."""

    source: Path | None
    name: str  # the binary's name in the folder; "" when the volume is the source folder itself
    volume: str
    folder: str
    digest: str


def is_engine_target(target: str) -> bool:
    return target == ENGINE_MOUNT_ROOT or target.startswith(ENGINE_MOUNT_ROOT + "/")


def engine_volume_name(name: str, digest: str) -> str:
    """The volume holding the engine binary `name` whose sha256 is `digest`: one per content,
    filled once and shared by every sandbox of that engine, read-only."""
    if not _FILE_NAME.fullmatch(name):
        raise SandboxError(f"{name!r} cannot name an engine binary on a remote host")
    return f"{ENGINE_VOLUME_PREFIX}{name}-{digest}"


def _tree(folder: Path) -> list[tuple[Path, str]]:
    """Every entry under `folder`, sorted, with its kind (link, file, dir; links not followed);
    anything else (a socket, a fifo) is left out."""
    out: list[tuple[Path, str]] = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        here = Path(root)
        for name in sorted(dirs + files):
            path = here / name
            if path.is_symlink():
                out.append((path, "link"))
            elif path.is_dir():
                out.append((path, "dir"))
            elif path.is_file():
                out.append((path, "file"))
    return sorted(out, key=lambda e: e[0].relative_to(folder).as_posix())


def volume_name(session_id: str, part: str) -> str:
    return f"cairn-{session_id}-{part}"


def carrier_name(session_id: str) -> str:
    return f"cairn-{session_id}-carrier"


class RemoteDockerBackend(DockerBackend):
    """Sandboxes as containers of a Docker engine on another machine, hardened as the local
    ones are, whose every mount is a volume of that engine. `none`, `open` and `allowlist`
    networks: the allowlist proxy and the model endpoints are this machine's, reached through
    the egress tunnel (core.sandbox.egress_tunnel); an engine's binary is a content-addressed
    volume there (`engine_volume_name`)."""

    name = "docker-ssh"
    capabilities = Capabilities(
        reattach=True,
        recreate_from_snapshot=True,
        per_exec_env=True,
        network_modes=frozenset({NETWORK_NONE, NETWORK_OPEN, NETWORK_ALLOWLIST}),
        isolated=True,
    )
    mount_type: Literal["bind", "volume"] = "volume"
    remote = True

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        bridge: SshBridge,
        *,
        host_name: str | None = None,
        client: DockerClient | None = None,
    ):
        super().__init__(data_dir, client=client)
        self.bridge = bridge
        self.host_name = host_name or bridge.target.url
        self._bridge_lock = threading.Lock()
        self._checked = False
        self._digests: dict[tuple, str] = {}

    # --- connection -------------------------------------------------------------------------

    def _where(self) -> str:
        return self.bridge.target.url

    @property
    def address(self) -> str:
        """The local socket in front of the remote engine (the bridge's)."""
        return self._open_bridge()

    def _open_bridge(self) -> str:
        """The bridge's socket, after ssh's own check the first time (so a host that cannot be
        reached says why before any API call is made)."""
        with self._bridge_lock:
            if not self._checked:
                try:
                    self.bridge.check()
                except SshUnavailable as exc:
                    raise self._unreachable(exc.message) from exc
                self._checked = True
            return self.bridge.start()

    def _connect(self) -> DockerClient:
        import docker

        url = self._open_bridge()
        try:
            client = docker.DockerClient(base_url=url, timeout=CONNECT_TIMEOUT_S)
            client.api.timeout = API_TIMEOUT_S
            return client
        except Exception as exc:  # docker-py wraps transport failures variously
            raise self._unavailable(exc) from exc

    def _unreachable(self, why: str) -> HostUnreachable:
        return HostUnreachable(
            f"sandbox host {self.host_name} cannot be reached: {why}",
            hint="its sandboxes and runs are left as they are; they are found again "
            "when it answers",
        )

    def _unavailable(self, exc: BaseException) -> SandboxUnavailable:
        # The API connection failed: ask ssh why, so a person reads that, not the transport's
        # "connection aborted".
        try:
            self.bridge.check()
        except SshUnavailable as why:
            return self._unreachable(why.message)
        except CairnError as why:
            return self._unreachable(str(why))
        found = super()._unavailable(exc)
        return self._unreachable(f"its Docker engine did not answer ({found.message})")

    def close(self) -> None:
        super().close()
        with self._bridge_lock:
            self.bridge.close()
            self._checked = False

    # --- what a remote sandbox is made of ---------------------------------------------------

    def check_spec(self, spec: SandboxSpec) -> None:
        self.engine_files(spec)  # refuses an engine mount that cannot be a volume there
        local = [
            f"{source} -> {target}"
            for source, target in spec.extra_mounts
            if target not in STANDARD_EXTRA_TARGETS and not is_engine_target(target)
        ]
        if local:
            raise SandboxError(
                f"a sandbox on host {self.host_name} cannot mount folders of this machine: "
                + ", ".join(local),
                hint="run this task on the local engine, or drop the extra mounts from its policy",
            )

    def volume_mounts(self, spec: SandboxSpec) -> list[tuple[str, str, bool]]:
        """(part, target, read-only) of each volume the sandbox mounts, folders before the
        folders inside them."""
        out = [(WORKSPACE, CONTAINER_WORKSPACE, False)]
        if spec.protects_git:
            out.append((HOOKS, HOOKS_IN_SANDBOX, True))
        out += [
            (HOME, CONTAINER_HOME, False),
            (RUNS, CONTAINER_RUNS, False),
            (TOOLS, TOOLS_IN_SANDBOX, True),
            (DECISIONS, DECISIONS_IN_SANDBOX, True),
        ]
        if spec.protects_git:
            out.append((GIT, CONTAINER_GIT_SETTINGS, True))
        return out

    def sandbox_mounts(self, spec: SandboxSpec) -> list[MountSpec]:
        return [
            MountSpec(volume_name(spec.session_id, part), target, read_only)
            for part, target, read_only in self.volume_mounts(spec)
        ] + [MountSpec(f.volume, f.folder, True) for f in self.engine_files(spec)]

    def tmpfs_mounts(self, spec: SandboxSpec) -> dict[str, str]:
        """Docker's, and an empty folder for the egress relay's socket (/cairn/egress: on this
        machine the proxy's folder is mounted there)."""
        uid, gid = spec.user
        return {
            **super().tmpfs_mounts(spec),
            CONTAINER_EGRESS: f"rw,nosuid,nodev,noexec,size=65536,mode=0755,uid={uid},gid={gid}",
        }

    def compare(self, info: Mapping[str, Any], state: SessionState, spec: SandboxSpec) -> list[str]:
        reasons = super().compare(info, state, spec)
        tmpfs = (info.get("HostConfig") or {}).get("Tmpfs") or {}
        if spec.egress_socket_dir is not None and CONTAINER_EGRESS not in tmpfs:
            reasons.append(f"it has no folder at {CONTAINER_EGRESS} for the egress relay")
        return reasons

    # --- engine binaries: content-addressed volumes ----------------------------------------

    def engine_files(self, spec: SandboxSpec) -> list[EngineFile]:
        """The engine binaries the spec mounts (targets under /cairn/engines), each as the
        volume that holds it there: a file in a volume mounted at its folder, a folder (an
        engine's package) as the volume mounted in its place. A spec found as it was made names
        the volume itself."""
        out: list[EngineFile] = []
        for source, target in spec.extra_mounts:
            if not is_engine_target(target):
                continue
            if source.name.startswith(ENGINE_VOLUME_PREFIX) and not source.exists():
                out.append(EngineFile(None, "", source.name, target, ""))  # as it was made
                continue
            name = PurePosixPath(target).name
            if source.is_dir() and not source.is_symlink():  # a package (Codex's platform folder)
                digest = self._tree_digest(source)
                volume = engine_volume_name(name, digest)
                out.append(EngineFile(source, "", volume, target, digest))
                continue
            if not source.is_file():
                raise SandboxError(
                    f"a sandbox on host {self.host_name} gets an engine's binary as a copy, "
                    f"and {source} is neither a file nor a folder",
                    hint="set the engine's binary to its native executable",
                )
            digest = self._digest(source)
            folder = str(PurePosixPath(target).parent)
            out.append(EngineFile(source, name, engine_volume_name(name, digest), folder, digest))
        folders = [f.folder for f in out]
        if len(set(folders)) != len(folders):
            raise SandboxError(
                f"a sandbox on host {self.host_name} cannot hold two engine binaries in one "
                f"folder ({', '.join(sorted(folders))})"
            )
        return out

    def _digest(self, source: Path) -> str:
        """The file's sha256, kept while its stat data stays the same."""
        st = source.stat()
        key = (str(source), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._bridge_lock:
            found = self._digests.get(key)
        if found is None:
            sha = hashlib.sha256()
            with open(source, "rb") as handle:
                while chunk := handle.read(1024 * 1024):
                    sha.update(chunk)
            found = sha.hexdigest()
            with self._bridge_lock:
                self._digests[key] = found
        return found

    def _tree_digest(self, folder: Path) -> str:
        """A folder's sha256 over its sorted entries (path, kind, mode, content or link), each
        file's kept while its stat data stays the same."""
        sha = hashlib.sha256()
        for path, kind in _tree(folder):
            rel = path.relative_to(folder).as_posix()
            st = path.lstat()
            if kind == "link":
                what = os.readlink(path)
            elif kind == "file":
                what = self._digest(path)
            else:
                what = ""
            sha.update(f"{rel}\0{kind}\0{stat.S_IMODE(st.st_mode):o}\0{what}\0".encode())
        return sha.hexdigest()

    def _ensure_engine_volumes(self, spec: SandboxSpec, image_id: str) -> None:
        """Each engine binary's volume there, made and filled once (its mark written after the
        file, in the same archive, so a fill cut short is filled again), then shared by every
        sandbox of that engine."""
        for engine in self.engine_files(spec):
            if engine.source is not None:
                self._fill_engine_volume(engine, image_id)

    def _fill_engine_volume(self, engine: EngineFile, image_id: str) -> None:
        import docker.errors

        assert engine.source is not None
        labels = {LABEL_MANAGED: "1", LABEL_ROLE: ROLE_ENGINE, LABEL_SHA256: engine.digest}
        try:
            self.api.inspect_volume(engine.volume)
        except docker.errors.NotFound:
            self.api.create_volume(engine.volume, labels=labels)
        carrier = self._engine_carrier(engine.volume, image_id, labels)
        if self._has_mark(carrier, engine.digest):
            return
        name = engine.name or engine.source.name

        def rooted(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid, info.gid, info.uname, info.gname = 0, 0, "", ""
            info.mode &= 0o755  # readable by the sandbox user, writable by no one there
            return info

        with tempfile.TemporaryFile() as spool:
            with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
                if engine.name:  # one file, in the folder the volume is mounted at
                    info = tar.gettarinfo(str(engine.source), arcname=name)
                    info.mode = 0o755
                    with open(engine.source, "rb") as handle:
                        tar.addfile(rooted(info), handle)
                else:  # a whole folder, the volume mounted in its place
                    for path, _kind in _tree(engine.source):
                        arcname = path.relative_to(engine.source).as_posix()
                        tar.add(str(path), arcname=arcname, recursive=False, filter=rooted)
                mark = tarfile.TarInfo(ENGINE_MARK)
                data = f"{engine.digest}\n".encode("ascii")
                mark.size, mark.mode = len(data), 0o644
                tar.addfile(mark, io.BytesIO(data))
            spool.seek(0)
            if not self.api.put_archive(carrier, "/v", spool):
                raise SandboxError(f"host {self.host_name} refused the engine binary {name}")
        if not self._has_mark(carrier, engine.digest):
            raise SandboxError(
                f"the engine binary {name} did not arrive whole on host {self.host_name}"
            )

    def _engine_carrier(self, volume: str, image_id: str, labels: dict[str, str]) -> str:
        """A never-started container holding the engine volume writable at /v."""
        import docker.errors
        import docker.types

        name = f"{volume}-carrier"
        for _ in range(2):
            try:
                return str(self.api.inspect_container(name)["Id"])
            except docker.errors.NotFound:
                pass
            host_config = self.api.create_host_config(
                mounts=[docker.types.Mount("/v", volume, type="volume")],
                network_mode="none",
                cap_drop=["ALL"],
            )
            try:
                created = self.api.create_container(
                    image=image_id,
                    command=["true"],
                    name=name,
                    labels={**labels, LABEL_ROLE: ROLE_CARRIER},
                    host_config=host_config,
                    network_disabled=True,
                )
                return str(created["Id"])
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # else another Cairn made it just now
                    raise
        raise SandboxError(f"the carrier of {volume} cannot be made on host {self.host_name}")

    def _has_mark(self, carrier: str, digest: str) -> bool:
        import docker.errors

        try:
            stream, _stat = self.api.get_archive(carrier, f"/v/{ENGINE_MARK}")
        except docker.errors.NotFound:
            return False
        data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.extractfile(ENGINE_MARK)
            return member is not None and member.read().decode("ascii", "replace").strip() == digest

    # --- the egress tunnel ------------------------------------------------------------------

    @docker_call("create the sandbox")
    def create(
        self, spec: SandboxSpec, *, previous: SessionState | None = None
    ) -> tuple[SessionState, LiveSession]:
        state, live = super().create(spec, previous=previous)
        try:
            self.connect_egress(spec, state.container_id)
        except BaseException:
            # Not recorded anywhere yet: a sandbox that cannot reach its proxy is not kept.
            if state.container_id:
                with contextlib.suppress(Exception):
                    self.api.remove_container(state.container_id, force=True)
            raise
        return state, live

    def connect_egress(self, spec: SandboxSpec, container_id: str | None) -> None:
        """When the spec reaches the egress proxy: the tunnel carrying the sandbox's egress
        socket to the proxy's here, serving before this returns."""
        if spec.egress_socket_dir is None or not container_id:
            return
        proxy = spec.egress_socket_dir / SOCKET_NAME
        if running_pid(proxy) is None:
            # Found as it was made (to follow a run), with no proxy serving: nothing to carry.
            # Making a sandbox starts the proxy first, and its tunnel then.
            return
        self._open_bridge()  # ssh's own check first: a host that refuses says why
        ensure_tunnel(proxy, container_id, self.bridge)

    def _stale_mounts(self, info: Mapping[str, Any], spec: SandboxSpec) -> list[str]:
        return []  # a volume in use cannot be removed or replaced under the container

    def prepare(self, spec: SandboxSpec, image_id: str) -> None:
        """The session's volumes, made and filled: the workspace and home from this machine's
        copies when their volume is new (a recreate keeps what the old sandbox left), the
        tools, git settings and decisions every time."""
        # The local folders stay: the workspace is what the volume is seeded from and mirrored
        # back to, the home and runs folders what the run's files are mirrored into.
        prepare_host_dirs(spec, hand_over=False)
        made = self._ensure_volumes(spec)
        carrier = self._ensure_carrier(spec, image_id)
        user = spec.user
        fills: list[Fill] = []
        if WORKSPACE in made:
            fills.append((WORKSPACE, spec.workspace_root, user))
        if HOME in made:
            fills.append((HOME, spec.home_dir, user))
        if RUNS in made:
            fills.append((RUNS, None, user))
        self._put_folders(carrier, fills, own=self._current(spec), made=made)
        self._ensure_engine_volumes(spec, image_id)

    def _current(self, spec: SandboxSpec) -> list[Fill]:
        """What a sandbox reads of Cairn's own, as this Cairn has it: the tools, the git
        settings and the decisions (on this machine they are live bind mounts)."""
        fills: list[Fill] = [(TOOLS, RESOURCES_SANDBOX, (0, 0))]
        if spec.git_settings_dir is not None:
            fills.append((GIT, spec.git_settings_dir, (0, 0)))
        fills.append((DECISIONS, self._decisions_of(spec), (0, 0)))
        return fills

    @docker_call("reattach to the sandbox")
    def attach(self, state: SessionState, spec: SandboxSpec) -> AttachResult:
        found = super().attach(state, spec)
        if isinstance(found, Attached):  # made by another Cairn, or before an update of it
            self._put_folders(carrier_name(spec.session_id), (), own=self._current(spec))
            assert isinstance(found.live, DockerLiveSession)
            self.connect_egress(spec, found.live.container_id)
        return found

    def _decisions_of(self, spec: SandboxSpec) -> Path:
        return decisions_root(Path(self.data_dir), spec.workspace_id)

    def _labels(self, spec: SandboxSpec, role: str) -> dict[str, str]:
        return {
            LABEL_MANAGED: "1",
            LABEL_DATA_DIR: self.data_dir,
            LABEL_WORKSPACE: spec.workspace_id,
            LABEL_SESSION: spec.session_id,
            LABEL_ROLE: role,
        }

    def _ensure_volumes(self, spec: SandboxSpec) -> set[str]:
        """The parts whose volume had to be made now."""
        import docker.errors

        made = set()
        for part in PARTS:
            name = volume_name(spec.session_id, part)
            try:
                self.api.inspect_volume(name)
            except docker.errors.NotFound:
                self.api.create_volume(name, labels=self._labels(spec, part))
                made.add(part)
        return made

    def _ensure_carrier(self, spec: SandboxSpec, image_id: str) -> str:
        """The session's carrier: a container that is never started, holding each volume
        writable at /v/<part>, for the archive calls that fill and read them."""
        import docker.errors
        import docker.types

        name = carrier_name(spec.session_id)
        try:
            return str(self.api.inspect_container(name)["Id"])
        except docker.errors.NotFound:
            pass
        host_config = self.api.create_host_config(
            mounts=[
                docker.types.Mount(
                    f"{CARRIER_ROOT}/{part}", volume_name(spec.session_id, part), type="volume"
                )
                for part in PARTS
            ],
            network_mode="none",
            cap_drop=["ALL"],
        )
        created = self.api.create_container(
            image=image_id,
            command=["true"],
            name=name,
            labels=self._labels(spec, ROLE_CARRIER),
            host_config=host_config,
            network_disabled=True,
        )
        return str(created["Id"])

    @docker_call("send the run's files to the sandbox host")
    def put_run_folder(self, spec: SandboxSpec, run_id: str) -> None:
        """The local run folder's files into the run folder of the runs volume."""
        self._put_folder(
            carrier_name(spec.session_id),
            f"{RUNS}/{check_run_id(run_id)}",
            spec.run_dir(run_id),
            spec.user,
        )

    def _put_folder(
        self, carrier: str, part: str, folder: Path | None, owner: tuple[int, int]
    ) -> None:
        self._put_folders(carrier, [(part, folder, owner)])

    def _put_folders(
        self,
        carrier: str,
        fills: Sequence[Fill],
        *,
        own: Sequence[Fill] = (),
        made: Collection[str] = (),
    ) -> None:
        """Write each `(part, folder, owner)`: the folder's tree (links as links) into the
        volume of `part` (or a folder in it: `runs/<run>`), owned by `owner`; without a
        folder, only the top folder and its owner. Of Cairn's own parts (`own`), only what
        differs from the session's record (`_Pushed`) goes; the record starts afresh for a
        volume just `made`. One archive for them all, none when nothing differs: each is a
        round trip to the other machine."""
        with contextlib.ExitStack() as stack:
            record = None
            if own:
                record = stack.enter_context(_Pushed.held(self._pushed_path(carrier)))
                record.forget(made)
            with tempfile.SpooledTemporaryFile(max_size=64 * 1024**2) as spool:
                with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    for part, folder, owner in fills:
                        _add_tree(tar, part, folder, owner)
                    changed = record.add_changed(tar, own) if record is not None else False
                spool.seek(0)
                if (fills or changed) and not self.api.put_archive(carrier, CARRIER_ROOT, spool):
                    parts = ", ".join(part for part, _, _ in [*fills, *own])
                    raise SandboxError(f"host {self.host_name} refused the files of {parts}")
            if record is not None:
                record.save()

    def _pushed_path(self, carrier: str) -> Path:
        return Path(self.data_dir) / PUSHED_FOLDER / f"{carrier}.json"

    def list_sessions(self) -> list[SessionSummary]:
        """The sandboxes, without their carriers (which never run anything)."""
        found = super().list_sessions()
        carriers = {carrier_name(s.session_id or "") for s in found}
        return [s for s in found if s.container_name not in carriers]

    def live_session(
        self, state: SessionState, spec: SandboxSpec, container_id: str
    ) -> DockerLiveSession:
        return RemoteLiveSession(self, state, spec, container_id)

    # --- what a session leaves there -------------------------------------------------------

    @docker_call("list the sandboxes and volumes on the sandbox host")
    def session_parts(self) -> dict[str, SessionParts]:
        """This data folder's containers and volumes on the host, by session (by their labels:
        what a deleted task left is found without any record here)."""
        found: dict[str, SessionParts] = {}

        def parts_of(labels: Mapping[str, str]) -> SessionParts | None:
            session = labels.get(LABEL_SESSION)
            if not session:
                return None
            parts = found.setdefault(session, SessionParts(session))
            parts.workspace_id = parts.workspace_id or labels.get(LABEL_WORKSPACE)
            return parts

        for c in self.api.containers(all=True, filters=self._filters()):
            parts = parts_of(c.get("Labels") or {})
            if parts is not None:
                parts.containers.append((c.get("Names") or ["/"])[0].lstrip("/"))
                parts.made_at = max(parts.made_at, float(c.get("Created") or 0))
        volumes = self.api.volumes(filters=self._filters()).get("Volumes") or []
        for v in volumes:
            parts = parts_of(v.get("Labels") or {})
            if parts is not None:
                parts.volumes.append(v["Name"])
                parts.made_at = max(parts.made_at, _epoch(v.get("CreatedAt")))
        for parts in found.values():
            parts.containers.sort()
            parts.volumes.sort()
        return found

    @docker_call("remove a sandbox and its volumes on the sandbox host")
    def remove_session(self, session_id: str) -> SessionParts:
        """Remove the session's sandbox, its carrier and its volumes there (its workspace,
        home and run files: the local copies are the record); what was removed. Only this data
        folder's, by their labels."""
        import docker.errors

        parts = self.session_parts().get(session_id) or SessionParts(session_id)
        for name in parts.containers:
            with contextlib.suppress(docker.errors.NotFound):
                self.api.remove_container(name, force=True, v=False)
        for name in parts.volumes:
            with contextlib.suppress(docker.errors.NotFound):
                self.api.remove_volume(name, force=True)
        _Pushed.remove(self._pushed_path(carrier_name(session_id)))
        return parts

    @docker_call("write the approval decisions to the sandbox host")
    def push_decisions(self, spec: SandboxSpec) -> None:
        """The decisions written here since the last push (by any of Cairn's processes)."""
        carrier = carrier_name(spec.session_id)
        self._put_folders(carrier, (), own=[(DECISIONS, self._decisions_of(spec), (0, 0))])


class RemoteLiveSession(DockerLiveSession):
    """A running container on a remote engine: its run files are mirrored into the local runs
    folder on each look (`sync_run`), and nothing is ever done to a local process by a pid
    the remote engine gave."""

    backend: RemoteDockerBackend

    def __init__(
        self,
        backend: RemoteDockerBackend,
        state: SessionState,
        spec: SandboxSpec,
        container_id: str,
    ):
        super().__init__(backend, state, spec, container_id)
        self._synced: dict[str, float] = {}

    def _prepare_run(self, run_id: str) -> None:
        inside = f"{CONTAINER_RUNS}/{run_id}"
        prepared = self.exec(["sh", "-c", PREPARE_RUN_SCRIPT, "sh", inside], env={}, cwd="/")
        if not prepared.ok:
            raise SandboxError(
                f"run {run_id} could not start in {self.state.container_name}: its folder "
                f"could not be made ({prepared.stderr.strip()[:200] or prepared.exit_code})"
            )
        _reset_local(self.spec.run_dir(run_id))
        # What Cairn wrote for this launch (a shell run's script, an engine's files) goes along.
        self.backend.put_run_folder(self.spec, run_id)

    @docker_call("send the engine's files to the sandbox host")
    def send_home_files(self, paths: Sequence[str], *, if_missing: Sequence[str] = ()) -> None:
        """The launch's files of the engine home (its settings, its gate) into the home volume
        there, as the local home has them now (a file missing here is removed there), and the
        `if_missing` ones (a conversation put back here from a checkpoint) where it has none:
        the home volume is filled from here only when it is made, and its other files (what
        the engine wrote there) are the engine's."""
        names = [_home_name(p) for p in paths]
        kept = [n for n in (_home_name(p) for p in if_missing) if n not in names]
        if not names and not kept:
            return
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in [*names, *kept]:
                _add_local_file(tar, self.spec.home_dir, name)
        argv = ["sh", "-c", HOME_FILES_SCRIPT, "sh", CONTAINER_HOME, str(len(names)), *names]
        exec_id = self._exec_create([*argv, *kept], {}, "/", stdin=True)
        err = _feed(self._api.exec_start(exec_id, socket=True), data.getvalue())
        code = self._api.exec_inspect(exec_id).get("ExitCode")
        if code != 0:
            raise SandboxError(
                f"the engine's files ({', '.join([*names, *kept])}) could not be written into "
                f"the home of {self.state.container_name}: "
                + (err.decode("utf-8", "replace").strip()[:300] or f"exit code {code}"),
                hint="the run did not start; start it again, or remove the sandbox to make its "
                "home again from this machine's copy",
            )

    def _started_pid(self, run_id: str) -> int | None:
        self.sync_run(run_id, force=True)
        return read_pid(self.spec.run_dir(run_id))

    def _exec_create(
        self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str, *, stdin: bool = False
    ) -> str:
        # Whatever an exec reads under /cairn/decisions (the program rules placed at each
        # launch, a decision just written) is there before it starts.
        self.push_decisions()
        return super()._exec_create(argv, env, cwd, stdin=stdin)

    def _kill_exec(self, exec_id: str) -> None:
        # The engine's pid of a timed-out exec is a pid of the other machine: never signalled
        # here. The exec ends with its sandbox, or by itself.
        return None

    @docker_call("read the run's files from the sandbox host")
    def sync_run(self, run_id: str, *, force: bool = False) -> None:
        """Mirror the run folder `run_id` of the sandbox into the local one: output files
        appended from the size they have here, the small files replaced whole (and removed when
        they are gone there). A look cut short writes nothing."""
        check_run_id(run_id)
        now = time.monotonic()
        if not force and now - self._synced.get(run_id, 0.0) < SYNC_INTERVAL_S:
            return
        self._synced[run_id] = now
        local = self.spec.run_dir(run_id)
        local.mkdir(parents=True, exist_ok=True)
        # One look at a time per run folder, across Cairn's processes: the offsets asked for
        # are the sizes when the answer is written, so nothing is appended twice.
        fd = os.open(local, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            offsets = _local_offsets(local)
            argv = ["sh", "-c", SYNC_SCRIPT, "sh", f"{CONTAINER_RUNS}/{run_id}"]
            argv += [f"{name}={size}" for name, size in sorted(offsets.items())]
            frames = parse_sync(self._raw_exec(argv))
            if frames is not None:  # else cut short: looked at again next time
                _apply(local, frames)
        finally:
            os.close(fd)

    # -- the workspace's files (core.sandbox.mirror.SandboxFiles) ---------------------------

    def _exec_socket(self, argv: Sequence[str], cwd: str) -> Any:
        """An exec with its stdin attached: the raw socket of its stream (docker-py's)."""
        return self._api.exec_start(self._exec_create(argv, {}, cwd, stdin=True), socket=True)

    @docker_call("start a program in the sandbox")
    def lines(self, argv: Sequence[str], cwd: str = CONTAINER_WORKSPACE) -> ExecLines:
        """`argv`'s stdout a line at a time, as it comes (the workspace watcher, a scan); its
        stdin held open until `close()`, which is how the watcher knows to end."""
        return ExecLines(self._exec_socket(argv, cwd))

    @docker_call("read files in the sandbox")
    def read_files(self, paths: Sequence[str], cwd: str = CONTAINER_WORKSPACE) -> list[Entry]:
        """The entries at `paths` (relative to `cwd`, /workspace): one tar of just them, the
        names given on its stdin (any name, however it is spelt)."""
        if not paths:
            return []
        return read_entries(self._exec_socket(TAR_READ_ARGV, cwd), paths)

    def workspace_mirror(self, **options: Any) -> WorkspaceMirror:
        """A mirror keeping the local workspace folder equal to this sandbox's /workspace (its
        .git stays the sandbox's: the recorder never reads it, and the local one is protected).
        Its last pass (`sync`, before a run's checkpoint) brings the engine home back too."""
        return RemoteWorkspaceMirror(
            self, self.spec.workspace_root, exclude=(".git",), home=self.home_mirror(), **options
        )

    def home_mirror(self) -> WorkspaceMirror:
        """A mirror of the engine home there into the local home folder: what Cairn reads of it
        (the engine's conversation files: a checkpoint's copy, a native continue's check, the
        point a fork resumes at) is read here, and a volume made again is filled from it."""
        return WorkspaceMirror(
            FilesUnder(self, CONTAINER_HOME),
            self.spec.home_dir,
            remote_root=CONTAINER_HOME,
            scan_cache=HOME_SCAN_CACHE,
        )

    def _raw_exec(self, argv: Sequence[str]) -> bytes:
        """A short exec's stdout as bytes (a run's output need not be text)."""
        exec_id = self._exec_create(argv, {}, "/")
        out, _err = self._api.exec_start(exec_id, demux=True)
        return out or b""

    def push_decisions(self) -> None:
        """Send the workspace's approval decisions written since the last push."""
        self.backend.push_decisions(self.spec)


class FilesUnder:
    """A remote live session's files under another folder than /workspace, as a mirror's
    `SandboxFiles`."""

    def __init__(self, live: RemoteLiveSession, root: str):
        self.live = live
        self.root = root

    def lines(self, argv: Sequence[str]) -> ExecLines:
        return self.live.lines(argv, cwd=self.root)

    def read_files(self, paths: Sequence[str]) -> list[Entry]:
        return self.live.read_files(paths, cwd=self.root)


class RemoteWorkspaceMirror(WorkspaceMirror):
    """The workspace mirror of a remote sandbox, whose full pass on demand (`sync`: the last
    one before a run's checkpoint) also makes the local engine home equal to the one there."""

    def __init__(self, *args: Any, home: WorkspaceMirror, **options: Any):
        super().__init__(*args, **options)
        self.home = home

    def sync(self) -> list[str]:
        changed = super().sync()
        try:
            self.home.sync()
        except CairnError as exc:
            if self._on_problem is not None:
                self._on_problem(f"the engine home could not be brought back: {exc}")
        return changed


class ExecLines:
    """An exec's stdout as lines (core.sandbox.mirror.LineStream), its stdin held open;
    `close()`, from any thread, shuts the stream down: the iteration ends, and the program's
    stdin with it."""

    def __init__(self, sock: Any):
        from docker.utils.socket import frames_iter

        self._sock = sock
        self._raw = sock._sock
        self._frames = frames_iter(sock, tty=False)

    def __iter__(self) -> Iterator[str]:
        pending = b""
        for stream, data in self._frames:
            if stream != 1:  # the program's stderr: not lines of its protocol
                continue
            pending += data
            *whole, pending = pending.split(b"\n")
            for line in whole:
                yield line.decode("utf-8", errors="surrogateescape")

    def close(self) -> None:
        # shutdown acts at once; close() alone waits for the reader's file object to let go.
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)


# --- mirroring run files ----------------------------------------------------------------------


def parse_sync(data: bytes) -> list[tuple[str, str, int, bytes]] | None:
    """SYNC_SCRIPT's frames as (kind, name, offset, bytes); None when the stream did not end
    with its end mark where the frames say it must (cut short, or a file shrank under it)."""
    frames: list[tuple[str, str, int, bytes]] = []
    at = 0
    while True:
        end = data.find(b"\n", at)
        if end < 0:
            return None
        head = data[at:end].decode("utf-8", errors="replace")
        at = end + 1
        if head == "E":
            return frames if at == len(data) else None
        kind, _, rest = head.partition(" ")
        try:
            if kind == "W":
                size, _, name = rest.partition(" ")
                offset, count = 0, int(size)
            elif kind == "A":
                offset_text, count_text, name = rest.split(" ", 2)
                offset, count = int(offset_text), int(count_text)
            else:
                return None
        except ValueError:
            return None
        if not _safe_name(name) or at + count > len(data):
            return None
        frames.append((kind, name, offset, data[at : at + count]))
        at += count


def _safe_name(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def _is_whole(name: str) -> bool:
    return name in WHOLE_FILES or any(name.startswith(f) for f in WHOLE_FOLDERS)


def _local_offsets(folder: Path) -> dict[str, int]:
    """The size of each output file mirrored here so far: where the next bytes go."""
    out: dict[str, int] = {}
    if not folder.is_dir():
        return out
    for path in folder.rglob("*"):
        name = path.relative_to(folder).as_posix()
        if path.name.startswith(".") and path.name.endswith(".sync"):
            continue
        if path.is_file() and not path.is_symlink() and not _is_whole(name):
            out[name] = path.stat().st_size
    return out


def _apply(folder: Path, frames: list[tuple[str, str, int, bytes]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    whole_there = set()
    for kind, name, offset, data in frames:
        parent = folder
        *dirs, leaf = name.split("/")
        for part in dirs:
            parent = ensure_dir(parent, part)  # never through a link
        path = parent / leaf
        if kind == "W":
            whole_there.add(name)
            try:
                if path.read_bytes() == data:
                    continue
            except OSError:
                pass
            tmp = parent / f".{leaf}.sync"
            tmp.write_bytes(data)
            os.replace(tmp, path)
            continue
        size = path.stat().st_size if path.is_file() else 0
        if size > offset:  # the file started again there (a restarted background process)
            with open(path, "r+b") as out:
                out.truncate(offset)
        elif size < offset:
            continue  # not the bytes that follow ours: asked again from our size next time
        with open(path, "ab") as out:
            out.write(data)
    for name in (*WHOLE_FILES, *_local_whole_in_folders(folder)):
        if name not in whole_there:
            with contextlib.suppress(FileNotFoundError):
                (folder / name).unlink()


def _local_whole_in_folders(folder: Path) -> list[str]:
    out = []
    for sub in WHOLE_FOLDERS:
        base = folder / sub.rstrip("/")
        if base.is_dir() and not base.is_symlink():
            out += [p.relative_to(folder).as_posix() for p in base.rglob("*") if p.is_file()]
    return out


def _reset_local(run_dir: Path) -> None:
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    ensure_dir(run_dir.parent, run_dir.name)
    for name in (RUN_PID_FILE, RUN_EXIT_CODE_FILE):
        (run_dir / name).unlink(missing_ok=True)


def _owned(uid: int, gid: int) -> Callable[[tarfile.TarInfo], tarfile.TarInfo]:
    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info

    return own


def _add_tree(tar: tarfile.TarFile, part: str, folder: Path | None, owner: tuple[int, int]) -> None:
    """The folder's tree at `part` (links as links); without a folder, its top alone."""
    own = _owned(*owner)
    if folder is not None and folder.is_dir():
        tar.add(str(folder), arcname=part, recursive=True, filter=own)
    else:
        top = tarfile.TarInfo(part)
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(own(top))


class _Pushed:
    """What a session's volumes hold of Cairn's own parts, as this data folder last sent them:
    per part, per path, its kind, mode and content digest (with the size and mtime it had here,
    so an unchanged file is not read again). Held under a lock for a whole push, so Cairn's
    processes (the window, a command, the judge) take turns and never send the same file
    twice. A record that cannot be read is an empty one: everything is sent again."""

    def __init__(self, path: Path, doc: dict[str, dict[str, list]]):
        self.path = path
        self.doc = doc
        self.dirty = False

    @classmethod
    @contextlib.contextmanager
    def held(cls, path: Path) -> Iterator[_Pushed]:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _unwritable(path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            doc: dict[str, dict[str, list]] = {}
            with contextlib.suppress(OSError, ValueError):
                found = json.loads(path.read_bytes())
                if isinstance(found, dict):
                    doc = {k: v for k, v in found.items() if isinstance(v, dict)}
            yield cls(path, doc)
        finally:
            os.close(fd)

    @staticmethod
    def remove(path: Path) -> None:
        for stale in (path, path.with_suffix(".lock")):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()

    def forget(self, parts: Collection[str]) -> None:
        """The volumes of `parts` were made now: they hold nothing yet."""
        for part in parts:
            if self.doc.pop(part, None) is not None:
                self.dirty = True

    def add_changed(self, tar: tarfile.TarFile, fills: Sequence[Fill]) -> bool:
        """Add to `tar` what differs from the record; the record then says it is there (kept
        only by `save`, after the archive was taken). Whether anything was added."""
        added = False
        for part, folder, owner in fills:
            own = _owned(*owner)
            known = self.doc.setdefault(part, {})
            if folder is None or not folder.is_dir():
                if "." not in known:
                    _add_tree(tar, part, None, owner)
                    known["."] = ["dir", 0o755, 0, 0, ""]
                    added = self.dirty = True
                continue
            for rel, path in _walk_all(folder):
                was = known.get(rel)
                try:
                    st = path.lstat()
                    entry, data = self._entry(path, st, was)
                except OSError:
                    continue  # gone since it was listed: sent with the next push
                if was == entry:
                    continue
                known[rel] = entry
                self.dirty = True
                if was is not None and was[:2] == entry[:2] and was[4] == entry[4]:
                    continue  # only its size or time here changed, not what it holds
                info = tar.gettarinfo(str(path), arcname=part if rel == "." else f"{part}/{rel}")
                if data is not None:  # the bytes digested, whatever the file holds by now
                    info.size = len(data)
                    tar.addfile(own(info), io.BytesIO(data))
                else:
                    tar.addfile(own(info))
                added = True
        return added

    @staticmethod
    def _entry(path: Path, st: os.stat_result, was: list | None) -> tuple[list, bytes | None]:
        """The record's entry for `path`, and its bytes when they were read to digest."""
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            return ["dir", mode, 0, 0, ""], None
        if stat.S_ISLNK(st.st_mode):
            return ["link", mode, 0, 0, os.readlink(path)], None
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a file", str(path))
        if was is not None and was[:4] == ["file", mode, st.st_size, st.st_mtime_ns]:
            return was, None
        data = path.read_bytes()
        return ["file", mode, st.st_size, st.st_mtime_ns, hashlib.sha256(data).hexdigest()], data

    def save(self) -> None:
        if not self.dirty:
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(self.doc, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise _unwritable(self.path, exc) from None
        self.dirty = False


def _unwritable(path: Path, exc: OSError) -> SandboxError:
    """A record of this machine that cannot be written: said as that, not as a host that does
    not answer (which is what a raw OSError inside a Docker call would be taken for)."""
    return SandboxError(
        f"cannot write {path.parent}, where Cairn records what it sent to the sandbox host: "
        f"{exc.strerror or exc}",
        hint="free disk space or fix the data folder's permissions, then try again",
    )


def _walk_all(folder: Path) -> Iterator[tuple[str, Path]]:
    """Every path under `folder`, itself first as ".", parents before what they hold."""
    yield ".", folder
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        base = Path(top)
        for name in [*sorted(dirs), *sorted(files)]:
            path = base / name
            yield path.relative_to(folder).as_posix(), path


def _home_name(path: str) -> str:
    """A launch's path in the engine home: relative, plain names (what the engine code says)."""
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or any(p in (".", "..") for p in parts):
        raise ValueError(f"not a path inside the engine home: {path!r}")
    return str(PurePosixPath(*parts))


def _add_local_file(tar: tarfile.TarFile, home: Path, name: str) -> None:
    """`home/name` into `tar` when it is a regular file (a link is not followed: the home is
    the sandbox's to write, and mirrored from there)."""
    try:
        fd = os.open(home / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return
        raise SandboxError(f"{home / name} cannot be read: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode):
            return
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = st.st_size, stat.S_IMODE(st.st_mode), int(st.st_mtime)
        tar.addfile(info, file)


def _feed(sock: Any, data: bytes) -> bytes:
    """Write `data` to the stdin of an exec whose attached socket is `sock`, then wait for its
    end; its stderr. The socket is closed afterwards."""
    from docker.utils.socket import frames_iter

    raw = sock._sock
    try:
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)
        return b"".join(chunk for stream, chunk in frames_iter(sock, tty=False) if stream == 2)
    finally:
        sock.close()
        raw.close()


def read_entries(sock: Any, paths: Sequence[str]) -> list[Entry]:
    """The entries at `paths` from an exec of `TAR_READ_ARGV` whose attached socket is `sock`:
    the names go on tar's stdin, NUL-separated, and its stdout is one tar of just them. The
    socket is closed afterwards."""
    from docker.utils.socket import frames_iter

    raw = sock._sock
    try:
        raw.sendall(b"".join(os.fsencode(p) + b"\0" for p in paths))
        raw.shutdown(socket.SHUT_WR)  # the end of tar's list
        out = b"".join(data for stream, data in frames_iter(sock, tty=False) if stream == 1)
    finally:
        sock.close()
        raw.close()
    return list(entries_from_tar(io.BytesIO(out)))
