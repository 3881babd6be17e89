"""Shared fixtures: a throwaway data folder, an X display, Docker and an unlocked Secret Service.

Fixtures that need a service skip the test with the reason when the service is not there, so a
machine without Docker or a keyring runs everything else; `scripts/setup.sh test` provides both.
"""

from __future__ import annotations

import os

# Before anything imports Qt: widget tests run without a display. End-to-end tests that want a
# real X server get one from CAIRN_TEST_DISPLAY (set by scripts/setup.sh) instead.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import re
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# Benchmarks run on request only (`scripts/setup.sh perf`, or name tests/perf explicitly).
collect_ignore = ["perf"]

DOCKER_PROBE_TIMEOUT_S = 5
KEYRING_PROBE_TIMEOUT_S = 10


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh Cairn data folder path (not created: the code under test creates it)."""
    return tmp_path / "data"


@pytest.fixture
def artifacts_dir(request: pytest.FixtureRequest) -> Path:
    """This test's folder for screenshots and logs under test-artifacts/ ($CAIRN_TEST_ARTIFACTS)."""
    root = Path(os.environ.get("CAIRN_TEST_ARTIFACTS", REPO_ROOT / "test-artifacts"))
    path = root / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with a commit and an uncommitted file, as a person's checkout is."""
    path = tmp_path / "login-service"
    path.mkdir()
    (path / "README.md").write_text("# login service\n")
    (path / "app.py").write_text("def login(user):\n    return user == 'admin'\n")
    git = ["git", "-c", "user.name=T", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], cwd=path, check=True)
    (path / "notes.txt").write_text("todo: logout\n")
    return path


@pytest.fixture(scope="session")
def x_display() -> str:
    """The X display for end-to-end GUI tests (CAIRN_TEST_DISPLAY, an Xvfb), or a skip."""
    display = os.environ.get("CAIRN_TEST_DISPLAY")
    if not display:
        pytest.skip("CAIRN_TEST_DISPLAY is not set (scripts/setup.sh test starts Xvfb and sets it)")
    return display


@pytest.fixture(scope="session")
def docker_client():
    """A docker-py client for a reachable engine, or a skip that says why there is none."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a declared dependency
        pytest.skip(f"Docker tests need the docker package: {exc}")

    try:
        probe = docker.from_env(timeout=DOCKER_PROBE_TIMEOUT_S)
        try:
            probe.ping()
        finally:
            probe.close()
    except Exception as exc:  # any failure here means "no usable engine", whatever its type
        pytest.skip(
            f"Docker engine unreachable ({type(exc).__name__}: {exc}); "
            "start it (scripts/setup.sh test does) or check DOCKER_HOST and socket permissions"
        )

    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture(scope="session")
def sandbox_host():
    """The sandbox host the tests make sandboxes on: the built-in host CAIRN_HOST names
    (`podman`: this user's rootless Podman; the docker_client fixture then needs DOCKER_HOST at
    the same socket, as scripts/podman-suite.sh sets it), else the local Docker engine."""
    from core.sandbox.hosts import LOCAL, builtin_hosts

    hosts = builtin_hosts()
    name = os.environ.get("CAIRN_HOST") or LOCAL
    if name not in hosts:
        pytest.fail(f"CAIRN_HOST={name} is not a built-in host ({', '.join(sorted(hosts))})")
    return hosts[name]


@pytest.fixture(scope="session")
def sandbox_image(docker_client) -> str:
    """The default sandbox image (CAIRN_SANDBOX_IMAGE to name another), or a skip."""
    image = os.environ.get("CAIRN_SANDBOX_IMAGE", "cairn-sandbox:1")
    try:
        docker_client.images.get(image)
    except Exception:
        pytest.skip(f"the sandbox image {image} is not built (tests/images/build.sh builds it)")
    return image


def _is_secret_service(backend: object) -> bool:
    from keyring.backends import SecretService

    if isinstance(backend, SecretService.Keyring):
        return True
    # keyring may wrap the viable backends in a chainer; SecretService must be the one in charge.
    inner = getattr(backend, "backends", None)
    return bool(inner) and isinstance(inner[0], SecretService.Keyring)


def _keyring_round_trip(backend) -> None:
    service = "cairn-test-probe"
    username = f"probe-{uuid.uuid4().hex}"
    secret = uuid.uuid4().hex
    backend.set_password(service, username, secret)
    try:
        got = backend.get_password(service, username)
        if got != secret:
            raise RuntimeError("the value read back differs from the one stored")
    finally:
        backend.delete_password(service, username)
    if backend.get_password(service, username) is not None:
        raise RuntimeError("the probe secret is still there after delete")


@pytest.fixture(scope="session")
def secret_service():
    """The keyring backend when it is an unlocked Secret Service; otherwise skip with the reason."""
    try:
        import keyring
    except ImportError as exc:  # pragma: no cover - keyring is a declared dependency
        pytest.skip(f"keyring tests need the keyring package: {exc}")

    backend = keyring.get_keyring()
    if not _is_secret_service(backend):
        pytest.skip(
            f"keyring backend is {type(backend).__module__}.{type(backend).__name__}, not "
            "SecretService; run inside a D-Bus session with an unlocked gnome-keyring "
            "(scripts/setup.sh test does)"
        )

    # A locked collection can wait on a prompt that never comes: probe in a thread with a limit.
    outcome: dict[str, BaseException | None] = {}

    def probe() -> None:
        try:
            _keyring_round_trip(backend)
            outcome["error"] = None
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=probe, name="keyring-probe", daemon=True)
    worker.start()
    worker.join(KEYRING_PROBE_TIMEOUT_S)
    if worker.is_alive():
        pytest.skip(
            f"Secret Service did not answer a set/get/delete within {KEYRING_PROBE_TIMEOUT_S} s"
        )
    error = outcome.get("error")
    if error is not None:
        pytest.skip(f"Secret Service round trip failed ({type(error).__name__}: {error})")
    return backend
