"""Restoring in place on a real vault (no Docker): named files and folders, the whole workspace,
and undoing one revision's change three-way; the capture before and the restore's own revision;
and bad input refused with nothing lost."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from core.app import Cairn
from core.errors import CairnError, Conflict, InputError, NotFound
from core.locks import FileLock, lock_path
from core.models import Run, WorkspaceState
from core.restore import CONFLICT, DELETED, WRITTEN, restore_note
from core.vault.objects import run_git


@pytest.fixture
def made(tmp_path: Path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / ".gitignore").write_text("*.log\nbuild/\n")
    (src / "a.txt").write_text("one\ntwo\nthree\n")
    (src / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "run.sh").chmod(0o755)
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    (src / "notes.md").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    cairn = Cairn(tmp_path / "data")
    new = cairn.tasks.new(src)
    yield cairn, new.task.id, Path(new.workspace.root)
    cairn.close()


def capture(cairn: Cairn, task: str) -> str:
    rev, changed = cairn.revisions.capture(task)
    assert changed
    return rev.id


def tree_of(cairn: Cairn, task: str, rev: str) -> str:
    return cairn.revisions.resolve(cairn.ctx.task(task), rev).tree


def files_of(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below root but .git: bytes and permission bits."""
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            p = Path(folder, name)
            out[str(p.relative_to(root))] = (p.read_bytes(), stat.S_IMODE(p.lstat().st_mode))
    return out


def test_one_file_comes_back_byte_exact_with_its_mode_and_nothing_else_moves(made):
    cairn, task, root = made
    start = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    (root / "run.sh").write_bytes(b"#!/bin/sh\necho changed\x00\n")
    (root / "run.sh").chmod(0o644)
    (root / "a.txt").write_text("edited\n")
    (root / "pkg" / "mod.py").unlink()
    capture(cairn, task)
    (root / "notes.md").write_text("a hand edit nobody recorded\n")

    result = cairn.restores.restore(task, start, ["run.sh"])

    assert (root / "run.sh").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert stat.S_IMODE((root / "run.sh").stat().st_mode) == 0o755
    assert (root / "a.txt").read_text() == "edited\n"
    assert not (root / "pkg" / "mod.py").exists()
    assert (root / "notes.md").read_text() == "a hand edit nobody recorded\n"
    assert [(o.path, o.action) for o in result.outcomes] == [("run.sh", WRITTEN)]

    # The hand edit is recorded before the restore, and the restore is a revision of its own.
    assert result.captured_before and result.before.trigger == "external"
    assert result.revision is not None and result.revision.trigger == "restore"
    assert result.revision.parent_id == result.before.id
    revs = cairn.revisions.all(task)
    assert [r.id for r in revs[-2:]] == [result.before.id, result.revision.id]
    vault = cairn.ctx.vault_for(cairn.ctx.task(task).source_id)
    assert restore_note(vault, result.revision.id) == ("paths", start)
    assert restore_note(vault, result.before.id) is None
    show = run_git(["--git-dir", str(vault.git_dir), "show", "--format=", result.before.id])
    assert b"a hand edit nobody recorded" in show.stdout

    # Nothing left unrecorded: a verifying capture finds the restore's tree.
    again, changed = cairn.revisions.capture(task)
    assert not changed and again.id == result.revision.id

    # Restoring the restore's parent undoes it.
    back = cairn.restores.restore(task, result.before.id, ["run.sh"])
    assert (root / "run.sh").read_bytes() == b"#!/bin/sh\necho changed\x00\n"
    assert stat.S_IMODE((root / "run.sh").stat().st_mode) == 0o644
    assert back.revision is not None and back.revision.tree == result.before.tree
    assert not back.captured_before


def test_a_path_absent_at_the_revision_is_deleted_and_a_folder_comes_back_whole(made):
    cairn, task, root = made
    start = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    (root / "pkg" / "new.py").write_text("new\n")
    (root / "pkg" / "mod.py").write_text("x = 2\n")
    (root / "extra.txt").write_text("extra\n")
    capture(cairn, task)

    result = cairn.restores.restore(task, start, ["pkg", str(root / "extra.txt")])

    assert sorted((o.path, o.action) for o in result.outcomes) == [
        ("extra.txt", DELETED),
        ("pkg/mod.py", WRITTEN),
        ("pkg/new.py", DELETED),
    ]
    assert (root / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert not (root / "pkg" / "new.py").exists() and not (root / "extra.txt").exists()
    assert result.revision is not None
    assert result.revision.tree == tree_of(cairn, task, start)
    assert result.revision.files_changed == 3


def test_a_file_that_became_a_folder_and_a_folder_that_went_are_put_back(made):
    cairn, task, root = made
    start = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    (root / "a.txt").unlink()
    (root / "a.txt").mkdir()
    (root / "a.txt" / "inner").write_text("inner\n")
    subprocess.run(["rm", "-r", str(root / "pkg")], check=True)
    capture(cairn, task)

    result = cairn.restores.restore(task, start, ["a.txt", "pkg"])

    assert (root / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert (root / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert result.revision is not None and result.revision.tree == tree_of(cairn, task, start)


def test_the_whole_workspace_goes_back_and_ignored_files_and_git_stay(made):
    cairn, task, root = made
    start = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    git_before = {p: p.read_bytes() for p in (root / ".git").rglob("*") if p.is_file()}
    (root / "debug.log").write_text("ignored\n")
    (root / "build").mkdir()
    (root / "build" / "out.bin").write_bytes(b"\x00\x01")
    (root / "a.txt").write_text("changed\n")
    (root / "deep" / "er").mkdir(parents=True)
    (root / "deep" / "er" / "f.txt").write_text("f\n")
    (root / "run.sh").chmod(0o644)
    (root / "notes.md").unlink()
    capture(cairn, task)
    (root / "pkg" / "mod.py").write_text("unrecorded\n")

    result = cairn.restores.restore(task, start)

    assert result.kind == "workspace" and result.revision is not None
    assert result.revision.tree == tree_of(cairn, task, start)
    assert (root / "debug.log").read_text() == "ignored\n"
    assert (root / "build" / "out.bin").read_bytes() == b"\x00\x01"
    assert not (root / "deep").exists()
    assert stat.S_IMODE((root / "run.sh").stat().st_mode) == 0o755
    assert {p: p.read_bytes() for p in (root / ".git").rglob("*") if p.is_file()} == git_before
    again, changed = cairn.revisions.capture(task)
    assert not changed and again.id == result.revision.id

    # Nothing to do the second time: no revision.
    same = cairn.restores.restore(task, start)
    assert same.revision is None and same.outcomes == []


def test_undo_of_a_middle_revision_merges_with_later_edits_elsewhere(made):
    cairn, task, root = made
    notes = root / "notes.md"
    lines = notes.read_text().splitlines(keepends=True)
    lines[2] = "line 3 changed by the middle revision\n"
    notes.write_text("".join(lines))
    (root / "pkg" / "mod.py").write_text("x = 100\n")
    middle = capture(cairn, task)
    lines[17] = "line 18 changed later\n"
    notes.write_text("".join(lines))
    capture(cairn, task)

    result = cairn.restores.undo(task, middle)

    want = [f"line {i}\n" for i in range(1, 21)]
    want[17] = "line 18 changed later\n"
    assert notes.read_text() == "".join(want)
    assert (root / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert sorted((o.path, o.action) for o in result.outcomes) == [
        ("notes.md", WRITTEN),
        ("pkg/mod.py", WRITTEN),
    ]
    assert result.kind == "undo" and result.revision is not None
    vault = cairn.ctx.vault_for(cairn.ctx.task(task).source_id)
    assert restore_note(vault, result.revision.id) == ("undo", middle)
    again, changed = cairn.revisions.capture(task)
    assert not changed and again.id == result.revision.id


def test_undo_with_an_overlapping_later_edit_reports_it_and_writes_nothing_there(made):
    cairn, task, root = made
    notes = root / "notes.md"
    lines = notes.read_text().splitlines(keepends=True)
    lines[2] = "line 3 changed by the middle revision\n"
    notes.write_text("".join(lines))
    (root / "a.txt").write_text("one\ntwo\nthree\nfour\n")
    middle = capture(cairn, task)
    lines[2] = "line 3 changed again later\n"
    notes.write_text("".join(lines))
    capture(cairn, task)
    stat_before = notes.stat()

    result = cairn.restores.undo(task, middle)

    assert [(o.path, o.action) for o in result.conflicts] == [("notes.md", CONFLICT)]
    assert "edited since" in result.conflicts[0].reason
    assert notes.read_text() == "".join(lines)
    assert notes.stat().st_ino == stat_before.st_ino
    assert notes.stat().st_mtime_ns == stat_before.st_mtime_ns
    assert (root / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert result.revision is not None and result.revision.files_changed == 1


def test_undo_of_a_revision_that_added_a_file_deletes_it_unless_edited_since(made):
    cairn, task, root = made
    (root / "added.txt").write_text("added\n")
    (root / "other.txt").write_text("other\n")
    added = capture(cairn, task)
    (root / "other.txt").write_text("other, edited\n")
    capture(cairn, task)

    result = cairn.restores.undo(task, added)

    assert not (root / "added.txt").exists()
    assert (root / "other.txt").read_text() == "other, edited\n"
    assert [(o.path, o.action) for o in result.outcomes] == [
        ("added.txt", DELETED),
        ("other.txt", CONFLICT),
    ]


def test_undo_limited_to_a_path_and_of_the_base_is_refused(made):
    cairn, task, root = made
    (root / "a.txt").write_text("A\n")
    (root / "notes.md").write_text("N\n")
    rev = capture(cairn, task)
    result = cairn.restores.undo(task, rev, ["a.txt"])
    assert (root / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert (root / "notes.md").read_text() == "N\n"
    assert [o.path for o in result.outcomes] == ["a.txt"]
    with pytest.raises(InputError, match="did not change"):
        cairn.restores.undo(task, rev, ["run.sh"])
    with pytest.raises(InputError, match="base"):
        cairn.restores.undo(task, "base")


def test_a_link_planted_where_a_folder_goes_is_replaced_never_followed(made, tmp_path):
    cairn, task, root = made
    start = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    outside = tmp_path / "outside"
    outside.mkdir()
    subprocess.run(["rm", "-r", str(root / "pkg")], check=True)
    os.symlink(outside, root / "pkg")
    capture(cairn, task)

    cairn.restores.restore(task, start, ["pkg"])

    assert list(outside.iterdir()) == []
    assert (root / "pkg").is_dir() and not (root / "pkg").is_symlink()
    assert (root / "pkg" / "mod.py").read_text() == "x = 1\n"


def test_an_ignored_file_in_the_way_refuses_before_anything_is_written(made):
    cairn, task, root = made
    (root / "pkg" / "mod.py").unlink()
    (root / "pkg" / "cache.log").write_text("ignored\n")
    (root / "a.txt").write_text("edited\n")
    rev = capture(cairn, task)
    (root / "a.txt").unlink()
    (root / "a.txt").mkdir()
    (root / "a.txt" / "x.log").write_text("ignored inside\n")
    capture(cairn, task)
    with pytest.raises(InputError, match="nothing was written"):
        cairn.restores.restore(task, rev, ["a.txt", "pkg"])
    assert (root / "a.txt" / "x.log").read_text() == "ignored inside\n"
    assert not (root / "pkg" / "mod.py").exists()


def test_bad_input_is_one_line_and_loses_nothing(made, tmp_path):
    cairn, task, root = made
    start = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    (root / "a.txt").write_text("kept\n")
    count = len(cairn.revisions.all(task))

    cases: list[tuple[type[Exception], str, list[str] | None, str]] = [
        (NotFound, "0123456789abc", None, "no revision"),
        (InputError, start, ["../elsewhere"], "outside the workspace"),
        (InputError, start, [str(tmp_path / "x")], "outside the workspace"),
        (InputError, start, ["no/such/file"], "neither in revision"),
        (InputError, start, [".git/config"], ".git"),
    ]
    for kind, rev, paths, words in cases:
        with pytest.raises(kind, match=words) as raised:
            cairn.restores.restore(task, rev, paths)
        assert "\n" not in str(raised.value)
    with pytest.raises(NotFound):
        cairn.restores.restore("t_nosuchtask", start)
    assert len(cairn.revisions.all(task)) == count
    (root / "debug.log").write_text("ignored\n")
    with pytest.raises(InputError, match="neither in revision") as raised:
        cairn.restores.restore(task, start, ["debug.log"])
    assert "ignored" in str(raised.value)
    assert (root / "a.txt").read_text() == "kept\n"
    assert (root / "debug.log").read_text() == "ignored\n"
    # Only the ignored path gets as far as the capture before (of the edit), once.
    assert len(cairn.revisions.all(task)) == count + 1


def test_a_live_run_or_another_recorder_refuses_the_restore(made):
    cairn, task, root = made
    start = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    (root / "a.txt").write_text("kept\n")
    count = len(cairn.revisions.all(task))
    run = Run("r_live", task, "running", 1, "shell", created_at=time.time())
    cairn.ctx.store.add_run(run)  # a queued run has no workspace yet; its task says where
    with pytest.raises(Conflict, match=r"run r_live \(running\) is live") as raised:
        cairn.restores.restore(task, start)
    assert "stop it" in str(raised.value)
    with pytest.raises(Conflict, match="r_live"):
        cairn.restores.undo(task, "latest")
    assert len(cairn.revisions.all(task)) == count
    cairn.ctx.store.update_run("r_live", state="succeeded")

    ws = cairn.ctx.workspace_of(cairn.ctx.task(task))
    lock = FileLock(lock_path(cairn.ctx.data.locks_root, "watch", ws.id))
    assert lock.try_acquire()
    try:
        with pytest.raises(Conflict, match="being recorded"):
            cairn.restores.restore(task, start, ["a.txt"])
    finally:
        lock.release()
    assert (root / "a.txt").read_text() == "kept\n"


def test_a_deleted_or_archived_workspace_is_refused(made):
    cairn, task, root = made
    ws = cairn.ctx.workspace_of(cairn.ctx.task(task))
    cairn.ctx.store.update_workspace(ws.id, state=WorkspaceState.ARCHIVED.value)
    with pytest.raises(InputError, match="archived"):
        cairn.restores.restore(task, "base")
    cairn.ctx.store.update_workspace(ws.id, state=ws.state)
    subprocess.run(["rm", "-rf", str(root)], check=True)
    with pytest.raises(CairnError, match="deleted outside Cairn"):
        cairn.restores.restore(task, "base", ["a.txt"])


def test_the_writes_go_through_a_fresh_name_in_the_same_folder(made, monkeypatch):
    cairn, task, root = made
    start = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    (root / "a.txt").write_text("edited\n")
    capture(cairn, task)
    renames = []
    real = os.replace

    def spy(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        if src_dir_fd is not None:  # the workspace's writes (the vault's use paths)
            renames.append((src, dst, src_dir_fd == dst_dir_fd))
        return real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "replace", spy)
    cairn.restores.restore(task, start, ["a.txt"])
    assert len(renames) == 1
    tmp, final, same_folder = renames[0]
    assert final == "a.txt" and tmp.startswith(".a.txt.") and same_folder
    assert not [p for p in root.iterdir() if p.name.endswith(".cairn-restore")]


def test_links_come_back_as_links_and_a_file_keeps_its_own_permission_bits(made):
    cairn, task, root = made
    os.symlink("a.txt", root / "latest")
    (root / "a.txt").chmod(0o600)
    start = capture(cairn, task)
    (root / "latest").unlink()
    os.symlink("/etc/passwd", root / "latest")
    (root / "a.txt").write_text("edited\n")
    (root / "a.txt").chmod(0o700)
    capture(cairn, task)

    cairn.restores.restore(task, start, ["latest", "a.txt"])

    assert os.readlink(root / "latest") == "a.txt"
    assert (root / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert stat.S_IMODE((root / "a.txt").stat().st_mode) == 0o600


def test_a_restore_that_stops_half_way_records_what_it_wrote_and_names_the_way_back(
    made, monkeypatch
):
    cairn, task, root = made
    start = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    (root / "a.txt").write_text("edited\n")
    (root / "notes.md").write_text("edited\n")
    capture(cairn, task)
    real = os.replace
    calls = []

    def fail_second(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        if src_dir_fd is not None:
            calls.append(dst)
            if len(calls) == 2:
                raise OSError(28, "No space left on device")
        return real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "replace", fail_second)
    with pytest.raises(CairnError, match="stopped half way") as raised:
        cairn.restores.restore(task, start, ["a.txt", "notes.md"])
    monkeypatch.undo()
    before = cairn.revisions.all(task)[-2]
    assert f"restore {before.id[:12]}" in str(raised.value)
    assert "No space left" in str(raised.value)
    assert (root / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert (root / "notes.md").read_text() == "edited\n"
    assert not [p for p in root.iterdir() if p.name.endswith(".cairn-restore")]
    latest = cairn.revisions.all(task)[-1]
    assert latest.trigger == "restore" and latest.files_changed == 1


def test_a_person_may_write_an_overlapping_undo_with_conflict_markers(made):
    cairn, task, root = made
    notes = root / "notes.md"
    lines = notes.read_text().splitlines(keepends=True)
    lines[2] = "line 3 changed by the middle revision\n"
    notes.write_text("".join(lines))
    middle = capture(cairn, task)
    lines[2] = "line 3 changed again later\n"
    notes.write_text("".join(lines))
    capture(cairn, task)

    result = cairn.restores.undo(task, middle, conflict_markers=True)

    assert result.conflicts == []
    (outcome,) = [o for o in result.outcomes if o.path == "notes.md"]
    assert outcome.action == WRITTEN and "conflict markers" in (outcome.reason or "")
    text = notes.read_text()
    assert "<<<<<<< current notes.md" in text and ">>>>>>>" in text
    assert "line 3 changed again later" in text
    assert result.revision is not None  # recorded, so it can be taken back like any restore
