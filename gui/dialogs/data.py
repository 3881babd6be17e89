"""What the task dialogs work from, as plain values (no Qt): dropped or chosen paths sorted into
folders a task can start from and everything else, the engines to offer, a revision in words.

Owns the checks and the words that explain a refusal. `sort_paths` reads the disk (a stat and a
directory listing per path), so the GUI calls it inside a job.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import CairnError
from core.policy import NETWORK_ALLOWLIST, NETWORK_OPEN, Policy
from core.settings import Settings

if TYPE_CHECKING:
    from core.app import Cairn

# What core runs when nothing chose an engine; offered first, and the choice until the settings
# have been read.
FALLBACK_ENGINE = "shell"
DEFAULT_ENGINES = (FALLBACK_ENGINE, "claude-code", "codex")


def engine_choices(known: Iterable[str]) -> tuple[str, ...]:
    """The engines to offer (core's `settings.keys()["engines"]`), the shell engine first."""
    names = list(dict.fromkeys(known))
    if FALLBACK_ENGINE in names:
        names.remove(FALLBACK_ENGINE)
        names.insert(0, FALLBACK_ENGINE)
    return tuple(names) or DEFAULT_ENGINES


def policy_text(policy: Policy) -> str:
    """A sandbox policy's network in one line, for the New Task dialog."""
    if policy.network == NETWORK_ALLOWLIST:
        if not policy.allow:
            return "Allowlist: no destination yet (the sandbox reaches nothing outside)"
        return "Allowlist: only " + ", ".join(policy.allow) + " (through Cairn's proxy)"
    if policy.network == NETWORK_OPEN:
        return "Open: the sandbox can reach any host"
    return "None: the sandbox has no network"


def default_policies(settings: Settings, engines: Iterable[str]) -> dict[str, str]:
    """Each engine's default network for a new task, in words (read in a job: it reads files)."""
    out = {}
    for engine in engines:
        try:
            out[engine] = policy_text(settings.default_policy_for(engine))
        except CairnError as exc:
            out[engine] = f"cannot be worked out: {exc}"
    return out


def host_choices(cairn: Cairn) -> tuple[tuple[str, ...], str | None]:
    """The sandbox hosts' names and the default one, for New Task; none when a host setting
    cannot be used (making the task then says what is wrong). Reads the settings: in a job."""
    try:
        return tuple(h.name for h in cairn.hosts.list()), cairn.hosts.default().name
    except CairnError:
        return (), None


@dataclass(frozen=True)
class NewTaskRequest:
    folder: Path
    title: str
    engine: str
    instructions: str
    start: bool = False  # Create and Start: its first run starts once it is made
    host: str | None = None  # the sandbox host (None: the settings' default)


SHELL_PLACEHOLDER = (
    "Commands, one per line, for example:\npytest -x tests/test_api.py\ngit diff --stat"
)
AGENT_PLACEHOLDER = (
    "What the agent should do, in plain words, for example:\n"
    "Fix the failing test in tests/test_api.py"
)
SHELL_MORE_PLACEHOLDER = "More commands, one per line, for example:\npytest -x\ngit status"
AGENT_MORE_PLACEHOLDER = (
    "What the agent should do next, in plain words, for example:\nNow also cover the logout path"
)


def instructions_placeholder(engine: str | None, *, follow_up: bool = False) -> str:
    """The example an empty instructions field shows: commands for the shell engine, a request
    in words for an agent (Claude Code, Codex); `follow_up` for Continue and Fork."""
    if engine == "shell":
        return SHELL_MORE_PLACEHOLDER if follow_up else SHELL_PLACEHOLDER
    return AGENT_MORE_PLACEHOLDER if follow_up else AGENT_PLACEHOLDER


def revision_label(revision: dict, latest: bool = False) -> str:
    """One of `views.task_details()["revisions"]` in a line: number, id, trigger, files, time."""
    when = _dt.datetime.fromtimestamp(revision.get("created_at") or 0).strftime("%Y-%m-%d %H:%M")
    changed = revision.get("files_changed")
    files = f", {changed} file{'s' if changed != 1 else ''}" if changed is not None else ""
    tag = " (latest)" if latest else ""
    return (
        f"#{revision.get('seq', '?')} {str(revision.get('id', ''))[:10]} · "
        f"{revision.get('trigger', '?')}{files} · {when}{tag}"
    )


@dataclass
class SortedPaths:
    folders: list[Path] = field(default_factory=list)
    refused: list[tuple[Path, str]] = field(default_factory=list)  # (path, why)

    def message(self) -> str:
        """One status line for the refused paths ('' when nothing was refused)."""
        if not self.refused:
            return ""
        parts = [f"{path.name or path}: {why}" for path, why in self.refused]
        prefix = "Cannot start a task from " + ("this" if len(parts) == 1 else "these")
        return f"{prefix}: {'; '.join(parts)}. Drop a repository folder to start a task."


def check_folder(path: Path) -> str | None:
    """Why a task cannot start from `path`, or None when it is a readable folder."""
    try:
        if not path.exists():
            return "it does not exist"
        if not path.is_dir():
            return "it is a file, not a folder"
        with os.scandir(path) as entries:
            next(entries, None)
    except PermissionError:
        return "the folder cannot be read (permission denied)"
    except OSError as exc:
        return f"the folder cannot be read ({exc.strerror or exc})"
    return None


def sort_paths(paths: list[Path]) -> SortedPaths:
    result = SortedPaths()
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw).expanduser()
        path = path.absolute()
        if path in seen:
            continue
        seen.add(path)
        why = check_folder(path)
        if why is None:
            result.folders.append(path)
        else:
            result.refused.append((path, why))
    return result
