"""The shell engine: the agent is a list of commands the user gives, run in order.

Owns turning commands into one script that records which step it is on, so an interrupted run
continues from the step that did not finish. Judging what the commands run belongs to the exec
supervisor the run starts under and to approvals on the host.
"""

from __future__ import annotations

import shlex

from core.engines.base import Engine, EngineSettings, LaunchContext
from core.errors import InputError
from core.safe_fs import write_file

SCRIPT_NAME = "script.sh"


def render_script(commands: list[str], sandbox_run_dir: str) -> str:
    """The run's script. Each step runs as its own `sh -c`, with CAIRN_SCRIPT_LINE naming the
    step (1-based), so an approval card for a program the step starts can show which step it
    came from. The supervisor the run starts under judges every program; the script judges
    nothing."""
    step_file = shlex.quote(f"{sandbox_run_dir}/step")
    lines = [
        "#!/bin/sh",
        "# Each step records its number before it runs; a failing step ends the run.",
        'start="${1:-0}"',
        "step() {",
        '  n="$1"; shift',
        '  [ "$n" -ge "$start" ] || return 0',
        f'  echo "$n" > {step_file}.tmp && mv -f {step_file}.tmp {step_file}',
        # A header the output pane makes a block of (printf is the shell's own: no program);
        # a single command's output is left exactly as it printed it.
        f'  printf \'cairn: step %s/{len(commands)}: %s\\n\' "$((n + 1))" "$2"'
        if len(commands) > 1
        else "  :",
        '  CAIRN_SCRIPT_LINE=$((n + 1)) sh -c "$1" || exit $?',
        "}",
    ]
    for i, command in enumerate(commands):
        label = next((line.strip() for line in command.splitlines() if line.strip()), "")[:200]
        lines.append(f"step {i} {shlex.quote(command)} {shlex.quote(label)}")
    lines.append("")
    return "\n".join(lines)


class ShellEngine(Engine):
    name = "shell"

    def validate(self, spec: dict) -> dict:
        # A message given to the shell engine is its command.
        commands = spec.get("commands") or ([spec["prompt"]] if spec.get("prompt") else [])
        if not commands or not all(isinstance(c, str) and c.strip() for c in commands):
            raise InputError("the shell engine needs at least one command")
        return {**spec, "commands": list(commands)}

    def prepare(self, ctx: LaunchContext) -> None:
        # The runs folder is writable from the sandbox: never follow what it may have planted.
        write_file(
            ctx.host_run_dir.parent,
            f"{ctx.host_run_dir.name}/{SCRIPT_NAME}",
            render_script(ctx.spec["commands"], ctx.sandbox_run_dir),
        )

    def launch_argv(self, ctx: LaunchContext) -> list[str]:
        return ["sh", f"{ctx.sandbox_run_dir}/{SCRIPT_NAME}", str(ctx.start_step)]

    def tool_probe(self, settings: EngineSettings) -> dict[str, list[str]]:
        return {"sh": ["sh", "-c", "command -v sh"], "git": ["git", "--version"]}
