"""The Claude Code engine: Anthropic's `claude` CLI run unattended (`-p`, stream-json) in the
sandbox.

Owns Claude Code's launch files (the run's settings.json with the approval gate as a PreToolUse
hook), its command per mode (a new session with an id chosen here, `--resume`, `--resume
--fork-session`), the check that a session can be resumed natively from the engine home, and
turning its stream-json output into engine events. The API key, the network policy and judging
commands belong to credentials, the sandbox and approvals.

Facts this module relies on (Claude Code 2.1.332; 2.1.197 has every flag used here too):
- A session lives in
  `$HOME/.claude/projects/<cwd, every non-alphanumeric character as ->/<id>.jsonl`;
  `--resume ID` needs that file and the same cwd. `--fork-session` copies the history into a new
  session whose id `--session-id` may choose. An id already in use is refused.
- `--resume-session-at UUID` (not in --help) cuts the resumed conversation after the message
  whose transcript line carries that `uuid` (an assistant message, or the user message holding
  a tool's result); with --fork-session it forks from that point. An assistant message whose
  tool call has no result yet gets a stand-in result saying it is missing.
- Settings files that fail validation are ignored silently in `-p` mode, and user and project
  settings (the agent can write ~/.claude, the repository can ship .claude/) may switch hooks off.
  So only Cairn's own settings file is loaded (`--setting-sources ""`).
- A PreToolUse hook that times out or fails lets the tool run under
  `--dangerously-skip-permissions`. With a gate, the run uses `--permission-mode dontAsk`
  instead, where only the hook's explicit "allow" lets a tool run: a gate that crashes, hangs or
  is not loaded refuses.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import stat
import uuid
from pathlib import Path
from typing import Any

from core.engines import native
from core.engines.base import (
    MODE_CONTINUE,
    MODE_FALLBACK,
    MODE_FORK,
    MODE_START,
    MODES,
    CredentialKind,
    Engine,
    EngineEvent,
    EngineSettings,
    LaunchContext,
    ResumeCheck,
    json_object,
    object_field,
)
from core.engines.capabilities import Feature, Probe, choice, flag, hidden_flag
from core.errors import InputError
from core.safe_fs import write_file

# The release this module was last checked against. Any release with every feature in FEATURES
# runs (another one with a note); settings may pin an exact version (`engines.claude-code.version`).
TESTED_VERSION = "2.1.332"
NPM_PACKAGE = "@anthropic-ai/claude-code"
# What claude_argv and the launch files rely on, as the CLI's own help shows it.
FEATURES: tuple[Feature, ...] = (
    flag("--print"),
    choice("--output-format", "stream-json"),
    flag("--verbose"),
    flag("--session-id"),
    flag("--resume"),
    flag("--fork-session"),
    hidden_flag("--resume-session-at"),
    flag("--append-system-prompt"),
    flag("--settings"),
    flag("--setting-sources"),
    choice("--permission-mode", "dontAsk"),
    flag("--dangerously-skip-permissions"),
    flag("--model"),
)

MOUNT_POINT = "/cairn/engines"
BINARY_IN_SANDBOX = f"{MOUNT_POINT}/claude"
API_KEY_ENV = "ANTHROPIC_API_KEY"  # filled from a credential grant at each exec, never a file

SETTINGS_FILE = "settings.json"  # in the attempt's folder, passed with --settings
LAUNCH_FILE = "claude-launch.json"  # in the attempt's folder: the mode and the session ids chosen
LAUNCH_MARKER = "cairn_launch"  # the first stdout line of every attempt (see launch_argv)

# The gate waits for a person; the hook must wait longer than the gate ever does, or Claude Code
# gives up on it (which, under dontAsk, refuses the tool).
HOOK_MATCHER = "*"
HOOK_TIMEOUT_S = 24 * 3600
# Transcripts older than this are deleted when Claude Code starts (30 days by default); a task may
# be continued long after its last run.
KEEP_TRANSCRIPTS_DAYS = 36500

FALLBACK_NOTE = (
    "This task continues earlier work in this workspace whose conversation could not "
    "be restored ({reason}). The files in {workspace} are as that work left them; "
    "look at them before you change anything."
)
AT_REVISION_NOTE = (
    "This task continues earlier work from an older point of it, whose conversation could not "
    "be restored ({reason}). {files} Look at the files in {workspace} before you change anything."
)
# How far back from a transcript's end its conversation position is looked for: its last
# messages are at the end, and a transcript may be many megabytes.
POSITION_TAIL_BYTES = 1 << 20

# The allow answer the gate wrapper gives for a gate that exits 0 without printing a decision.
_ALLOW = json.dumps(
    {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "allowed by Cairn's approval gate",
        }
    }
)
# `sh -c` body around the gate: `$1` is the allow answer, the rest the gate's command. The gate's
# own decision (printed JSON, or exit 2 with a reason on stderr) passes through; a silent exit 0
# becomes an explicit allow; anything else (a crash, a missing gate) becomes a refusal. Short,
# because Claude Code quotes the whole command in the refusals the model reads.
_GATE_WRAPPER = (
    'a=$1; shift; o=$("$@"); r=$?; '
    'if [ $r -eq 0 ]; then printf "%s\\n" "${o:-$a}"; exit 0; fi; '
    '[ $r -eq 2 ] || echo "the approval gate failed (exit $r)" >&2; exit 2'
)

_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_NOT_FOUND = (
    "Claude Code was not found: install it with `npm install -g {package}` (or set "
    "engines.claude-code.binary to the `claude` executable)"
)


# -- sessions on disk ---------------------------------------------------------------------------


def is_session_id(value: Any) -> bool:
    """A session id as Claude Code writes it: a canonical (lower-case, hyphenated) UUID."""
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def project_dir_name(cwd: str) -> str:
    """The folder under ~/.claude/projects that holds the sessions started in `cwd`."""
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def transcript_path(home: Path, cwd: str, session_id: str) -> Path:
    return Path(home) / ".claude" / "projects" / project_dir_name(cwd) / f"{session_id}.jsonl"


def transcript_cwd(path: Path, *, max_lines: int = 200) -> str | None:
    """The working directory a transcript's entries were recorded in (the first one that says)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in itertools.islice(f, max_lines):
                entry = json_object(line)
                if entry is not None and isinstance(entry.get("cwd"), str):
                    return entry["cwd"]
    except OSError:
        return None
    return None


def is_position_entry(entry: dict[str, Any]) -> bool:
    """Whether a transcript line is a point the conversation can be cut after with
    `--resume-session-at`: an assistant message, or the user message that carries tool results
    (a person's own prompt is not: a cut after it would leave it unanswered). Side chains
    (subagents) and meta lines are not part of the main conversation."""
    if not is_session_id(entry.get("uuid")) or entry.get("isSidechain") or entry.get("isMeta"):
        return False
    if entry.get("type") == "assistant":
        return True
    if entry.get("type") != "user":
        return False
    content = object_field(entry, "message").get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


def last_position(path: Path, *, tail_bytes: int = POSITION_TAIL_BYTES) -> str | None:
    """The `uuid` of the transcript's last message the conversation can be cut after, or None
    (no transcript, or nothing in it yet). Only the file's tail is read; the engine home is the
    sandbox's to write, so only a regular file is read, never what a link or a pipe leads to."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        size = os.lseek(fd, 0, os.SEEK_END)
        os.lseek(fd, max(0, size - tail_bytes), os.SEEK_SET)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(tail_bytes)
    except OSError:
        return None
    finally:
        os.close(fd)
    lines = data.decode("utf-8", errors="replace").splitlines()
    if len(data) < size and lines:
        lines = lines[1:]  # the first line of a tail may be cut
    for line in reversed(lines):
        entry = json_object(line)
        if entry is not None and is_position_entry(entry):
            return entry["uuid"]
    return None


def launched_session(run_dir: Path) -> str | None:
    """The session id an attempt was prepared with (its launch file), or None."""
    try:
        record = json.loads((Path(run_dir) / LAUNCH_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    session_id = record.get("session_id") if isinstance(record, dict) else None
    return session_id if is_session_id(session_id) else None


def _find_elsewhere(home: Path, session_id: str) -> Path | None:
    projects = Path(home) / ".claude" / "projects"
    found = sorted(projects.glob(f"*/{session_id}.jsonl")) if projects.is_dir() else []
    return found[0] if found else None


# -- launch files -------------------------------------------------------------------------------


def hook_command(gate: list[str]) -> str:
    """The PreToolUse hook's shell command: the gate, wrapped so that only its decision counts."""
    return " ".join(
        [
            "sh",
            "-c",
            shlex.quote(_GATE_WRAPPER),
            "cairn-gate",
            shlex.quote(_ALLOW),
            shlex.join([*gate, "--claude-hook"]),
        ]
    )


def render_settings(gate: list[str]) -> dict[str, Any]:
    """The run's settings file. Hooks are taken in once, when Claude Code starts."""
    settings: dict[str, Any] = {
        "disableAllHooks": False,
        "cleanupPeriodDays": KEEP_TRANSCRIPTS_DAYS,
    }
    if gate:
        settings["hooks"] = {
            "PreToolUse": [
                {
                    "matcher": HOOK_MATCHER,
                    "hooks": [
                        {
                            "type": "command",
                            "command": hook_command(gate),
                            "timeout": HOOK_TIMEOUT_S,
                        }
                    ],
                }
            ]
        }
    return settings


OAUTH_TOKEN_ENV = "CLAUDE_CODE_OAUTH_TOKEN"
DEFAULT_BASE_URL = "https://api.anthropic.com"
CREDENTIAL_KINDS = (
    CredentialKind(
        "oauth-token",
        "Claude subscription (long-lived token)",
        secret=OAUTH_TOKEN_ENV,
        env=OAUTH_TOKEN_ENV,
        header="authorization",
        template="Bearer {}",
        placeholder="sk-ant-oat01-cairn-placeholder-not-a-token",
        prefix="sk-ant-oat01-",
        how="run `claude setup-token` and paste the sk-ant-oat01-… token it prints",
    ),
    CredentialKind(
        "api-key",
        "Anthropic API key",
        secret=API_KEY_ENV,
        env=API_KEY_ENV,
        header="x-api-key",
        template="{}",
        placeholder="sk-ant-api03-cairn-placeholder-not-a-key",
        prefix="sk-ant-api",
        how="create a key in the Anthropic Console (console.anthropic.com ▸ API keys)",
    ),
)


class ClaudeCodeEngine(Engine):
    name = "claude-code"
    label = "Claude Code"
    command = "claude"
    npm_package = NPM_PACKAGE
    tested_version = TESTED_VERSION
    has_sessions = True
    has_tool_hooks = True
    api_key_env = API_KEY_ENV
    credential_kinds = CREDENTIAL_KINDS
    default_base_url = DEFAULT_BASE_URL
    #: A fork can start from any recorded conversation position (`--resume-session-at`).
    forks_at_position = True

    def __init__(self) -> None:
        # What the attempt's first stdout line said, so a fork that kept its parent's id is caught
        # in the stream itself; and the last session id reported, so each change is told once.
        self._launch: dict[str, Any] = {}
        self._reported_session: str | None = None

    # -- spec and files -----------------------------------------------------------------------

    def validate(self, spec: dict) -> dict:
        if spec.get("commands"):
            raise InputError("the claude-code engine takes a message (-m TEXT), not commands")
        prompt = spec.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(
                "the claude-code engine needs a message (-m TEXT) to send to Claude Code"
            )
        mode = spec.get("mode", MODE_START)
        if mode not in MODES:
            raise InputError(f"unknown engine mode {mode!r} (use one of {', '.join(MODES)})")
        session_id = spec.get("session_id")
        if session_id is not None and not is_session_id(session_id):
            raise InputError(f"{session_id!r} is not a Claude Code session id")
        resume_at = spec.get("resume_at")
        if resume_at is not None and not is_session_id(resume_at):
            raise InputError(f"{resume_at!r} is not the uuid of a Claude Code message")
        return {**spec, "prompt": prompt, "mode": mode}

    def prepare(self, ctx: LaunchContext) -> None:
        """The attempt's settings file and the session ids it uses (a new one for start, fork
        and fallback, chosen here so it is known before Claude Code prints anything)."""
        folder = Path(ctx.host_run_dir)
        if ctx.mode not in MODES:
            raise InputError(f"unknown engine mode {ctx.mode!r}")
        if ctx.mode in (MODE_CONTINUE, MODE_FORK) and not is_session_id(ctx.session_id):
            raise InputError(
                f"cannot {ctx.mode} a Claude Code session without its id (got {ctx.session_id!r})"
            )
        launch = {
            "type": LAUNCH_MARKER,
            "engine": self.name,
            "mode": ctx.mode,
            "session_id": ctx.session_id if ctx.mode == MODE_CONTINUE else str(uuid.uuid4()),
            "parent_session_id": ctx.session_id if ctx.mode == MODE_FORK else None,
            "previous_session_id": ctx.session_id if ctx.mode == MODE_FALLBACK else None,
            "gated": bool(ctx.gate),
        }
        if ctx.mode == MODE_FALLBACK:
            reason = ctx.spec.get("fallback_reason") or "it was not found"
            files = ctx.spec.get("files_note")
            # With a files note the files are an older revision's, not where the work left them.
            launch["note"] = (
                AT_REVISION_NOTE.format(reason=reason, files=files, workspace=ctx.workspace)
                if files
                else FALLBACK_NOTE.format(reason=reason, workspace=ctx.workspace)
            )
        # The runs folder is writable from the sandbox: never follow a link planted there.
        write_file(
            folder.parent,
            f"{folder.name}/{SETTINGS_FILE}",
            json.dumps(render_settings(ctx.gate), indent=2) + "\n",
        )
        write_file(folder.parent, f"{folder.name}/{LAUNCH_FILE}", json.dumps(launch) + "\n")

    def launch_record(self, ctx: LaunchContext) -> dict[str, Any]:
        """What `prepare` chose for this attempt (mode, session id, parent)."""
        path = Path(ctx.host_run_dir) / LAUNCH_FILE
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(
                f"the claude-code engine was not prepared for run {ctx.run_id} ({path} is missing)"
            ) from None
        except ValueError as exc:
            raise InputError(f"{path} cannot be read: {exc}") from None
        if record.get("mode") != ctx.mode or not is_session_id(record.get("session_id")):
            raise InputError(f"{path} does not match this attempt; prepare it again")
        return record

    def session_id_for(self, ctx: LaunchContext) -> str:
        """The session this attempt runs in: the continued one, or the new one prepare chose."""
        return self.launch_record(ctx)["session_id"]

    # -- launching ----------------------------------------------------------------------------

    def claude_argv(self, ctx: LaunchContext) -> list[str]:
        """The `claude` command line for this attempt."""
        launch = self.launch_record(ctx)
        argv = [BINARY_IN_SANDBOX, "-p", ctx.prompt, "--output-format", "stream-json", "--verbose"]
        if ctx.mode == MODE_CONTINUE:
            argv += ["--resume", launch["session_id"]]
        elif ctx.mode == MODE_FORK:
            argv += [
                "--resume",
                launch["parent_session_id"],
                "--fork-session",
                "--session-id",
                launch["session_id"],
            ]
            if ctx.spec.get("resume_at"):
                # The fork's conversation ends at this assistant message (the `uuid` of its
                # stream line), e.g. the last one before the revision the files come from.
                argv += ["--resume-session-at", ctx.spec["resume_at"]]
        else:
            argv += ["--session-id", launch["session_id"]]
        if ctx.mode == MODE_FALLBACK:
            argv += ["--append-system-prompt", launch["note"]]
        argv += ["--settings", f"{ctx.sandbox_run_dir}/{SETTINGS_FILE}", "--setting-sources", ""]
        if ctx.gate:
            argv += ["--permission-mode", "dontAsk"]
        else:
            argv += ["--dangerously-skip-permissions"]
        if ctx.settings.model:
            argv += ["--model", ctx.settings.model]
        return argv

    def launch_argv(self, ctx: LaunchContext) -> list[str]:
        # The first stdout line says what this attempt is (its mode, the ids expected), so the
        # stream alone is enough to tell a fork that came back with its parent's id.
        marker = json.dumps(self.launch_record(ctx), separators=(",", ":"))
        return [
            "sh",
            "-c",
            'printf "%s\\n" "$1"; shift; exec "$@"',
            "cairn-claude-code",
            marker,
            *self.claude_argv(ctx),
        ]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        env = {
            "HOME": ctx.sandbox_home,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        if ctx.settings.base_url:
            env["ANTHROPIC_BASE_URL"] = ctx.settings.base_url
        return env

    def mounts(self, settings: EngineSettings) -> list[tuple[Path, str]]:
        if not settings.binary:
            return []  # check_version says so, with the fix
        # The native file itself, not a link, shim or node wrapper leading to it.
        return [(native.resolve_binary(self, settings.binary), BINARY_IN_SANDBOX)]

    # -- the program ----------------------------------------------------------------------------

    def features(self) -> tuple[Feature, ...]:
        return FEATURES

    def native_in_package(self, package: Path) -> Path | None:
        """bin/claude.exe once npm's postinstall has put the native binary there; else the
        platform package it comes from (@anthropic-ai/claude-code-linux-x64), beside or inside
        the package (a `--ignore-scripts` install, bun, pnpm)."""
        exe = package / "bin" / "claude.exe"
        if native.read_elf(exe) is not None:
            return exe
        version = (native.read_json(package / "package.json") or {}).get("version")
        found: list[Path] = []
        for suffix in ("", "-musl"):
            name = f"{NPM_PACKAGE}-linux-{native.host_arch()}{suffix}"
            for folder in native.package_candidates(package, name):
                binary = folder / "claude"
                if binary.is_file():
                    manifest = native.read_json(folder / "package.json") or {}
                    if manifest.get("version") == version:
                        return binary
                    found.append(binary)
        return found[0] if found else None

    def package_problem(self, package: Path, manifest: dict[str, Any]) -> str:
        bins = manifest.get("bin")
        entry = bins.get("claude") if isinstance(bins, dict) else bins
        if isinstance(entry, str) and entry.endswith(".js"):
            return (
                f"Claude Code {manifest.get('version')} at {package} is the Node.js build, and "
                f"the sandbox has no Node.js: install the native build with "
                f"`{self.install_hint()}`"
            )
        return (
            f"Claude Code at {package} has no native binary for linux-{native.host_arch()} "
            f"(its platform package is missing): reinstall it with `{self.install_hint()}`"
        )

    # -- tools --------------------------------------------------------------------------------

    def tool_probe(self, settings: EngineSettings) -> dict[str, list[str]]:
        return {
            "claude": [BINARY_IN_SANDBOX, "--version"],
            # Claude Code's Bash tool runs commands with bash.
            "bash": ["bash", "-c", 'echo "bash $BASH_VERSION"'],
        }

    def check_version(
        self, settings: EngineSettings, found: dict[str, str], probe: Probe | None = None
    ) -> str | None:
        if not settings.binary:
            return _NOT_FOUND.format(package=NPM_PACKAGE)
        resolved = native.resolve(Path(settings.binary), self)
        if resolved.binary is None:
            return f"the Claude Code binary {settings.binary} cannot be used: {resolved.problem}"
        reported = found.get("claude")
        if not reported or reported == "missing":
            return (
                f"Claude Code did not answer --version inside the sandbox (is "
                f"{resolved.binary} a Linux glibc build for this machine's architecture?)"
            )
        match = _VERSION_RE.search(reported)
        if not match:
            return f"cannot tell the Claude Code version from {reported!r}"
        version = match.group(0)
        problem = self.judge_sandbox_version(version, resolved.binary, probe, settings)
        if problem:
            return problem
        if found.get("bash") in (None, "missing"):
            return "the sandbox image has no bash; Claude Code's Bash tool needs it"
        return None

    # -- sessions -----------------------------------------------------------------------------

    def native_resume_check(self, ctx: LaunchContext) -> ResumeCheck:
        session_id = ctx.session_id
        if not session_id:
            return ResumeCheck(
                False,
                "no Claude Code session id was recorded for the earlier "
                "run (it may have ended before Claude Code started)",
            )
        if not is_session_id(session_id):
            return ResumeCheck(False, f"{session_id!r} is not a Claude Code session id")
        home = Path(ctx.host_home)
        if not home.is_dir():
            return ResumeCheck(False, f"the engine home {home} is missing")
        path = transcript_path(home, ctx.workspace, session_id)
        if not path.is_file():
            other = _find_elsewhere(home, session_id)
            if other is not None:
                cwd = transcript_cwd(other) or other.parent.name
                return ResumeCheck(
                    False,
                    f"Claude Code session {session_id} was recorded in "
                    f"{cwd!r}, not in {ctx.workspace!r}",
                )
            return ResumeCheck(
                False,
                f"the transcript of Claude Code session {session_id} is not "
                f"in the engine home (expected {path.relative_to(home)}; "
                f"the home was lost or cleaned)",
            )
        if path.stat().st_size == 0:
            return ResumeCheck(
                False, f"the transcript of Claude Code session {session_id} is empty"
            )
        recorded_cwd = transcript_cwd(path)
        if recorded_cwd is not None and recorded_cwd != ctx.workspace:
            return ResumeCheck(
                False,
                f"Claude Code session {session_id} worked in {recorded_cwd!r}, "
                f"not in {ctx.workspace!r}",
            )
        return ResumeCheck(
            True,
            f"Claude Code session {session_id} is recorded in "
            f"{path.relative_to(home)} and worked in {ctx.workspace}",
        )

    def conversation_files(self, home: Path, session_id: str, workspace: str) -> list[Path]:
        if not is_session_id(session_id):
            return []
        path = transcript_path(Path(home), workspace, session_id)
        return [path.relative_to(home)] if path.is_file() else []

    def conversation_position(
        self, home: Path, run_dir: Path, session_id: str | None, workspace: str = "/workspace"
    ) -> tuple[str, str] | None:
        """Where the conversation of an attempt stands now: (session id, the `uuid` of its last
        message a fork can resume at), from the transcript in the engine home; None when there is
        no session or nothing in it yet. The session is the one the attempt in `run_dir` was
        prepared with, else the one given."""
        session_id = launched_session(run_dir) or session_id
        if not is_session_id(session_id):
            return None
        assert session_id is not None
        message = last_position(transcript_path(Path(home), workspace, session_id))
        return (session_id, message) if message else None

    # -- output -------------------------------------------------------------------------------

    def parse_line(self, line: str) -> list[EngineEvent]:
        record = json_object(line)
        if record is None:
            return []
        kind = record.get("type")
        if kind == LAUNCH_MARKER:
            self._launch = record
            self._reported_session = None
            return []
        events = self._session_events(record)
        if kind == "system":
            events += _system_events(record)
        elif kind == "assistant":
            events += _assistant_events(record)
        elif kind == "user":
            events += _user_events(record)
        elif kind == "result":
            events += _result_events(record)
        return events

    def _session_events(self, record: dict) -> list[EngineEvent]:
        session_id = record.get("session_id")
        if not is_session_id(session_id) or session_id == self._reported_session:
            return []
        self._reported_session = session_id
        data: dict[str, Any] = {"session_id": session_id}
        if record.get("type") == "system" and record.get("subtype") == "init":
            data.update(
                cwd=record.get("cwd"),
                model=record.get("model"),
                version=record.get("claude_code_version"),
                permission_mode=record.get("permissionMode"),
            )
        events = [EngineEvent("session", data)]
        launch = self._launch
        if launch.get("mode") == MODE_FORK and session_id == launch.get("parent_session_id"):
            events.append(
                EngineEvent(
                    "error",
                    {
                        "message": "the fork came back with its parent's session id "
                        f"{session_id}; a fork must get a new session",
                        "fatal": True,
                    },
                )
            )
        return events


def _text(content: Any) -> str:
    """The text of a tool result's content: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _system_events(record: dict) -> list[EngineEvent]:
    subtype = record.get("subtype")
    if subtype == "informational" and isinstance(record.get("content"), str):
        return [
            EngineEvent(
                "message",
                {
                    "role": "system",
                    "text": record["content"],
                    "level": record.get("level"),
                    "tag": record.get("tag"),
                },
            )
        ]
    if subtype == "api_retry":
        # The model server did not answer; Claude Code waits and tries again on its own.
        delay = record.get("retry_delay_ms")
        text = (
            f"the model server did not answer ({record.get('error') or 'no reason given'}); "
            f"retry {record.get('attempt')} of {record.get('max_retries')}"
            + (f" in {delay / 1000:.1f} s" if isinstance(delay, (int, float)) else "")
        )
        return [
            EngineEvent(
                "message",
                {
                    "role": "system",
                    "text": text,
                    "level": "warning",
                    "tag": "api_retry",
                    "attempt": record.get("attempt"),
                },
            )
        ]
    return []


def _assistant_events(record: dict) -> list[EngineEvent]:
    message = object_field(record, "message")
    events = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and block.get("text"):
            events.append(
                EngineEvent(
                    "message",
                    {"role": "assistant", "text": block["text"], "uuid": record.get("uuid")},
                )
            )
        elif block.get("type") == "tool_use":
            tool_input = object_field(block, "input")
            data = {
                "id": block.get("id"),
                "name": block.get("name"),
                "input": tool_input,
                "command": tool_input.get("command") if block.get("name") == "Bash" else None,
                "uuid": record.get("uuid"),
            }
            if record.get("parent_tool_use_id"):
                data["parent_tool_use_id"] = record["parent_tool_use_id"]
            events.append(EngineEvent("tool_call", data))
    return events


def _user_events(record: dict) -> list[EngineEvent]:
    message = object_field(record, "message")
    content = message.get("content")
    if not isinstance(content, list):
        return []
    detail = record.get("tool_use_result")
    events = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        is_error = bool(block.get("is_error"))
        events.append(
            EngineEvent(
                "tool_result",
                {
                    "id": block.get("tool_use_id"),
                    "is_error": is_error,
                    "output": _text(block.get("content")),
                },
            )
        )
        # A file the agent wrote or edited, as Claude Code reports it once the tool ran.
        if not is_error and isinstance(detail, dict) and isinstance(detail.get("filePath"), str):
            events.append(
                EngineEvent(
                    "file_edit",
                    {
                        "path": detail["filePath"],
                        "id": block.get("tool_use_id"),
                        "change": detail.get("type") or "update",
                    },
                )
            )
    return events


def _result_events(record: dict) -> list[EngineEvent]:
    is_error = bool(record.get("is_error"))
    errors = [str(e) for e in record.get("errors") or [] if e]
    result = record.get("result") if isinstance(record.get("result"), str) else None
    events = []
    usage = _usage_of(record)
    if usage is not None:
        events.append(EngineEvent("usage", usage))
    events.append(
        EngineEvent(
            "result",
            {
                "ok": not is_error,
                "is_error": is_error,
                "subtype": record.get("subtype"),
                "result": result,
                "num_turns": record.get("num_turns"),
                "cost_usd": record.get("total_cost_usd"),
                "duration_ms": record.get("duration_ms"),
                "errors": errors,
            },
        )
    )
    if is_error:
        events.append(
            EngineEvent(
                "error",
                {
                    "message": "; ".join(errors)
                    or result
                    or f"Claude Code ended with {record.get('subtype') or 'an error'}",
                    "fatal": True,
                },
            )
        )
    return events


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _usage_of(record: dict) -> dict[str, Any] | None:
    """What one `result` record says the turn used: its `usage` (this turn's tokens) and its
    cost. `total_cost_usd` counts the whole engine session, earlier turns, resumes and the parent
    of a fork included, so the turn's own cost is the sum of `model_usage_since_last_result`
    when Claude Code reports it; older releases, whose total was the process's, report only
    the total."""
    usage = object_field(record, "usage")
    totals = {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
    session_cost = _number(record.get("total_cost_usd"))
    since = record.get("model_usage_since_last_result")
    by_model = since if isinstance(since, dict) else object_field(record, "modelUsage")
    costs = [_number(m.get("costUSD")) for m in by_model.values() if isinstance(m, dict)]
    # Present (even empty: a turn that made no model call) it is the turn's own figure.
    cost = sum(c for c in costs if c is not None) if isinstance(since, dict) else session_cost
    if not totals and cost is None:
        return None
    return {
        **totals,
        "cost_usd": cost,
        "session_cost_usd": session_cost,
        "models": sorted(str(m) for m in by_model),
        "tokens": {
            "input": totals.get("input_tokens", 0),
            "output": totals.get("output_tokens", 0),
            "cache_read": totals.get("cache_read_input_tokens", 0),
            "cache_write": totals.get("cache_creation_input_tokens", 0),
        },
    }
