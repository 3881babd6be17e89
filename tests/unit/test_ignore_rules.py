"""The `.gitignore` rules of a folder read as git reads them: a deeper file's opinion first,
negations, folder-only patterns, and `.git` always left out."""

from __future__ import annotations

import subprocess
from pathlib import Path

from core.vault.ignore import IgnoreRules
from tests.support import write_file as write

RULES = {
    ".gitignore": "*.log\n!keep.log\nbuild/\n/top-only.txt\n",
    "sub/.gitignore": "!*.log\nsecret.txt\n",
    "sub/deeper/.gitignore": "*.txt\n!wanted.txt\n",
    "other/.gitignore": "# nothing but a comment\n",
}
PATHS = [
    ("a.log", False),
    ("keep.log", False),
    ("build", True),
    ("build", False),  # a file named like an ignored folder
    ("top-only.txt", False),
    ("sub/top-only.txt", False),
    ("sub/a.log", False),
    ("sub/secret.txt", False),
    ("sub/plain.txt", False),
    ("sub/deeper/a.txt", False),
    ("sub/deeper/wanted.txt", False),
    ("sub/deeper/a.log", False),
    ("sub/deeper/secret.txt", False),
    ("sub/deeper/build", True),
    ("other/a.log", False),
    ("other/x.txt", False),
    ("x/y/z/a.log", False),
]


def test_rules_match_what_git_check_ignore_says(tmp_path: Path):
    for rel, text in RULES.items():
        write(tmp_path / rel, text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    rules = IgnoreRules(tmp_path)
    probes = [rel + ("/" if is_dir else "") for rel, is_dir in PATHS]
    said = subprocess.run(
        ["git", "-C", str(tmp_path), "check-ignore", "--no-index", "--stdin", "-z"],
        input="\0".join(probes) + "\0",
        capture_output=True,
        text=True,
    ).stdout
    ignored_by_git = {
        p.rstrip("/") + ("/" if p.endswith("/") else "") for p in said.split("\0") if p
    }
    for (rel, is_dir), probe in zip(PATHS, probes, strict=True):
        assert rules.matches(rel, is_dir) == (probe in ignored_by_git), probe
        # Asked again (the rules of each folder are kept), the answer is the same.
        assert rules.matches(rel, is_dir) == (probe in ignored_by_git), probe


def test_dot_git_is_always_left_out_and_reset_reads_the_files_again(tmp_path: Path):
    rules = IgnoreRules(tmp_path)
    assert rules.matches(".git", True) and rules.matches("sub/.git", False)
    assert not rules.matches("sub/a.log", False)
    write(tmp_path / "sub/.gitignore", "*.log\n")
    assert not rules.matches("sub/a.log", False)  # read once, until told it changed
    rules.reset()
    assert rules.matches("sub/a.log", False) and rules.is_ignored("sub/x/a.log")
    assert not rules.matches("a.log", False)
