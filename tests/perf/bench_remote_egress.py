"""The allowlist's path out of a sandbox on the SSH remote host (forwarder, relay, the exec's
stream over SSH, the egress tunnel, the proxy here) against a sandbox on the local engine
(forwarder, mounted socket, proxy), side by side in one run.

    .venv/bin/python tests/perf/bench_remote_egress.py [--runs 3]
    pytest tests/perf/bench_remote_egress.py -s

Both sandboxes reach one HTTP server on this machine's loopback through a same-port forward,
each in one run per round, the hosts alternating (local, remote, local, ...) so a busy machine
weighs on both alike:
- A small request: 30 requests of 100 bytes, each on a new connection; the median.
- A large answer: 16 MiB in one response; its rate.
Printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.perf._common import median  # noqa: E402
from tests.perf.bench_remote import HOST, _cairnctl, _release  # noqa: E402

BIG = 16 * 1024 * 1024
PROBE = """
import json, sys, time, urllib.request
port = sys.argv[1]
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
times = []
for _ in range(30):
    t = time.perf_counter()
    direct.open(f"http://127.0.0.1:{port}/small", timeout=30).read()
    times.append(time.perf_counter() - t)
times.sort()
t = time.perf_counter()
size = len(direct.open(f"http://127.0.0.1:{port}/big", timeout=120).read())
took = time.perf_counter() - t
print(json.dumps({"small_ms": times[len(times) // 2] * 1000, "big_mib_s": size / took / 2**20}))
"""


class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        body = b"x" * (BIG if self.path == "/big" else 100)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def _one_round(data: Path, task: str, port: int) -> tuple[float, float]:
    done = _cairnctl(data, "run", task, "--json", "--", "python3", "probe.py", str(port))
    if done.get("state") != "succeeded":
        raise RuntimeError(f"the probe run failed: {done}")
    ws = _cairnctl(data, "show", task, "--json")["workspace_id"]
    runs = sorted((data / "runs" / ws).glob("r_*/stdout"), key=lambda p: p.stat().st_mtime)
    figures = json.loads(runs[-1].read_text().strip().splitlines()[-1])
    return figures["small_ms"], figures["big_mib_s"]


def run(runs: int = 3) -> dict[str, list[tuple[float, float]]]:
    from tests.integration.remote_support import private_key_copy, remote_settings

    settings = remote_settings()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    with tempfile.TemporaryDirectory(prefix="cairn-bench-egress-") as tmp:
        tmp_path = Path(tmp)
        key = private_key_copy(settings, tmp_path)
        data = tmp_path / "data"
        value = (
            f"docker {settings['CAIRN_TEST_SSH_HOST']} key={key} "
            f"known_hosts={settings['CAIRN_TEST_SSH_KNOWN_HOSTS']}"
        )
        subprocess.run(
            [sys.executable, "-m", "core.cli", "--data-dir", str(data), "config", "set",
             f"hosts.{HOST}", value],
            check=True, capture_output=True, cwd=ROOT,
        )  # fmt: skip
        if _cairnctl(data, "host", "check", HOST, "--json").get("state") != "ok":
            _cairnctl(data, "host", "send-image", HOST, "--json")
        tasks = {}
        for host in ("local", HOST):
            src = tmp_path / f"src-{host}"
            src.mkdir()
            (src / "probe.py").write_text(PROBE)
            tasks[host] = _cairnctl(data, "new", str(src), "--host", host, "--json")["task_id"]
            _cairnctl(
                data, "policy", tasks[host], "--network", "allowlist", "--allow",
                f"127.0.0.1:{port}", "--json",
            )  # fmt: skip
        figures: dict[str, list[tuple[float, float]]] = {"local": [], HOST: []}
        try:
            for host in ("local", HOST):  # each sandbox made before the rounds
                _cairnctl(data, "run", tasks[host], "--json", "--", "true")
            for _ in range(runs):
                for host in ("local", HOST):
                    figures[host].append(_one_round(data, tasks[host], port))
        finally:
            from core.sandbox import egress

            for sock in (data / "egress").glob("*/sandbox/egress.sock"):
                egress.stop(sock)
            _release(data, settings)
            server.shutdown()
    return figures


def report(figures: dict[str, list[tuple[float, float]]]) -> None:
    print("\nthe allowlist from the SSH host against the local engine (medians; range)")
    print(f"{'':34}{'local engine':>22}{'remote over SSH':>24}{'ratio':>8}")
    for i, (what, unit) in enumerate((("small request", "ms"), ("16 MiB answer", "MiB/s"))):
        local = [r[i] for r in figures["local"]]
        there = [r[i] for r in figures[HOST]]
        lm, rm = median(local), median(there)
        print(
            f"{what:34}{lm:>9.1f} {unit:<5} {min(local):>5.1f}-{max(local):<5.1f}"
            f"{rm:>9.1f} {unit:<5} {min(there):>5.1f}-{max(there):<7.1f}{rm / lm:>7.2f}x"
        )


def test_remote_egress_against_local(docker_client, sandbox_image):
    report(run(runs=3))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    report(run(parser.parse_args().runs))
