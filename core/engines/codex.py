"""The Codex engine: OpenAI's Codex CLI (`codex exec`) run unattended inside Cairn's sandbox.

Owns Codex's files in the engine home ($CODEX_HOME: config.toml with Cairn's model provider,
hooks.json with the approval gate), its command per mode (start, `exec resume`, `exec fork`), the
check that a thread can be resumed natively, and turning its JSONL output into engine events.
The API key, the network policy and judging commands belong to credentials, the sandbox and
approvals.
"""

from __future__ import annotations

import json
import os
import re
import shlex
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
from core.engines.capabilities import Feature, Probe, flag, subcommand
from core.errors import InputError
from core.safe_fs import ensure_dir, write_file

# The release whose flags, files and JSONL output this module was last checked against. Any
# release with every feature in FEATURES runs (another one with a note); settings may pin an exact
# version (`engines.codex.version`).
TESTED_VERSION = "0.171.0"
NPM_PACKAGE = "@openai/codex"

CODEX_DIR = ".codex"  # CODEX_HOME, inside the engine home
MOUNT_POINT = "/cairn/engines/codex"  # the Codex package (or just its binary), read-only
BINARY_IN_SANDBOX = f"{MOUNT_POINT}/bin/codex"
PACKAGE_MANIFEST = "codex-package.json"  # marks the folder that holds bin/codex and its helpers

DEFAULT_MODEL = "gpt-5.5"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
PROVIDER_ID = "cairn"
API_KEY_ENV = "OPENAI_API_KEY"  # from a credential grant at each exec, never a file
# A ChatGPT sign-in (`codex login`) keeps a refresh token in auth.json that Codex itself must use
# and rotate: it cannot be carried into a sandbox without handing the sandbox that token.
CHATGPT_SIGN_IN_NOTE = (
    "Codex's ChatGPT sign-in keeps a refresh token that Codex must hold itself, so Cairn cannot "
    "use it without putting that token into the sandbox; sign Codex in with an OpenAI API key"
)
CREDENTIAL_KINDS = (
    CredentialKind(
        "api-key",
        "OpenAI API key",
        secret=API_KEY_ENV,
        env=API_KEY_ENV,
        header="authorization",
        template="Bearer {}",
        placeholder="sk-cairn-placeholder-not-a-key",
        prefix="sk-",
        how="create a key at platform.openai.com ▸ API keys",
    ),
)

# Codex runs the agent's commands itself. Its own sandbox and approval prompts are off: Cairn's
# sandbox and approval gate stand in for them, and nobody could answer a prompt (stdin is
# /dev/null). Without --skip-git-repo-check it refuses folders that are not git repositories.
UNATTENDED_FLAGS = ("--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox")
# Codex only runs hooks a person trusted (by their hash) unless this is given. Cairn writes the
# hooks file itself at every launch; project hooks under /workspace/.codex still do not run (the
# workspace is never marked trusted).
HOOK_TRUST_FLAG = "--dangerously-bypass-hook-trust"
HOOK_TRUST_NOTICE = "`--dangerously-bypass-hook-trust` is enabled"

_EXEC_HELP = ("exec", "--help")
# What exec_args relies on, as the CLI's own help shows it. The hook-trust flag also says the
# release runs PreToolUse hooks from hooks.json, which the approval gate needs.
FEATURES: tuple[Feature, ...] = (
    subcommand(["exec"]),
    subcommand(["exec", "resume"]),
    subcommand(["exec", "fork"]),
    *(flag(f, args=_EXEC_HELP) for f in UNATTENDED_FLAGS),
    flag(HOOK_TRUST_FLAG, args=_EXEC_HELP),
    flag("--cd", args=_EXEC_HELP),
)

# Codex calls its shell tool `Bash` in hooks. A hook that times out or exits with anything but 0
# or 2 lets the command run, so the gate's failures are turned into a refusal (exit 2) here and the
# timeout is far beyond the gate's own wait for a decision.
HOOK_MATCHER = "Bash"
HOOK_TIMEOUT_S = 24 * 3600
HOOKS_FILE = "hooks.json"
CONFIG_FILE = "config.toml"

_THREAD_ID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    r"[0-9a-fA-F]{12}$"
)
_VERSION_RE = re.compile(r"(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?)")
_SHELLS = ("bash", "sh", "zsh", "dash")


def is_thread_id(value: str | None) -> bool:
    return bool(value) and bool(_THREAD_ID_RE.match(value or ""))


def _toml_string(value: str) -> str:
    # A JSON string with only ASCII escapes is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=True)


def render_config(settings: EngineSettings) -> str:
    """config.toml: Cairn's provider at the configured endpoint; the key comes from the env."""
    lines = [
        "# Written by Cairn at every launch; edits here are replaced. The API key is never stored:",
        f"# Codex reads it from ${API_KEY_ENV}, which Cairn injects into each run.",
        f"model = {_toml_string(settings.model or DEFAULT_MODEL)}",
        f"model_provider = {_toml_string(PROVIDER_ID)}",
        "",
        f"[model_providers.{PROVIDER_ID}]",
        f"name = {_toml_string('Cairn: ' + PROVIDER_ID)}",
        f"base_url = {_toml_string(settings.base_url or DEFAULT_BASE_URL)}",
        f"env_key = {_toml_string(API_KEY_ENV)}",
        'wire_api = "responses"',
        "",
    ]
    return "\n".join(lines)


def hook_command(gate: list[str]) -> str:
    """The PreToolUse hook command: the gate, with any failure of its own made a refusal."""
    call = shlex.join([*gate, "--codex-hook"])
    return (
        f'{call} || {{ rc=$?; [ "$rc" -eq 2 ] || echo "the approval gate failed (exit $rc); '
        f'the command is refused" >&2; exit 2; }}'
    )


def render_hooks(gate: list[str]) -> dict[str, Any]:
    return {
        "hooks": {
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
    }


def find_rollout(codex_home: Path, thread_id: str) -> Path | None:
    """The rollout file of a thread: sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl."""
    if not is_thread_id(thread_id):
        return None
    found = sorted((codex_home / "sessions").glob(f"*/*/*/rollout-*-{thread_id}.jsonl"))
    return found[0] if found else None


def rollout_meta(path: Path) -> dict[str, Any] | None:
    """The thread's `session_meta` payload (its first line), or None when unreadable."""
    try:
        with path.open(encoding="utf-8") as f:
            first = f.readline()
        record = json.loads(first)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("type") != "session_meta":
        return None
    payload = record.get("payload")
    return payload if isinstance(payload, dict) else None


def rollout_turns(path: Path) -> int | None:
    """How many turns a thread's rollout holds (one `turn_context` line each), or None when
    it cannot be read."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if '"turn_context"' in line and _is_turn_context(line))
    except OSError:
        return None


def _is_turn_context(line: str) -> bool:
    record = json_object(line)
    return record is not None and record.get("type") == "turn_context"


def unwrap_shell(command: str) -> str:
    """`/bin/bash -lc 'echo hi'` → `echo hi`: the command the model asked for."""
    try:
        parts = shlex.split(command)
    except ValueError:
        return command
    if (
        len(parts) == 3
        and os.path.basename(parts[0]) in _SHELLS
        and parts[1] in ("-c", "-lc", "-cl")
    ):
        return parts[2]
    return command


def _match_owner(path: Path, like: Path) -> None:
    """What Cairn (maybe root) writes into the home must belong to the home's owner, the sandbox
    user."""
    if os.geteuid() != 0:
        return
    st = os.stat(like)
    if (st.st_uid, st.st_gid) != (0, 0):
        os.lchown(path, st.st_uid, st.st_gid)


def _write(home: Path, rel: str, text: str) -> None:
    _match_owner(write_file(home, rel, text), home)


class CodexEngine(Engine):
    name = "codex"
    label = "Codex"
    command = "codex"
    npm_package = NPM_PACKAGE
    tested_version = TESTED_VERSION
    has_sessions = True
    has_tool_hooks = True
    #: The variable the run machinery fills from the settings' `api_key_secret` grant.
    api_key_env = API_KEY_ENV
    credential_kinds = CREDENTIAL_KINDS
    default_base_url = DEFAULT_BASE_URL

    # -- spec and files -----------------------------------------------------------------------

    def validate(self, spec: dict) -> dict:
        prompt = spec.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError("the codex engine needs a message (-m TEXT) to send to Codex")
        mode = spec.get("mode", MODE_START)
        if mode not in MODES:
            raise InputError(f"unknown engine mode {mode!r} (use one of {', '.join(MODES)})")
        session_id = spec.get("session_id")
        if (
            mode in (MODE_CONTINUE, MODE_FORK)
            and session_id is not None
            and not is_thread_id(session_id)
        ):
            raise InputError(f"{session_id!r} is not a Codex thread id")
        return {**spec, "prompt": prompt}

    def host_codex_home(self, ctx: LaunchContext) -> Path:
        return Path(ctx.host_home) / CODEX_DIR

    def sandbox_codex_home(self, ctx: LaunchContext) -> str:
        return f"{ctx.sandbox_home.rstrip('/')}/{CODEX_DIR}"

    def prepare(self, ctx: LaunchContext) -> None:
        # The engine home is writable from the sandbox: write without following planted links.
        home = Path(ctx.host_home)
        home.mkdir(parents=True, exist_ok=True)
        codex_home = ensure_dir(home, CODEX_DIR)
        _match_owner(codex_home, home)
        _write(home, f"{CODEX_DIR}/{CONFIG_FILE}", render_config(ctx.settings))
        if ctx.gate:
            _write(
                home,
                f"{CODEX_DIR}/{HOOKS_FILE}",
                json.dumps(render_hooks(ctx.gate), indent=2) + "\n",
            )
        else:
            # No gate for this run: no hook left over from an earlier one either.
            (codex_home / HOOKS_FILE).unlink(missing_ok=True)

    def home_files(self, ctx: LaunchContext) -> list[str]:
        # hooks.json too without a gate: removed there as it is here.
        return [f"{CODEX_DIR}/{CONFIG_FILE}", f"{CODEX_DIR}/{HOOKS_FILE}"]

    # -- launching ----------------------------------------------------------------------------

    def exec_args(self, ctx: LaunchContext) -> list[str]:
        """`codex exec` and its arguments for this attempt (without the stdin redirection)."""
        args = [BINARY_IN_SANDBOX, "exec", *UNATTENDED_FLAGS]
        if ctx.gate:
            args.append(HOOK_TRUST_FLAG)
        args += ["--cd", ctx.workspace]
        if ctx.mode in (MODE_CONTINUE, MODE_FORK):
            if not is_thread_id(ctx.session_id):
                raise InputError(
                    f"cannot {ctx.mode} a Codex thread without its id (got {ctx.session_id!r})"
                )
            args += ["resume" if ctx.mode == MODE_CONTINUE else "fork", str(ctx.session_id)]
        elif ctx.mode not in (MODE_START, MODE_FALLBACK):
            raise InputError(f"unknown engine mode {ctx.mode!r}")
        prompt = ctx.prompt
        if ctx.mode == MODE_FALLBACK and ctx.spec.get("files_note"):
            # A new thread on files that are not where the earlier work left them: say so first.
            prompt = f"{ctx.spec['files_note']}\n\n{prompt}"
        # `--` so a message that starts with a dash stays a message.
        return [*args, "--", prompt]

    def launch_argv(self, ctx: LaunchContext) -> list[str]:
        # Codex reads stdin when it is not a terminal and appends it to the prompt; it gets nothing.
        return ["sh", "-c", 'exec "$0" "$@" < /dev/null', *self.exec_args(ctx)]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {
            "CODEX_HOME": self.sandbox_codex_home(ctx),
            "HOME": ctx.sandbox_home,
            "NO_COLOR": "1",
        }

    def mounts(self, settings: EngineSettings) -> list[tuple[Path, str]]:
        if not settings.binary:
            return []
        binary = native.resolve_binary(self, settings.binary)
        package = binary.parent.parent
        if binary.parent.name == "bin" and (package / PACKAGE_MANIFEST).is_file():
            # The whole platform folder: bin/codex finds its helpers (rg) beside it.
            return [(package, MOUNT_POINT)]
        return [(binary, BINARY_IN_SANDBOX)]

    # -- the program ----------------------------------------------------------------------------

    def features(self) -> tuple[Feature, ...]:
        return FEATURES

    def native_in_package(self, package: Path) -> Path | None:
        """The static musl build for this machine: vendor/<triple>/bin/codex in the platform
        package (@openai/codex-linux-x64, an alias of @openai/codex@<version>-linux-x64) beside
        or inside the package, or in the package's own vendor folder (older releases)."""
        triple = native.linux_triple()
        places = [
            folder / "vendor" / triple
            for folder in native.package_candidates(
                package, f"{NPM_PACKAGE}-linux-{native.host_arch()}"
            )
        ]
        places.append(package / "vendor" / triple)
        for place in places:
            for rel in ("bin/codex", "codex/codex"):
                if (place / rel).is_file():
                    return place / rel
        return None

    # -- tools --------------------------------------------------------------------------------

    def tool_probe(self, settings: EngineSettings) -> dict[str, list[str]]:
        return {
            "codex": [BINARY_IN_SANDBOX, "--version"],
            # Codex runs every command the model asks for with `bash -lc`.
            "bash": ["bash", "-c", 'echo "bash $BASH_VERSION"'],
            "git": ["git", "--version"],
        }

    def check_version(
        self, settings: EngineSettings, found: dict[str, str], probe: Probe | None = None
    ) -> str | None:
        if not settings.binary:
            return (
                f"Codex was not found: install it with `npm install -g {NPM_PACKAGE}` (or set "
                f"engines.codex.binary to the `codex` executable)"
            )
        resolved = native.resolve(Path(settings.binary), self)
        if resolved.binary is None:
            return f"the Codex binary {settings.binary} cannot be used: {resolved.problem}"
        reported = found.get("codex")
        if not reported or reported == "missing":
            return (
                f"Codex did not answer --version inside the sandbox (is {resolved.binary} a "
                f"Linux build for this machine's architecture?)"
            )
        match = _VERSION_RE.search(reported)
        if not match:
            return f"cannot tell the Codex version from {reported!r}"
        version = match.group(1)
        problem = self.judge_sandbox_version(version, resolved.binary, probe, settings)
        if problem:
            return problem
        if found.get("bash") in (None, "missing"):
            return "the sandbox image has no bash; Codex runs every command with bash -lc"
        return None

    # -- sessions -----------------------------------------------------------------------------

    #: `codex exec fork` (0.171.0) forks a whole thread: it has no way to fork at an earlier
    #: turn, so a fork at an older revision starts a new thread instead.
    forks_at_position = False

    def conversation_position(
        self, home: Path, run_dir: Path, session_id: str | None, workspace: str = "/workspace"
    ) -> tuple[str, str] | None:
        """(thread id, `turn N`): how many turns the thread had when asked; None without a
        thread or its rollout. Recorded so a fork at an older revision can say how far back it
        is, although Codex cannot fork there."""
        if not session_id or not is_thread_id(session_id):
            return None
        rollout = find_rollout(Path(home) / CODEX_DIR, session_id)
        turns = rollout_turns(rollout) if rollout is not None else None
        return (session_id, f"turn {turns}") if turns else None

    def conversation_files(self, home: Path, session_id: str, workspace: str) -> list[Path]:
        if not is_thread_id(session_id):
            return []
        rollout = find_rollout(Path(home) / CODEX_DIR, session_id)
        return [rollout.relative_to(home)] if rollout is not None else []

    def native_resume_check(self, ctx: LaunchContext) -> ResumeCheck:
        thread_id = ctx.session_id
        if not thread_id:
            return ResumeCheck(False, "no Codex thread id was recorded for this task")
        if not is_thread_id(thread_id):
            return ResumeCheck(False, f"{thread_id!r} is not a Codex thread id")
        codex_home = self.host_codex_home(ctx)
        rollout = find_rollout(codex_home, thread_id)
        if rollout is None:
            return ResumeCheck(
                False,
                f"the record of Codex thread {thread_id} is not in "
                f"{codex_home / 'sessions'} (the engine home was lost or "
                f"cleaned)",
            )
        meta = rollout_meta(rollout)
        if meta is None:
            return ResumeCheck(
                False, f"the record of Codex thread {thread_id} ({rollout.name}) cannot be read"
            )
        if meta.get("id") not in (None, thread_id):
            return ResumeCheck(
                False, f"{rollout.name} belongs to thread {meta.get('id')}, not {thread_id}"
            )
        cwd = meta.get("cwd")
        if cwd != ctx.workspace:
            return ResumeCheck(
                False, f"Codex thread {thread_id} worked in {cwd!r}, not in {ctx.workspace!r}"
            )
        return ResumeCheck(
            True, f"Codex thread {thread_id} is recorded in {rollout.name} and worked in {cwd}"
        )

    # -- output -------------------------------------------------------------------------------

    def parse_line(self, line: str) -> list[EngineEvent]:
        record = json_object(line)
        if record is None:
            return []
        kind = record.get("type")
        if kind == "thread.started" and record.get("thread_id"):
            return [EngineEvent("session", {"session_id": record["thread_id"]})]
        if kind == "turn.completed":
            return [
                EngineEvent("usage", _usage_of(record)),
                EngineEvent("result", {"ok": True}),
            ]
        if kind == "turn.failed":
            error = object_field(record, "error")
            return [
                EngineEvent("result", {"ok": False, "error": _error_text(error.get("message"))})
            ]
        if kind == "error":
            # Also used for notices such as reconnect attempts; a failed turn ends in turn.failed.
            return [
                EngineEvent(
                    "error", {"message": _error_text(record.get("message")), "fatal": False}
                )
            ]
        if kind in ("item.started", "item.updated", "item.completed"):
            item = record.get("item")
            if isinstance(item, dict):
                return _item_events(kind, item)
        return []


def _usage_of(record: dict[str, Any]) -> dict[str, Any]:
    """A finished turn's usage. Codex reports the thread's running totals (a resumed thread
    goes on from where it stopped), so the figures are marked cumulative: what one turn used
    is the difference to the thread's previous figures. Its input count includes the cached
    input; `tokens` holds them apart."""
    usage = object_field(record, "usage")
    totals = {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
    cached = totals.get("cached_input_tokens", 0)
    return {
        **totals,
        "cumulative": True,
        "tokens": {
            "input": max(0, totals.get("input_tokens", 0) - cached),
            "output": totals.get("output_tokens", 0),
            "cache_read": cached,
            "cache_write": totals.get("cache_write_input_tokens", 0),
        },
    }


def _error_text(message: Any) -> str:
    """The model server's own message when Codex passes its error body through as JSON."""
    text = str(message or "the turn failed")
    try:
        body = json.loads(text)
    except ValueError:
        return text
    inner = body.get("error") if isinstance(body, dict) else None
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        return inner["message"]
    return text


def _item_events(kind: str, item: dict[str, Any]) -> list[EngineEvent]:
    item_type = item.get("type")
    item_id = item.get("id")
    done = kind == "item.completed"
    if item_type == "command_execution":
        raw = str(item.get("command") or "")
        data = {"id": item_id, "tool": "shell", "command": unwrap_shell(raw), "shell_command": raw}
        if kind == "item.started":
            return [EngineEvent("tool_call", data)]
        if done:
            return [
                EngineEvent(
                    "tool_result",
                    {
                        **data,
                        "exit_code": item.get("exit_code"),
                        "output": item.get("aggregated_output") or "",
                        "status": item.get("status"),
                    },
                )
            ]
        return []
    if not done:
        if item_type == "mcp_tool_call" and kind == "item.started":
            return [
                EngineEvent(
                    "tool_call",
                    {
                        "id": item_id,
                        "tool": f"{item.get('server')}.{item.get('tool')}",
                        "arguments": item.get("arguments"),
                    },
                )
            ]
        return []
    if item_type == "agent_message":
        return [
            EngineEvent(
                "message", {"id": item_id, "role": "assistant", "text": item.get("text") or ""}
            )
        ]
    if item_type == "reasoning":
        return [
            EngineEvent(
                "message", {"id": item_id, "role": "reasoning", "text": item.get("text") or ""}
            )
        ]
    if item_type == "file_change":
        changes = [
            {"path": c.get("path"), "kind": c.get("kind")}
            for c in item.get("changes") or []
            if isinstance(c, dict)
        ]
        return [
            EngineEvent(
                "file_edit", {"id": item_id, "changes": changes, "status": item.get("status")}
            )
        ]
    if item_type == "mcp_tool_call":
        return [
            EngineEvent(
                "tool_result",
                {
                    "id": item_id,
                    "tool": f"{item.get('server')}.{item.get('tool')}",
                    "status": item.get("status"),
                    "output": item.get("result"),
                    "error": item.get("error"),
                },
            )
        ]
    if item_type == "web_search":
        return [
            EngineEvent(
                "tool_call", {"id": item_id, "tool": "web_search", "query": item.get("query")}
            )
        ]
    if item_type == "todo_list":
        lines = [
            ("[x] " if t.get("completed") else "[ ] ") + str(t.get("text"))
            for t in item.get("items") or []
            if isinstance(t, dict)
        ]
        return [EngineEvent("message", {"id": item_id, "role": "plan", "text": "\n".join(lines)})]
    if item_type == "error":
        message = str(item.get("message") or "")
        if message.startswith(HOOK_TRUST_NOTICE):
            return []  # Cairn's own choice (see HOOK_TRUST_FLAG), repeated at every launch
        return [EngineEvent("error", {"id": item_id, "message": message, "fatal": False})]
    return []
