"""WorkspaceMirror keeps a local folder equal to a "remote" one: the in-sandbox helper runs on the
host against a temporary folder, files are read with tar, as over an exec stream. Scripted
streams drive the rescan path, bad paths and a connection that fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from core.errors import CairnError
from core.sandbox.mirror import (
    HELPER_SCRIPT,
    RemoteUnreadable,
    WorkspaceMirror,
)
from tests.support import LocalSandboxFiles, wait_for
from tests.support import folder_tree as tree


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    remote, local, state = tmp_path / "remote", tmp_path / "local", tmp_path / "state"
    remote.mkdir()
    local.mkdir()
    state.mkdir()
    return remote, local, state


def make_mirror(files, local: Path, state: Path, **kwargs) -> tuple[WorkspaceMirror, list, list]:
    changed: list[list[str]] = []
    problems: list[str] = []
    kwargs.setdefault("remote_root", str(getattr(files, "remote", "/workspace")))
    mirror = WorkspaceMirror(
        files,
        local,
        scan_cache=str(state / "scan-cache"),
        helper=str(HELPER_SCRIPT),
        python=sys.executable,
        quiet_period=0.1,
        max_interval=1.0,
        on_changed=changed.append,
        on_problem=problems.append,
        **kwargs,
    )
    return mirror, changed, problems


@pytest.fixture
def following(places):
    remote, local, state = places
    made: list[WorkspaceMirror] = []

    def start(**kwargs):
        files = LocalSandboxFiles(remote)
        mirror, changed, problems = make_mirror(files, local, state, **kwargs)
        made.append(mirror)
        mirror.start()
        assert mirror.wait_ready(20), problems
        return mirror, files, changed, problems

    yield start
    for m in made:
        m.stop()


def same(remote: Path, local: Path, exclude=frozenset()) -> bool:
    return tree(remote, exclude) == tree(local, exclude)


def wait_same(remote: Path, local: Path, exclude=frozenset()) -> None:
    try:
        wait_for(lambda: same(remote, local, exclude), timeout=15, what="the local copy")
    except AssertionError:
        assert tree(local, exclude) == tree(remote, exclude)
        raise


def age(root: Path, seconds: float = 60.0) -> None:
    t = time.time() - seconds
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.utime(Path(folder, name), (t, t), follow_symlinks=False)


# -- following the helper ------------------------------------------------------------------------


def test_the_first_pass_copies_the_tree_and_removes_what_the_remote_lacks(places, following):
    remote, local, _ = places
    (remote / "src" / "pkg").mkdir(parents=True)
    (remote / "src" / "pkg" / "mod.py").write_text("print('hi')\n")
    (remote / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(remote / "run.sh", 0o755)
    os.symlink("src/pkg", remote / "pkg")
    (remote / "empty").mkdir()
    (local / "stale.txt").write_text("old")
    (local / "stale-dir" / "x").mkdir(parents=True)
    (local / ".git").mkdir()
    (local / ".git" / "HEAD").write_text("mine")
    mirror, files, changed, problems = following(exclude=[".git"])
    assert tree(local, frozenset({".git"})) == tree(remote)
    assert (local / ".git" / "HEAD").read_text() == "mine"  # excluded: never touched
    assert {"stale.txt", "stale-dir", "run.sh", "pkg"} <= {p for c in changed for p in c}
    assert problems == []


def test_files_and_folders_made_changed_renamed_and_deleted_appear_locally(places, following):
    remote, local, _ = places
    mirror, files, changed, problems = following()
    (remote / "a.txt").write_text("one")
    (remote / "d" / "e").mkdir(parents=True)
    (remote / "d" / "e" / "f.txt").write_text("deep")
    wait_same(remote, local)
    (remote / "a.txt").write_text("two, longer")
    os.chmod(remote / "a.txt", 0o755)
    wait_same(remote, local)
    os.rename(remote / "a.txt", remote / "b.txt")
    os.rename(remote / "d", remote / "d2")
    wait_same(remote, local)
    os.symlink("d2/e/f.txt", remote / "ln")
    wait_same(remote, local)
    os.unlink(remote / "b.txt")
    subprocess.run(["rm", "-rf", str(remote / "d2")], check=True)
    wait_same(remote, local)
    assert set(tree(local)) == {"ln"}
    assert problems == []
    assert any("b.txt" in c for c in changed)


def test_a_folder_replaced_by_a_file_and_back(places, following):
    remote, local, _ = places
    (remote / "x").mkdir()
    (remote / "x" / "inner.txt").write_text("in")
    mirror, *_ = following()
    subprocess.run(["rm", "-rf", str(remote / "x")], check=True)
    (remote / "x").write_text("now a file")
    wait_same(remote, local)
    os.unlink(remote / "x")
    (remote / "x").mkdir()
    (remote / "x" / "again.txt").write_text("a folder again")
    wait_same(remote, local)
    # A link where a folder was, and a folder where a link was.
    subprocess.run(["rm", "-rf", str(remote / "x")], check=True)
    os.symlink("/etc", remote / "x")
    wait_same(remote, local)
    os.unlink(remote / "x")
    (remote / "x").mkdir()
    (remote / "x" / "passwd").write_text("not /etc's")
    wait_same(remote, local)
    assert not os.path.islink(local / "x")


def test_a_folder_moved_over_a_removed_one_leaves_nothing_stale(places, following):
    remote, local, _ = places
    (remote / "d").mkdir()
    (remote / "d" / "old.txt").write_text("old")
    (remote / "d" / "keep-name.txt").write_text("old version")
    (remote / "x" / "sub").mkdir(parents=True)
    (remote / "x" / "sub" / "new.txt").write_text("new")
    (remote / "x" / "keep-name.txt").write_text("new version")
    mirror, *_ = following()
    os.rename(remote / "d", remote.parent / "elsewhere")  # moved out: its files are not listed
    os.rename(remote / "x", remote / "d")
    wait_same(remote, local)
    assert sorted(tree(local)) == ["d", "d/keep-name.txt", "d/sub", "d/sub/new.txt"]


def test_odd_file_names_survive_the_round_trip(places, following):
    remote, local, _ = places
    mirror, _, _, problems = following()
    names = [b"caf\xe9.txt", "ünïcode ✓.md".encode(), b"new\nline", b"-starts-with-dash", b" sp "]
    for name in names:
        with open(os.path.join(os.fsencode(remote), name), "wb") as f:
            f.write(name)
    wait_same(remote, local)
    for name in names:
        with open(os.path.join(os.fsencode(local), name), "rb") as f:
            assert f.read() == name
    assert problems == []


def test_excluded_names_are_never_written(places, following):
    remote, local, _ = places
    mirror, *_ = following(exclude=[".git"])
    (remote / ".git").mkdir()
    (remote / ".git" / "config").write_text("[core]\n")
    (remote / "kept.txt").write_text("k")
    wait_for(lambda: (local / "kept.txt").exists(), timeout=15, what="kept.txt")
    mirror.pull([".git/config", "sub/.git/HEAD"])
    mirror.sync()
    assert not (local / ".git").exists()


def test_files_written_locally_keep_their_mode_and_no_temporary_is_left(places, following):
    remote, local, _ = places
    mirror, *_ = following()
    for i in range(20):
        (remote / f"f{i}").write_bytes(os.urandom(1000 * i))
    os.chmod(remote / "f3", 0o755)
    wait_same(remote, local)
    assert oct((local / "f3").stat().st_mode & 0o777) == "0o755"
    assert oct((local / "f4").stat().st_mode & 0o777) == "0o644"
    assert not [p for p in os.listdir(local) if p.endswith(".cairn-tmp")]


def test_stop_ends_the_helper_and_the_thread(places, following):
    mirror, files, *_ = following()
    mirror.stop()
    assert mirror.state == "stopped"
    assert files.streams[0].proc.wait(10) is not None
    assert mirror._thread is not None and not mirror._thread.is_alive()


# -- full passes ---------------------------------------------------------------------------------


def test_a_rescan_pulls_only_what_differs(places):
    remote, local, state = places
    for i in range(50):
        (remote / "many" / f"f{i:02}.txt").parent.mkdir(exist_ok=True)
        (remote / "many" / f"f{i:02}.txt").write_text(f"file {i}\n")
    files = LocalSandboxFiles(remote)
    mirror, changed, problems = make_mirror(files, local, state)
    mirror.sync()
    assert same(remote, local)
    age(remote)
    age(local)
    first = files.pulled
    assert first == 51  # the folder and its 50 files
    (remote / "many" / "f01.txt").write_text("changed\n")
    (remote / "many" / "f02.txt").write_text("changed too, longer\n")
    (remote / "many" / "f03.txt").unlink()
    (remote / "new.txt").write_text("new\n")
    changed.clear()
    mirror.sync()
    assert same(remote, local)
    assert files.pulled - first == 3  # two changed, one new: nothing else is read
    assert sorted(p for c in changed for p in c) == [
        "many/f01.txt",
        "many/f02.txt",
        "many/f03.txt",
        "new.txt",
    ]
    # Nothing changed: nothing read; local files are hashed once more after their racy window
    # (those aged above, those just written), then the mirror trusts what it saw.
    before = files.pulled
    time.sleep(0.2)
    mirror.sync()
    hashed = mirror.stats["hashed_local"]
    mirror.sync()
    assert files.pulled == before
    assert mirror.stats["hashed_local"] == hashed


def test_a_new_mirror_on_an_existing_copy_reads_only_what_differs(places):
    remote, local, state = places
    for i in range(30):
        (remote / f"f{i}").write_text(str(i))
    first = LocalSandboxFiles(remote)
    make_mirror(first, local, state)[0].sync()
    (remote / "f7").write_text("seven")
    again = LocalSandboxFiles(remote)
    mirror, _, _ = make_mirror(again, local, state)
    mirror.sync()
    assert again.read_calls == [["f7"]]
    assert same(remote, local)


class Scripted:
    """Lines scripted per program (watch or scan); files read from a real folder."""

    def __init__(self, remote: Path, watch: list[list[str]], scan: list[list[str]] | None = None):
        self.remote = remote
        self.watch = list(watch)
        self.scan = scan
        self.started: list[list[str]] = []
        self.reader = LocalSandboxFiles(remote)
        self.fail_reads = False

    def lines(self, argv: Sequence[str]):
        self.started.append(list(argv))
        if argv[2] == "scan":
            if self.scan is not None:
                return iter(self.scan.pop(0))
            return self.reader.lines(argv)
        if not self.watch:
            raise ConnectionRefusedError("no route to the sandbox host")
        return _Closable(self.watch.pop(0))

    def read_files(self, paths):
        if self.fail_reads:
            raise BrokenPipeError("the exec stream broke")
        return self.reader.read_files(paths)


class _Closable:
    def __init__(self, lines: list[str]) -> None:
        self._lines = lines

    def __iter__(self):
        return iter(self._lines)

    def close(self) -> None:
        pass


class _Blocking:
    """A scan that never ends until closed (a very large tree, a slow link)."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def __iter__(self):
        yield '{"path": "a", "mode": "40000"}'
        self.closed.wait(30)

    def close(self) -> None:
        self.closed.set()


def test_stop_ends_a_full_pass_in_progress_and_deletes_nothing(places):
    remote, local, state = places
    (local / "mine.txt").write_text("kept")
    blocking = _Blocking()
    files = Scripted(remote, [['{"rescan": "start"}']], scan=[])
    files.lines = lambda argv: blocking if argv[2] == "scan" else _Closable(['{"rescan": "start"}'])
    mirror, changed, problems = make_mirror(files, local, state)
    mirror.start()
    wait_for(lambda: mirror._streams, timeout=10, what="the scan to begin")
    time.sleep(0.1)
    began = time.monotonic()
    mirror.stop()
    assert time.monotonic() - began < 5
    assert blocking.closed.is_set()
    assert mirror._thread is not None and not mirror._thread.is_alive()
    assert (local / "mine.txt").read_text() == "kept"
    assert changed == []


def test_a_last_pass_after_stop_runs_whole(places, following):
    remote, local, _ = places
    mirror, files, changed, problems = following()
    mirror.stop()
    for i in range(300):  # more than one read's worth
        (remote / f"late-{i:03}.txt").write_text(str(i))
    assert len(mirror.sync()) == 300
    assert same(remote, local)


def test_a_rescan_line_runs_a_full_pass(places):
    remote, local, state = places
    (remote / "seen-only-by-a-scan.txt").write_text("x")
    files = Scripted(remote, [['{"rescan": "overflow"}']])
    mirror, changed, problems = make_mirror(files, local, state)
    with pytest.raises(RemoteUnreadable):  # the scripted stream ends: a dropped connection
        mirror.follow()
    assert (local / "seen-only-by-a-scan.txt").read_text() == "x"
    assert mirror.stats["rescans"] == 1
    assert [a[2] for a in files.started] == ["watch", "scan"]


def test_bad_paths_are_refused_and_nothing_is_written_outside(places, tmp_path):
    remote, local, state = places
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, local / "escape")
    (remote / "escape").mkdir()  # the remote has a real folder there
    (remote / "escape" / "planted").write_text("x")
    bad = ["../evil", "/etc/evil", "a/../../evil", "", "./x", "a//b", "escape/planted", "x\0y"]
    files = Scripted(remote, [[json.dumps({"changed": bad})]])
    mirror, changed, problems = make_mirror(files, local, state)
    with pytest.raises(RemoteUnreadable):
        mirror.follow()
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "evil").exists()
    assert len([p for p in problems if p.startswith("refusing the path")]) == 7
    assert any("escape is not a folder in the local copy" in p for p in problems)
    # The refusal asked for a full pass: the link where the remote has a folder is replaced.
    assert (local / "escape").is_dir() and not (local / "escape").is_symlink()
    assert (local / "escape" / "planted").read_text() == "x"
    assert list(outside.iterdir()) == []


def test_an_answer_for_a_path_not_asked_for_is_not_written(places):
    remote, local, state = places

    class Liar(LocalSandboxFiles):
        def read_files(self, paths):
            yield ("../../etc/cron.d/evil", "100644", b"x")
            yield ("other.txt", "100644", b"not asked")
            yield from super().read_files(paths)

    (remote / "asked.txt").write_text("a")
    mirror, *_ = make_mirror(Liar(remote), local, state)
    assert mirror.pull(["asked.txt"]) == ["asked.txt"]
    assert sorted(os.listdir(local)) == ["asked.txt"]


def test_a_scan_cut_short_deletes_nothing(places):
    remote, local, state = places
    (local / "keep.txt").write_text("mine")
    files = Scripted(remote, [], scan=[['{"path": "a", "mode": "40000"}']])
    mirror, *_ = make_mirror(files, local, state)
    with pytest.raises(RemoteUnreadable, match="ended before it finished; nothing was deleted"):
        mirror.sync()
    assert (local / "keep.txt").read_text() == "mine"


def test_what_the_sandbox_cannot_read_is_left_as_it_was(places):
    remote, local, state = places
    (local / "secret").write_text("the last copy")
    (local / "locked").mkdir()
    (local / "locked" / "inside.txt").write_text("kept too")
    (local / "gone.txt").write_text("the sandbox lacks it")
    scan = [
        '{"path": "secret", "problem": "Permission denied"}',
        '{"path": "locked", "problem": "Permission denied"}',
        '{"done": true, "files": 0, "hashed": 0}',
    ]
    files = Scripted(remote, [], scan=[scan])
    mirror, changed, problems = make_mirror(files, local, state)
    assert mirror.sync() == ["gone.txt"]
    assert (local / "secret").read_text() == "the last copy"
    assert (local / "locked" / "inside.txt").read_text() == "kept too"
    assert problems == [
        "secret in the sandbox: Permission denied; left as it was",
        "locked in the sandbox: Permission denied; left as it was",
    ]


def test_an_unreachable_sandbox_is_one_clear_line(places):
    remote, local, state = places
    files = Scripted(remote, [])
    mirror, *_ = make_mirror(files, local, state)
    with pytest.raises(CairnError) as caught:
        mirror.follow()
    message = str(caught.value)
    assert "\n" not in message
    assert message == (
        "cannot start the watcher of the workspace in the sandbox: no route to the sandbox host"
    )


def test_a_read_that_fails_midway_is_remote_unreadable(places):
    remote, local, state = places
    (remote / "f.txt").write_text("x")
    files = Scripted(remote, [['{"changed": ["f.txt"]}']])
    files.fail_reads = True
    mirror, *_ = make_mirror(files, local, state)
    with pytest.raises(RemoteUnreadable, match="cannot read files .*the exec stream broke"):
        mirror.follow()


@pytest.mark.parametrize(
    ("said", "told"),
    [
        # python3 or the helper missing: the exec ends at once, without a word.
        ([], "the workspace watcher did not start in the sandbox"),
        (['{"error": "/workspace is gone"}'], "watcher in the sandbox stopped: /workspace is gone"),
    ],
)
def test_a_watcher_that_ends_says_why(places, said, told):
    remote, local, state = places
    mirror, *_ = make_mirror(Scripted(remote, [said]), local, state)
    with pytest.raises(RemoteUnreadable, match=told):
        mirror.follow()


def test_after_a_drop_it_reconnects_and_catches_up_with_a_full_pass(places):
    remote, local, state = places
    (remote / "before.txt").write_text("b")
    files = Scripted(
        remote,
        [['{"rescan": "start"}'], ['{"rescan": "start"}', '{"changed": ["after.txt"]}']],
    )
    mirror, changed, problems = make_mirror(files, local, state)
    done = threading.Event()

    original = mirror.sync

    def sync_then_change():
        result = original()
        if mirror.stats["rescans"] == 1:
            (remote / "after.txt").write_text("a")  # written while the connection was down
        return result

    mirror.sync = sync_then_change
    import core.sandbox.mirror as module

    module_retry = module._RETRY_FIRST_S
    module._RETRY_FIRST_S = 0.05
    try:
        runner = threading.Thread(target=lambda: (mirror.run(), done.set()))
        runner.start()
        wait_for(lambda: (local / "after.txt").exists(), timeout=10, what="after.txt")
        wait_for(lambda: problems and "no route" in problems[-1], timeout=10, what="the drop")
        mirror.stop()
        runner.join(10)
    finally:
        module._RETRY_FIRST_S = module_retry
    assert done.is_set()
    assert "the connection to the sandbox's workspace watcher ended" in problems[0]
    assert mirror.stats["rescans"] == 2
    assert (local / "before.txt").read_text() == "b"


def test_a_local_write_failure_is_told_and_retried_by_a_full_pass(places, monkeypatch):
    remote, local, state = places
    (remote / "f.txt").write_text("x")
    files = Scripted(remote, [['{"changed": ["f.txt"]}']])
    mirror, changed, problems = make_mirror(files, local, state)
    real_replace = os.replace

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(RemoteUnreadable):
        mirror.follow()
    monkeypatch.setattr(os, "replace", real_replace)
    told = [p for p in problems if "cannot write f.txt into the local copy" in p]
    assert len(told) == 2  # the batch, then the full pass it asked for
    assert "No space left on device" in told[0]
    assert os.listdir(local) == []  # no temporary left behind
    assert mirror.sync() == ["f.txt"]


def test_changes_made_there_become_revisions_here_with_the_same_blob_ids(places, following):
    from core.vault import Vault
    from core.vault.ignore import IgnoreRules
    from core.vault.objects import run_git
    from core.vault.tree_index import TreeIndex
    from core.watch import Recorder

    remote, local, state = places
    vault = Vault.open_or_create(state / "vault.git")
    base = TreeIndex().scan(vault.objects, local, IgnoreRules(local))
    vault.commit_revision("ws", base.tree, None, trigger="base")
    revisions: list = []
    recorder = Recorder(vault, "ws", local, on_revision=revisions.append, quiet_period=0.1)
    recorder.start()
    try:
        mirror, *_ = following(exclude=[".git"])
        (remote / "src").mkdir()
        (remote / "src" / "app.py").write_text("print('there')\n")
        (remote / "tool.sh").write_text("#!/bin/sh\n")
        os.chmod(remote / "tool.sh", 0o755)
        os.symlink("src/app.py", remote / "link")
        scan = subprocess.run(
            [sys.executable, str(HELPER_SCRIPT), "scan", str(remote), "--cache", str(state / "c")],
            capture_output=True,
            check=True,
        )
        there = {
            (m["path"], m["mode"], m["id"])
            for m in map(json.loads, scan.stdout.splitlines())
            if m.get("id")
        }

        def recorded():
            head = recorder.head
            out = run_git(["--git-dir", str(vault.git_dir), "ls-tree", "-r", "-z", head]).stdout
            here = set()
            for item in filter(None, out.decode().split("\0")):
                meta, path = item.split("\t", 1)
                mode, _kind, sha = meta.split()
                here.add((path, mode, sha))
            return here == there

        wait_for(recorded, timeout=15, what="a revision with the sandbox's files")
        assert revisions and all(r.trigger == "watch" for r in revisions)
    finally:
        recorder.stop()
        vault.close()


def test_an_overflow_in_the_sandbox_is_caught_up_by_a_full_pass(places, following):
    import signal

    remote, local, _ = places
    mirror, files, changed, problems = following()
    helper = files.streams[0].proc
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    helper.send_signal(signal.SIGSTOP)
    try:
        a = os.open(remote / "a", os.O_WRONLY | os.O_CREAT)
        b = os.open(remote / "b", os.O_WRONLY | os.O_CREAT)
        for _ in range(limit // 2 + 1000):
            os.write(a, b"x")
            os.write(b, b"y")
        os.close(a)
        os.close(b)
        (remote / "made-in-the-burst").mkdir()
        (remote / "made-in-the-burst" / "f.txt").write_text("seen by the full pass")
    finally:
        helper.send_signal(signal.SIGCONT)
    # The start's full pass, then the overflow's.
    wait_for(lambda: mirror.stats["rescans"] >= 2, timeout=15, what="the overflow's full pass")
    wait_same(remote, local)
    assert problems == []


def test_a_fault_in_the_mirror_is_told_and_followed_by_a_new_connection(places, monkeypatch):
    import core.sandbox.mirror as module

    remote, local, state = places
    (remote / "f.txt").write_text("x")
    files = Scripted(remote, [['{"rescan": "start"}'], ['{"rescan": "start"}']])
    mirror, changed, problems = make_mirror(files, local, state)
    real_sync = mirror.sync
    calls = []

    def sync_failing_once():
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("a bug")
        return real_sync()

    mirror.sync = sync_failing_once
    monkeypatch.setattr(module, "_RETRY_FIRST_S", 0.05)
    mirror.start()
    wait_for(lambda: (local / "f.txt").exists(), timeout=10, what="the second connection's pass")
    mirror.stop()
    assert problems[0].startswith(f"the workspace mirror of {local} failed: ")


def test_a_full_pass_reads_big_files_a_few_at_a_time(places, monkeypatch):
    import core.sandbox.mirror as module

    remote, local, state = places
    monkeypatch.setattr(module, "_PULL_BYTES", 3000)
    for i in range(6):
        (remote / f"big{i}").write_bytes(os.urandom(1000))
    (remote / "huge").write_bytes(os.urandom(10_000))
    for i in range(20):
        (remote / f"small{i:02}").write_bytes(b"s")
    files = LocalSandboxFiles(remote)
    mirror, *_ = make_mirror(files, local, state)
    mirror.sync()
    assert same(remote, local)
    assert max(len(c) for c in files.read_calls) <= 256
    sizes = {p.name: p.stat().st_size for p in remote.iterdir()}
    for call in files.read_calls:
        assert len(call) == 1 or sum(sizes[p] for p in call) <= 3000, call
    assert ["huge"] in files.read_calls


def test_the_transports_own_error_is_remote_unreadable_with_its_line(places):
    remote, local, state = places

    class HostGone(CairnError):
        pass

    class Transport(Scripted):
        def lines(self, argv):
            raise HostGone("host build-box does not answer", hint="is it switched on?")

    mirror, *_ = make_mirror(Transport(remote, []), local, state)
    with pytest.raises(RemoteUnreadable) as caught:
        mirror.follow()
    assert str(caught.value) == (
        "cannot start the watcher of the workspace in the sandbox: "
        "host build-box does not answer (is it switched on?)"
    )
    assert isinstance(caught.value.__cause__, HostGone)
