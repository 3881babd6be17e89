"""`cairnctl` over the workspace engine, as a script would use it: import, record, diff, snapshot,
restore; and every kind of bad input refused with exit 2, one line, and nothing half-created."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.locks import held
from tests.support import REPO, as_json, cairnctl, cairnctl_env, git


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "me@example.com")
    git(path, "config", "user.name", "Me")
    (path / "README.md").write_text("# demo\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('hello')\n")
    (path / ".gitignore").write_text("*.log\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "initial")
    (path / "src" / "app.py").write_text("print('hello, world')\n")  # unstaged edit
    (path / "notes.txt").write_text("untracked\n")
    (path / "debug.log").write_text("ignored\n")
    return path


def tree_listing(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        rel_dir = os.path.relpath(dirpath, root)
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", p.stat().st_mode & 0o111 != 0, p.read_bytes())
    return out


def assert_nothing_created(data_dir: Path) -> None:
    if not data_dir.exists():
        return
    db = data_dir / "cairn.db"
    if db.exists():
        conn = sqlite3.connect(db)
        for table in ("sources", "tasks", "workspaces", "revisions"):
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0, table
        conn.close()
    for folder in ("workspaces", "vault"):
        p = data_dir / folder
        assert not p.exists() or not any(p.iterdir()), f"{folder} is not empty: {list(p.iterdir())}"


def test_import_record_diff_snapshot_and_restore(tmp_path):
    data = tmp_path / "data"
    repo = make_repo(tmp_path / "repo")

    made = as_json(cairnctl(data, "new", str(repo), "--title", "Fix greeting", "--json"))
    assert set(made) >= {"task_id", "workspace_id", "workspace_root", "base_revision"}
    ws = Path(made["workspace_root"])
    assert (ws / "src" / "app.py").read_text() == "print('hello, world')\n"
    assert (ws / "notes.txt").exists() and not (ws / "debug.log").exists()
    # The workspace is a git repository of its own, on a branch named after the task.
    assert git(ws, "rev-parse", "--abbrev-ref", "HEAD").strip().startswith("cairn/fix-greeting-")
    assert "src/app.py" in git(ws, "status", "--porcelain")

    task = made["task_id"]
    shown = as_json(cairnctl(data, "show", task, "--json"))
    assert shown["workspace_root"] == str(ws) and shown["state"] == "prepared"
    assert [r["trigger"] for r in shown["revisions"]] == ["base"]

    (ws / "src" / "app.py").write_text("print('hello, cairn')\n")
    (ws / "new.txt").write_text("new file\n")
    cap = as_json(cairnctl(data, "capture", task, "--json"))
    assert cap["changed"] is True
    again = as_json(cairnctl(data, "capture", task, "--json"))
    assert again["changed"] is False and again["revision"] == cap["revision"]

    revs = as_json(cairnctl(data, "revisions", task, "--json"))["revisions"]
    assert [r["id"] for r in revs] == [made["base_revision"], cap["revision"]]
    assert all(set(r) >= {"id", "trigger", "created_at", "files_changed"} for r in revs)
    assert revs[1]["files_changed"] == 2

    diff = as_json(cairnctl(data, "diff", task, "--json"))
    paths = {f.get("new_path") or f.get("old_path"): f["status"] for f in diff["files"]}
    assert paths == {"src/app.py": "modified", "new.txt": "added"}
    text = cairnctl(data, "diff", task).stdout
    assert "+print('hello, cairn')" in text and "-print('hello, world')" in text

    snap = as_json(cairnctl(data, "snapshot", task, "--json"))
    assert snap["revision"] == cap["revision"] and snap["snapshot_id"]

    before = tree_listing(ws)
    shutil.rmtree(ws)
    shown = as_json(cairnctl(data, "show", task, "--json"))
    assert shown["workspace_present"] is False
    restored = tmp_path / "restored"
    out = as_json(cairnctl(data, "materialize", snap["snapshot_id"], str(restored), "--json"))
    assert out["root"] == str(restored) and len(out["tree"]) == 40
    assert tree_listing(restored) == before

    # Materializing onto an existing folder is refused without touching it.
    proc = cairnctl(data, "materialize", snap["snapshot_id"], str(restored), check=False)
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_watch_records_until_interrupted(tmp_path):
    data = tmp_path / "data"
    src = tmp_path / "plain"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    made = as_json(cairnctl(data, "new", str(src), "--json"))
    ws = Path(made["workspace_root"])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core.cli",
            "--data-dir",
            str(data),
            "watch",
            made["task_id"],
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        deadline = time.time() + 20
        # Wait until the watcher is ready (it holds the workspace's watch lock).
        time.sleep(1.0)
        (ws / "a.txt").write_text("changed\n")
        (ws / "b.txt").write_text("b\n")
        while time.time() < deadline:
            revs = as_json(cairnctl(data, "revisions", made["task_id"], "--json"))["revisions"]
            if len(revs) >= 2 and revs[-1]["trigger"] == "watch":
                break
            time.sleep(0.3)
        else:
            raise AssertionError("no watch revision appeared")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["revisions"] and summary["revisions"][-1]["trigger"] == "watch"
    revs = as_json(cairnctl(data, "revisions", made["task_id"], "--json"))["revisions"]
    latest_tree = git(
        Path(data / "vault" / os.listdir(data / "vault")[0]),
        "ls-tree",
        "-r",
        "--name-only",
        revs[-1]["id"],
    )
    assert set(latest_tree.split()) == {"a.txt", "b.txt"}


def test_nonexistent_path_is_refused(tmp_path):
    data = tmp_path / "data"
    proc = cairnctl(data, "new", str(tmp_path / "nope"), check=False)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "does not exist" in proc.stderr
    assert proc.stdout == ""
    assert_nothing_created(data)


def test_a_file_is_not_a_folder(tmp_path):
    data = tmp_path / "data"
    f = tmp_path / "file.txt"
    f.write_text("x")
    proc = cairnctl(data, "new", str(f), check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "not a folder" in proc.stderr
    assert_nothing_created(data)


@pytest.mark.parametrize("where", ["itself", "inside", "containing"])
def test_the_data_folder_cannot_be_imported(tmp_path, where):
    data = tmp_path / "outer" / "data"
    cairnctl(data, "tasks")  # creates the data folder
    target = {"itself": data, "inside": data / "workspaces", "containing": tmp_path / "outer"}[
        where
    ]
    proc = cairnctl(data, "new", str(target), check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "data folder" in proc.stderr
    assert_nothing_created(data)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv to drop root")
def test_unreadable_files_are_named_and_nothing_is_created(tmp_path):
    base = Path("/tmp") / f"cairn-unreadable-{os.getpid()}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(mode=0o777)
    base.chmod(0o777)
    try:
        src = base / "src"
        src.mkdir()
        (src / "ok.txt").write_text("fine\n")
        (src / "secret.key").write_text("no\n")
        (src / "private").mkdir()
        (src / "private" / "x").write_text("x\n")
        for p in (
            base,
            src,
            src / "ok.txt",
            src / "private",
            src / "private" / "x",
            src / "secret.key",
        ):
            os.chown(p, 65534, 65534)
        (src / "secret.key").chmod(0o000)
        (src / "private").chmod(0o000)
        data = base / "data"
        proc = cairnctl(data, "new", str(src), check=False, user=65534)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert "secret.key" in proc.stderr and "private" in proc.stderr
        assert_nothing_created(data)
    finally:
        for p in base.rglob("*"):
            try:
                p.chmod(0o700)
            except OSError:
                pass
        shutil.rmtree(base, ignore_errors=True)


def test_a_second_import_of_the_same_folder_waits_and_is_refused_when_the_wait_runs_out(tmp_path):
    data = tmp_path / "data"
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    cairnctl(data, "tasks")
    # Hold the import lock the way a running import does (another process holds it here).
    with held(data.resolve() / "locks", "import", str(src.resolve()), "busy"):
        proc = cairnctl(
            data, "new", str(src), check=False, env=cairnctl_env(CAIRN_IMPORT_WAIT_S="1")
        )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "already being imported" in proc.stderr and "waiting" in proc.stderr
    assert_nothing_created(data)
    # Once the first import is done, the folder can be imported again.
    assert as_json(cairnctl(data, "new", str(src), "--json"))["task_id"]


def test_unknown_task_and_snapshot_are_clear_errors(tmp_path):
    data = tmp_path / "data"
    for args in (
        ("show", "t_nope"),
        ("diff", "t_nope"),
        ("materialize", "snap_nope", str(tmp_path / "x")),
    ):
        proc = cairnctl(data, *args, check=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        assert "no task" in proc.stderr or "no snapshot" in proc.stderr
