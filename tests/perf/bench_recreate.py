"""Recreating a lost sandbox from its snapshot against doing the same by hand, in one run.

    .venv/bin/python tests/perf/bench_recreate.py [--files 10000] [--runs 5]
    pytest tests/perf -s

Cairn's path is the one a resume takes when both the container and the workspace folder are gone:
materialize the snapshot into the workspace (verifying its tree) and create the next generation of
the hardened sandbox with the same snapshot id. The baseline is `cp -a` of the same tree plus a bare
`docker run -d` of the same image. Target: within 1.5x. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.perf._common import full_run, median, print_table, small_file_tree, verdict  # noqa: E402

TARGET = 1.5
LABEL = "test.cairn.suite=recreate-bench"


def run(files: int = 10_000, runs: int = 5) -> dict[str, float]:
    from core.app import Cairn
    from core.sandbox.base import DEFAULT_IMAGE
    from core.sandbox.docker import DockerBackend

    tree = small_file_tree(files)
    with tempfile.TemporaryDirectory(prefix="cairn-bench-recreate-") as tmp:
        tmp_path = Path(tmp)
        data = tmp_path / "data"
        app = Cairn(data, backend=DockerBackend(data))
        try:
            made = app.tasks.new(tree, title="bench")
            ws = app.tasks.workspace_of(made.task)
            snap = app.snapshots.take(made.task.id)
            policy = app.tasks.policy_of(ws)
            app.sandboxes.ensure(ws, policy, snap.id)
            ours, base = [], []
            for i in range(runs):
                # What a resume meets: the container and the workspace folder are gone.
                record = app.ctx.store.session_for(ws.id)
                app.sandboxes.backend.remove(record.container_id)
                shutil.rmtree(ws.root)
                started = time.perf_counter()
                app.snapshots.restore_workspace(ws, snap.id)
                outcome = app.sandboxes.ensure(ws, policy, snap.id)
                ours.append(time.perf_counter() - started)
                assert outcome.path == "recreated" and outcome.record.snapshot_id == snap.id

                dst = tmp_path / f"copy{i}"
                started = time.perf_counter()
                subprocess.run(["cp", "-a", str(tree), str(dst)], check=True)
                cid = subprocess.run(
                    ["docker", "run", "-d", "--label", LABEL, DEFAULT_IMAGE, "sleep", "infinity"],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.strip()
                base.append(time.perf_counter() - started)
                subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
                shutil.rmtree(dst)
        finally:
            for c in app.sandboxes.backend.list_sessions():
                app.sandboxes.backend.remove(c.container_id)
            app.close()
    ratio = median(ours) / median(base)
    print_table(
        f"recreate from snapshot, {files:,} files (medians of {runs})",
        [
            ("materialize snapshot + create sandbox", f"{median(ours) * 1000:.0f} ms", "", ""),
            ("cp -a + docker run -d", f"{median(base) * 1000:.0f} ms", "", ""),
            ("  ratio", f"{ratio:.2f}", f"<= {TARGET}", verdict(ratio <= TARGET)),
        ],
    )
    return {"ours": median(ours), "baseline": median(base), "ratio": ratio}


def test_recreate_from_snapshot_against_copy_and_run(docker_client):
    run(files=10_000 if full_run() else 2_000, runs=5 if full_run() else 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    run(args.files, args.runs)


if __name__ == "__main__":
    main()
