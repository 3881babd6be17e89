"""An agent cannot do by `bash -c` what it was refused as a tool call: the real Claude Code CLI
against the scripted model server, in a real sandbox, driven through `cairnctl`. The first tool
call (a force push) is refused on its card; the model then tries the same push through `bash -c`
with the words broken by quotes, which the text rules do not recognise: the program it starts is
asked again by the supervisor, refused, and the remote never receives the push. An approved tool
call is not asked twice for the program it names."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.agents.fake_anthropic import Bash, FakeAnthropic, Reply, text_of, tool_results
from tests.integration.claude_support import binary, release, use_scripted_server
from tests.support import as_json, cairnctl, git, wait_for

__all__ = ["binary"]  # the fixture, used by name

PUSH = "git push --force /workspace/remote.git HEAD:refs/heads/main"
# The same push, spelled so no text rule sees it.
DISGUISED = "bash -c \"g''it pu''sh -f /workspace/remote.git HEAD:refs/heads/main\""
PUSH_ARGV = ["git", "push", "-f", "/workspace/remote.git", "HEAD:refs/heads/main"]

pytestmark = pytest.mark.docker


def _project(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("a project\n")
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "README")
    git(src, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "one")
    subprocess.run(["git", "init", "-q", "--bare", str(src / "remote.git")], check=True)
    return src


def _pending(data: Path) -> list[dict]:
    return as_json(cairnctl(data, "approvals", "--json"))["approvals"]


def test_a_refused_tool_call_tried_again_through_bash_c_is_asked_and_refused(
    binary, sandbox_image, docker_client, secret_service, tmp_path
):
    src = _project(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    secret = f"claude-sup-{uuid.uuid4().hex[:12]}"
    script = [
        Bash(PUSH),
        Bash(DISGUISED, text="Trying another way."),
        Reply("The push was refused both ways."),
    ]
    with FakeAnthropic(script) as server:
        use_scripted_server(data, binary, server.url, secret)
        try:
            made = as_json(
                cairnctl(
                    data,
                    *("new", str(src), "--engine", "claude-code", "--network", "allowlist"),
                    *("-m", "push it", "--detach", "--json"),
                )
            )
            ws = Path(made["workspace_root"])
            remote = ws / "remote.git" / "refs" / "heads" / "main"

            # 1. The tool call, as Claude Code's hook asks: its card names the command.
            first = wait_for(lambda: _pending(data), timeout=90, what="the tool call's card")
            assert [a["command"] for a in first] == [PUSH]
            assert first[0]["rule"] == "git-force-push" and "kind" not in first[0]["details"]
            cairnctl(data, "deny", first[0]["id"], "--reason", "no force pushes")

            # 2. The same push through bash -c, words broken by quotes: the text rules let the
            #    tool call through, and the git it starts is held and asked as a program start.
            second = wait_for(lambda: _pending(data), timeout=90, what="the program's card")
            (card,) = second
            assert card["rule"] == "git-force-push", card
            assert card["details"]["kind"] == "exec"
            assert card["details"]["argv"] == PUSH_ARGV
            assert card["details"]["program"] == "/usr/bin/git"
            # Started by the agent's shell, under the agent.
            assert any("bash" in p for p in card["details"]["parents"]), card["details"]
            assert not remote.exists()
            cairnctl(data, "deny", card["id"], "--reason", "still no")

            done = as_json(cairnctl(data, "follow", made["task_id"], "--json"))
            assert done["state"] == "succeeded", done
            assert not remote.exists()  # nothing was pushed, by either route
            results = tool_results(server.main_requests()[-1].messages)
            said = [text_of(r.get("content")) for r in results.values()]
            assert any("no force pushes" in s for s in said), said
            assert any("Operation not permitted" in s or "denied" in s for s in said), said
            decided = as_json(cairnctl(data, "approvals", "--all", "--json"))["approvals"]
            assert sorted(a["state"] for a in decided if a["rule"] == "git-force-push") == [
                "denied",
                "denied",
            ]
        finally:
            release(data, secret, docker_client)


def test_an_approved_tool_call_is_not_asked_again_for_the_program_it_names(
    binary, sandbox_image, docker_client, secret_service, tmp_path
):
    src = _project(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    secret = f"claude-sup-{uuid.uuid4().hex[:12]}"
    with FakeAnthropic([Bash(PUSH), Reply("Pushed.")]) as server:
        use_scripted_server(data, binary, server.url, secret)
        try:
            made = as_json(
                cairnctl(
                    data,
                    *("new", str(src), "--engine", "claude-code", "--network", "allowlist"),
                    *("-m", "push it", "--detach", "--json"),
                )
            )
            ws = Path(made["workspace_root"])
            (card,) = wait_for(lambda: _pending(data), timeout=90, what="the tool call's card")
            cairnctl(data, "approve", card["id"])
            done = as_json(cairnctl(data, "follow", made["task_id"], "--json"))
            assert done["state"] == "succeeded", done
            assert (ws / "remote.git" / "refs" / "heads" / "main").exists()  # it ran
            decided = as_json(cairnctl(data, "approvals", "--all", "--json"))["approvals"]
            covered = [a for a in decided if a["details"].get("covered_by") == card["id"]]
            assert [a["state"] for a in covered] == ["auto-allowed"], decided
        finally:
            release(data, secret, docker_client)
