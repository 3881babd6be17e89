"""Fixtures the sandbox integration tests share: the sandbox image and a task on a fresh data
folder, cleaned up (containers, egress proxies, the approvals judge) afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import as_json, cairnctl, release_data_dir


@pytest.fixture
def task(tmp_path, sandbox_image, docker_client):
    """(data folder, task id, workspace root) of a new task on a small plain folder."""
    data = tmp_path / "data"
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("hello\n")
    made = as_json(cairnctl(data, "new", str(src), "--json"))
    yield data, made["task_id"], Path(made["workspace_root"])
    release_data_dir(data, docker_client)
