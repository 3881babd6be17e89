"""Where the agent CLIs installed from tests/agents/package.json are, for the tests that drive them.

`npm ci` in this folder (scripts/setup.sh test runs it) puts each CLI's native binary in a
platform sub-package; these helpers find it, or return None so a test can skip with `missing()`.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

AGENTS_DIR = Path(__file__).resolve().parent
NODE_MODULES = AGENTS_DIR / "node_modules"
CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
CODEX_PACKAGE = "@openai/codex"


def _arch() -> str | None:
    return {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )


def _is_musl() -> bool:
    libc, _ = platform.libc_ver()
    return libc != "glibc" and any(Path("/lib").glob("ld-musl-*"))


def claude_binary() -> Path | None:
    """The Claude Code native binary for this machine (glibc or musl, x64 or arm64), or None."""
    override = os.environ.get("CAIRN_TEST_CLAUDE_BINARY")
    if override:
        path = Path(override)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    arch = _arch()
    if platform.system() != "Linux" or arch is None:
        return None
    suffix = "-musl" if _is_musl() else ""
    path = NODE_MODULES / f"{CLAUDE_PACKAGE}-linux-{arch}{suffix}" / "claude"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def codex_binary() -> Path | None:
    """The Codex native binary for this machine, or None. Codex ships one statically linked musl
    build per architecture (`vendor/<triple>/bin/codex` in its platform sub-package), which runs
    on glibc and musl systems alike."""
    override = os.environ.get("CAIRN_TEST_CODEX_BINARY")
    if override:
        path = Path(override)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    arch = _arch()
    if platform.system() != "Linux" or arch is None:
        return None
    triple = {"x64": "x86_64", "arm64": "aarch64"}[arch] + "-unknown-linux-musl"
    for package in (f"{CODEX_PACKAGE}-linux-{arch}", CODEX_PACKAGE):
        path = NODE_MODULES / package / "vendor" / triple / "bin" / "codex"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def pinned_version(package: str) -> str | None:
    """The exact version package.json pins for `package`."""
    try:
        deps = json.loads((AGENTS_DIR / "package.json").read_text()).get("dependencies") or {}
    except (OSError, ValueError):
        return None
    return deps.get(package)


def missing(what: str = "Claude Code") -> str:
    """The skip reason when a CLI is not installed."""
    return (
        f"{what} is not installed: run `npm ci --prefix {AGENTS_DIR}` (scripts/setup.sh test does)"
    )
