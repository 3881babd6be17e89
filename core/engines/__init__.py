"""Engines: the programs a task runs in its sandbox (a shell script, Claude Code, Codex).

Each engine says how to launch, resume and observe itself; runs and resume stay engine-neutral.
"""

from core.engines.base import Engine, ToolContract
from core.engines.claude_code import ClaudeCodeEngine
from core.engines.codex import CodexEngine
from core.engines.shell import ShellEngine
from core.errors import InputError

ENGINES: dict[str, type[Engine]] = {
    ShellEngine.name: ShellEngine,
    CodexEngine.name: CodexEngine,
    ClaudeCodeEngine.name: ClaudeCodeEngine,
}


def engine_for(name: str) -> Engine:
    try:
        return ENGINES[name]()
    except KeyError:
        raise InputError(f"unknown engine {name!r} (known: {', '.join(sorted(ENGINES))})") from None


__all__ = [
    "Engine",
    "ToolContract",
    "ShellEngine",
    "CodexEngine",
    "ClaudeCodeEngine",
    "ENGINES",
    "engine_for",
]
