"""The real Claude Code and Codex CLIs installed the way a person installs them (`npm install -g`
into a global prefix whose bin folder is on PATH), found by `find_engine` and followed to the
native binaries the sandbox mounts; an older Claude Code that still has every flag the engine
uses is found usable, with a note.

npm's cache, which `npm ci --prefix tests/agents` filled (tests/agents/package.json pins the
older release as the alias `claude-code-older`), serves the packages.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from core.engines import claude_code, codex, discovery
from core.engines.base import EngineSettings
from core.engines.claude_code import ClaudeCodeEngine
from core.engines.codex import CodexEngine
from core.engines.native import host_arch, linux_triple, read_elf
from tests.support import locked_agent_version, npm_install_global

pytestmark = pytest.mark.slow

AGENTS = Path(__file__).resolve().parents[1] / "agents"
OLDER_ALIAS = "claude-code-older"
NONE = EngineSettings()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """Two global prefixes: the locked releases of both CLIs, and the older Claude Code."""
    current = tmp_path_factory.mktemp("npm-global")
    npm_install_global(
        current,
        [
            f"@anthropic-ai/claude-code@{locked_agent_version('@anthropic-ai/claude-code')}",
            f"@openai/codex@{locked_agent_version('@openai/codex')}",
        ],
    )
    older = tmp_path_factory.mktemp("npm-global-older")
    npm_install_global(older, [f"@anthropic-ai/claude-code@{locked_agent_version(OLDER_ALIAS)}"])
    return {"current": current, "older": older}


def _env(prefix: Path, home: Path) -> dict[str, str]:
    """A person's environment: the prefix's bin folder first on PATH, then the system's."""
    return {"PATH": f"{prefix / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin", "HOME": str(home)}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def test_both_clis_are_found_on_path_as_their_native_binaries(installed, home):
    prefix = installed["current"]
    env = _env(prefix, home)
    modules = prefix / "lib" / "node_modules"
    discovery.clear_caches()
    started = time.monotonic()
    claude = discovery.find_engine("claude-code", NONE, env=env, home=home)
    found_codex = discovery.find_engine("codex", NONE, env=env, home=home)
    cold = time.monotonic() - started
    assert claude.usable, claude.problem
    assert (claude.source, claude.path) == ("PATH", prefix / "bin" / "claude")
    assert claude.version == locked_agent_version("@anthropic-ai/claude-code")
    assert claude.binary is not None and read_elf(claude.binary) is not None
    # npm's postinstall copies the platform binary over bin/claude.exe; without it, the
    # platform package's own binary is used.
    assert claude.binary in (
        modules / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe",
        modules / "@anthropic-ai" / "claude-code" / "node_modules" / "@anthropic-ai"
        / f"claude-code-linux-{host_arch()}" / "claude",
        modules / "@anthropic-ai" / f"claude-code-linux-{host_arch()}" / "claude",
    )  # fmt: skip
    assert found_codex.usable, found_codex.problem
    assert (found_codex.source, found_codex.path) == ("PATH", prefix / "bin" / "codex")
    assert found_codex.version == locked_agent_version("@openai/codex")
    assert found_codex.binary is not None
    assert found_codex.binary.parts[-4:] == ("vendor", linux_triple(), "bin", "codex")
    assert read_elf(found_codex.binary) is not None
    assert (claude.note, found_codex.note) == (None, None)  # the tested releases
    print(f"find_engine, both engines: cold {cold * 1000:.0f} ms")

    # What a launch mounts is the native binary (Codex: its whole platform folder).
    launch = ClaudeCodeEngine().mounts(discovery.settings_with(NONE, claude))
    assert launch == [(claude.binary, claude_code.BINARY_IN_SANDBOX)]
    folder = found_codex.binary.parent.parent
    assert CodexEngine().mounts(discovery.settings_with(NONE, found_codex)) == [
        (folder, codex.MOUNT_POINT)
    ]


def test_the_settings_may_name_the_wrapper_people_run(installed, home):
    prefix = installed["current"]
    settings = EngineSettings(binary=str(prefix / "bin" / "codex"))  # bin/codex.js, for node
    found = discovery.find_engine("codex", settings, env={"PATH": "/nonexistent"}, home=home)
    assert found.usable and found.source == "settings"
    assert found.binary is not None and found.binary.name == "codex"
    assert read_elf(found.binary) is not None


def test_an_older_claude_code_with_every_flag_is_usable_with_a_note(installed, home):
    older = locked_agent_version(OLDER_ALIAS)
    assert older != claude_code.TESTED_VERSION
    found = discovery.find_engine(
        "claude-code", NONE, env=_env(installed["older"], home), home=home
    )
    assert found.usable, found.problem
    assert found.version == older
    assert found.note == f"untested version {older}: it has every flag the engine uses"
    # The same judgment holds for the in-sandbox check of that binary.
    settings = discovery.settings_with(NONE, found)
    sandbox_said = {"claude": f"{older} (Claude Code)", "bash": "bash 5.2.15(1)-release"}
    assert ClaudeCodeEngine().check_version(settings, sandbox_said) is None


def test_a_cached_search_takes_milliseconds(installed, home):
    env = _env(installed["current"], home)
    for name in ("claude-code", "codex"):
        assert discovery.find_engine(name, NONE, env=env, home=home).usable
    started = time.monotonic()
    for name in ("claude-code", "codex"):
        discovery.find_engine(name, NONE, env=env, home=home)
    print(f"find_engine, both engines: warm {(time.monotonic() - started) * 1000:.1f} ms")
