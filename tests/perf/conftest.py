"""Benchmarks live in bench_*.py files: collect those too, so `pytest tests/perf -s` runs them."""

from __future__ import annotations

import pytest


def pytest_collect_file(file_path, parent):
    # A file named on the command line is collected by pytest itself; only add the ones found by
    # walking the folder, or it would run twice.
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None
