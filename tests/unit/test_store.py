"""The store: schema migrations, transactions and the rows of the workspace engine."""

import sqlite3
import threading
import time

import pytest

from core.errors import CairnError, NotFound
from core.models import Revision, SessionRecord, Source, Task, Workspace
from core.store import MIGRATIONS, SCHEMA_VERSION, Store


def _seed(store: Store, *, task: bool = True) -> None:
    store.add_source(Source("src_1", "/home/me/repo", "git", "/data/vault/src_1.git", 1.0))
    store.add_workspace(
        Workspace(
            "ws_1",
            "src_1",
            "/data/workspaces/ws_1",
            "b" * 40,
            "h" * 40,
            "cairn/x",
            None,
            "prepared",
            created_at=1.0,
            updated_at=1.0,
        )
    )
    if task:
        store.add_task(Task("t_1", "fix it", "src_1", "ws_1", "shell", "", None, "new", None, 1.0))


def test_new_database_is_at_latest_schema_in_wal_mode(tmp_path):
    store = Store(tmp_path / "cairn.db")
    assert store.schema_version == SCHEMA_VERSION
    assert store.query_one("PRAGMA journal_mode")[0] == "wal"
    tables = {r[0] for r in store.query("SELECT name FROM sqlite_master WHERE type='table'")}
    for table in (
        "tasks",
        "workspaces",
        "revisions",
        "snapshots",
        "runs",
        "checkpoints",
        "session_states",
        "approvals",
        "credential_grants",
        "artifacts",
        "events",
    ):
        assert table in tables


def test_database_from_an_earlier_schema_is_migrated_keeping_its_rows(tmp_path):
    path = tmp_path / "cairn.db"
    old = Store(path, migrate_to=1)
    assert old.schema_version == 1
    _seed(old, task=False)
    with old.transaction() as conn:  # the task as schema 1 had it (no later columns)
        conn.execute(
            "INSERT INTO tasks (id, title, source_id, workspace_id, engine, instructions, "
            "parent_task_id, source, from_revision, created_at) "
            "VALUES ('t_1', 'fix it', 'src_1', 'ws_1', 'shell', '', NULL, 'new', NULL, 1.0)"
        )
    old.close()
    assert "runs" not in {
        r[0]
        for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='table'")
    }

    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    assert store.get_task("t_1").title == "fix it"
    assert store.get_task("t_1").host is None  # made before sandbox hosts
    assert store.get_workspace("ws_1").head_commit == "h" * 40
    store.query("SELECT * FROM runs")  # the new tables exist


def test_database_from_a_newer_cairn_is_refused(tmp_path):
    path = tmp_path / "cairn.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(CairnError, match="newer Cairn"):
        Store(path)


def test_a_failed_transaction_writes_nothing(tmp_path):
    store = Store(tmp_path / "cairn.db")
    with pytest.raises(RuntimeError), store.transaction():
        store.add_source(Source("src_1", "/a", "plain", "/v", 1.0))
        raise RuntimeError("boom")
    assert store.list_sources() == []


def test_revisions_get_sequence_numbers_and_move_the_workspace_head(tmp_path):
    store = Store(tmp_path / "cairn.db")
    _seed(store)
    for i, sha in enumerate(["a" * 40, "c" * 40, "d" * 40]):
        rev = store.add_revision(
            Revision(sha, "ws_1", None, "t" * 40, "watch", None, 1, time.time())
        )
        assert rev.seq == i + 1
    again = store.add_revision(Revision("c" * 40, "ws_1", None, "t" * 40, "watch", None, 1, 0.0))
    assert again.seq == 2  # a known revision is not added twice
    assert [r.id[0] for r in store.list_revisions("ws_1")] == ["a", "c", "d"]
    assert store.get_workspace("ws_1").current_revision == "d" * 40
    assert store.get_revision("ws_1", "ccc").id == "c" * 40
    with pytest.raises(NotFound):
        store.get_revision("ws_1", "e")


def test_task_lookup_by_prefix(tmp_path):
    store = Store(tmp_path / "cairn.db")
    _seed(store)
    store.add_task(Task("t_2", "other", "src_1", "ws_1", "shell", "", "t_1", "fork", None, 2.0))
    assert store.find_task("t_1").id == "t_1"
    with pytest.raises(NotFound, match="matches 2 tasks"):
        store.find_task("t_")
    with pytest.raises(NotFound, match="no task"):
        store.find_task("zzz")


def test_writes_from_many_threads_are_serialised(tmp_path):
    store = Store(tmp_path / "cairn.db")
    _seed(store)
    errors = []

    def worker(n):
        try:
            for i in range(20):
                store.add_revision(
                    Revision(
                        f"{n:02d}{i:038d}", "ws_1", None, "t" * 40, "watch", None, 1, time.time()
                    )
                )
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    seqs = [r.seq for r in store.list_revisions("ws_1")]
    assert seqs == list(range(1, 81))


def test_a_session_is_found_by_its_id_alone(tmp_path):
    store = Store(tmp_path / "cairn.db")
    _seed(store)
    for n in (1, 2):
        store.put_session(SessionRecord(f"ss_{n}", "ws_1", "docker", f"c{n}", f"cairn-{n}", None))
    assert store.get_session("ss_2").container_id == "c2"
    assert store.get_session("ss_1").container_name == "cairn-1"
    with pytest.raises(NotFound, match="no sandbox session with id 'ss_'"):
        store.get_session("ss_")  # an id, not a prefix
