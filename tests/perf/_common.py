"""Shared pieces of the benchmarks: generated workspaces cached under /tmp, a plain git copy to
compare against, disk usage, peak memory, and the printed table.

Generated trees are reused by later runs when their size and generator version match; a tree is
only trusted once its `.done` marker exists (an interrupted generation is started over).
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.vault.objects import git_env  # noqa: E402

CACHE = Path(os.environ.get("CAIRN_PERF_CACHE", "/tmp/cairn-perf-capture"))
_GENERATOR_VERSION = 1

GIT_IDENTITY = ["-c", "user.name=Bench", "-c", "user.email=bench@localhost"]


def full_run() -> bool:
    """Whether pytest should run the full-size configuration (CAIRN_PERF_FULL set)."""
    return bool(os.environ.get("CAIRN_PERF_FULL"))


def _cached(name: str, build) -> Path:
    """A folder under the cache built once by `build(path)`; rebuilt if a build was interrupted."""
    base = CACHE / name
    done = CACHE / f"{name}.done"
    if base.is_dir() and done.exists():
        return base
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    build(base)
    done.touch()
    return base


def small_file_tree(files: int, folders: int | None = None) -> Path:
    """`files` small text files spread over `folders` folders (default: one per ten files), two
    levels deep. Returns the workspace folder (its siblings hold benchmark state)."""
    folders = folders or max(1, files // 10)

    def build(base: Path) -> None:
        ws = base / "ws"
        tops = max(1, round(folders**0.5))
        leaves = []
        for t in range(tops):
            for s in range(folders // tops):
                leaves.append(f"pkg{t:03d}/mod{s:03d}")
        while len(leaves) < folders:
            leaves.append(f"pkg{len(leaves) % tops:03d}/extra{len(leaves):05d}")
        for leaf in leaves:
            (ws / leaf).mkdir(parents=True)
        rng = random.Random(files)
        words = ["alpha", "beta", "gamma", "delta", "value", "items", "return", "import", "self"]
        for i in range(files):
            line = " ".join(rng.choice(words) for _ in range(8))
            with open(ws / leaves[i % len(leaves)] / f"file{i:06d}.txt", "w") as f:
                f.write(f"# file {i}\n{line}\n")
        age_tree(ws)

    return _cached(f"small-{files}-{folders}-v{_GENERATOR_VERSION}", build) / "ws"


def random_file_tree(count: int, size: int) -> Path:
    """`count` files of `size` random bytes each (incompressible, like build outputs)."""

    def build(base: Path) -> None:
        ws = base / "ws"
        ws.mkdir()
        for i in range(count):
            with open(ws / f"blob{i:04d}.bin", "wb") as f:
                left = size
                while left:
                    chunk = min(left, 1 << 22)
                    f.write(os.urandom(chunk))
                    left -= chunk
        age_tree(ws)

    return _cached(f"random-{count}x{size}-v{_GENERATOR_VERSION}", build) / "ws"


def age_tree(root: Path, seconds: float = 3600.0) -> None:
    """Backdate files as if written an hour ago (an older tree, nothing 'racy' in it)."""
    import time

    past = time.time() - seconds
    for folder, _dirs, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(folder, name), (past, past), follow_symlinks=False)


def git_copy(tree: Path) -> Path:
    """A plain git repository holding the same files, committed and packed (as a clone is)."""
    name = f"{tree.parent.name}-git"

    def build(base: Path) -> None:
        repo = base / "repo"
        shutil.copytree(tree, repo, symlinks=True)
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, *GIT_IDENTITY, "-c", "gc.auto=0", "commit", "-q", "-m", "initial")
        git(repo, "gc", "-q")

    return _cached(name, build) / "repo"


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, env=git_env(), check=True, capture_output=True)


def disk_usage(path: Path) -> int:
    """Bytes the files under `path` occupy on disk (what `du` counts)."""
    total = 0
    for folder, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def vm_hwm_mb() -> float:
    """This process's peak resident memory (VmHWM), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (user and system)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def flush_writes() -> float:
    """Flush every pending write (and the discards of deleted trees) to disk, outside any
    measurement, so that a measured step starts from a quiet disk; returns the seconds taken."""
    started = time.perf_counter()
    os.sync()
    return time.perf_counter() - started


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_table(title: str, rows: list[tuple[str, str, str, str]]) -> None:
    """Rows of (what, measured, target, verdict); empty target/verdict for context lines."""
    widths = [
        max(len(r[i]) for r in rows + [("what", "measured", "target", "verdict")]) for i in range(4)
    ]
    line = "  ".join("-" * w for w in widths)
    print(f"\n{title}")
    print(line)
    print("  ".join(h.ljust(w) for h, w in zip(("what", "measured", "target", "verdict"), widths)))
    print(line)
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print(line, flush=True)
