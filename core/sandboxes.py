"""Sandbox sessions of workspaces: making, finding and re-making a workspace's sandbox under
the current policy, and the background processes (launch specs) that go with it.

Owns the step "Sandbox" of the resume ladder (reattach, recreate with the same snapshot id) and
the session-state rows; the backends own containers and processes, the ladder owns the order.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import mailbox
from core.context import Context, Lazy
from core.datadir import DataDir
from core.errors import CairnError, InputError
from core.ids import new_id
from core.launch import resource_path
from core.locks import FileLock, lock_path
from core.models import Run, SessionRecord, Workspace
from core.policy import NETWORK_ALLOWLIST, NETWORK_NONE, Policy
from core.safe_fs import write_file
from core.sandbox import egress
from core.sandbox.base import (
    CONTAINER_GIT_DIR,
    CONTAINER_GIT_SETTINGS,
    CONTAINER_HOME,
    CONTAINER_RUNS,
    CONTAINER_WORKSPACE,
    DEFAULT_IMAGE,
    PROTECTED_GIT_TARGETS,
    RESERVED_TARGETS,
    Attached,
    Gone,
    LiveSession,
    Mismatch,
    SandboxBackend,
    SandboxSpec,
    SessionState,
    SessionSummary,
)
from core.sandbox.hosts import LOCAL, PODMAN, SandboxHost, bridge_for
from core.settings import Settings, endpoint_of
from core.store import Store

if TYPE_CHECKING:  # imported when a host is used: the Docker client is slow to import
    from core.sandbox.docker import DockerBackend

log = logging.getLogger(__name__)

TOOLS_DIR_IN_SANDBOX = "/cairn/tools"
RESOURCES_SANDBOX = resource_path("sandbox")
EGRESS_PROXY_PORT = 3128  # inside the sandbox, on its own loopback
HOST_UNREACHABLE = "host unreachable"  # a session's state while its remote host does not answer

# The git config every git in a sandbox reads as its global one (GIT_CONFIG_GLOBAL), read-only
# there. The same keys are also set at command level in each exec's environment (see
# core.sandbox.base.GIT_PROTECTION_ENV); this file holds them for a command that drops those.
SANDBOX_GITCONFIG = """\
# Cairn's git settings for every git in this sandbox. Read-only: Cairn writes it on the host.
[core]
\thooksPath = /dev/null
\tfsmonitor = false
[safe]
\tbareRepository = explicit
[user]
\tname = Cairn
\temail = cairn@localhost
"""

BY_CONSTRUCTION = "construction"
BY_APPROVAL = "approval"


@dataclass(frozen=True)
class Protection:
    """One thing a sandbox keeps from happening, and how: refused by the sandbox's construction
    (nothing to ask, no spelling gets around it) or asked of a person before it runs."""

    what: str
    how: str  # BY_CONSTRUCTION | BY_APPROVAL
    detail: str


# Where a run in a Docker sandbox can write; everything else is read-only.
WRITABLE_PATHS = (
    (CONTAINER_WORKSPACE, "the workspace: recorded as revisions, restorable from a snapshot"),
    (f"{CONTAINER_GIT_DIR}/…", "what git writes (index, objects, refs, logs, HEAD, messages)"),
    (CONTAINER_HOME, "the agent's home: the engine's conversation files, kept across sandboxes"),
    ("/tmp", "scratch space in memory, gone with the sandbox"),
    (CONTAINER_RUNS, "the run's own output files"),
)

PROTECTIONS = (
    Protection(
        "Git hooks and the workspace's git config",
        BY_CONSTRUCTION,
        "/workspace/.git/hooks, .git/config and .git/commondir are read-only in the sandbox and "
        ".git cannot be moved or replaced, so no hook or config change can be planted to run on "
        "a later git command; Cairn changes them on the host",
    ),
    Protection(
        "Git settings from the home or the image",
        BY_CONSTRUCTION,
        "every git in the sandbox reads Cairn's read-only settings instead of ~/.gitconfig or "
        "/etc/gitconfig, with hooks and fsmonitor off in every repository",
    ),
    Protection(
        "Files outside the workspace, the home and /tmp",
        BY_CONSTRUCTION,
        "the root filesystem is read-only; a stray rm reaches only /workspace (restorable), "
        "/tmp and the agent's home",
    ),
    Protection(
        "Your own credentials",
        BY_CONSTRUCTION,
        "nothing from your home (~/.ssh, ~/.aws, ~/.config/gh, ~/.netrc) is put in a sandbox; "
        "model keys are added by Cairn's proxy on the host",
    ),
    Protection(
        "Root and extra privileges",
        BY_CONSTRUCTION,
        "a non-root user with every capability dropped and no new privileges",
    ),
    Protection(
        "Network",
        BY_CONSTRUCTION,
        "none, the task's allowlist through Cairn's proxy, or open, as the task's policy says",
    ),
    Protection(
        "Every program a run starts",
        BY_APPROVAL,
        "judged before it runs, whatever the spelling (quotes, variables, eval, functions, "
        "bash -c, python -c, xargs, find -exec, base64 | sh): push, publish, deletes outside the "
        "workspace, credential reads, privilege escalation, an interpreter reading a program from "
        "a pipe, writes aimed at .git/hooks, and settings given to one command (git -c …, "
        "GIT_CONFIG_* …) wait for a person; a run that cannot be supervised does not start",
    ),
    Protection(
        "Agent tool calls",
        BY_APPROVAL,
        "Claude Code's and Codex's tool calls are checked by the risk rules below; the programs "
        "they start are judged again, so bash -c cannot do what a card refused",
    ),
)


@dataclass(frozen=True)
class LaunchSpec:
    """A background process as something to rebuild, never as a pid."""

    name: str
    argv: list[str]
    cwd: str = "/workspace"
    health: list[str] | None = None
    rebuildable: bool = True
    env: dict[str, str] = field(default_factory=dict)  # fixed, non-secret values only

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "argv": self.argv,
            "cwd": self.cwd,
            "health": self.health,
            "rebuildable": self.rebuildable,
            "env": self.env,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchSpec:
        return cls(
            d["name"],
            list(d["argv"]),
            d.get("cwd", "/workspace"),
            d.get("health"),
            bool(d.get("rebuildable", True)),
            dict(d.get("env") or {}),
        )

    @property
    def exec_id(self) -> str:
        return f"bg-{self.name}"


@dataclass
class SandboxOutcome:
    """What getting a sandbox did, in words a person can read."""

    record: SessionRecord
    live: LiveSession
    path: str  # "created" | "reattached" | "recreated"
    reasons: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)


class SandboxManager:
    """The data folder's sandboxes: `backend` is the default host's (`host`); a session on
    another host is reached through `backend_for(name)`, made on first use."""

    def __init__(
        self,
        data: DataDir,
        store: Store,
        backend: SandboxBackend,
        image: str | None = None,
        *,
        host: str = LOCAL,
        backend_for: Callable[[str], SandboxBackend] | None = None,
    ):
        self.data = data
        self.store = store
        self.backend = backend
        self.host = host
        self._backend_for = backend_for
        self._backends: dict[str, SandboxBackend] = {host: backend}
        self.image = image or os.environ.get("CAIRN_SANDBOX_IMAGE") or DEFAULT_IMAGE

    # -- hosts -------------------------------------------------------------------------------

    def backend_of(self, host: str | None) -> SandboxBackend:
        """The backend of the sandbox host `host` (the default one for None). The unsafe host
        backend has no hosts (every session is on this computer), and a manager given one
        backend and no way to make others (`Cairn(backend=)`) uses it for every host."""
        name = host or self.host
        if self.backend.unsafe or name == self.host or self._backend_for is None:
            return self.backend
        if name not in self._backends:
            self._backends[name] = self._backend_for(name)
        return self._backends[name]

    def host_of(self, record: SessionRecord) -> str:
        """The host a session runs on; one made before hosts is where its backend says (the
        local Docker engine for docker, this user's Podman for podman)."""
        if record.host:
            return record.host
        return {"docker": LOCAL, "podman": PODMAN}.get(record.backend, self.host)

    def unanswered_state(self, host: str) -> str:
        """A session's state when its host could not be asked: "host unreachable" for a host
        on another machine (its sandboxes and runs go on there), "unknown" otherwise."""
        try:
            remote = self.backend_of(host).remote
        except CairnError:
            remote = False
        return HOST_UNREACHABLE if remote else "unknown"

    def mirror_workspace(self, run: Run, *, follow: bool = True) -> Callable[[], None] | None:
        """Keep the local workspace folder equal to the run's sandbox when that is on another
        machine, so the local recorder writes its revisions (and checkpoints and snapshots stay
        here); returns what ends it, after a last full pass (with `follow=False` nothing runs
        until then: that pass alone). None when there is nothing to mirror: a sandbox on this
        machine, one not running, or another Cairn process mirroring this workspace already."""
        if not run.workspace_id:
            return None
        record = self.store.session_for(run.workspace_id)
        if record is None or record.status != "live":
            return None
        if not self.backend_of(self.host_of(record)).remote:
            return None
        lock = FileLock(lock_path(self.data.locks_root, "mirror", run.workspace_id))
        if not lock.try_acquire():
            return None
        try:
            found = self.look_as_made(record, self.store.get_workspace(run.workspace_id))
        except CairnError:
            found = None
        live = found.live if isinstance(found, Attached) else None
        make = getattr(live, "workspace_mirror", None)  # a remote backend's live session
        if make is None:
            lock.release()
            return None
        mirror = make(on_problem=lambda line: log.info("workspace mirror: %s", line))
        if follow:
            mirror.start()

        def stop() -> None:
            try:
                mirror.stop()
                mirror.sync()  # what the last moments wrote, before the run's checkpoint
            except CairnError as exc:
                log.warning("the last pass of the workspace mirror failed: %s", exc)
            finally:
                lock.release()

        return stop

    def sync_run_files(self, run: Run, *, force: bool = False) -> None:
        """Bring a run's files up to date in the local runs folder, where observation reads
        them: nothing to do for a sandbox on this machine; one on another machine mirrors them
        from there (at most every few moments unless `force`). A sandbox that cannot be reached
        or is not running is left to liveness to judge: nothing is raised here."""
        if not run.workspace_id or not run.exec_id:
            return
        record = self.store.session_for(run.workspace_id)
        if record is None or record.status != "live":
            return
        backend = self.backend_of(self.host_of(record))
        if not backend.remote:
            return
        try:
            ws = self.store.get_workspace(run.workspace_id)
            found = self.look_as_made(record, ws)
            if isinstance(found, Attached):
                found.live.sync_run(run.exec_id, force=force)
        except CairnError as exc:
            log.debug("could not read the files of run %s from its host: %s", run.id, exc)

    def found_sessions(self) -> tuple[dict[str, SessionSummary], dict[str, str]]:
        """This data folder's sandboxes on every host a session runs on (and the default
        one), by container id, and the hosts that could not be asked, with why."""
        hosts = {self.host, *(self.host_of(r) for r in self.store.list_sessions())}
        found: dict[str, SessionSummary] = {}
        problems: dict[str, str] = {}
        for name in sorted(hosts):
            try:
                found.update({s.container_id: s for s in self.backend_of(name).list_sessions()})
            except CairnError as exc:
                problems[name] = str(exc)
        return found, problems

    # -- specs -------------------------------------------------------------------------------

    def runs_dir(self, workspace_id: str) -> Path:
        """Only this workspace's runs are mounted into its sandbox."""
        return self.data.runs_root / workspace_id

    def git_settings_dir(self) -> Path:
        """The folder holding the sandboxes' git config (SANDBOX_GITCONFIG), written when it
        differs; mounted read-only at /cairn/git."""
        folder = self.data.root / "sandbox" / "git"
        path = folder / "config"
        try:
            current = path.read_text() if not path.is_symlink() else None
        except OSError:
            current = None
        if current != SANDBOX_GITCONFIG:
            write_file(folder, "config", SANDBOX_GITCONFIG)
        return folder

    def egress_paths(self, session_id: str) -> egress.EgressPaths:
        return egress.EgressPaths.for_session(self.data.root / "egress", session_id)

    def spec_for(
        self,
        ws: Workspace,
        session_id: str,
        snapshot_id: str | None,
        policy: Policy,
        engine_mounts: list[tuple[Path, str]] | tuple = (),
        endpoints: Sequence[egress.Endpoint] = (),
        *,
        protect_git: bool = True,
    ) -> SandboxSpec:
        """The sandbox the current code makes; `protect_git=False` only describes one made
        before the workspace's .git was protected (to find it as it was made)."""
        extra = [(RESOURCES_SANDBOX, TOOLS_DIR_IN_SANDBOX)]
        # Decisions on approvals: read-only, so an agent can never approve itself.
        extra += [
            (mailbox.ensure_decisions_root(self.data.root, ws.id), mailbox.DECISIONS_IN_SANDBOX)
        ]
        extra += [(Path(h), c) for h, c in policy.mounts]
        extra += [(Path(h), c) for h, c in engine_mounts]
        return SandboxSpec(
            workspace_id=ws.id,
            session_id=session_id,
            snapshot_id=snapshot_id,
            workspace_root=Path(ws.root),
            home_dir=self.data.home_path(session_id),
            runs_dir=self.runs_dir(ws.id),
            extra_mounts=tuple(extra),
            image=self.image,
            network=policy.network,
            egress_socket_dir=(
                self.egress_paths(session_id).sandbox_dir
                if _needs_proxy(policy, endpoints)
                else None
            ),
            limits=policy.limits,
            uid=policy.uid,
            gid=policy.uid,
            git_settings_dir=self.git_settings_dir() if protect_git else None,
            stat_cache=self.data.cache_root / f"{ws.id}.stat",
        )

    def launch_specs(
        self, policy: Policy, endpoints: Sequence[egress.Endpoint] = ()
    ) -> list[LaunchSpec]:
        """The background processes the sandbox needs: the egress forwarder, under `allowlist`
        (its proxy port and loopback forwards) and wherever a model endpoint is served."""
        if not _needs_proxy(policy, endpoints):
            return []
        allowlist = policy.network == NETWORK_ALLOWLIST
        # A local model server is reached through its endpoint (which adds the key), never
        # through a same-port forward that would reach it without one.
        served = {endpoint_of(e.upstream) for e in endpoints}
        forwards = {
            int(entry.rpartition(":")[2]): entry
            for entry in (policy.allow if allowlist else ())
            if _is_loopback(entry.rpartition(":")[0]) and entry not in served
        }
        argv = egress.forwarder_argv(
            f"{TOOLS_DIR_IN_SANDBOX}/egress-forward.py",
            proxy_port=EGRESS_PROXY_PORT if allowlist else None,
            forwards=forwards,
            endpoints=[e.name for e in endpoints],
        )
        port = EGRESS_PROXY_PORT if allowlist else egress.endpoint_port(0)
        probe = f"import socket,sys; s=socket.create_connection(('127.0.0.1', {port}), 2)"
        return [LaunchSpec("egress-forwarder", argv, "/", ["python3", "-c", probe])]

    def exec_environment(self, policy: Policy) -> dict[str, str]:
        """Fixed variables every exec in the sandbox gets (never secrets)."""
        env = {"CAIRN_SANDBOX": "1"}
        if policy.network == NETWORK_ALLOWLIST:
            env.update(egress.proxy_environment(EGRESS_PROXY_PORT))
        return env

    # -- getting a sandbox -------------------------------------------------------------------

    def ensure(
        self,
        ws: Workspace,
        policy: Policy,
        snapshot_id: str | None,
        *,
        extra_mounts: list[tuple[Path, str]] | tuple = (),
        home_seed: Path | None = None,
        endpoints: Sequence[egress.Endpoint] = (),
        host: str | None = None,
    ) -> SandboxOutcome:
        """Reattach to the workspace's sandbox when it is alive and matches the current policy;
        otherwise make the next generation carrying the persisted snapshot id (a new sandbox
        carries `snapshot_id` only when no session state exists yet). A new session's engine
        home starts as a copy of `home_seed` (a fork's parent home) when one is given. The
        sandbox goes on `host` (the task's; without one, where the session already is, else the
        default host): a session on another host moves, its old container removed there when
        that host answers."""
        record = self.store.session_for(ws.id)
        wanted = host or (self.host_of(record) if record is not None else self.host)
        backend = self.backend_of(wanted)
        backend.check()
        if record is None:
            session_id = new_id("session")
            if home_seed is not None and home_seed.is_dir():
                shutil.copytree(home_seed, self.data.home_path(session_id), symlinks=True)
            spec = self.spec_for(ws, session_id, snapshot_id, policy, extra_mounts, endpoints)
            self._start_egress(spec, policy, endpoints)
            state, live = backend.create(spec)
            record = SessionRecord(
                session_id,
                ws.id,
                state.backend,
                state.container_id,
                state.container_name,
                state.image_digest,
                [m.to_dict() for m in state.mounts],
                state.generation,
                state.snapshot_id,
                "live",
                policy.version,
                [],
                created_at=_now(),
                host=wanted,
            )
            outcome = SandboxOutcome(
                record, live, "created", ["no sandbox existed for this workspace"]
            )
        else:
            # The persisted snapshot id stays: a recreate never mints a new one.
            spec = self.spec_for(
                ws, record.id, record.snapshot_id or snapshot_id, policy, extra_mounts, endpoints
            )
            self._start_egress(spec, policy, endpoints)
            state = _state_of(record)
            moved_from = self.host_of(record)
            if moved_from != wanted:
                result: Attached | Gone | Mismatch = Gone(
                    self._leave_host(record, moved_from, wanted)
                )
            else:
                result = backend.attach(state, spec)
            if isinstance(result, Attached):
                outcome = SandboxOutcome(
                    record,
                    result.live,
                    "reattached",
                    [f"sandbox {record.container_name} is alive and matches"],
                )
            else:
                if isinstance(result, Mismatch):
                    reasons = [
                        f"sandbox {record.container_name} no longer matches: "
                        + "; ".join(result.reasons)
                    ]
                    # A known difference (usually a changed policy): the old container goes, the
                    # workspace and home on the host stay.
                    if record.container_id:
                        backend.remove(record.container_id)
                else:
                    assert isinstance(result, Gone)
                    reasons = [f"sandbox {record.container_name} is gone ({result.reason})"]
                new_state, live = backend.create(spec, previous=state)
                record.container_id = new_state.container_id
                record.container_name = new_state.container_name
                record.image_digest = new_state.image_digest
                record.mounts = [m.to_dict() for m in new_state.mounts]
                record.generation = new_state.generation
                record.snapshot_id = new_state.snapshot_id
                record.host = wanted
                outcome = SandboxOutcome(record, live, "recreated", reasons)
        record.status = "live"
        record.policy_version = policy.version
        record.policy = policy.to_dict()
        specs = self.launch_specs(policy, endpoints)
        record.launch_specs = [s.to_dict() for s in specs]
        self.store.put_session(record)
        outcome.rebuilt = self.rebuild(outcome.live, specs, ws.id)
        return outcome

    def _leave_host(self, record: SessionRecord, old: str, new: str) -> str:
        """The words for a session moving from host `old` to `new`: its container there is
        removed when that host answers, and left (listed by reconcile there) when it does not."""
        moving = f"the task moved from host {old} to {new}"
        if not record.container_id:
            return moving
        try:
            self.backend_of(old).remove(record.container_id)
        except CairnError as exc:
            return f"{moving}; its container there was left as it is ({exc})"
        return moving

    def rebuild(self, live: LiveSession, specs: list[LaunchSpec], workspace_id: str) -> list[str]:
        """Start each background process that is not running; returns what was (re)started."""
        started = []
        for spec in specs:
            folder = self.runs_dir(workspace_id) / spec.exec_id
            pid_file = folder / "pid"
            if pid_file.exists() and (folder / "exit_code").exists() is False:
                try:
                    # By run id too: in a recreated sandbox the recorded pid belongs to whatever
                    # process got it in the new pid namespace (often the probe itself).
                    if live.process_alive(int(pid_file.read_text().strip()), run_id=spec.exec_id):
                        continue
                except (ValueError, OSError):
                    pass
            if not spec.rebuildable:
                raise CairnError(
                    f"the background process {spec.name!r} is gone and cannot be "
                    "rebuilt; the run is parked until you restart it"
                )
            live.exec_detached(spec.argv, env=spec.env, cwd=spec.cwd, run_id=spec.exec_id)
            if spec.health:
                self._wait_healthy(live, spec)
            started.append(spec.name)
        return started

    def _wait_healthy(self, live: LiveSession, spec: LaunchSpec, timeout: float = 10.0) -> None:
        import time

        deadline = time.monotonic() + timeout
        while True:
            result = live.exec(spec.health or ["true"], env={}, cwd="/", timeout=5)
            if result.exit_code == 0:
                return
            if time.monotonic() > deadline:
                raise CairnError(
                    f"the background process {spec.name!r} did not become healthy: "
                    f"{(result.stderr or result.stdout).strip()[:200]}"
                )
            time.sleep(0.1)

    def _start_egress(
        self, spec: SandboxSpec, policy: Policy, endpoints: Sequence[egress.Endpoint] = ()
    ) -> None:
        paths = self.egress_paths(spec.session_id)
        if _needs_proxy(policy, endpoints):
            egress.ensure_running(
                paths.socket,
                list(policy.allow) if policy.network == NETWORK_ALLOWLIST else [],
                self.data.root / "egress" / spec.session_id / "egress.log",
                session=spec.session_id,
                endpoints=endpoints,
            )
        elif egress.running_pid(paths.socket):
            egress.stop(paths.socket)

    def attach_as_made(self, record: SessionRecord, ws: Workspace) -> Attached | Gone | Mismatch:
        """Find the sandbox as it was made (under the policy of its making), bringing it up when
        it is stopped or paused; the current policy is applied by `ensure`, not here."""
        backend = self.backend_of(self.host_of(record))
        return backend.attach(_state_of(record), self._spec_as_made(record, ws))

    def look_as_made(self, record: SessionRecord, ws: Workspace) -> Attached | Gone | Mismatch:
        """The sandbox as it is, changing nothing, to look at its processes: Gone carries the
        evidence (absent, stopped); a CairnError means it cannot be told now."""
        backend = self.backend_of(self.host_of(record))
        return backend.look(_state_of(record), self._spec_as_made(record, ws))

    def _spec_as_made(self, record: SessionRecord, ws: Workspace) -> SandboxSpec:
        policy = Policy.from_dict(record.policy)
        standard = {
            TOOLS_DIR_IN_SANDBOX,
            mailbox.DECISIONS_IN_SANDBOX,
            *(c for _, c in policy.mounts),
            *RESERVED_TARGETS,
            CONTAINER_GIT_DIR,
            *PROTECTED_GIT_TARGETS,
        }
        engine_mounts = [
            (Path(m["source"]), m["target"])
            for m in record.mounts
            if m.get("read_only") and m["target"] not in standard
        ]
        # A sandbox made before the workspace's .git was protected is found as it was made; the
        # next `ensure` sees the difference and makes it again, protected.
        protected = any(m["target"] == CONTAINER_GIT_SETTINGS for m in record.mounts)
        return self.spec_for(
            ws, record.id, record.snapshot_id, policy, engine_mounts, protect_git=protected
        )

    def session_stats(self, session_id: str) -> dict[str, Any]:
        """Live figures of one sandbox: cpu_percent, memory_bytes, memory_limit_bytes, pids,
        uptime_s (None where the backend cannot tell). A sandbox that is not there, or not as it
        was made, has none: `running` False and a `note` saying why. Takes about a second (the
        engine samples the CPU twice)."""
        record = self.store.get_session(session_id)  # NotFound when there is none
        if record.status != "live":  # attaching would start it again: figures are not worth that
            return {"running": False, "note": f"the sandbox is {record.status}"}
        ws = self.store.get_workspace(record.workspace_id)
        try:  # looking only: figures are not worth starting or unpausing a sandbox
            attached = self.look_as_made(record, ws)
        except CairnError as exc:
            return {"running": False, "note": str(exc)}
        if isinstance(attached, Attached):
            return attached.live.stats()
        why = attached.reason if isinstance(attached, Gone) else "; ".join(attached.reasons)
        return {"running": False, "note": why}

    def run_dir_in_sandbox(self, exec_id: str) -> str:
        return f"{CONTAINER_RUNS}/{exec_id}"


class Mirroring:
    """The workspace mirror of one followed run (SandboxManager.mirror_workspace): started
    once the run runs in a sandbox on another machine (tried again every few seconds while it
    cannot be), ended with a last full pass by `stop`. A run that ends while no mirror runs
    (its host did not answer at the last try) still gets that last pass."""

    RETRY_S = 3.0

    def __init__(self, sandboxes: Lazy[SandboxManager]):
        self._sandboxes = sandboxes
        self._stop: Callable[[], None] | None = None
        self._tried = float("-inf")
        self._stopped = False
        self._run: Run | None = None

    def ensure(self, run: Run) -> None:
        import time

        self._run = run
        if self._stop is not None or self._stopped or time.monotonic() - self._tried < self.RETRY_S:
            return
        self._tried = time.monotonic()
        self._stop = self._sandboxes.get().mirror_workspace(run)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        stop, self._stop = self._stop, None
        if stop is None and self._run is not None:
            try:
                stop = self._sandboxes.get().mirror_workspace(self._run, follow=False)
            except CairnError as exc:
                log.warning("the last pass of the workspace mirror could not start: %s", exc)
        if stop is not None:
            stop()


def _state_of(record: SessionRecord) -> SessionState:
    return SessionState.from_dict(
        {
            "backend": record.backend,
            "container_id": record.container_id,
            "container_name": record.container_name,
            "image_digest": record.image_digest,
            "mounts": record.mounts,
            "generation": record.generation,
            "snapshot_id": record.snapshot_id,
        }
    )


def _needs_proxy(policy: Policy, endpoints: Sequence[egress.Endpoint]) -> bool:
    """Whether the sandbox needs the host's egress proxy: for its allowlist, or to reach a model
    endpoint whose credential the proxy adds (under `open` too, so no key enters the sandbox)."""
    return policy.network == NETWORK_ALLOWLIST or (
        bool(endpoints) and policy.network != NETWORK_NONE
    )


def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def _now() -> float:
    import time

    return time.time()


def default_backend(data: DataDir, settings: Settings) -> SandboxBackend:
    """Containers on the default sandbox host unless the user chose the unsafe host backend
    explicitly: CAIRN_BACKEND wins, else the setting `defaults.backend`. The host is CAIRN_HOST,
    else `defaults.host`, else the local Docker engine. The backends are imported when chosen:
    the Docker client is slow to import and not every command needs it."""
    choice = os.environ.get("CAIRN_BACKEND") or settings.defaults().get("backend") or "docker"
    if choice == "host":
        from core.sandbox.host import HostBackend

        return HostBackend(data.root, allow_unsafe=True)
    if choice != "docker":
        raise InputError(f"unknown sandbox backend {choice!r} (docker, or host for no isolation)")
    return backend_for_host(settings.host(), data.root)


def backend_for_host(host: SandboxHost, data_root: Path) -> DockerBackend:
    """The sandbox backend of one host for a data folder: Docker's or Podman's API at its
    address (the built-in `local` host as DOCKER_HOST and Docker's own variables say), or a
    Docker engine on another machine through an SSH bridge (volumes instead of bind mounts)."""
    if host.remote:
        from core.sandbox.remote import RemoteDockerBackend

        return RemoteDockerBackend(data_root, bridge_for(host), host_name=host.name)
    if host.engine == PODMAN:
        from core.sandbox.podman import PodmanBackend

        return PodmanBackend(data_root, base_url=host.address)
    from core.sandbox.docker import DockerBackend

    if host.local_docker:
        return DockerBackend(data_root)
    return DockerBackend(data_root, base_url=host.address)


def sandbox_provider(
    ctx: Context,
    settings: Settings,
    *,
    backend: SandboxBackend | None = None,
    image: str | None = None,
) -> Lazy[SandboxManager]:
    """The data folder's sandbox manager, made on first use from the given backend and image,
    else CAIRN_SANDBOX_IMAGE and the settings (`defaults.image`, `defaults.backend`)."""

    def make() -> SandboxManager:
        chosen = image or os.environ.get("CAIRN_SANDBOX_IMAGE") or settings.defaults().get("image")
        if backend is not None:  # given: the only one there is
            return SandboxManager(ctx.data, ctx.store, backend, chosen)
        return SandboxManager(
            ctx.data,
            ctx.store,
            default_backend(ctx.data, settings),
            chosen,
            host=settings.host().name,
            backend_for=lambda name: backend_for_host(settings.host(name), ctx.data.root),
        )

    return Lazy(make)
