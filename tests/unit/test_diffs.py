"""Diffs between revisions of one vault: file statuses, hunks, line numbers, the size cap, and the
text and JSON forms, checked against real git."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from core.diffs import Diff, diff_revisions, diff_stats, diff_to_json, quote_path, render_unified
from core.errors import NotFound
from core.vault.objects import (
    EMPTY_TREE,
    MODE_EXEC,
    MODE_FILE,
    MODE_GITLINK,
    MODE_LINK,
    MODE_TREE,
    ObjectStore,
    TreeEntry,
    git_env,
    run_git,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


class Vault:
    """A bare repository with the vault's attributes, and commits built from {path: content}."""

    def __init__(self, root: Path):
        self.git_dir = root / "vault.git"
        run_git(["init", "--quiet", "--bare", str(self.git_dir)])
        (self.git_dir / "info").mkdir(exist_ok=True)
        (self.git_dir / "info" / "attributes").write_text(
            "* -text -eol -filter -ident -working-tree-encoding\n"
        )
        self.objects = ObjectStore(self.git_dir)

    def close(self) -> None:
        self.objects.close()

    def commit(self, files: dict, parent: str | None = None) -> str:
        """`files` maps a path (str or bytes) to bytes, or to (mode, bytes), or to
        (MODE_GITLINK, commit id)."""
        root: dict = {}
        for path, value in files.items():
            mode, data = value if isinstance(value, tuple) else (MODE_FILE, value)
            parts = (path if isinstance(path, bytes) else os.fsencode(path)).split(b"/")
            node = root
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = (mode, data)
        tree = self._write(root)
        return self.objects.write_commit(
            tree, [parent] if parent else [], "revision", timestamp=1_700_000_000
        )

    def _write(self, node: dict) -> str:
        entries = []
        for name, value in node.items():
            if isinstance(value, dict):
                entries.append(TreeEntry(MODE_TREE, name, self._write(value)))
            elif value[0] == MODE_GITLINK:
                entries.append(TreeEntry(MODE_GITLINK, name, value[1]))
            else:
                entries.append(TreeEntry(value[0], name, self.objects.write_blob(value[1])))
        return self.objects.write_tree(entries)

    def tree_of(self, commit: str) -> str:
        return self.objects.read_commit(commit).tree

    def checkout(self, rev: str, dest: Path) -> Path:
        """The files of `rev` written out as a plain folder (no .git)."""
        dest.mkdir(parents=True)
        env = git_env(GIT_INDEX_FILE=str(dest.parent / f"{dest.name}.index"))
        base = ["--git-dir", str(self.git_dir), "--work-tree", str(dest)]
        run_git([*base, "read-tree", rev], env=env)
        run_git([*base, "checkout-index", "-a", "-f"], env=env)
        os.unlink(env["GIT_INDEX_FILE"])
        return dest


@pytest.fixture
def vault(tmp_path):
    v = Vault(tmp_path)
    yield v
    v.close()


def lines(n: int, fmt: str = "line {}") -> bytes:
    return "".join(fmt.format(i) + "\n" for i in range(1, n + 1)).encode()


def one(diff: Diff, path: str):
    found = [f for f in diff.files if f.path == path]
    assert len(found) == 1, [f.path for f in diff.files]
    return found[0]


def snapshot(folder: Path) -> dict[str, tuple[str, bytes]]:
    """Every file under `folder`: kind + bytes (a link's target for a link)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, folder)
            if os.path.islink(full):
                out[rel] = ("link", os.fsencode(os.readlink(full)))
            else:
                kind = "exec" if os.access(full, os.X_OK) else "file"
                out[rel] = (kind, Path(full).read_bytes())
    return out


# -- statuses, hunks, line numbers ------------------------------------------------------------


def test_modified_file_has_hunks_with_line_numbers_and_stats(vault):
    old = vault.commit({"f.txt": lines(20)})
    new_text = (
        lines(20).replace(b"line 2\n", b"line two\n").replace(b"line 18\n", b"line 18\nextra\n")
    )
    new = vault.commit({"f.txt": new_text}, old)

    d = diff_revisions(vault.git_dir, old, new)

    assert (d.files_changed, d.additions, d.deletions) == (1, 2, 1)
    f = d.files[0]
    assert (f.status, f.old_path, f.new_path) == ("modified", "f.txt", "f.txt")
    assert (f.old_mode, f.new_mode, f.binary, f.truncated) == (MODE_FILE, MODE_FILE, False, False)
    assert f.old_sha == vault.objects.write_blob(lines(20))
    assert f.new_sha == vault.objects.write_blob(new_text)
    assert len(f.hunks) == 2
    h1, h2 = f.hunks
    assert (h1.old_start, h1.old_lines, h1.new_start, h1.new_lines) == (1, 5, 1, 5)
    assert h1.header == "@@ -1,5 +1,5 @@"
    assert [(ln.kind, ln.text, ln.old_no, ln.new_no) for ln in h1.lines] == [
        (" ", "line 1", 1, 1),
        ("-", "line 2", 2, None),
        ("+", "line two", None, 2),
        (" ", "line 3", 3, 3),
        (" ", "line 4", 4, 4),
        (" ", "line 5", 5, 5),
    ]
    assert (h2.old_start, h2.old_lines, h2.new_start, h2.new_lines) == (16, 5, 16, 6)
    assert h2.header.startswith("@@ -16,5 +16,6 @@")
    added = [ln for ln in h2.lines if ln.kind == "+"]
    assert [(ln.text, ln.new_no) for ln in added] == [("extra", 19)]
    assert h2.lines[-1] == type(h2.lines[-1])(" ", "line 20", 20, 21)


def test_context_option_changes_hunk_shape(vault):
    old = vault.commit({"f.txt": lines(20)})
    new = vault.commit({"f.txt": lines(20).replace(b"line 10\n", b"ten\n")}, old)
    h = diff_revisions(vault.git_dir, old, new, context=0).files[0].hunks
    assert [(x.old_start, x.old_lines, x.new_start, x.new_lines) for x in h] == [(10, 1, 10, 1)]
    h = diff_revisions(vault.git_dir, old, new, context=1).files[0].hunks
    assert [(x.old_start, x.old_lines) for x in h] == [(9, 3)]


def test_added_and_removed_files(vault):
    old = vault.commit({"keep.txt": b"k\n", "gone.txt": b"one\ntwo\n"})
    new = vault.commit({"keep.txt": b"k\n", "dir/new.txt": b"a\nb\nc\n"}, old)

    d = diff_revisions(vault.git_dir, old, new)

    assert sorted((f.status, f.path) for f in d.files) == [
        ("added", "dir/new.txt"),
        ("removed", "gone.txt"),
    ]
    added, removed = one(d, "dir/new.txt"), one(d, "gone.txt")
    assert (added.old_path, added.old_mode, added.old_sha) == (None, None, None)
    assert (added.new_mode, added.additions, added.deletions) == (MODE_FILE, 3, 0)
    assert [(x.old_start, x.old_lines, x.new_start, x.new_lines) for x in added.hunks] == [
        (0, 0, 1, 3)
    ]
    assert [(ln.kind, ln.text, ln.new_no) for ln in added.hunks[0].lines] == [
        ("+", "a", 1),
        ("+", "b", 2),
        ("+", "c", 3),
    ]
    assert (removed.new_path, removed.new_mode, removed.new_sha) == (None, None, None)
    assert (removed.additions, removed.deletions) == (0, 2)
    assert [(ln.kind, ln.text, ln.old_no) for ln in removed.hunks[0].lines] == [
        ("-", "one", 1),
        ("-", "two", 2),
    ]


def test_pure_rename_has_no_hunks(vault):
    old = vault.commit({"old name.txt": lines(30)})
    new = vault.commit({"sub/new name.txt": lines(30)}, old)

    (f,) = diff_revisions(vault.git_dir, old, new).files

    assert (f.status, f.old_path, f.new_path, f.similarity) == (
        "renamed",
        "old name.txt",
        "sub/new name.txt",
        100,
    )
    assert (f.hunks, f.additions, f.deletions) == ([], 0, 0)
    assert f.old_sha == f.new_sha


def test_rename_with_content_change_carries_hunks(vault):
    old = vault.commit({"a.py": lines(30)})
    new = vault.commit({"b.py": lines(30).replace(b"line 15\n", b"fifteen\n")}, old)

    (f,) = diff_revisions(vault.git_dir, old, new).files

    assert (f.status, f.old_path, f.new_path) == ("renamed", "a.py", "b.py")
    assert 50 <= f.similarity < 100
    assert (f.additions, f.deletions) == (1, 1)
    assert [(ln.kind, ln.text) for ln in f.hunks[0].lines if ln.kind != " "] == [
        ("-", "line 15"),
        ("+", "fifteen"),
    ]


def test_without_rename_detection_a_rename_is_a_removal_and_an_addition(vault):
    old = vault.commit({"a.txt": lines(30)})
    new = vault.commit({"b.txt": lines(30)}, old)
    d = diff_revisions(vault.git_dir, old, new, find_renames=False)
    assert sorted((f.status, f.path) for f in d.files) == [("added", "b.txt"), ("removed", "a.txt")]
    assert (d.additions, d.deletions) == (30, 30)


def test_copy_is_reported_as_copied(vault):
    old = vault.commit({"src.txt": lines(40)})
    new = vault.commit({"src.txt": lines(40) + b"more\n", "copy.txt": lines(40)}, old)
    d = diff_revisions(vault.git_dir, old, new)
    copy = one(d, "copy.txt")
    assert (copy.status, copy.old_path, copy.similarity) == ("copied", "src.txt", 100)
    assert one(d, "src.txt").status == "modified"


def test_pure_chmod_is_a_mode_change(vault):
    old = vault.commit({"run.sh": b"echo hi\n"})
    new = vault.commit({"run.sh": (MODE_EXEC, b"echo hi\n")}, old)

    (f,) = diff_revisions(vault.git_dir, old, new).files

    assert (f.status, f.old_mode, f.new_mode) == ("mode", MODE_FILE, MODE_EXEC)
    assert (f.hunks, f.additions, f.deletions) == ([], 0, 0)


def test_chmod_with_content_change_is_modified_and_keeps_both_modes(vault):
    old = vault.commit({"run.sh": b"echo hi\n"})
    new = vault.commit({"run.sh": (MODE_EXEC, b"echo bye\n")}, old)
    (f,) = diff_revisions(vault.git_dir, old, new).files
    assert (f.status, f.old_mode, f.new_mode, f.additions, f.deletions) == (
        "modified",
        MODE_FILE,
        MODE_EXEC,
        1,
        1,
    )


def test_symlink_added(vault):
    old = vault.commit({"target.txt": b"t\n"})
    new = vault.commit({"target.txt": b"t\n", "link": (MODE_LINK, b"target.txt")}, old)

    (f,) = diff_revisions(vault.git_dir, old, new).files

    assert (f.status, f.new_path, f.new_mode) == ("added", "link", MODE_LINK)
    assert [(ln.kind, ln.text) for ln in f.hunks[0].lines] == [
        ("+", "target.txt"),
        ("\\", "No newline at end of file"),
    ]


def test_file_to_symlink_is_a_typechange(vault):
    old = vault.commit({"x": b"was a file\n"})
    new = vault.commit({"x": (MODE_LINK, b"elsewhere")}, old)

    d = diff_revisions(vault.git_dir, old, new)

    (f,) = d.files
    assert (f.status, f.old_path, f.new_path) == ("typechange", "x", "x")
    assert (f.old_mode, f.new_mode, f.additions, f.deletions) == (MODE_FILE, MODE_LINK, 1, 1)
    assert [(h.old_start, h.old_lines, h.new_start, h.new_lines) for h in f.hunks] == [
        (1, 1, 0, 0),
        (0, 0, 1, 1),
    ]
    assert [(ln.kind, ln.text) for h in f.hunks for ln in h.lines] == [
        ("-", "was a file"),
        ("+", "elsewhere"),
        ("\\", "No newline at end of file"),
    ]


def test_binary_file_has_no_hunks(vault):
    old = vault.commit({"img.bin": b"\x00\x01\x02" * 100})
    new = vault.commit({"img.bin": b"\x00\x01\x03" * 100, "new.bin": b"\x00zz"}, old)

    d = diff_revisions(vault.git_dir, old, new)

    for f in d.files:
        assert f.binary and f.hunks == [] and (f.additions, f.deletions) == (0, 0)
    assert one(d, "img.bin").status == "modified"
    assert one(d, "new.bin").status == "added"
    text = render_unified(d)
    assert "Binary files a/img.bin and b/img.bin differ\n" in text
    assert "Binary files /dev/null and b/new.bin differ\n" in text


def test_missing_newline_at_end_of_file(vault):
    old = vault.commit({"f": b"a\nb"})
    new = vault.commit({"f": b"a\nb\nc"}, old)

    (f,) = diff_revisions(vault.git_dir, old, new).files

    assert [(ln.kind, ln.text, ln.old_no, ln.new_no) for ln in f.hunks[0].lines] == [
        (" ", "a", 1, 1),
        ("-", "b", 2, None),
        ("\\", "No newline at end of file", None, None),
        ("+", "b", None, 2),
        ("+", "c", None, 3),
        ("\\", "No newline at end of file", None, None),
    ]
    assert (f.additions, f.deletions) == (2, 1)


def test_content_that_looks_like_diff_headers_stays_content(vault):
    tricky = b"diff --git a/x b/x\n@@ -1 +1 @@\n--- a/x\n+++ b/x\nBinary files a and b differ\n"
    old = vault.commit({"a.patch": b"start\n", "z.txt": b"1\n"})
    new = vault.commit({"a.patch": b"start\n" + tricky, "z.txt": b"2\n"}, old)

    d = diff_revisions(vault.git_dir, old, new)

    patch = one(d, "a.patch")
    assert not patch.binary
    assert [
        ln.text for ln in patch.hunks[0].lines if ln.kind == "+"
    ] == tricky.decode().splitlines()
    z = one(d, "z.txt")
    assert [(ln.kind, ln.text) for ln in z.hunks[0].lines] == [("-", "1"), ("+", "2")]


def test_crlf_and_trailing_spaces_are_kept_byte_exact(vault):
    old = vault.commit({"w.txt": b"a\r\nb \n"})
    new = vault.commit({"w.txt": b"a\r\nb  \n"}, old)
    (f,) = diff_revisions(vault.git_dir, old, new).files
    assert [(ln.kind, ln.text) for ln in f.hunks[0].lines] == [
        (" ", "a\r"),
        ("-", "b "),
        ("+", "b  "),
    ]


def test_paths_with_spaces_unicode_newlines_and_non_utf8_bytes(vault):
    odd = b"caf\xe9 \x01.txt"  # not UTF-8, with a control character
    old = vault.commit(
        {"with space.txt": b"1\n", "Ünïcødé/文件.txt": b"1\n", odd: b"1\n", "new\nline.txt": b"1\n"}
    )
    new = vault.commit(
        {
            "with space.txt": b"2\n",
            "Ünïcødé/文件.txt": b"2\n",
            odd: b"2\n",
            "new\nline.txt": b"2\n",
        },
        old,
    )

    d = diff_revisions(vault.git_dir, old, new)

    paths = sorted(f.path for f in d.files)
    assert paths == sorted(
        ["with space.txt", "Ünïcødé/文件.txt", os.fsdecode(odd), "new\nline.txt"]
    )
    assert all(f.status == "modified" and (f.additions, f.deletions) == (1, 1) for f in d.files)
    assert all([ln.text for ln in f.hunks[0].lines] == ["1", "2"] for f in d.files)
    assert os.fsencode(one(d, os.fsdecode(odd)).path) == odd
    assert quote_path("new\nline.txt") == '"new\\nline.txt"'
    assert quote_path(os.fsdecode(odd)) == '"caf\\351 \\001.txt"'
    assert quote_path("with space.txt") == "with space.txt"
    assert quote_path("文") == '"\\346\\226\\207"'


def test_path_filter_limits_the_diff(vault):
    old = vault.commit({"a/x.txt": b"1\n", "b/y.txt": b"1\n", "*.txt": b"1\n"})
    new = vault.commit({"a/x.txt": b"2\n", "b/y.txt": b"2\n", "*.txt": b"2\n"}, old)
    assert [f.path for f in diff_revisions(vault.git_dir, old, new, paths=["a"]).files] == [
        "a/x.txt"
    ]
    # a path is taken literally, never as a pattern
    assert [f.path for f in diff_revisions(vault.git_dir, old, new, paths=["*.txt"]).files] == [
        "*.txt"
    ]


def test_submodule_entry_is_listed_without_hunks(vault):
    c1 = vault.commit({"f": b"1\n"})
    c2 = vault.commit({"f": b"2\n"}, c1)
    old = vault.commit({"f": b"x\n", "sub": (MODE_GITLINK, c1)})
    new = vault.commit({"f": b"x\n", "sub": (MODE_GITLINK, c2)}, old)

    (f,) = diff_revisions(vault.git_dir, old, new).files

    assert (f.status, f.path, f.old_sha, f.new_sha) == ("modified", "sub", c1, c2)
    assert f.is_submodule and f.hunks == [] and (f.additions, f.deletions) == (0, 0)


# -- revisions --------------------------------------------------------------------------------


@pytest.mark.parametrize("nothing", [None, EMPTY_TREE])
def test_empty_old_means_everything_added(vault, nothing):
    new = vault.commit({"a.txt": b"1\n2\n", "d/b.txt": b"3\n", "l": (MODE_LINK, b"a.txt")})

    d = diff_revisions(vault.git_dir, nothing, new)

    assert d.old == EMPTY_TREE
    assert sorted((f.status, f.path) for f in d.files) == [
        ("added", "a.txt"),
        ("added", "d/b.txt"),
        ("added", "l"),
    ]
    assert (d.additions, d.deletions) == (4, 0)
    assert diff_stats(vault.git_dir, nothing, new) == (3, 4, 0)


def test_tree_ids_and_commits_give_the_same_diff(vault):
    old = vault.commit({"f": b"1\n"})
    new = vault.commit({"f": b"2\n", "g": b"3\n"}, old)
    by_commit = diff_revisions(vault.git_dir, old, new)
    by_tree = diff_revisions(vault.git_dir, vault.tree_of(old), vault.tree_of(new))
    assert diff_to_json(by_commit)["files"] == diff_to_json(by_tree)["files"]
    assert (by_tree.old, by_tree.new) == (vault.tree_of(old), vault.tree_of(new))


def test_revisions_of_two_unrelated_workspaces_in_one_vault(vault):
    ws_a = vault.commit({"f": b"common\nfrom a\n"})
    ws_b = vault.commit({"f": b"common\nfrom b\n", "only_b": b"b\n"})
    d = diff_revisions(vault.git_dir, ws_a, ws_b)
    assert sorted((f.status, f.path) for f in d.files) == [("added", "only_b"), ("modified", "f")]


def test_same_revision_is_an_empty_diff(vault):
    rev = vault.commit({"f": b"1\n"})
    d = diff_revisions(vault.git_dir, rev, rev)
    assert (d.files, d.truncated, d.note) == ([], False, None)
    assert render_unified(d) == ""
    assert diff_stats(vault.git_dir, rev, rev) == (0, 0, 0)


def test_unknown_revision_is_not_found(vault):
    rev = vault.commit({"f": b"1\n"})
    blob = vault.objects.write_blob(b"1\n")
    for bad in ["0" * 40, "nope", blob, "--output=/tmp/x", "a b"]:
        with pytest.raises(NotFound):
            diff_revisions(vault.git_dir, bad, rev)
        with pytest.raises(NotFound):
            diff_stats(vault.git_dir, rev, bad)


def test_diff_stats_match_the_full_diff(vault):
    old = vault.commit({"a": lines(50), "b": b"x\n", "bin": b"\x00\x01"})
    new = vault.commit(
        {"a": lines(50).replace(b"line 7\n", b"") + b"tail\n", "c": b"y\nz\n", "bin": b"\x00\x02"},
        old,
    )
    d = diff_revisions(vault.git_dir, old, new)
    assert (
        diff_stats(vault.git_dir, old, new)
        == (d.files_changed, d.additions, d.deletions)
        == (4, 3, 2)
    )
    for f in d.files:
        assert f.additions == sum(ln.kind == "+" for h in f.hunks for ln in h.lines)
        assert f.deletions == sum(ln.kind == "-" for h in f.hunks for ln in h.lines)


# -- the size cap -----------------------------------------------------------------------------


def test_huge_diff_is_cut_quickly_and_every_file_is_still_listed(vault):
    # 200,000 changed lines over five big files, then thirty small files after them
    old_files = {f"big{i}.txt": lines(40_000, f"old {i} {{}}") for i in range(3)}
    old_files.update({f"small{i:02}.txt": b"s\n" for i in range(30)})
    new_files = {f"big{i}.txt": lines(40_000, f"new {i} {{}}") for i in range(3)}
    new_files.update({f"big{i}.txt": lines(40_000, f"added {i} {{}}") for i in range(3, 5)})
    new_files.update({f"small{i:02}.txt": b"t\n" for i in range(30)})
    old = vault.commit(old_files)
    new = vault.commit(new_files, old)

    start = time.monotonic()
    d = diff_revisions(vault.git_dir, old, new, max_bytes=500_000)
    elapsed = time.monotonic() - start

    assert elapsed < 10
    assert d.truncated
    assert len(d.files) == 35  # the list is complete even though the hunks are not
    assert d.additions == 200_030 and d.deletions == 120_030
    first = d.files[0]
    assert first.path == "big0.txt" and first.truncated and first.hunks
    assert 0 < sum(len(h.lines) for h in first.hunks) < 80_000
    rest = d.files[1:]
    assert all(f.truncated and f.hunks == [] for f in rest)
    assert d.note == "diff cut at 500.0 kB in big0.txt; 34 more files not shown"
    text = render_unified(d)
    assert len(text) < 600_000
    assert "# diff cut at 500.0 kB in big0.txt; 34 more files not shown\n" in text
    assert "#   added big3.txt (+40000 -0)\n" in text
    assert "#   ... and" not in text  # 34 left out is under the listing limit
    json.dumps(diff_to_json(d))


def test_cap_inside_one_enormous_line_does_not_read_it_whole(vault):
    old = vault.commit({"min.js": b"x\n"})
    new = vault.commit({"a.txt": b"a\n", "min.js": b"y" * 5_000_000 + b"\n", "z.txt": b"z\n"}, old)
    d = diff_revisions(vault.git_dir, old, new, max_bytes=100_000)
    assert d.truncated
    assert [(f.path, f.truncated) for f in d.files] == [
        ("a.txt", False),
        ("min.js", True),
        ("z.txt", True),
    ]
    assert [ln.text for ln in d.files[0].hunks[0].lines] == ["a"]
    # the cut line is dropped whole, never shown half-read
    assert [(ln.kind, ln.text) for h in d.files[1].hunks for ln in h.lines] == [("-", "x")]
    assert d.note == "diff cut at 100.0 kB in min.js; 1 more file not shown"


def test_diff_under_the_cap_is_not_truncated(vault):
    old = vault.commit({"f": lines(1000)})
    new = vault.commit({"f": lines(1000, "changed {}")}, old)
    d = diff_revisions(vault.git_dir, old, new, max_bytes=None)
    assert not d.truncated and d.note is None and not d.files[0].truncated
    assert sum(len(h.lines) for h in d.files[0].hunks) == 2000


def test_twenty_thousand_line_diff_parses_in_well_under_a_second(vault):
    old = vault.commit({f"f{i}.py": lines(5_000, f"value_{i} = {{}}") for i in range(4)})
    new = vault.commit({f"f{i}.py": lines(5_000, f"value_{i} = {{}} + 1") for i in range(4)}, old)
    diff_revisions(vault.git_dir, old, new)  # warm the object cache
    start = time.monotonic()
    d = diff_revisions(vault.git_dir, old, new)
    elapsed = time.monotonic() - start
    assert not d.truncated and d.additions == 20_000 and d.deletions == 20_000
    assert elapsed < 1.0, f"{elapsed:.2f}s"


# -- text and JSON ----------------------------------------------------------------------------


def test_render_unified_applies_to_the_old_revision(vault, tmp_path):
    old = vault.commit(
        {
            "keep.txt": lines(40),
            "gone.txt": b"bye\n",
            "renamed from.txt": lines(30),
            "moved.txt": lines(30),
            "run.sh": b"#!/bin/sh\necho hi\n",
            "no_eol.txt": b"a\nb",
            "ünï côdé.txt": b"1\n2\n",
            'quote"and\\slash.txt': b"q\n",
            "typed": b"was a file\n",
            "empty_soon": b"content\n",
        }
    )
    new = vault.commit(
        {
            "keep.txt": lines(40).replace(b"line 3\n", b"three\n").replace(b"line 35\n", b""),
            "renamed to.txt": lines(30),
            "dir/moved.txt": lines(30).replace(b"line 20\n", b"twenty\n"),
            "run.sh": (MODE_EXEC, b"#!/bin/sh\necho hi\n"),
            "no_eol.txt": b"a\nb\nc",
            "ünï côdé.txt": b"1\ntwo\n",
            'quote"and\\slash.txt': b"q\nr\n",
            "typed": (MODE_LINK, b"keep.txt"),
            "empty_soon": b"",
            "brand new.txt": b"hello\n",
            "link": (MODE_LINK, b"dir/moved.txt"),
        },
        old,
    )
    d = diff_revisions(vault.git_dir, old, new)
    statuses = {f.path: f.status for f in d.files}
    assert statuses["renamed to.txt"] == "renamed" and statuses["dir/moved.txt"] == "renamed"
    assert statuses["run.sh"] == "mode" and statuses["typed"] == "typechange"
    assert not d.truncated and not any(f.binary for f in d.files)

    text = render_unified(d)
    patch = tmp_path / "change.patch"
    patch.write_bytes(text.encode("utf-8", "surrogateescape"))
    work = vault.checkout(old, tmp_path / "work")
    env = git_env(GIT_CEILING_DIRECTORIES=str(tmp_path))
    check = subprocess.run(
        ["git", "apply", "--check", str(patch)], cwd=work, env=env, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    subprocess.run(["git", "apply", str(patch)], cwd=work, env=env, check=True)
    assert snapshot(work) == snapshot(vault.checkout(new, tmp_path / "expected"))


def test_render_unified_matches_git_diff_output(vault):
    c1 = vault.commit({"f": b"1\n"})
    c2 = vault.commit({"f": b"2\n"}, c1)
    old = vault.commit(
        {
            "a b.txt": lines(10),
            "x.txt": b"1\n",
            "m": b"m\n",
            "é.txt": b"e\n",
            "src.txt": lines(40),
            "mv.sh": lines(30),
            "t": b"file\n",
            "bt": b"\x00bin",
            "gone": b"g\n",
            "bin": b"\x00\x01",
            "sub": (MODE_GITLINK, c1),
            "tab\tname": b"1\n",
            "run": b"r\n",
        }
    )
    new = vault.commit(
        {
            "a b.txt": lines(10).replace(b"line 5\n", b"five\n"),
            "y.txt": b"1\n",
            "m": (MODE_EXEC, b"n\n"),
            "é.txt": b"f",
            "src.txt": lines(40) + b"more\n",
            "copy.txt": lines(40),
            "moved/mv.sh": (MODE_EXEC, lines(30).replace(b"line 9\n", b"")),
            "t": (MODE_LINK, b"x.txt"),
            "bt": (MODE_LINK, b"bin"),
            "bin": b"\x00\x02",
            "sub": (MODE_GITLINK, c2),
            "empty": b"",
            "link": (MODE_LINK, b"a b.txt"),
            "tab\tname": b"2\n",
            "run": (MODE_EXEC, b"r\n"),
        },
        old,
    )
    expected = run_git(
        [
            "--git-dir",
            str(vault.git_dir),
            "diff-tree",
            "-r",
            "-p",
            "-M",
            "-C",
            "--full-index",
            "--no-color",
            old,
            new,
        ]
    ).stdout
    d = diff_revisions(vault.git_dir, old, new)
    assert {"copied", "renamed", "typechange", "mode", "added", "removed"} <= {
        f.status for f in d.files
    }
    got = render_unified(d).encode("utf-8", "surrogateescape")
    # git shows a submodule's commit line as content; Cairn lists the submodule without hunks
    expected = expected.replace(
        b"--- a/sub\n+++ b/sub\n@@ -1 +1 @@\n-Subproject commit "
        + c1.encode()
        + b"\n+Subproject commit "
        + c2.encode()
        + b"\n",
        b"",
    )
    assert got.decode() == expected.decode()


def test_diff_to_json_is_json_serialisable(vault):
    old = vault.commit({"f.txt": b"a\n", b"bad\xff.txt": b"\xfe\xff old\n", "bin": b"\x00"})
    new = vault.commit(
        {"f.txt": b"b\n", b"bad\xff.txt": b"\xfe\xff new\n", "bin": b"\x00\x01"}, old
    )
    d = diff_revisions(vault.git_dir, old, new)

    data = json.loads(json.dumps(diff_to_json(d), ensure_ascii=False).encode("utf-8"))

    assert (data["old"], data["new"]) == (old, new)
    assert (data["files_changed"], data["additions"], data["deletions"]) == (3, 2, 2)
    assert data["truncated"] is False and data["note"] is None
    by_path = {f["new_path"]: f for f in data["files"]}
    assert set(by_path) == {"f.txt", "bad\ufffd.txt", "bin"}
    f = by_path["f.txt"]
    assert f["status"] == "modified" and f["old_mode"] == MODE_FILE and f["binary"] is False
    assert f["hunks"][0]["header"] == "@@ -1 +1 @@"
    assert f["hunks"][0]["lines"] == [
        {"kind": "-", "text": "a", "old_no": 1, "new_no": None},
        {"kind": "+", "text": "b", "old_no": None, "new_no": 1},
    ]
    assert by_path["bin"]["binary"] is True and by_path["bin"]["hunks"] == []
    texts = [ln["text"] for h in by_path["bad\ufffd.txt"]["hunks"] for ln in h["lines"]]
    assert texts == ["\ufffd\ufffd old", "\ufffd\ufffd new"]
