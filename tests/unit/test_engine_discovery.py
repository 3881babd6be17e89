"""Finding Claude Code and Codex where people install them: small fake installs laid out like npm,
the native installer, nvm, volta and asdf lay out the real ones, followed to the native binary and
judged by the flags the engines use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.engines import claude_code, codex
from core.engines.base import EngineSettings
from core.engines.claude_code import ClaudeCodeEngine
from core.engines.codex import CodexEngine
from core.engines.discovery import Found, clear_caches, find_engine, npm_prefix, settings_with
from core.engines.native import host_arch, linux_triple
from tests.unit.fake_installs import (
    claude_outputs,
    codex_outputs,
    env_with,
    fake_runner,  # noqa: F401  (a fixture)
    native,
    npm_claude,
    npm_codex,
)

pytestmark = pytest.mark.usefixtures("fake_runner")
NONE = EngineSettings()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def test_an_npm_global_install_on_path_is_found_through_its_placeholder(tmp_path, home):
    prefix = tmp_path / "npm"
    binary = npm_claude(prefix)  # postinstall did not run: bin/claude.exe is the stub
    found = find_engine("claude-code", NONE, env=env_with([prefix / "bin"]), home=home)
    assert found == Found("claude-code", prefix / "bin" / "claude", binary, "2.1.332", "PATH", None)
    assert found.usable and found.note is None


def test_after_postinstall_the_copied_binary_itself_is_mounted(tmp_path, home):
    prefix = tmp_path / "npm"
    exe = npm_claude(prefix, postinstall=True)
    found = find_engine("claude-code", NONE, env=env_with([prefix / "bin"]), home=home)
    assert found.binary == exe and found.usable
    assert ClaudeCodeEngine().mounts(settings_with(NONE, found)) == [
        (exe, claude_code.BINARY_IN_SANDBOX)
    ]


def test_codex_is_followed_from_its_node_wrapper_to_the_vendored_binary(tmp_path, home):
    prefix = tmp_path / "npm"
    binary = npm_codex(prefix)
    found = find_engine("codex", NONE, env=env_with([prefix / "bin"]), home=home)
    assert (found.path, found.binary, found.version) == (
        prefix / "bin" / "codex",
        binary,
        "0.171.0",
    )
    assert found.usable
    # The whole platform folder is mounted, so Codex finds its helpers (rg) beside it.
    assert CodexEngine().mounts(settings_with(NONE, found)) == [
        (binary.parent.parent, codex.MOUNT_POINT)
    ]
    assert binary.parent.parent.name == linux_triple()


def test_the_npm_prefix_is_found_without_path_from_the_users_npmrc(tmp_path, home):
    prefix = home / ".npm-global"
    binary = npm_claude(prefix)
    (home / ".npmrc").write_text("fund=false\nprefix=~/.npm-global\n")
    found = find_engine("claude-code", NONE, env=env_with([]), home=home)
    assert (found.source, found.binary, found.path) == (
        "npm global",
        binary,
        prefix / "bin" / "claude",
    )


def test_the_npm_prefix_from_the_environment_and_from_nodes_location(tmp_path, home):
    assert npm_prefix({"NPM_CONFIG_PREFIX": str(tmp_path / "p")}, home) == tmp_path / "p"
    node_prefix = tmp_path / "node"
    native(node_prefix / "bin" / "node", {})
    assert npm_prefix(env_with([node_prefix / "bin"]), home) == node_prefix
    (node_prefix / "etc").mkdir()
    (node_prefix / "etc" / "npmrc").write_text("prefix = ${HOME}/g\n")
    assert npm_prefix(env_with([node_prefix / "bin"], HOME=str(home)), home) == node_prefix
    clear_caches()  # cached per environment
    assert npm_prefix(env_with([node_prefix / "bin"], HOME=str(home)), home) == home / "g"


def test_the_native_installers_link_into_its_versions_folder(home):
    versions = home / ".local" / "share" / "claude" / "versions"
    native(versions / "2.1.300", claude_outputs("2.1.300"))
    newest = native(versions / "2.1.332", claude_outputs("2.1.332"))
    link = home / ".local" / "bin" / "claude"
    link.parent.mkdir(parents=True)
    link.symlink_to(newest)
    found = find_engine("claude-code", NONE, env=env_with([]), home=home)
    assert (found.source, found.path, found.binary) == ("native installer", link, newest)
    link.unlink()  # no link: the newest version in the folder
    found = find_engine("claude-code", NONE, env=env_with([]), home=home)
    assert (found.source, found.binary, found.version) == ("native installer", newest, "2.1.332")


def test_nvm_installs_are_found_newest_node_first(home):
    nodes = home / ".nvm" / "versions" / "node"
    npm_codex(nodes / "v18.20.0", "0.170.0")
    binary = npm_codex(nodes / "v22.11.0", "0.171.0")
    found = find_engine("codex", NONE, env=env_with([]), home=home)
    assert (found.source, found.binary, found.version) == ("nvm", binary, "0.171.0")


def test_a_volta_shim_leads_to_the_package_volta_installed(tmp_path, home):
    volta = home / ".volta"
    shim = native(volta / "bin" / "volta-shim", {})  # volta's own binary, never the CLI
    (volta / "bin" / "claude").symlink_to(shim)
    image = volta / "tools" / "image" / "packages" / "@anthropic-ai" / "claude-code"
    binary = npm_claude(image)
    found = find_engine("claude-code", NONE, env=env_with([volta / "bin"]), home=home)
    assert (found.path, found.binary, found.source) == (volta / "bin" / "claude", binary, "PATH")
    found = find_engine("claude-code", NONE, env=env_with([]), home=home)
    assert (found.binary, found.source) == (binary, "volta")


def test_an_asdf_shim_names_the_node_install_it_runs(home):
    asdf = home / ".asdf"
    binary = npm_claude(asdf / "installs" / "nodejs" / "22.11.0")
    shim = asdf / "shims" / "claude"
    shim.parent.mkdir(parents=True)
    shim.write_text(
        "#!/usr/bin/env bash\n# asdf-plugin: nodejs 22.11.0\n"
        f'exec {asdf}/bin/asdf exec "claude" "$@" # asdf_allow: \' asdf \'\n'
    )
    shim.chmod(0o755)
    found = find_engine("claude-code", NONE, env=env_with([asdf / "shims"]), home=home)
    assert (found.path, found.binary, found.source) == (shim, binary, "PATH")


def test_a_chain_of_wrappers_and_links_is_followed(tmp_path, home):
    binary = npm_claude(tmp_path / "npm")
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "claude").symlink_to(tmp_path / "npm" / "bin" / "claude")
    wrapper = tmp_path / "bin" / "claude"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexport FOO=1\nexec "{tmp_path}/opt/claude" "$@"\n')
    wrapper.chmod(0o755)
    found = find_engine("claude-code", NONE, env=env_with([tmp_path / "bin"]), home=home)
    assert (found.path, found.binary, found.usable) == (wrapper, binary, True)


def test_a_pnpm_shim_relative_to_its_folder_is_followed(tmp_path, home):
    pnpm = home / ".local" / "share" / "pnpm"
    binary = npm_codex(pnpm / "global" / "5")
    shim = pnpm / "codex"
    shim.write_text(
        '#!/bin/sh\nbasedir=$(dirname "$(echo "$0" | sed -e \'s,\\\\,/,g\')")\n'
        'exec node "$basedir/global/5/lib/node_modules/@openai/codex/bin/codex.js" "$@"\n'
    )
    shim.chmod(0o755)
    found = find_engine("codex", NONE, env=env_with([]), home=home)
    assert (found.source, found.path, found.binary) == ("pnpm", shim, binary)


def test_a_binary_missing_a_flag_is_refused_naming_it_and_the_fix(tmp_path, home):
    prefix = tmp_path / "npm"
    npm_claude(prefix, "2.1.90", outputs=claude_outputs("2.1.90", without=["--fork-session"]))
    found = find_engine("claude-code", NONE, env=env_with([prefix / "bin"]), home=home)
    assert not found.usable
    assert found.missing == ("--fork-session",)
    assert "lacks --fork-session" in found.problem
    assert "npm install -g @anthropic-ai/claude-code@latest" in found.problem


def test_a_hidden_flag_is_judged_by_how_the_cli_answers_it(tmp_path, home):
    prefix = tmp_path / "npm"
    old = claude_outputs("2.1.50", without=["--resume-session-at"])
    npm_claude(prefix, "2.1.50", outputs=old)
    found = find_engine("claude-code", NONE, env=env_with([prefix / "bin"]), home=home)
    assert found.missing == ("--resume-session-at",)


def test_codex_missing_a_subcommand_is_refused(tmp_path, home):
    prefix = tmp_path / "npm"
    npm_codex(prefix, "0.60.0", outputs=codex_outputs("0.60.0", without=["exec fork"]))
    found = find_engine("codex", NONE, env=env_with([prefix / "bin"]), home=home)
    assert found.missing == ("exec fork",)
    assert "npm install -g @openai/codex@latest" in found.problem


def test_an_older_version_with_every_flag_is_usable_with_a_note(tmp_path, home):
    prefix = tmp_path / "npm"
    npm_claude(prefix, "2.1.197")
    found = find_engine("claude-code", NONE, env=env_with([prefix / "bin"]), home=home)
    assert found.usable and found.version == "2.1.197"
    assert found.note == "untested version 2.1.197: it has every flag the engine uses"


def test_a_usable_install_elsewhere_beats_a_refused_one_on_path(tmp_path, home):
    old = tmp_path / "old"
    npm_claude(old, "2.1.90", outputs=claude_outputs("2.1.90", without=["--settings"]))
    binary = npm_claude(home / ".nvm" / "versions" / "node" / "v22.0.0")
    found = find_engine("claude-code", NONE, env=env_with([old / "bin"]), home=home)
    assert (found.source, found.binary, found.usable) == ("nvm", binary, True)
    assert "lacks --settings" in found.note


def test_the_settings_binary_wins_and_may_be_a_wrapper(tmp_path, home):
    npm_claude(tmp_path / "on-path")
    chosen = npm_claude(tmp_path / "chosen", "2.1.300")
    settings = EngineSettings(binary=str(tmp_path / "chosen" / "bin" / "claude"))
    found = find_engine(
        "claude-code", settings, env=env_with([tmp_path / "on-path" / "bin"]), home=home
    )
    assert (found.source, found.binary, found.version) == ("settings", chosen, "2.1.300")
    assert ClaudeCodeEngine().mounts(settings) == [(chosen, claude_code.BINARY_IN_SANDBOX)]


def test_a_settings_binary_that_is_gone_is_not_replaced_by_another(tmp_path, home):
    npm_claude(tmp_path / "npm")
    settings = EngineSettings(binary=str(tmp_path / "nope" / "claude"))
    found = find_engine(
        "claude-code", settings, env=env_with([tmp_path / "npm" / "bin"]), home=home
    )
    assert found.source == "settings" and found.binary is None
    assert "engines.claude-code.binary" in found.problem and "does not exist" in found.problem


def test_a_pinned_version_must_match(tmp_path, home):
    prefix = tmp_path / "npm"
    npm_claude(prefix, "2.1.300")
    pinned = EngineSettings(version="2.1.332")
    found = find_engine("claude-code", pinned, env=env_with([prefix / "bin"]), home=home)
    assert "pin 2.1.332" in found.problem
    assert "npm install -g @anthropic-ai/claude-code@2.1.332" in found.problem
    ok = find_engine(
        "claude-code", EngineSettings(version="2.1.300"), env=env_with([prefix / "bin"]), home=home
    )
    assert ok.usable


def test_nothing_found_says_how_to_install(home):
    found = find_engine("claude-code", NONE, env=env_with([]), home=home)
    assert (found.path, found.binary, found.usable) == (None, None, False)
    assert "npm install -g @anthropic-ai/claude-code@latest" in found.problem
    found = find_engine("codex", NONE, env=env_with([]), home=home)
    assert "npm install -g @openai/codex@latest" in found.problem


def test_the_shell_engine_needs_nothing(home):
    found = find_engine("shell", NONE, env=env_with([]), home=home)
    assert found.usable and found.binary is None


@pytest.mark.parametrize(
    "arch, interpreter, words",
    [
        ("arm64" if host_arch() == "x64" else "x64", None, "is built for"),
        (None, "/lib/ld-musl-x86_64.so.1", "musl build"),
    ],
)
def test_a_binary_that_cannot_run_in_the_sandbox_is_refused(
    tmp_path, home, arch, interpreter, words
):
    binary = native(
        tmp_path / "bin" / "claude", claude_outputs("2.1.332"), arch=arch, interpreter=interpreter
    )
    found = find_engine("claude-code", NONE, env=env_with([binary.parent]), home=home)
    assert not found.usable and words in found.problem


def test_the_nodejs_build_of_claude_code_is_refused_with_the_fix(tmp_path, home):
    package = tmp_path / "npm" / "lib" / "node_modules" / "@anthropic-ai" / "claude-code"
    package.mkdir(parents=True)
    (package / "package.json").write_text(
        '{"name": "@anthropic-ai/claude-code", "version": "2.1.100", "bin": {"claude": "cli.js"}}'
    )
    (package / "cli.js").write_text("#!/usr/bin/env node\n")
    (tmp_path / "npm" / "bin").mkdir()
    (tmp_path / "npm" / "bin" / "claude").symlink_to(package / "cli.js")
    found = find_engine("claude-code", NONE, env=env_with([tmp_path / "npm" / "bin"]), home=home)
    assert "Node.js build" in found.problem and "@anthropic-ai/claude-code@latest" in found.problem


def test_probes_are_cached_by_path_size_and_mtime(tmp_path, home, fake_runner):  # noqa: F811
    prefix = tmp_path / "npm"
    binary = npm_claude(prefix)
    env = env_with([prefix / "bin"])
    find_engine("claude-code", NONE, env=env, home=home)
    ran = len(fake_runner)
    assert ran == 3  # --version, --help, and the hidden flag, once each
    find_engine("claude-code", NONE, env=env, home=home)
    assert len(fake_runner) == ran
    native(binary, claude_outputs("2.1.333"))  # replaced in place by an update
    os.utime(binary, ns=(1, 1))
    assert find_engine("claude-code", NONE, env=env, home=home).version == "2.1.333"
    assert len(fake_runner) == 2 * ran


def test_check_version_in_the_sandbox_judges_by_the_same_features(tmp_path):
    prefix = tmp_path / "npm"
    binary = npm_claude(prefix, "2.1.90", outputs=claude_outputs("2.1.90", without=["--verbose"]))
    settings = EngineSettings(binary=str(prefix / "bin" / "claude"))
    found = {"claude": "2.1.90 (Claude Code)", "bash": "bash 5.2"}
    assert "lacks --verbose" in ClaudeCodeEngine().check_version(settings, found)
    native(binary, claude_outputs("2.1.197"))
    os.utime(binary, ns=(2, 2))
    assert (
        ClaudeCodeEngine().check_version(settings, {**found, "claude": "2.1.197 (Claude Code)"})
        is None
    )
    other = ClaudeCodeEngine().check_version(settings, found)
    assert "the sandbox ran Claude Code 2.1.90" in other
