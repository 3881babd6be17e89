"""A new workspace leaves its recorder's stat cache behind: the first full, verifying capture after
a task is created (or a fork made) compares stat data and hashes nothing, and still sees a change
made after the workspace was written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from core.app import Cairn
from core.vault.tree_index import RACY_SECONDS, RACY_SECONDS_FINE, racy_window
from tests.support import hashed_paths


@pytest.fixture
def cairn(tmp_path: Path):
    app = Cairn(tmp_path / "data")
    yield app
    app.close()


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths the recorder reads and hashes."""
    return hashed_paths(monkeypatch)


def project(tmp_path: Path, *, git: bool) -> Path:
    folder = tmp_path / "project"
    for i in range(40):
        path = folder / f"pkg{i % 4}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n")
    (folder / "run.sh").write_text("#!/bin/sh\n")
    (folder / "run.sh").chmod(0o755)
    os.symlink("run.sh", folder / "link")
    if git:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
        for args in (
            ["init", "-q", "-b", "main"],
            ["add", "-A"],
            ["-c", "user.name=T", "-c", "user.email=t@x", "commit", "-q", "-m", "first"],
        ):
            subprocess.run(["git", *args], cwd=folder, env=env, check=True, capture_output=True)
    return folder


@pytest.mark.parametrize("git", [True, False], ids=["git", "plain"])
def test_the_first_full_capture_after_a_new_task_hashes_nothing(cairn, tmp_path, hashed, git):
    made = cairn.tasks.new(project(tmp_path, git=git))
    root = Path(made.workspace.root)
    assert (cairn.ctx.data.cache_root / f"{made.workspace.id}.stat").is_file()
    hashed.clear()

    rev, new = cairn.revisions.capture(made.task.id, trigger="external")

    assert not new and rev.id == made.base_revision
    assert hashed == []

    (root / "pkg1" / "mod1.py").write_text("value = 'edited'\n")
    rev, new = cairn.revisions.capture(made.task.id, trigger="external")
    assert new and hashed == [str(root / "pkg1" / "mod1.py")]


def test_a_workspace_made_from_a_revision_leaves_its_stat_cache_too(cairn, tmp_path, hashed):
    """What a fork or a restore into a new workspace does."""
    made = cairn.tasks.new(project(tmp_path, git=True))
    Path(made.workspace.root, "pkg0", "mod0.py").write_text("value = 'parent'\n")
    rev, _ = cairn.revisions.capture(made.task.id, trigger="external")
    ws = cairn.snapshots.workspace_from_revision(
        made.workspace,
        rev.id,
        rev.tree,
        branch="cairn/elsewhere",
        trigger="base",
        label="the revision",
        task_id=made.task.id,
    )
    assert (cairn.ctx.data.cache_root / f"{ws.id}.stat").is_file()
    hashed.clear()

    latest, new = cairn.revisions.capture(made.task.id, trigger="external")

    assert not new and latest.id == rev.id and latest.workspace_id == ws.id
    assert hashed == []


def test_a_file_changed_after_the_workspace_was_written_is_seen(cairn, tmp_path, hashed):
    """The stat cache vouches for what was written, not for a later change of the same size."""
    made = cairn.tasks.new(project(tmp_path, git=False))
    target = Path(made.workspace.root) / "pkg2" / "mod2.py"
    target.write_text("value = 9\n")  # same size as "value = 2\n"

    rev, new = cairn.revisions.capture(made.task.id, trigger="external")

    assert new
    assert cairn.revisions.resolve(cairn.ctx.task(made.task.id), rev.id).id == rev.id
    assert str(target) in hashed


def test_the_racy_window_is_short_only_where_times_have_fractions_of_a_second(tmp_path):
    path = tmp_path / "f"
    path.write_text("x")
    os.utime(path, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    assert racy_window(os.lstat(path)) == RACY_SECONDS
    os.utime(path, ns=(1_700_000_000_250_000_000, 1_700_000_000_250_000_000))
    assert racy_window(os.lstat(path)) == RACY_SECONDS_FINE


@pytest.mark.parametrize("git", [True, False], ids=["git", "plain"])
def test_only_an_import_into_a_new_vault_skips_reading_its_blobs_again(
    cairn, tmp_path, monkeypatch, git
):
    """The first task of a folder writes its workspace from blobs the import has just checked
    against their ids as it stored them (fetched, or copied from the repository's own object
    files and checked as they were): they are not read again. A later task of the same folder
    finds older objects in the vault: every blob it writes is checked."""
    import core.vault.materialize as materialize_module

    seen: list[bool] = []
    real = materialize_module._materialize

    def spy(vault, commit, dest, label, owner, stats, checked, *rest):
        seen.append(checked)
        return real(vault, commit, dest, label, owner, stats, checked, *rest)

    monkeypatch.setattr(materialize_module, "_materialize", spy)
    folder = project(tmp_path, git=git)
    first = cairn.tasks.new(folder)
    second = cairn.tasks.new(folder)
    assert seen == [True, False]
    for made in (first, second):
        rel = Path("pkg1", "mod1.py")
        assert (Path(made.workspace.root) / rel).read_bytes() == (folder / rel).read_bytes()
