"""Importing a repository: from the drop to a workspace ready, the first full capture after it,
materializing the tree again, and a snapshot of the recorded tree, each beside what git (or
`cp -a`) takes for the same files on this machine, in the same run.

    .venv/bin/python tests/perf/bench_import.py [--files 100000] [--real /usr/share]
    pytest tests/perf/bench_import.py -s     (a smaller configuration unless CAIRN_PERF_FULL is set)

Two trees: a generated one (`--files` small files) and a real one (a copy of `--real`, a large
folder already on this machine, made a git repository), each clean and with 1 % of the tracked
files changed or new beside them. Every ratio compares numbers measured in the same run:
- import (`Tasks.new`: the drop to a workspace ready, its `.git` included) against `git worktree
  add` of the same commit; when dirty, against that plus `git hash-object -w` of the dirty files.
  Target 1.5x.
- the first full, verifying capture after the import against `git add -A && git commit` in a
  copy of the repository (`cp -a`, so git's stat data no longer matches and it reads every
  file, as Cairn would without the stat cache the import leaves); target 1/5.
- materializing the base into a new folder against `cp -a` of the same files, twice each in
  opposite orders (the sums compared); target 1.2x.
- a plain folder (no `.git`) imported, beside `cp -a` of it (no target, for context);
- a snapshot of the recorded tree, of a workspace watched in this process (once the watch has
  loaded its index) and as the desktop app takes it (nothing watching in the process: a
  verifying stat pass in helper processes, then the durable snapshot); target under 0.5 s.
Wall time and CPU time (this process and its children) are printed side by side: a CPU time
above the wall time means both cores worked. Every file of the repository is read once before a
case is measured, so that no side pays for a cold page cache the other then finds warm.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    CACHE,
    GIT_IDENTITY,
    _cached,
    cpu_seconds,
    flush_writes,
    full_run,
    git,
    git_copy,
    print_table,
    small_file_tree,
    verdict,
)

from core.app import Cairn
from core.vault.materialize import materialize

IMPORT_TARGET = 1.5
CAPTURE_TARGET = 0.2
MATERIALIZE_TARGET = 1.2
SNAPSHOT_TARGET_S = 0.5
DIRTY_EVERY = 100  # one tracked file in this many is changed, and as many new ones are added


class Timing:
    def __init__(self, wall: float, cpu: float):
        self.wall, self.cpu = wall, cpu

    def __str__(self) -> str:
        return f"{self.wall:.2f} s (cpu {self.cpu:.2f} s)"


def summed(runs: list[Timing]) -> Timing:
    return Timing(sum(t.wall for t in runs), sum(t.cpu for t in runs))


def warm(repo: Path) -> None:
    """Read every file of the repository once (its `.git` included), untimed: whichever side is
    measured first would otherwise read a cold page cache for both."""
    for folder, _dirs, names in os.walk(repo):
        for name in names:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                with open(path, "rb") as f:
                    while f.read(1 << 20):
                        pass


def timed(work: Callable[[], object]) -> tuple[Timing, object]:
    # Writes (and the discards of deleted trees) of the step before are flushed first, outside
    # the measurement: each side starts from a quiet disk.
    flush_writes()
    c0, t0 = cpu_seconds(), time.perf_counter()
    out = work()
    return Timing(time.perf_counter() - t0, cpu_seconds() - c0), out


# -- trees -----------------------------------------------------------------------------------------


def real_repository(source: Path) -> Path:
    """A git repository holding a copy of `source` (a folder already on this machine)."""
    name = "real-" + str(source).strip("/").replace("/", "-")

    def build(base: Path) -> None:
        repo = base / "repo"
        shutil.copytree(source, repo, symlinks=True, ignore_dangling_symlinks=True)
        for folder, dirs, _files in os.walk(repo):
            for d in [d for d in dirs if d == ".git"]:
                shutil.rmtree(os.path.join(folder, d))
                dirs.remove(d)
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, *GIT_IDENTITY, "-c", "gc.auto=0", "commit", "-q", "-m", "initial")
        git(repo, "gc", "-q")

    return _cached(name, build) / "repo"


def dirty_copy(repo: Path) -> tuple[Path, list[Path]]:
    """A copy of `repo` whose index is fresh, with one tracked file in DIRTY_EVERY changed and
    as many new files beside; returns it and the dirty files."""
    name = f"{repo.parent.name}-dirty"

    def build(base: Path) -> None:
        copy = base / "repo"
        subprocess.run(["cp", "-a", str(repo), str(copy)], check=True)
        git(copy, "update-index", "-q", "--refresh")
        tracked = [p for p in git(copy, "ls-files", "-z").stdout.split(b"\0") if p]
        for i, raw in enumerate(tracked[::DIRTY_EVERY]):
            path = copy / os.fsdecode(raw)
            if path.is_symlink() or not path.is_file():
                continue
            with open(path, "ab") as f:
                f.write(b"\nchanged by the benchmark\n")
            (path.parent / f"new_{i:05d}.txt").write_text(f"new file {i}\n")

    copy = _cached(name, build) / "repo"
    proc = git(copy, "status", "--porcelain", "-z", "--untracked-files=all")
    dirty = [copy / os.fsdecode(e[3:]) for e in proc.stdout.split(b"\0") if e]
    return copy, dirty


# -- measurements ----------------------------------------------------------------------------------


def git_worktree_add(repo: Path, scratch: Path, round_: int) -> Timing:
    target = scratch / f"worktree{round_}"
    took, _ = timed(lambda: git(repo, "worktree", "add", "-q", "--detach", str(target), "HEAD"))
    # Left on disk until the run ends (removed with the scratch folders): deleting 100,000
    # files here would slow the next side's writes.
    shutil.move(str(repo / ".git" / "worktrees" / target.name), str(scratch / f"admin{round_}"))
    git(repo, "worktree", "prune")
    return took


def cairn_import(repo: Path, data: Path) -> tuple[Timing, object]:
    """`Tasks.new` of `repo` into a fresh data folder, timed."""
    app = Cairn(data)
    try:
        return timed(lambda: app.tasks.new(repo))
    finally:
        app.close()


def imports_side_by_side(repo: Path, scratch: Path) -> tuple[list[Timing], list[Timing]]:
    """`git worktree add` and the import, twice each in opposite orders (git first, then the
    import first): on a disk whose speed drifts (an ext4 mounted `discard` slows its writes
    for a while after a large delete), neither side always follows the other."""
    gits: list[Timing] = []
    ours: list[Timing] = []
    for i in range(2):
        steps = [
            (gits, lambda i=i: git_worktree_add(repo, scratch, i)),
            (ours, lambda i=i: cairn_import(repo, scratch / f"import{i}")[0]),
        ]
        for runs, step in steps if i == 0 else steps[::-1]:
            runs.append(step())
    return gits, ours


def git_hash_dirty(dirty: list[Path], scratch: Path) -> Timing:
    store = scratch / "hashes.git"
    git(scratch, "init", "-q", "--bare", str(store))
    paths = "".join(f"{p}\n" for p in dirty if p.is_file() and not p.is_symlink()).encode()

    def work() -> None:
        subprocess.run(
            ["git", "--git-dir", str(store), "hash-object", "-w", "--stdin-paths"],
            input=paths,
            check=True,
            capture_output=True,
        )

    took, _ = timed(work)
    return took


def git_add_commit_in_a_copy(repo: Path, scratch: Path) -> Timing:
    copy = scratch / "copy"
    subprocess.run(["cp", "-a", str(repo), str(copy)], check=True)

    def work() -> None:
        git(copy, "add", "-A")
        git(copy, *GIT_IDENTITY, "commit", "-q", "--allow-empty", "-m", "everything")

    took, _ = timed(work)
    return took


def cairn_side(repo: Path, scratch: Path) -> dict[str, object]:
    """Import (untimed: `imports_side_by_side` times it), first full capture, materialize,
    snapshot: with a fresh data folder."""
    app = Cairn(scratch / "data")
    try:
        made = app.tasks.new(repo)
        task = made.task.id
        ws = made.workspace
        capture_took, (rev, new) = timed(lambda: app.revisions.capture(task, trigger="external"))
        vault = app.ctx.vault_for(ws.source_id)
        base = made.base_revision
        materialize_runs: list[Timing] = []
        cp_runs: list[Timing] = []
        # Two rounds in opposite orders (materialize first, then cp -a first), each copy into a
        # folder of its own: neither side always follows the other's writes.
        for i in range(2):
            steps = [
                (
                    materialize_runs,
                    lambda i=i: materialize(vault, base, scratch / f"m{i}", label="b"),
                ),
                (
                    cp_runs,
                    lambda i=i: subprocess.run(
                        ["cp", "-a", str(scratch / "m0"), str(scratch / f"c{i}")], check=True
                    ),
                ),
            ]
            for runs, step in steps if i == 0 else steps[::-1]:
                runs.append(timed(step)[0])
        app.revisions.watch(task)
        # The watch loads its index on its worker first; a snapshot taken during a run finds it
        # loaded (a capture from the pending paths waits for it, as this untimed one does).
        app.revisions.capture(task, trigger="checkpoint", verify=False)
        snapshot_took, _ = timed(lambda: app.snapshots.take(task))
        app.revisions.stop_watching(ws.id)
    finally:
        app.close()
    # As the desktop app takes it (Snapshot Now, Start's first snapshot): nothing watches the
    # workspace in this process, and captures would run in a child process.
    app = Cairn(scratch / "data", captures_in_child=True)
    try:
        snapshot_app_took, snap = timed(lambda: app.snapshots.take(task))
        assert snap.revision_id == rev.id  # type: ignore[attr-defined]
        return {
            "capture": capture_took,
            "capture_new": new,
            "materialize": summed(materialize_runs),
            "cp": summed(cp_runs),
            "materialize_runs": materialize_runs,
            "cp_runs": cp_runs,
            "snapshot": snapshot_took,
            "snapshot_app": snapshot_app_took,
        }
    finally:
        app.close()


def measure(
    label: str, repo: Path, dirty: list[Path], rows: list, results: dict, scratches: list[Path]
) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-import-", dir=CACHE))
    scratches.append(scratch)  # removed once every case is measured (see `timed`)
    files = len([p for p in git(repo, "ls-files", "-z").stdout.split(b"\0") if p])
    warm(repo)
    worktrees, imports = imports_side_by_side(repo, scratch)
    hashing = git_hash_dirty(dirty, scratch) if dirty else Timing(0.0, 0.0)
    worktree = summed(worktrees)
    git_side = Timing(worktree.wall + 2 * hashing.wall, worktree.cpu + 2 * hashing.cpu)
    add_commit = git_add_commit_in_a_copy(repo, scratch)
    ours = cairn_side(repo, scratch)
    imp = summed(imports)
    cap, mat, cp, snap, snap_app = (
        ours["capture"],
        ours["materialize"],
        ours["cp"],
        ours["snapshot"],
        ours["snapshot_app"],
    )
    assert isinstance(cap, Timing) and isinstance(mat, Timing)
    assert isinstance(cp, Timing) and isinstance(snap, Timing) and isinstance(snap_app, Timing)
    mats, cps = ours["materialize_runs"], ours["cp_runs"]
    assert isinstance(mats, list) and isinstance(cps, list)
    r_imp = imp.wall / git_side.wall
    r_cap = cap.wall / add_commit.wall
    r_mat = mat.wall / cp.wall
    base = "git worktree add" + (" + hash-object of the dirty files" if dirty else "")
    rows += [
        (f"{label}: {files} tracked, {len(dirty)} dirty", "", "", ""),
        (
            f"  {base} (2 runs)",
            str(git_side),
            ", ".join(f"{t.wall + hashing.wall:.2f}" for t in worktrees),
            "",
        ),
        (
            "  import, drop to workspace ready (2 runs)",
            str(imp),
            ", ".join(f"{t.wall:.2f}" for t in imports),
            "",
        ),
        (
            "  import / git",
            f"{r_imp:.2f}x",
            f"<= {IMPORT_TARGET}x",
            verdict(r_imp <= IMPORT_TARGET),
        ),
        ("  git add -A && git commit (a copy)", str(add_commit), "", ""),
        ("  first full capture after import", str(cap), "", ""),
        (
            "  first capture / git add+commit",
            f"{r_cap:.2f}x",
            f"<= {CAPTURE_TARGET}x",
            verdict(r_cap <= CAPTURE_TARGET and not ours["capture_new"]),
        ),
        ("  cp -a of the tree (2 runs)", str(cp), ", ".join(f"{t.wall:.2f}" for t in cps), ""),
        ("  materialize (2 runs)", str(mat), ", ".join(f"{t.wall:.2f}" for t in mats), ""),
        (
            "  materialize / cp -a",
            f"{r_mat:.2f}x",
            f"<= {MATERIALIZE_TARGET}x",
            verdict(r_mat <= MATERIALIZE_TARGET),
        ),
        (
            "  snapshot of the recorded tree (watched)",
            str(snap),
            f"< {SNAPSHOT_TARGET_S} s",
            verdict(snap.wall < SNAPSHOT_TARGET_S),
        ),
        (
            "  snapshot of the recorded tree (as the app)",
            str(snap_app),
            f"< {SNAPSHOT_TARGET_S} s",
            verdict(snap_app.wall < SNAPSHOT_TARGET_S),
        ),
    ]
    results[label] = {
        "import": r_imp,
        "capture": r_cap,
        "materialize": r_mat,
        "snap": snap.wall,
        "snap_app": snap_app.wall,
    }


def measure_plain(folder: Path, rows: list, scratches: list[Path]) -> None:
    """A plain folder (no `.git`) dropped: every file read, hashed and stored, then the
    workspace written; beside `cp -a` of the same files (no target: context for the reader)."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-import-plain-", dir=CACHE))
    scratches.append(scratch)
    files = sum(len(names) for _folder, _dirs, names in os.walk(folder))
    warm(folder)
    copied, _ = timed(
        lambda: subprocess.run(["cp", "-a", str(folder), str(scratch / "copy")], check=True)
    )
    took, _ = cairn_import(folder, scratch / "data")
    rows += [
        (f"plain folder (no .git): {files} files", "", "", ""),
        ("  cp -a of the folder", str(copied), "", ""),
        ("  import, drop to workspace ready", str(took), f"{took.wall / copied.wall:.2f}x cp", ""),
    ]


def run(files: int, real: Path | None) -> dict:
    CACHE.mkdir(parents=True, exist_ok=True)
    trees = [(f"generated {files}", git_copy(small_file_tree(files)))]
    if real is not None and real.is_dir():
        trees.append((f"real {real}", real_repository(real)))
    rows: list = []
    results: dict = {}
    scratches: list[Path] = []
    try:
        for label, repo in trees:
            measure(f"{label}, clean", repo, [], rows, results, scratches)
            dirty_repo, dirty = dirty_copy(repo)
            measure(f"{label}, 1 % dirty", dirty_repo, dirty, rows, results, scratches)
        measure_plain(small_file_tree(files), rows, scratches)
    finally:
        for scratch in scratches:
            shutil.rmtree(scratch, ignore_errors=True)
    print_table(f"Import ({os.cpu_count()} cores)", rows)
    return results


def test_import_benchmark():
    """Prints the table; asserts only that every measurement happened."""
    full = full_run()
    results = run(100_000 if full else 10_000, Path("/usr/share" if full else "/usr/include"))
    assert results and all(r["import"] > 0 for r in results.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--real", type=Path, default=Path("/usr/share"))
    args = parser.parse_args()
    run(args.files, args.real)


if __name__ == "__main__":
    main()
