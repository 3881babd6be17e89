"""Helpers the integration tests share: running `cairnctl` as a user would, and small repos."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from core.sandbox.mirror import TAR_READ_ARGV, entries_from_tar

REPO = Path(__file__).resolve().parents[1]


def cairnctl_argv(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "core.cli", "--data-dir", str(data_dir), *args]


def cairnctl_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def cairnctl(
    data_dir: Path,
    *args: str,
    check: bool = True,
    user: int | None = None,
    timeout: float = 120,
    input: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    cmd = cairnctl_argv(data_dir, *args)
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=env or cairnctl_env(),
        cwd=REPO,
        timeout=timeout,
        input=input,
    )
    if check and proc.returncode != 0:
        # A command run with --json says why it failed on stdout (a run's state and output).
        raise AssertionError(
            f"cairnctl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}"
            f"\nstdout: {proc.stdout[-4000:]}"
        )
    return proc


def as_json(proc: subprocess.CompletedProcess) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"expected a JSON object, got nothing (stderr: {proc.stderr!r})"
    return json.loads(lines[-1])


def git(cwd: Path, *args: str) -> str:
    """git in `cwd`, any folder's owner trusted (where Cairn runs as root, a new task's
    workspace is the sandbox user's)."""
    return subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def git_alone(cwd: Path, *args: str) -> str:
    """git as a repository's own tests need it: no user or system config, no optional locks, a
    fixed author and committer, and any folder's owner trusted (where Cairn runs as root, a
    workspace is the sandbox user's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_OPTIONAL_LOCKS="0",
        GIT_AUTHOR_NAME="T",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="T",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    proc = subprocess.run(
        ["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, capture_output=True, check=True
    )
    return proc.stdout.decode()


def write_file(path: Path, data: str | bytes, mode: int | None = None) -> Path:
    """Write `data` at `path` (folders made), with `mode` when given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)
    return path


def folder_tree(root: Path, exclude: frozenset[str] = frozenset()) -> dict[str, tuple]:
    """Everything under `root` (names in `exclude` left out): folders, files with their bytes
    and exec bit, links with their targets; for comparing two folders whole."""
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in exclude]
        for name in dirs + files:
            if name in exclude:
                continue
            full = Path(folder, name)
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                out[rel] = ("link", os.readlink(full))
            elif full.is_dir():
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", full.read_bytes(), bool(full.stat().st_mode & 0o100))
    return out


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def kill_run_process(pid: int) -> None:
    """A host-backend run's process and what it started (its own process group when it has
    one), killed as a crash would."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_for(predicate, timeout: float = 60.0, what: str = "condition", interval: float = 0.1):
    """The predicate's first truthy value, polled until `timeout`; a clear failure otherwise."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def engine_session_of(data_dir: Path, task_id: str) -> str | None:
    """The engine session id recorded for the task's latest run."""
    from core.store import Store

    store = Store(data_dir / "cairn.db")
    try:
        return store.runs_of([task_id])[-1].engine_session_id
    finally:
        store.close()


def release_data_dir(data_dir: Path, docker_client) -> None:
    """Stop what a test's data folder left running: its approvals judge, its containers and its
    egress proxies."""
    from core import approvals
    from core.sandbox import egress

    data = data_dir.resolve()
    approvals.stop_judge(data)
    for c in docker_client.containers.list(all=True, filters={"label": f"cairn.data_dir={data}"}):
        c.remove(force=True)
    for sock in (data_dir / "egress").glob("*/sandbox/egress.sock"):
        egress.stop(sock)


AGENTS_DIR = REPO / "tests" / "agents"


def locked_agent_version(package: str) -> str:
    """The version tests/agents/package-lock.json holds for an agent CLI package (or alias)."""
    lock = json.loads((AGENTS_DIR / "package-lock.json").read_text())
    return lock["packages"][f"node_modules/{package}"]["version"]


def npm_install_global(prefix: Path, packages: list[str]) -> None:
    """`npm install -g` into `prefix`, the way a person installs an agent CLI (npm's cache, filled
    by `npm ci --prefix tests/agents`, serves the files); a skip that says why when it cannot."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed (scripts/setup.sh deps installs it)")
    proc = subprocess.run(
        [npm, "install", "-g", "--prefix", str(prefix), "--prefer-offline", "--no-audit",
         "--no-fund", *packages],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"npm could not install {', '.join(packages)}: {proc.stderr.strip()[-400:]}")
    # npm leaves out an optional platform package it cannot fetch (global installs read full
    # package documents, which `npm ci` does not cache) and still succeeds.
    if not any(prefix.glob("lib/node_modules/**/*-linux-*/package.json")):
        pytest.skip(
            f"npm installed {', '.join(packages)} without their platform packages (offline?)"
        )


@contextlib.contextmanager
def deciding_every_request(data_dir: Path, decision: str = "approve"):
    """While inside, every approval request of the data folder is answered at once ("approve" or
    "deny"), as a person clicking each card would; yields the approvals it decided."""
    from core.app import Cairn
    from core.errors import CairnError

    decided: list = []
    done = threading.Event()

    def answer() -> None:
        with Cairn(data_dir) as app:
            while not done.is_set():
                for a in app.approvals.pending():
                    with contextlib.suppress(CairnError):
                        if decision == "approve":
                            decided.append(app.approvals.approve(a.id))
                        else:
                            decided.append(app.approvals.deny(a.id, reason="denied by the test"))
                done.wait(0.1)

    worker = threading.Thread(target=answer, daemon=True)
    worker.start()
    try:
        yield decided
    finally:
        done.set()
        worker.join(timeout=30)


# --- the engine under test: the local Docker engine, or rootless Podman (CAIRN_HOST=podman) ---


def on_podman(docker_client) -> bool:
    """Whether the engine the tests talk to is Podman (its Docker-compatible API)."""
    components = docker_client.version().get("Components") or []
    return any("podman" in str(c.get("Name", "")).lower() for c in components)


def no_limits_reason(docker_client) -> str | None:
    """Why the engine applies no resource limits and cannot pause (rootless Podman on cgroups
    v1), or None when it does."""
    rootless_podman = on_podman(docker_client) and os.geteuid() != 0
    if rootless_podman and str(docker_client.info().get("CgroupVersion")) == "1":
        return "rootless Podman on cgroups v1 applies no resource limits and cannot pause"
    return None


def stored_container_files(docker_client, container_id: str) -> list[Path]:
    """The files in which the engine keeps a container's configuration on disk: Docker's
    containers/<id> folder; Podman's state database and its overlay-containers/<id> folder."""
    root = Path(docker_client.info()["DockerRootDir"])
    if not on_podman(docker_client):
        folders = [root / "containers" / container_id]
    else:
        folders = [root / "libpod" / "bolt_state.db", root / "overlay-containers" / container_id]
    found = []
    for folder in folders:
        candidates = [folder] if folder.is_file() else folder.rglob("*")
        for p in candidates:
            with contextlib.suppress(OSError):  # parts owned by the user namespace's ids
                if p.is_file() and not p.is_symlink() and os.access(p, os.R_OK):
                    found.append(p)
    return found


class ProcessLines:
    """A program's stdout as lines; close() ends it (from any thread)."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

    def __iter__(self) -> Iterator[str]:
        for raw in self.proc.stdout:
            yield raw.decode("utf-8", "surrogateescape")
        self.proc.wait()

    def close(self) -> None:
        self.proc.stdin.close()  # as an exec's connection closing does


class LocalSandboxFiles:
    """The workspace mirror's protocol (core.sandbox.mirror.SandboxFiles) through local
    processes: the helper runs on this machine against `remote`, files are read with tar."""

    def __init__(self, remote: Path) -> None:
        self.remote = remote
        self.streams: list[ProcessLines] = []
        self.read_calls: list[list[str]] = []

    def lines(self, argv: Sequence[str]) -> ProcessLines:
        stream = ProcessLines(argv)
        self.streams.append(stream)
        return stream

    def read_files(self, paths: Sequence[str]):
        self.read_calls.append(list(paths))
        proc = subprocess.Popen(
            list(TAR_READ_ARGV),
            cwd=self.remote,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        proc.stdin.write(b"".join(os.fsencode(p) + b"\0" for p in paths))
        proc.stdin.close()
        try:
            yield from entries_from_tar(proc.stdout)
        finally:
            proc.stdout.close()
            proc.wait()

    @property
    def pulled(self) -> int:
        return sum(len(c) for c in self.read_calls)


def hashed_paths(monkeypatch) -> list[str]:
    """The paths the vault reads and hashes from now on (ObjectStore.write_blob_from_path)."""
    from core.vault.objects import ObjectStore

    seen: list[str] = []
    original = ObjectStore.write_blob_from_path

    def counting(self, path, st):
        seen.append(os.fspath(path))
        return original(self, path, st)

    monkeypatch.setattr(ObjectStore, "write_blob_from_path", counting)
    return seen
