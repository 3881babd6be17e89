"""The store: Cairn's SQLite database of tasks, workspaces, revisions, snapshots, runs and more.

Owns the schema, its migrations and every read and write of rows; file contents live in the vault.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from core.errors import CairnError, IllegalTransition, NotFound
from core.models import Checkpoint, Revision, Run, SessionRecord, Snapshot, Source, Task, Workspace

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")  # a row class of core.models

# Each migration moves the schema from version N-1 to N. Never edit a released one: append.
MIGRATIONS: list[str] = [
    # 1: the workspace engine
    """
    CREATE TABLE sources (
        id TEXT PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        vault_path TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        source_id TEXT NOT NULL REFERENCES sources(id),
        root TEXT NOT NULL,
        base_revision TEXT NOT NULL,
        head_commit TEXT,
        branch TEXT NOT NULL,
        current_revision TEXT,
        state TEXT NOT NULL,
        policy TEXT NOT NULL DEFAULT '{}',
        mounts TEXT NOT NULL DEFAULT '[]',
        quota_bytes INTEGER,
        expires_at REAL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL,
        source_id TEXT NOT NULL REFERENCES sources(id),
        workspace_id TEXT REFERENCES workspaces(id),
        engine TEXT NOT NULL,
        instructions TEXT NOT NULL DEFAULT '',
        parent_task_id TEXT REFERENCES tasks(id),
        source TEXT NOT NULL,
        from_revision TEXT,
        created_at REAL NOT NULL
    );
    CREATE INDEX tasks_parent ON tasks(parent_task_id);
    CREATE TABLE revisions (
        id TEXT NOT NULL,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        seq INTEGER NOT NULL,
        parent_id TEXT,
        tree TEXT NOT NULL,
        trigger TEXT NOT NULL,
        run_id TEXT,
        files_changed INTEGER NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (workspace_id, id)
    );
    CREATE UNIQUE INDEX revisions_seq ON revisions(workspace_id, seq);
    CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        revision_id TEXT NOT NULL,
        tree TEXT NOT NULL,
        state TEXT NOT NULL,
        image_digest TEXT,
        setup_command TEXT,
        engine_home_archive TEXT,
        created_at REAL NOT NULL
    );
    CREATE INDEX snapshots_workspace ON snapshots(workspace_id);
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        subject TEXT,
        payload TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL
    );
    """,
    # 2: sandboxes, runs, checkpoints, credentials, approvals, artifacts
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL REFERENCES tasks(id),
        state TEXT NOT NULL,
        state_version INTEGER NOT NULL DEFAULT 0,
        engine TEXT NOT NULL,
        spec TEXT NOT NULL DEFAULT '{}',
        engine_session_id TEXT,
        exit_code INTEGER,
        note TEXT,
        output_offset INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL
    );
    CREATE INDEX runs_task ON runs(task_id);
    CREATE TABLE checkpoints (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        run_state_version INTEGER NOT NULL,
        workspace_ref TEXT NOT NULL,
        tree TEXT NOT NULL,
        snapshot_id TEXT NOT NULL REFERENCES snapshots(id),
        pending_step TEXT,
        engine_session_id TEXT,
        tool_contract TEXT NOT NULL DEFAULT '{}',
        policy_version INTEGER NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX checkpoints_run ON checkpoints(run_id, run_state_version);
    CREATE TABLE session_states (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        backend TEXT NOT NULL,
        container_id TEXT,
        container_name TEXT,
        image_digest TEXT,
        mounts TEXT NOT NULL DEFAULT '[]',
        generation INTEGER NOT NULL DEFAULT 0,
        snapshot_id TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE credential_grants (
        id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL REFERENCES tasks(id),
        secret_name TEXT NOT NULL,
        env_var TEXT NOT NULL,
        scope TEXT NOT NULL DEFAULT 'lineage',
        created_at REAL NOT NULL,
        revoked_at REAL
    );
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        command TEXT NOT NULL,
        rule TEXT,
        reason TEXT,
        state TEXT NOT NULL,
        decided_by TEXT,
        decided_at REAL,
        policy_version INTEGER,
        created_at REAL NOT NULL,
        timeout_at REAL
    );
    CREATE TABLE artifacts (
        id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL REFERENCES tasks(id),
        run_id TEXT,
        revision_id TEXT,
        path TEXT,
        sha256 TEXT NOT NULL,
        provenance TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL
    );
    CREATE TABLE leases (
        lineage_id TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        token INTEGER NOT NULL,
        acquired_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL
    );
    """,
    # 3: run attempts, resume reports, session status and launch specs
    """
    ALTER TABLE runs ADD COLUMN stderr_offset INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN workspace_id TEXT;
    ALTER TABLE runs ADD COLUMN resume_report TEXT;
    ALTER TABLE session_states ADD COLUMN status TEXT NOT NULL DEFAULT 'live';
    ALTER TABLE session_states ADD COLUMN policy_version INTEGER;
    ALTER TABLE session_states ADD COLUMN launch_specs TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE session_states ADD COLUMN policy TEXT NOT NULL DEFAULT '{}';
    CREATE INDEX session_states_workspace ON session_states(workspace_id);
    """,
    # 4: what an approval was about beyond its command line (the program start's argv, cwd,
    # the script line it came from)
    """
    ALTER TABLE approvals ADD COLUMN details TEXT NOT NULL DEFAULT '{}';
    """,
    # 5: what a run used of its model (tokens, cost), recorded once it ended; a snapshot's name
    """
    CREATE TABLE run_usage (
        run_id TEXT PRIMARY KEY,
        engine TEXT NOT NULL,
        models TEXT NOT NULL DEFAULT '[]',
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL,
        cost_source TEXT,
        sessions TEXT NOT NULL DEFAULT '{}',
        recorded_at REAL NOT NULL
    );
    ALTER TABLE snapshots ADD COLUMN name TEXT;
    """,
    # 6: the sandbox host a task chose and the one its sandbox session runs on (NULL: made
    # before hosts; its sandbox is where its backend says, the local Docker engine for docker)
    """
    ALTER TABLE tasks ADD COLUMN host TEXT;
    ALTER TABLE session_states ADD COLUMN host TEXT;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)

_JSON_FIELDS = {"policy", "mounts", "spec", "tool_contract", "resume_report", "launch_specs"}


def _row_to(cls: type[T], row: sqlite3.Row) -> T:
    names = {f.name for f in fields(cls)}
    values: dict[str, Any] = {}
    for key in row.keys():  # noqa: SIM118 - a sqlite3.Row iterates over values, not keys
        if key in names:
            value = row[key]
            if key in _JSON_FIELDS and isinstance(value, str):
                value = json.loads(value)
            values[key] = value
    return cls(**values)


def _to_row(obj: DataclassInstance) -> dict[str, Any]:
    data = asdict(obj)
    for key in _JSON_FIELDS & data.keys():
        data[key] = json.dumps(data[key], sort_keys=True)
    return data


class Store:
    """One SQLite database in WAL mode, shared by the GUI, the recorder threads and `cairnctl`.

    Each thread gets its own connection; writes run in `transaction()` and are serialised
    within the process (SQLite serialises across processes).
    """

    def __init__(self, path: Path, *, migrate_to: int | None = None):
        self.path = Path(path)
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._migrate(SCHEMA_VERSION if migrate_to is None else migrate_to)

    # -- connections -------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, timeout=30, isolation_level=None, check_same_thread=False
                )
                conn.row_factory = sqlite3.Row
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA foreign_keys=ON")
                conn.execute("PRAGMA busy_timeout=30000")
            except sqlite3.DatabaseError as exc:
                raise CairnError(f"cannot open the database {self.path}: {exc}") from exc
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: all or nothing, serialised against other writers."""
        conn = self._connect()
        with self._write_lock:
            if conn.in_transaction:  # nested: join the outer transaction
                yield conn
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    def query(self, sql: str, params: tuple | dict = ()) -> list[sqlite3.Row]:
        return self._connect().execute(sql, params).fetchall()

    def query_one(self, sql: str, params: tuple | dict = ()) -> sqlite3.Row | None:
        return self._connect().execute(sql, params).fetchone()

    # -- schema ------------------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        return self._connect().execute("PRAGMA user_version").fetchone()[0]

    def _migrate(self, target: int) -> None:
        conn = self._connect()
        with self._write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = conn.execute("PRAGMA user_version").fetchone()[0]
                if current > SCHEMA_VERSION:
                    raise CairnError(
                        f"the database {self.path} was written by a newer Cairn "
                        f"(schema {current}, this one knows {SCHEMA_VERSION})"
                    )
                for version in range(current + 1, target + 1):
                    for statement in _split_sql(MIGRATIONS[version - 1]):
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version={version}")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # -- generic helpers ---------------------------------------------------------------------

    def _insert(self, table: str, obj: DataclassInstance) -> None:
        data = _to_row(obj)
        cols = ", ".join(data)
        marks = ", ".join(f":{k}" for k in data)
        with self.transaction() as conn:
            conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", data)

    def _get(self, cls: type[T], table: str, ident: str, what: str) -> T:
        row = (
            self.query_one(f"SELECT * FROM {table} WHERE id = ?", (ident,))
            if _bindable(ident)
            else None
        )
        if row is None:
            raise NotFound(f"no {what} with id {ident!r}")
        return _row_to(cls, row)

    def find_by_ref(self, cls: type[T], table: str, ref: str, what: str) -> T:
        """The row of `table` whose id is `ref`, or else the one row whose id begins with it.
        `ref` is compared character for character: `_`, `%`, `*` and the rest match only
        themselves, and an empty reference matches nothing."""
        rows = self._rows_by_ref(table, ref)
        exact = [r for r in rows if r["id"] == ref]
        if exact or len(rows) == 1:
            return _row_to(cls, (exact or rows)[0])
        if not rows:
            raise NotFound(f"no {what} with id {ref!r}")
        raise NotFound(f"the id {ref!r} matches {len(rows)} {what}s; give more of it")

    def find_run(self, ref: str) -> Run:
        """A run by its id or an unambiguous prefix of it."""
        return self.find_by_ref(Run, "runs", ref, "run")

    def find_snapshot(self, ref: str) -> Snapshot:
        """A snapshot by its id or an unambiguous prefix of it."""
        return self.find_by_ref(Snapshot, "snapshots", ref, "snapshot")

    def _rows_by_ref(
        self, table: str, ref: str, where: str = "", params: tuple[Any, ...] = ()
    ) -> list[sqlite3.Row]:
        if not ref or not _bindable(ref):
            return []
        condition, ref_params = id_or_prefix("id", ref)
        extra = f" AND ({where})" if where else ""
        return self.query(
            f"SELECT * FROM {table} WHERE {condition}{extra} ORDER BY id", ref_params + params
        )

    def _update(self, table: str, ident: str, **changes: Any) -> None:
        for key in _JSON_FIELDS & changes.keys():
            changes[key] = json.dumps(changes[key], sort_keys=True)
        sets = ", ".join(f"{k} = :{k}" for k in changes)
        with self.transaction() as conn:
            conn.execute(f"UPDATE {table} SET {sets} WHERE id = :_id", {**changes, "_id": ident})

    # -- sources -----------------------------------------------------------------------------

    def add_source(self, source: Source) -> None:
        self._insert("sources", source)

    def source_by_path(self, path: str) -> Source | None:
        row = self.query_one("SELECT * FROM sources WHERE path = ?", (path,))
        return _row_to(Source, row) if row else None

    def get_source(self, source_id: str) -> Source:
        return self._get(Source, "sources", source_id, "source folder")

    def list_sources(self) -> list[Source]:
        return [_row_to(Source, r) for r in self.query("SELECT * FROM sources ORDER BY created_at")]

    # -- workspaces --------------------------------------------------------------------------

    def add_workspace(self, ws: Workspace) -> None:
        self._insert("workspaces", ws)

    def get_workspace(self, workspace_id: str) -> Workspace:
        return self._get(Workspace, "workspaces", workspace_id, "workspace")

    def list_workspaces(self, *, states: tuple[str, ...] | None = None) -> list[Workspace]:
        rows = self.query("SELECT * FROM workspaces ORDER BY created_at")
        out = [_row_to(Workspace, r) for r in rows]
        return [w for w in out if states is None or w.state in states]

    def update_workspace(self, workspace_id: str, **changes: Any) -> None:
        changes.setdefault("updated_at", time.time())
        self._update("workspaces", workspace_id, **changes)

    def delete_workspace_rows(self, workspace_id: str) -> None:
        """Forget a workspace that never became usable (a failed creation)."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM revisions WHERE workspace_id = ?", (workspace_id,))
            conn.execute("DELETE FROM snapshots WHERE workspace_id = ?", (workspace_id,))
            conn.execute("DELETE FROM workspaces WHERE id = ?", (workspace_id,))

    def delete_source(self, source_id: str) -> None:
        """Forget a source folder whose first import failed (nothing else refers to it yet)."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM sources WHERE id = ?", (source_id,))

    # -- tasks -------------------------------------------------------------------------------

    def add_task(self, task: Task) -> None:
        self._insert("tasks", task)

    def get_task(self, task_id: str) -> Task:
        return self._get(Task, "tasks", task_id, "task")

    def find_task(self, ref: str) -> Task:
        """A task by its id or an unambiguous prefix of it (literally: see id_or_prefix)."""
        return self.find_by_ref(Task, "tasks", ref, "task")

    def list_tasks(self) -> list[Task]:
        return [_row_to(Task, r) for r in self.query("SELECT * FROM tasks ORDER BY created_at")]

    def update_task(self, task_id: str, **changes: Any) -> None:
        self._update("tasks", task_id, **changes)

    def delete_task(self, task_id: str) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))

    # -- revisions ---------------------------------------------------------------------------

    def add_revision(self, rev: Revision) -> Revision:
        """Append a revision to its workspace's sequence; a known revision is not added twice."""
        with self.transaction() as conn:
            known = conn.execute(
                "SELECT seq FROM revisions WHERE workspace_id = ? AND id = ?",
                (rev.workspace_id, rev.id),
            ).fetchone()
            if known is not None:
                rev.seq = known[0]
                return rev
            last = conn.execute(
                "SELECT MAX(seq) FROM revisions WHERE workspace_id = ?", (rev.workspace_id,)
            ).fetchone()[0]
            rev.seq = (last or 0) + 1
            data = _to_row(rev)
            cols = ", ".join(data)
            conn.execute(
                f"INSERT INTO revisions ({cols}) VALUES ({', '.join(':' + k for k in data)})", data
            )
            conn.execute(
                "UPDATE workspaces SET current_revision = ?, updated_at = ? WHERE id = ?",
                (rev.id, time.time(), rev.workspace_id),
            )
        return rev

    def list_revisions(self, workspace_id: str) -> list[Revision]:
        rows = self.query(
            "SELECT * FROM revisions WHERE workspace_id = ? ORDER BY seq", (workspace_id,)
        )
        return [_row_to(Revision, r) for r in rows]

    def get_revision(self, workspace_id: str, revision_id: str) -> Revision:
        """A workspace's revision by its id or an unambiguous prefix of it (literally)."""
        rows = self._rows_by_ref("revisions", revision_id, "workspace_id = ?", (workspace_id,))
        exact = [r for r in rows if r["id"] == revision_id]
        if exact or len(rows) == 1:
            return _row_to(Revision, (exact or rows)[0])
        if not rows:
            raise NotFound(f"no revision {revision_id!r} in workspace {workspace_id}")
        raise NotFound(f"the revision id {revision_id!r} is ambiguous; give more of it")

    def latest_revision(self, workspace_id: str) -> Revision | None:
        row = self.query_one(
            "SELECT * FROM revisions WHERE workspace_id = ? ORDER BY seq DESC LIMIT 1",
            (workspace_id,),
        )
        return _row_to(Revision, row) if row else None

    # -- snapshots ---------------------------------------------------------------------------

    def add_snapshot(self, snap: Snapshot) -> None:
        self._insert("snapshots", snap)

    def get_snapshot(self, snapshot_id: str) -> Snapshot:
        return self._get(Snapshot, "snapshots", snapshot_id, "snapshot")

    def list_snapshots(self, workspace_id: str | None = None) -> list[Snapshot]:
        if workspace_id is None:
            rows = self.query("SELECT * FROM snapshots ORDER BY created_at")
        else:
            rows = self.query(
                "SELECT * FROM snapshots WHERE workspace_id = ? ORDER BY created_at",
                (workspace_id,),
            )
        return [_row_to(Snapshot, r) for r in rows]

    # -- runs --------------------------------------------------------------------------------

    def add_run(self, run: Run) -> None:
        self._insert("runs", run)

    def get_run(self, run_id: str) -> Run:
        return self._get(Run, "runs", run_id, "run")

    def runs_of(self, task_ids: list[str]) -> list[Run]:
        if not task_ids:
            return []
        marks = ",".join("?" * len(task_ids))
        rows = self.query(
            f"SELECT * FROM runs WHERE task_id IN ({marks}) ORDER BY created_at", tuple(task_ids)
        )
        return [_row_to(Run, r) for r in rows]

    def list_runs(self, *, states: tuple[str, ...] | None = None) -> list[Run]:
        rows = self.query("SELECT * FROM runs ORDER BY created_at")
        runs = [_row_to(Run, r) for r in rows]
        return [r for r in runs if states is None or r.state in states]

    def transition_run(
        self, run_id: str, allowed_from: tuple[str, ...], to: str, **changes: Any
    ) -> Run:
        """Move a run to `to` when it is in one of `allowed_from`, bumping its state version.

        The check and the write are one statement, so two processes cannot both make a move
        from the same state. Raises IllegalTransition (with the state found) otherwise."""
        for key in _JSON_FIELDS & changes.keys():
            changes[key] = json.dumps(changes[key], sort_keys=True)
        sets = "".join(f", {k} = :{k}" for k in changes)
        marks = ",".join(f":_from{i}" for i in range(len(allowed_from)))
        params = {
            **changes,
            "_id": run_id,
            "_to": to,
            **{f"_from{i}": s for i, s in enumerate(allowed_from)},
        }
        with self.transaction() as conn:
            cur = conn.execute(
                f"UPDATE runs SET state = :_to, state_version = state_version + 1"
                f"{sets} WHERE id = :_id AND state IN ({marks})",
                params,
            )
            if cur.rowcount != 1:
                row = conn.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
                if row is None:
                    raise NotFound(f"no run with id {run_id!r}")
                raise IllegalTransition(f"run {run_id} is {row[0]}; it cannot become {to}")
        return self.get_run(run_id)

    def update_run(self, run_id: str, **changes: Any) -> None:
        self._update("runs", run_id, **changes)

    # -- checkpoints ---------------------------------------------------------------------------

    def add_checkpoint(self, ck: Checkpoint) -> None:
        self._insert("checkpoints", ck)

    def latest_checkpoint(self, run_ids: list[str]) -> Checkpoint | None:
        if not run_ids:
            return None
        marks = ",".join("?" * len(run_ids))
        row = self.query_one(
            f"SELECT * FROM checkpoints WHERE run_id IN ({marks}) "
            "ORDER BY created_at DESC, run_state_version DESC LIMIT 1",
            tuple(run_ids),
        )
        return _row_to(Checkpoint, row) if row else None

    def list_checkpoints(self, run_id: str | None = None) -> list[Checkpoint]:
        if run_id is None:
            rows = self.query("SELECT * FROM checkpoints ORDER BY created_at")
        else:
            rows = self.query(
                "SELECT * FROM checkpoints WHERE run_id = ? ORDER BY created_at", (run_id,)
            )
        return [_row_to(Checkpoint, r) for r in rows]

    # -- sandbox session states ------------------------------------------------------------------

    def put_session(self, rec: SessionRecord) -> None:
        rec.updated_at = time.time()
        data = _to_row(rec)
        cols = ", ".join(data)
        with self.transaction() as conn:
            conn.execute(
                f"INSERT OR REPLACE INTO session_states ({cols}) VALUES "
                f"({', '.join(':' + k for k in data)})",
                data,
            )

    def get_session(self, session_id: str) -> SessionRecord:
        """One sandbox session by its id; NotFound when there is none."""
        return self._get(SessionRecord, "session_states", session_id, "sandbox session")

    def session_for(self, workspace_id: str) -> SessionRecord | None:
        row = self.query_one(
            "SELECT * FROM session_states WHERE workspace_id = ? ORDER BY updated_at DESC LIMIT 1",
            (workspace_id,),
        )
        return _row_to(SessionRecord, row) if row else None

    def list_sessions(self) -> list[SessionRecord]:
        return [
            _row_to(SessionRecord, r)
            for r in self.query("SELECT * FROM session_states ORDER BY created_at")
        ]

    def update_session(self, session_id: str, **changes: Any) -> None:
        changes.setdefault("updated_at", time.time())
        self._update("session_states", session_id, **changes)

    # -- events ------------------------------------------------------------------------------

    def append_event(self, kind: str, subject: str | None, payload: dict) -> int:
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO events (kind, subject, payload, created_at) VALUES (?, ?, ?, ?)",
                (kind, subject, json.dumps(payload, sort_keys=True), time.time()),
            )
            seq = cur.lastrowid
            if seq is None:  # sqlite3 sets it after every INSERT into a rowid table
                raise CairnError(f"the store did not number the {kind} event")
            return seq

    def events_since(self, seq: int, limit: int = 1000) -> list[dict]:
        rows = self.query("SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit))
        return [
            {
                "seq": r["seq"],
                "kind": r["kind"],
                "subject": r["subject"],
                "payload": json.loads(r["payload"]),
                "created_at": r["created_at"],
            }
            for r in rows
        ]

    # -- credential grants ---------------------------------------------------------------------
    # Rows hold secret NAMES and environment variable names only; values live in the OS keyring
    # (core.credentials owns the rules: lineage, revocation, resolution).

    def task_ancestry(self, task_id: str) -> list[str]:
        """The task's id, then its parent's, up to the lineage root (nearest first)."""
        rows = self.query(
            """
            WITH RECURSIVE chain(id, parent, depth) AS (
                SELECT id, parent_task_id, 0 FROM tasks WHERE id = ?
                UNION ALL
                SELECT t.id, t.parent_task_id, chain.depth + 1
                FROM tasks t JOIN chain ON t.id = chain.parent
                WHERE chain.depth < 10000
            )
            SELECT id FROM chain ORDER BY depth
            """,
            (task_id,),
        )
        if not rows:
            raise NotFound(f"no task with id {task_id!r}")
        seen: list[str] = []
        for row in rows:
            if row["id"] in seen:  # a cycle in damaged data: stop at the first repeat
                break
            seen.append(row["id"])
        return seen

    def add_grant_row(self, row: dict[str, Any]) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO credential_grants (id, task_id, secret_name, env_var, scope, "
                "created_at, revoked_at) VALUES (:id, :task_id, :secret_name, :env_var, :scope, "
                ":created_at, :revoked_at)",
                row,
            )

    def grant_rows_for_tasks(self, task_ids: list[str]) -> list[dict[str, Any]]:
        """Every grant row (revoked ones too) on any of the tasks, oldest first."""
        if not task_ids:
            return []
        marks = ", ".join("?" for _ in task_ids)
        rows = self.query(
            f"SELECT * FROM credential_grants WHERE task_id IN ({marks}) ORDER BY created_at, id",
            tuple(task_ids),
        )
        return [dict(r) for r in rows]

    def revoke_grant_rows(self, task_id: str, secret_name: str, revoked_at: float) -> int:
        """Mark the task's active grants of the secret revoked; the number of rows changed."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE credential_grants SET revoked_at = ? "
                "WHERE task_id = ? AND secret_name = ? AND revoked_at IS NULL",
                (revoked_at, task_id, secret_name),
            )
            return cur.rowcount


def id_or_prefix(column: str, ref: str) -> tuple[str, tuple[Any, ...]]:
    """A WHERE condition (and its parameters) that holds when `column` is `ref` or begins with it,
    compared as plain characters (case-sensitive): no LIKE or GLOB, whose `_`, `%`, `*`, `?` and
    `[` would match other ids. Callers refuse an empty `ref` (it begins every id)."""
    return f"substr({column}, 1, ?) = ?", (len(ref), ref)


def _bindable(value: str) -> bool:
    """Whether SQLite can be handed `value` as text: an argument that is not valid UTF-8 (kept as
    surrogates) or holds a NUL names no row, rather than failing the query."""
    if "\0" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _split_sql(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
