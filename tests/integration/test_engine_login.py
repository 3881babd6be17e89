"""`cairnctl engine login|logout|status` against a real Secret Service: the token is read from
stdin (a hidden prompt on a terminal), is kept in the keyring under its usual name and shows up in
no output, no file of the data folder and no process's arguments; status says the engine is signed
in and with what; logout removes it; a locked keyring is one line with the fix.

Each test runs its own D-Bus session with its own gnome-keyring (files in a temporary folder), so
the usual names (CLAUDE_CODE_OAUTH_TOKEN, OPENAI_API_KEY) of a developer's keyring are never
touched.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO, cairnctl, cairnctl_argv, one_error_line

TIMEOUT_S = 60

LOCK_SCRIPT = textwrap.dedent("""
    from contextlib import closing
    import secretstorage

    with closing(secretstorage.dbus_init()) as bus:
        collection = secretstorage.get_default_collection(bus)
        collection.lock()
        assert collection.is_locked()
""")


@pytest.fixture
def keyring_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a private D-Bus session with an unlocked gnome-keyring (the empty
    password); the session, and the keyring with it, end when the test does."""
    for tool in ("dbus-run-session", "gnome-keyring-daemon"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install gnome-keyring dbus-x11)")
    runtime = tmp_path / "keyring-run"
    runtime.mkdir(mode=0o700)
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("DISPLAY", "WAYLAND_DISPLAY", "PYTHON_KEYRING_BACKEND", "DBUS_SESSION_BUS_ADDRESS")
    }
    env.update(
        XDG_DATA_HOME=str(tmp_path / "keyring-data"),
        XDG_RUNTIME_DIR=str(runtime),
        PYTHONPATH=str(REPO),
    )
    session = subprocess.Popen(
        [
            "dbus-run-session",
            "--",
            "sh",
            "-c",
            'echo "" | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1; '
            'echo "$DBUS_SESSION_BUS_ADDRESS"; exec cat',
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        address = session.stdout.readline().strip() if session.stdout else ""
        if not address:
            pytest.skip("dbus-run-session started no D-Bus session")
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        yield env
    finally:
        if session.stdin:
            session.stdin.close()  # `cat` ends, and the session and its keyring with it
        try:
            session.wait(10)
        except subprocess.TimeoutExpired:
            session.kill()
            session.wait()


def token() -> str:
    return f"sk-ant-oat01-canary{uuid.uuid4().hex}{uuid.uuid4().hex}"


def status_of(data: Path, env: dict[str, str], engine: str) -> dict:
    proc = cairnctl(data, "engine", "status", engine, "--json", env=env)
    (found,) = json.loads(proc.stdout)["engines"]
    return found


def files_holding(root: Path, value: str) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and value.encode() in path.read_bytes():
            hits.append(path)
    return hits


def processes_showing(value: str) -> list[str]:
    args = subprocess.run(
        ["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in args.splitlines() if value in line]


def test_login_status_logout_with_the_value_on_stdin(tmp_path, keyring_env):
    data = tmp_path / "data"
    value = token()
    proc = subprocess.Popen(
        cairnctl_argv(data, "engine", "login", "claude-code"),
        cwd=REPO,
        env=keyring_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(f"{value}\n")
    proc.stdin.flush()
    time.sleep(1.0)  # cairnctl holds the value now, waiting for the end of stdin
    assert proc.poll() is None
    assert processes_showing(value) == []
    proc.stdin.close()
    proc.stdin = None  # closed: communicate() only reads what is left
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    assert out.strip() == (
        "claude-code signed in with Claude subscription (long-lived token), "
        "kept in the OS keyring as CLAUDE_CODE_OAUTH_TOKEN"
    )
    assert value not in out + err

    found = status_of(data, keyring_env, "claude-code")
    assert found["signed_in"] == "oauth-token"
    assert (found["secret"], found["secret_source"]) == ("CLAUDE_CODE_OAUTH_TOKEN", "keyring")
    assert found["endpoint"] == "https://api.anthropic.com"
    assert found["reachable"] is True and found["network"] == "allowlist"
    assert not any("not signed in" in p["what"] for p in found["problems"])

    text = cairnctl(data, "engine", "status", env=keyring_env).stdout
    assert "claude-code:" in text and "codex:" in text
    assert "signed in: Claude subscription (long-lived token) [oauth-token]" in text
    assert value not in text
    assert files_holding(data, value) == []

    # the value reached the keyring itself, under its usual name
    read = subprocess.run(
        [
            sys.executable,
            "-c",
            "from core.credentials import SecretStore; "
            "print(SecretStore().get('CLAUDE_CODE_OAUTH_TOKEN') == open(0).read().strip())",
        ],
        cwd=REPO,
        env=keyring_env,
        input=value,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert read.stdout.strip() == "True", read.stderr

    out = cairnctl(data, "engine", "logout", "claude-code", env=keyring_env).stdout
    assert out.strip() == "claude-code signed out: CLAUDE_CODE_OAUTH_TOKEN removed from the keyring"
    found = status_of(data, keyring_env, "claude-code")
    assert found["signed_in"] is None
    (problem,) = [p for p in found["problems"] if p["action"] == "sign-in"]
    assert problem["command"] == "cairnctl engine login claude-code"
    gone = cairnctl(data, "engine", "logout", "claude-code", env=keyring_env, check=False)
    assert "is not signed in" in one_error_line(gone)


def test_a_value_of_the_wrong_kind_is_refused_without_showing_it(tmp_path, keyring_env):
    data = tmp_path / "data"
    key = f"sk-ant-api03-canary{uuid.uuid4().hex}"
    proc = cairnctl(
        data, "engine", "login", "codex", env=keyring_env, input=key + "\n", check=False
    )
    line = one_error_line(proc)
    assert "looks like an Anthropic API key (sk-ant-api…) for the claude-code engine" in line
    assert key not in proc.stdout + proc.stderr
    assert status_of(data, keyring_env, "codex")["signed_in"] is None
    empty = cairnctl(data, "engine", "login", "codex", env=keyring_env, input="\n", check=False)
    assert "no value to sign the codex engine in with" in one_error_line(empty)


def test_a_terminal_gets_a_hidden_prompt(tmp_path, keyring_env):
    data = tmp_path / "data"
    value = f"sk-proj-canary{uuid.uuid4().hex}"
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal
        os.chdir(REPO)
        os.execve(sys.executable, cairnctl_argv(data, "engine", "login", "codex"), keyring_env)
    transcript = b""

    def read_until(predicate, deadline: float) -> None:
        nonlocal transcript
        while not predicate() and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # the child closed the terminal
                    return
                if not chunk:
                    return
                transcript += chunk

    deadline = time.monotonic() + TIMEOUT_S
    read_until(lambda: b"(hidden): " in transcript, deadline)
    assert b"OpenAI API key for codex (hidden): " in transcript, transcript
    assert b"platform.openai.com" in transcript  # where to get one
    os.write(fd, f"{value}\n".encode())
    read_until(lambda: b"kept in the OS keyring" in transcript, deadline)
    _, code = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(code) == 0, transcript
    assert value.encode() not in transcript  # never echoed
    assert b"codex signed in with OpenAI API key" in transcript
    assert status_of(data, keyring_env, "codex")["signed_in"] == "api-key"


def test_a_locked_keyring_is_one_line_with_the_fix(tmp_path, keyring_env):
    data = tmp_path / "data"
    lock = subprocess.run(
        [sys.executable, "-c", LOCK_SCRIPT],
        cwd=REPO,
        env=keyring_env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert lock.returncode == 0, lock.stderr
    value = token()
    proc = cairnctl(
        data, "engine", "login", "claude-code", env=keyring_env, input=value, check=False
    )
    line = one_error_line(proc)
    assert line.startswith("cairnctl: the keyring is locked")
    assert "unlock your desktop keyring (gnome-keyring / KWallet)" in line
    assert value not in proc.stdout + proc.stderr

    found = status_of(data, keyring_env, "claude-code")
    (problem,) = [p for p in found["problems"] if "keyring" in p["what"]]
    assert problem["what"].startswith("the keyring is locked")
    assert (
        problem["fix"] == "unlock your desktop keyring (gnome-keyring / KWallet), then check again"
    )
