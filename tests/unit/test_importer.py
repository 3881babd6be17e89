"""Importing a dropped folder: git repositories (HEAD + base of the work tree), plain folders,
and the inputs that must be refused; the user's repository is never written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest

from core.datadir import DataDir
from core.errors import InputError
from core.vault import Vault, importer, packs
from core.vault.importer import check_importable, import_folder
from core.vault.objects import (
    EMPTY_TREE,
    MODE_EXEC,
    MODE_FILE,
    MODE_GITLINK,
    MODE_LINK,
    git_env,
)
from core.vault.tree_index import TreeIndex
from tests.support import git_alone as git
from tests.support import write_file as write

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


@pytest.fixture(autouse=True, params=["loose", "packed"])
def storing(request, monkeypatch) -> str:
    """Every import stores the files it reads as loose objects (a few files) and, again, in one
    pack (many files): the same base either way."""
    if request.param == "packed":
        monkeypatch.setattr(packs, "LOOSE_BELOW", 0)
    return request.param


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    v = Vault.open_or_create(tmp_path / "vault" / "src.git")
    yield v
    v.close()


def vault_refs(vault: Vault) -> list[str]:
    refs = [
        str(p.relative_to(vault.git_dir))
        for p in (vault.git_dir / "refs").rglob("*")
        if p.is_file()
    ]
    packed = vault.git_dir / "packed-refs"
    if packed.exists():
        refs += [line for line in packed.read_text().splitlines() if not line.startswith("#")]
    return refs


def base_entries(vault: Vault, tree: str) -> tuple[dict[str, tuple[str, bytes]], set[str]]:
    """path → (mode, content or link target) for every file; and every folder."""
    index = TreeIndex.from_tree(vault.objects, tree)
    files = {}
    for rel, rec in index.files().items():
        content = b"" if rec.mode == MODE_GITLINK else vault.objects.read_blob(rec.sha)
        files[rel] = (rec.mode, content)
    return files, {d for d in index.dirs if d}


def fingerprint(folder: Path) -> dict[str, tuple]:
    """Every path below `folder` (work tree and .git alike): kind, mode, content, the mtime of
    every folder (a lock file made and removed again changes its folder's mtime) and of the
    index."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode, st.st_mtime_ns)
            else:
                with open(path, "rb") as f:
                    out[rel] = ("file", st.st_mode, hashlib.sha256(f.read()).hexdigest())
                if name == "index":  # git's index, of the repository or of a linked worktree
                    out[rel] += (st.st_mtime_ns,)
    out["<top>"] = ("dir", os.stat(folder).st_mtime_ns)
    return out


def status(folder: Path) -> str:
    return git(folder, "status", "--porcelain=v2", "--branch", "--untracked-files=all")


# -- a repository with every kind of change ----------------------------------------------------


@pytest.fixture
def busy_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / ".gitignore", "*.log\nbuild/\n")
    write(repo / "README.md", "v1\n")
    write(repo / "src" / "app.py", "print('v1')\n")
    write(repo / "src" / "old.py", "gone soon\n")
    write(repo / "tool.sh", "#!/bin/sh\necho tool\n", 0o755)
    write(repo / "nested" / ".gitignore", "*.tmp\n")
    write(repo / "nested" / "keep.txt", "keep\n")
    os.symlink("README.md", repo / "link_in")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")

    write(repo / "README.md", "v2 staged\n")
    write(repo / "src" / "staged.py", "staged = True\n")
    git(repo, "add", "README.md", "src/staged.py")
    write(repo / "README.md", "v3 on disk\n")  # staged, then changed again
    write(repo / "src" / "app.py", "print('unstaged')\n")  # unstaged change
    (repo / "src" / "old.py").unlink()  # tracked, deleted on disk
    write(repo / "notes.txt", "untracked\n")
    write(repo / "run.sh", "#!/bin/sh\n", 0o755)  # untracked executable
    write(repo / "nested" / "inner" / "new.txt", "nested untracked\n")
    write(repo / "newpkg" / "a.txt", "a\n")
    (repo / "newpkg" / "sub" / "deeper").mkdir(parents=True)  # empty, below an untracked folder
    (repo / "empty").mkdir()
    write(tmp_path / "outside.txt", "outside\n")
    os.symlink(tmp_path / "outside.txt", repo / "escape")  # points outside the folder
    os.symlink("../outside.txt", repo / "escape_rel")
    write(repo / "debug.log", "ignored\n")
    write(repo / "build" / "out.bin", b"\0ignored")
    (repo / "build" / "emptyignored").mkdir()
    write(repo / "nested" / "x.tmp", "ignored by nested rule\n")
    (repo / "nested" / "cache").mkdir()
    write(repo / "nested" / "cache" / "y.tmp", "ignored\n")  # holds only ignored files
    return repo


def test_git_import_records_working_tree_as_git_status_sees_it(vault, busy_repo):
    head = git(busy_repo, "rev-parse", "HEAD").strip()
    result = import_folder(vault, busy_repo)

    assert result.kind == "git"
    assert result.head_commit == head
    assert result.head_branch == "main"
    commit = vault.objects.read_commit(result.base_commit)
    assert commit.parents == (head,)
    assert commit.tree == result.base_tree
    assert commit.trailer("Cairn-Trigger") == "base"
    assert vault.objects.read_commit(head).sha == head  # HEAD's objects are in the vault

    files, dirs = base_entries(vault, result.base_tree)
    assert files == {
        ".gitignore": (MODE_FILE, b"*.log\nbuild/\n"),
        "README.md": (MODE_FILE, b"v3 on disk\n"),
        "src/app.py": (MODE_FILE, b"print('unstaged')\n"),
        "src/staged.py": (MODE_FILE, b"staged = True\n"),
        "tool.sh": (MODE_EXEC, b"#!/bin/sh\necho tool\n"),
        "nested/.gitignore": (MODE_FILE, b"*.tmp\n"),
        "nested/keep.txt": (MODE_FILE, b"keep\n"),
        "nested/inner/new.txt": (MODE_FILE, b"nested untracked\n"),
        "link_in": (MODE_LINK, b"README.md"),
        "escape": (MODE_LINK, os.fsencode(busy_repo.parent / "outside.txt")),
        "escape_rel": (MODE_LINK, b"../outside.txt"),
        "notes.txt": (MODE_FILE, b"untracked\n"),
        "run.sh": (MODE_EXEC, b"#!/bin/sh\n"),
        "newpkg/a.txt": (MODE_FILE, b"a\n"),
    }
    assert dirs == {
        "src",
        "nested",
        "nested/inner",
        "nested/cache",
        "newpkg",
        "newpkg/sub",
        "newpkg/sub/deeper",
        "empty",
    }
    assert result.files == len(files)


def test_git_import_agrees_with_git_add_all_on_a_copy(vault, busy_repo, tmp_path):
    """An independent oracle: `git add -A` in a copy stages exactly the files the base holds."""
    result = import_folder(vault, busy_repo)
    copy = tmp_path / "copy"
    shutil.copytree(busy_repo, copy, symlinks=True)
    git(copy, "add", "-A")
    expected = {}
    for line in git(copy, "ls-files", "-s").splitlines():
        meta, path = line.split("\t", 1)
        mode, sha, _ = meta.split()
        expected[path] = (mode, sha)
    index = TreeIndex.from_tree(vault.objects, result.base_tree)
    assert {rel: (rec.mode, rec.sha) for rel, rec in index.files().items()} == expected


def test_git_import_never_writes_to_the_users_repository(vault, busy_repo):
    status_before = status(busy_repo)
    before = fingerprint(busy_repo)
    import_folder(vault, busy_repo)
    import_folder(vault, busy_repo)  # again, now that the vault holds HEAD already
    assert fingerprint(busy_repo) == before
    assert status(busy_repo) == status_before


def test_git_import_leaves_no_ref_behind(vault, busy_repo):
    import_folder(vault, busy_repo)
    assert vault_refs(vault) == []
    assert not (vault.git_dir / "FETCH_HEAD").exists()


def test_unborn_branch_imports_without_parent(vault, tmp_path):
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "trunk")
    write(repo / "staged.txt", "staged\n")
    git(repo, "add", "staged.txt")
    write(repo / "loose.txt", "untracked\n")
    before = fingerprint(repo)

    result = import_folder(vault, repo)

    assert (result.kind, result.head_commit, result.head_branch) == ("git", None, "trunk")
    commit = vault.objects.read_commit(result.base_commit)
    assert commit.parents == ()
    files, _ = base_entries(vault, result.base_tree)
    assert files == {
        "staged.txt": (MODE_FILE, b"staged\n"),
        "loose.txt": (MODE_FILE, b"untracked\n"),
    }
    assert fingerprint(repo) == before
    assert vault_refs(vault) == []


def test_detached_head_has_no_branch(vault, busy_repo):
    head = git(busy_repo, "rev-parse", "HEAD").strip()
    git(busy_repo, "checkout", "-q", "--detach")
    result = import_folder(vault, busy_repo)
    assert (result.head_commit, result.head_branch) == (head, None)


def test_linked_worktree_with_a_gitfile_imports_and_main_repo_is_untouched(
    vault, busy_repo, tmp_path
):
    worktree = tmp_path / "wt"
    git(busy_repo, "worktree", "add", "-q", "-b", "side", str(worktree))
    write(worktree / "side.txt", "side\n")
    assert (worktree / ".git").is_file()
    before_main, before_wt = fingerprint(busy_repo), fingerprint(worktree)

    result = import_folder(vault, worktree)

    assert result.kind == "git" and result.head_branch == "side"
    assert result.head_commit == git(worktree, "rev-parse", "HEAD").strip()
    files, _ = base_entries(vault, result.base_tree)
    assert files["side.txt"] == (MODE_FILE, b"side\n")
    assert files["README.md"] == (MODE_FILE, b"v1\n")
    assert fingerprint(busy_repo) == before_main
    assert fingerprint(worktree) == before_wt


def test_submodule_kept_as_gitlink_and_untracked_repository_as_files(vault, tmp_path):
    repo = tmp_path / "super"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / "a.txt", "a\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "a")
    pinned = "1234567890abcdef1234567890abcdef12345678"
    (repo / "lib").mkdir()
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{pinned},lib")
    inner = repo / "inner"
    inner.mkdir()
    git(inner, "init", "-q")
    write(inner / "code.py", "x = 1\n")
    write(inner / ".gitignore", "*.pyc\n")
    write(inner / "code.pyc", b"\0")

    result = import_folder(vault, repo)

    index = TreeIndex.from_tree(vault.objects, result.base_tree)
    recs = index.files()
    assert recs["lib"].mode == MODE_GITLINK and recs["lib"].sha == pinned
    assert set(recs) == {"a.txt", "lib", "inner/code.py", "inner/.gitignore"}


def test_plain_folder_import(vault, tmp_path):
    folder = tmp_path / "plain"
    write(folder / "main.c", "int main;\n")
    write(folder / "bin" / "run", "#!/bin/sh\n", 0o755)
    write(folder / ".gitignore", "*.o\n")
    write(folder / "main.o", b"\0\1")
    os.symlink("/nonexistent/target", folder / "dangling")
    (folder / "docs" / "empty").mkdir(parents=True)

    result = import_folder(vault, folder)

    assert (result.kind, result.head_commit, result.head_branch) == ("plain", None, None)
    commit = vault.objects.read_commit(result.base_commit)
    assert commit.parents == () and commit.trailer("Cairn-Trigger") == "base"
    files, dirs = base_entries(vault, result.base_tree)
    assert files == {
        "main.c": (MODE_FILE, b"int main;\n"),
        "bin/run": (MODE_EXEC, b"#!/bin/sh\n"),
        ".gitignore": (MODE_FILE, b"*.o\n"),
        "dangling": (MODE_LINK, b"/nonexistent/target"),
    }
    assert dirs == {"bin", "docs", "docs/empty"}
    assert result.files == 4
    assert vault_refs(vault) == []


def test_empty_folder_import(vault, tmp_path):
    folder = tmp_path / "nothing"
    folder.mkdir()
    result = import_folder(vault, folder)
    assert result.kind == "plain" and result.files == 0
    assert result.base_tree == EMPTY_TREE
    assert vault.objects.read_commit(result.base_commit).tree == EMPTY_TREE


# -- refused inputs ----------------------------------------------------------------------------


def assert_one_line(exc: pytest.ExceptionInfo, *fragments: str) -> None:
    message = str(exc.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_refuses_missing_path_and_file(vault, tmp_path):
    data = DataDir(tmp_path / "data").ensure()
    with pytest.raises(InputError) as exc:
        check_importable(tmp_path / "nope", data)
    assert_one_line(exc, "does not exist")
    write(tmp_path / "file.txt", "x")
    with pytest.raises(InputError) as exc:
        check_importable(tmp_path / "file.txt", data)
    assert_one_line(exc, "is a file, not a folder")
    with pytest.raises(InputError) as exc:
        import_folder(vault, tmp_path / "nope")
    assert_one_line(exc, "does not exist")
    assert vault_refs(vault) == []


def test_refuses_the_data_folder_and_anything_around_it(tmp_path):
    data = DataDir(tmp_path / "home" / "cairn-data").ensure()
    with pytest.raises(InputError) as exc:
        check_importable(data.root, data)
    assert_one_line(exc, "is Cairn's own data folder")
    with pytest.raises(InputError) as exc:
        check_importable(data.workspaces_root, data)
    assert_one_line(exc, "is inside Cairn's data folder")
    with pytest.raises(InputError) as exc:
        check_importable(tmp_path / "home", data)
    assert_one_line(exc, "contains Cairn's data folder")
    os.symlink(data.vault_root, tmp_path / "sneaky")
    with pytest.raises(InputError) as exc:
        check_importable(tmp_path / "sneaky", data)
    assert_one_line(exc, "is inside Cairn's data folder")


def test_accepts_a_sibling_of_the_data_folder(tmp_path):
    data = DataDir(tmp_path / "data").ensure()
    (tmp_path / "data-project").mkdir()  # shares a name prefix, not a path
    project = tmp_path / "data-project"
    assert check_importable(project, data) == project.resolve()


# -- unreadable content, as an unprivileged user (root reads everything) -------------------------

_IMPORT_SNIPPET = """
import json, sys
from pathlib import Path
from core.datadir import DataDir
from core.errors import InputError
from core.vault import Vault, importer, packs
from core.vault.importer import check_importable, import_folder
vault = Vault.open_or_create(Path(sys.argv[2]))
try:
    if sys.argv[3] == "check":
        check_importable(Path(sys.argv[1]), DataDir(Path(sys.argv[2]).parent / "data"))
    result = import_folder(vault, Path(sys.argv[1]))
    print(json.dumps({"ok": result.base_commit}))
except InputError as exc:
    print(json.dumps({"error": str(exc)}))
"""


@pytest.fixture
def unprivileged_dir():
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to run as an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="cairn-unreadable-", dir="/tmp"))
    base.chmod(0o777)
    yield base
    for dirpath, dirnames, _ in os.walk(base):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
    shutil.rmtree(base, ignore_errors=True)


def import_as_nobody(base: Path, folder: Path, *, check: bool = False) -> tuple[dict, Path]:
    vault_dir = base / "vault.git"
    shutil.rmtree(vault_dir, ignore_errors=True)
    if os.geteuid() == 0:
        for dirpath, dirnames, filenames in os.walk(base):
            for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
                os.lchown(name, NOBODY, NOBODY)
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    else:
        prefix = []
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(base),
        "PYTHONPATH": str(ROOT),
        "LC_ALL": "C",
    }
    proc = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-c",
            _IMPORT_SNIPPET,
            str(folder),
            str(vault_dir),
            "check" if check else "import",
        ],
        cwd=base,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout.decode().strip().splitlines()[-1]), vault_dir


def vault_leftovers(vault_dir: Path) -> list[str]:
    """Refs and objects in a vault (a fresh vault holds neither)."""
    found = [str(p.relative_to(vault_dir)) for p in (vault_dir / "refs").rglob("*") if p.is_file()]
    found += [
        str(p.relative_to(vault_dir)) for p in (vault_dir / "objects").rglob("*") if p.is_file()
    ]
    if (vault_dir / "packed-refs").exists():
        found.append("packed-refs")
    return found


@pytest.mark.parametrize("kind", ["plain", "git"])
def test_unreadable_files_fail_the_import_naming_them(unprivileged_dir, kind):
    base = unprivileged_dir
    src = base / "src"
    write(src / "ok.txt", "fine\n")
    write(src / "a_secret.txt", "secret\n")
    write(src / "sub" / "b_hidden.txt", "hidden\n")
    write(src / "c_locked" / "inside.txt", "inside\n")
    write(src / "d_more.txt", "more\n")
    write(src / "e_more.txt", "more\n")
    if kind == "git":
        git(src, "init", "-q", "-b", "main")
        git(src, "add", "ok.txt", "a_secret.txt", "sub/b_hidden.txt")
        git(src, "commit", "-q", "-m", "tracked")

    # The harness itself works: everything readable imports fine as the same user.
    outcome, vault_dir = import_as_nobody(base, src)
    assert "ok" in outcome, outcome

    for name in ("a_secret.txt", "sub/b_hidden.txt", "d_more.txt", "e_more.txt"):
        (src / name).chmod(0)
    (src / "c_locked").chmod(0)
    outcome, vault_dir = import_as_nobody(base, src)

    assert "error" in outcome, outcome
    message = outcome["error"]
    assert "\n" not in message
    assert "5 items cannot be read" in message, message
    assert "a_secret.txt" in message and "c_locked" in message and "d_more.txt" in message
    assert "and 2 more" in message
    assert vault_leftovers(vault_dir) == []


def test_a_stray_git_folder_is_refused(vault, tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    inner = outer / "inner"
    (inner / ".git").mkdir(parents=True)  # not a repository: git would answer for `outer`
    write(inner / "a.txt", "a\n")
    with pytest.raises(InputError) as exc:
        import_folder(vault, inner)
    assert_one_line(exc, "is not a usable git repository")
    assert vault_refs(vault) == []


@pytest.mark.parametrize("check", [True, False])
def test_unreadable_folder_is_refused(unprivileged_dir, check):
    base = unprivileged_dir
    src = base / "src"
    write(src / "a.txt", "a\n")
    outcome, vault_dir = import_as_nobody(base, src, check=check)
    assert "ok" in outcome, outcome
    src.chmod(0o300)  # can enter, cannot list
    outcome, vault_dir = import_as_nobody(base, src, check=check)
    assert outcome == {"error": f"no permission to read the folder {src}"}
    assert vault_leftovers(vault_dir) == []


def test_shallow_clone_imports(vault, busy_repo, tmp_path):
    git(busy_repo, "commit", "-q", "-m", "second")
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{busy_repo}", str(clone))
    write(clone / "local.txt", "local\n")
    before = fingerprint(clone)

    result = import_folder(vault, clone)

    assert result.head_commit == git(clone, "rev-parse", "HEAD").strip()
    assert vault.objects.read_commit(result.base_commit).parents == (result.head_commit,)
    files, _ = base_entries(vault, result.base_tree)
    assert files["local.txt"] == (MODE_FILE, b"local\n")
    assert fingerprint(clone) == before
    assert vault_refs(vault) == []


def test_file_bytes_are_recorded_without_filters(vault, tmp_path):
    repo = tmp_path / "crlf"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "core.autocrlf", "true")
    write(repo / ".gitattributes", "*.txt text eol=crlf\n*.dat filter=upper\n")
    git(repo, "config", "filter.upper.clean", "tr a-z A-Z")
    write(repo / "lines.txt", b"one\r\ntwo\r\n")
    write(repo / "data.dat", b"lower\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "normalized in the commit")
    assert git(repo, "show", "HEAD:lines.txt") == "one\ntwo\n"  # git converted it

    result = import_folder(vault, repo)

    files, _ = base_entries(vault, result.base_tree)
    assert files["lines.txt"] == (MODE_FILE, b"one\r\ntwo\r\n")
    assert files["data.dat"] == (MODE_FILE, b"lower\n")


def test_a_repositorys_git_folder_is_refused_naming_the_repository_to_drop(tmp_path):
    data = DataDir(tmp_path / "data").ensure()
    repo = tmp_path / "project"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for inside in (repo / ".git", repo / ".git" / "refs"):
        with pytest.raises(InputError) as exc:
            check_importable(inside, data)
        assert_one_line(exc, "the git folder of the repository", str(repo), f"drop {repo}")
    assert check_importable(repo, data) == repo.resolve()


def test_head_is_fetched_aside_and_moved_in_only_when_the_import_goes_ahead(
    vault, busy_repo, tmp_path, monkeypatch
):
    """The fetch of HEAD runs while the work tree is listed, into a quarantine folder: a refused
    import leaves neither objects nor a shallow list behind; one that goes ahead holds HEAD's
    objects among the vault's own, and clears what an import that died had left."""
    git(busy_repo, "commit", "-q", "-m", "second")
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{busy_repo}", str(clone))
    objects = vault.objects.objects_dir
    dead = objects / f"{importer.INCOMING_PREFIX}99999999-0123456789ab"
    (dead / "pack").mkdir(parents=True)
    (dead / "pack" / "pack-x.pack").write_bytes(b"half a pack")

    def refuse(folder, problems):
        raise InputError("refused")

    with monkeypatch.context() as m:
        m.setattr(importer, "_raise_unreadable", refuse)
        with pytest.raises(InputError):
            import_folder(vault, clone)
    assert list(objects.glob(f"{importer.INCOMING_PREFIX}*")) == []
    assert not (vault.git_dir / "shallow").exists()
    assert [p for p in objects.rglob("*") if p.is_file()] == []

    result = import_folder(vault, clone)

    assert list(objects.glob(f"{importer.INCOMING_PREFIX}*")) == []
    assert vault.objects.read_commit(result.head_commit).tree
    assert (vault.git_dir / "shallow").read_text().strip() == result.head_commit
    assert vault_refs(vault) == []


def test_a_history_git_cannot_send_is_refused_in_one_line_and_leaves_nothing(
    vault, busy_repo, tmp_path
):
    """A blob of HEAD missing from the user's repository: the fetch fails, the import says so
    in a sentence, and neither the fetch's quarantine nor any object is left in the vault."""
    blob = git(busy_repo, "rev-parse", "HEAD:README.md").strip()
    (busy_repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()

    with pytest.raises(InputError) as exc:
        import_folder(vault, busy_repo)

    assert_one_line(exc, f"the history of {busy_repo} cannot be read")
    objects = vault.objects.objects_dir
    assert [p for p in objects.rglob("*") if p.is_file()] == []
    assert vault_refs(vault) == []


def test_a_new_vault_takes_the_repositorys_object_files_instead_of_a_fetch(
    vault, busy_repo, tmp_path, monkeypatch
):
    """Into a vault with no object yet, the repository's packs and loose objects are copied (git
    then finds HEAD's history complete and transfers nothing), the repository untouched; a
    vault that already holds objects fetches what it lacks, as does a shallow clone."""
    git(busy_repo, "gc", "-q")  # a pack...
    write(busy_repo / "later.txt", "after the pack\n")  # ...and loose objects beside it
    git(busy_repo, "add", "later.txt")
    git(busy_repo, "commit", "-q", "-m", "later")
    before = fingerprint(busy_repo)
    user_packs = {p.name for p in (busy_repo / ".git" / "objects" / "pack").glob("pack-*")}
    fetched: list[list[str]] = []
    real_popen = subprocess.Popen

    def popen(argv, *args, **kwargs):
        if "fetch" in argv:
            fetched.append(list(argv))
        return real_popen(argv, *args, **kwargs)

    monkeypatch.setattr(importer.subprocess, "Popen", popen)
    result = import_folder(vault, busy_repo)

    assert result.objects_copied
    objects = vault.objects.objects_dir
    assert user_packs <= {p.name for p in (objects / "pack").iterdir()}
    later = git(busy_repo, "rev-parse", "HEAD:later.txt").strip()
    assert (objects / later[:2] / later[2:]).is_file()  # a loose object, copied as it was
    assert all(
        not (p.stat().st_mode & 0o222) for p in objects.rglob("*") if p.is_file()
    )  # read-only, as git keeps them
    assert list(objects.glob(f"{importer.INCOMING_PREFIX}*")) == []
    files, _ = base_entries(vault, result.base_tree)
    assert files["later.txt"] == (MODE_FILE, b"after the pack\n")
    assert vault.objects.read_commit(result.head_commit).tree
    assert fingerprint(busy_repo) == before
    assert len(fetched) == 1  # git's fetch still runs, and finds nothing to transfer
    fsck = subprocess.run(
        ["git", "--git-dir", str(vault.git_dir), "fsck", "--no-dangling", result.base_commit],
        capture_output=True,
        env=git_env(),
    )
    assert fsck.returncode == 0, fsck.stderr

    # The vault now holds objects: the next import fetches, and copies nothing.
    packs_now = sorted(p.name for p in (objects / "pack").iterdir())
    again = import_folder(vault, busy_repo)
    assert not again.objects_copied
    assert sorted(p.name for p in (objects / "pack").iterdir()) == packs_now

    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{busy_repo}", str(clone))
    fresh = Vault.open_or_create(tmp_path / "fresh.git")
    assert not import_folder(fresh, clone).objects_copied  # fetched: a shallow clone


def test_a_corrupt_object_in_the_repository_fails_the_new_task_naming_it_and_leaves_nothing(
    tmp_path,
):
    """Each object file copied from the repository is checked on its way in: a blob whose
    bytes are not its id is not copied, git's fetch cannot bring it either, and the new task
    fails in one line naming it, undone."""
    from core.app import Cairn

    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / "a.txt", "the real bytes\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    blob = git(repo, "rev-parse", "HEAD:a.txt").strip()
    loose = repo / ".git" / "objects" / blob[:2] / blob[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob 15\0the fake bytes\n"))
    app = Cairn(tmp_path / "data")
    try:
        with pytest.raises(InputError) as exc:
            app.tasks.new(repo)
        assert_one_line(exc, f"the history of {repo} cannot be read: its object {blob[:12]}")
        assert app.ctx.store.list_tasks() == []
        assert list((tmp_path / "data" / "workspaces").glob("*")) == []
    finally:
        app.close()


def test_a_pack_not_as_its_checksum_says_is_not_copied_and_git_fetches_instead(vault, busy_repo):
    """A pack whose trailing checksum is not its bytes' (its index agreeing, so git reads its
    objects as ever): the copy is refused, git's fetch brings HEAD's history, and nothing of
    the copy is left."""
    git(busy_repo, "gc", "-q")
    (pack,) = (busy_repo / ".git" / "objects" / "pack").glob("pack-*.pack")
    index = pack.with_suffix(".idx")
    for path, at in ((pack, -1), (index, -21)):  # the pack's checksum, and the index's copy
        path.chmod(0o644)
        data = bytearray(path.read_bytes())
        data[at] ^= 0xFF
        path.write_bytes(bytes(data))
    assert git(busy_repo, "show", "HEAD:README.md")  # the repository reads as before

    result = import_folder(vault, busy_repo)

    assert not result.objects_copied
    objects = vault.objects.objects_dir
    assert pack.name not in {p.name for p in (objects / "pack").iterdir()}
    files, _ = base_entries(vault, result.base_tree)
    assert files["README.md"][1] == (busy_repo / "README.md").read_bytes()


def test_large_packs_are_copied_unread_and_said_to_be(vault, busy_repo, monkeypatch):
    """Reading every object of a large pack (a long history, large files) costs seconds: such
    packs are copied unread, and the import says so, so that whatever a workspace is written
    from is checked as it is read."""
    git(busy_repo, "gc", "-q")
    monkeypatch.setattr(importer, "_PACKS_CHECKED_UP_TO", 0)
    checks: list[list[str]] = []
    real_popen = subprocess.Popen

    def popen(argv, *args, **kwargs):
        if "index-pack" in argv and "--verify" in argv:
            checks.append(list(argv))
        return real_popen(argv, *args, **kwargs)

    monkeypatch.setattr(importer.subprocess, "Popen", popen)
    result = import_folder(vault, busy_repo)
    assert result.objects_copied and not result.objects_checked
    assert checks == []
    monkeypatch.setattr(importer, "_PACKS_CHECKED_UP_TO", 1 << 30)
    fresh = Vault.open_or_create(vault.git_dir.parent / "fresh.git")
    result = import_folder(fresh, busy_repo)
    assert result.objects_copied and result.objects_checked
    assert len(checks) == 1


def test_a_loose_object_too_large_to_hold_is_copied_unread_and_said_to_be(
    vault, busy_repo, monkeypatch
):
    monkeypatch.setattr(importer, "_LOOSE_READ_UP_TO", 0)
    result = import_folder(vault, busy_repo)
    assert result.objects_copied and not result.objects_checked
    files, _ = base_entries(vault, result.base_tree)
    assert files["README.md"][1] == (busy_repo / "README.md").read_bytes()


def test_a_repository_of_many_loose_objects_is_fetched_not_copied(vault, busy_repo, monkeypatch):
    """Loose objects are hashed one by one as they are copied: past a number of them, git's
    fetch packs them faster, and the import takes that way."""
    monkeypatch.setattr(importer, "_LOOSE_COPIED_AT_MOST", 2)
    result = import_folder(vault, busy_repo)
    assert not result.objects_copied
    files, _ = base_entries(vault, result.base_tree)
    assert files["README.md"][1] == (busy_repo / "README.md").read_bytes()


def test_the_quarantine_of_an_import_under_way_in_another_process_is_left_alone(vault, busy_repo):
    """Imports below the folder lock (several processes into one vault) each keep their own
    quarantine: only one whose process is gone is cleared."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        objects = vault.objects.objects_dir
        other = objects / f"{importer.INCOMING_PREFIX}{sleeper.pid}-0123456789ab"
        other.mkdir()
        import_folder(vault, busy_repo)
        assert other.is_dir()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_file_that_fails_to_read_refuses_the_import_in_one_line_naming_it(
    vault, tmp_path, monkeypatch, storing
):
    src = tmp_path / "src"
    for i in range(200):  # loose by default; in a pack where the fixture says so
        write(src / f"f{i:03d}.txt", f"file {i}\n")
    real_read, real_loose = packs._read, packs._loose
    failing = str(src / "f007.txt")
    eio = OSError(5, "Input/output error")
    # However the files are stored (loose, or read for a pack), reading this one fails.
    monkeypatch.setattr(packs, "_read", lambda p, st: eio if p == failing else real_read(p, st))
    monkeypatch.setattr(
        packs, "_loose", lambda o, p, st: eio if p == failing else real_loose(o, p, st)
    )
    with pytest.raises(InputError) as caught:
        import_folder(vault, src)
    assert str(caught.value) == f"cannot import {src}: f007.txt cannot be read: Input/output error"


def test_an_odd_file_among_the_vaults_objects_leaves_the_import_to_git_s_fetch(vault, busy_repo):
    """A two-letter file among the fan-out folders: the vault is not taken for empty, and
    the import fetches as it always did."""
    (vault.objects.objects_dir / "zz").write_bytes(b"not a folder")
    result = import_folder(vault, busy_repo)
    assert not result.objects_copied
    files, _ = base_entries(vault, result.base_tree)
    assert files["README.md"][1] == (busy_repo / "README.md").read_bytes()
