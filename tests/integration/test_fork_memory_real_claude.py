"""A fork at an older revision carries the conversation as it was when that revision was recorded:
the real Claude Code CLI against the scripted model server, in a real sandbox, driven through
`cairnctl`. Three turns each write a file (three revisions); a fork at the first one gets that
revision's files, and the request it sends holds the first turn and none of the later two; so
does a Continue after the parent's workspace was restored to that revision.

Skips (with the reason) when Docker, the sandbox image, the Secret Service or the CLI
(tests/agents, `npm ci`) is missing.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from core.revisions import POSITIONS
from core.store import Store
from tests.agents.fake_anthropic import Bash, FakeAnthropic, Reply, text_of
from tests.integration.claude_support import binary, release, use_scripted_server
from tests.support import as_json, cairnctl

TURNS = [
    ("make a", "echo one > a.txt", "Made a.txt."),
    ("make b", "echo two > b.txt", "Made b.txt."),
    ("make c", "echo three > c.txt", "Made c.txt."),
]

__all__ = ["binary"]  # the fixture, used by name

pytestmark = pytest.mark.docker


def conversation(request) -> list[tuple[str, str]]:
    """A request's messages as (role, text) pairs, tool calls shown as `tool_use:<command>`."""
    out = []
    for m in request.messages:
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for b in blocks:
            if b.get("type") == "tool_use":
                out.append((m["role"], f"tool_use:{b['input'].get('command')}"))
            elif b.get("type") in ("text", "tool_result"):
                out.append((m["role"], text_of([b])))
    return out


def runs_of(data: Path, task_id: str):
    store = Store(data / "cairn.db")
    try:
        return store.runs_of([task_id])
    finally:
        store.close()


def test_a_fork_at_the_first_of_three_revisions_remembers_only_the_first_turn(
    binary, sandbox_image, docker_client, secret_service, tmp_path
):
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("a project\n")
    data = tmp_path / "data"
    data.mkdir()
    secret = f"claude-fork-{uuid.uuid4().hex[:12]}"
    with FakeAnthropic() as server:
        use_scripted_server(data, binary, server.url, secret)
        try:
            _three_turns_and_a_fork(data, src, server)
        finally:
            release(data, secret, docker_client)


def _three_turns_and_a_fork(data: Path, src: Path, server: FakeAnthropic) -> None:
    made = as_json(
        cairnctl(
            data, "new", str(src), "--engine", "claude-code", "--network", "allowlist", "--json"
        )
    )
    task, ws = made["task_id"], Path(made["workspace_root"])
    turn_runs = []
    for prompt, command, reply in TURNS:
        server.add(Bash(command), Reply(reply))
        done = as_json(cairnctl(data, "continue", task, "-m", prompt, "--json"))
        assert done["state"] == "succeeded", done
        task = done["task_id"]
        turn_runs.append(done["run_id"])
    made_files = sorted(p.name for p in ws.iterdir() if p.suffix == ".txt")
    assert made_files == ["a.txt", "b.txt", "c.txt"], [
        conversation(r) for r in server.main_requests()
    ]
    # The third turn's last request held all three (and, but for the third, their answers).
    everything = conversation(server.main_requests()[-1])
    for prompt, command, _ in TURNS:
        assert ("user", prompt) in everything
        assert ("assistant", f"tool_use:{command}") in everything
    assert [("assistant", reply) in everything for _, _, reply in TURNS] == [True, True, False]

    # Each turn made its own revision, and each revision went with a conversation position.
    revs = as_json(cairnctl(data, "revisions", task, "--json"))["revisions"]
    firsts = [[r for r in revs if r["run_id"] == run] for run in turn_runs]
    assert all(firsts), revs
    first = firsts[0][-1]["id"]
    store = Store(data / "cairn.db")
    try:
        noted = {
            rev: entry
            for row in store.query("SELECT id FROM runs")
            for rev, entry in (store.get_run(row["id"]).spec.get(POSITIONS) or {}).items()
        }
    finally:
        store.close()
    assert first in noted, noted
    assert {firsts[1][-1]["id"], firsts[2][-1]["id"]} <= noted.keys(), noted

    # The fork at the first turn's revision: that revision's files, and the conversation up to it.
    server.add(Reply("A forked turn."))
    before = len(server.main_requests())
    fork = as_json(cairnctl(data, "fork", task, "--at", first, "-m", "try another way", "--json"))
    assert fork["state"] == "succeeded", fork
    path = fork["resume_report"]["path"]
    assert any(p.startswith("conversation: as at revision") for p in path), path
    assert any("native fork" in p and " up to " in p for p in path), path
    fork_ws = Path(fork["workspace_root"])
    assert (fork_ws / "a.txt").read_text() == "one\n"
    assert not (fork_ws / "b.txt").exists() and not (fork_ws / "c.txt").exists()
    (forked_run,) = runs_of(data, fork["task_id"])
    assert forked_run.spec["resume_at"] == noted[first]["at"]
    assert forked_run.engine_session_id not in (None, noted[first]["session_id"])

    (request,) = server.main_requests()[before:]
    held = conversation(request)
    assert ("user", "make a") in held
    assert ("assistant", "tool_use:echo one > a.txt") in held
    assert held[-1] == ("user", "try another way")
    for prompt, command, reply in TURNS[1:]:
        assert ("user", prompt) not in held, held
        assert ("assistant", f"tool_use:{command}") not in held, held
        assert ("assistant", reply) not in held, held
    # The parent's files and conversation are untouched.
    assert (ws / "c.txt").read_text() == "three\n"

    # The parent's workspace restored whole to the first turn's revision: Continue goes on from
    # the conversation as it was there (a fork of the session), not from the third turn.
    cairnctl(data, "restore", task, first, "--json")
    assert not (ws / "b.txt").exists() and not (ws / "c.txt").exists()
    server.add(Reply("Going on from the first turn."))
    before = len(server.main_requests())
    cont = as_json(cairnctl(data, "continue", task, "-m", "go on from here", "--json"))
    assert cont["state"] == "succeeded", cont
    path = cont["resume_report"]["path"]
    assert any(p.startswith("conversation: as before the workspace was restored") for p in path)
    (request,) = server.main_requests()[before:]
    held = conversation(request)
    assert ("user", "make a") in held and held[-1] == ("user", "go on from here")
    for prompt, command, reply in TURNS[1:]:
        assert ("user", prompt) not in held, held
        assert ("assistant", f"tool_use:{command}") not in held, held
        assert ("assistant", reply) not in held, held
