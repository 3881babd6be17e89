"""Fixtures of the end-to-end tests: a data folder whose sandboxes, judge and proxies are
stopped afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import release_data_dir


@pytest.fixture
def e2e_data(tmp_path: Path, docker_client):
    data = tmp_path / "data"
    yield data
    release_data_dir(data, docker_client)
