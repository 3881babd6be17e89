"""The engine contract: how an engine is launched in a sandbox, continued, forked and checked,
and how its output becomes Cairn events.

Owns the interface and the values passed across it; each engine module implements it for one
program. Runs, resume and lineage stay engine-neutral and only talk to this contract.
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.engines.capabilities import Feature, Probe
from core.engines.capabilities import probe as capabilities_probe


def json_object(line: str) -> dict[str, Any] | None:
    """One line of an engine's JSON output (or of its session files) as an object; None for
    anything else (plain text, a truncated line, a JSON value that is not an object)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def object_field(record: dict[str, Any], key: str) -> dict[str, Any]:
    """`record[key]` when it is a JSON object, else an empty one: engines' output is read
    leniently, and a field of an unexpected type counts as absent."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


# How a run relates to the engine's own conversation.
MODE_START = "start"  # a new engine session
MODE_CONTINUE = "continue"  # native resume of `session_id` (same id, same history)
MODE_FORK = "fork"  # native fork of `session_id` (a new id, the history copied)
MODE_FALLBACK = "fallback"  # native resume impossible: a new session on the same files
MODES = (MODE_START, MODE_CONTINUE, MODE_FORK, MODE_FALLBACK)


@dataclass(frozen=True)
class ToolContract:
    """What a run relied on inside its sandbox: the image and the versions of its tools."""

    image_digest: str | None
    tools: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"image_digest": self.image_digest, "tools": dict(self.tools)}

    @classmethod
    def from_dict(cls, data: dict | None) -> ToolContract:
        data = data or {}
        return cls(data.get("image_digest"), dict(data.get("tools") or {}))

    def differences(self, other: ToolContract) -> list[str]:
        """How `other` (found now) differs from this one (recorded), in words."""
        out = []
        if self.image_digest and other.image_digest and self.image_digest != other.image_digest:
            out.append(
                f"the sandbox image changed ({self.image_digest[:19]} → {other.image_digest[:19]})"
            )
        for name, version in sorted(self.tools.items()):
            now = other.tools.get(name)
            if now != version:
                out.append(f"{name} was {version!r}, now {now or 'missing'!r}")
        return out


@dataclass(frozen=True)
class EngineSettings:
    """Per-engine settings from the data folder's settings file (names only, never secrets)."""

    binary: str | None = None  # host path of the engine's executable, mounted read-only
    version: str | None = None  # the version the tool contract expects, if pinned
    base_url: str | None = None  # the model endpoint
    api_key_secret: str | None = None  # keyring secret holding the API key (granted at run start)
    model: str | None = None

    @classmethod
    def from_dict(cls, data: dict | None) -> EngineSettings:
        data = data or {}
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class LaunchContext:
    """Everything an engine needs to write its files and build its command for one attempt."""

    run_id: str
    mode: str  # one of MODES
    prompt: str
    spec: dict[str, Any]  # the run's spec (engine-specific, validated by the engine)
    settings: EngineSettings
    host_run_dir: Path  # this attempt's folder on the host
    sandbox_run_dir: str  # the same folder inside the sandbox
    host_home: Path  # the engine home ($HOME of the agent) on the host
    sandbox_home: str  # ... and inside the sandbox
    workspace: str = "/workspace"  # always the same path: native resume depends on it
    session_id: str | None = None  # the engine session to continue or fork from
    start_step: int = 0  # for step-wise engines: where to continue
    # The in-sandbox approval gate command, for an engine with tool hooks (else empty).
    gate: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CredentialKind:
    """One way of signing an engine in. The value lives in the OS keyring under `secret`; inside
    the sandbox the engine's variable `env` holds only `placeholder`, and the host-side egress
    proxy puts the real value into the `header` of each request to the model endpoint."""

    kind: str  # "api-key" or "oauth-token"
    label: str  # for people: "API key", "Claude subscription (long-lived token)"
    secret: str  # the keyring secret's name: the usual variable name, e.g. ANTHROPIC_API_KEY
    env: str  # the variable the engine reads it from
    header: str  # the request header that carries it, lower case
    template: str  # how the header's value is made from the secret: "{}" or "Bearer {}"
    placeholder: str  # what the sandbox sees instead of the value
    prefix: str | None = None  # the value's usual start, to catch a key pasted into the wrong kind
    how: str = ""  # one line: where a person gets such a value

    def header_value(self, value: str) -> str:
        return self.template.format(value)


@dataclass(frozen=True)
class EngineEvent:
    """One thing an engine said, in Cairn's words."""

    kind: str  # "session" | "message" | "tool_call" | "tool_result" | "file_edit" | "usage" |
    # "result" | "error"
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResumeCheck:
    ok: bool
    reason: str


class Engine(abc.ABC):
    name: str = ""
    #: For people: "Claude Code".
    label: str = ""
    #: The command people run and the npm package that installs it (None: nothing to find).
    command: str | None = None
    npm_package: str | None = None
    #: The release this module was last checked against. Any release that has every feature the
    #: engine uses runs; one other than this only gets a note saying it is untested.
    tested_version: str | None = None
    #: Whether the engine keeps a conversation of its own that Continue resumes natively.
    has_sessions: bool = False
    #: Whether the engine asks the approval gate about each of its tool calls (a PreToolUse
    #: hook given `LaunchContext.gate`); the gate is set up only for such engines.
    has_tool_hooks: bool = False
    #: The ways to sign the engine in, preferred first; empty for engines that need no model.
    credential_kinds: tuple[CredentialKind, ...] = ()
    #: The model endpoint when the settings name none (None: the engine talks to no model).
    default_base_url: str | None = None

    @property
    def needs_model(self) -> bool:
        """Whether the engine talks to a model endpoint (and so needs a network and a key)."""
        return self.default_base_url is not None

    def base_url(self, settings: EngineSettings) -> str | None:
        """The model endpoint this engine's runs talk to (outside the sandbox)."""
        return settings.base_url or self.default_base_url

    def validate(self, spec: dict) -> dict:
        """Check and normalise a run's spec; raise InputError with one clear line."""
        return spec

    @abc.abstractmethod
    def prepare(self, ctx: LaunchContext) -> None:
        """Write what the launch needs (scripts, settings, hooks) under the run dir or the home."""

    def home_files(self, ctx: LaunchContext) -> list[str]:
        """The files `prepare` writes (or removes) in the engine home, relative to it: a sandbox
        whose home is not the local folder (on another machine) is sent them before the launch."""
        return []

    @abc.abstractmethod
    def launch_argv(self, ctx: LaunchContext) -> list[str]:
        """The command that runs this attempt inside the sandbox."""

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        """Fixed, non-secret variables the engine needs (base URLs, switches)."""
        return {}

    def mounts(self, settings: EngineSettings) -> list[tuple[Path, str]]:
        """Read-only host paths the engine needs inside the sandbox (e.g. its binary)."""
        return []

    def tool_probe(self, settings: EngineSettings) -> dict[str, list[str]]:
        """Commands whose first output line is each tool's version, keyed by tool name."""
        return {}

    def check_version(
        self, settings: EngineSettings, found: dict[str, str], probe: Probe | None = None
    ) -> str | None:
        """Why the probed tools cannot run this engine (missing binary, missing features, a
        version other than the pinned one), or None. `probe` is the host probe of the same
        binary when the caller has it; engines with a program of their own probe it otherwise
        (cached)."""
        return None

    # -- the program, as installed ------------------------------------------------------------

    def features(self) -> tuple[Feature, ...]:
        """The flags and subcommands this engine's launches use, and how to see each one."""
        return ()

    def install_hint(self, version: str = "latest") -> str:
        """The command that installs a usable program."""
        return f"npm install -g {self.npm_package}@{version}" if self.npm_package else ""

    def native_in_package(self, package: Path) -> Path | None:
        """The native executable for this machine inside (or beside) the installed npm package
        folder `package`, or None."""
        return None

    def package_problem(self, package: Path, manifest: dict[str, Any]) -> str:
        """Why the package at `package` yields no native executable, with the fix."""
        return (
            f"{package} holds no native {self.label or self.name} executable for this machine: "
            f"reinstall it with `{self.install_hint()}`"
        )

    def judge(self, probe: Probe, settings: EngineSettings) -> tuple[str | None, str | None]:
        """(problem, note) for a probed binary: a problem names what is wrong and the fix; the
        note says a usable version is not the tested one."""
        what = self.label or self.name
        if probe.error:
            return f"{what} cannot be used: {probe.error}", None
        version = probe.version or "(version unknown)"
        if probe.missing:
            return (
                f"{what} {version} at {probe.binary} lacks {', '.join(probe.missing)}, which "
                f"the {self.name} engine uses: install a newer one with `{self.install_hint()}`"
            ), None
        if settings.version and probe.version != settings.version:
            return (
                f"{what} {version} is installed, but the settings pin {settings.version} "
                f"(engines.{self.name}.version): install it with "
                f"`{self.install_hint(settings.version)}`, or unset the pin"
            ), None
        if self.tested_version and probe.version != self.tested_version:
            return None, f"untested version {version}: it has every flag the engine uses"
        return None, None

    def judge_sandbox_version(
        self, version: str, binary: Path, probe: Probe | None, settings: EngineSettings
    ) -> str | None:
        """Why the version the sandbox reported cannot run the engine, or None: the host's probe
        of the same binary (made now when not given) must agree with it and have what the engine
        uses; when the host cannot run the binary, only the settings' pin can be checked."""
        if probe is None:
            probe = capabilities_probe(binary, self.features())
        if probe.error is None:
            if probe.version and probe.version != version:
                return (
                    f"the sandbox ran {self.label} {version}, but {binary} is {probe.version} on "
                    "the host: start the run again"
                )
            problem, _ = self.judge(probe, settings)
            return problem
        if settings.version and version != settings.version:
            # The host could not run it; the sandbox's answer is all there is to judge.
            return (
                f"{self.label} {version} is installed, but the settings pin {settings.version} "
                f"(engines.{self.name}.version)"
            )
        return None

    def native_resume_check(self, ctx: LaunchContext) -> ResumeCheck:
        """Whether `ctx.session_id` can be resumed natively from `ctx.host_home`."""
        return ResumeCheck(False, f"the {self.name} engine has no sessions of its own")

    def conversation_files(self, home: Path, session_id: str, workspace: str) -> list[Path]:
        """The files in the engine home (relative to it) that hold the session's conversation,
        as far as they exist: what a checkpoint keeps so a lost home does not lose it."""
        return []

    def parse_line(self, line: str) -> list[EngineEvent]:
        """Events in one line of the engine's stdout (empty for lines that are not its protocol)."""
        return []
