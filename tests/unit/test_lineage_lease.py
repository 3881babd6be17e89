"""The lineage lease: one operation per lineage, stale holders taken over, fencing tokens."""

import subprocess
import sys
from pathlib import Path

import pytest

from core import lineage
from core.errors import Conflict
from core.models import Source, Task
from core.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "cairn.db")
    s.add_source(Source("src_1", "/r", "plain", "/v", 1.0))
    s.add_task(Task("t_root", "root", "src_1", None, "shell", "", None, "new", None, 1.0))
    s.add_task(Task("t_kid", "kid", "src_1", None, "shell", "", "t_root", "fork", None, 2.0))
    s.add_task(Task("t_grandkid", "gk", "src_1", None, "shell", "", "t_kid", "continue", None, 3.0))
    return s


def test_the_lineage_is_walked_from_any_member(store):
    assert lineage.root_of(store, "t_grandkid") == "t_root"
    assert [t.id for t in lineage.members(store, "t_root")] == ["t_root", "t_kid", "t_grandkid"]


def test_a_held_lease_refuses_a_second_holder_and_says_why(store):
    lease = lineage.acquire(store, "t_root")
    with pytest.raises(Conflict, match="in progress"):
        lineage.acquire(store, "t_root")
    lease.release()
    again = lineage.acquire(store, "t_root")
    assert again.token == lease.token + 1  # every acquisition fences off the previous holder
    again.release()


def test_a_crashed_holders_lease_is_stale_and_taken_over(store, tmp_path):
    # A process takes the lease and dies without releasing it.
    code = (
        "import sys; from core.store import Store; from core import lineage; "
        "lineage.acquire(Store(sys.argv[1]), 't_root'); import os; os._exit(0)"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "cairn.db")],
        check=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    row = store.query_one("SELECT holder, token FROM leases WHERE lineage_id = 't_root'")
    assert row["holder"] and row["token"] == 1
    lease = lineage.acquire(store, "t_root")
    assert lease.token == 2
    lease.release()


def test_a_fenced_off_holder_cannot_go_on(store):
    old = lineage.acquire(store, "t_root")
    # Someone decided the holder was stale and took over.
    store.query("UPDATE leases SET holder = 'elsewhere:1:1', token = token + 1")
    with pytest.raises(Conflict, match="lost the lease"):
        old.verify()
