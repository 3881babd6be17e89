"""Fixtures the unit tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.vault import Vault


@pytest.fixture
def vault(tmp_path: Path):
    """A new, empty vault in the test's folder (a test file may define its own)."""
    v = Vault.open_or_create(tmp_path / "vault.git")
    yield v
    v.close()
