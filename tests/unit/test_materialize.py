"""Materializing a recorded tree into a new folder: byte-identical round trips, and all-or-nothing
failure with a clear CorruptSnapshot when an object is missing or corrupt."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import zlib
from pathlib import Path

import pytest

import core.vault.materialize as materialize_module
from core.errors import Conflict, CorruptSnapshot, InputError
from core.vault import Vault
from core.vault.importer import import_folder
from core.vault.materialize import materialize
from core.vault.objects import EMPTY_TREE, MODE_FILE, MODE_GITLINK, MODE_TREE, TreeEntry, git_env
from core.vault.tree_index import TreeIndex


def write(path: Path, data: str | bytes, mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)
    return path


def walk(folder: Path) -> dict[str, tuple]:
    """Everything below `folder`: kind, whether executable (the bit git records, whatever the
    umask), and content or link target."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", bool(st.st_mode & 0o100), Path(path).read_bytes())
    return out


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "source"
    write(src / "README.md", "hello\n")
    write(src / "src" / "app.py", "print('app')\n")
    write(src / "src" / "deep" / "er" / "mod.py", "x = 1\n")
    write(src / "bin" / "run.sh", "#!/bin/sh\necho run\n", 0o755)
    write(src / "data.bin", bytes(range(256)) * 40 + b"\r\n\0")
    write(src / "empty.txt", b"")
    write(src / "copy_of_readme.md", "hello\n")  # same blob twice
    write(src / "name with spaces é.txt", "unicode\n")
    os.symlink("README.md", src / "link_rel")
    os.symlink("/etc/hostname", src / "link_abs")
    os.symlink("does/not/exist", src / "link_dangling")
    os.symlink("src", src / "link_dir")
    (src / "empty_dir").mkdir()
    (src / "src" / "nested_empty" / "inner_empty").mkdir(parents=True)
    return src


@pytest.fixture(autouse=True, params=["git", "inline", "threads", "measured"])
def pace(request, monkeypatch):
    """Every case four ways: files written by git's checkout while this process checks the
    blobs (what Cairn does wherever git can write the tree), and, where it cannot, by the
    reading thread, by the writer threads, and by whichever was faster on a probe of two files
    each way."""
    monkeypatch.setattr(materialize_module, "_BY_GIT", None if request.param == "git" else False)
    if request.param == "git":
        return request.param
    if request.param == "measured":
        monkeypatch.setattr(materialize_module, "_PACE", None)
        monkeypatch.setattr(materialize_module, "_PACE_PROBE", 2)
        monkeypatch.setattr(materialize_module, "_WRITERS", 2)
    else:
        monkeypatch.setattr(materialize_module, "_PACE", request.param)
    return request.param


def test_the_faster_way_is_kept_after_timing_both(monkeypatch):
    clock = iter([0.0, 10.0, 10.0, 14.0, 100.0, 101.0, 101.0, 109.0])
    monkeypatch.setattr(materialize_module, "_PACE", None)
    monkeypatch.setattr(materialize_module, "_PACE_PROBE", 4)
    monkeypatch.setattr(materialize_module, "_WRITERS", 2)
    monkeypatch.setattr(materialize_module.time, "perf_counter", lambda: next(clock))
    drained = []
    threads_faster = materialize_module._Pace(100)
    for _ in range(2):  # 4 files inline in 10 s, then 4 by the threads in 4 s
        threads_faster.before()
        threads_faster.wrote(2, lambda: drained.append(True))
    assert not threads_faster.inline and threads_faster.deciding
    for _ in range(2):
        threads_faster.before()
        threads_faster.wrote(2, lambda: drained.append(True))
    assert drained == [True]  # what was handed over is on disk before the clock is read
    assert not threads_faster.deciding and not threads_faster.inline
    inline_faster = materialize_module._Pace(100)
    for _ in range(2):  # 1 s inline, then 8 s by the threads
        inline_faster.before()
        inline_faster.wrote(4)
    assert not inline_faster.deciding and inline_faster.inline
    assert materialize_module._Pace(7).inline and not materialize_module._Pace(7).deciding


def siblings(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_round_trip_is_identical(vault, source, tmp_path):
    result = import_folder(vault, source)
    dest = tmp_path / "restored"

    tree = materialize(vault, result.base_commit, dest, label="snapshot snap_1")

    assert tree == result.base_tree
    assert walk(dest) == walk(source)
    assert siblings(tmp_path) == {"source", "vault.git", "restored"}


def test_accepts_a_tree_id_and_writes_the_empty_tree(vault, source, tmp_path):
    result = import_folder(vault, source)
    assert materialize(vault, result.base_tree, tmp_path / "by_tree", label="t") == result.base_tree
    assert walk(tmp_path / "by_tree") == walk(source)
    assert materialize(vault, EMPTY_TREE, tmp_path / "nothing", label="t") == EMPTY_TREE
    assert list((tmp_path / "nothing").iterdir()) == []


def test_modes_honour_the_umask(vault, source, tmp_path):
    result = import_folder(vault, source)
    old = os.umask(0o027)
    try:
        materialize(vault, result.base_commit, tmp_path / "restored", label="s")
    finally:
        os.umask(old)
    dest = tmp_path / "restored"
    assert stat.S_IMODE(os.stat(dest / "README.md").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(dest / "bin" / "run.sh").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(dest / "src").st_mode) == 0o750


def pack_vault(vault) -> None:
    """Every object of the vault into one pack, no loose copy left."""
    subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "repack", "-a", "-d", "-q"],
        check=True,
        env=git_env(),
    )
    subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "prune-packed"], check=True, env=git_env()
    )


def test_packed_objects_materialize_too(vault, source, tmp_path):
    result = import_folder(vault, source)
    pack_vault(vault)
    materialize(vault, result.base_commit, tmp_path / "restored", label="s")
    assert walk(tmp_path / "restored") == walk(source)


def test_large_blobs_are_streamed(vault, source, tmp_path, monkeypatch):
    monkeypatch.setattr(materialize_module, "_STREAM_ABOVE", 100)
    monkeypatch.setattr(materialize_module, "_CHUNK", 64)
    result = import_folder(vault, source)
    materialize(vault, result.base_commit, tmp_path / "restored", label="s")
    assert walk(tmp_path / "restored") == walk(source)


def test_gitlink_becomes_an_empty_folder(vault, tmp_path):
    objects = vault.objects
    blob = objects.write_blob(b"a\n")
    tree = objects.write_tree(
        [TreeEntry(MODE_FILE, b"a.txt", blob), TreeEntry(MODE_GITLINK, b"lib", "12" * 20)]
    )
    assert materialize(vault, tree, tmp_path / "out", label="s") == tree
    assert walk(tmp_path / "out") == {"a.txt": ("file", False, b"a\n"), "lib": ("dir",)}


def test_existing_destination_is_refused(vault, source, tmp_path):
    result = import_folder(vault, source)
    dest = tmp_path / "taken"
    dest.mkdir()
    write(dest / "mine.txt", "keep me\n")
    with pytest.raises(Conflict) as exc:
        materialize(vault, result.base_commit, dest, label="snapshot snap_2")
    assert "already exists" in str(exc.value) and "snapshot snap_2" in str(exc.value)
    assert walk(dest) == {"mine.txt": ("file", False, b"keep me\n")}
    with pytest.raises(InputError) as exc:
        materialize(vault, result.base_commit, tmp_path / "no" / "parent", label="s")
    assert "does not exist" in str(exc.value)


# -- damaged vaults ------------------------------------------------------------------------------


def blob_of(vault: Vault, tree: str, rel: str) -> str:
    return TreeIndex.from_tree(vault.objects, tree).get(rel).sha


def loose(vault: Vault, sha: str) -> Path:
    return vault.git_dir / "objects" / sha[:2] / sha[2:]


def overwrite(path: Path, data: bytes) -> None:
    path.chmod(0o644)
    path.write_bytes(data)


def assert_nothing_left(tmp_path: Path, dest: Path) -> None:
    assert not os.path.lexists(dest)
    assert siblings(tmp_path) == {"source", "vault.git"}


@pytest.mark.parametrize("damage", ["garbage", "wrong content", "truncated"])
def test_corrupt_blob_fails_naming_label_and_path(vault, source, tmp_path, damage):
    result = import_folder(vault, source)
    sha = blob_of(vault, result.base_tree, "src/app.py")
    path = loose(vault, sha)
    if damage == "garbage":
        overwrite(path, b"this is not zlib")
    elif damage == "wrong content":
        overwrite(path, zlib.compress(b"blob 13\0print('bad')\n"))
    else:
        overwrite(path, path.read_bytes()[:8])
    dest = tmp_path / "restored"

    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, result.base_commit, dest, label="snapshot snap_3")

    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("snapshot snap_3 cannot be restored")
    assert sha[:12] in message and "src/app.py" in message and "is corrupt" in message
    assert_nothing_left(tmp_path, dest)


def test_missing_blob_fails_naming_label_and_path(vault, source, tmp_path):
    result = import_folder(vault, source)
    sha = blob_of(vault, result.base_tree, "bin/run.sh")
    loose(vault, sha).unlink()
    dest = tmp_path / "restored"
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, result.base_commit, dest, label="snapshot snap_4")
    message = str(exc.value)
    assert message.startswith("snapshot snap_4 cannot be restored")
    assert sha[:12] in message and "bin/run.sh" in message and "is missing" in message
    assert_nothing_left(tmp_path, dest)


def test_missing_or_corrupt_tree_fails_before_writing(vault, source, tmp_path):
    result = import_folder(vault, source)
    index = TreeIndex.from_tree(vault.objects, result.base_tree)
    deep = index.tree_ids["src/deep"]
    loose(vault, deep).unlink()
    dest = tmp_path / "restored"
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, result.base_commit, dest, label="snapshot snap_5")
    assert deep[:12] in str(exc.value) and "src/deep" in str(exc.value)
    assert "is missing" in str(exc.value)
    assert_nothing_left(tmp_path, dest)

    overwrite(loose(vault, result.base_commit), b"junk")
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, result.base_commit, dest, label="snapshot snap_5")
    assert "is corrupt" in str(exc.value)
    assert_nothing_left(tmp_path, dest)


def test_corrupt_packed_blob_is_caught(vault, source, tmp_path):
    result = import_folder(vault, source)
    sha = blob_of(vault, result.base_tree, "README.md")
    # Replace the stored object by different content under the same name, then pack it.
    overwrite(loose(vault, sha), zlib.compress(b"blob 6\0HELLO\n"))
    subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "repack", "-a", "-d", "-q"],
        check=True,
        env=git_env(),
        capture_output=True,
    )
    subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "prune-packed"], check=True, env=git_env()
    )
    dest = tmp_path / "restored"
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, result.base_commit, dest, label="snapshot snap_6")
    assert sha[:12] in str(exc.value)
    assert_nothing_left(tmp_path, dest)


def test_corrupt_large_blob_is_caught_while_streaming(vault, source, tmp_path, monkeypatch):
    monkeypatch.setattr(materialize_module, "_STREAM_ABOVE", 100)
    result = import_folder(vault, source)
    sha = blob_of(vault, result.base_tree, "data.bin")
    size = 256 * 40 + 3
    overwrite(loose(vault, sha), zlib.compress(b"blob %d\0" % size + b"\1" * size))
    dest = tmp_path / "restored"
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, result.base_commit, dest, label="snapshot snap_7")
    assert "data.bin" in str(exc.value) and "is corrupt" in str(exc.value)
    assert_nothing_left(tmp_path, dest)


@pytest.mark.parametrize("name", [b"..", b".git", b"a/b"])
def test_unsafe_names_are_refused(vault, tmp_path, name):
    objects = vault.objects
    blob = objects.write_blob(b"x")
    inner = objects.write_tree([TreeEntry(MODE_FILE, b"escaped", blob)])
    tree = objects.write_tree([TreeEntry(MODE_TREE, name, inner)])
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, tree, tmp_path / "out", label="snapshot snap_8")
    assert "unsafe name" in str(exc.value)
    assert not os.path.lexists(tmp_path / "out") and not (tmp_path / "escaped").exists()
    assert siblings(tmp_path) == {"vault.git"}


def test_destination_appearing_during_restore_is_not_overwritten(
    vault, source, tmp_path, monkeypatch
):
    result = import_folder(vault, source)
    dest = tmp_path / "restored"
    real_write_blobs = materialize_module._write_blobs
    real_finish = materialize_module._Checkout.finish

    def someone_else_creates_dest(*args, **kwargs):
        written = real_write_blobs(*args, **kwargs)
        dest.mkdir()  # an empty folder: a plain rename would silently replace it
        return written

    def after_git_someone_else_creates_dest(*args, **kwargs):
        written = real_finish(*args, **kwargs)
        dest.mkdir()
        return written

    monkeypatch.setattr(materialize_module, "_write_blobs", someone_else_creates_dest)
    monkeypatch.setattr(materialize_module._Checkout, "finish", after_git_someone_else_creates_dest)
    with pytest.raises(Conflict):
        materialize(vault, result.base_commit, dest, label="snapshot snap_9")
    assert list(dest.iterdir()) == []
    assert siblings(tmp_path) == {"source", "vault.git", "restored"}


def test_tree_naming_an_entry_twice_is_refused(vault, tmp_path):
    objects = vault.objects
    blob = objects.write_blob(b"x")
    data = b"".join(b"100644 twice\0" + bytes.fromhex(blob) for _ in range(2))
    tree = objects.write_object("tree", data)
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, tree, tmp_path / "out", label="snapshot snap_10")
    assert "names an entry twice" in str(exc.value)
    assert siblings(tmp_path) == {"vault.git"}


@pytest.mark.parametrize("stream_above", [None, 100_000])
def test_loose_objects_larger_than_one_read(vault, tmp_path, monkeypatch, stream_above):
    if stream_above:  # the compressed file alone is over the limit: git streams it
        monkeypatch.setattr(materialize_module, "_STREAM_ABOVE", stream_above)
    src = tmp_path / "source"
    write(src / "random.bin", os.urandom(300_000))  # incompressible: several reads
    write(src / "small.txt", "small\n")
    result = import_folder(vault, src)
    materialize(vault, result.base_commit, tmp_path / "restored", label="s")
    assert walk(tmp_path / "restored") == walk(src)


def test_tree_out_of_git_order_is_refused(vault, tmp_path):
    """Files written as such a tree plans would not make it again: it is refused before any is."""
    objects = vault.objects
    blob = objects.write_blob(b"x")
    data = b"100644 b\0" + bytes.fromhex(blob) + b"100644 a\0" + bytes.fromhex(blob)
    tree = objects.write_object("tree", data)
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, tree, tmp_path / "out", label="snapshot snap_11")
    assert "is not in git's order" in str(exc.value) and tree[:12] in str(exc.value)
    assert siblings(tmp_path) == {"vault.git"}


def test_tree_with_a_truncated_entry_is_refused(vault, tmp_path):
    objects = vault.objects
    blob = objects.write_blob(b"x")
    tree = objects.write_object("tree", b"100644 a\0" + bytes.fromhex(blob)[:12])
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, tree, tmp_path / "out", label="snapshot snap_12")
    assert "is corrupt" in str(exc.value) and tree[:12] in str(exc.value)
    assert siblings(tmp_path) == {"vault.git"}


def test_a_file_left_unwritten_fails_the_restore(vault, source, tmp_path, monkeypatch, pace):
    """The check after writing: every planned file must have been written with its blob."""
    if pace == "git":
        pytest.skip("a file git left out is written by this process: see the test below")
    result = import_folder(vault, source)
    real = materialize_module._write_loose

    def loses_one(objects, plan, root, label, written, owner, stats):
        left = real(objects, plan, root, label, written, owner, stats)
        written.pop(b"src/app.py", None)
        return left

    monkeypatch.setattr(materialize_module, "_write_loose", loses_one)
    dest = tmp_path / "restored"
    with pytest.raises(CorruptSnapshot) as exc:
        materialize(vault, result.base_commit, dest, label="snapshot snap_13")
    assert "src/app.py was not written" in str(exc.value)
    assert_nothing_left(tmp_path, dest)


def test_a_tree_git_did_not_write_as_planned_is_written_here_instead(
    vault, source, tmp_path, monkeypatch, pace, caplog
):
    """Git is only a faster writer: a file it left out or wrote as something else, or git
    failing altogether, and this process writes the whole tree afresh, with nothing of git's
    attempt left behind."""
    if pace != "git":
        pytest.skip("only git's checkout is checked here")
    result = import_folder(vault, source)
    real_finish = materialize_module._Checkout.finish

    def git_left_one_out(self, plan, root, owner, stats):
        self.proc.wait()
        os.unlink(root + b"/src/app.py")
        return real_finish(self, plan, root, owner, stats)

    def git_wrote_a_folder(self, plan, root, owner, stats):
        self.proc.wait()
        os.unlink(root + b"/README.md")
        os.mkdir(root + b"/README.md")
        return real_finish(self, plan, root, owner, stats)

    for n, wrong in enumerate([git_left_one_out, git_wrote_a_folder]):
        with monkeypatch.context() as patch:
            patch.setattr(materialize_module._Checkout, "finish", wrong)
            stats: dict[bytes, os.stat_result] = {}
            dest = tmp_path / f"restored{n}"
            materialize(vault, result.base_commit, dest, label="s", stats=stats)
        assert walk(dest) == walk(source)
        assert stats[b"src/app.py"] == os.lstat(dest / "src" / "app.py")
    monkeypatch.setattr(materialize_module, "_CHECKOUT_CONFIG", b"[core\nnot a config")
    with caplog.at_level("WARNING", logger=materialize_module.__name__):
        materialize(vault, result.base_commit, tmp_path / "restored2", label="s")
    assert walk(tmp_path / "restored2") == walk(source)
    assert "git could not write tree" in caplog.text
    assert siblings(tmp_path) == {"source", "vault.git", "restored0", "restored1", "restored2"}


def test_git_writes_every_blob_as_recorded_whatever_the_trees_attributes(
    vault, tmp_path, pace, caplog
):
    """Attributes in the tree that would convert files on a checkout (eol, text, ident, a filter,
    an encoding) leave the bytes as recorded, and names git refuses elsewhere (".GIT", a link
    named ".gitmodules") are written too."""
    src = tmp_path / "source"
    write(
        src / ".gitattributes",
        "* text eol=crlf ident\n*.txt filter=upper working-tree-encoding=UTF-16\n",
    )
    write(src / "lf.c", "one\ntwo $Id$\n")
    write(src / "notes.txt", "plain text\n")
    write(src / "sub" / ".gitattributes", "*.sh eol=crlf\n")
    write(src / "sub" / "run.sh", "#!/bin/sh\necho $Id$\n", 0o755)
    result = import_folder(vault, src)
    with open(vault.objects.git_dir / "config", "a") as config:  # a filter git could run
        config.write('[filter "upper"]\n\tsmudge = tr a-z A-Z\n\trequired = true\n')
    with caplog.at_level("WARNING", logger=materialize_module.__name__):
        materialize(vault, result.base_commit, tmp_path / "restored", label="s")
    assert walk(tmp_path / "restored") == walk(src)
    assert "git could not write" not in caplog.text  # git wrote them, unconverted

    elsewhere = tmp_path / "elsewhere"  # names only Windows or macOS would mind
    for name in ["back\\slash", "GIT~1", ".git.", "con", "trailing.", "a:b", ".git\u200c"]:
        write(elsewhere / name / "f.txt", name + "\n")
    elsewhere_result = import_folder(vault, elsewhere)
    with caplog.at_level("WARNING", logger=materialize_module.__name__):
        materialize(vault, elsewhere_result.base_commit, tmp_path / "elsewhere_out", label="s")
    assert walk(tmp_path / "elsewhere_out") == walk(elsewhere)
    assert "git could not write" not in caplog.text

    odd = tmp_path / "odd"
    write(odd / ".GIT" / "config", "not git's\n")
    write(odd / "a.txt", "a\n")
    os.symlink("a.txt", odd / ".gitmodules")
    odd_result = import_folder(vault, odd)
    with caplog.at_level("WARNING", logger=materialize_module.__name__):
        materialize(vault, odd_result.base_commit, tmp_path / "odd_restored", label="s")
    assert walk(tmp_path / "odd_restored") == walk(odd)
    assert "git could not write" not in caplog.text  # written here without trying git


def test_packed_trees_are_read_a_depth_at_a_time(vault, source, tmp_path, monkeypatch):
    """One `git cat-file` per depth of packed folders, not a round trip per folder."""
    result = import_folder(vault, source)
    vault.objects.update_ref("refs/heads/keep", result.base_commit)  # packed, not left loose
    subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "repack", "-a", "-d", "-q"],
        check=True,
        env=git_env(),
    )
    subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "prune-packed"], check=True, env=git_env()
    )
    vault.objects.close()
    started: list[list[str]] = []
    real = subprocess.Popen

    def popen(argv, *args, **kwargs):
        started.append(list(argv))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(materialize_module.subprocess, "Popen", popen)
    materialize(vault, result.base_tree, tmp_path / "restored", label="s")
    assert walk(tmp_path / "restored") == walk(source)
    cat_files = [a for a in started if "cat-file" in a and "--buffer" in a]
    assert not (vault.objects.objects_dir / result.base_tree[:2] / result.base_tree[2:]).exists()
    # Depths of folders: the root, src/bin/empty_dir, src/deep and src/nested_empty, src/deep/er
    # and its empty sibling (the empty tree is never read); then one for the packed blobs.
    assert len(cat_files) == 4 + 1


def owners_below(folder: Path) -> set[tuple[int, int]]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            found.add((st.st_uid, st.st_gid))
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give files to another user")
@pytest.mark.parametrize("how", ["loose", "packed", "streamed"])
def test_an_owner_gets_every_folder_file_and_link_written(
    vault, source, tmp_path, monkeypatch, how
):
    result = import_folder(vault, source)
    if how == "packed":
        pack_vault(vault)
    if how == "streamed":
        monkeypatch.setattr(materialize_module, "_STREAM_ABOVE", 100)
    monkeypatch.setattr(materialize_module, "_PARALLEL_DIRS", 2)  # the writer threads make them
    dest = tmp_path / "restored"
    materialize(vault, result.base_commit, dest, label="s", owner=(4321, 4322))
    assert walk(dest) == walk(source)
    assert owners_below(dest) == {(4321, 4322)}
    # The folder itself stays Cairn's and closed to others until the caller opens it.
    assert (os.lstat(dest).st_uid, stat.S_IMODE(os.lstat(dest).st_mode)) == (0, 0o700)
    # A link is given over itself: what it points to keeps its owner.
    assert os.lstat(source / "README.md").st_uid == 0


def test_without_an_owner_the_files_are_cairns_own(vault, source, tmp_path):
    result = import_folder(vault, source)
    materialize(vault, result.base_commit, tmp_path / "restored", label="s")
    assert owners_below(tmp_path / "restored") == {(os.getuid(), os.getgid())}
    assert stat.S_IMODE(os.lstat(tmp_path / "restored").st_mode) == 0o777 & ~umask()


def umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_the_collector_is_paused_for_a_pass_and_left_as_it_was_after_it():
    import gc

    from core.vault import collector_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pass leaves the outer one's pause alone
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # paused by someone else before: stays so
    finally:
        gc.enable()


def test_the_stat_data_handed_back_is_what_the_files_show_once_written(vault, source, tmp_path):
    """With `stats`, every file and link written comes back with the stat data it has on disk
    afterwards (owner, ctime and all), so that no one needs to look at it again."""
    result = import_folder(vault, source)
    stats: dict[bytes, os.stat_result] = {}
    dest = tmp_path / "restored"

    materialize(vault, result.base_commit, dest, label="the base", stats=stats)

    on_disk = {
        os.fsencode(os.path.relpath(os.path.join(folder, name), dest)): os.lstat(
            os.path.join(folder, name)
        )
        for folder, dirs, names in os.walk(dest)
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]
    }
    assert stats.keys() == on_disk.keys() and stats
    for rel, st in on_disk.items():
        seen = stats[rel]
        assert (seen.st_mode, seen.st_size, seen.st_ino) == (st.st_mode, st.st_size, st.st_ino)
        assert (seen.st_mtime_ns, seen.st_ctime_ns, seen.st_uid) == (
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_uid,
        )


def test_blobs_checked_as_they_were_stored_are_not_read_again(
    vault, source, tmp_path, monkeypatch, pace
):
    """`checked` (an import into a vault it made): git writes the files and no blob is read
    again, their sizes come from the files; the trees are still checked, and where this process
    writes the files it checks each blob as ever."""
    from core.vault import sizes

    result = import_folder(vault, source)

    def reads_blobs(*args):
        raise AssertionError("a blob was read again")

    monkeypatch.setattr(materialize_module, "_verify_blobs", reads_blobs)
    dest = tmp_path / "restored"
    if pace == "git":
        materialize(vault, result.base_commit, dest, label="s", checked=True)
        assert walk(dest) == walk(source)
        # The tree's bytes are remembered from the files' sizes, as git counts them.
        remembered = sizes._memo(vault.git_dir).get(result.base_tree)
        assert remembered == sizes._count_all(str(vault.git_dir), result.base_tree)
    sha = blob_of(vault, result.base_tree, "src/app.py")
    overwrite(loose(vault, sha), zlib.compress(b"blob 13\0print('bad')\n"))
    deep = TreeIndex.from_tree(vault.objects, result.base_tree).tree_ids["src/deep"]
    if pace == "git":  # the trees are read and checked all the same
        overwrite(loose(vault, deep), b"junk")
        with pytest.raises(CorruptSnapshot) as exc:
            materialize(vault, result.base_commit, tmp_path / "again", label="s", checked=True)
        assert deep[:12] in str(exc.value)
    else:  # this process writes the files: each blob is checked before it is written
        with pytest.raises(CorruptSnapshot) as exc:
            materialize(vault, result.base_commit, tmp_path / "again", label="s", checked=True)
        assert sha[:12] in str(exc.value)
    assert not os.path.lexists(tmp_path / "again")


def change_source(src: Path) -> None:
    """Edits of every kind between two recorded trees."""
    write(src / "README.md", "hello again\n")  # changed
    (src / "src" / "deep" / "er" / "mod.py").unlink()  # gone, its folders with it
    write(src / "src" / "new.py", "new = True\n")  # new
    (src / "bin" / "run.sh").chmod(0o644)  # no longer executable
    (src / "empty.txt").unlink()
    os.symlink("README.md", src / "empty.txt")  # a file become a link
    (src / "another_empty").mkdir()


def test_a_checkout_begun_on_another_tree_ends_as_the_tree_asked_for(
    vault, source, tmp_path, pace, caplog
):
    """Git starts writing one tree (the user's HEAD while the import reads the folder), and
    is taken on to the tree restored: git rewrites what differs, nothing else is written."""
    if pace != "git":
        pytest.skip("only git's checkout is begun early")
    first = import_folder(vault, source)
    change_source(source)
    second = import_folder(vault, source)
    dest = tmp_path / "restored"
    begun = materialize_module.begin_checkout(vault, first.base_commit, dest)
    assert begun is not None
    with caplog.at_level("WARNING", logger=materialize_module.__name__):
        tree = materialize(vault, second.base_commit, dest, label="s", early=begun)
    assert tree == second.base_tree
    assert walk(dest) == walk(source)
    assert "git could not write" not in caplog.text
    begun.close()  # taken: closing it again leaves the folder alone
    assert siblings(tmp_path) == {"source", "vault.git", "restored"}


def test_a_begun_checkout_nobody_takes_leaves_nothing(vault, source, tmp_path, pace):
    if pace != "git":
        pytest.skip("only git's checkout is begun early")
    result = import_folder(vault, source)
    dest = tmp_path / "restored"
    begun = materialize_module.begin_checkout(vault, result.base_commit, dest)
    assert begun is not None
    begun.close()
    assert siblings(tmp_path) == {"source", "vault.git"}
    dest.mkdir()
    assert materialize_module.begin_checkout(vault, result.base_commit, dest) is None  # dest exists


def test_a_checkout_begun_on_a_tree_git_cannot_read_is_replaced(
    vault, source, tmp_path, pace, caplog
):
    """The tree a checkout was begun on missing (or anything git fails on): the restore writes
    the tree itself, and nothing of git's attempt is left."""
    if pace != "git":
        pytest.skip("only git's checkout is begun early")
    result = import_folder(vault, source)
    dest = tmp_path / "restored"
    begun = materialize_module.begin_checkout(vault, "1" * 40, dest)
    assert begun is not None
    with caplog.at_level("WARNING", logger=materialize_module.__name__):
        materialize(vault, result.base_commit, dest, label="s", early=begun)
    assert walk(dest) == walk(source)
    assert siblings(tmp_path) == {"source", "vault.git", "restored"}


def index_stats(vault: Vault, index: Path) -> dict[str, tuple[int, int, int]]:
    """(mtime, inode, uid) of each entry of a git index, as git recorded them."""
    out = subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "ls-files", "-z", "--debug"],
        env=git_env(GIT_INDEX_FILE=str(index)),
        capture_output=True,
        check=True,
    ).stdout
    entry = re.compile(
        rb"([^\n\0]+)\0  ctime: \d+:\d+\n  mtime: (\d+):(\d+)\n  dev: \d+\tino: (\d+)\n"
        rb"  uid: (\d+)\t"
    )
    return {
        os.fsdecode(m[1]): (int(m[2]) * 10**9 + int(m[3]), int(m[4]), int(m[5]))
        for m in entry.finditer(out)
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give files to another user")
def test_git_writes_an_owners_files_as_that_user_and_hands_back_its_index(
    vault, source, tmp_path, monkeypatch, pace
):
    """Where Cairn runs as root, git makes every file and folder as the workspace's owner: none
    is chowned afterwards, and git's own index of the tree, its stat data true, is handed back.
    Without a way to run git so, each is chowned, and no index is handed back."""
    real_setpriv = materialize_module._SETPRIV
    if pace != "git":
        pytest.skip("only git's checkout runs as the owner")
    result = import_folder(vault, source)
    chowned: list[bytes] = []
    real_chown = os.chown

    def spy(path, *args, **kwargs):
        chowned.append(os.fsencode(path))
        return real_chown(path, *args, **kwargs)

    monkeypatch.setattr(materialize_module.os, "chown", spy)
    # git run as the owner; no setpriv; one that cannot keep those powers (tried once).
    for n, setpriv in enumerate([real_setpriv, None, "/bin/false"]):
        monkeypatch.setattr(materialize_module, "_SETPRIV", setpriv)
        chowned.clear()
        dest, index = tmp_path / f"restored{n}", tmp_path / f"index{n}"
        stats: dict[bytes, os.stat_result] = {}
        materialize(
            vault, result.base_commit, dest, label="s", owner=(4321, 4322), stats=stats,
            git_index=index,
        )  # fmt: skip
        assert walk(dest) == walk(source)
        assert owners_below(dest) == {(4321, 4322)}
        if setpriv != real_setpriv:
            assert len(chowned) > len(stats) and not index.exists()
            continue
        # Only the folders git does not make (empty ones) were handed over here.
        assert {os.path.basename(p) for p in chowned} == {
            b"empty_dir",
            b"nested_empty",
            b"inner_empty",
        }
        recorded = index_stats(vault, index)
        assert set(recorded) == {os.fsdecode(rel) for rel in stats}
        for rel, st in stats.items():
            assert recorded[os.fsdecode(rel)] == (st.st_mtime_ns, st.st_ino, 4321)
        index.unlink()


def test_a_tree_held_in_memory_and_checked_is_not_read_again(vault, source, tmp_path, monkeypatch):
    """An import's base, held in memory and its objects checked as they came in: what is to be
    written is taken from it. Without `checked`, or once the index changed, the trees are read
    from the vault as ever."""
    result = import_folder(vault, source)
    reads: list[str] = []
    real_read = materialize_module._Plan.read.__func__

    def spy(cls, objects, tree, label):
        reads.append(tree)
        return real_read(cls, objects, tree, label)

    monkeypatch.setattr(materialize_module._Plan, "read", classmethod(spy))
    for n, checked in enumerate([True, False]):
        dest = tmp_path / f"restored{n}"
        tree = materialize(
            vault, result.base_commit, dest, label="s", checked=checked, index=result.index
        )
        assert tree == result.base_tree and walk(dest) == walk(source)
    assert reads == [result.base_tree]  # only without `checked`
    assert result.index is not None
    result.index.set_file("extra.txt", result.index.get("README.md"))  # changed since its flush
    materialize(vault, result.base_commit, tmp_path / "restored2", label="s", checked=True,
                index=result.index)  # fmt: skip
    assert reads == [result.base_tree] * 2
    assert walk(tmp_path / "restored2") == walk(source)


def test_gits_checkout_is_asked_to_go_first(vault, source, tmp_path, monkeypatch, pace):
    """The checkout is what a new folder waits for: its priority is raised where that is
    allowed (root), and nothing fails where it is not."""
    if pace != "git":
        pytest.skip("only git's checkout is raised")
    result = import_folder(vault, source)
    asked: list[int] = []

    def setpriority(which, who, value):
        asked.append(value)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(materialize_module.os, "setpriority", setpriority)
    materialize(vault, result.base_commit, tmp_path / "restored", label="s")
    assert asked == [materialize_module._CHECKOUT_NICE] and asked[0] < 0
    assert walk(tmp_path / "restored") == walk(source)
