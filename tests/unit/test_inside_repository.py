"""A folder dropped from inside a repository's work tree is imported as a plain folder, and the
person is told which repository it belongs to and what to drop instead."""

from __future__ import annotations

from core.app import Cairn
from tests.support import git


def _repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    (repo / "sub" / "a.txt").write_text("a\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "one")
    return repo


def test_a_folder_inside_a_repository_says_which_one_it_belongs_to(tmp_path):
    repo = _repo(tmp_path)
    with Cairn(tmp_path / "data") as cairn:
        made = cairn.tasks.new(repo / "sub")
    assert made.note is not None
    assert f"inside the git repository {repo}" in made.note and f"drop {repo}" in made.note
    assert (tmp_path / "data" / "workspaces" / made.workspace.id / "a.txt").read_text() == "a\n"


def test_a_repository_top_or_a_plain_folder_needs_no_note(tmp_path):
    repo = _repo(tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "b.txt").write_text("b\n")
    with Cairn(tmp_path / "data") as cairn:
        assert cairn.tasks.new(repo).note is None
        assert cairn.tasks.new(plain).note is None
