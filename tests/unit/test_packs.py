"""Storing many files at once as one pack: the same blob ids git gives, every object readable
and verified by git, nothing the vault holds written twice, and no pack half-written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from core.errors import VaultError
from core.vault import packs
from core.vault.objects import PackIndex
from core.vault.packs import TEMP_PREFIX, store_files


def listed(paths: list[Path]) -> list[tuple[str, os.stat_result]]:
    return [(str(p), os.lstat(p)) for p in paths]


def git_ids(paths: list[Path]) -> list[str]:
    out = subprocess.run(
        ["git", "hash-object", "--no-filters", "--stdin-paths"],
        input="".join(f"{p}\n" for p in paths),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


def pack_files(vault) -> list[str]:
    folder = vault.objects.objects_dir / "pack"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def tree(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "files"
    folder.mkdir()
    paths = []
    for i in range(600):
        path = folder / f"f{i:04d}.txt"
        path.write_bytes(f"file {i % 500}\n".encode() * (1 + i % 500 % 7))  # 100 repeat others
        paths.append(path)
    empty = folder / "empty"
    empty.write_bytes(b"")
    big = folder / "big.bin"
    big.write_bytes(os.urandom(300_000))
    return [*paths, empty, big]


def test_many_files_are_one_pack_that_git_reads_and_verifies(vault, tree):
    stored = store_files(vault.objects, listed(tree))
    assert stored == git_ids(tree)
    names = pack_files(vault)
    assert len(names) == 2 and names[0].endswith(".idx") and names[1].endswith(".pack")
    assert not any(n.startswith(TEMP_PREFIX) for n in names)
    loose = [p for p in vault.objects.objects_dir.glob("??/*")]
    assert loose == []  # nothing written beside the pack
    count = subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "count-objects", "-v"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "in-pack: 502\n" in count  # 500 distinct texts, the empty file and the big one
    subprocess.run(["git", "--git-dir", str(vault.git_dir), "fsck", "--strict"], check=True)
    for path, sha in zip(tree[::97], stored[::97], strict=True):
        assert vault.objects.read_blob(sha) == path.read_bytes()


def test_what_the_vault_holds_is_not_written_again(vault, tree):
    store_files(vault.objects, listed(tree))
    before = pack_files(vault)
    extra = tree[0].parent / "new.txt"
    extra.write_text("only this one is new\n")
    again = store_files(vault.objects, listed([*tree, extra]))
    assert again == git_ids([*tree, extra])
    after = pack_files(vault)
    [new_pack] = [n for n in after if n.endswith(".pack") and n not in before]
    assert set(before) < set(after)
    out = subprocess.run(
        ["git", "verify-pack", "-v", str(vault.objects.objects_dir / "pack" / new_pack)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert sum(1 for line in out.splitlines() if " blob " in line) == 1  # the new file alone
    assert store_files(vault.objects, listed(tree)) == git_ids(tree)
    assert pack_files(vault) == after  # nothing new: no empty pack either


def test_links_are_their_target_and_a_file_gone_since_listed_says_so(vault, tree, tmp_path):
    link = tmp_path / "files" / "link"
    link.symlink_to("f0001.txt")
    gone = tree[5]
    items = listed([*tree, link])
    gone.unlink()
    stored = store_files(vault.objects, items)
    assert isinstance(stored[5], FileNotFoundError)
    assert vault.objects.read_blob(stored[-1]) == b"f0001.txt"
    kept = [s for i, s in enumerate(stored) if i != 5]
    assert kept == git_ids([p for p in tree if p != gone]) + [stored[-1]]


@pytest.mark.parametrize("threaded_from", [1, 1000, 1 << 20])
def test_larger_files_are_read_on_threads_into_the_same_pack(
    vault, tree, monkeypatch, threaded_from
):
    monkeypatch.setattr(packs, "THREADED_FROM", threaded_from)
    assert store_files(vault.objects, listed(tree)) == git_ids(tree)
    assert len([n for n in pack_files(vault) if n.endswith(".pack")]) == 1
    subprocess.run(["git", "--git-dir", str(vault.git_dir), "fsck", "--strict"], check=True)


def test_files_too_large_to_hold_are_streamed_into_loose_objects(vault, tree, monkeypatch):
    monkeypatch.setattr(packs, "LARGE_FILE", 100_000)
    stored = store_files(vault.objects, listed(tree))
    assert stored == git_ids(tree)
    big = stored[-1]
    assert (vault.objects.objects_dir / big[:2] / big[2:]).is_file()


def test_a_few_files_are_written_loose(vault, tree):
    stored = store_files(vault.objects, listed(tree[:10]))
    assert stored == git_ids(tree[:10])
    assert pack_files(vault) == []


def test_a_write_that_fails_midway_leaves_no_pack_and_the_next_clears_a_dead_writers(
    vault, tree, monkeypatch
):
    folder = vault.objects.objects_dir / "pack"
    folder.mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    abandoned = folder / f"{TEMP_PREFIX}{dead.pid}-0123456789ab-pack"
    abandoned.write_bytes(b"PACK half written")
    calls = 0
    real = packs._read

    def failing(path, st):
        nonlocal calls
        calls += 1
        if calls == 300:
            raise MemoryError
        return real(path, st)

    monkeypatch.setattr(packs, "_read", failing)
    with pytest.raises(MemoryError):
        store_files(vault.objects, listed(tree))
    assert pack_files(vault) == []  # the dead writer's file went too
    monkeypatch.setattr(packs, "_read", real)
    assert store_files(vault.objects, listed(tree)) == git_ids(tree)


def test_the_entry_header_is_gits_varint(vault):
    assert packs._entry_header(3, 5) == bytes([0x35])
    assert packs._entry_header(3, 16) == bytes([0xB0, 0x01])
    assert packs._entry_header(3, 300) == bytes([0xBC, 0x12])


def synthetic_index(tmp_path: Path, ids: list[bytes]) -> Path:
    ids = sorted(ids)
    fanout = [sum(1 for i in ids if i[0] <= b) for b in range(256)]
    data = b"\xfftOc" + (2).to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in fanout)
    path = tmp_path / "pack-synthetic.idx"
    path.write_bytes(data + b"".join(ids) + b"\0" * 64)
    return path


def test_an_id_found_across_two_ids_of_a_pack_index_is_not_taken_for_one(tmp_path):
    one, two = b"\x11" * 20, b"\x11" * 5 + b"\x22" * 15
    straddling = (one + two)[7:27]  # the end of one and the start of the other
    assert straddling not in (one, two)
    index = PackIndex.open(synthetic_index(tmp_path, [one, two, b"\x30" * 20]))
    try:
        assert one in index and two in index and b"\x30" * 20 in index
        assert straddling not in index
        assert b"\x00" * 20 not in index and b"\xff" * 20 not in index
    finally:
        index.close()


def test_held_tells_loose_packed_and_missing_ids_apart(vault, tree):
    packed = store_files(vault.objects, listed(tree))
    loose = vault.objects.write_blob(b"a loose one\n")
    missing = {f"{n:040x}" for n in range(300)}  # enough to list the loose folders
    asked = set(packed[:10]) | {loose} | missing
    assert vault.objects.held(asked) == set(packed[:10]) | {loose}
    assert vault.objects.held({packed[3]}) == {packed[3]}
    assert vault.objects.has_object(packed[3]) and vault.objects.has_object(loose)
    assert not vault.objects.has_object("0" * 40)


def test_an_index_of_another_version_is_asked_of_git(vault, tree, monkeypatch):
    stored = store_files(vault.objects, listed(tree))
    [idx] = (vault.objects.objects_dir / "pack").glob("pack-*.idx")
    vault.objects.close()
    kept = idx.read_bytes()
    idx.chmod(0o644)
    idx.write_bytes(kept[:7] + b"\x09" + kept[8:])  # a version this reader does not know
    asked: list[set[str]] = []
    monkeypatch.setattr(vault.objects, "object_sizes", lambda shas: asked.append(set(shas)) or {})
    assert vault.objects.held({stored[0]}) == set()
    assert asked == [{stored[0]}]
    idx.write_bytes(kept)
    vault.objects.close()
    monkeypatch.undo()
    assert vault.objects.held({stored[0]}) == {stored[0]}


def test_many_trees_go_into_one_pack_and_few_stay_loose(vault, tmp_path):
    from core.vault.tree_index import FileRecord, TreeIndex

    blob = vault.objects.write_blob(b"x\n")
    index = TreeIndex()
    for i in range(400):
        index.set_file(f"d{i:03d}/f.txt", FileRecord("100644", blob))
    tree = index.flush(vault.objects)
    assert len([n for n in pack_files(vault) if n.endswith(".pack")]) == 1
    assert TreeIndex.from_tree(vault.objects, tree).files() == index.files()
    subprocess.run(["git", "--git-dir", str(vault.git_dir), "fsck", "--strict"], check=True)
    index.set_file("d000/g.txt", FileRecord("100644", blob))
    again = index.flush(vault.objects)  # two trees: loose, beside the pack
    assert (vault.objects.objects_dir / again[:2] / again[2:]).is_file()
    assert len([n for n in pack_files(vault) if n.endswith(".pack")]) == 1


def test_entries_wait_for_their_look_up_in_bounded_memory_and_packs_are_read_only(
    vault, tree, monkeypatch
):
    looked: list[int] = []
    real = vault.objects.held
    monkeypatch.setattr(vault.objects, "held", lambda shas: looked.append(len(shas)) or real(shas))
    monkeypatch.setattr(packs, "_PENDING_BYTES", 512)
    assert store_files(vault.objects, listed(tree)) == git_ids(tree)
    assert len(looked) > 10  # a look-up every half kilobyte of entries, not one for all
    for name in pack_files(vault):
        assert (vault.objects.objects_dir / "pack" / name).stat().st_mode & 0o777 == 0o444


def test_a_pack_that_cannot_be_written_is_one_line_naming_the_vault(vault, tree, monkeypatch):
    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(packs.os, "replace", full)
    with pytest.raises(VaultError) as caught:
        store_files(vault.objects, listed(tree))
    assert str(caught.value) == (
        f"cannot write to the vault {vault.git_dir}: No space left on device"
    )
    monkeypatch.undo()
    assert not [n for n in pack_files(vault) if n.startswith(TEMP_PREFIX)]  # nothing left over


def test_a_packs_ids_and_when_a_cleanup_may_take_it(vault, tree):
    """What the cleanup asks of a pack: every id it holds (git's own listing), and whether it
    may go: none reached and old, else why not; a pack kept by git's `.keep`, or whose index
    cannot be read, is not Cairn's to remove."""
    from core.housekeeping import _Pack, _pack_state

    stored = store_files(vault.objects, listed(tree))
    folder = vault.objects.objects_dir / "pack"
    (idx,) = folder.glob("pack-*.idx")
    index = PackIndex.open(idx)
    ids = list(index.ids())
    index.close()
    shown = subprocess.run(
        ["git", "show-index"], stdin=idx.open("rb"), capture_output=True, text=True, check=True
    ).stdout.split()
    assert ids == sorted(ids) == shown[1::3] and set(ids) == set(stored)
    objects, name, later = vault.objects.objects_dir, idx.stem, 2e9
    taken = _pack_state(objects, name, set(), later)
    assert isinstance(taken, _Pack) and taken.count == len(ids)
    assert [p.name for p, _st in taken.files] == [f"{name}.idx", f"{name}.pack"]
    assert _pack_state(objects, name, {ids[7]}, later) == "reachable"
    assert _pack_state(objects, name, set(), 0.0) == "touched"
    (folder / f"{name}.keep").write_text("")
    assert _pack_state(objects, name, set(), later) is None
    (folder / f"{name}.keep").unlink()
    idx.chmod(0o644)
    idx.write_bytes(b"\xfftOc\x00\x00\x00\x03" + bytes(2000))  # another version
    assert _pack_state(objects, name, set(), later) is None
    assert _pack_state(objects, "pack-../../x", set(), later) is None


def test_objects_the_vault_holds_are_not_compressed_again(vault, monkeypatch):
    """Many objects stored at once (the trees of a base): those the vault holds already (a
    repository's clean trees, copied with its packs) are neither compressed nor packed."""
    from core.vault.objects import object_id

    items = [
        (object_id("blob", f"object {i}\n".encode()), f"object {i}\n".encode()) for i in range(400)
    ]
    packs.store_objects(vault.objects, "blob", items)
    before = pack_files(vault)
    compressed: list[bytes] = []
    real_deflate = packs.deflate
    monkeypatch.setattr(
        packs, "deflate", lambda data: compressed.append(data) or real_deflate(data)
    )
    extra = (object_id("blob", b"one more\n"), b"one more\n")
    packs.store_objects(vault.objects, "blob", [*items, extra])
    assert compressed == [b"one more\n"]
    assert len(pack_files(vault)) == len(before) + 2  # one new pack, its index beside it
    assert vault.objects.read_object(extra[0]) == ("blob", b"one more\n")
    compressed.clear()
    packs.store_objects(vault.objects, "blob", [*items, extra])
    assert compressed == [] and len(pack_files(vault)) == len(before) + 2
