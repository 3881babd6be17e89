"""The built app (dist/cairn, or $CAIRN_BUNDLE): it says its version, runs Cairn's helper processes
through its module switch (the approvals judge, the detached egress proxy), carries its resources
and keyring backend, and opens the Cairn window on a real X server, then quits cleanly on SIGTERM.

scripts/setup.sh test builds the bundle with packaging/build.sh and sets CAIRN_BUNDLE."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from core import __version__
from core.sandbox import egress

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
WINDOW_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def bundle() -> Path:
    folder = Path(os.environ.get("CAIRN_BUNDLE") or REPO_ROOT / "dist" / "cairn")
    if not (folder / "cairn").is_file():
        pytest.skip(
            f"no bundle at {folder}: build it with packaging/build.sh "
            "(scripts/setup.sh test does, and sets CAIRN_BUNDLE)"
        )
    return folder


def bundle_env(**extra: str) -> dict[str, str]:
    """The environment of a user's session: nothing that points into the checkout or the venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "QT_QPA_PLATFORM", "CAIRN_DATA_DIR")
    }
    env.update(extra)
    return env


def run(argv: list[str], **extra_env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, cwd="/", env=bundle_env(**extra_env)
    )


def test_the_bundle_says_its_version_and_carries_its_resources(bundle):
    assert run([str(bundle / "cairn"), "--version"]).stdout.strip() == f"cairn {__version__}"
    assert (bundle / "_internal" / "VERSION").read_text().strip() == __version__
    resources = bundle / "_internal" / "resources"
    assert (resources / "policy" / "risk-rules.json").is_file()
    assert (resources / "icons" / "cairn.svg").is_file()
    gate = resources / "sandbox" / "approval-gate.py"
    assert gate.is_file() and os.access(gate, os.X_OK)
    assert not list(resources.rglob("__pycache__"))
    ctl = run([str(bundle / "cairnctl"), "--help"])
    assert ctl.returncode == 0 and "usage: cairnctl" in ctl.stdout


def test_the_bundled_approvals_judge_serves_a_data_folder_and_stops_when_idle(bundle, tmp_path):
    for executable in ("cairn", "cairnctl"):
        data = tmp_path / executable
        result = run(
            [
                str(bundle / executable),
                "--cairn-module",
                "core.approvals",
                "serve",
                "--data-dir",
                str(data),
                "--idle-exit",
                "0.5",
            ]
        )
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        assert "serves" in result.stderr and "stops" in result.stderr


def test_the_bundled_egress_proxy_starts_detached_and_stops(bundle, tmp_path):
    paths = egress.EgressPaths.for_session(tmp_path / "egress", "bundle-test")
    paths.make_dirs()
    egress.write_policy(paths.policy_file, ["example.org:443"], "bundle-test")
    output = tmp_path / "egress.out"
    with open(output, "wb") as out:  # a file, not a pipe: the detached server keeps it open
        result = subprocess.run(
            [
                str(bundle / "cairn"),
                "--cairn-module",
                "core.sandbox.egress",
                "--socket",
                str(paths.socket),
                "--policy",
                str(paths.policy_file),
                "--pid-file",
                str(paths.pid_file),
                "--log",
                str(tmp_path / "connections.jsonl"),
                "--detach",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            timeout=60,
            cwd="/",
            env=bundle_env(),
        )
    try:
        assert result.returncode == 0, output.read_text()
        pid = egress.running_pid(paths.socket)
        assert pid is not None
        assert Path(f"/proc/{pid}/exe").resolve() == (bundle / "cairn").resolve()
    finally:
        egress.stop(paths.socket)
    assert egress.running_pid(paths.socket) is None


@pytest.mark.keyring
def test_the_bundled_command_line_keeps_a_secret_in_the_secret_service(
    bundle, tmp_path, secret_service
):
    """keyring finds its backends through entry points: the bundle must carry SecretService."""
    ctl = [str(bundle / "cairnctl"), "--data-dir", str(tmp_path / "data"), "secret"]
    name = f"CAIRN_BUNDLE_TEST_{uuid.uuid4().hex[:8].upper()}"
    stored = subprocess.run(
        [*ctl, "set", name],
        input="value\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env=bundle_env(),
    )
    try:
        assert stored.returncode == 0, stored.stderr
        assert name in run([*ctl, "list"]).stdout
    finally:
        removed = run([*ctl, "rm", name])
    assert removed.returncode == 0, removed.stderr


def wait_for_window(display: str, proc: subprocess.Popen) -> str:
    """The id of the visible top-level window named exactly Cairn, once it is mapped."""
    deadline = time.monotonic() + WINDOW_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"cairn exited with {proc.returncode} before showing a window")
        found = subprocess.run(
            ["xdotool", "search", "--onlyvisible", "--name", "^Cairn$"],
            capture_output=True,
            text=True,
            timeout=30,
            env=bundle_env(DISPLAY=display),
        )
        if found.returncode == 0 and found.stdout.split():
            return found.stdout.split()[0]
        time.sleep(0.25)
    raise AssertionError(f"no window named Cairn within {WINDOW_TIMEOUT_S}s")


@pytest.mark.skipif(not shutil.which("xdotool"), reason="xdotool is not installed")
@pytest.mark.skipif(not shutil.which("import"), reason="imagemagick's import is not installed")
def test_the_bundle_opens_the_cairn_window_and_quits_on_sigterm(bundle, tmp_path, x_display):
    artifacts = Path(os.environ.get("CAIRN_TEST_ARTIFACTS") or REPO_ROOT / "test-artifacts")
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "bundle-first-window.png"
    shot.unlink(missing_ok=True)
    env = bundle_env(
        DISPLAY=x_display,
        QT_QPA_PLATFORM="xcb",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "share"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    proc = subprocess.Popen(
        [str(bundle / "cairn"), "--data-dir", str(tmp_path / "data")],
        cwd="/",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        window = wait_for_window(x_display, proc)
        time.sleep(1.0)  # let it paint before the screenshot
        subprocess.run(["import", "-window", "root", str(shot)], check=True, timeout=30, env=env)
        if shutil.which("xprop"):
            wm_class = subprocess.run(
                ["xprop", "-id", window, "WM_CLASS"],
                capture_output=True,
                text=True,
                timeout=30,
                env=env,
            ).stdout
            assert '"Cairn"' in wm_class  # what the desktop file's StartupWMClass names
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert shot.is_file() and shot.stat().st_size > 1000
    assert (tmp_path / "data" / "cairn.db").is_file()
