"""Revision capture: what recording one edit costs, how the vault grows, how much memory the
recorder of a large workspace holds.

    .venv/bin/python tests/perf/bench_capture.py [--files 100000] [--edits 11]
    pytest tests/perf/bench_capture.py -s     (a smaller configuration unless CAIRN_PERF_FULL is set)

Every ratio compares numbers measured in the same run:
- capture cost of a one-file edit (stats["last_capture_ms"]: from the recorder deciding to
  capture, after its quiet period, to the revision committed) against `git add -A && git commit`
  in a plain git copy of the same tree; target at most 1/10. The same capture at a tenth of the
  files must cost within 1.5x (cost follows the change, not the tree). End-to-end latency (the
  write to the revision visible, quiet period included) is printed beside it.
- vault growth for one changed file in a tree of large random files, against that file's size
  (target at most 2x), beside the size of a `tar czf` of the workspace.
- peak RSS (VmHWM) of a separate process that starts the recorder on the large tree and records
  one edit; target under 200 MB.
Workspaces and their vaults are cached under /tmp (see _common.py) and reused by later runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    GIT_IDENTITY,
    disk_usage,
    full_run,
    git_copy,
    median,
    print_table,
    random_file_tree,
    small_file_tree,
    verdict,
    vm_hwm_mb,
)

from core.vault import Vault
from core.vault.objects import git_env
from core.watch import Recorder

WS = "bench"
QUIET = 0.25
COST_RATIO_TARGET = 0.10
SCALE_TARGET = 1.5
GROWTH_TARGET = 2.0
RSS_TARGET_MB = 200.0
EDIT_TIMEOUT = 120.0


class _Watched:
    """A recorder on a cached workspace, with its vault and stat cache beside the tree."""

    def __init__(self, tree: Path):
        self.tree = tree
        self.vault = Vault.open_or_create(tree.parent / "vault.git")
        self.revisions: list[tuple[float, object]] = []
        self.problems: list[str] = []
        self._got = threading.Event()
        self.recorder = Recorder(
            self.vault,
            WS,
            tree,
            on_revision=self._on_revision,
            on_problem=self.problems.append,
            quiet_period=QUIET,
            stat_cache=tree.parent / "stat-cache",
        )

    def _on_revision(self, captured) -> None:
        self.revisions.append((time.perf_counter(), captured))
        self._got.set()

    def start(self) -> float:
        t0 = time.perf_counter()
        self.recorder.start()
        return time.perf_counter() - t0

    def edit(self, path: Path, data: bytes) -> tuple[float, float]:
        """Write `data` to `path`; returns (end-to-end latency s, capture cost ms)."""
        if not self.recorder.wait_idle(EDIT_TIMEOUT):
            raise RuntimeError("the recorder did not settle")
        self._got.clear()
        count = len(self.revisions)
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            f.write(data)
        if not self._got.wait(EDIT_TIMEOUT) or len(self.revisions) <= count:
            raise RuntimeError(f"no revision for the edit of {path}")
        when, captured = self.revisions[-1]
        if captured.files_changed != 1:
            raise RuntimeError(
                f"expected one changed file, the revision says {captured.files_changed}"
            )
        return when - t0, self.recorder.stats["last_capture_ms"]

    def stop(self) -> None:
        self.recorder.stop()
        self.vault.close()


def _files_of(tree: Path, rng: random.Random, count: int) -> list[str]:
    tops = sorted(p.name for p in tree.iterdir())
    picked = []
    while len(picked) < count:
        top = tree / rng.choice(tops)
        sub = top / rng.choice(sorted(p.name for p in top.iterdir()))
        names = sorted(p.name for p in sub.iterdir()) if sub.is_dir() else []
        if names:
            picked.append(str((sub / rng.choice(names)).relative_to(tree)))
    return picked


def measure_captures(sizes: list[int], edits: int) -> dict[int, dict]:
    """Capture cost and latency of one-file edits in each tree. The recorders run side by side
    and the edits alternate between the trees, so disk noise falls on both alike."""
    rng = random.Random(time.time_ns())
    trees = {n: small_file_tree(n) for n in sizes}
    targets = {n: _files_of(trees[n], rng, edits + 1) for n in sizes}
    watched: dict[int, _Watched] = {}
    out: dict[int, dict] = {}
    try:
        for n in sizes:
            watched[n] = _Watched(trees[n])
            start_s = watched[n].start()
            out[n] = {
                "files": n,
                "folders": sum(1 for _ in _walk_dirs(trees[n])),
                "start_s": start_s,
                "start_from_cache": watched[n].recorder.stats["stat_cache_used"],
                "latencies": [],
                "costs": [],
                "targets": targets[n],
            }
        for i in range(edits + 1):
            for n in sizes:
                latency, cost = watched[n].edit(
                    trees[n] / targets[n][i], f"edit {i} at {time.time_ns()}\n".encode()
                )
                if i:  # the first edit warms caches
                    out[n]["latencies"].append(latency)
                    out[n]["costs"].append(cost)
        for n in sizes:
            out[n]["capture_ms"] = median(out[n]["costs"])
            out[n]["latency_ms"] = median(out[n]["latencies"]) * 1000.0
            out[n]["problems"] = list(watched[n].problems)
    finally:
        for w in watched.values():
            w.stop()
    return out


def measure_git_commit(files: int, targets: list[str]) -> float:
    """Median ms of `git add -A && git commit -q` after a one-file edit in a plain git copy."""
    repo = git_copy(small_file_tree(files))
    commit = ["bash", "-c", f"git add -A && git {' '.join(GIT_IDENTITY)} commit -q -m edit"]
    times = []
    for i, rel in enumerate(targets):
        (repo / rel).write_bytes(f"git edit {i} at {time.time_ns()}\n".encode())
        t0 = time.perf_counter()
        subprocess.run(commit, cwd=repo, env=git_env(), check=True, capture_output=True)
        if i:  # the first commit refreshes git's index after the copy
            times.append(time.perf_counter() - t0)
    return median(times) * 1000.0


def _walk_dirs(tree: Path):
    for folder, _dirs, _files in os.walk(tree):
        yield folder


def measure_growth(count: int, size: int) -> dict:
    tree = random_file_tree(count, size)
    watched = _Watched(tree)
    objects = watched.vault.git_dir / "objects"
    try:
        watched.start()
        before = disk_usage(objects)
        target = tree / f"blob{random.randrange(count):04d}.bin"
        watched.edit(target, os.urandom(size))
        after = disk_usage(objects)
    finally:
        watched.stop()
    proc = subprocess.run(
        f"tar czf - -C {tree} . | wc -c", shell=True, check=True, capture_output=True
    )
    return {
        "workspace_bytes": count * size,
        "changed_bytes": size,
        "growth_bytes": after - before,
        "targz_bytes": int(proc.stdout.split()[0]),
    }


def measure_memory(files: int) -> dict:
    """Run the recorder on the cached tree in a fresh process; its VmHWM is the answer."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child-memory", "--files", str(files)],
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child_memory(files: int) -> None:
    baseline = vm_hwm_mb()
    tree = small_file_tree(files)
    watched = _Watched(tree)
    try:
        start_s = watched.start()
        rel = _files_of(tree, random.Random(), 1)[0]
        latency, cost = watched.edit(tree / rel, f"memory probe {time.time_ns()}\n".encode())
    finally:
        watched.stop()
    print(
        json.dumps(
            {
                "hwm_mb": vm_hwm_mb(),
                "baseline_mb": baseline,
                "start_s": start_s,
                "capture_ms": cost,
                "latency_s": latency,
                "stat_cache_used": watched.recorder.stats["stat_cache_used"],
            }
        )
    )


def run(files: int, small_files: int, big_count: int, big_size: int, edits: int) -> dict:
    print(
        f"capture benchmark: {files:,} and {small_files:,} files, {big_count} x "
        f"{big_size >> 20} MiB, {edits} edits (trees cached under /tmp)",
        flush=True,
    )
    captures = measure_captures([files, small_files], edits)
    large, small = captures[files], captures[small_files]
    large["git_ms"] = measure_git_commit(files, large["targets"])
    growth = measure_growth(big_count, big_size)
    memory = measure_memory(files)

    ratio = large["capture_ms"] / large["git_ms"]
    scale = large["capture_ms"] / small["capture_ms"]
    grow = growth["growth_bytes"] / growth["changed_bytes"]
    mib = 1 << 20
    cap, git_ms, lat = large["capture_ms"], large["git_ms"], large["latency_ms"]
    rss = memory["hwm_mb"]
    rows = [
        (f"workspace: {files:,} files in {large['folders'] - 1:,} folders", "", "", ""),
        (f"recorder capture, one file edited (median of {edits})", f"{cap:.1f} ms", "", ""),
        (
            f"git add -A && git commit -q, plain git copy (median of {edits})",
            f"{git_ms:.0f} ms",
            "",
            "",
        ),
        (
            "  capture / git",
            f"{ratio:.3f}",
            f"<= {COST_RATIO_TARGET:.2f}",
            verdict(ratio <= COST_RATIO_TARGET),
        ),
        (f"recorder capture at {small_files:,} files", f"{small['capture_ms']:.1f} ms", "", ""),
        (
            f"  capture at {files:,} / at {small_files:,}",
            f"{scale:.2f}",
            f"<= {SCALE_TARGET}",
            verdict(scale <= SCALE_TARGET),
        ),
        (
            f"end-to-end, write to revision (quiet period {QUIET * 1000:.0f} ms)",
            f"{lat:.0f} ms",
            "",
            "",
        ),
        (
            f"recorder start on {files:,} files, valid stat cache (load, watch, catch-up scan)",
            f"{memory['start_s']:.2f} s",
            "",
            "",
        ),
        (
            f"vault growth, one {big_size / mib:.0f} MiB file changed of "
            f"{growth['workspace_bytes'] / mib:,.0f} MiB",
            f"{growth['growth_bytes'] / mib:.2f} MiB",
            "",
            "",
        ),
        (
            "  growth / changed file size",
            f"{grow:.2f}",
            f"<= {GROWTH_TARGET:.1f}",
            verdict(grow <= GROWTH_TARGET),
        ),
        ("tar czf of the workspace", f"{growth['targz_bytes'] / mib:,.0f} MiB", "", ""),
        (
            f"peak RSS, recorder on {files:,} files (start + one capture)",
            f"{rss:.0f} MB",
            f"< {RSS_TARGET_MB:.0f} MB",
            verdict(rss < RSS_TARGET_MB),
        ),
        ("  of which the interpreter and imports", f"{memory['baseline_mb']:.0f} MB", "", ""),
    ]
    if not large["start_from_cache"]:
        rows.append(
            (
                "  first start ever on this tree (everything hashed and written)",
                f"{large['start_s']:.1f} s",
                "",
                "",
            )
        )
    print_table("Revision capture", rows)
    for problem in large["problems"] + small["problems"]:
        print(f"recorder problem: {problem}")
    return {"large": large, "small": small, "growth": growth, "memory": memory}


def test_capture_benchmark():
    """Prints the table; asserts only that every measurement happened."""
    if full_run():
        result = run(100_000, 10_000, 100, 10 << 20, 11)
    else:
        result = run(10_000, 1_000, 10, 1 << 20, 11)
    assert result["large"]["capture_ms"] > 0 and result["memory"]["hwm_mb"] > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--edits", type=int, default=11)
    parser.add_argument("--big-files", type=int, default=100)
    parser.add_argument("--big-size-mb", type=int, default=10)
    parser.add_argument("--child-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_memory:
        _child_memory(args.files)
        return
    run(args.files, max(100, args.files // 10), args.big_files, args.big_size_mb << 20, args.edits)


if __name__ == "__main__":
    main()
