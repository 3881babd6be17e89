"""The Claude Code engine without Docker or the CLI: its command per mode, its settings file and
hook, its environment, its version check, the native-resume check, and its reading of stream-json
output recorded from the real CLI (tests/agents/samples/claude-stream.jsonl)."""

from __future__ import annotations

import json
import shlex
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from core.engines import engine_for
from core.engines.base import (
    MODE_CONTINUE,
    MODE_FALLBACK,
    MODE_FORK,
    MODE_START,
    EngineEvent,
    EngineSettings,
    LaunchContext,
)
from core.engines.capabilities import Probe
from core.engines.claude_code import (
    BINARY_IN_SANDBOX,
    HOOK_TIMEOUT_S,
    LAUNCH_MARKER,
    ClaudeCodeEngine,
    hook_command,
    project_dir_name,
    render_settings,
    transcript_path,
)
from core.errors import InputError
from tests.unit.fake_installs import claude_outputs, native

SAMPLES = Path(__file__).resolve().parents[1] / "agents" / "samples" / "claude-stream.jsonl"
GATE = ["python3", "/cairn/tools/approval-gate.py", "--run", "/cairn/runs/r1"]
PARENT = "0b9f5a8e-52c4-4a3f-9b0e-6a1c2d3e4f50"


@pytest.fixture
def eng() -> ClaudeCodeEngine:
    return ClaudeCodeEngine()


def make_ctx(
    tmp_path: Path,
    mode: str = MODE_START,
    *,
    session_id: str | None = None,
    gate: list[str] | None = None,
    **settings,
) -> LaunchContext:
    return LaunchContext(
        run_id="run-1",
        mode=mode,
        prompt="make hello.txt",
        spec={"mode": mode},
        settings=EngineSettings(**{"base_url": "http://127.0.0.1:8123", **settings}),
        host_run_dir=tmp_path / "runs" / "run-1.1",
        sandbox_run_dir="/cairn/runs/run-1.1",
        host_home=tmp_path / "home",
        sandbox_home="/home/agent",
        session_id=session_id,
        gate=list(gate or []),
    )


def write_transcript(home: Path, session_id: str, cwd: str = "/workspace") -> Path:
    path = transcript_path(home, cwd, session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "type": "user",
                "cwd": cwd,
                "sessionId": session_id,
                "message": {"role": "user", "content": "hi"},
            }
        )
        + "\n"
    )
    return path


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# -- registry and spec -----------------------------------------------------------------------------


def test_the_engine_is_registered_with_sessions_and_a_key_variable():
    eng = engine_for("claude-code")
    assert isinstance(eng, ClaudeCodeEngine) and eng.has_sessions
    assert eng.api_key_env == "ANTHROPIC_API_KEY"


def test_validate_wants_a_message_and_a_real_session_id(eng):
    assert eng.validate({"prompt": "hi"}) == {"prompt": "hi", "mode": MODE_START}
    with pytest.raises(InputError, match="needs a message"):
        eng.validate({"prompt": "  "})
    with pytest.raises(InputError, match="not commands"):
        eng.validate({"commands": ["ls"], "prompt": "x"})
    with pytest.raises(InputError, match="not a Claude Code session id"):
        eng.validate({"prompt": "x", "mode": MODE_CONTINUE, "session_id": "../../etc/passwd"})
    with pytest.raises(InputError, match="unknown engine mode"):
        eng.validate({"prompt": "x", "mode": "rewind"})


# -- command per mode ------------------------------------------------------------------------------


def test_start_chooses_a_new_session_id(eng, tmp_path):
    ctx = make_ctx(tmp_path)
    eng.prepare(ctx)
    argv = eng.claude_argv(ctx)
    chosen = eng.session_id_for(ctx)
    assert uuid.UUID(chosen).version == 4
    assert argv[:6] == [
        BINARY_IN_SANDBOX,
        "-p",
        "make hello.txt",
        "--output-format",
        "stream-json",
        "--verbose",
    ]
    assert flag_value(argv, "--session-id") == chosen
    assert "--resume" not in argv and "--fork-session" not in argv
    assert flag_value(argv, "--settings") == "/cairn/runs/run-1.1/settings.json"
    assert flag_value(argv, "--setting-sources") == ""  # only Cairn's own settings file
    # Another attempt gets another session.
    other = replace(ctx, host_run_dir=tmp_path / "runs" / "run-1.2")
    eng.prepare(other)
    assert eng.session_id_for(other) != chosen


def test_continue_resumes_the_same_session(eng, tmp_path):
    ctx = make_ctx(tmp_path, MODE_CONTINUE, session_id=PARENT)
    eng.prepare(ctx)
    argv = eng.claude_argv(ctx)
    assert flag_value(argv, "--resume") == PARENT
    assert "--session-id" not in argv and "--fork-session" not in argv
    assert eng.session_id_for(ctx) == PARENT


def test_fork_resumes_the_parent_into_a_new_session_chosen_up_front(eng, tmp_path):
    ctx = make_ctx(tmp_path, MODE_FORK, session_id=PARENT)
    eng.prepare(ctx)
    argv = eng.claude_argv(ctx)
    assert flag_value(argv, "--resume") == PARENT and "--fork-session" in argv
    new = flag_value(argv, "--session-id")
    assert new == eng.session_id_for(ctx) and new != PARENT


def test_a_fork_may_end_its_conversation_at_an_earlier_message(eng, tmp_path):
    at = str(uuid.uuid4())
    ctx = make_ctx(tmp_path, MODE_FORK, session_id=PARENT)
    ctx = replace(ctx, spec={"mode": MODE_FORK, "resume_at": at})
    eng.prepare(ctx)
    assert flag_value(eng.claude_argv(ctx), "--resume-session-at") == at
    with pytest.raises(InputError, match="not the uuid of a Claude Code message"):
        eng.validate({"prompt": "x", "mode": MODE_FORK, "resume_at": "msg_0123"})


def test_fallback_starts_a_new_session_that_says_why(eng, tmp_path):
    ctx = make_ctx(tmp_path, MODE_FALLBACK, session_id=PARENT)
    ctx = replace(ctx, spec={"mode": MODE_FALLBACK, "fallback_reason": "the transcript is gone"})
    eng.prepare(ctx)
    argv = eng.claude_argv(ctx)
    assert "--resume" not in argv
    assert flag_value(argv, "--session-id") not in (PARENT, None)
    note = flag_value(argv, "--append-system-prompt")
    assert "the transcript is gone" in note and "/workspace" in note
    assert argv[2] == "make hello.txt"  # the person's message itself is unchanged


def test_continue_or_fork_without_a_session_id_is_refused(eng, tmp_path):
    for mode in (MODE_CONTINUE, MODE_FORK):
        with pytest.raises(InputError, match="without its id"):
            eng.prepare(make_ctx(tmp_path, mode))


def test_the_command_needs_prepare_first(eng, tmp_path):
    with pytest.raises(InputError, match="not prepared"):
        eng.launch_argv(make_ctx(tmp_path))


def test_permissions_are_gated_or_bypassed(eng, tmp_path):
    ungated = make_ctx(tmp_path)
    eng.prepare(ungated)
    argv = eng.claude_argv(ungated)
    assert "--dangerously-skip-permissions" in argv and "--permission-mode" not in argv
    gated = make_ctx(tmp_path, gate=GATE)
    eng.prepare(gated)
    argv = eng.claude_argv(gated)
    # Only the gate's explicit allow lets a tool run: a gate that hangs or is not loaded refuses.
    assert flag_value(argv, "--permission-mode") == "dontAsk"
    assert "--dangerously-skip-permissions" not in argv


def test_a_configured_model_is_passed(eng, tmp_path):
    ctx = make_ctx(tmp_path, model="claude-sonnet-4-5")
    eng.prepare(ctx)
    assert flag_value(eng.claude_argv(ctx), "--model") == "claude-sonnet-4-5"
    plain = make_ctx(tmp_path)
    eng.prepare(plain)
    assert "--model" not in eng.claude_argv(plain)


def test_launch_prints_what_the_attempt_is_before_running_claude(eng, tmp_path):
    ctx = make_ctx(tmp_path, MODE_FORK, session_id=PARENT)
    eng.prepare(ctx)
    argv = eng.launch_argv(ctx)
    assert argv[:2] == ["sh", "-c"] and argv[5:] == eng.claude_argv(ctx)
    marker = json.loads(argv[4])
    assert marker["type"] == LAUNCH_MARKER and marker["mode"] == MODE_FORK
    assert marker["parent_session_id"] == PARENT and marker["session_id"] == eng.session_id_for(ctx)
    out = subprocess.run(
        [*argv[:5], "echo", "claude ran"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert json.loads(out[0]) == marker and out[1] == "claude ran"


# -- settings file and hook ------------------------------------------------------------------------


def test_settings_hold_the_gate_as_a_pre_tool_use_hook(eng, tmp_path):
    ctx = make_ctx(tmp_path, gate=GATE)
    eng.prepare(ctx)
    settings = json.loads((ctx.host_run_dir / "settings.json").read_text())
    (entry,) = settings["hooks"]["PreToolUse"]
    assert entry["matcher"] == "*"
    (hook,) = entry["hooks"]
    assert hook["type"] == "command" and hook["timeout"] == HOOK_TIMEOUT_S >= 3600
    assert hook["command"].endswith(shlex.join([*GATE, "--claude-hook"]))
    assert settings["disableAllHooks"] is False  # whatever other settings might say
    assert "ANTHROPIC_API_KEY" not in json.dumps(settings)


def test_without_a_gate_there_is_no_hook(eng, tmp_path):
    ctx = make_ctx(tmp_path)
    eng.prepare(ctx)
    assert "hooks" not in json.loads((ctx.host_run_dir / "settings.json").read_text())
    assert render_settings([])["cleanupPeriodDays"] > 3650  # transcripts are kept


def test_prepare_replaces_a_planted_link_instead_of_following_it(eng, tmp_path):
    ctx = make_ctx(tmp_path, gate=GATE)
    ctx.host_run_dir.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    (ctx.host_run_dir / "settings.json").symlink_to(victim)
    eng.prepare(ctx)
    assert victim.read_text() == "untouched\n"
    assert not (ctx.host_run_dir / "settings.json").is_symlink()


def run_hook(gate_body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    gate = tmp_path / "gate.sh"
    gate.write_text(gate_body)
    return subprocess.run(
        ["sh", "-c", hook_command(["sh", str(gate)])],
        input='{"tool_name":"Bash"}',
        capture_output=True,
        text=True,
        timeout=20,
    )


def test_the_hook_turns_a_silent_allow_into_an_explicit_one(tmp_path):
    proc = run_hook("cat > /dev/null; exit 0\n", tmp_path)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"


def test_the_hook_passes_the_gates_own_decision_and_stdin_through(tmp_path):
    deny = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "no",
        }
    }
    proc = run_hook(f"grep -q Bash && echo '{json.dumps(deny)}'\n", tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout) == deny
    proc = run_hook("echo 'refused: rm -rf' >&2; exit 2\n", tmp_path)
    assert proc.returncode == 2 and "refused: rm -rf" in proc.stderr


def test_a_failing_or_missing_gate_refuses(tmp_path):
    proc = run_hook("exit 1\n", tmp_path)
    assert proc.returncode == 2 and "approval gate failed (exit 1)" in proc.stderr
    proc = subprocess.run(
        ["sh", "-c", hook_command([str(tmp_path / "no-such-gate")])],
        input="{}",
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2 and proc.stdout == ""


# -- environment, mounts, versions -----------------------------------------------------------------


def test_environment_points_at_the_endpoint_and_the_home_without_the_key(eng, tmp_path):
    env = eng.environment(make_ctx(tmp_path))
    assert env == {
        "HOME": "/home/agent",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:8123",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    assert "ANTHROPIC_BASE_URL" not in eng.environment(make_ctx(tmp_path, base_url=None))


def test_the_binary_is_mounted_read_only_by_its_real_path(eng, tmp_path):
    real = native(tmp_path / "pkg" / "claude", claude_outputs("2.1.332"))
    link = tmp_path / "claude-link"
    link.symlink_to(real)
    assert eng.mounts(EngineSettings(binary=str(link))) == [(real, BINARY_IN_SANDBOX)]
    assert eng.mounts(EngineSettings()) == []
    with pytest.raises(InputError, match="does not exist"):
        eng.mounts(EngineSettings(binary=str(tmp_path / "nope")))
    script = tmp_path / "not-claude"
    script.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(InputError, match="runs no program"):
        eng.mounts(EngineSettings(binary=str(script)))
    assert eng.tool_probe(EngineSettings())["claude"] == [BINARY_IN_SANDBOX, "--version"]


def test_check_version_judges_by_features_not_by_a_minimum(eng, tmp_path):
    binary = native(tmp_path / "claude", {})
    ok = {"claude": "2.1.332 (Claude Code)", "bash": "bash 5.2.15(1)-release"}
    settings = EngineSettings(binary=str(binary))
    has_all = Probe(binary, "2.1.332")
    assert eng.check_version(settings, ok, has_all) is None
    old = {**ok, "claude": "2.1.197 (Claude Code)"}
    assert eng.check_version(settings, old, Probe(binary, "2.1.197")) is None
    lacking = Probe(binary, "2.1.90", missing=("--fork-session",))
    reason = eng.check_version(settings, {**ok, "claude": "2.1.90 (Claude Code)"}, lacking)
    assert "lacks --fork-session" in reason and "@anthropic-ai/claude-code@latest" in reason
    assert "not found" in eng.check_version(EngineSettings(), ok)
    assert "does not exist" in eng.check_version(EngineSettings(binary=str(tmp_path / "x")), ok)
    missing = {**ok, "claude": "missing"}
    assert "did not answer --version" in eng.check_version(settings, missing, has_all)
    pinned = replace(settings, version="2.1.300")
    assert "pin 2.1.300" in eng.check_version(pinned, ok, has_all)
    assert eng.check_version(replace(settings, version="2.1.332"), ok, has_all) is None
    assert "no bash" in eng.check_version(settings, {**ok, "bash": "missing"}, has_all)
    # The host could not run it: the sandbox's answer and the pin are all there is.
    unknown = Probe(binary, None, error="it could not run")
    assert eng.check_version(settings, ok, unknown) is None
    assert "pin 2.1.300" in eng.check_version(pinned, ok, unknown)


# -- native resume ---------------------------------------------------------------------------------


def test_project_folders_are_named_like_claude_code_names_them():
    assert project_dir_name("/workspace") == "-workspace"
    assert project_dir_name("/tmp/ccws-_zbjrg37") == "-tmp-ccws--zbjrg37"  # seen on disk
    assert project_dir_name("/home/a.b/x") == "-home-a-b-x"


def test_native_resume_holds_with_the_transcript_in_the_home(eng, tmp_path):
    write_transcript(tmp_path / "home", PARENT)
    check = eng.native_resume_check(make_ctx(tmp_path, MODE_CONTINUE, session_id=PARENT))
    assert check.ok and PARENT in check.reason


def test_native_resume_fails_with_a_reason(eng, tmp_path):
    ctx = make_ctx(tmp_path, MODE_CONTINUE, session_id=PARENT)
    check = eng.native_resume_check(replace(ctx, session_id=None))
    assert not check.ok and "no Claude Code session id" in check.reason
    check = eng.native_resume_check(replace(ctx, session_id="not-a-uuid"))
    assert not check.ok and "not a Claude Code session id" in check.reason
    check = eng.native_resume_check(ctx)
    assert not check.ok and "engine home" in check.reason and "missing" in check.reason
    (tmp_path / "home").mkdir()
    check = eng.native_resume_check(ctx)
    assert not check.ok and ".claude/projects/-workspace/" + PARENT in check.reason
    write_transcript(tmp_path / "home", PARENT, cwd="/srv/elsewhere")
    check = eng.native_resume_check(ctx)
    assert not check.ok and "'/srv/elsewhere'" in check.reason and "'/workspace'" in check.reason
    write_transcript(tmp_path / "home", PARENT).write_text("")
    check = eng.native_resume_check(ctx)
    assert not check.ok and "empty" in check.reason


# -- reading the stream ----------------------------------------------------------------------------


def sample_streams() -> list[list[str]]:
    """The recorded attempts: start, continue, fork, a resume of an unknown session, and a start
    whose gate did not answer in time. Each begins with the engine's launch line."""
    streams: list[list[str]] = []
    for line in SAMPLES.read_text().splitlines():
        if json.loads(line).get("type") == LAUNCH_MARKER:
            streams.append([])
        streams[-1].append(line)
    assert len(streams) == 5
    return streams


def parse(lines: list[str]) -> list[EngineEvent]:
    eng = ClaudeCodeEngine()
    return [e for line in lines for e in eng.parse_line(line)]


def of(events: list[EngineEvent], kind: str) -> list[dict]:
    return [e.data for e in events if e.kind == kind]


def test_a_recorded_start_becomes_events():
    start = sample_streams()[0]
    events = parse(start)
    chosen = json.loads(start[0])["session_id"]
    (session,) = of(events, "session")
    assert session["session_id"] == chosen and session["cwd"] == "/workspace"
    assert session["permission_mode"] == "dontAsk" and session["version"] == "2.1.332"
    assert [m["text"] for m in of(events, "message")] == [
        "Writing the file.",
        "Made hello.txt and notes.txt; the other command was refused.",
    ]
    calls = of(events, "tool_call")
    assert [(c["name"], c["command"]) for c in calls] == [
        ("Bash", "echo hello > hello.txt"),
        ("Write", None),
        ("Bash", "touch forbidden.txt"),
    ]
    assert calls[1]["input"]["file_path"] == "/workspace/notes.txt"
    assert all(uuid.UUID(c["uuid"]) for c in calls)  # where a fork could cut the conversation
    results = of(events, "tool_result")
    assert [r["id"] for r in results] == [c["id"] for c in calls]
    assert [r["is_error"] for r in results] == [False, False, True]
    assert "refused by the test gate" in results[2]["output"]
    assert of(events, "file_edit") == [
        {"path": "/workspace/notes.txt", "id": calls[1]["id"], "change": "create"}
    ]
    (usage,) = of(events, "usage")
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0 and usage["cost_usd"] > 0
    (result,) = of(events, "result")
    assert result["ok"] and result["num_turns"] == 4 and result["subtype"] == "success"
    assert result["result"].startswith("Made hello.txt")
    assert not of(events, "error")


def test_recorded_continue_and_fork_report_their_sessions():
    start, cont, fork, _, _ = sample_streams()
    first = json.loads(start[0])["session_id"]
    assert [s["session_id"] for s in of(parse(cont), "session")] == [first]
    forked = parse(fork)
    (session,) = of(forked, "session")
    assert session["session_id"] == json.loads(fork[0])["session_id"] != first
    assert not of(forked, "error") and of(forked, "result")[0]["ok"]


def test_a_fork_that_keeps_its_parents_id_is_an_error():
    _, _, fork, _, _ = sample_streams()
    marker = json.loads(fork[0])
    same = [line.replace(marker["session_id"], marker["parent_session_id"]) for line in fork]
    same[0] = fork[0]
    events = parse(same)
    assert of(events, "session")[0]["session_id"] == marker["parent_session_id"]
    (error,) = of(events, "error")
    assert error["fatal"] and "parent's session id" in error["message"]


def test_a_recorded_failed_resume_is_an_error_result():
    failed = sample_streams()[3]
    events = parse(failed)
    (result,) = of(events, "result")
    assert not result["ok"] and result["subtype"] == "error_during_execution"
    (error,) = of(events, "error")
    assert error["fatal"] and "No conversation found" in error["message"]


def test_a_gate_that_did_not_answer_refuses_and_says_so():
    events = parse(sample_streams()[4])
    notices = [m for m in of(events, "message") if m["role"] == "system"]
    assert [n["tag"] for n in notices] == ["hook_no_verdict"]
    (refused,) = of(events, "tool_result")
    assert refused["is_error"] and "denied" in refused["output"]
    assert of(events, "result")[0]["ok"]


def test_retries_against_an_unreachable_model_server_are_told():
    # As Claude Code printed it when the sandbox could not reach the model server.
    line = (
        '{"type":"system","subtype":"api_retry","attempt":5,"max_retries":10,'
        '"retry_delay_ms":8900,"error_status":null,"error":"unknown",'
        '"session_id":"b487bba5-5e68-419d-a0af-589c5891d5e5",'
        '"uuid":"3099f18e-21b1-4095-bf1d-cae1e93958be"}'
    )
    events = ClaudeCodeEngine().parse_line(line)
    assert [e.kind for e in events] == ["session", "message"]
    assert events[1].data["tag"] == "api_retry"
    assert events[1].data["text"] == (
        "the model server did not answer (unknown); retry 5 of 10 in 8.9 s"
    )


def test_lines_that_are_not_stream_json_are_ignored():
    eng = ClaudeCodeEngine()
    for line in ("", "hello", "[1, 2]", "{not json", '"text"', '{"type": "keep_alive"}'):
        assert eng.parse_line(line) == []
    # A session id is reported once per change, not on every line.
    line = json.dumps({"type": "assistant", "session_id": PARENT, "message": {"content": []}})
    assert [e.kind for e in eng.parse_line(line)] == ["session"]
    assert eng.parse_line(line) == []
    assert eng.parse_line(json.dumps({"type": "result", "session_id": "nope", "is_error": False}))
