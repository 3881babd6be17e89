"""The Codex engine without Codex: its command per mode, the files it writes into the engine home,
what it mounts and checks, native-resume checks, and parsing lines the real CLI printed
(tests/agents/samples/codex-exec.jsonl, recorded by tests/agents/record_codex_samples.py)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from core.engines import engine_for
from core.engines.base import (
    MODE_CONTINUE,
    MODE_FALLBACK,
    MODE_FORK,
    MODE_START,
    EngineSettings,
    LaunchContext,
)
from core.engines.capabilities import Probe
from core.engines.codex import (
    BINARY_IN_SANDBOX,
    HOOK_TIMEOUT_S,
    MOUNT_POINT,
    TESTED_VERSION,
    CodexEngine,
    hook_command,
    is_thread_id,
    unwrap_shell,
)
from core.errors import InputError
from tests.unit.fake_installs import native

SAMPLES = Path(__file__).resolve().parents[1] / "agents" / "samples" / "codex-exec.jsonl"
THREAD = "01a22bbc-2f53-7aa3-ad22-6f047db6bc13"
OTHER_THREAD = "01a22bb9-b057-7e63-99dd-9fedf3f1a412"
GATE = ["python3", "/cairn/tools/approval-gate.py", "--mailbox", "/cairn/runs/run-1/approvals"]


def make_ctx(
    tmp_path: Path,
    mode: str = MODE_START,
    *,
    prompt: str = "Fix the login test",
    session_id: str | None = None,
    gate: list[str] | None = None,
    settings: EngineSettings | None = None,
) -> LaunchContext:
    return LaunchContext(
        run_id="run-1",
        mode=mode,
        prompt=prompt,
        spec={"prompt": prompt},
        settings=settings or EngineSettings(base_url="http://127.0.0.1:8123/v1"),
        host_run_dir=tmp_path / "runs" / "run-1",
        sandbox_run_dir="/cairn/runs/run-1",
        host_home=tmp_path / "home",
        sandbox_home="/home/agent",
        session_id=session_id,
        gate=list(gate or []),
    )


def codex_args(argv: list[str]) -> list[str]:
    """The `codex exec …` part of a launch command (after the stdin-redirecting sh -c)."""
    assert argv[:3] == ["sh", "-c", 'exec "$0" "$@" < /dev/null'], argv
    return argv[3:]


def test_the_registry_knows_codex_and_it_keeps_sessions():
    engine = engine_for("codex")
    assert isinstance(engine, CodexEngine) and engine.has_sessions


# -- commands ------------------------------------------------------------------------------------


def test_start_runs_exec_unattended_with_stdin_from_dev_null(tmp_path):
    args = codex_args(CodexEngine().launch_argv(make_ctx(tmp_path)))
    assert args == [
        BINARY_IN_SANDBOX,
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--cd",
        "/workspace",
        "--",
        "Fix the login test",
    ]


def test_the_redirection_really_gives_codex_an_empty_stdin(tmp_path):
    argv = CodexEngine().launch_argv(make_ctx(tmp_path))
    argv[3:] = ["sh", "-c", "cat; echo end"]
    out = subprocess.run(argv, input="should not be read", capture_output=True, text=True)
    assert out.stdout == "end\n"


def test_continue_resumes_the_thread_by_id(tmp_path):
    args = codex_args(
        CodexEngine().launch_argv(
            make_ctx(tmp_path, MODE_CONTINUE, prompt="And now the docs", session_id=THREAD)
        )
    )
    assert args[-5:] == ["/workspace", "resume", THREAD, "--", "And now the docs"]
    assert args.index("--json") < args.index("resume")  # exec's options come before the subcommand


def test_fork_forks_the_thread_by_id(tmp_path):
    args = codex_args(
        CodexEngine().launch_argv(
            make_ctx(tmp_path, MODE_FORK, prompt="Try another way", session_id=THREAD)
        )
    )
    assert args[-4:] == ["fork", THREAD, "--", "Try another way"]


def test_fallback_starts_a_new_thread_on_the_same_files(tmp_path):
    engine = CodexEngine()
    fallback = engine.launch_argv(make_ctx(tmp_path, MODE_FALLBACK, session_id=THREAD))
    assert fallback == engine.launch_argv(make_ctx(tmp_path))
    assert THREAD not in fallback


def test_a_message_that_looks_like_an_option_stays_a_message(tmp_path):
    args = codex_args(CodexEngine().launch_argv(make_ctx(tmp_path, prompt="--help me")))
    assert args[-2:] == ["--", "--help me"]


@pytest.mark.parametrize("mode", [MODE_CONTINUE, MODE_FORK])
@pytest.mark.parametrize("session_id", [None, "not-a-thread", "../../etc/passwd"])
def test_continue_and_fork_need_a_real_thread_id(tmp_path, mode, session_id):
    with pytest.raises(InputError, match="thread"):
        CodexEngine().launch_argv(make_ctx(tmp_path, mode, session_id=session_id))


def test_with_a_gate_hooks_run_without_a_persisted_trust(tmp_path):
    args = codex_args(CodexEngine().launch_argv(make_ctx(tmp_path, gate=GATE)))
    assert "--dangerously-bypass-hook-trust" in args
    assert "--dangerously-bypass-hook-trust" not in CodexEngine().launch_argv(make_ctx(tmp_path))


def test_environment_points_codex_at_its_home_and_carries_no_secret(tmp_path):
    env = CodexEngine().environment(make_ctx(tmp_path))
    assert env["CODEX_HOME"] == "/home/agent/.codex" and env["HOME"] == "/home/agent"
    assert "OPENAI_API_KEY" not in env


# -- files in the engine home ----------------------------------------------------------------------


def test_prepare_writes_config_toml_for_cairns_provider(tmp_path):
    ctx = make_ctx(
        tmp_path,
        settings=EngineSettings(base_url="http://127.0.0.1:8123/v1", api_key_secret="openai-key"),
    )
    CodexEngine().prepare(ctx)
    text = (tmp_path / "home" / ".codex" / "config.toml").read_text()
    config = tomllib.loads(text)
    assert config["model"] == "gpt-5.5" and config["model_provider"] == "cairn"
    provider = config["model_providers"]["cairn"]
    assert provider["base_url"] == "http://127.0.0.1:8123/v1"
    assert provider["env_key"] == "OPENAI_API_KEY" and provider["wire_api"] == "responses"
    assert provider["name"]
    assert "openai-key" not in text  # a secret's name is not needed there, its value never is


def test_the_model_and_odd_characters_come_through_as_valid_toml(tmp_path):
    settings = EngineSettings(base_url='http://h:1/v1?q="x"\\', model="o3-ü")
    CodexEngine().prepare(make_ctx(tmp_path, settings=settings))
    config = tomllib.loads((tmp_path / "home" / ".codex" / "config.toml").read_text())
    assert config["model"] == "o3-ü"
    assert config["model_providers"]["cairn"]["base_url"] == 'http://h:1/v1?q="x"\\'


def test_prepare_rewrites_the_config_with_the_current_settings(tmp_path):
    engine = CodexEngine()
    engine.prepare(make_ctx(tmp_path))
    engine.prepare(make_ctx(tmp_path, settings=EngineSettings(base_url="http://127.0.0.1:9/v1")))
    config = tomllib.loads((tmp_path / "home" / ".codex" / "config.toml").read_text())
    assert config["model_providers"]["cairn"]["base_url"] == "http://127.0.0.1:9/v1"


def test_prepare_writes_a_pretooluse_hook_running_the_gate(tmp_path):
    CodexEngine().prepare(make_ctx(tmp_path, gate=GATE))
    hooks = json.loads((tmp_path / "home" / ".codex" / "hooks.json").read_text())
    (entry,) = hooks["hooks"]["PreToolUse"]
    assert entry["matcher"] == "Bash"  # Codex's name for its shell tool in hooks
    (hook,) = entry["hooks"]
    assert hook["type"] == "command" and hook["timeout"] == HOOK_TIMEOUT_S
    assert hook["command"].startswith(
        "python3 /cairn/tools/approval-gate.py --mailbox /cairn/runs/run-1/approvals --codex-hook "
    )


def test_without_a_gate_no_hook_is_left_behind(tmp_path):
    engine = CodexEngine()
    engine.prepare(make_ctx(tmp_path, gate=GATE))
    engine.prepare(make_ctx(tmp_path))
    assert not (tmp_path / "home" / ".codex" / "hooks.json").exists()


@pytest.mark.parametrize(
    "gate_script, exit_code",
    [
        ("exit 0", 0),  # allow
        ("exit 2", 2),  # refuse
        ("exit 1", 2),  # a crash refuses: Codex would let the command run
        ("kill -9 $$", 2),  # so does a killed gate
    ],
)
def test_the_hook_fails_closed(tmp_path, gate_script, exit_code):
    gate = tmp_path / "gate.sh"
    gate.write_text(f"#!/bin/sh\ncat > /dev/null\n{gate_script}\n")
    gate.chmod(0o755)
    done = subprocess.run(
        ["sh", "-c", hook_command([str(gate)])], input="{}", capture_output=True, text=True
    )
    assert done.returncode == exit_code
    assert ("approval gate failed" in done.stderr) == (gate_script not in ("exit 0", "exit 2"))


def test_a_missing_gate_refuses_and_a_decision_on_stdout_passes_through(tmp_path):
    missing = subprocess.run(
        ["sh", "-c", hook_command([str(tmp_path / "nope")])], capture_output=True, text=True
    )
    assert missing.returncode == 2
    decision = '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny"}}'
    gate = tmp_path / "gate.sh"
    gate.write_text(f"#!/bin/sh\necho '{decision}'\n")
    gate.chmod(0o755)
    said = subprocess.run(["sh", "-c", hook_command([str(gate)])], capture_output=True, text=True)
    assert said.returncode == 0 and said.stdout.strip() == decision


# -- binary, tools, versions -------------------------------------------------------------------------


def test_the_codex_package_folder_is_mounted_so_its_helpers_come_along(tmp_path):
    package = tmp_path / "vendor" / "x86_64-unknown-linux-musl"
    native(package / "bin" / "codex", {})
    (package / "codex-package.json").write_text("{}")
    engine = CodexEngine()
    assert engine.mounts(EngineSettings(binary=str(package / "bin" / "codex"))) == [
        (package, MOUNT_POINT)
    ]
    lone = native(tmp_path / "codex", {})
    assert engine.mounts(EngineSettings(binary=str(lone))) == [(lone, BINARY_IN_SANDBOX)]
    assert engine.mounts(EngineSettings()) == []


def test_tool_probe_asks_the_mounted_binary_for_its_version():
    probe = CodexEngine().tool_probe(EngineSettings(binary="/x/codex"))
    assert probe["codex"] == [BINARY_IN_SANDBOX, "--version"]
    assert "bash" in probe  # Codex runs commands with bash -lc


def _binary(tmp_path: Path) -> str:
    return str(native(tmp_path / "codex", {}))


def _probe(settings: EngineSettings, version: str = TESTED_VERSION, **more) -> Probe:
    return Probe(Path(settings.binary or "/x"), version, **more)


def test_check_version_accepts_any_version_with_every_feature(tmp_path):
    settings = EngineSettings(binary=_binary(tmp_path))
    found = {"codex": f"codex-cli {TESTED_VERSION}", "bash": "bash 5.2.15(1)-release"}
    assert CodexEngine().check_version(settings, found, _probe(settings)) is None
    older = {**found, "codex": "codex-cli 0.160.0"}
    assert CodexEngine().check_version(settings, older, _probe(settings, "0.160.0")) is None


@pytest.mark.parametrize(
    "settings, found, missing, words",
    [
        (EngineSettings(), {}, (), "npm install -g @openai/codex"),
        (EngineSettings(binary="/nowhere/codex"), {}, (), "does not exist"),
        (None, {"codex": "missing"}, (), "did not answer --version"),
        (None, {"codex": "codex-cli 0.170.2", "bash": "bash 5"}, (), "but"),
        (None, {"codex": f"codex-cli {TESTED_VERSION}", "bash": "b"}, ("exec fork",), "lacks"),
        (None, {"codex": "codex-cli", "bash": "bash 5"}, (), "cannot tell"),
        (None, {"codex": f"codex-cli {TESTED_VERSION}", "bash": "missing"}, (), "no bash"),
    ],
)
def test_check_version_says_what_is_wrong(tmp_path, settings, found, missing, words):
    settings = settings or EngineSettings(binary=_binary(tmp_path))
    reason = CodexEngine().check_version(settings, found, _probe(settings, missing=missing))
    assert reason and words in reason


def test_a_version_pinned_in_settings_is_accepted(tmp_path):
    settings = EngineSettings(binary=_binary(tmp_path), version="0.172.0")
    found = {"codex": "codex-cli 0.172.0", "bash": "bash 5"}
    assert CodexEngine().check_version(settings, found, _probe(settings, "0.172.0")) is None
    found["codex"] = f"codex-cli {TESTED_VERSION}"
    assert "pin 0.172.0" in CodexEngine().check_version(settings, found, _probe(settings))


# -- native resume -----------------------------------------------------------------------------------


def write_rollout(home: Path, thread_id: str, cwd: str, day: str = "2026/11/30") -> Path:
    folder = home / ".codex" / "sessions" / day
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rollout-2026-11-30T09-11-58-{thread_id}.jsonl"
    meta = {
        "timestamp": "2026-11-30T09:11:58.000Z",
        "ordinal": 0,
        "type": "session_meta",
        "payload": {
            "session_id": thread_id,
            "id": thread_id,
            "cwd": cwd,
            "originator": "codex_exec",
            "cli_version": TESTED_VERSION,
        },
    }
    path.write_text(json.dumps(meta) + "\n")
    return path


def test_a_recorded_thread_in_the_same_workspace_resumes_natively(tmp_path):
    write_rollout(tmp_path / "home", THREAD, "/workspace", day="2026/12/01")
    check = CodexEngine().native_resume_check(make_ctx(tmp_path, MODE_CONTINUE, session_id=THREAD))
    assert check.ok, check.reason


@pytest.mark.parametrize(
    "session_id, words",
    [
        (None, "no Codex thread id"),
        ("abc", "not a Codex thread id"),
        (OTHER_THREAD, "not in"),
    ],
)
def test_native_resume_needs_a_known_thread_with_its_record(tmp_path, session_id, words):
    write_rollout(tmp_path / "home", THREAD, "/workspace")
    check = CodexEngine().native_resume_check(
        make_ctx(tmp_path, MODE_CONTINUE, session_id=session_id)
    )
    assert not check.ok and words in check.reason


def test_native_resume_needs_the_same_workspace_path(tmp_path):
    write_rollout(tmp_path / "home", THREAD, "/home/me/project")
    check = CodexEngine().native_resume_check(make_ctx(tmp_path, MODE_CONTINUE, session_id=THREAD))
    assert not check.ok and "/home/me/project" in check.reason and "/workspace" in check.reason


def test_native_resume_refuses_an_unreadable_record(tmp_path):
    write_rollout(tmp_path / "home", THREAD, "/workspace").write_text("not json\n")
    check = CodexEngine().native_resume_check(make_ctx(tmp_path, MODE_CONTINUE, session_id=THREAD))
    assert not check.ok and "cannot be read" in check.reason


# -- output -----------------------------------------------------------------------------------------


def sample_events() -> list:
    engine = CodexEngine()
    return [event for line in SAMPLES.read_text().splitlines() for event in engine.parse_line(line)]


def test_the_first_line_names_the_thread():
    first = SAMPLES.read_text().splitlines()[0]
    (event,) = CodexEngine().parse_line(first)
    assert event.kind == "session" and is_thread_id(event.data["session_id"])


def test_commands_become_tool_calls_and_results_with_the_models_command():
    events = sample_events()
    calls = [e.data for e in events if e.kind == "tool_call"]
    results = [e.data for e in events if e.kind == "tool_result"]
    assert [c["command"] for c in calls] == ["echo hello > hello.txt && cat hello.txt", "exit 3"]
    assert calls[0]["shell_command"].startswith("/bin/bash -lc ")
    assert [(r["command"], r["exit_code"], r["output"]) for r in results] == [
        ("echo hello > hello.txt && cat hello.txt", 0, "hello\n"),
        ("exit 3", 3, ""),
    ]
    assert results[1]["status"] == "failed"


def test_patches_become_file_edits_and_replies_messages():
    events = sample_events()
    (edit,) = [e.data for e in events if e.kind == "file_edit"]
    assert edit["changes"][0]["kind"] == "add" and edit["changes"][0]["path"].endswith("/notes.md")
    messages = [e.data["text"] for e in events if e.kind == "message"]
    assert messages == ["I wrote hello.txt and notes.md.", "Still here."]


def test_each_turn_ends_with_usage_and_a_result():
    events = sample_events()
    usage = [e.data for e in events if e.kind == "usage"]
    assert usage[0]["input_tokens"] == 400 and usage[0]["output_tokens"] == 40
    results = [e.data for e in events if e.kind == "result"]
    assert [r["ok"] for r in results] == [True, True, False]
    assert results[-1]["error"] == "The model `gpt-5.5` does not exist."


def test_the_hook_trust_notice_is_not_reported_as_an_error_but_server_errors_are():
    errors = [e.data for e in sample_events() if e.kind == "error"]
    assert [e["message"] for e in errors] == ["The model `gpt-5.5` does not exist."]
    assert not any("hook-trust" in e["message"] for e in errors)


def test_every_thread_started_line_repeats_the_id_on_resume():
    sessions = [e.data["session_id"] for e in sample_events() if e.kind == "session"]
    assert len(sessions) == 3 and len(set(sessions)) == 1


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Reading additional input from stdin...",
        "[1, 2]",
        "{",
        '{"type": "turn.started"}',
        '{"type": "item.completed"}',
    ],
)
def test_other_lines_give_nothing(line):
    assert CodexEngine().parse_line(line) == []


def test_validate_needs_a_message():
    engine = CodexEngine()
    assert engine.validate({"prompt": "go"})["prompt"] == "go"
    for spec in ({}, {"prompt": "  "}, {"commands": ["ls"]}):
        with pytest.raises(InputError, match="message"):
            engine.validate(spec)
    with pytest.raises(InputError, match="thread id"):
        engine.validate({"prompt": "go", "mode": MODE_FORK, "session_id": "x"})


@pytest.mark.parametrize(
    "raw, command",
    [
        ("/bin/bash -lc 'echo hi'", "echo hi"),
        ("bash -c 'a && b'", "a && b"),
        ("ls -la", "ls -la"),
        ("/bin/bash -lc 'unterminated", "/bin/bash -lc 'unterminated"),
    ],
)
def test_unwrap_shell(raw, command):
    assert unwrap_shell(raw) == command


def test_the_home_files_are_what_prepare_writes_or_removes(tmp_path):
    engine = CodexEngine()
    home = tmp_path / "home"
    for gate in (GATE, []):
        ctx = make_ctx(tmp_path, gate=gate)
        before = {p for p in home.rglob("*") if p.is_file()} if home.exists() else set()
        engine.prepare(ctx)
        after = {p for p in home.rglob("*") if p.is_file()}
        named = {home / rel for rel in engine.home_files(ctx)}
        # Everything prepare wrote or removed is named, so a home elsewhere gets the same.
        assert after ^ before <= named and after - before <= named, (before, after)
        assert (home / ".codex" / "config.toml") in named
    assert not (home / ".codex" / "hooks.json").exists()  # the ungated launch removed it
