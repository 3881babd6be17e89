"""The real Claude Code CLI against a scripted model server: (a) on the host; (b) inside a
hardened Cairn sandbox (binary mounted read-only, network `allowlist` to the server only), where
the scripted model has Bash write a file, a stand-in gate refuses what it must, and the session is
continued and forked natively across a removed container, then replaced by a fallback session;
(c) end to end through `cairnctl`, with the real approval gate and a keyring secret.

Skips (with the reason) when Docker, the sandbox image, the Secret Service (c) or the CLI
(tests/agents, `npm ci`) is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from core.engines.base import (
    MODE_CONTINUE,
    MODE_FALLBACK,
    MODE_FORK,
    MODE_START,
    EngineEvent,
    EngineSettings,
    LaunchContext,
)
from core.engines.claude_code import ClaudeCodeEngine, transcript_path
from core.sandbox import egress
from core.sandbox.base import CONTAINER_HOME
from tests.agents.fake_anthropic import Bash, FakeAnthropic, Reply, text_of, tool_results
from tests.agents.locate import claude_binary, missing
from tests.support import engine_session_of, wait_for

IMAGE = os.environ.get("CAIRN_SANDBOX_IMAGE", "cairn-sandbox:1")
API_KEY = "sk-ant-test-not-a-real-key"
RUN_TIMEOUT_S = 120

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def binary() -> Path:
    found = claude_binary()
    if found is None:
        pytest.skip(missing())
    return found


@pytest.fixture(scope="module")
def sandbox_image(docker_client):
    try:
        docker_client.images.get(IMAGE)
    except Exception:
        pytest.skip(f"the sandbox image {IMAGE} is not built (tests/images/build.sh builds it)")
    return IMAGE


def events_of(stdout: str) -> list[EngineEvent]:
    """Every event in one attempt's stdout, parsed the way a run would (one parser per stream)."""
    parser = ClaudeCodeEngine()
    return [e for line in stdout.splitlines() for e in parser.parse_line(line)]


def kinds(events: list[EngineEvent], kind: str) -> list[dict]:
    return [e.data for e in events if e.kind == kind]


def conversation(request) -> list[tuple[str, str]]:
    """A request's messages as (role, text) pairs, tool calls shown as `tool_use:<command>`."""
    out = []
    for m in request.messages:
        if m.get("role") == "system":
            continue
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for b in blocks:
            if b.get("type") == "tool_use":
                out.append((m["role"], f"tool_use:{b['input'].get('command')}"))
            elif b.get("type") in ("text", "tool_result"):
                out.append((m["role"], text_of([b])))
    return out


# -- (a) on the host ------------------------------------------------------------------------------


def test_the_cli_talks_to_the_scripted_server_on_the_host(binary, tmp_path):
    """A quick smoke test without any sandbox: the engine's own command line, HOME a temp dir."""
    eng = ClaudeCodeEngine()
    work = tmp_path / "work"
    work.mkdir()
    with FakeAnthropic([Bash("echo hello > hello.txt"), Reply("Made hello.txt.")]) as server:
        ctx = LaunchContext(
            run_id="smoke",
            mode=MODE_START,
            prompt="make hello.txt",
            spec={},
            settings=EngineSettings(binary=str(binary), base_url=server.url),
            host_run_dir=tmp_path / "run",
            sandbox_run_dir=str(tmp_path / "run"),
            host_home=tmp_path / "home",
            sandbox_home=str(tmp_path / "home"),
            workspace=str(work),
        )
        eng.prepare(ctx)
        argv = [str(binary), *eng.claude_argv(ctx)[1:]]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            **eng.environment(ctx),
            "ANTHROPIC_API_KEY": API_KEY,
        }
        if os.geteuid() == 0:
            # Outside a sandbox, as root, Claude Code accepts its bypass flag only with this.
            env["IS_SANDBOX"] = "1"
        proc = subprocess.run(
            argv,
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=RUN_TIMEOUT_S,
        )
    assert proc.returncode == 0, proc.stderr
    assert (work / "hello.txt").read_text() == "hello\n"
    events = events_of(proc.stdout)
    chosen = eng.session_id_for(ctx)
    assert kinds(events, "session")[0]["session_id"] == chosen
    assert [c["command"] for c in kinds(events, "tool_call")] == ["echo hello > hello.txt"]
    (result,) = kinds(events, "result")
    assert result["ok"] and result["result"] == "Made hello.txt."
    assert transcript_path(tmp_path / "home", str(work), chosen).is_file()
    assert [r.path for r in server.requests if r.kind == "main"] == ["/v1/messages?beta=true"] * 2


# -- (b) in a hardened sandbox ----------------------------------------------------------------------


GATE_SCRIPT = """#!/bin/sh
# A stand-in approval gate: logs each hook call, refuses commands that mention "forbidden", and
# allows the rest by exiting 0 without a word (the engine's wrapper turns that into an allow).
in=$(cat)
printf '%s\\n' "$in" >> "$(dirname "$0")/calls.jsonl"
case "$in" in
  *forbidden*) echo "refused by the test gate" >&2; exit 2 ;;
esac
exit 0
"""


class Sandboxed:
    """A Cairn workspace with a sandbox under `allowlist` to the scripted server, where engine
    attempts are launched the way a run launches them."""

    def __init__(self, root: Path, binary: Path, server: FakeAnthropic, image: str):
        from core.app import Cairn

        src = root / "src"
        src.mkdir()
        (src / "README").write_text("a project\n")
        self.app = Cairn(root / "data", image=image)
        made = self.app.tasks.new(src, engine="claude-code")
        self.task_id = made.task.id
        self.policy = self.app.tasks.set_policy(
            self.task_id, network="allowlist", allow=[f"127.0.0.1:{server.port}"]
        )
        self.engine = ClaudeCodeEngine()
        self.settings = EngineSettings(binary=str(binary), base_url=server.url)
        self.attempts = 0
        self.ensure()
        gate_dir = self.app.sandboxes.runs_dir(self.ws.id) / "test-gate"
        gate_dir.mkdir(parents=True, exist_ok=True)
        (gate_dir / "gate.sh").write_text(GATE_SCRIPT)
        os.chmod(gate_dir, 0o777)  # the sandbox user appends to calls.jsonl
        self.gate_calls = gate_dir / "calls.jsonl"
        self.gate = ["sh", f"{self.app.sandboxes.run_dir_in_sandbox('test-gate')}/gate.sh"]

    @property
    def ws(self):
        return self.app.tasks.workspace_of(self.app.tasks.get(self.task_id))

    def ensure(self):
        self.outcome = self.app.sandboxes.ensure(
            self.ws, self.policy, None, extra_mounts=self.engine.mounts(self.settings)
        )
        return self.outcome

    @property
    def home(self) -> Path:
        return self.app.data.home_path(self.outcome.record.id)

    def launch(
        self, mode: str, prompt: str, session_id: str | None = None, *, gated: bool = True, **spec
    ):
        self.attempts += 1
        exec_id = f"claude-{self.attempts}"
        ctx = LaunchContext(
            run_id=exec_id,
            mode=mode,
            prompt=prompt,
            spec={"mode": mode, "prompt": prompt, **spec},
            settings=self.settings,
            host_run_dir=self.app.sandboxes.runs_dir(self.ws.id) / exec_id,
            sandbox_run_dir=self.app.sandboxes.run_dir_in_sandbox(exec_id),
            host_home=self.home,
            sandbox_home=CONTAINER_HOME,
            session_id=session_id,
            gate=self.gate if gated else [],
        )
        self.engine.prepare(ctx)
        env = {
            **self.app.sandboxes.exec_environment(self.policy),
            **self.engine.environment(ctx),
            "ANTHROPIC_API_KEY": API_KEY,
        }
        proc = self.outcome.live.exec_detached(
            self.engine.launch_argv(ctx), env=env, run_id=exec_id
        )
        code = proc.wait(RUN_TIMEOUT_S)
        stdout = proc.stdout_path.read_text()
        stderr = proc.stderr_path.read_text()
        assert code is not None, (
            f"attempt {exec_id} did not finish within {RUN_TIMEOUT_S} s; "
            f"stdout: {stdout[-1500:]!r}; stderr: {stderr[-1500:]!r}"
        )
        return ctx, code, stdout, stderr

    def close(self, docker_client) -> None:
        for c in docker_client.containers.list(
            all=True, filters={"label": f"cairn.data_dir={self.app.data.root}"}
        ):
            c.remove(force=True)
        for sock in (self.app.data.root / "egress").glob("*/sandbox/egress.sock"):
            egress.stop(sock)
        self.app.close()


def test_claude_code_in_a_sandbox_writes_continues_forks_and_falls_back(
    binary, sandbox_image, docker_client, tmp_path, artifacts_dir
):
    script = [
        Bash("echo hello > hello.txt", text="Writing the file."),
        Bash("touch forbidden.txt"),
        Reply("Made hello.txt; the other command was refused."),
    ]
    with FakeAnthropic(script) as server:
        box = Sandboxed(tmp_path, binary, server, sandbox_image)
        try:
            _start_continue_fork(box, server, docker_client, artifacts_dir)
        finally:
            box.close(docker_client)


def _start_continue_fork(box: Sandboxed, server: FakeAnthropic, docker_client, artifacts: Path):
    ws_root = Path(box.ws.root)

    # 1. A new session: the model asks for Bash twice; the gate lets one through.
    ctx, code, out, err = box.launch(MODE_START, "make hello.txt")
    (artifacts / "start.stdout.jsonl").write_text(out)
    assert code == 0, err
    assert (ws_root / "hello.txt").read_text() == "hello\n"
    assert not (ws_root / "forbidden.txt").exists()
    events = events_of(out)
    first = box.engine.session_id_for(ctx)
    assert [s["session_id"] for s in kinds(events, "session")] == [first]
    assert kinds(events, "session")[0]["cwd"] == "/workspace"
    assert kinds(events, "session")[0]["permission_mode"] == "dontAsk"
    assert [c["command"] for c in kinds(events, "tool_call")] == [
        "echo hello > hello.txt",
        "touch forbidden.txt",
    ]
    results = kinds(events, "tool_result")
    assert [r["is_error"] for r in results] == [False, True]
    assert "refused by the test gate" in results[1]["output"]
    assert kinds(events, "result")[0]["ok"] and not kinds(events, "error")
    calls = [json.loads(line) for line in box.gate_calls.read_text().splitlines()]
    assert [c["tool_input"]["command"] for c in calls] == [
        "echo hello > hello.txt",
        "touch forbidden.txt",
    ]
    assert all(c["hook_event_name"] == "PreToolUse" and c["cwd"] == "/workspace" for c in calls)
    assert transcript_path(box.home, "/workspace", first).is_file()
    # The key came only through the exec's environment: not in the container's config, not in
    # any file Claude Code or the engine wrote.
    container = docker_client.containers.get(box.outcome.record.container_id)
    assert API_KEY not in json.dumps(container.attrs)
    for folder in (box.home, ctx.host_run_dir):
        for path in folder.rglob("*"):
            if path.is_file():
                assert API_KEY.encode() not in path.read_bytes(), path
    first_history = conversation(server.main_requests()[-1])

    # 2. The container is removed; a new one with the same workspace and home continues natively.
    container.remove(force=True)
    outcome = box.ensure()
    assert outcome.path == "recreated"
    assert "egress-forwarder" in outcome.rebuilt  # the way to the model server, made again
    check = box.engine.native_resume_check(replace(ctx, mode=MODE_CONTINUE, session_id=first))
    assert check.ok, check.reason
    server.add(Reply("Second turn, same session."))
    before = len(server.main_requests())
    ctx2, code, out, err = box.launch(MODE_CONTINUE, "now say more", session_id=first)
    (artifacts / "continue.stdout.jsonl").write_text(out)
    assert code == 0, err
    events = events_of(out)
    assert {s["session_id"] for s in kinds(events, "session")} == {first}
    (request,) = server.main_requests()[before:]
    history = conversation(request)
    # The whole earlier conversation, then the new message.
    assert history[: len(first_history)] == first_history
    assert history[len(first_history) :] == [
        ("assistant", "Made hello.txt; the other command was refused."),
        ("user", "now say more"),
    ]
    assert ("user", "make hello.txt") in history

    # 3. A fork: a new session id, the history carried over, the parent's transcript untouched.
    parent_transcript = transcript_path(box.home, "/workspace", first).read_bytes()
    server.add(Reply("A forked turn."))
    before = len(server.main_requests())
    ctx3, code, out, err = box.launch(MODE_FORK, "try another way", session_id=first)
    (artifacts / "fork.stdout.jsonl").write_text(out)
    assert code == 0, err
    events = events_of(out)
    forked = box.engine.session_id_for(ctx3)
    assert forked != first
    assert [s["session_id"] for s in kinds(events, "session")] == [forked]
    assert not kinds(events, "error")
    (request,) = server.main_requests()[before:]
    # Everything the continued session had sent, its answer, then the fork's message.
    assert conversation(request) == conversation(server.main_requests()[before - 1]) + [
        ("assistant", "Second turn, same session."),
        ("user", "try another way"),
    ]
    assert tool_results(request.messages)  # the Bash results are part of the copied history
    assert transcript_path(box.home, "/workspace", forked).is_file()
    assert transcript_path(box.home, "/workspace", first).read_bytes() == parent_transcript

    # 4. Fallback, without a gate: a new session that is told why, on the same files. Unattended
    #    without a gate means --dangerously-skip-permissions, which Claude Code accepts from the
    #    sandbox's non-root user as it is (no IS_SANDBOX).
    server.add(Bash("cat hello.txt > seen.txt"), Reply("Picked up from the files."))
    before = len(server.main_requests())
    ctx4, code, out, err = box.launch(
        MODE_FALLBACK,
        "carry on",
        session_id=first,
        gated=False,
        fallback_reason="the transcript was lost",
    )
    assert code == 0, err
    assert (ws_root / "seen.txt").read_text() == "hello\n"
    events = events_of(out)
    (session,) = kinds(events, "session")
    assert session["session_id"] not in (first, forked)
    assert session["permission_mode"] == "bypassPermissions"
    request = server.main_requests()[before]
    assert conversation(request) and ("user", "make hello.txt") not in conversation(request)
    assert "the transcript was lost" in json.dumps(request.body.get("system"))


# -- (c) end to end through cairnctl ------------------------------------------------------------------


def test_cairnctl_runs_continues_and_forks_claude_code(
    binary, sandbox_image, docker_client, secret_service, tmp_path
):
    """A person's path: engine settings and a keyring secret, a task under `allowlist`, a first
    turn whose risky command waits for (and gets) a refusal, a continue after the sandbox was lost,
    and a fork from an earlier revision into its own workspace."""
    from tests.support import cairnctl

    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("a project\n")
    data = tmp_path / "data"
    data.mkdir()
    secret = f"claude-e2e-{uuid.uuid4().hex[:12]}"
    script = [
        Bash("echo hello > hello.txt"),
        Bash("git push --force origin main; touch pushed.marker"),
        Reply("Made hello.txt; the push was refused."),
    ]
    with FakeAnthropic(script) as server:
        (data / "settings.json").write_text(
            json.dumps(
                {
                    "engines": {
                        "claude-code": {
                            "binary": str(binary),
                            "base_url": server.url,
                            "api_key_secret": secret,
                        }
                    }
                }
            )
        )
        cairnctl(data, "secret", "set", secret, input=API_KEY)
        try:
            _through_cairnctl(data, src, server, docker_client)
        finally:
            cairnctl(data, "secret", "rm", secret, check=False)
            for c in docker_client.containers.list(
                all=True, filters={"label": f"cairn.data_dir={data.resolve()}"}
            ):
                c.remove(force=True)
            for sock in (data / "egress").glob("*/sandbox/egress.sock"):
                egress.stop(sock)
            from core.approvals import stop_judge

            stop_judge(data.resolve())


def _through_cairnctl(data: Path, src: Path, server: FakeAnthropic, docker_client) -> None:
    from core.approvals import stop_judge
    from tests.support import as_json, cairnctl

    # An engine of the wrong version is refused before it starts, with the reason.
    settings = json.loads((data / "settings.json").read_text())
    settings["engines"]["claude-code"]["version"] = "0.0.1"
    (data / "settings.json").write_text(json.dumps(settings))
    made = as_json(
        cairnctl(
            data, "new", str(src), "--engine", "claude-code", "--network", "allowlist", "--json"
        )
    )
    root, ws = made["task_id"], Path(made["workspace_root"])
    refused = cairnctl(data, "continue", root, "-m", "make hello.txt", check=False)
    assert refused.returncode == 2 and "0.0.1" in refused.stderr, refused.stderr
    del settings["engines"]["claude-code"]["version"]
    (data / "settings.json").write_text(json.dumps(settings))

    # 1. The first turn (no session yet: a new one). The force push waits for a person; every
    #    Cairn process is gone meanwhile (the detached judge too) and the request is still listed
    #    when Cairn comes back; the person refuses, and the command never runs.
    first = as_json(cairnctl(data, "continue", root, "-m", "make hello.txt", "--detach", "--json"))
    task1 = first["task_id"]
    pending = wait_for(
        lambda: as_json(cairnctl(data, "approvals", "--json"))["approvals"],
        timeout=90,
        what="the push to wait for approval",
    )
    stop_judge(data.resolve())
    pending = as_json(cairnctl(data, "approvals", "--json"))["approvals"]
    assert [a["command"] for a in pending] == ["git push --force origin main; touch pushed.marker"]
    assert as_json(cairnctl(data, "show", task1, "--json"))["task_id"] == task1
    cairnctl(data, "deny", pending[0]["id"], "--reason", "no force pushes", "--json")
    done = as_json(cairnctl(data, "follow", task1, "--json"))
    assert done["state"] == "succeeded", done
    assert (ws / "hello.txt").read_text() == "hello\n"
    assert not (ws / "pushed.marker").exists()  # the refused command never ran
    session1 = engine_session_of(data, task1)
    assert session1 and uuid.UUID(session1)
    refusal = tool_results(server.main_requests()[-1].messages)
    assert any("no force pushes" in text_of(r.get("content")) for r in refusal.values())
    revs = as_json(cairnctl(data, "revisions", task1, "--json"))["revisions"]
    assert any(r["run_id"] == done["run_id"] for r in revs)  # hello.txt recorded with its run
    rev = revs[-1]["id"]
    history1 = conversation(server.main_requests()[-1])

    # 2. The sandbox is lost; continue brings a new one and resumes the same session natively.
    label = f"cairn.data_dir={data.resolve()}"
    for c in docker_client.containers.list(all=True, filters={"label": label}):
        c.remove(force=True)
    server.add(Bash("echo second > second.txt"), Reply("Second turn."))
    before = len(server.main_requests())
    cont = as_json(cairnctl(data, "continue", task1, "-m", "now say more", "--json"))
    assert cont["state"] == "succeeded", cont
    assert any("native continue" in p for p in cont["resume_report"]["path"]), cont
    assert engine_session_of(data, cont["task_id"]) == session1
    assert (ws / "second.txt").read_text() == "second\n"
    request = server.main_requests()[before]
    assert conversation(request) == history1 + [
        ("assistant", "Made hello.txt; the push was refused."),
        ("user", "now say more"),
    ]

    # 3. A fork from the revision after the first turn: its own workspace without the second
    #    turn's file, a new session, the conversation carried over, the parent untouched.
    server.add(Reply("A forked turn."))
    before = len(server.main_requests())
    fork = as_json(
        cairnctl(data, "fork", cont["task_id"], "--at", rev, "-m", "try another way", "--json")
    )
    assert fork["state"] == "succeeded", fork
    assert any("native fork" in p for p in fork["resume_report"]["path"]), fork
    fork_ws = Path(fork["workspace_root"])
    assert fork_ws != ws and (fork_ws / "hello.txt").read_text() == "hello\n"
    assert not (fork_ws / "second.txt").exists()
    forked = engine_session_of(data, fork["task_id"])
    assert forked and forked != session1
    (request,) = server.main_requests()[before:]
    assert ("user", "make hello.txt") in conversation(request)
    assert conversation(request)[-1] == ("user", "try another way")
    assert (ws / "second.txt").read_text() == "second\n"

    # 4. The engine home is emptied (as a run could do): the last checkpoint kept the
    #    transcript, so Continue puts it back and goes on with the same conversation.
    sessions = as_json(cairnctl(data, "status", "--json"))["sessions"]
    (home_session,) = [
        s["session_id"] for s in sessions if s["workspace_id"] == made["workspace_id"]
    ]
    shutil.rmtree(data / "homes" / home_session / ".claude")
    server.add(Reply("Still the same conversation."))
    kept = as_json(cairnctl(data, "continue", cont["task_id"], "-m", "go on", "--json"))
    assert kept["state"] == "succeeded", kept
    path = kept["resume_report"]["path"]
    assert any(p.startswith("conversation: restored from the last checkpoint") for p in path), kept
    assert any("native continue" in p for p in path), kept
    assert engine_session_of(data, kept["task_id"]) == session1
    cont = kept

    # 5. The home and the checkpoint's copy are both lost: Continue falls back to a new session
    #    on the same files, and the run's record says why.
    shutil.rmtree(data / "homes" / home_session / ".claude")
    shutil.rmtree(data / "conversations")
    server.add(
        Bash("git push --force origin main || true; touch approved.marker"),
        Reply("Starting afresh."),
    )
    started = as_json(
        cairnctl(data, "continue", cont["task_id"], "-m", "carry on", "--detach", "--json")
    )
    pending = wait_for(
        lambda: as_json(cairnctl(data, "approvals", "--json"))["approvals"],
        timeout=90,
        what="the second push to wait for approval",
    )
    cairnctl(data, "approve", pending[0]["id"], "--json")
    again = as_json(cairnctl(data, "follow", started["task_id"], "--json"))
    assert again["state"] == "succeeded", again
    assert (ws / "approved.marker").exists()  # approved: it ran
    assert any("fallback" in p for p in again["resume_report"]["path"]), again
    assert any("transcript" in n for n in again["resume_report"]["notes"]), again
    fresh = engine_session_of(data, again["task_id"])
    assert fresh and fresh != session1
    assert (ws / "second.txt").read_text() == "second\n"  # the same files
