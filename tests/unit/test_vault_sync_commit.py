"""Making a commit durable costs a sync only when the vault's last sync may not have covered it:
a snapshot of a revision whose objects are already on disk writes its ref and nothing more."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from core.vault import Vault
from core.vault import objects as objects_module


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    seen: list[Path] = []
    monkeypatch.setattr(objects_module, "_syncfs", seen.append)
    return seen


def commit(vault: Vault, text: str) -> str:
    blob = vault.objects.write_blob(text.encode())
    tree = vault.objects.write_tree([objects_module.TreeEntry("100644", b"f", blob)])
    return vault.objects.write_commit(tree, [], text)


def backdate(vault: Vault, sha: str, seconds: float) -> None:
    path = vault.objects.objects_dir / sha[:2] / sha[2:]
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_a_commit_written_before_the_last_sync_needs_no_other(vault, syncs):
    old = commit(vault, "old")
    backdate(vault, old, 60)
    vault.objects.sync()
    assert len(syncs) == 1

    vault.objects.sync_commit(old)

    assert len(syncs) == 1


def test_a_commit_written_since_the_last_sync_is_synced(vault, syncs):
    vault.objects.sync()
    new = commit(vault, "new")

    vault.objects.sync_commit(new)

    assert len(syncs) == 2


def test_a_commit_of_the_same_clock_tick_as_the_sync_is_synced_again(vault, syncs):
    """A file time equal to the sync's stamp may belong to a write after it."""
    close = commit(vault, "close")
    vault.objects.sync()
    stamp = int((vault.git_dir / "cairn-synced").read_text())
    os.utime(vault.objects.objects_dir / close[:2] / close[2:], ns=(stamp, stamp))

    vault.objects.sync_commit(close)

    assert len(syncs) == 2


def test_without_a_record_of_a_sync_every_commit_is_synced(vault, syncs):
    old = commit(vault, "old")
    backdate(vault, old, 60)

    vault.objects.sync_commit(old)
    (vault.git_dir / "cairn-synced").write_text("not a number\n")
    vault.objects.sync_commit(old)

    assert len(syncs) == 2


def test_the_record_of_the_last_sync_never_moves_back(vault, syncs):
    vault.objects.sync()
    later = int((vault.git_dir / "cairn-synced").read_text())
    stamp = vault.git_dir / "stamp"
    stamp.write_text("")
    vault.objects._note_synced(stamp, later - 10**9)
    assert int((vault.git_dir / "cairn-synced").read_text()) == later
    assert not stamp.exists()
    assert [p.name for p in vault.git_dir.glob("cairn-synced*")] == ["cairn-synced"]


def test_a_commit_written_just_before_a_sync_needs_no_other(vault, syncs):
    """The import writes its base and syncs at once: most often in the same tick of the file
    clock, which the sync's record must still be later than."""
    for n in range(20):
        just = commit(vault, f"just {n}")
        vault.objects.sync()
        vault.objects.sync_commit(just)

    assert len(syncs) == 20


def test_the_record_of_a_sync_is_later_than_the_file_written_before_it(vault, syncs):
    before = vault.git_dir / "before"
    before.write_bytes(b"")
    vault.objects.sync()
    assert int((vault.git_dir / "cairn-synced").read_text()) > before.stat().st_mtime_ns


def pack_everything(vault: Vault) -> None:
    subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "repack", "-a", "-d", "-q"],
        check=True,
        env=objects_module.git_env(),
    )


def test_a_packed_commit_synced_since_its_pack_was_written_needs_no_other(vault, syncs):
    packed = commit(vault, "packed")
    vault.git_dir.joinpath("refs", "heads", "keep").write_text(packed + "\n")
    pack_everything(vault)
    assert not (vault.objects.objects_dir / packed[:2] / packed[2:]).exists()
    vault.objects.sync()

    vault.objects.sync_commit(packed)

    assert len(syncs) == 1


def test_a_packed_commit_whose_pack_came_after_the_last_sync_is_synced(vault, syncs):
    vault.objects.sync()
    packed = commit(vault, "packed")
    vault.git_dir.joinpath("refs", "heads", "keep").write_text(packed + "\n")
    pack_everything(vault)

    vault.objects.sync_commit(packed)

    assert len(syncs) == 2
