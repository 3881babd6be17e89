"""Fixtures the sandbox integration tests share: the sandbox image and a task on a fresh data
folder, cleaned up (containers, egress proxies, the approvals judge) afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core import approvals
from core.sandbox import egress
from tests.support import as_json, cairnctl

IMAGE = os.environ.get("CAIRN_SANDBOX_IMAGE", "cairn-sandbox:1")


@pytest.fixture(scope="session")
def sandbox_image(docker_client):
    try:
        docker_client.images.get(IMAGE)
    except Exception:
        pytest.skip(f"the sandbox image {IMAGE} is not built (tests/images/build.sh builds it)")
    return IMAGE


@pytest.fixture
def task(tmp_path, sandbox_image, docker_client):
    """(data folder, task id, workspace root) of a new task on a small plain folder."""
    data = tmp_path / "data"
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("hello\n")
    made = as_json(cairnctl(data, "new", str(src), "--json"))
    yield data, made["task_id"], Path(made["workspace_root"])
    approvals.stop_judge(data.resolve())
    for c in docker_client.containers.list(all=True,
                                           filters={"label": f"cairn.data_dir={data.resolve()}"}):
        c.remove(force=True)
    for sock in (data / "egress").glob("*/sandbox/egress.sock"):
        egress.stop(sock)
