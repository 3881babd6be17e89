"""First-run checks: each distinct Docker, keyring, git and disk situation gets its own message
and one-line fix, nothing raises, and a hung Docker cannot hold the run up."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import namedtuple
from pathlib import Path

import pytest

from core import health, signin
from core.engines.discovery import Found
from core.health import (
    DISK_ERROR_BYTES,
    DISK_WARNING_BYTES,
    GIB,
    Check,
    check_disk,
    check_docker,
    check_engine,
    check_git,
    check_keyring,
    run_checks,
    summary,
)
from core.signin import (
    ACTION_CHOOSE_BINARY,
    ACTION_SIGN_IN,
    EngineStatus,
    Problem,
    SignIn,
    kinds_of,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
Usage = namedtuple("Usage", "total used free")


def nothing_on_path(_name: str) -> None:
    return None


def docker_on_path(name: str) -> str:
    return f"/usr/bin/{name}"


def assert_one_line(check: Check) -> None:
    assert check.state in health.STATES
    assert check.detail and "\n" not in check.detail
    assert check.fix is None or "\n" not in check.fix
    if check.command:
        assert check.fix and check.command in check.fix


@pytest.fixture
def short_dir():
    """A folder with a short path (a unix socket path must stay under 108 bytes), open to all."""
    path = Path(tempfile.mkdtemp(prefix="cairn-health-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def refused_socket(folder: Path) -> Path:
    """A unix socket file nobody listens on any more: connecting is refused."""
    path = folder / "docker.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    assert stat.S_ISSOCK(path.stat().st_mode)
    return path


# -- docker --------------------------------------------------------------------------------------


def test_docker_missing_says_install_it():
    check = check_docker(which=nothing_on_path, docker_host="unix:///nonexistent/docker.sock")
    assert check.id == "docker" and check.state == "error"
    assert "not installed" in check.detail and "/nonexistent/docker.sock" in check.detail
    assert check.command == "sudo apt install docker.io"
    assert_one_line(check)


def test_docker_installed_without_a_socket_is_a_stopped_daemon():
    check = check_docker(which=docker_on_path, docker_host="unix:///nonexistent/docker.sock")
    assert check.state == "error"
    assert "not running" in check.detail and "no socket" in check.detail
    assert check.command == "sudo systemctl start docker"
    assert_one_line(check)


def test_a_socket_nobody_accepts_on_is_a_stopped_daemon(short_dir):
    path = refused_socket(short_dir)
    # The socket file alone says Docker is installed, whatever PATH holds.
    check = check_docker(which=nothing_on_path, docker_host=f"unix://{path}")
    assert check.state == "error"
    assert "not running" in check.detail and "refuses connections" in check.detail
    assert str(path) in check.detail
    assert check.fix == "start it: sudo systemctl start docker"
    assert_one_line(check)


def test_a_refused_tcp_daemon_is_a_stopped_daemon():
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    check = check_docker(which=docker_on_path, docker_host=f"tcp://127.0.0.1:{port}", timeout=2)
    assert check.state == "error" and "not running" in check.detail
    assert check.command == "sudo systemctl start docker"


def test_socket_permission_denied_through_the_hook(tmp_path):
    sock_file = tmp_path / "docker.sock"
    sock_file.touch()

    def denied(path: str, timeout: float) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", path)

    check = check_docker(
        which=docker_on_path, docker_host=f"unix://{sock_file}", probe_socket=denied
    )
    assert check.state == "error"
    assert "permission denied" in check.detail and str(sock_file) in check.detail
    assert check.command == "sudo usermod -aG docker $USER"
    assert "docker group" in check.fix and "log out and in" in check.fix
    assert_one_line(check)


def test_permission_denied_inside_docker_py_is_recognised_too():
    def api(base_url: str, timeout: float) -> str:
        try:
            raise PermissionError(errno.EACCES, "Permission denied")
        except PermissionError as exc:
            raise RuntimeError("Error while fetching server API version") from exc

    check = check_docker(
        which=docker_on_path, docker_host="tcp://127.0.0.1:2375", docker_version=api
    )
    assert check.state == "error" and check.command == "sudo usermod -aG docker $USER"


CHECK_AS_NOBODY = textwrap.dedent(
    """
    import json, sys
    from core.health import check_docker
    check = check_docker(which=lambda name: None, docker_host="unix://" + sys.argv[1], timeout=2)
    print(json.dumps({"state": check.state, "detail": check.detail, "command": check.command}))
    """
)


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"),
    reason="needs root and setpriv to check as another user",
)
def test_socket_permission_denied_for_real(short_dir):
    path = short_dir / "docker.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:
        path.chmod(0o000)
        result = subprocess.run(
            [
                "setpriv",
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                sys.executable,
                "-c",
                CHECK_AS_NOBODY,
                str(path),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={
                **os.environ,
                "HOME": str(short_dir),
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONPATH": str(REPO_ROOT),
            },
        )
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["state"] == "error"
    assert "permission denied" in found["detail"]
    assert found["command"] == "sudo usermod -aG docker $USER"


def test_a_hung_daemon_is_reported_within_the_timeout(short_dir):
    path = short_dir / "docker.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)  # connections queue up and are never answered
    try:
        started = time.monotonic()
        check = check_docker(which=docker_on_path, docker_host=f"unix://{path}", timeout=0.5)
        elapsed = time.monotonic() - started
    finally:
        server.close()
    assert elapsed < 3
    assert check.state == "error" and "did not answer" in check.detail
    assert check.command == "sudo systemctl restart docker"
    assert_one_line(check)


@pytest.mark.docker
def test_a_running_docker_is_ok(docker_client):
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    version = docker_client.version()["Version"]
    check = check_docker(docker_host=host)
    assert check.state == "ok", check.detail
    assert check.detail == f"Docker {version} is running at {host}"
    assert check.fix is None and check.command is None


# -- keyring -------------------------------------------------------------------------------------


class _FakeBackend:
    name = "fake"
    priority = 1

    def __init__(self, error: BaseException | None = None):
        self.error = error
        self.values: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        if self.error is not None:
            raise self.error
        return self.values.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.values[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.values.pop((service, username), None)


def backend_named(module: str, cls_name: str, name: str, **kwargs) -> object:
    """A stand-in whose dotted class name is the real backend's (that is what Cairn judges)."""
    cls = type(cls_name, (_FakeBackend,), {"__module__": module, "name": name})
    return cls(**kwargs)


def test_a_real_keyring_is_named():
    backend = backend_named("keyring.backends.SecretService", "Keyring", "SecretService Keyring")
    check = check_keyring(backend)
    assert check.state == "ok" and check.id == "keyring"
    assert check.detail == "secrets are kept in the OS keyring (SecretService Keyring)"
    assert check.fix is None


@pytest.mark.keyring
def test_the_real_secret_service_is_ok(secret_service):
    check = check_keyring(secret_service)
    assert check.state == "ok" and "OS keyring" in check.detail


def test_a_plaintext_keyring_is_a_warning():
    backend = backend_named("keyrings.alt.file", "PlaintextKeyring", "Plaintext Keyring")
    check = check_keyring(backend)
    assert check.state == "warning"
    assert "unencrypted" in check.detail and "Plaintext Keyring" in check.detail
    assert "gnome-keyring" in check.fix and "keyrings.alt" in check.fix
    assert check.command == "sudo apt install gnome-keyring"
    assert_one_line(check)


def test_an_unknown_keyring_is_a_warning():
    backend = backend_named("somewhere.else", "Keyring", "Homemade")
    check = check_keyring(backend)
    assert check.state == "warning" and "not the OS keyring" in check.detail
    assert "PYTHON_KEYRING_BACKEND" in check.fix


def test_no_keyring_is_an_error_with_the_fix():
    from keyring.backends import fail

    check = check_keyring(fail.Keyring())
    assert check.state == "error"
    assert check.detail.startswith("no usable keyring: ")
    assert "secrets cannot be stored" in check.detail
    assert "gnome-keyring" in check.fix and "Secret Service" in check.fix
    assert check.command == "sudo apt install gnome-keyring"
    assert_one_line(check)


def test_a_locked_keyring_is_an_error_that_says_unlock():
    from keyring.errors import KeyringLocked

    backend = backend_named(
        "keyring.backends.SecretService",
        "Keyring",
        "SecretService Keyring",
        error=KeyringLocked("Failed to unlock the collection!"),
    )
    check = check_keyring(backend)
    assert check.state == "error" and "locked" in check.detail
    assert check.fix.startswith("unlock your desktop keyring")
    assert_one_line(check)


# -- git -----------------------------------------------------------------------------------------


def fake_git(tmp_path: Path, output: str) -> str:
    script = tmp_path / "git"
    script.write_text(f"#!/bin/sh\necho '{output}'\n")
    script.chmod(0o755)
    return str(script)


def test_git_found_and_recent_enough():
    check = check_git(shutil.which("git") or "git")
    assert check.state == "ok"
    assert check.detail.startswith("git 2.") and "needs 2.29 or newer" in check.detail


def test_an_old_git_is_an_error(tmp_path):
    check = check_git(fake_git(tmp_path, "git version 2.1.0"))
    assert check.state == "error"
    assert check.detail == "git 2.1.0 is too old: Cairn needs git 2.29 or newer"
    assert check.command == "sudo apt install git" and "2.29 or newer" in check.fix
    assert_one_line(check)


def test_git_just_at_the_minimum_is_ok(tmp_path):
    check = check_git(fake_git(tmp_path, "git version 2.29.0.windows.1"))
    assert check.state == "ok" and check.detail.startswith("git 2.29.0")


def test_missing_git_is_an_error(tmp_path):
    check = check_git(str(tmp_path / "no-git-here"))
    assert check.state == "error" and "git is not installed" in check.detail
    assert check.command == "sudo apt install git"
    assert_one_line(check)


def test_a_git_that_says_nothing_useful_is_an_error(tmp_path):
    check = check_git(fake_git(tmp_path, "hello"))
    assert check.state == "error" and "did not report a version (hello)" in check.detail


# -- disk ----------------------------------------------------------------------------------------


def test_disk_is_measured_at_the_nearest_existing_parent(tmp_path):
    seen = []

    def usage(path: str) -> Usage:
        seen.append(path)
        return Usage(100 * GIB, 10 * GIB, 90 * GIB)

    check = check_disk(tmp_path / "not" / "yet" / "data", disk_usage=usage)
    assert seen == [str(tmp_path)]
    assert check.state == "ok"
    assert check.detail == f"90.0 GiB free on the disk of the data folder ({tmp_path})"


@pytest.mark.parametrize(
    "free, state, words",
    [
        (DISK_ERROR_BYTES - 1, "error", "at least 1 GiB"),
        (DISK_ERROR_BYTES // 2, "error", "only 0.5 GiB free"),
        (DISK_WARNING_BYTES - 1, "warning", "less than 5 GiB"),
        (DISK_WARNING_BYTES, "ok", "5.0 GiB free"),
    ],
)
def test_low_disk(tmp_path, free, state, words):
    check = check_disk(tmp_path, disk_usage=lambda _path: Usage(10 * GIB, 0, free))
    assert check.state == state and words in check.detail
    if state != "ok":
        assert "--data-dir" in check.fix
    assert_one_line(check)


def test_the_real_disk(tmp_path):
    check = check_disk(tmp_path / "data")
    assert check.state in ("ok", "warning", "error") and "GiB free" in check.detail


# -- the whole run -------------------------------------------------------------------------------


def healthy(**overrides):
    options = dict(
        which=docker_on_path,
        docker_host="tcp://127.0.0.1:2375",
        docker_version=lambda url, timeout: "24.0.7",
        keyring_backend=backend_named(
            "keyring.backends.SecretService", "Keyring", "SecretService Keyring"
        ),
        git=shutil.which("git") or "git",
        disk_usage=lambda _path: Usage(100 * GIB, 0, 50 * GIB),
        engines=(),
    )
    options.update(overrides)
    return options


def test_run_checks_in_order_and_summary(tmp_path):
    checks = run_checks(tmp_path, **healthy())
    assert [c.id for c in checks] == ["docker", "keyring", "git", "disk"]
    assert [c.state for c in checks] == ["ok"] * 4
    assert checks[0].detail == "Docker 24.0.7 is running at tcp://127.0.0.1:2375"
    result = summary(checks)
    assert result.sandboxes and result.may_continue
    assert result.headline == "Everything Cairn needs is in place."


def test_without_docker_the_user_may_still_continue(tmp_path):
    checks = run_checks(
        tmp_path, **healthy(which=nothing_on_path, docker_host="unix:///nonexistent.sock")
    )
    result = summary(checks)
    assert not result.sandboxes and result.may_continue
    assert result.errors == 1 and "host backend" in result.headline


def test_an_unexpected_exception_becomes_an_error_check(tmp_path):
    def broken_usage(_path: str):
        raise RuntimeError("statvfs went away")

    def broken_which(_name: str):
        raise ValueError("PATH is odd")

    checks = run_checks(tmp_path, **healthy(disk_usage=broken_usage, which=broken_which))
    by_id = {c.id: c for c in checks}
    assert by_id["disk"].state == "error"
    assert by_id["disk"].detail == "the check failed: RuntimeError: statvfs went away"
    assert by_id["docker"].detail == "the check failed: ValueError: PATH is odd"
    assert by_id["git"].state == "ok"


def test_a_probe_that_hangs_cannot_hold_the_run_up(tmp_path):
    def hangs(url: str, timeout: float) -> str:
        time.sleep(5)
        return "never"

    started = time.monotonic()
    checks = run_checks(tmp_path, **healthy(docker_version=hangs), deadline=0.5)
    assert time.monotonic() - started < 2
    docker = checks[0]
    assert docker.state == "error" and "did not finish within 0.5 s" in docker.detail
    assert docker.fix == "restart the Docker daemon: sudo systemctl restart docker"
    assert docker.command == "sudo systemctl restart docker"
    assert [c.state for c in checks[1:]] == ["ok", "ok", "ok"]


def test_the_defaults_finish_in_a_few_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    started = time.monotonic()
    checks = run_checks(tmp_path / "data")
    assert time.monotonic() - started < health.DEADLINE_S + 1
    assert [c.id for c in checks] == [
        "docker",
        "keyring",
        "git",
        "disk",
        "engine-claude-code",
        "engine-codex",
    ]
    assert checks[0].state == "error"


def test_the_facade_runs_them_on_its_data_folder(data_dir, monkeypatch):
    from core.app import Cairn

    seen = []

    def run_checks(root, **kw):
        seen.append((root, kw["engine_status"].__self__))
        return ["checked"]

    monkeypatch.setattr(health, "run_checks", run_checks)
    with Cairn(data_dir) as cairn:
        assert cairn.health_checks() == ["checked"]
    # ... with the facade's own keyring and settings behind the engine rows.
    assert seen == [(data_dir.resolve(), cairn)]


# -- agent engines -------------------------------------------------------------------------------

CLAUDE = Path("/home/me/.npm-global/bin/claude")
OAUTH_KIND = kinds_of("claude-code")[0]


def engine_status(engine: str, *issues: Problem, found: Found | None = None) -> EngineStatus:
    found = found or Found(
        engine, CLAUDE, CLAUDE.with_name("claude.exe"), "2.1.197", "npm global", None
    )
    return EngineStatus(
        engine,
        found,
        None if issues else "oauth-token",
        tuple(issues),
        None if issues else SignIn(OAUTH_KIND, OAUTH_KIND.secret, "keyring"),
        "https://api.anthropic.com",
        "api.anthropic.com:443",
        "allowlist",
        True,
    )


def test_a_ready_engine_names_its_path_version_and_sign_in():
    check = check_engine("claude-code", lambda name: engine_status(name))
    assert check.id == "engine-claude-code" and check.title == "Claude Code engine"
    assert check.state == "ok" and check.engine == "claude-code"
    assert check.detail == (
        f"ready: {CLAUDE} 2.1.197, signed in with Claude subscription (long-lived token)"
    )
    assert (
        check.facts[0]
        == f"Found {CLAUDE} (version 2.1.197, from npm global); runs {CLAUDE.with_name('claude.exe')}"
    )
    assert not check.problems and check.actions() == []


def test_an_engine_problem_is_a_warning_with_each_fix_and_its_actions():
    not_found = Problem("no claude found: install it", None, "npm i -g x", ACTION_CHOOSE_BINARY)
    signed_out = Problem(
        "not signed in",
        "sign in: cairnctl engine login claude-code",
        "cairnctl engine login claude-code",
        ACTION_SIGN_IN,
    )
    missing = Found("claude-code", None, None, None, "", "no claude found: install it")
    check = check_engine(
        "claude-code", lambda name: engine_status(name, not_found, signed_out, found=missing)
    )
    assert_one_line(check)
    assert check.state == "warning" and check.detail == "no claude found: install it"
    assert check.problems == (not_found, signed_out)
    assert check.actions() == [ACTION_CHOOSE_BINARY, ACTION_SIGN_IN]
    assert check.facts[0] == "Not found" and len(check.facts) == 2
    result = summary([*run_checks_ok(), check])
    assert result.warnings == 1 and "agent engine needs a step" in result.headline


def run_checks_ok() -> list[Check]:
    return [Check(i, i, "ok", "fine") for i in ("docker", "keyring", "git", "disk")]


def test_the_engine_checks_run_beside_the_others_within_the_deadline(tmp_path):
    def slow(name: str) -> EngineStatus:
        if name == "codex":
            time.sleep(5)
        return engine_status(name)

    started = time.monotonic()
    checks = run_checks(
        tmp_path, **healthy(engines=("claude-code", "codex"), engine_status=slow), deadline=0.5
    )
    assert time.monotonic() - started < 2
    by_id = {c.id: c for c in checks}
    assert list(by_id)[-2:] == ["engine-claude-code", "engine-codex"]
    assert by_id["engine-claude-code"].state == "ok"
    late = by_id["engine-codex"]
    assert late.state == "error" and late.engine == "codex"
    assert late.detail == "the codex engine check did not finish within 0.5 s"
    assert "unlock your desktop keyring" in (late.fix or "")


def test_a_broken_engine_status_is_an_error_check(tmp_path):
    def broken(name: str) -> EngineStatus:
        raise RuntimeError("probe exploded")

    checks = run_checks(tmp_path, **healthy(engines=("codex",), engine_status=broken))
    assert checks[-1].id == "engine-codex" and checks[-1].state == "error"
    assert checks[-1].detail == "the check failed: RuntimeError: probe exploded"


def test_by_default_the_engines_are_checked_on_the_data_folders_settings(tmp_path, monkeypatch):
    from core.settings import Settings

    Settings(tmp_path).set("defaults.network", "none")
    monkeypatch.setattr(
        signin,
        "find_engine",
        lambda name, s, **_: Found(name, CLAUDE, CLAUDE, "2.1.197", "PATH", None),
    )
    from keyring.backends import fail

    checks = run_checks(tmp_path, **healthy(engines=None, keyring_backend=fail.Keyring()))
    engine_checks = [c for c in checks if c.engine]
    assert [c.engine for c in engine_checks] == ["claude-code", "codex"]
    for check in engine_checks:
        whats = [p.what for p in check.problems]
        assert any(w.startswith("no usable keyring") for w in whats), whats
        assert any("blocked by defaults.network=none" in w for w in whats), whats
