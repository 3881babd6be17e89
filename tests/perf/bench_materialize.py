"""Materializing a large tree (restoring a snapshot) against `cp -a` of the same tree.

    .venv/bin/python tests/perf/bench_materialize.py [--files 100000] [--runs 3] [--out-dir DIR]
        [--writers 0,2,4]
    pytest tests/perf/bench_materialize.py -s   (10,000 files unless CAIRN_PERF_FULL is set)

Target: materialize's median wall time at most 1.2x cp -a's. The two are run alternately (cp
first on odd runs, materialize first on even ones), each after an untimed `sync` so neither pays
for the other's writeback; the page cache cannot be dropped here, and both read warm sources.
Materialize has git's checkout write the files while it checks every object. `--writers` also
runs it with every file written by this process instead, on that many writer threads each (0:
inline), in the same rotation, to show what each way costs on this disk.
CPU time (user + system, children included) is printed beside the wall time: on a busy machine it
moves less than the wall time does. The tree is the shared generated workspace (_common.py); its
vault is cached beside it and reused by later runs. `--out-dir` writes both copies elsewhere (a
tmpfs such as /dev/shm shows the cost of the code itself, without the disk's).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    cpu_seconds,
    flush_writes,
    full_run,
    median,
    print_table,
    small_file_tree,
    verdict,
)

import core.vault.materialize as materialize_module
from core.vault import Vault
from core.vault.ignore import IgnoreRules
from core.vault.materialize import materialize
from core.vault.tree_index import TreeIndex

TARGET = 1.2
FULL_FILES = 100_000
SMALL_FILES = 10_000


def cached_vault(tree: Path) -> tuple[Vault, str]:
    """The tree scanned into a vault beside it; the scan is reused while its record holds."""
    git_dir = tree.parent / "materialize-vault.git"
    record = tree.parent / "materialize-vault.tree"
    if record.exists() and git_dir.is_dir():
        vault = Vault(git_dir)
        tree_id = record.read_text().strip()
        if vault.objects.has_object(tree_id):
            return vault, tree_id
        vault.close()
    shutil.rmtree(git_dir, ignore_errors=True)
    print(f"scanning {tree} into {git_dir} ...", flush=True)
    vault = Vault.open_or_create(git_dir)
    started = time.perf_counter()
    result = TreeIndex().scan(vault.objects, tree, IgnoreRules(tree))
    vault.objects.sync()
    print(f"  {result.files} files scanned in {time.perf_counter() - started:.1f} s", flush=True)
    record.write_text(result.tree + "\n")
    return vault, result.tree


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of `fn`, started with no writeback pending."""
    flush_writes()
    cpu, started = cpu_seconds(), time.perf_counter()
    fn()
    return time.perf_counter() - started, cpu_seconds() - cpu


def with_writers(count: int, work):
    """`work` with materialize writing every file itself, on `count` writer threads (0: on the
    thread that reads the blobs), instead of git's checkout."""

    def run(out: Path) -> None:
        default = materialize_module._WRITERS, materialize_module._PACE, materialize_module._BY_GIT
        materialize_module._WRITERS = max(1, count)
        materialize_module._PACE = "threads" if count else "inline"
        materialize_module._BY_GIT = False
        try:
            work(out)
        finally:
            (
                materialize_module._WRITERS,
                materialize_module._PACE,
                materialize_module._BY_GIT,
            ) = default

    return run


def run(
    files: int, runs: int = 3, out_dir: Path | None = None, writers: list[int] | None = None
) -> float:
    """Measure, print the table, and return materialize's median wall time over cp -a's."""
    tree = small_file_tree(files)
    vault, tree_id = cached_vault(tree)
    # Every run writes a folder of its own, all removed at the end: deleting 100,000 files
    # between timed runs would make the next run pay for the deletion (journal, discards).
    outs = (out_dir or tree.parent) / "materialize-outs"
    shutil.rmtree(outs, ignore_errors=True)
    outs.mkdir()

    def write(out: Path) -> None:
        materialize(vault, tree_id, out, label="benchmark")

    actions = {
        "cp": lambda out: subprocess.run(["cp", "-a", str(tree), str(out)], check=True),
        "materialize": write,
    }
    for count in writers or []:
        actions[f"materialize, {count} writers"] = with_writers(count, write)
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in actions}
    try:
        for i in range(runs):
            for which in list(actions) if i % 2 == 0 else list(actions)[::-1]:
                out = outs / f"{list(actions).index(which)}-{i}"
                timings[which].append(_timed(functools.partial(actions[which], out)))
            print(
                f"  run {i + 1}: "
                + ", ".join(f"{name} {t[-1][0]:.2f} s" for name, t in timings.items()),
                flush=True,
            )
    finally:
        vault.close()
        shutil.rmtree(outs, ignore_errors=True)
    cp_wall = median([t[0] for t in timings["cp"]])
    mat_wall = median([t[0] for t in timings["materialize"]])
    cp_cpu = median([t[1] for t in timings["cp"]])
    mat_cpu = median([t[1] for t in timings["materialize"]])
    ratio = mat_wall / cp_wall
    folders = sum(1 for _ in os.walk(tree)) - 1
    threads = [
        (
            f"{name} (wall / cpu)",
            f"{median([t[0] for t in ts]):.2f} s / {median([t[1] for t in ts]):.2f} s",
            f"{median([t[0] for t in ts]) / cp_wall:.2f}x cp -a",
            "",
        )
        for name, ts in timings.items()
        if name.endswith("writers")
    ]
    print_table(
        f"materialize: {files} files in {folders} folders into {outs}, median of {runs}, "
        "written by git's checkout while the objects are checked, unless said",
        [
            ("cp -a (wall / cpu)", f"{cp_wall:.2f} s / {cp_cpu:.2f} s", "", ""),
            ("materialize (wall / cpu)", f"{mat_wall:.2f} s / {mat_cpu:.2f} s", "", ""),
            *threads,
            (
                "materialize / cp -a, wall",
                f"{ratio:.2f}x",
                f"<= {TARGET}x",
                verdict(ratio <= TARGET),
            ),
            ("materialize / cp -a, cpu", f"{mat_cpu / cp_cpu:.2f}x", "", ""),
        ],
    )
    return ratio


def test_materialize_within_target_of_cp():
    ratio = run(FULL_FILES if full_run() else SMALL_FILES)
    assert ratio <= TARGET, f"materialize took {ratio:.2f}x cp -a (target {TARGET}x)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=FULL_FILES)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="where both copies are written (default: beside the tree)",
    )
    parser.add_argument(
        "--writers",
        default="",
        help="comma-separated writer thread counts to measure as well (e.g. 1,2,4)",
    )
    args = parser.parse_args()
    writers = [int(n) for n in args.writers.split(",") if n.strip()]
    ratio = run(args.files, args.runs, args.out_dir, writers)
    sys.exit(0 if ratio <= TARGET else 1)


if __name__ == "__main__":
    main()
