"""A repository's first workspace is written by git from the user's HEAD while the folder is
still being read, then taken on to the base (the folder as it is on disk): the workspace holds
the folder's bytes, and its git index, git's own, sees the user's uncommitted work as the user's
repository does, with true stat data for every file that is unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import core.vault.materialize as materialize_module
from core import tasks as tasks_mod
from core import workspaces
from core.app import Cairn
from core.errors import InputError
from core.vault import importer
from tests.support import folder_tree
from tests.support import git_alone as git

GIT_DIR_LEFT_OUT = frozenset({".git"})


def changed_paths(status: str) -> set[str]:
    return {line[3:] for line in status.splitlines()}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    for i in range(30):
        path = folder / f"pkg{i % 3}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n")
    (folder / "run.sh").write_text("#!/bin/sh\n")
    (folder / "run.sh").chmod(0o755)
    os.symlink("run.sh", folder / "link")
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", "-A")
    git(folder, "commit", "-q", "-m", "first")
    return folder


def make_dirty(folder: Path) -> None:
    (folder / "pkg0" / "mod0.py").write_text("value = 'changed'\n")  # changed
    (folder / "pkg1" / "mod1.py").unlink()  # deleted
    (folder / "pkg2" / "new.py").write_text("new = 1\n")  # untracked
    (folder / "pkg0" / "mod3.py").write_text("value = 'staged'\n")
    git(folder, "add", "pkg0/mod3.py")  # staged
    (folder / "run.sh").chmod(0o644)  # no longer executable
    (folder / "docs").mkdir()
    (folder / "docs" / "notes.txt").write_text("untracked in a new folder\n")


@pytest.mark.parametrize("dirty", [False, True], ids=["clean", "dirty"])
def test_the_workspace_is_gits_checkout_of_head_taken_to_the_folder_as_it_is(
    tmp_path, repo, monkeypatch, dirty, caplog
):
    if dirty:
        make_dirty(repo)
    begun: list[object] = []
    real_begin = materialize_module.begin_checkout

    def spy_begin(*args, **kwargs):
        made = real_begin(*args, **kwargs)
        begun.append(made)
        return made

    written_here: list[str] = []
    real_write = workspaces._write_git_index

    def spy_write(vault, root, commit, *rest):
        written_here.append(commit)
        return real_write(vault, root, commit, *rest)

    monkeypatch.setattr(workspaces, "begin_checkout", spy_begin)
    monkeypatch.setattr(workspaces, "_write_git_index", spy_write)
    with Cairn(tmp_path / "data") as cairn, caplog.at_level("WARNING"):
        made = cairn.tasks.new(repo)
    root = Path(made.workspace.root)

    assert len(begun) == 1 and begun[0] is not None  # git began while the folder was read
    assert "git could not write" not in caplog.text
    assert folder_tree(root, GIT_DIR_LEFT_OUT) == folder_tree(repo, GIT_DIR_LEFT_OUT)
    assert written_here == []  # the workspace's index is git's own
    # The index is HEAD's: what the user changed shows as changed, staged or not.
    status = ["status", "--porcelain", "--untracked-files=all"]
    assert changed_paths(git(root, *status)) == changed_paths(git(repo, *status))
    # Git's stat data is true for every unchanged file: only the changed ones differ.
    assert set(git(root, "diff-files", "--name-only").split()) == set(
        git(repo, "diff", "--name-only", "HEAD").split()
    )
    assert [p for p in root.parent.iterdir() if p != root] == []  # nothing of git's beside it


def test_a_new_task_failing_after_git_began_leaves_nothing(tmp_path, repo, monkeypatch):
    def unreadable(_repo):
        raise InputError(f"cannot import {repo}: secret.txt cannot be read")

    monkeypatch.setattr(importer, "_list_work_tree", unreadable)
    began: list[object] = []
    real_begin = tasks_mod.workspaces.begin_tree
    monkeypatch.setattr(
        tasks_mod.workspaces,
        "begin_tree",
        lambda *a, **k: began.append(real_begin(*a, **k)) or began[-1],
    )
    with Cairn(tmp_path / "data") as cairn:
        with pytest.raises(InputError, match="secret.txt"):
            cairn.tasks.new(repo)
        assert cairn.tasks.all() == []
    assert began and began[0] is not None
    assert list((tmp_path / "data" / "workspaces").iterdir()) == []
    assert list((tmp_path / "data" / "vault").iterdir()) == []
