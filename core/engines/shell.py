"""The shell engine: the agent is a list of commands the user gives, run in order.

Owns turning commands into one script that records which step it is on, so an interrupted run
continues from the step that did not finish. Risk rules for each command belong to approvals.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from core.engines.base import Engine
from core.errors import InputError

SCRIPT_NAME = "script.sh"


def render_script(commands: list[str], run_dir_in_sandbox: str) -> str:
    step_file = f"{run_dir_in_sandbox}/step"
    lines = [
        "#!/bin/sh",
        "# Each step records its number before it runs; a failing step ends the run.",
        'start="${1:-0}"',
        "step() {",
        '  n="$1"; shift',
        '  [ "$n" -ge "$start" ] || return 0',
        f'  echo "$n" > {shlex.quote(step_file)}.tmp && mv -f {shlex.quote(step_file)}.tmp '
        f'{shlex.quote(step_file)}',
        '  sh -c "$1" || exit $?',
        "}",
    ]
    for i, command in enumerate(commands):
        lines.append(f"step {i} {shlex.quote(command)}")
    lines.append("")
    return "\n".join(lines)


class ShellEngine(Engine):
    name = "shell"

    def validate(self, spec: dict) -> dict:
        commands = spec.get("commands") or []
        if not commands or not all(isinstance(c, str) and c.strip() for c in commands):
            raise InputError("the shell engine needs at least one command")
        return {**spec, "commands": list(commands)}

    def prepare(self, spec: dict, host_dir: Path, sandbox_dir: str) -> None:
        host_dir.mkdir(parents=True, exist_ok=True)
        (host_dir / SCRIPT_NAME).write_text(render_script(spec["commands"], sandbox_dir))

    def launch_argv(self, spec: dict, run_dir_in_sandbox: str, start_step: int) -> list[str]:
        return ["sh", f"{run_dir_in_sandbox}/{SCRIPT_NAME}", str(start_step)]

    def tool_probe(self) -> dict[str, list[str]]:
        return {"sh": ["sh", "-c", "command -v sh"],
                "git": ["git", "--version"]}
