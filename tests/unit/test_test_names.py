"""Test files are imported by their base name (the test folders are not packages): two with the
same name in different folders stop the whole run at collection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_name():
    names = Counter(p.name for p in TESTS.glob("*/test_*.py") if "node_modules" not in p.parts)
    assert [name for name, n in names.items() if n > 1] == []
