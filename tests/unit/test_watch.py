"""The revision recorder against real inotify, a real watchdog observer and real git objects.

"The last revision equals the disk" is checked against git itself: the folder is copied into a
scratch repository and `git add -A` decides what the files, modes and blob ids are; empty folders
(which git drops) are compared separately.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import core.watch as watch
from core.errors import NotFound
from core.vault import Vault
from core.vault.ignore import IgnoreRules
from core.vault.objects import EMPTY_TREE, run_git
from core.vault.tree_index import FileRecord, TreeIndex, stat_key
from core.watch import Recorder

pytestmark = [
    pytest.mark.timeout(120),
    # watchdog's own notice when `mkdir -p a/b` makes it watch b twice (its walk, then b's event).
    pytest.mark.filterwarnings("ignore:Callback with id .* already exists:RuntimeWarning"),
]

WS = "ws-test"
IDLE = 20.0  # seconds: every wait is bounded


# -- helpers -------------------------------------------------------------------------------------


class Workspace:
    """A vault, a workspace folder with a base revision, and the recorders started on it."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = tmp / "ws"
        self.root.mkdir()
        self.vault = Vault.open_or_create(tmp / "v.git")
        self.revisions: list = []
        self.problems: list[str] = []
        self.recorders: list[Recorder] = []
        self._copies = 0

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def base(self) -> str:
        index = TreeIndex()
        result = index.scan(self.vault.objects, self.root, IgnoreRules(self.root))
        return self.vault.commit_revision(WS, result.tree, None, trigger="base")

    def recorder(self, **kwargs) -> Recorder:
        kwargs.setdefault("on_revision", self.revisions.append)
        kwargs.setdefault("on_problem", self.problems.append)
        kwargs.setdefault("quiet_period", 0.1)
        kwargs.setdefault("max_interval", 1.0)
        rec = Recorder(self.vault, WS, self.root, **kwargs)
        self.recorders.append(rec)
        return rec

    def close(self) -> None:
        for rec in self.recorders:
            try:
                rec.stop()
            except Exception:
                pass
        self.vault.close()

    # What git says the folder holds, and what the vault says a revision holds.

    def disk_files(self) -> set[tuple[str, str, str]]:
        self._copies += 1
        copy = self.tmp / f"copy{self._copies}"
        shutil.copytree(self.root, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        run_git(["init", "-q"], cwd=copy)
        run_git(["add", "-A"], cwd=copy)
        out = run_git(["ls-files", "-s", "-z"], cwd=copy).stdout.decode()
        entries = set()
        for item in filter(None, out.split("\0")):
            meta, path = item.split("\t", 1)
            mode, sha, _stage = meta.split()
            entries.add((path, mode, sha))
        shutil.rmtree(copy)
        return entries

    def disk_empty_dirs(self) -> set[str]:
        out = set()
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if d != ".git"]
            if folder != str(self.root) and not dirs and not files:
                out.add(os.path.relpath(folder, self.root))
        return out

    def ls_tree(self, treeish: str, *, trees: bool = False) -> set[tuple[str, str, str]]:
        args = ["--git-dir", str(self.vault.git_dir), "ls-tree", "-r", "-z"] + (
            ["-t"] if trees else []
        )
        out = run_git(args + [treeish]).stdout.decode()
        entries = set()
        for item in filter(None, out.split("\0")):
            meta, path = item.split("\t", 1)
            mode, kind, sha = meta.split()
            if trees or kind != "tree":
                entries.add((path, mode, sha))
        return entries

    def empty_dirs_in(self, treeish: str) -> set[str]:
        return {
            path
            for path, mode, sha in self.ls_tree(treeish, trees=True)
            if mode == "040000" and sha == EMPTY_TREE
        }

    def assert_head_is_disk(self) -> None:
        head = self.vault.revision_head(WS)
        assert head is not None
        assert self.ls_tree(head) == self.disk_files()
        assert self.empty_dirs_in(head) == self.disk_empty_dirs()

    def loose_objects(self) -> set[str]:
        objects = self.vault.git_dir / "objects"
        return {
            d.name + f.name
            for d in objects.iterdir()
            if len(d.name) == 2
            for f in d.iterdir()
            if not f.name.startswith("tmp_")
        }

    def chain(self):
        return self.vault.revision_chain(WS)


@pytest.fixture
def ws(tmp_path):
    w = Workspace(tmp_path)
    yield w
    w.close()


def bash(script: str, cwd: Path) -> None:
    subprocess.run(["bash", "-c", script], cwd=cwd, check=True, timeout=60)


def wait_for(predicate, timeout: float = IDLE) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def age(root: Path, seconds: float = 30.0) -> None:
    """Backdate every file so that its cached hash is not 'racy' and may be reused."""
    past = time.time() - seconds
    for folder, _dirs, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(folder, name), (past, past), follow_symlinks=False)


# -- tests ---------------------------------------------------------------------------------------


def test_a_shell_loop_of_rapid_writes_is_recorded_without_loss(ws):
    for n in range(50):
        ws.write(f"f{n}.txt", f"file {n}\n")
    base = ws.base()
    rec = ws.recorder(run_id=lambda: "run-42")
    assert rec.start() is None  # nothing changed while nobody watched

    bash(
        """
        set -e
        for i in $(seq 0 199); do echo "write $i" >> "f$((i % 50)).txt"; done
        rm f3.txt
        mv f4.txt renamed.txt
        chmod +x f5.txt
        ln -s f6.txt link-to-f6
    """,
        ws.root,
    )

    assert rec.wait_idle(IDLE)
    ws.assert_head_is_disk()
    files = {path: mode for path, mode, _ in ws.ls_tree(rec.head)}
    assert "f3.txt" not in files and "f4.txt" not in files and files["renamed.txt"] == "100644"
    assert files["f5.txt"] == "100755" and files["link-to-f6"] == "120000"
    chain = ws.chain()
    assert chain[0].commit.sha == base and len(chain) >= 2
    assert {(r.trigger, r.run_id) for r in chain[1:]} == {("watch", "run-42")}
    assert [r.commit for r in ws.revisions] == [r.commit.sha for r in chain[1:]]
    assert ws.problems == []


def test_an_inotify_queue_overflow_falls_back_to_a_full_capture(ws):
    knob = Path("/proc/sys/fs/inotify/max_queued_events")
    try:
        knob.write_text(knob.read_text())
    except OSError as exc:
        pytest.skip(f"{knob} is not writable here ({exc.strerror}); cannot force an overflow")
    # Few folders: on an overflow watchdog drops and re-adds every watch, and each dropped watch
    # queues an event; with more folders than queue slots that would overflow again, forever.
    for n in range(4):
        ws.write(f"d{n}/seed.txt", "seed\n")
    ws.base()
    rec = ws.recorder()
    # The limit is read when the observer's inotify instance is created, inside start(). The
    # knob is machine-wide: hold a lock so that two test runs never save each other's value.
    with open("/tmp/cairn-test-inotify-knob.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = knob.read_text()
        knob.write_text("16\n")
        try:
            rec.start()
        finally:
            knob.write_text(saved)

    bash(
        """
        set -e
        for i in $(seq 0 1999); do echo "new $i" > "d$((i % 4))/n$i.txt"; done
        for i in $(seq 0 499); do echo "edit $i" >> "d$((i % 4))/n$i.txt"; done
    """,
        ws.root,
    )

    assert wait_for(lambda: rec.stats["overflows"] >= 1, 10)
    assert rec.wait_idle(IDLE)
    assert rec.stats["full_captures"] >= 2  # the catch-up, then at least one for the overflow
    assert any("overflow" in p for p in ws.problems)
    ws.assert_head_is_disk()
    assert len(ws.ls_tree(rec.head)) == 2004


def test_deleting_dot_git_or_resetting_never_touches_recorded_revisions(ws):
    ws.write("src/app.py", "print('v1')\n")
    ws.write("README", "readme\n")
    run_git(["init", "-q"], cwd=ws.root)
    run_git(["add", "-A"], cwd=ws.root)
    run_git(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one"], cwd=ws.root)
    ws.base()
    rec = ws.recorder()
    rec.start()

    for n in range(3):
        ws.write("src/app.py", f"print('edit {n}')\n")
        ws.write(f"notes{n}.txt", "scratch\n")
        assert rec.wait_idle(IDLE)

    def vault_picture():
        return [
            (r.commit.sha, r.commit.tree, frozenset(ws.ls_tree(r.commit.sha))) for r in ws.chain()
        ]

    before = vault_picture()
    assert len(before) >= 4

    run_git(["reset", "-q", "--hard"], cwd=ws.root)  # undoes the edit to app.py
    assert rec.wait_idle(IDLE)
    ws.assert_head_is_disk()
    after_reset = vault_picture()
    assert after_reset[: len(before)] == before and len(after_reset) == len(before) + 1

    head = rec.head
    shutil.rmtree(ws.root / ".git")
    assert rec.wait_idle(IDLE)
    assert rec.head == head  # .git is not part of the workspace: nothing to record
    assert vault_picture() == after_reset
    for sha, _tree, entries in after_reset:
        assert not any(path == ".git" or path.startswith(".git/") for path, _, _ in entries)
        assert not any(path.startswith(".git") for path, _, _ in ws.ls_tree(sha, trees=True))
    run_git(["--git-dir", str(ws.vault.git_dir), "fsck", "--strict", "--no-dangling"])


def test_ignored_files_stay_out_until_the_gitignore_lets_them_in(ws):
    ws.write(".gitignore", "*.log\nbuild/\n")
    ws.write("keep.txt", "keep\n")
    ws.base()
    rec = ws.recorder()
    rec.start()
    fulls = rec.stats["full_captures"]

    ws.write("debug.log", "noise\n")
    ws.write("build/out.o", "object\n")
    ws.write("src/main.c", "int main;\n")
    assert rec.wait_idle(IDLE)
    paths = {p for p, _, _ in ws.ls_tree(rec.head, trees=True)}
    assert "src/main.c" in paths
    assert not any(p.endswith(".log") or p.startswith("build") for p in paths)

    ws.write(".gitignore", "build/\n")
    assert rec.wait_idle(IDLE)
    assert rec.stats["full_captures"] > fulls
    paths = {p for p, _, _ in ws.ls_tree(rec.head, trees=True)}
    assert "debug.log" in paths and not any(p.startswith("build") for p in paths)
    ws.assert_head_is_disk()


def test_folders_appear_disappear_and_swap_with_files(ws):
    ws.write("full/a.txt", "a\n")
    ws.write("full/deep/b.txt", "b\n")
    ws.write("was_file", "a file\n")
    ws.write("was_dir/c.txt", "c\n")
    ws.base()
    rec = ws.recorder()
    rec.start()

    (ws.root / "empty").mkdir()
    (ws.root / "empty2" / "nested").mkdir(parents=True)
    assert rec.wait_idle(IDLE)
    assert ws.empty_dirs_in(rec.head) == {"empty", "empty2/nested"}
    ws.assert_head_is_disk()

    shutil.rmtree(ws.root / "full")
    assert rec.wait_idle(IDLE)
    assert not any(p.startswith("full") for p, _, _ in ws.ls_tree(rec.head, trees=True))
    ws.assert_head_is_disk()

    (ws.root / "was_file").unlink()
    ws.write("was_file/inside.txt", "now a folder\n")
    shutil.rmtree(ws.root / "was_dir")
    ws.write("was_dir", "now a file\n")
    assert rec.wait_idle(IDLE)
    files = {p: m for p, m, _ in ws.ls_tree(rec.head)}
    assert files["was_file/inside.txt"] == "100644" and files["was_dir"] == "100644"
    assert "was_dir/c.txt" not in files
    ws.assert_head_is_disk()


def test_catch_up_after_a_restart_rehashes_only_what_changed(ws, monkeypatch):
    for n in range(40):
        ws.write(f"d{n % 4}/f{n}.txt", f"content {n}\n")
    age(ws.root)
    ws.base()
    cache = ws.tmp / "cache" / "ws.stat"

    hashed: list[str] = []
    real = ws.vault.objects.write_blob_from_path

    def counting(path, st):
        hashed.append(os.fspath(path))
        return real(path, st)

    monkeypatch.setattr(ws.vault.objects, "write_blob_from_path", counting)

    rec = ws.recorder(stat_cache=cache)
    assert rec.start() is None
    assert len(hashed) == 40  # no cache yet: everything is hashed once
    rec.stop()
    assert cache.exists()

    ws.write("d0/f0.txt", "edited while nobody watched\n")
    ws.write("d1/f1.txt", "edited too\n")
    (ws.root / "d2" / "f2.txt").unlink()
    ws.write("d3/new.txt", "new\n")
    hashed.clear()
    rec2 = ws.recorder(stat_cache=cache)
    captured = rec2.start()
    assert rec2.stats["stat_cache_used"]
    assert captured is not None and captured.full and captured.trigger == "watch"
    assert captured.files_changed == 4
    assert sorted(os.path.relpath(p, ws.root) for p in hashed) == [
        "d0/f0.txt",
        "d1/f1.txt",
        "d3/new.txt",
    ]
    ws.assert_head_is_disk()
    before = ws.ls_tree(captured.commit)
    changed = {p for p, _, _ in before ^ ws.ls_tree(captured.parent)}
    assert changed == {"d0/f0.txt", "d1/f1.txt", "d2/f2.txt", "d3/new.txt"}
    rec2.stop()

    # A damaged cache is ignored: everything is hashed again and the revision is still right.
    data = bytearray(cache.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cache.write_bytes(bytes(data))
    ws.write("d0/f4.txt", "after the damage\n")
    hashed.clear()
    rec3 = ws.recorder(stat_cache=cache)
    captured = rec3.start()
    assert not rec3.stats["stat_cache_used"]
    assert captured is not None and captured.files_changed == 1
    assert len(hashed) == 40
    ws.assert_head_is_disk()
    rec3.stop()


def test_a_stat_cache_that_lies_about_the_head_is_not_trusted(ws):
    ws.write("a.txt", "a\n")
    ws.write("b.txt", "b\n")
    age(ws.root)
    head = ws.base()
    cache = ws.tmp / "ws.stat"
    # Well-formed and checksummed, for the right head, but one blob id is wrong.
    forged = TreeIndex()
    for name in ("a.txt", "b.txt"):
        st = os.lstat(ws.root / name)
        sha = ws.vault.objects.write_blob_from_path(ws.root / name, st)
        forged.set_file(
            name,
            FileRecord("100644", sha if name == "a.txt" else "0" * 40, stat_key(st), time.time()),
        )
    cache.write_bytes(watch._encode_stat_cache(WS, head, forged))

    rec = ws.recorder(stat_cache=cache)
    assert rec.start() is None  # the disk still equals the base
    assert not rec.stats["stat_cache_used"]
    assert rec.head == head


def test_an_incremental_capture_costs_the_change_not_the_tree(ws, monkeypatch):
    for d in range(40):
        for n in range(50):
            ws.write(f"d{d:02}/sub/f{n:02}.txt", f"{d} {n}\n")
    ws.base()
    rec = ws.recorder()
    rec.start()
    assert rec.wait_idle(IDLE)
    before = ws.loose_objects()

    scans, spawns = [], []
    real_scandir, real_popen = os.scandir, subprocess.Popen.__init__

    def counting_scandir(*args, **kwargs):
        scans.append(args)
        return real_scandir(*args, **kwargs)

    def counting_popen(self, *args, **kwargs):
        spawns.append(args)
        return real_popen(self, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", counting_scandir)
    monkeypatch.setattr(subprocess.Popen, "__init__", counting_popen)
    ws.write("d07/sub/f13.txt", "edited\n")
    assert rec.wait_idle(IDLE)
    monkeypatch.undo()

    added = ws.loose_objects() - before
    kinds = sorted(
        run_git(["--git-dir", str(ws.vault.git_dir), "cat-file", "-t", sha]).stdout.decode().strip()
        for sha in added
    )
    # the new blob, the trees d07/sub, d07 and the root, and one commit
    assert kinds == ["blob", "commit", "tree", "tree", "tree"]
    assert rec.stats["last_files_changed"] == 1
    assert scans == [] and spawns == []  # no folder walked, no process started
    blob = run_git(["hash-object", str(ws.root / "d07/sub/f13.txt")]).stdout.decode().strip()
    assert ("d07/sub/f13.txt", "100644", blob) in ws.ls_tree(rec.head)
    assert len(ws.ls_tree(rec.head)) == 2000


def test_deleting_the_workspace_folder_reports_a_problem_and_commits_nothing(ws):
    ws.write("a/b.txt", "b\n")
    ws.write("c.txt", "c\n")
    base = ws.base()
    rec = ws.recorder()
    rec.start()

    shutil.rmtree(ws.root)
    assert wait_for(lambda: any("deleted" in p for p in ws.problems))
    assert rec.mode == "lost"
    time.sleep(0.3)  # longer than the quiet period: a late capture would show up now
    assert ws.vault.revision_head(WS) == base
    assert all(r.tree != EMPTY_TREE for r in ws.revisions)
    with pytest.raises(NotFound):
        rec.capture("manual")
    rec.stop()
    assert ws.vault.revision_head(WS) == base


def test_without_a_watcher_it_records_by_periodic_full_captures(ws, monkeypatch):
    ws.write("a.txt", "a\n")
    ws.base()

    def no_inotify(*_args, **_kwargs):
        raise OSError(28, "inotify watch limit reached")

    monkeypatch.setattr(watch, "_make_observer", no_inotify)
    rec = ws.recorder(max_interval=0.5)
    rec.start()
    assert rec.mode == "scanning"
    assert any("watch limit" in p for p in ws.problems)
    ws.write("b.txt", "b\n")
    assert rec.wait_idle(IDLE)
    ws.assert_head_is_disk()
    assert ws.revisions and ws.revisions[-1].full and ws.revisions[-1].trigger == "watch"


def test_constant_writes_are_captured_at_most_max_interval_apart(ws):
    ws.write("log.txt", "")
    ws.base()
    rec = ws.recorder(quiet_period=0.3, max_interval=0.5)
    rec.start()
    deadline = time.monotonic() + 2.0
    n = 0
    with open(ws.root / "log.txt", "a") as f:
        while time.monotonic() < deadline:  # never quiet for 0.3 s
            f.write(f"line {n}\n")
            f.flush()
            n += 1
            time.sleep(0.02)
        during = len(ws.revisions)
    assert during >= 2
    assert rec.wait_idle(IDLE)
    ws.assert_head_is_disk()


def test_a_checkpoint_capture_from_another_thread_is_serialised_with_watch_captures(ws):
    ws.write("a.txt", "a\n")
    ws.base()
    rec = ws.recorder(quiet_period=0.05, max_interval=0.2)
    rec.start()
    results, errors = [], []
    stop = threading.Event()

    def writer():
        n = 0
        while not stop.is_set():
            ws.write(f"w{n % 7}.txt", f"{n}\n")
            n += 1
            time.sleep(0.005)

    def checkpointer():
        try:
            for _ in range(5):
                results.append(rec.capture("checkpoint", full=True, run_id="run-9"))
                time.sleep(0.05)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=checkpointer)]
    for t in threads:
        t.start()
    threads[1].join(30)
    stop.set()
    threads[0].join(30)
    assert not errors
    assert rec.wait_idle(IDLE)
    ws.assert_head_is_disk()
    chain = ws.chain()
    for older, newer in zip(chain, chain[1:]):
        assert newer.commit.parents == (older.commit.sha,)
    checkpoints = [r for r in chain if r.trigger == "checkpoint"]
    assert checkpoints and all(r.run_id == "run-9" for r in checkpoints)
    assert {c.commit for c in results if c} <= {r.commit.sha for r in checkpoints}
    assert rec.capture("manual") is None  # nothing changed since
