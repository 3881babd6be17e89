"""A workspace's own `.git` has an index of the user's HEAD with the stat data of the files written
unchanged from it: `git status` inside shows exactly the uncommitted work the user had, without
reading the unchanged files."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from core import workspaces
from core.app import Cairn
from tests.support import git_alone as git
from tests.support import write_file as write


@pytest.fixture
def cairn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A Cairn whose workspace files are a second older than their git index: no entry is
    racy, so git trusts every stat data the index holds (as it does in a large tree)."""
    original = workspaces.materialize

    def then_wait(*args, **kwargs):
        tree = original(*args, **kwargs)
        time.sleep(1.1)
        return tree

    monkeypatch.setattr(workspaces, "materialize", then_wait)
    app = Cairn(tmp_path / "data")
    yield app
    app.close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    # Names whose order differs between "sorted as trees" and "sorted as paths" if done wrong.
    for rel in ("a-b", "a.b", "a/x", "a/y/z", "a0", "b", "tool.sh"):
        write(repo / rel, f"{rel}\n")
    os.symlink("b", repo / "link")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    write(repo / "a/x", "a/x changed\n")
    write(repo / "b", "B\n")  # same size as before, other bytes
    write(repo / "a.b", "staged\n")
    git(repo, "add", "a.b")
    (repo / "a0").unlink()
    os.chmod(repo / "tool.sh", 0o755)
    write(repo / "new.txt", "new\n")
    return repo


def porcelain(folder: Path) -> list[str]:
    return sorted(git(folder, "status", "--porcelain", "--untracked-files=all").splitlines())


def test_git_status_in_the_workspace_shows_the_users_uncommitted_work(cairn, repo, tmp_path):
    made = cairn.tasks.new(repo)
    ws = Path(made.workspace.root)

    # What the user has, with nothing staged: the workspace's index is HEAD's tree.
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(repo), str(copy)], check=True)
    git(copy, "reset", "-q")
    expected = porcelain(copy)
    assert " M b" in expected and " D a0" in expected and "?? new.txt" in expected
    assert porcelain(ws) == expected
    assert git(ws, "rev-parse", "HEAD").strip() == git(repo, "rev-parse", "HEAD").strip()


def test_the_unchanged_files_have_their_stat_data_in_the_index(cairn, repo):
    made = cairn.tasks.new(repo)
    ws = Path(made.workspace.root)

    debug = git(ws, "ls-files", "--debug")
    sizes = {}
    lines = debug.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith(" "):
            size_line = lines[i + 5].strip()
            sizes[line] = int(size_line.split()[1])
    assert sizes["a-b"] == len("a-b\n") and sizes["a/y/z"] == len("a/y/z\n")
    assert sizes["link"] == len("b")
    assert sizes["b"] == 0 and sizes["a/x"] == 0  # changed since HEAD: git reads them
    # Nothing the index vouches for needs reading: a refresh finds only the real changes.
    refreshed = subprocess.run(
        ["git", "-c", "safe.directory=*", "update-index", "--refresh"],
        cwd=ws,
        capture_output=True,
        text=True,
    ).stdout
    assert sorted(line.split(":")[0] for line in refreshed.splitlines()) == [
        "a.b",
        "a/x",
        "a0",
        "b",
        "tool.sh",
    ]
