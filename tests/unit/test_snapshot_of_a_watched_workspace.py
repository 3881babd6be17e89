"""A snapshot of a workspace this process watches takes the watcher's word for what changed: no
pass over the tree when the latest revision holds the files, and a write just made is in it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from core.app import Cairn
from core.vault import snapshot_ref
from core.vault.objects import git_env


@pytest.fixture
def cairn(tmp_path: Path):
    app = Cairn(tmp_path / "data")
    yield app
    app.close()


@pytest.fixture
def made(cairn, tmp_path: Path):
    folder = tmp_path / "project"
    for i in range(30):
        path = folder / f"pkg{i % 3}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n")
    return cairn.tasks.new(folder)


def test_a_snapshot_of_a_recorded_watched_workspace_makes_no_full_capture(cairn, made):
    recorder = cairn.revisions.watch(made.task.id)
    fulls = recorder.stats["full_captures"]

    snap = cairn.snapshots.take(made.task.id)

    assert snap.revision_id == made.base_revision
    assert recorder.stats["full_captures"] == fulls
    vault = cairn.ctx.vault_for(made.workspace.source_id)
    assert vault.objects.read_ref(snapshot_ref(snap.id)) == made.base_revision


def test_a_write_just_made_is_in_the_snapshot_of_a_watched_workspace(cairn, made):
    recorder = cairn.revisions.watch(made.task.id)
    fulls = recorder.stats["full_captures"]
    path = Path(made.workspace.root) / "pkg1" / "mod1.py"
    path.write_text("value = 'just now'\n")
    os.chmod(Path(made.workspace.root) / "pkg2" / "mod2.py", 0o755)

    snap = cairn.snapshots.take(made.task.id)

    assert snap.revision_id != made.base_revision
    assert recorder.stats["full_captures"] == fulls
    vault = cairn.ctx.vault_for(made.workspace.source_id)
    tree = vault.tree_of(snap.revision_id)
    files = {
        line.split("\t")[1]: line.split()[0]
        for line in vault_ls_tree(vault.git_dir, tree).splitlines()
    }
    assert files["pkg2/mod2.py"] == "100755"
    blob = vault_ls_tree(vault.git_dir, tree, "pkg1/mod1.py").split()[2]
    assert vault.objects.read_blob(blob) == b"value = 'just now'\n"


def test_an_unwatched_workspace_is_still_captured_in_full(cairn, made):
    path = Path(made.workspace.root) / "pkg0" / "mod0.py"
    path.write_text("value = 'unwatched'\n")

    snap = cairn.snapshots.take(made.task.id)

    assert snap.revision_id != made.base_revision


def vault_ls_tree(git_dir: Path, tree: str, *paths: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", tree, "--", *paths],
        capture_output=True,
        check=True,
        env=git_env(),
    ).stdout.decode()
