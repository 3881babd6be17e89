"""Judging a program by what its own help shows: each feature's probe, the version, a program
that cannot run or hangs, and the cache keyed by path, size and modification time. The programs
here are small shell scripts, run for real."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from core.engines import capabilities
from core.engines.base import EngineSettings
from core.engines.capabilities import (
    Feature,
    Probe,
    choice,
    flag,
    hidden_flag,
    parse_version,
    probe,
    subcommand,
    version_tuple,
)
from core.engines.claude_code import FEATURES as CLAUDE_FEATURES
from core.engines.claude_code import ClaudeCodeEngine
from core.engines.codex import FEATURES as CODEX_FEATURES
from tests.unit.fake_installs import claude_outputs, codex_outputs

FEATURES = (
    flag("--print"),
    choice("--output-format", "stream-json"),
    hidden_flag("--resume-session-at"),
    subcommand(["exec", "resume"]),
)


@pytest.fixture(autouse=True)
def _fresh_cache():
    capabilities.clear_cache()
    yield
    capabilities.clear_cache()


def script(path: Path, body: str) -> Path:
    """A program that answers like a CLI; `$*` is its arguments."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


FULL = """case "$*" in
  --version) echo "2.1.197 (Claude Code)" ;;
  --help) printf '  -p, --print   Print\\n  --output-format <f>  "text" or "stream-json"\\n' ;;
  --resume-session-at) echo "error: option '--resume-session-at <message id>' argument missing" >&2; exit 1 ;;
  "exec --help") printf 'Commands:\\n  resume  Resume\\n  fork    Fork\\n' ;;
  *) echo "error: unknown option '$1'" >&2; exit 1 ;;
esac
"""


def test_a_program_with_every_feature(tmp_path):
    result = probe(script(tmp_path / "cli", FULL), FEATURES)
    assert result == Probe(tmp_path / "cli", "2.1.197")
    assert result.ok


def test_each_missing_feature_is_named(tmp_path):
    body = FULL.replace("stream-json", "ndjson").replace("  resume  Resume\\n", "")
    body = body.replace("argument missing", "is unknown")
    result = probe(script(tmp_path / "cli", body), FEATURES)
    assert result.missing == ("--output-format stream-json", "--resume-session-at", "exec resume")
    assert not result.ok


def test_flags_match_whole_names_only():
    assert flag("--resume").present("  -r, --resume [value]  Resume")
    assert not flag("--resume").present("  --resume-session-at <id>")
    assert not flag("--print").present("  --printer")
    assert choice("--permission-mode", "dontAsk").present(
        '  --permission-mode <mode>  (choices: "default",\n        "dontAsk", "plan")'
    )
    assert subcommand(["exec"]).present("Commands:\n  exec    Run Codex\n")
    assert not subcommand(["exec"]).present("Usage: codex exec [OPTIONS]\n")


def test_the_engines_features_match_what_their_clis_print():
    def missing(features: tuple[Feature, ...], outputs: dict[str, str]) -> list[str]:
        return [f.name for f in features if not f.present(outputs.get(" ".join(f.args), ""))]

    assert missing(CLAUDE_FEATURES, claude_outputs("2.1.332")) == []
    assert missing(CODEX_FEATURES, codex_outputs("0.171.0")) == []
    assert missing(CODEX_FEATURES, codex_outputs("0.1.0", without=["--json"])) == ["--json"]


def test_a_program_that_cannot_run_says_so(tmp_path):
    broken = script(tmp_path / "cli", 'echo "error while loading shared libraries" >&2; exit 127\n')
    result = probe(broken, FEATURES)
    assert result.error and "shared libraries" in result.error
    gone = probe(tmp_path / "nope", FEATURES)
    assert gone.error and "cannot be read" in gone.error
    problem, note = ClaudeCodeEngine().judge(result, EngineSettings())
    assert problem and "cannot be used" in problem and note is None


def test_a_program_that_hangs_is_cut_short_and_not_cached(tmp_path):
    slow = script(tmp_path / "cli", FULL.replace("--help)", "--help) sleep 5;"))
    started = time.monotonic()
    result = probe(slow, FEATURES, timeout=0.3, patience=0.6)
    assert time.monotonic() - started < 3
    assert result.error and "did not answer `--help` within 0.6 s" in result.error
    assert result.version == "2.1.197"
    assert probe(slow, FEATURES, timeout=0.3, patience=0.6) is not result  # not remembered


def test_a_slow_answer_is_given_a_second_longer_chance(tmp_path):
    """A cold disk or a busy machine can keep a CLI's answers past the short timeout: the
    commands that missed it run once more with patience, and the program is judged by those."""
    cli = script(tmp_path / "cli", "sleep 1\n" + FULL)
    started = time.monotonic()
    result = probe(cli, FEATURES, timeout=0.3, patience=5)
    assert result.ok, result
    assert result.version == "2.1.197"
    assert time.monotonic() - started < 4  # the slow commands ran again together, not in turn


def test_all_commands_run_at_once(tmp_path):
    log = tmp_path / "log"
    body = f'echo "start $*" >> {log}; sleep 0.3; echo "end $*" >> {log}\n' + FULL
    assert probe(script(tmp_path / "cli", body), FEATURES, timeout=5).ok
    lines = log.read_text().splitlines()
    # Every command had started before the first one ended.
    assert [line.split()[0] for line in lines[:4]] == ["start"] * 4


def test_the_cache_follows_path_size_and_mtime(tmp_path):
    cli = script(tmp_path / "cli", FULL)
    first = probe(cli, FEATURES)
    assert probe(cli, FEATURES) is first
    script(cli, FULL.replace("2.1.197", "2.1.198"))
    os.utime(cli, ns=(5, 5))
    assert probe(cli, FEATURES).version == "2.1.198"


def test_the_probe_never_sees_the_persons_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cli = script(tmp_path / "cli", 'echo "$HOME" > ' + str(tmp_path / "seen") + "\n" + FULL)
    probe(cli, FEATURES)
    seen = (tmp_path / "seen").read_text().strip()
    assert seen != str(tmp_path / "home") and "cairn-probe-" in seen
    assert not Path(seen).exists()  # thrown away afterwards


def test_versions():
    assert parse_version("codex-cli 0.171.0") == "0.171.0"
    assert parse_version("2.1.332 (Claude Code)") == "2.1.332"
    assert parse_version("nothing") is None
    assert version_tuple("2.1.10") > version_tuple("2.1.9")
    assert version_tuple(None) == (0, 0, 0)
