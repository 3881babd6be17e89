"""Running an attempt of the Codex engine directly on this machine (no sandbox), for the quick
smoke test and for recording sample output: the engine's own command and files, with the host's
binary, home and workspace in place of the sandbox's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from core.engines.base import LaunchContext
from core.engines.codex import CodexEngine


def exec_on_host(
    engine: CodexEngine,
    ctx: LaunchContext,
    binary: Path,
    api_key: str = "test-key",
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """Run the attempt as the sandbox would (same argv, stdin from /dev/null, same variables),
    with `ctx.workspace` and `ctx.host_home` being host folders."""
    argv = engine.launch_argv(ctx)
    argv[argv.index(engine.exec_args(ctx)[0])] = str(binary)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **engine.environment(ctx),
        "CODEX_HOME": str(engine.host_codex_home(ctx)),
        "HOME": str(ctx.host_home),
        "OPENAI_API_KEY": api_key,
    }
    return subprocess.run(
        argv, cwd=ctx.workspace, env=env, capture_output=True, text=True, timeout=timeout
    )
