"""Benchmarks live in bench_*.py files: collect those too, so `pytest tests/perf -s` runs them."""

from __future__ import annotations

import pytest

from gui.jobs import share_the_interpreter_with_the_gui

# The window is measured as the app runs it: with the app's interpreter switch interval.
share_the_interpreter_with_the_gui()


def pytest_collect_file(file_path, parent):
    # A file named on the command line is collected by pytest itself; only add the ones found by
    # walking the folder, or it would run twice.
    if (
        file_path.suffix == ".py"
        and file_path.name.startswith("bench_")
        and not parent.session.isinitpath(file_path)
    ):
        return pytest.Module.from_parent(parent, path=file_path)
    return None
