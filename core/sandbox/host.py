"""The host backend: the sandbox interface over plain host processes. UNSAFE: it isolates
nothing.

Owns running commands as Cairn's own user with the workspace used in place and HOME at the engine
home; leaves choosing it (never silently: it needs allow_unsafe=True) and warning the user to the
caller.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from core.sandbox.base import (
    CONTAINER_HOME,
    CONTAINER_WORKSPACE,
    DETACHED_WRAPPER,
    NETWORK_OPEN,
    Attached,
    AttachResult,
    Capabilities,
    DetachedProcess,
    ExecResult,
    ExecStream,
    ExecTimeout,
    Gone,
    LiveSession,
    Mismatch,
    OutputChunk,
    SandboxBackend,
    SandboxError,
    SandboxSpec,
    SessionState,
    SessionSummary,
    UnsafeBackendRefused,
    UnsupportedNetwork,
    check_env,
    check_run_id,
    next_generation,
    prepare_host_dirs,
    reset_run_dir,
    wait_for_pid,
)

SHELL = "/bin/sh"
DETACHED_START_TIMEOUT_S = 10
# What a host process inherits from Cairn's own environment: enough to find programs and speak the
# user's language, and nothing that might carry a credential.
INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "TERM")


class HostBackend(SandboxBackend):
    """Runs commands directly on the host. No isolation of files, network, processes or
    resources."""

    name = "host"
    unsafe = True
    UNSAFE_LABEL = "UNSAFE: no isolation (commands run as you, on your files, with your network)"
    capabilities = Capabilities(
        reattach=True,  # a detached run is found again while its process group lives
        recreate_from_snapshot=True,
        per_exec_env=True,
        network_modes=frozenset({NETWORK_OPEN}),
        isolated=False,
    )

    def __init__(
        self, data_dir: str | os.PathLike[str] | None = None, *, allow_unsafe: bool = False
    ):
        if not allow_unsafe:
            raise UnsafeBackendRefused(
                "the host backend runs agents without any isolation",
                hint=(
                    "use the Docker backend, "
                    "or choose the host backend explicitly (allow_unsafe=True)"
                ),
            )
        self.data_dir = str(Path(data_dir).expanduser().resolve()) if data_dir is not None else None

    def check(self) -> None:
        if not os.access(SHELL, os.X_OK):
            raise SandboxError(f"{SHELL} is missing; the host backend needs a POSIX shell")

    def create(
        self, spec: SandboxSpec, *, previous: SessionState | None = None
    ) -> tuple[SessionState, LiveSession]:
        self._check_network(spec)
        generation = next_generation(spec, previous)
        prepare_host_dirs(spec, hand_over=False)
        state = SessionState(
            backend=self.name,
            container_id=None,
            container_name=f"host-{spec.session_id}",
            image_digest=None,
            mounts=spec.mounts(),
            generation=generation,
            snapshot_id=spec.snapshot_id,
        )
        return state, HostLiveSession(state, spec)

    def _check_network(self, spec: SandboxSpec) -> None:
        if spec.network not in self.capabilities.network_modes:
            raise UnsupportedNetwork(
                "the host backend cannot restrict the network "
                f"(the spec asks for {spec.network!r})",
                hint="use the Docker backend, or allow the open network for this workspace",
            )

    def attach(self, state: SessionState, spec: SandboxSpec) -> AttachResult:
        if state.backend != self.name:
            return Mismatch([f"the session state belongs to the {state.backend} backend"])
        if not spec.workspace_root.is_dir():
            return Gone(f"workspace folder {spec.workspace_root} no longer exists")
        reasons = []
        if spec.snapshot_id != state.snapshot_id:
            reasons.append(
                f"snapshot differs: the state carries {state.snapshot_id}, "
                f"the spec {spec.snapshot_id}"
            )
        differing = set(state.mounts) ^ set(spec.mounts())
        if differing:
            reasons.append(
                "folders differ between the state and the spec: "
                + ", ".join(sorted(f"{m.target}={m.source}" for m in differing))
            )
        if spec.network not in self.capabilities.network_modes:
            reasons.append(f"network differs: the host is open, the spec asks for {spec.network!r}")
        if reasons:
            return Mismatch(reasons)
        prepare_host_dirs(spec, hand_over=False)
        return Attached(HostLiveSession(state, spec))

    def list_sessions(self) -> list[SessionSummary]:
        return []  # host sessions leave nothing behind to find but their run folders

    def remove(self, container_id_or_name: str) -> bool:
        return False


class HostExecStream(ExecStream):
    def __init__(self, proc: subprocess.Popen[bytes]):
        if proc.stdout is None or proc.stderr is None:
            raise ValueError("an exec stream needs the process's stdout and stderr piped")
        self.proc = proc
        self._stdout, self._stderr = proc.stdout, proc.stderr

    def __iter__(self) -> Iterator[OutputChunk]:
        sel = selectors.DefaultSelector()
        names = {self._stdout.fileno(): "stdout", self._stderr.fileno(): "stderr"}
        for fd in names:
            sel.register(fd, selectors.EVENT_READ)
        try:
            while sel.get_map():
                for key, _ in sel.select():
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fd)
                        continue
                    yield OutputChunk(names[key.fd], data)
        finally:
            sel.close()
            self._stdout.close()
            self._stderr.close()
        self.exit_code = self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            _kill_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class HostLiveSession(LiveSession):
    """Host processes of one session; only the processes this object started are reaped by it."""

    def __init__(self, state: SessionState, spec: SandboxSpec):
        super().__init__(state, spec)
        self._started = time.monotonic()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._path_map = sorted(
            ((m.target, m.source) for m in state.mounts), key=lambda p: -len(p[0])
        )

    def visible_path(self, sandbox_path: str) -> str:
        return self.host_path(sandbox_path)

    def host_path(self, sandbox_path: str) -> str:
        """The host path for a path as the sandbox would name it (/workspace/...,
        /cairn/runs/...)."""
        for target, source in self._path_map:
            if sandbox_path == target or sandbox_path.startswith(target + "/"):
                return source + sandbox_path[len(target) :]
        return sandbox_path

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        out = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        out["HOME"] = self.host_path(CONTAINER_HOME)
        out.update(check_env(env))
        return out

    def _argv(self, argv: Sequence[str]) -> list[str]:
        if not argv:
            raise ValueError("an exec needs a command")
        return [self.host_path(str(a)) if str(a).startswith("/") else str(a) for a in argv]

    def _cwd(self, cwd: str) -> str:
        path = self.host_path(cwd)
        if not os.path.isdir(path):
            raise SandboxError(f"working folder {cwd} ({path}) does not exist")
        return path

    def _reap(self) -> None:
        for pid, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[pid]

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
        reset_run_dir(run_dir, os.getuid(), os.getgid())
        proc = subprocess.Popen(
            [SHELL, "-c", DETACHED_WRAPPER, "cairn-run", str(run_dir), *self._argv(argv)],
            cwd=self._cwd(cwd),
            env=self._env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self._children[proc.pid] = proc
        pid = wait_for_pid(run_dir, DETACHED_START_TIMEOUT_S)
        return DetachedProcess(run_id=run_id, pid=pid, run_dir=run_dir)

    def _popen_piped(
        self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self._argv(argv),
            cwd=self._cwd(cwd),
            env=self._env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )

    def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = CONTAINER_WORKSPACE,
        timeout: float = 60.0,
    ) -> ExecResult:
        proc = self._popen_piped(argv, env, cwd)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise ExecTimeout(
                argv,
                timeout,
                stdout=out.decode(errors="replace"),
                stderr=err.decode(errors="replace"),
            ) from None
        return ExecResult(
            proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        )

    def exec_stream(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = CONTAINER_WORKSPACE,
    ) -> ExecStream:
        return HostExecStream(self._popen_piped(argv, env, cwd))

    def process_alive(self, pid: int, *, run_id: str | None = None) -> bool:
        self._reap()
        if pid <= 0:
            return False
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state == "Z":
            return False
        if run_id is None:
            return True
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return str(self.spec.run_dir(run_id)).encode() in cmdline

    def signal_process(self, pid: int, signal_name: str = "TERM") -> bool:
        signum = getattr(signal, f"SIG{signal_name.upper()}", None)
        if pid <= 0 or signum is None:
            raise ValueError(f"bad pid or signal: {pid} {signal_name}")
        sent = _kill_group(pid, signum)
        self._reap()
        return sent

    def stats(self) -> dict[str, Any]:
        self._reap()
        return {
            "running": True,
            "uptime_s": time.monotonic() - self._started,
            "cpu_percent": None,
            "memory_bytes": None,
            "memory_limit_bytes": None,
            "pids": len(self._children),
        }

    def stop(self) -> None:
        """Stop the detached processes this object started (others are not known to it)."""
        for pid in list(self._children):
            _kill_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while self._children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.02)
        for pid in list(self._children):
            _kill_group(pid, signal.SIGKILL)
        self._reap()

    def destroy(self) -> None:
        self.stop()


def _kill_group(pid: int, signum: int) -> bool:
    try:
        os.killpg(pid, signum)
        return True
    except ProcessLookupError:
        pass
    except PermissionError:
        return False
    try:
        os.kill(pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False
