"""The import's fast path: tracked files whose index entry vouches for them take their blob from
the index; anything the index cannot vouch for (changed, racy, converted on checkout, sparse, a
submodule, an untracked repository) is read from disk. Each case is compared with the same import
made with the fast path off, with the files on disk, and with the user's repository untouched."""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import subprocess
import time
from pathlib import Path

import pytest

from core.errors import InputError
from core.vault import Vault, importer
from core.vault.importer import import_folder
from core.vault.materialize import materialize
from core.vault.objects import MODE_GITLINK
from core.vault.tree_index import TreeIndex
from tests.support import git_alone as git
from tests.support import write_file as write

HOUR = 3600


def age(repo: Path, *, settled: bool = False) -> None:
    """Backdate every work tree file an hour, then let git record their stat data: the index
    then vouches for them without any entry being racy by its mtime (their ctimes, set by the
    backdating, fall in the second the index is written: such entries are vouched for while
    their stat data is what git recorded, to the nanosecond). `settled`: the index is written
    in the second after the backdating, so that no entry is racy by its ctime either."""
    past = time.time() - HOUR
    for folder, dirs, names in os.walk(repo):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            os.utime(os.path.join(folder, name), (past, past), follow_symlinks=False)
    if settled:
        time.sleep(1.01 - time.time() % 1)
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=repo, capture_output=True)


def fingerprint(folder: Path) -> dict[str, tuple]:
    """Every path below `folder`, `.git` included: kind, mode, bytes, and mtimes of folders and
    of index files."""
    out: dict[str, tuple] = {"<top>": ("dir", os.stat(folder).st_mtime_ns)}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, folder)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode, st.st_mtime_ns)
            else:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                out[rel] = ("file", st.st_mode, digest, st.st_mtime_ns if "index" in name else 0)
    return out


def tree_files(vault: Vault, tree: str) -> dict[str, tuple[str, str]]:
    return {
        rel: (rec.mode, rec.sha)
        for rel, rec in TreeIndex.from_tree(vault.objects, tree).files().items()
    }


def slow_import(vault: Vault, folder: Path, monkeypatch: pytest.MonkeyPatch):
    """The same import with the index vouching for nothing: every file hashed from disk."""
    work_tree = importer._UserRepo.work_tree

    def vouch_nothing(self):
        found = work_tree(self)
        found.changed = None
        return found

    with monkeypatch.context() as m:
        m.setattr(importer._UserRepo, "work_tree", vouch_nothing)
        return import_folder(vault, folder)


def check_import(
    vault: Vault, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> importer.ImportResult:
    """Import `repo` (fast path), and check: the user's repository is byte-identical afterwards,
    the base equals the fast-path-off import, and the workspace written from it holds every file
    as it is on disk, bytes and mode."""
    before = fingerprint(repo)
    status = git(repo, "status", "--porcelain=v2", "--untracked-files=all")
    fast = import_folder(vault, repo)
    assert fingerprint(repo) == before
    assert git(repo, "status", "--porcelain=v2", "--untracked-files=all") == status
    slow = slow_import(vault, repo, monkeypatch)
    assert tree_files(vault, fast.base_tree) == tree_files(vault, slow.base_tree)
    assert fast.base_tree == slow.base_tree
    assert slow.files_hashed >= fast.files_hashed

    ws = tmp_path / f"ws-{len(list(tmp_path.glob('ws-*')))}"
    materialize(vault, fast.base_commit, ws, label="the base")
    for rel, (mode, _sha) in tree_files(vault, fast.base_tree).items():
        if mode == MODE_GITLINK:
            continue
        disk, made = repo / rel, ws / rel
        if not os.path.lexists(disk):
            continue  # outside a sparse checkout: the index's content, as git status takes it
        d, w = os.lstat(disk), os.lstat(made)
        assert stat.S_IFMT(d.st_mode) == stat.S_IFMT(w.st_mode), rel
        if stat.S_ISLNK(d.st_mode):
            assert os.readlink(disk) == os.readlink(made), rel
        else:
            assert disk.read_bytes() == made.read_bytes(), rel
            assert d.st_mode & 0o100 == w.st_mode & 0o100, rel
    return fast


def new_repo(tmp_path: Path, name: str = "project") -> Path:
    repo = tmp_path / name
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(30):
        write(repo / f"pkg{i % 3}" / f"mod{i}.py", f"value = {i}\n")
    write(repo / "tool.sh", "#!/bin/sh\necho tool\n", 0o755)
    os.symlink("tool.sh", repo / "link")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def test_clean_tracked_files_come_from_the_index_and_only_the_dirty_are_hashed(
    vault, tmp_path, monkeypatch
):
    repo = new_repo(tmp_path)
    age(repo)
    write(repo / "pkg0" / "mod0.py", "value = 'changed, longer'\n")  # modified
    write(repo / "pkg1" / "mod1.py", "value = 9\n")  # modified, same size
    write(repo / "pkg2" / "new.py", "untracked\n")  # untracked
    write(repo / "pkg2" / "staged.py", "staged\n")
    git(repo, "add", "pkg2/staged.py")  # staged: its blob is not among HEAD's objects
    write(repo / "pkg2" / "intent.py", "intent to add\n")
    git(repo, "add", "-N", "pkg2/intent.py")  # the index holds the empty blob for it
    past = time.time() - HOUR
    for rel in ("pkg2/staged.py", "pkg2/intent.py"):
        os.utime(repo / rel, (past, past))
    git(repo, "update-index", "-q", "--refresh")
    (repo / "pkg0" / "mod3.py").unlink()  # deleted
    os.chmod(repo / "pkg1" / "mod4.py", 0o755)  # mode changed

    result = check_import(vault, repo, tmp_path, monkeypatch)

    # The two modified, the untracked, the staged, the intent-to-add and the re-moded files.
    assert result.files_hashed == 6
    assert result.files == 34


def test_a_racily_clean_file_is_read_from_disk(vault, tmp_path, monkeypatch):
    """An entry whose stat data matches the file but was taken in the second the index was
    written: the file may have changed within that second without its stat data showing it."""
    repo = new_repo(tmp_path)
    age(repo)
    target = repo / "pkg0" / "mod0.py"
    write(target, "value = 7\n")  # same size as "value = 0\n", other bytes
    st = os.lstat(target)
    _set_index_stat(repo, "pkg0/mod0.py", st)  # the index now vouches for the new stat data
    index = repo / ".git" / "index"
    os.utime(index, ns=(st.st_mtime_ns, st.st_mtime_ns))  # ...written in the same second

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert vault.objects.read_blob(files["pkg0/mod0.py"][1]) == b"value = 7\n"
    assert result.files_hashed == 1


def test_text_eol_crlf_attributes_keep_the_bytes_on_disk(vault, tmp_path, monkeypatch):
    repo = new_repo(tmp_path)
    write(repo / ".gitattributes", "* text=auto eol=crlf\n")
    write(repo / "data.bin", b"\0\1\2 binary\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "attributes")
    _check_out_again(repo)
    assert (repo / "pkg0" / "mod0.py").read_bytes() == b"value = 0\r\n"
    age(repo)

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert vault.objects.read_blob(files["pkg0/mod0.py"][1]) == b"value = 0\r\n"
    assert result.files_hashed == result.files - 1  # all but the link (never converted)


def test_a_clean_smudge_filter_keeps_the_bytes_on_disk(vault, tmp_path, monkeypatch):
    repo = new_repo(tmp_path)
    git(repo, "config", "filter.upper.clean", "tr A-Z a-z")
    git(repo, "config", "filter.upper.smudge", "tr a-z A-Z")
    write(repo / ".gitattributes", "*.txt filter=upper\n")
    write(repo / "notes.txt", "some notes\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "filtered")
    _check_out_again(repo)
    assert (repo / "notes.txt").read_bytes() == b"SOME NOTES\n"
    age(repo)

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert vault.objects.read_blob(files["notes.txt"][1]) == b"SOME NOTES\n"
    assert result.files_hashed == 1


def test_core_autocrlf_keeps_the_bytes_on_disk(vault, tmp_path, monkeypatch):
    repo = new_repo(tmp_path)
    git(repo, "config", "core.autocrlf", "true")
    _check_out_again(repo)
    assert (repo / "pkg1" / "mod1.py").read_bytes() == b"value = 1\r\n"
    age(repo)

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert vault.objects.read_blob(files["pkg1/mod1.py"][1]) == b"value = 1\r\n"
    assert result.files_hashed == result.files - 1


def test_an_attributes_file_changed_since_checkout_still_counts(vault, tmp_path, monkeypatch):
    """Checked out through a filter, then the attribute removed on disk only: the files still
    hold the bytes the filter made (of the blob's size, so only the attributes can tell)."""
    repo = new_repo(tmp_path)
    git(repo, "config", "filter.upper.clean", "tr A-Z a-z")
    git(repo, "config", "filter.upper.smudge", "tr a-z A-Z")
    write(repo / ".gitattributes", "*.txt filter=upper\n")
    write(repo / "notes.txt", "some notes\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "filtered")
    _check_out_again(repo)
    age(repo)
    write(repo / ".gitattributes", "# no filters any more\n")

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert vault.objects.read_blob(files["notes.txt"][1]) == b"SOME NOTES\n"
    assert result.files_hashed == 2  # the attributes file and the filtered one


def test_a_sparse_checkout_imports_as_git_status_sees_it(vault, tmp_path, monkeypatch):
    repo = new_repo(tmp_path)
    git(repo, "sparse-checkout", "set", "pkg1")
    assert not (repo / "pkg0").exists()
    age(repo)
    write(repo / "pkg1" / "mod1.py", "value = 'edited'\n")

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert "pkg0/mod0.py" in files  # as the index holds it
    assert result.files_hashed == 1


def test_a_submodule_and_an_untracked_repository_inside(vault, tmp_path, monkeypatch):
    sub = new_repo(tmp_path, "library")
    repo = new_repo(tmp_path)
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "lib")
    git(repo, "commit", "-q", "-m", "submodule")
    inner = repo / "scratch"
    inner.mkdir()
    git(inner, "init", "-q", "-b", "main")
    write(inner / "a.txt", "inside an untracked repository\n")
    age(repo)

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert files["lib"][0] == MODE_GITLINK
    assert vault.objects.read_blob(files["scratch/a.txt"][1]) == b"inside an untracked repository\n"
    assert not any(rel.startswith("lib/") for rel in files)
    assert result.files_hashed == 1  # the untracked repository's one file


def _check_out_again(repo: Path) -> None:
    """Write every tracked file again from the index, under the current attributes and config."""
    for rel in git(repo, "ls-files", "-z").split("\0"):
        if rel:
            os.unlink(repo / rel)
    git(repo, "checkout", "--", ".")


def _set_index_stat(repo: Path, rel: str, st: os.stat_result) -> None:
    """Rewrite one entry's stat data in a version-2 index (what a racy `git add` leaves)."""
    path = repo / ".git" / "index"
    data = bytearray(path.read_bytes())
    assert data[:4] == b"DIRC" and struct.unpack(">I", data[4:8])[0] == 2
    count = struct.unpack(">I", data[8:12])[0]
    pos = 12
    for _ in range(count):
        flags = struct.unpack(">H", data[pos + 60 : pos + 62])[0]
        name_end = data.index(b"\0", pos + 62)
        name = bytes(data[pos + 62 : name_end])
        if name == rel.encode():
            fields = (
                st.st_ctime_ns // 10**9,
                st.st_ctime_ns % 10**9,
                st.st_mtime_ns // 10**9,
                st.st_mtime_ns % 10**9,
                st.st_dev & 0xFFFFFFFF,
                st.st_ino & 0xFFFFFFFF,
            )
            data[pos : pos + 24] = struct.pack(">6I", *fields)
            data[pos + 36 : pos + 40] = struct.pack(">I", st.st_size)
            break
        assert not flags & 0x4000  # no extended flags in a plain index
        pos += (62 + len(name) + 8) // 8 * 8
    else:
        raise AssertionError(f"{rel} is not in the index")
    data[-20:] = hashlib.sha1(bytes(data[:-20])).digest()
    path.write_bytes(bytes(data))


def test_what_git_status_says_is_read_whatever_the_names_hold(tmp_path):
    """Every changed, staged, unmerged and untracked path of `git status --porcelain=v2 -z`,
    whatever its name holds (spaces, tabs, new lines); a line of a kind Cairn does not know
    refuses the import instead of being taken for nothing changed."""
    repo = tmp_path / "repo"
    names = ["plain.txt", "with space.txt", "tab\there.txt", "new\nline.txt", "dir/deep é.txt"]
    for i, name in enumerate(names):
        write(repo / name, f"content {i}\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    age(repo)
    write(repo / "with space.txt", "changed\n")
    write(repo / "new\nline.txt", "staged\n")
    git(repo, "add", "new\nline.txt")
    write(repo / "untracked\tone.txt", "new\n")

    state = importer._UserRepo(repo.resolve()).work_tree()

    assert sorted(e.rel for e in state.entries) == sorted(names)
    assert {(e.tag, e.mode, e.stage) for e in state.entries} == {("H", "100644", "0")}
    assert state.changed == {"with space.txt", "new\nline.txt"}
    assert state.untracked == ["untracked\tone.txt"]
    changed, _ = importer._parse_status(b"u UU N... 100644 100644 100644 100644 a b c two words\0")
    assert changed == {"two words"}
    with pytest.raises(InputError):
        importer._parse_status(b"1 .M N... 100644 100644 100644 a b x\0Z what is this\0")


def test_an_entry_marked_assume_unchanged_is_read_from_disk(vault, tmp_path, monkeypatch):
    """git status does not look at a file marked assume-unchanged: its index entry vouches for
    nothing, whatever the file holds now."""
    repo = new_repo(tmp_path)
    age(repo)
    git(repo, "update-index", "--assume-unchanged", "pkg0/mod0.py")
    write(repo / "pkg0" / "mod0.py", "value = 'edited while assumed unchanged'\n")
    assert git(repo, "status", "--porcelain") == ""

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert vault.objects.read_blob(files["pkg0/mod0.py"][1]).startswith(b"value = 'edited")
    assert result.files_hashed == 1


@pytest.mark.parametrize(
    "setting", ["core.trustctime=false", "core.checkStat=minimal", "core.filemode=false"]
)
def test_a_relaxed_stat_setting_of_the_person_does_not_hide_an_edit(
    vault, tmp_path, monkeypatch, setting
):
    """The person's config may tell git to trust less of the stat data; the import does not."""
    repo = new_repo(tmp_path)
    age(repo, settled=True)  # no entry racy: what is vouched for is git status's word alone
    key, value = setting.split("=")
    git(repo, "config", key, value)
    target = repo / "pkg2" / "mod2.py"
    st = os.lstat(target)
    write(target, "value = 8\n")  # same size as "value = 2\n"
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime: ctime tells
    os.chmod(repo / "pkg1" / "mod1.py", 0o755)  # only the mode tells

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert vault.objects.read_blob(files["pkg2/mod2.py"][1]) == b"value = 8\n"
    assert files["pkg1/mod1.py"][0] == "100755"
    assert result.files_hashed == 2


@pytest.mark.parametrize("autocrlf", [None, "true", "input"])
def test_converted_files_are_those_any_conversion_attribute_or_setting_reaches(tmp_path, autocrlf):
    """The files git may convert on checkout, read from the attributes each path has: set, a
    value or a macro's expansion converts; unset does not; core.autocrlf reaches every file
    whose `text` attribute is unspecified (`!text` included), and `binary` leaves it alone."""
    repo = tmp_path / "repo"
    rules = {
        "plain.py": "",
        "text.txt": "text",
        "auto.txt": "text=auto",
        "notext.dat": "-text",
        "unspecified.md": "!text",
        "image.png": "binary",
        "crlf.bat": "eol=crlf",
        "filtered.x": "filter=upper",
        "ident.c": "ident",
        "latin.txt": "-text working-tree-encoding=ISO-8859-1",
        "both.y": "-text filter=upper",
        "dir/deep.z": "-text -filter -ident",
        "tab\tname.txt": "text",
    }
    write(
        repo / ".gitattributes",
        "".join(f"{name.replace(chr(9), '?')} {attrs}\n" for name, attrs in rules.items() if attrs),
    )
    for name in rules:
        write(repo / name, "x\n")
    git(repo, "init", "-q")
    if autocrlf:
        git(repo, "config", "core.autocrlf", autocrlf)
    paths = list(rules)

    found = importer._UserRepo(repo).converted(paths)

    by_attribute = {"text.txt", "auto.txt", "crlf.bat", "filtered.x", "ident.c", "latin.txt"}
    by_attribute |= {"both.y", "tab\tname.txt"}
    by_setting = {"plain.py", "unspecified.md", "crlf.bat", "filtered.x", "ident.c"}
    assert found == (by_attribute | by_setting if autocrlf else by_attribute)


def test_an_edit_in_the_second_the_index_was_written_that_kept_the_mtime(
    vault, tmp_path, monkeypatch
):
    """git compares whole seconds of a ctime and looks at the mtime alone for racy entries: a
    file rewritten at its size in the second its stat data was recorded and the index written,
    its mtime put back, passes `git status`. Its entry vouches for nothing."""
    repo = new_repo(tmp_path)
    past = time.time() - HOUR
    time.sleep(1.01 - time.time() % 1)  # all of what follows in one second, on most machines
    started = int(time.time())
    for rel in ("pkg0/mod0.py", "pkg1/mod1.py"):
        os.utime(repo / rel, (past, past))
    git(repo, "update-index", "-q", "--refresh")
    target = repo / "pkg0" / "mod0.py"
    write(target, "value = 5\n")  # the size of "value = 0\n"
    os.utime(target, (past, past))
    if int(time.time()) != started:
        pytest.skip("the machine took over a second for what had to fall in one")
    assert git(repo, "status", "--porcelain") == ""  # git itself cannot tell

    result = check_import(vault, repo, tmp_path, monkeypatch)

    files = tree_files(vault, result.base_tree)
    assert vault.objects.read_blob(files["pkg0/mod0.py"][1]) == b"value = 5\n"


def test_an_index_listing_line_of_another_form_refuses_the_import(vault, tmp_path, monkeypatch):
    """When the index's listing with stat data cannot be read, the plain listing is read
    instead; a line of that one in another form refuses the import in words naming the line,
    and the repository is left as it was."""
    repo = new_repo(tmp_path)
    age(repo)
    before = fingerprint(repo)
    real = importer._UserRepo.git

    def odd(self, args, **kwargs):
        proc = real(self, args, **kwargs)
        if args[:1] == ["ls-files"] and "--stage" in args:
            odd_out = b"a listing of some other form" if "--debug" in args else b"H 100644 x 0\0"
            proc = subprocess.CompletedProcess(proc.args, 0, odd_out, b"")
        return proc

    monkeypatch.setattr(importer._UserRepo, "git", odd)
    with pytest.raises(InputError, match=r"a line reads 'H 100644 x 0'"):
        import_folder(vault, repo)
    assert fingerprint(repo) == before
    assert importer._parse_plain_listing(b"H 100644 " + b"a" * 40 + b" 0\tok.txt\0") == [
        importer._IndexEntry("H", "100644", "a" * 40, "0", "ok.txt")
    ]
