"""Sandbox sessions through Cairn: status, stop, reconcile, the tool contract, the allowlist."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import pytest

from tests.integration.test_runs_resume import (
    interrupt_by_removing_container,
    latest_run,
    session,
    start_steps,
    step_of,
    wait_for,
)
from tests.support import as_json, cairnctl, cairnctl_env, no_limits_reason, one_error_line

pytestmark = pytest.mark.docker


def test_status_lists_sessions_and_snapshots_and_stop_stops_both(task, docker_client):
    data, task_id, _ = task
    start_steps(data, task_id, "sleep 60")
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 0, what="the run to start")
    st = as_json(cairnctl(data, "status", "--json"))
    (s,) = st["sessions"]
    assert s["state"] == "running" and s["image"].startswith("sha256:") and s["age_s"] >= 0
    assert st["snapshots"] and all(
        x["restorable"] and x["size"] is not None for x in st["snapshots"]
    )

    t0 = time.time()
    res = as_json(cairnctl(data, "stop", task_id, "--json"))
    assert res["run"] and res["sandbox"] and time.time() - t0 < 30
    assert latest_run(data, task_id).state == "cancelled"
    assert session(data)["state"] == "stopped"
    assert as_json(cairnctl(data, "show", task_id, "--json"))["state"] == "prepared"
    # The next run brings the same sandbox back.
    res = as_json(cairnctl(data, "run", task_id, "--json", "--", "true"))
    assert res["state"] == "succeeded"
    assert session(data)["state"] == "running" and session(data)["generation"] == s["generation"]


def test_a_running_sandbox_has_cpu_and_memory_figures(task, docker_client):
    if no_limits_reason(docker_client):
        pytest.skip(no_limits_reason(docker_client))
    from core.app import Cairn
    from core.errors import NotFound

    data, task_id, _ = task
    start_steps(data, task_id, "sleep 60")
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 0, what="the run to start")
    with Cairn(data) as cairn:
        stats = cairn.views.session_stats(session(data)["session_id"])
        assert stats["running"] and stats["uptime_s"] > 0
        assert stats["memory_bytes"] > 0 and stats["memory_limit_bytes"] > 0
        assert stats["cpu_percent"] is not None and stats["pids"] >= 1
        with pytest.raises(NotFound):
            cairn.views.session_stats("ses_nonexistent")
        cairn.runs.stop(task_id)
        stopped = cairn.views.session_stats(session(data)["session_id"])
        assert stopped["running"] is False and "stopped" in stopped["note"]
        assert session(data)["state"] == "stopped"  # asking did not start it again


def test_reconcile_settles_runs_and_lists_orphans_without_deleting(task, docker_client):
    data, task_id, _ = task
    finished = start_steps(data, task_id, "echo hi")
    run = latest_run(data, task_id)
    wait_for(
        lambda: (data / "runs" / run.workspace_id / run.exec_id / "exit_code").exists(),
        what="the run to end",
    )
    orphan = docker_client.containers.run(
        "cairn-test-busybox:1",
        ["sleep", "300"],
        detach=True,
        labels={"cairn.managed": "1", "cairn.data_dir": str(data.resolve())},
        network_mode="none",
    )
    try:
        report = as_json(cairnctl(data, "reconcile", "--json"))
        assert finished["run_id"] in report["finished"]
        assert latest_run(data, task_id).state == "succeeded"
        assert orphan.name in report["orphan_containers"]
        orphan.reload()
        assert orphan.status == "running"  # listed, never removed

        start_steps(data, task_id, "sleep 60")
        wait_for(lambda: step_of(data, latest_run(data, task_id)) == 0, what="step 0")
        docker_client.containers.get(session(data)["container"]).remove(force=True)
        report = as_json(cairnctl(data, "reconcile", "--json"))
        assert latest_run(data, task_id).id in report["interrupted"]
        assert session(data)["state"] == "gone"
    finally:
        orphan.remove(force=True)


@pytest.fixture
def image_without_git(sandbox_image, docker_client) -> str:
    """The sandbox image less git: a changed tool contract, still able to supervise a run."""
    tag = "cairn-test-nogit:1"
    try:
        docker_client.images.get(tag)
    except Exception:
        maker = docker_client.containers.run(
            sandbox_image, ["rm", "-f", "/usr/bin/git"], user="0", detach=True, network_mode="none"
        )
        try:
            assert maker.wait(timeout=60)["StatusCode"] == 0
            maker.commit(repository="cairn-test-nogit", tag="1")
        finally:
            maker.remove(force=True)
    return tag


def test_a_changed_tool_contract_is_refused_until_accepted(task, docker_client, image_without_git):
    data, task_id, ws = task
    start_steps(data, task_id, "sleep 10", "echo done > done.txt")
    wait_for(lambda: step_of(data, latest_run(data, task_id)) == 0, what="step 0")
    interrupt_by_removing_container(data, task_id, docker_client)
    other = cairnctl_env(CAIRN_SANDBOX_IMAGE=image_without_git)
    line = one_error_line(cairnctl(data, "resume", task_id, check=False, env=other))
    assert "tools changed" in line and "git" in line and "--accept-tool-change" in line
    assert latest_run(data, task_id).state == "interrupted"
    res = as_json(cairnctl(data, "resume", task_id, "--accept-tool-change", "--json", env=other))
    assert res["state"] == "succeeded" and (ws / "done.txt").exists()
    assert any(p.startswith("tools: changed") for p in res["report"]["path"])


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"hello from {self.server.server_address[1]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _serve() -> http.server.HTTPServer:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_allowlist_reaches_only_listed_endpoints(task, docker_client):
    data, task_id, ws = task
    allowed, other = _serve(), _serve()
    try:
        a, b = allowed.server_address[1], other.server_address[1]
        cairnctl(data, "policy", task_id, "--network", "allowlist", "--allow", f"127.0.0.1:{a}")
        fetch = (
            "import sys, urllib.request\n"
            "try:\n"
            "    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
            "except Exception as e:\n"
            "    print('refused', type(e).__name__)\n"
        )
        (ws / "fetch.py").write_text(fetch)
        res = as_json(
            cairnctl(
                data,
                "run",
                task_id,
                "--json",
                "--step",
                f"python3 fetch.py http://127.0.0.1:{a}/ > a.txt",
                "--step",
                f"python3 fetch.py http://127.0.0.1:{b}/ > b.txt",
                "--step",
                f"env -u NO_PROXY -u no_proxy python3 fetch.py http://127.0.0.1:{b}/ > c.txt",
                "--step",
                "grep -c : /proc/net/dev > ifaces.txt",
            )
        )
        assert res["state"] == "succeeded", res
        assert (ws / "a.txt").read_text().strip() == f"hello from {a}"
        assert (ws / "b.txt").read_text().startswith("refused")  # no forward, no network
        assert (ws / "c.txt").read_text().startswith("refused")  # through the proxy: 403
        assert (ws / "ifaces.txt").read_text().strip() == "1"  # loopback only
        log = next((data / "egress").glob("*/egress.log")).read_text()
        assert f"127.0.0.1:{a}" in log and f"127.0.0.1:{b}" in log and "refused" in log
    finally:
        allowed.shutdown()
        other.shutdown()


def test_the_host_backend_is_used_only_when_chosen_and_says_it_is_unsafe(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    data = tmp_path / "data"
    made = as_json(cairnctl(data, "new", str(src), "--json"))
    env = cairnctl_env(CAIRN_BACKEND="host")
    line = one_error_line(
        cairnctl(data, "run", made["task_id"], "--", "true", check=False, env=env)
    )
    assert "network" in line  # the default policy (network none) cannot be honoured on the host
    cairnctl(data, "policy", made["task_id"], "--network", "open")
    res = as_json(
        cairnctl(
            data,
            "run",
            made["task_id"],
            "--json",
            "--",
            "sh",
            "-c",
            "echo from-host > h.txt",
            env=env,
        )
    )
    assert res["state"] == "succeeded"
    assert (Path(made["workspace_root"]) / "h.txt").read_text() == "from-host\n"
    st = as_json(cairnctl(data, "status", "--json", env=env))
    assert st["sessions"][0]["backend"] == "host" and st["sessions"][0]["unsafe"] is True
