"""The bytes a recorded tree holds, as the Sessions tab shows them: equal to what git counts
blob by blob, but known from materialize's memo or counted from a known tree and what differs,
so that a 100,000-file tree is not read object by object each time a process first asks."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from core.vault import Vault, sizes
from core.vault.importer import import_folder
from core.vault.materialize import materialize
from core.vault.objects import run_git


def write(path: Path, data: bytes, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mode is not None:
        path.chmod(mode)


def git_count(vault: Vault, tree: str) -> int:
    """What git says, blob by blob (`ls-tree -r -l`)."""
    out = run_git(["--git-dir", str(vault.git_dir), "ls-tree", "-r", "-l", tree]).stdout
    return sum(int(line.split()[3]) for line in out.decode().splitlines())


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    write(src / "README", b"hello\n")
    write(src / "same-a.txt", b"twice the same bytes\n")
    write(src / "deep" / "same-b.txt", b"twice the same bytes\n")  # one blob, two files
    write(src / "empty", b"")
    write(src / "bin" / "run", b"#!/bin/sh\necho run\n", 0o755)
    os.symlink("README", src / "link")
    return src


@pytest.fixture
def no_counting(monkeypatch):
    """Any count blob by blob fails the test: the answer must come from elsewhere."""

    def refuse(git_dir: str, tree: str) -> int:
        raise AssertionError(f"counted {tree} blob by blob")

    monkeypatch.setattr(sizes, "_count_all", refuse)


def test_a_materialized_tree_is_known_without_reading_its_blobs(
    vault, folder, tmp_path, monkeypatch
):
    tree = import_folder(vault, folder).base_tree
    expected = git_count(vault, tree)
    materialize(vault, tree, tmp_path / "out", label="the base")
    assert (vault.git_dir / sizes.SIZES_FILE).read_text() == f"{tree} {expected}\n"

    sizes._memos.clear()  # another process: only the file is known
    monkeypatch.setattr(sizes, "_count_all", lambda *_: pytest.fail("counted blob by blob"))
    assert sizes.tree_bytes(vault.git_dir, tree) == expected


def test_a_later_tree_is_counted_from_a_known_one_and_what_differs(
    vault, folder, tmp_path, monkeypatch
):
    base = import_folder(vault, folder).base_tree
    materialize(vault, base, tmp_path / "out", label="the base")
    write(folder / "README", b"hello, longer now\n")  # changed
    (folder / "empty").unlink()  # gone
    (folder / "same-a.txt").unlink()  # one of two files of a blob gone
    write(folder / "new" / "file.bin", os.urandom(3000))  # new
    (folder / "bin" / "run").chmod(0o644)  # the mode alone
    (folder / "link").unlink()
    os.symlink("deep/same-b.txt", folder / "link")  # a link pointed elsewhere
    later = import_folder(vault, folder).base_tree
    expected = git_count(vault, later)
    sizes._memos.clear()
    monkeypatch.setattr(sizes, "_count_all", lambda *_: pytest.fail("counted blob by blob"))

    assert sizes.tree_bytes(vault.git_dir, later, near=base) == expected
    assert f"{later} {expected}\n" in (vault.git_dir / sizes.SIZES_FILE).read_text()


def test_without_a_known_tree_git_counts_it_once(vault, folder):
    tree = import_folder(vault, folder).base_tree
    other = import_folder(vault, folder / "deep").base_tree
    assert sizes.tree_bytes(vault.git_dir, tree, near=other) == git_count(vault, tree)
    # A near tree of unknown size is no help: counted whole, then remembered.
    assert sizes.tree_bytes(vault.git_dir, other) == git_count(vault, other)


def test_lines_of_other_processes_are_read_and_broken_ones_ignored(vault, folder, no_counting):
    path = vault.git_dir / sizes.SIZES_FILE
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    path.write_bytes(f"{a} 12\nnot a line at all\n{b} -5\n{c} 7".encode())  # c: cut short
    assert sizes.tree_bytes(vault.git_dir, a) == 12
    with open(path, "ab") as f:  # the rest of c's line, and a line of another process
        f.write(f"0\n{b} 99\n".encode())
    assert sizes.tree_bytes(vault.git_dir, c) == 70
    assert sizes.tree_bytes(vault.git_dir, b) == 99


def test_threads_asking_at_once_count_a_tree_once(vault, folder, monkeypatch):
    tree = import_folder(vault, folder).base_tree
    real = sizes._count_all
    counted: list[str] = []

    def slow_count(git_dir: str, asked: str) -> int:
        counted.append(asked)
        started.wait(5)
        return real(git_dir, asked)

    started = threading.Event()
    monkeypatch.setattr(sizes, "_count_all", slow_count)
    answers: list[int] = []
    threads = [
        threading.Thread(target=lambda: answers.append(sizes.tree_bytes(vault.git_dir, tree)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    started.set()
    for t in threads:
        t.join(10)
    assert answers == [git_count(vault, tree)] * 4
    assert counted == [tree]


def test_a_memo_that_cannot_be_written_costs_a_count_not_an_answer(vault, folder):
    tree = import_folder(vault, folder).base_tree
    (vault.git_dir / sizes.SIZES_FILE).mkdir()  # not a file: neither read nor written
    assert sizes.tree_bytes(vault.git_dir, tree) == git_count(vault, tree)
    sizes._memos.clear()
    assert sizes.tree_bytes(vault.git_dir, tree) == git_count(vault, tree)
