"""Making a commit durable costs a sync only when the vault's last sync may not have covered it:
a snapshot of a revision whose objects are already on disk writes its ref and nothing more."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from core.vault import Vault
from core.vault import objects as objects_module


@pytest.fixture
def vault(tmp_path: Path):
    v = Vault.open_or_create(tmp_path / "vault.git")
    yield v
    v.close()


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
