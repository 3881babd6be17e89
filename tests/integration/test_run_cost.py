"""What real agent runs used, recorded: a task and its Continue child run the installed CLI against
the scripted model server. Claude Code's runs record their tokens and Claude Code's own cost for
their turn, and `cairnctl cost` sums the lineage to exactly its runs (not Claude Code's session
total, which the resumed session carries on from the first run); Codex's runs record their own
part of the thread's running totals, priced from the settings' price table.

Skips, with the reason, without Docker, the sandbox image, npm (or its cache of the CLI), or an
unlocked Secret Service.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.engines.base import json_object
from core.runs.states import output_of
from core.store import Store
from tests.agents import fake_openai
from tests.agents.fake_anthropic import Bash, FakeAnthropic, Reply
from tests.integration.claude_support import clean_up
from tests.support import (
    as_json,
    cairnctl,
    cairnctl_env,
    locked_agent_version,
    npm_install_global,
)

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def npm_prefix(tmp_path_factory) -> Path:
    """The CLI installed with `npm install -g` into a prefix of its own (from npm's cache)."""
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
    env = cairnctl_env()
    env["PATH"] = f"{npm_prefix / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    env["NPM_CONFIG_PREFIX"] = str(npm_prefix)
    return env


@pytest.fixture
def data(tmp_path: Path, docker_client, sandbox_image, secret_service) -> Iterator[Path]:
    folder = tmp_path / "data"
    folder.mkdir()
    yield folder
    clean_up(folder, docker_client)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("# a project\n")
    return folder


def settings_for(data: Path, base_url: str, engine: str = "claude-code") -> None:
    (data / "settings.json").write_text(json.dumps({"engines": {engine: {"base_url": base_url}}}))


def login(data: Path, key: str, env: dict[str, str], engine: str = "claude-code") -> None:
    cairnctl(data, "engine", "login", engine, input=key, env=env)


@contextmanager
def approving(data: Path, env: dict[str, str]) -> Iterator[None]:
    """A person who lets every command the runs ask about go ahead (what is judged is not this
    test's subject)."""
    done = threading.Event()

    def approve() -> None:
        while not done.wait(1.0):
            listed = cairnctl(data, "approvals", "--json", env=env, check=False)
            if listed.returncode != 0:
                continue
            for request in json.loads(listed.stdout).get("approvals", []):
                cairnctl(data, "approve", request["id"], env=env, check=False)

    thread = threading.Thread(target=approve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=30)


def logout(data: Path, env: dict[str, str], engine: str = "claude-code") -> None:
    cairnctl(data, "engine", "logout", engine, check=False, env=env)


def test_a_claude_code_lineage_records_each_runs_tokens_and_cost_and_sums_them(data, src, user_env):
    key = f"sk-ant-api03-{uuid.uuid4().hex}"
    script = [Bash("echo made > made.txt"), Reply("Made made.txt."), Reply("Second turn.")]
    with FakeAnthropic(script) as server, approving(data, user_env):
        settings_for(data, server.url)
        try:
            login(data, key, user_env)
            made = as_json(
                cairnctl(data, "new", str(src), "--engine", "claude-code", "--json", env=user_env)
            )
            one = _continued(data, made["task_id"], "make a file", user_env)
            two = _continued(data, one["task_id"], "and again", user_env)
        finally:
            logout(data, user_env)
    first = as_json(cairnctl(data, "cost", one["task_id"], "--json", env=user_env))
    second = as_json(cairnctl(data, "cost", two["task_id"], "--json", env=user_env))
    runs = first["runs"] + second["runs"]
    assert len(runs) == 2
    for run in runs:
        assert run["input_tokens"] > 0 and run["output_tokens"] > 0, run
        assert run["cost_usd"] > 0 and run["cost_source"] == "engine", run
        assert run["models"], run  # the model Claude Code priced the turn for
    # The command that ran each one said so when it ended (and recorded it).
    assert one["usage"] == first["runs"][0] and two["usage"] == second["runs"][0]
    lineage = second["lineage"]
    assert lineage == first["lineage"] and lineage["runs"] == 2
    assert lineage["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in runs), abs=1e-6)
    for field in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert lineage[field] == sum(r[field] for r in runs)
    # The second run's cost is its own turn's: less than the session's running total.
    session_total = _session_cost(data, second["runs"][0]["run_id"], user_env)
    assert second["runs"][0]["cost_usd"] < session_total
    assert session_total == pytest.approx(lineage["cost_usd"], abs=1e-6)
    shown = cairnctl(data, "show", two["task_id"], env=user_env).stdout
    assert "lineage    $" in shown and "over 3 tasks, 2 runs" in shown  # the root never ran
    # Recorded: the figures stay when read again.
    assert as_json(cairnctl(data, "cost", "--json", env=user_env))["total"] == lineage


def test_a_codex_lineage_counts_each_runs_own_tokens_and_prices_them_from_the_table(
    data, src, user_env
):
    key = f"sk-proj-{uuid.uuid4().hex}"
    script = [fake_openai.run("echo made > made.txt"), fake_openai.say("Made it."),
              fake_openai.say("Again.")]  # fmt: skip
    with fake_openai.FakeOpenAI(script) as server, approving(data, user_env):
        settings_for(data, server.url, "codex")
        cairnctl(data, "config", "set", "prices.gpt-5.5", "input=2,output=20,cache_read=0.5",
                 env=user_env)  # fmt: skip
        try:
            login(data, key, user_env, "codex")
            made = as_json(
                cairnctl(data, "new", str(src), "--engine", "codex", "--json", env=user_env)
            )
            one = _continued(data, made["task_id"], "make a file", user_env)
            two = _continued(data, one["task_id"], "and again", user_env)
        finally:
            logout(data, user_env, "codex")
    shown = as_json(cairnctl(data, "cost", two["task_id"], "--json", env=user_env))
    first = as_json(cairnctl(data, "cost", one["task_id"], "--json", env=user_env))["runs"][0]
    second = shown["runs"][0]
    for run in (first, second):
        assert run["cost_source"] == "price table" and run["models"] == ["gpt-5.5"], run
        assert run["cost_usd"] == pytest.approx(
            (run["input_tokens"] * 2 + run["output_tokens"] * 20 + run["cache_read_tokens"] * 0.5)
            / 1e6
        )
    # Codex counts the thread's running total; each run has its own part of it.
    totals = _codex_totals(data, second["run_id"])
    assert second["input_tokens"] + second["cache_read_tokens"] < totals["input_tokens"]
    lineage = shown["lineage"]
    assert lineage["input_tokens"] + lineage["cache_read_tokens"] == totals["input_tokens"]
    assert (
        lineage["output_tokens"]
        == totals["output_tokens"]
        == (first["output_tokens"] + second["output_tokens"])
    )
    assert lineage["cost_usd"] == pytest.approx(first["cost_usd"] + second["cost_usd"])


def _continued(data: Path, task_id: str, message: str, env: dict[str, str]) -> dict:
    """Continue the task with `message` and follow its run to a success; a run that failed
    fails the test with what the command said and the end of the run's own output."""
    proc = cairnctl(data, "continue", task_id, "-m", message, "--json", env=env, timeout=240,
                    check=False)  # fmt: skip
    said = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    if proc.returncode == 0 and said.get("state") == "succeeded":
        return said
    output = ""
    if said.get("run_id"):
        store = Store(data / "cairn.db")
        try:
            output = output_of(store, said["run_id"], "stdout")[-3000:]
        finally:
            store.close()
    raise AssertionError(
        f"continue exited {proc.returncode}: {said or proc.stdout[-2000:]}\n"
        f"stderr: {proc.stderr[-2000:]}\nthe run's output ends: {output}"
    )


def _codex_totals(data: Path, run_id: str) -> dict[str, int]:
    """The last running totals Codex reported in the run's output."""
    store = Store(data / "cairn.db")
    try:
        text = output_of(store, run_id, "stdout")
    finally:
        store.close()
    found = None
    for line in text.splitlines():
        record = json_object(line)
        if record is not None and record.get("type") == "turn.completed":
            found = record["usage"]
    assert found is not None, text[-2000:]
    return found


def _session_cost(data: Path, run_id: str, env: dict[str, str]) -> float:
    """Claude Code's own total_cost_usd in the run's result record (the whole session's)."""
    store = Store(data / "cairn.db")
    try:
        text = output_of(store, run_id, "stdout")
    finally:
        store.close()
    for line in text.splitlines():
        record = json_object(line)
        if record is not None and record.get("type") == "result":
            return float(record["total_cost_usd"])
    raise AssertionError(f"no result record in the output of {run_id}: {text[-2000:]}")
