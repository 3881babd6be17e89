"""Imports of one folder at the same time wait their turn: eight parallel `cairnctl new` of one
repository give eight tasks, each with a workspace byte-exact to the folder, and the person's
repository (its index too) is byte-identical afterwards. A wait has a bound and a clear message."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.errors import Conflict
from core.locks import FileLock, held, lock_path
from tests.support import REPO, as_json, cairnctl, cairnctl_argv, cairnctl_env, git

PARALLEL = 8
IGNORED = {"debug.log", "build", "build/out.bin"}


def snapshot(root: Path, *, skip: set[str] = frozenset()) -> dict[str, tuple[int, bytes]]:
    """Every path below `root`: its mode (type and permission bits) and its bytes (a link's
    target; nothing for a folder)."""
    out: dict[str, tuple[int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel in skip or rel.split("/")[0] in skip:
                continue
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                data = os.fsencode(os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                data = path.read_bytes()
            else:
                data = b""
            out[rel] = (st.st_mode, data)
    return out


@pytest.fixture
def busy_repo(tmp_path: Path) -> Path:
    """A repository as it is mid-work: commits, a staged change, an unstaged one, untracked files
    and folders, an executable, a link, an empty folder, and ignored files."""
    repo = tmp_path / "busy repo"
    repo.mkdir()
    # Git keeps 644 and 755 only; the folder is made with the modes a workspace gets back.
    umask = os.umask(0o022)
    try:
        _fill(repo)
    finally:
        os.umask(umask)
    return repo


def _fill(repo: Path) -> None:
    git(repo, "init", "-q", "-b", "main")
    files = {
        "README.md": b"# busy\n",
        "src/app.py": b"print('v1')\n",
        "src/util/strings.py": b"def up(s):\n    return s.upper()\n",
        "data/blob.bin": bytes(range(256)) * 64,
        ".gitignore": b"*.log\nbuild/\n",
    }
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    (repo / "run.sh").write_text("#!/bin/sh\necho run\n")
    (repo / "run.sh").chmod(0o755)
    os.symlink("src/app.py", repo / "app-link")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=T", "-c", "user.email=t@localhost", "commit", "-q", "-m", "one")
    (repo / "src/app.py").write_text("print('v2, staged')\n")
    git(repo, "add", "src/app.py")
    (repo / "src/app.py").write_text("print('v3, on disk only')\n")  # unstaged on top
    (repo / "README.md").write_text("# busy\nedited, not staged\n")
    (repo / "notes with spaces.txt").write_text("untracked\n")
    (repo / "new-dir/deeper").mkdir(parents=True)
    (repo / "new-dir/deeper/todo.txt").write_text("untracked, nested\n")
    (repo / "empty-dir").mkdir()
    (repo / "tool").write_bytes(b"\x7fELF not really\n")
    (repo / "tool").chmod(0o755)
    (repo / "debug.log").write_text("ignored\n")
    (repo / "build").mkdir()
    (repo / "build/out.bin").write_bytes(b"ignored too")
    git(repo, "rm", "-q", "--cached", "data/blob.bin")  # staged deletion, still on disk


def test_parallel_imports_of_one_repository_each_get_a_task_and_an_exact_workspace(
    tmp_path, busy_repo
):
    data = tmp_path / "data"
    cairnctl(data, "tasks")  # the data folder exists before the race starts
    before = snapshot(busy_repo)
    index_before = (busy_repo / ".git" / "index").read_bytes()
    expected = snapshot(busy_repo, skip={".git", *IGNORED})
    assert "notes with spaces.txt" in expected and "empty-dir" in expected

    go = threading.Barrier(PARALLEL)
    results: list[subprocess.CompletedProcess | None] = [None] * PARALLEL

    def one(i: int) -> None:
        go.wait()
        results[i] = subprocess.run(
            cairnctl_argv(data, "new", str(busy_repo), "--title", f"copy {i}", "--json"),
            capture_output=True,
            text=True,
            env=cairnctl_env(),
            timeout=300,
        )

    threads = [threading.Thread(target=one, args=(i,)) for i in range(PARALLEL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    done = [proc for proc in results if proc is not None]
    assert len(done) == PARALLEL
    for proc in done:
        assert proc.returncode == 0, proc.stderr
    made = [as_json(proc) for proc in done]
    assert len({m["task_id"] for m in made}) == PARALLEL
    assert len({m["workspace_root"] for m in made}) == PARALLEL
    listed = as_json(cairnctl(data, "tasks", "--json"))["tasks"]
    assert {t["task_id"] for t in listed} == {m["task_id"] for m in made}
    for m in made:
        root = Path(m["workspace_root"])
        assert snapshot(root, skip={".git"}) == expected, f"workspace of {m['task_id']}"

    assert (busy_repo / ".git" / "index").read_bytes() == index_before
    assert snapshot(busy_repo) == before
    assert git(busy_repo, "status", "--porcelain") != ""  # the changes are still the user's


def test_an_import_waits_for_the_one_before_it_and_then_goes_ahead(tmp_path):
    data = tmp_path / "data"
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    cairnctl(data, "tasks")
    lock = FileLock(lock_path(data.resolve() / "locks", "import", str(src.resolve())))
    assert lock.try_acquire()  # as an import running in another process holds it
    try:
        waiting = subprocess.Popen(
            cairnctl_argv(data, "new", str(src), "--json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cairnctl_env(),
        )
        time.sleep(2)
        assert waiting.poll() is None, waiting.communicate()
    finally:
        lock.release()
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert Path(as_json(subprocess.CompletedProcess([], 0, out, err))["workspace_root"]).is_dir()


def test_a_wait_that_runs_out_names_what_and_who_it_waited_for(tmp_path):
    locks = tmp_path / "locks"
    holder = FileLock(lock_path(locks, "import", "/home/me/project"))
    assert holder.try_acquire()
    try:
        t0 = time.monotonic()
        with (
            pytest.raises(Conflict) as refused,
            held(locks, "import", "/home/me/project", "/home/me/project is busy", wait=0.3),
        ):
            pass
        assert 0.3 <= time.monotonic() - t0 < 5
        message = str(refused.value)
        assert message.startswith("/home/me/project is busy")
        assert f"process {os.getpid()}" in message and "0.3 s" in message
        # Without a wait, a taken lock is refused at once, as before.
        with (
            pytest.raises(Conflict, match=f"process {os.getpid()}"),
            held(locks, "import", "/home/me/project", "busy"),
        ):
            pass
    finally:
        holder.release()
    with held(locks, "import", "/home/me/project", "busy", wait=0.3) as lock:
        assert lock.holder_pid() == os.getpid()


def test_waiters_take_the_lock_one_after_another(tmp_path):
    locks = tmp_path / "locks"
    inside = 0
    most = 0
    entered: list[int] = []
    guard = threading.Lock()

    def one(i: int) -> None:
        nonlocal inside, most
        with held(locks, "import", "/x", "busy", wait=30):
            with guard:
                inside += 1
                most = max(most, inside)
                entered.append(i)
            time.sleep(0.05)
            with guard:
                inside -= 1

    threads = [threading.Thread(target=one, args=(i,)) for i in range(PARALLEL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1 and sorted(entered) == list(range(PARALLEL))


IMPORT_LOOP = """
import sys
from pathlib import Path
from core.vault import Vault, base_ref
from core.vault.importer import import_folder

vault_dir, folder, who = sys.argv[1:4]
vault = Vault.open_or_create(Path(vault_dir))
for i in range(4):
    result = import_folder(vault, Path(folder))
    vault.objects.update_ref(base_ref(f"ws_{who}_{i}"), result.base_commit)
    print(result.base_tree)
vault.close()
"""


def test_imports_into_one_vault_from_several_processes_at_once_are_all_sound(tmp_path, busy_repo):
    """Below the folder lock: the vault's objects and refs stand concurrent writers."""
    vault_dir = tmp_path / "vault" / "one.git"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", IMPORT_LOOP, str(vault_dir), str(busy_repo), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cairnctl_env(),
            cwd=REPO,
        )
        for n in range(6)
    ]
    trees = set()
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        trees.update(out.split())
    assert len(trees) == 1  # the same folder, the same tree, every time
    refs = git(vault_dir, "for-each-ref", "--format=%(refname)", "refs/cairn/").split()
    assert len(refs) == 6 * 4 and all(r.endswith("/base") for r in refs)
    fsck = subprocess.run(
        ["git", "--git-dir", str(vault_dir), "fsck", "--full", "--strict", "--no-dangling"],
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0, fsck.stderr
    assert not list(vault_dir.rglob("*.lock")) and not list(vault_dir.rglob("tmp_obj_*"))


REF_LOOP = """
import sys
from pathlib import Path
from core.vault import Vault

vault = Vault(Path(sys.argv[1]))
sha = vault.objects.write_blob(sys.argv[2].encode())
for _ in range(200):
    vault.objects.update_ref("refs/cairn/shared", sha)
"""


def test_writers_of_one_ref_take_turns_instead_of_failing(tmp_path):
    from core.vault import Vault

    vault_dir = tmp_path / "one.git"
    Vault.open_or_create(vault_dir).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", REF_LOOP, str(vault_dir), f"writer {n}"],
            stderr=subprocess.PIPE,
            text=True,
            env=cairnctl_env(),
            cwd=REPO,
        )
        for n in range(PARALLEL)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert not list(vault_dir.rglob("*.lock"))
    assert Vault(vault_dir).objects.read_ref("refs/cairn/shared") is not None
