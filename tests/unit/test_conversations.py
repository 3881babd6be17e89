"""The engine's conversation files are kept outside the sandbox at each checkpoint and put back
when the home lost them, without following a link the run may have planted either way."""

from __future__ import annotations

import os
from pathlib import Path

from core.datadir import DataDir
from core.engines.base import Engine
from core.runs import conversations

SESSION = "3f2b8c1e-0000-4000-8000-000000000001"
TRANSCRIPT = Path(".claude/projects/-workspace") / f"{SESSION}.jsonl"


class Named(Engine):
    """An engine whose conversation is the files it is given."""

    name = "named"
    has_sessions = True

    def __init__(self, *files: Path):
        self.files = list(files)

    def conversation_files(self, home, session_id, workspace):
        return list(self.files)

    def prepare(self, ctx):  # not launched here
        raise NotImplementedError

    def launch_argv(self, ctx):
        raise NotImplementedError


def _setup(tmp_path: Path) -> tuple[DataDir, Path]:
    data = DataDir(tmp_path / "data").ensure()
    home = tmp_path / "home"
    (home / TRANSCRIPT).parent.mkdir(parents=True)
    (home / TRANSCRIPT).write_text('{"type":"user"}\n')
    return data, home


def test_a_kept_transcript_comes_back_into_an_emptied_home(tmp_path):
    data, home = _setup(tmp_path)
    assert conversations.keep(data, Named(TRANSCRIPT), home, SESSION, "/workspace") == [TRANSCRIPT]
    (home / TRANSCRIPT).unlink()
    assert conversations.restore(data, home, SESSION) == [TRANSCRIPT]
    assert (home / TRANSCRIPT).read_text() == '{"type":"user"}\n'
    # What the home holds is newer than the copy: left alone.
    (home / TRANSCRIPT).write_text("newer\n")
    assert conversations.restore(data, home, SESSION) == []
    assert (home / TRANSCRIPT).read_text() == "newer\n"


def test_links_planted_in_the_home_are_never_followed(tmp_path):
    data, home = _setup(tmp_path)
    secret = tmp_path / "host-secret"
    secret.write_text("do not copy me\n")
    planted = Path(".claude/link.jsonl")
    os.symlink(secret, home / planted)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.jsonl").write_text("outside\n")
    os.symlink(outside, home / ".codex")
    through = Path(".codex/x.jsonl")
    kept = conversations.keep(data, Named(planted, through, Path("../escape")), home, SESSION, "/w")
    assert kept == []
    assert not (conversations.kept_root(data, SESSION) / planted).exists()

    # Putting back: a home whose folder was replaced by a link to elsewhere gets nothing there.
    conversations.keep(data, Named(TRANSCRIPT), home, SESSION, "/workspace")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (home / ".claude" / "projects" / "-workspace" / TRANSCRIPT.name).unlink()
    os.rmdir(home / ".claude" / "projects" / "-workspace")
    os.symlink(target, home / ".claude" / "projects" / "-workspace")
    assert conversations.restore(data, home, SESSION) == []
    assert list(target.iterdir()) == []


def test_no_session_or_no_home_keeps_nothing(tmp_path):
    data, home = _setup(tmp_path)
    assert conversations.keep(data, Named(TRANSCRIPT), home, None, "/workspace") == []
    assert conversations.keep(data, Named(TRANSCRIPT), tmp_path / "gone", SESSION, "/w") == []
    assert conversations.restore(data, home, "never-kept") == []
