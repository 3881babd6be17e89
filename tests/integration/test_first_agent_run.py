"""The first agent run of someone who already uses Claude Code or Codex, as they would do it.

The real CLIs are installed with npm into a temporary global prefix that is put on PATH, the way a
person installs them; Cairn's settings hold nothing but the scripted model server's URL; the key
goes in with `cairnctl engine login`. Then a task with the default network policy runs and makes a
file. The key is added to each model request by Cairn's proxy on the host: the scripted server
sees it, while the sandbox only ever holds a placeholder. Rotating the key applies to the next
request without a sandbox restart. A start that cannot work (no credential, a locked keyring, no
binary, a policy without the endpoint) ends in under two seconds with one line and its fix, and
leaves no container.

Skips, with the reason, without Docker, the sandbox image, npm (or its cache of the CLIs), or an
unlocked Secret Service.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.sandbox import egress
from tests.agents import fake_openai
from tests.agents.fake_anthropic import Bash, FakeAnthropic, Reply
from tests.support import (
    as_json,
    cairnctl,
    cairnctl_argv,
    cairnctl_env,
    locked_agent_version,
    npm_install_global,
)

pytestmark = pytest.mark.docker

AGENTS = Path(__file__).resolve().parents[1] / "agents"
PREFLIGHT_LIMIT_S = 2.0


@pytest.fixture(scope="module")
def npm_prefix(tmp_path_factory) -> Path:
    """Both CLIs installed with `npm install -g` into a prefix of their own (npm's cache, which
    `npm ci --prefix tests/agents` filled, serves the packages)."""
    prefix = tmp_path_factory.mktemp("npm-global")
    npm_install_global(
        prefix,
        [
            f"@anthropic-ai/claude-code@{locked_agent_version('@anthropic-ai/claude-code')}",
            f"@openai/codex@{locked_agent_version('@openai/codex')}",
        ],
    )
    return prefix


@pytest.fixture
def user_env(npm_prefix: Path) -> dict[str, str]:
    """cairnctl's environment with the npm prefix's bin folder first on PATH."""
    env = cairnctl_env()
    env["PATH"] = f"{npm_prefix / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    env["NPM_CONFIG_PREFIX"] = str(npm_prefix)
    return env


@pytest.fixture
def data(tmp_path: Path, docker_client, sandbox_image, secret_service) -> Iterator[Path]:
    folder = tmp_path / "data"
    folder.mkdir()
    yield folder
    label = f"cairn.data_dir={folder.resolve()}"
    for c in docker_client.containers.list(all=True, filters={"label": label}):
        c.remove(force=True)
    for sock in (folder / "egress").glob("*/sandbox/egress.sock"):
        egress.stop(sock)
    from core.approvals import stop_judge

    stop_judge(folder.resolve())


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("# a project\n")
    return folder


def _settings(data: Path, engine: str, base_url: str) -> None:
    (data / "settings.json").write_text(json.dumps({"engines": {engine: {"base_url": base_url}}}))


def _login(data: Path, engine: str, value: str, env: dict[str, str], kind: str | None = None):
    args = ["engine", "login", engine] + (["--kind", kind] if kind else [])
    return cairnctl(data, *args, input=value, env=env)


def _logout(data: Path, engine: str, env: dict[str, str]) -> None:
    cairnctl(data, "engine", "logout", engine, check=False, env=env)


def _containers(docker_client, data: Path) -> list:
    label = f"cairn.data_dir={data.resolve()}"
    return docker_client.containers.list(all=True, filters={"label": label})


def _exec_in_sandbox(docker_client, data: Path, script: str) -> str:
    (container,) = _containers(docker_client, data)
    result = container.exec_run(["sh", "-c", script], user="1000")
    return result.output.decode(errors="replace")


def _nowhere(key: str, data: Path, container, docker_client) -> list[str]:
    """Where the key was found: the data folder's files (store, vault, runs, homes, egress),
    the sandbox's filesystem and environment, and Docker's record of the container."""
    found = []
    needle = key.encode()
    for path in data.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    found.append(str(path))
            except OSError:
                pass
    inspect = json.dumps(docker_client.api.inspect_container(container.id))
    if key in inspect:
        found.append("docker inspect")
    grep = container.exec_run(
        ["sh", "-c", f"grep -rIl -- '{key}' / --exclude-dir=proc --exclude-dir=sys 2>/dev/null"],
        user="0",
    )
    found += [f"sandbox:{p}" for p in grep.output.decode().split() if p]
    env = container.exec_run(["sh", "-c", "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"])
    if key in env.output.decode(errors="replace"):
        found.append("sandbox process environment")
    return found


@pytest.mark.parametrize(
    "kind,key,header",
    [
        ("api-key", "sk-ant-api03-" + "k" * 24, "x-api-key"),
        ("oauth-token", "sk-ant-oat01-" + "t" * 24, "authorization"),
    ],
)
def test_claude_code_found_on_path_signed_in_once_runs_with_a_key_the_sandbox_never_holds(
    data, src, user_env, docker_client, kind, key, header
):
    key = f"{key}-{uuid.uuid4().hex[:8]}"
    script = [Bash("echo made > made.txt; env > env.txt"), Reply("Made made.txt.")]
    with FakeAnthropic(script) as server:
        _settings(data, "claude-code", server.url)
        try:
            _login(data, "claude-code", key, user_env)
            made = as_json(
                cairnctl(data, "new", str(src), "--engine", "claude-code", "--json", env=user_env)
            )
            ws = Path(made["workspace_root"])
            done = as_json(
                cairnctl(data, "continue", made["task_id"], "-m", "make a file", "--json",
                         env=user_env, timeout=240)
            )  # fmt: skip
            assert done["state"] == "succeeded", done
            assert (ws / "made.txt").read_text() == "made\n"
            expected = key if header == "x-api-key" else f"Bearer {key}"
            mains = server.main_requests()
            assert mains and all(r.headers.get(header) == expected for r in mains)
            # What the agent's own commands see: the placeholder, never the key.
            env_inside = (ws / "env.txt").read_text()
            variable = "ANTHROPIC_API_KEY" if kind == "api-key" else "CLAUDE_CODE_OAUTH_TOKEN"
            # (Claude Code passes its API key variable on to its commands, its token not.)
            lines = [v for v in env_inside.splitlines() if v.startswith(variable + "=")]
            assert all("placeholder" in v for v in lines) and key not in env_inside
            if kind == "api-key":
                assert lines, env_inside
            (container,) = _containers(docker_client, data)
            assert _nowhere(key, data, container, docker_client) == []
            uses = [
                u for log in data.glob("egress/*/egress.log") for u in egress.credential_uses(log)
            ]
            assert len(uses) >= len(mains) and all(key not in json.dumps(u) for u in uses)
        finally:
            _logout(data, "claude-code", user_env)


def test_a_rotated_key_applies_to_the_next_turn_without_a_restart_and_other_hosts_get_none(
    data, src, user_env, docker_client
):
    first_key = f"sk-ant-api03-first-{uuid.uuid4().hex}"
    second_key = f"sk-ant-api03-second-{uuid.uuid4().hex}"
    with FakeAnthropic([Reply("Turn one.")]) as server, FakeAnthropic([]) as other:
        _settings(data, "claude-code", server.url)
        try:
            _login(data, "claude-code", first_key, user_env)
            made = as_json(
                cairnctl(data, "new", str(src), "--engine", "claude-code", "--network",
                         "allowlist", "--allow", f"127.0.0.1:{other.port}", "--json",
                         env=user_env)
            )  # fmt: skip
            one = as_json(
                cairnctl(data, "continue", made["task_id"], "-m", "one", "--json", env=user_env,
                         timeout=240)
            )  # fmt: skip
            assert one["state"] == "succeeded", one
            (before,) = _containers(docker_client, data)
            _login(data, "claude-code", second_key, user_env)
            server.add(Reply("Turn two."))
            seen = len(server.main_requests())
            two = as_json(
                cairnctl(data, "continue", one["task_id"], "-m", "two", "--json", env=user_env,
                         timeout=240)
            )  # fmt: skip
            assert two["state"] == "succeeded", two
            assert any("reattached" in p for p in two["resume_report"]["path"]), two
            (after,) = _containers(docker_client, data)
            assert after.id == before.id  # the same sandbox: no restart
            assert all(r.headers.get("x-api-key") == second_key
                       for r in server.main_requests()[seen:])  # fmt: skip
            # Another allowed host, reached from inside: no credential is added on the way.
            _exec_in_sandbox(
                docker_client,
                data,
                f"python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:"
                f"{other.port}/probe', timeout=5).read()\" || true",
            )
            assert other.requests, "the other allowed host was not reached"
            for r in other.requests:
                assert first_key not in json.dumps(r.headers)
                assert second_key not in json.dumps(r.headers)
        finally:
            _logout(data, "claude-code", user_env)


def test_codex_found_on_path_signed_in_with_an_api_key_makes_a_file(
    data, src, user_env, docker_client
):
    key = f"sk-proj-{uuid.uuid4().hex}"
    script = [
        fake_openai.run("echo codex > codex.txt; env > env.txt"),
        fake_openai.say("Made codex.txt."),
    ]
    with fake_openai.FakeOpenAI(script) as server:
        _settings(data, "codex", server.url)
        try:
            _login(data, "codex", key, user_env)
            made = as_json(
                cairnctl(data, "new", str(src), "--engine", "codex", "--json", env=user_env)
            )
            done = as_json(
                cairnctl(data, "continue", made["task_id"], "-m", "make a file", "--json",
                         env=user_env, timeout=240)
            )  # fmt: skip
            assert done["state"] == "succeeded", done
            ws = Path(made["workspace_root"])
            assert (ws / "codex.txt").read_text() == "codex\n"
            env_inside = (ws / "env.txt").read_text()
            assert "OPENAI_API_KEY=sk-cairn-placeholder" in env_inside and key not in env_inside
            assert server.requests
            assert all(r.headers.get("authorization") == f"Bearer {key}" for r in server.requests)
            (container,) = _containers(docker_client, data)
            assert _nowhere(key, data, container, docker_client) == []
        finally:
            _logout(data, "codex", user_env)


def _refused_fast(data: Path, task: str, env: dict[str, str]) -> str:
    started = time.monotonic()
    proc = cairnctl(data, "continue", task, "-m", "go", check=False, env=env)
    took = time.monotonic() - started
    assert proc.returncode != 0, proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("cairnctl: "), proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    # The whole command, interpreter start included, stays within the preflight's budget
    # (plus the interpreter's own start, which no check can save).
    assert took < PREFLIGHT_LIMIT_S + 1.5, f"took {took:.2f} s: {lines[0]}"
    return lines[0]


LOCK_AND_RUN = """
import subprocess, sys, time
from contextlib import closing
import secretstorage

with closing(secretstorage.dbus_init()) as bus:
    collection = secretstorage.get_default_collection(bus)
    collection.lock()
    assert collection.is_locked()
started = time.monotonic()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(proc.stdout)
for line in proc.stderr.splitlines():  # marked: the keyring's prompter writes here too
    print("CAIRNCTL " + line, file=sys.stderr)
print(f"TOOK {time.monotonic() - started:.3f}", file=sys.stderr)
sys.exit(proc.returncode)
"""


def _refused_fast_locked(data: Path, task: str, env: dict[str, str], tmp_path: Path) -> str:
    for tool in ("dbus-run-session", "gnome-keyring-daemon"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install gnome-keyring dbus-x11)")
    keyring_data, runtime = tmp_path / "locked-data", tmp_path / "locked-run"
    keyring_data.mkdir()
    runtime.mkdir(mode=0o700)
    private = {k: v for k, v in env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    private |= {"XDG_DATA_HOME": str(keyring_data), "XDG_RUNTIME_DIR": str(runtime)}
    shell = (
        'echo "" | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1; exec "$@"'
    )
    argv = [sys.executable, "-c", LOCK_AND_RUN, *cairnctl_argv(data, "continue", task, "-m", "go")]
    proc = subprocess.run(
        ["dbus-run-session", "--", "sh", "-c", shell, "sh", *argv],
        env=private, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout
    took = float(proc.stderr.rsplit("TOOK ", 1)[1].split()[0])
    lines = [
        line.removeprefix("CAIRNCTL ") for line in proc.stderr.splitlines()
        if line.startswith("CAIRNCTL ") and line.strip() != "CAIRNCTL"
    ]  # fmt: skip
    assert len(lines) == 1 and lines[0].startswith("cairnctl: "), proc.stderr
    assert took < PREFLIGHT_LIMIT_S + 1.5, f"took {took:.2f} s: {lines[0]}"
    return lines[0]


def test_a_start_that_cannot_work_ends_in_seconds_with_the_fix_and_leaves_nothing(
    data, src, user_env, docker_client, tmp_path
):
    with FakeAnthropic([]) as server:
        _settings(data, "claude-code", server.url)
        made = as_json(
            cairnctl(data, "new", str(src), "--engine", "claude-code", "--json", env=user_env)
        )
        task = made["task_id"]
        # No credential.
        line = _refused_fast(data, task, user_env)
        assert "not signed in" in line and "cairnctl engine login claude-code" in line
        # A missing binary: nothing on PATH, and a setting that names nothing.
        bare = {k: v for k, v in user_env.items() if k != "NPM_CONFIG_PREFIX"}
        bare |= {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "empty-home")}
        _login(data, "claude-code", "sk-ant-api03-" + "x" * 30, user_env)
        try:
            line = _refused_fast(data, task, bare)
            assert "claude" in line.lower() and ("install" in line or "binary" in line), line
            # A policy that cannot reach the endpoint.
            cairnctl(data, "policy", task, "--network", "none", env=user_env)
            line = _refused_fast(data, task, user_env)
            assert "cannot reach its model" in line and "allowlist" in line
            cairnctl(data, "policy", task, "--network", "allowlist", env=user_env)
            # A locked keyring: its own D-Bus session whose login collection is locked again
            # after its first unlock (unlocking needs a prompt, and there is no display).
            line = _refused_fast_locked(data, task, user_env, tmp_path)
            assert "keyring is locked" in line and "unlock" in line, line
        finally:
            _logout(data, "claude-code", user_env)
        assert _containers(docker_client, data) == []
        tasks = as_json(cairnctl(data, "tasks", "--json", env=user_env))["tasks"]
        assert [t["task_id"] for t in tasks] == [task]  # no child task was made
        assert not any(t.get("run_state") for t in tasks), tasks
