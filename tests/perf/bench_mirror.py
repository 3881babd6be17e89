"""The workspace mirror (a local copy of a workspace in a sandbox on another machine): what its
full passes and its one-file pulls cost, with the helper run on this machine.

    .venv/bin/python tests/perf/bench_mirror.py [--files 100000] [--edits 11]
    pytest tests/perf/bench_mirror.py -s     (10,000 files unless CAIRN_PERF_FULL is set)

Every ratio compares numbers measured in the same run (the protocol goes through local
processes, as tests/unit/test_mirror.py does; over a network each read adds its round trip):
- the helper's scan with a cold stat cache against `git hash-object --stdin-paths` of the same
  files (the hashing itself), and the scan with a warm cache against the cold one;
- the first full pass into an empty folder against `tar -c | tar -x` of the tree;
- a full pass when nothing changed against the cold scan;
- one file written there to the file here (quiet period included), against the same write seen
  by a local watchdog observer with the recorder's filter, plus that quiet period. Rounds of the
  two alternate.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import age_tree, full_run, median, print_table, small_file_tree

from core.sandbox.mirror import HELPER_SCRIPT, WorkspaceMirror
from core.watch import WATCHED_EVENTS
from tests.support import LocalSandboxFiles

QUIET = 0.25


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _scan(root: Path, cache: Path) -> None:
    subprocess.run(
        [sys.executable, str(HELPER_SCRIPT), "scan", str(root), "--cache", str(cache)],
        stdout=subprocess.DEVNULL,
        check=True,
    )


def _git_hash_all(root: Path) -> None:
    paths = "\n".join(str(p) for p in root.rglob("*") if p.is_file()) + "\n"
    subprocess.run(
        ["git", "hash-object", "--no-filters", "--stdin-paths"],
        input=paths.encode(),
        stdout=subprocess.DEVNULL,
        check=True,
    )


def _tar_copy(root: Path, into: Path) -> None:
    into.mkdir()
    subprocess.run(f"tar -c -C '{root}' . | tar -x -C '{into}'", shell=True, check=True)


def _observer_latency(folder: Path, round_no: int) -> float:
    """Seconds from a write to a local watchdog observer's event for it."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    seen = threading.Event()

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event) -> None:
            if str(event.src_path).endswith(".probe"):
                seen.set()

    observer = Observer()
    observer.schedule(Handler(), str(folder), recursive=True, event_filter=WATCHED_EVENTS)
    observer.start()
    try:
        time.sleep(0.1)
        seen.clear()
        t0 = time.perf_counter()
        (folder / f"{round_no}.probe").write_text("x")
        seen.wait(10)
        return time.perf_counter() - t0
    finally:
        observer.stop()
        observer.join()


def run(files: int, edits: int) -> dict:
    source = small_file_tree(files)
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-mirror-"))
    try:
        remote, local, state = work / "remote", work / "local", work / "state"
        shutil.copytree(source, remote, symlinks=True)
        age_tree(remote)
        state.mkdir()
        hash_s = _timed(lambda: _git_hash_all(remote))
        cold_s = _timed(lambda: _scan(remote, state / "cold-cache"))
        warm_s = _timed(lambda: _scan(remote, state / "cold-cache"))
        tar_s = _timed(lambda: _tar_copy(remote, work / "tar-copy"))

        files_api = LocalSandboxFiles(remote)
        changed: list[list[str]] = []
        problems: list[str] = []
        mirror = WorkspaceMirror(
            files_api,
            local,
            scan_cache=str(state / "scan-cache"),
            remote_root=str(remote),
            helper=str(HELPER_SCRIPT),
            python=sys.executable,
            quiet_period=QUIET,
            on_changed=changed.append,
            on_problem=problems.append,
        )
        first_s = _timed(mirror.sync)
        age_tree(local)
        mirror.sync()  # the local side looks once more at what it wrote (racy window)
        nothing_s = _timed(mirror.sync)

        mirror.start()
        assert mirror.wait_ready(60), problems
        latencies: list[float] = []
        baselines: list[float] = []
        probe = work / "probe"
        probe.mkdir()
        for i in range(edits):
            baselines.append(_observer_latency(probe, i) + QUIET)
            target = local / f"edit-{i}.txt"
            t0 = time.perf_counter()
            (remote / f"edit-{i}.txt").write_text(f"edit {i}\n")
            while not target.exists():
                if time.perf_counter() - t0 > 30:
                    raise AssertionError(f"edit {i} never reached the local copy: {problems}")
                time.sleep(0.002)
            latencies.append(time.perf_counter() - t0)
        mirror.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    lat, base = median(latencies), median(baselines)
    rows = [
        (f"scan, cold cache ({files:,} files)", f"{cold_s:.2f} s", "", ""),
        ("  / git hash-object --stdin-paths", f"{cold_s / hash_s:.2f}", "", ""),
        ("scan, warm cache / cold", f"{warm_s / cold_s:.2f}", "", ""),
        ("first full pass into an empty folder", f"{first_s:.2f} s", "", ""),
        ("  / tar -c | tar -x", f"{first_s / tar_s:.2f}", "", ""),
        ("full pass, nothing changed / cold scan", f"{nothing_s / cold_s:.2f}", "", ""),
        (
            f"one file there to here, median of {edits}",
            f"{lat * 1000:.0f} ms",
            "",
            "",
        ),
        (
            "  range",
            f"{min(latencies) * 1000:.0f}-{max(latencies) * 1000:.0f} ms",
            "",
            "",
        ),
        (
            f"  / local observer's event + quiet period ({base * 1000:.0f} ms)",
            f"{lat / base:.2f}",
            "",
            "",
        ),
    ]
    print_table("Workspace mirror", rows)
    for problem in problems:
        print(f"mirror problem: {problem}")
    return {"cold_s": cold_s, "warm_s": warm_s, "latency_s": lat, "nothing_s": nothing_s}


def test_mirror_benchmark():
    """Prints the table; asserts only that every measurement happened."""
    result = run(100_000 if full_run() else 10_000, 11)
    assert result["cold_s"] > 0 and result["latency_s"] > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--edits", type=int, default=11)
    args = parser.parse_args()
    run(args.files, args.edits)


if __name__ == "__main__":
    main()
