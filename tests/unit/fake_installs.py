"""Small fake installs of the agent CLIs, laid out the way npm, the native installer, nvm, volta
and asdf lay out the real ones (see tests/agents/node_modules), for the discovery tests.

A fake native binary is a real ELF header for this machine followed by what the program would
print; `fake_runner` stands in for running it and answers each probe command from that text.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from core.engines import capabilities, discovery
from core.engines.native import host_arch, linux_triple

MARK = b"\n--cairn-fake-cli--\n"
_MACHINE = {"x64": 62, "arm64": 183}

# The options of the real `claude --help` that the engine uses, in its layout.
CLAUDE_OPTIONS = {
    "--print": "  -p, --print                           Print response and exit",
    "--output-format": '  --output-format <format>              Output format: "text", "json",\n'
    '                                        or "stream-json" (realtime streaming)',
    "--verbose": "  --verbose                             Override the verbose setting",
    "--session-id": "  --session-id <uuid>                   Use a specific session ID",
    "--resume": "  -r, --resume [value]                  Resume a conversation by session ID",
    "--fork-session": "  --fork-session                        When resuming, create a new ID",
    "--append-system-prompt": "  --append-system-prompt <prompt>       Add to the system prompt",
    "--settings": "  --settings <file-or-json>             Settings file or JSON string",
    "--setting-sources": "  --setting-sources <sources>           Setting sources to load",
    "--permission-mode": "  --permission-mode <mode>              Permission mode (choices:\n"
    '                                        "acceptEdits", "bypassPermissions",\n'
    '                                        "default", "dontAsk", "plan")',
    "--dangerously-skip-permissions": "  --dangerously-skip-permissions        Bypass all checks",
    "--model": "  --model <model>                       Model for the current session",
}
CODEX_EXEC_OPTIONS = {
    "--json": "      --json\n          Print events to stdout as JSONL",
    "--skip-git-repo-check": "      --skip-git-repo-check\n          Allow running outside git",
    "--dangerously-bypass-approvals-and-sandbox": (
        "      --dangerously-bypass-approvals-and-sandbox\n          Skip all prompts"
    ),
    "--dangerously-bypass-hook-trust": (
        "      --dangerously-bypass-hook-trust\n          Run enabled hooks without trust"
    ),
    "--cd": "  -C, --cd <DIR>\n          Tell the agent to use the specified directory",
}


def claude_outputs(version: str, *, without: Iterable[str] = ()) -> dict[str, str]:
    """What a Claude Code release prints for each probe, lacking the flags in `without`."""
    without = set(without)
    options = "\n".join(text for name, text in CLAUDE_OPTIONS.items() if name not in without)
    outputs = {
        "--version": f"{version} (Claude Code)\n",
        "--help": f"Usage: claude [options] [command] [prompt]\n\nOptions:\n{options}\n",
    }
    if "--resume-session-at" not in without:
        outputs["--resume-session-at"] = (
            "error: option '--resume-session-at <message id>' argument missing\n"
        )
    return outputs


def codex_outputs(version: str, *, without: Iterable[str] = ()) -> dict[str, str]:
    """What a Codex release prints for each probe, lacking the flags/subcommands in `without`."""
    without = set(without)
    commands = [c for c in ("resume", "fork", "review") if f"exec {c}" not in without]
    options = "\n".join(text for name, text in CODEX_EXEC_OPTIONS.items() if name not in without)
    top = "Usage: codex [OPTIONS] [PROMPT]\n\nCommands:\n"
    top += "".join(f"  {c:<10} does {c}\n" for c in ("exec", "login") if c not in without)
    return {
        "--version": f"codex-cli {version}\n",
        "--help": top,
        "exec --help": "Usage: codex exec [OPTIONS] [PROMPT]\n\nCommands:\n"
        + "".join(f"  {c:<8} {c}s a session\n" for c in commands)
        + f"\nOptions:\n{options}\n",
        **{f"exec {c} --help": f"Usage: codex exec {c} [OPTIONS]\n" for c in commands},
    }


def elf_header(*, arch: str | None = None, interpreter: str | None = None) -> bytes:
    """A minimal 64-bit little-endian ELF executable header (and a PT_INTERP entry)."""
    machine = _MACHINE.get(arch or host_arch(), 62)
    phnum = 1 if interpreter else 0
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header += struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0, 64, 0, 0, 64, 56, phnum, 0, 0, 0)
    if interpreter:
        data = interpreter.encode() + b"\0"
        header += struct.pack("<IIQQQQQQ", 3, 4, 120, 0, 0, len(data), len(data), 1) + data
    return header


def native(
    path: Path,
    outputs: dict[str, str],
    *,
    arch: str | None = None,
    interpreter: str | None = None,
) -> Path:
    """A fake native CLI at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = elf_header(arch=arch, interpreter=interpreter) + MARK + json.dumps(outputs).encode()
    path.write_bytes(body)
    path.chmod(0o755)
    return path


def _answer(argv: Sequence[str]) -> tuple[int | None, str]:
    data = Path(argv[0]).read_bytes()
    if MARK not in data:
        return -1, "Exec format error"
    outputs = json.loads(data.split(MARK, 1)[1])
    if outputs.get("hang"):
        return None, ""
    key = " ".join(argv[1:])
    if key in outputs:
        return 0, outputs[key]
    return 1, f"error: unknown option '{argv[1] if len(argv) > 1 else ''}'\n"


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Probes answered from the fake binaries; the commands run are recorded."""
    calls: list[list[str]] = []

    def run(argv, env, timeout):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        return _answer(argv)

    discovery.clear_caches()
    monkeypatch.setattr(capabilities, "_run", run)
    yield calls  # type: ignore[misc]
    discovery.clear_caches()


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _link(link: Path, target: str) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def npm_claude(
    prefix: Path,
    version: str = "2.1.332",
    *,
    outputs: dict[str, str] | None = None,
    postinstall: bool = False,
) -> Path:
    """`npm install -g @anthropic-ai/claude-code` into `prefix`: the wrapper package, its
    platform package beside it, and prefix/bin/claude. Without postinstall, bin/claude.exe is the
    package's placeholder stub. Returns the platform package's binary."""
    modules = prefix / "lib" / "node_modules"
    package = modules / "@anthropic-ai" / "claude-code"
    _write_json(
        package / "package.json",
        {
            "name": "@anthropic-ai/claude-code",
            "version": version,
            "bin": {"claude": "bin/claude.exe"},
        },
    )
    platform_pkg = modules / "@anthropic-ai" / f"claude-code-linux-{host_arch()}"
    _write_json(
        platform_pkg / "package.json",
        {"name": f"@anthropic-ai/claude-code-linux-{host_arch()}", "version": version},
    )
    binary = native(platform_pkg / "claude", outputs or claude_outputs(version))
    exe = package / "bin" / "claude.exe"
    exe.parent.mkdir(parents=True, exist_ok=True)
    if postinstall:
        os.link(binary, exe)
    else:
        exe.write_text('echo "Error: claude native binary not installed." >&2\nexit 1\n')
        exe.chmod(0o755)
    (package / "cli-wrapper.cjs").write_text("#!/usr/bin/env node\n// finds the platform binary\n")
    _link(prefix / "bin" / "claude", "../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe")
    return exe if postinstall else binary


def npm_codex(
    prefix: Path, version: str = "0.171.0", *, outputs: dict[str, str] | None = None
) -> Path:
    """`npm install -g @openai/codex` into `prefix`: bin/codex.js, the platform package (an alias
    of @openai/codex@<version>-linux-x64) with vendor/<triple>/bin/codex, and prefix/bin/codex.
    Returns the native binary."""
    modules = prefix / "lib" / "node_modules"
    package = modules / "@openai" / "codex"
    _write_json(
        package / "package.json",
        {"name": "@openai/codex", "version": version, "bin": {"codex": "bin/codex.js"}},
    )
    script = package / "bin" / "codex.js"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/usr/bin/env node\n// Unified entry point for the Codex CLI.\n")
    script.chmod(0o755)
    platform_pkg = modules / "@openai" / f"codex-linux-{host_arch()}"
    _write_json(
        platform_pkg / "package.json",
        {"name": "@openai/codex", "version": f"{version}-linux-{host_arch()}"},
    )
    vendor = platform_pkg / "vendor" / linux_triple()
    _write_json(vendor / "codex-package.json", {"version": version, "entrypoint": "bin/codex"})
    binary = native(vendor / "bin" / "codex", outputs or codex_outputs(version))
    _link(prefix / "bin" / "codex", "../lib/node_modules/@openai/codex/bin/codex.js")
    return binary


def env_with(path: Iterable[Path], **more: str) -> dict[str, str]:
    """An environment whose PATH holds only `path` (no node, so no npm prefix from it)."""
    return {"PATH": os.pathsep.join(str(p) for p in path), **more}
