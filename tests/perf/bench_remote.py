"""A sandbox on the SSH remote host against one on the local engine, side by side, in one run.

    .venv/bin/python tests/perf/bench_remote.py [--runs 5]
    pytest tests/perf/bench_remote.py -s

Two figures, each measured on both hosts in alternation (local, remote, local, ...) so a busy
machine weighs on both alike:
- Start to the first command: from `cairnctl run` of a new task (its sandbox made on the host:
  on the remote one, its volumes made and filled over SSH) to the moment the run's first command
  prints the time in the sandbox.
- One-file write to the local revision: a followed run writes one file; from the time the
  sandbox printed just before writing it to the revision holding it being stored here (on the
  remote host: the watcher there, the mirror's pull, then the local recorder).
Both hosts are on this machine (scripts/remote-host.sh), so their clocks are one. Printed, not
asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.perf._common import median  # noqa: E402

HOST = "far"


def _cairnctl(data: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cairnctl {' '.join(args)}: {done.stderr.strip()}")
    return json.loads(done.stdout) if "--json" in args else {}


def _one_round(data: Path, src: Path, host: str) -> tuple[float, float]:
    task = _cairnctl(data, "new", str(src), "--host", host, "--json")["task_id"]
    started = time.time()
    _cairnctl(
        data,
        "run",
        task,
        "--json",
        "--step",
        "date +%s.%N",
        "--step",
        "sleep 2; date +%s.%N; echo x > one.txt; sleep 3",
    )
    ws = _cairnctl(data, "show", task, "--json")["workspace_id"]
    stdout = next((data / "runs" / ws).glob("*/stdout")).read_text().split()
    stamps = [float(w) for w in stdout if w.replace(".", "", 1).isdigit() and float(w) > 1e9]
    first, wrote = stamps[0], stamps[1]
    revisions = _cairnctl(data, "revisions", task, "--json")["revisions"]
    recorded = min(r["created_at"] for r in revisions if "one.txt" in (r.get("paths") or []))
    return first - started, recorded - wrote


def run(runs: int = 5) -> dict[str, tuple[float, float]]:
    from tests.integration.remote_support import private_key_copy, remote_settings

    settings = remote_settings()
    with tempfile.TemporaryDirectory(prefix="cairn-bench-remote-") as tmp:
        tmp_path = Path(tmp)
        key = private_key_copy(settings, tmp_path)
        data = tmp_path / "data"
        src = tmp_path / "src"
        src.mkdir()
        for i in range(100):
            (src / f"f{i}.txt").write_text(f"file {i}\n" * 20)
        value = (
            f"docker {settings['CAIRN_TEST_SSH_HOST']} key={key} "
            f"known_hosts={settings['CAIRN_TEST_SSH_KNOWN_HOSTS']}"
        )
        subprocess.run(
            [sys.executable, "-m", "core.cli", "--data-dir", str(data), "config", "set",
             f"hosts.{HOST}", value],
            check=True, capture_output=True, cwd=ROOT,
        )  # fmt: skip
        check = _cairnctl(data, "host", "check", HOST, "--json")
        if check.get("state") != "ok":
            _cairnctl(data, "host", "send-image", HOST, "--json")
        figures: dict[str, list[tuple[float, float]]] = {"local": [], HOST: []}
        try:
            for _ in range(runs):
                for host in ("local", HOST):
                    figures[host].append(_one_round(data, src, host))
        finally:
            _release(data, settings)
    out = {}
    for host, rounds in figures.items():
        out[host] = (median([r[0] for r in rounds]), median([r[1] for r in rounds]))
        out[f"{host} range"] = (
            max(r[0] for r in rounds) - min(r[0] for r in rounds),
            max(r[1] for r in rounds) - min(r[1] for r in rounds),
        )
    return out


def _release(data: Path, settings: dict[str, str]) -> None:
    import docker

    label: dict[str, Any] = {"label": f"cairn.data_dir={data.resolve()}"}
    for address in (None, f"unix://{settings['CAIRN_TEST_REMOTE_SOCKET']}"):
        client = docker.DockerClient(base_url=address) if address else docker.from_env()
        for c in client.containers.list(all=True, filters=label):
            c.remove(force=True)
        for v in client.volumes.list(filters=label):
            v.remove(force=True)
        client.close()


def report(figures: dict[str, tuple[float, float]]) -> None:
    local, remote = figures["local"], figures[HOST]
    lr, rr = figures["local range"], figures[f"{HOST} range"]
    print("\nremote host over SSH against the local engine (medians; spread = max - min)")
    print(f"{'':40}{'local engine':>18}{'remote over SSH':>20}{'ratio':>8}")
    for i, what in enumerate(("start to first command", "one-file write to local revision")):
        print(
            f"{what:40}{local[i]:>8.2f} s ±{lr[i]:>5.2f}{remote[i]:>10.2f} s ±{rr[i]:>5.2f}"
            f"{remote[i] / local[i]:>7.2f}x"
        )


def test_remote_against_local(docker_client, sandbox_image):
    report(run(runs=3))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    report(run(parser.parse_args().runs))
