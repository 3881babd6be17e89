"""Lineages: the tree of tasks grown from one dropped folder, and the lease that lets one
operation at a time (a start, a resume, a continue) act on a lineage.

Owns walking the tree and the lease with its fencing token; what the holder does is its own.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from core.errors import Conflict
from core.models import Task
from core.store import Store

# A holder that stops heart-beating for this long is stale even if its pid looks alive
# (a reused pid, a frozen process).
LEASE_TTL_S = 120.0


def root_of(store: Store, task_id: str) -> str:
    seen = set()
    task = store.get_task(task_id)
    while task.parent_task_id and task.id not in seen:
        seen.add(task.id)
        task = store.get_task(task.parent_task_id)
    return task.id


def members(store: Store, root_id: str) -> list[Task]:
    """Every task of the lineage rooted at `root_id`, parents before children."""
    tasks = store.list_tasks()
    children: dict[str | None, list[Task]] = {}
    for t in tasks:
        children.setdefault(t.parent_task_id, []).append(t)
    out, stack = [], [t for t in tasks if t.id == root_id]
    while stack:
        t = stack.pop(0)
        out.append(t)
        stack.extend(children.get(t.id, []))
    return out


def _process_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def this_holder() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_process_start(pid)}"


def holder_alive(holder: str) -> bool:
    host, _, rest = holder.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname():
        return True  # cannot tell from here; the TTL decides
    if not pid_text.isdigit():
        return False
    return _process_start(int(pid_text)) == start


@dataclass
class Lease:
    store: Store
    lineage_id: str
    holder: str
    token: int

    def verify(self) -> None:
        """Raise Conflict when this lease was taken over (a fenced-off holder must stop writing)."""
        row = self.store.query_one(
            "SELECT holder, token FROM leases WHERE lineage_id = ?", (self.lineage_id,)
        )
        if row is None or row["token"] != self.token or row["holder"] != self.holder:
            raise Conflict(
                f"lost the lease on lineage {self.lineage_id}; another process took over"
            )
        self.store.query(
            "UPDATE leases SET heartbeat_at = ? WHERE lineage_id = ? AND token = ?",
            (time.time(), self.lineage_id, self.token),
        )

    def release(self) -> None:
        with self.store.transaction() as conn:
            conn.execute(
                "UPDATE leases SET holder = '' WHERE lineage_id = ? AND token = ?",
                (self.lineage_id, self.token),
            )

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lease_held(store: Store, lineage_id: str) -> bool:
    """Whether a live holder has the lineage's lease now (someone is starting or resuming)."""
    row = store.query_one(
        "SELECT holder, heartbeat_at FROM leases WHERE lineage_id = ?", (lineage_id,)
    )
    return bool(
        row
        and row["holder"]
        and holder_alive(row["holder"])
        and time.time() - row["heartbeat_at"] <= LEASE_TTL_S
    )


def acquire(store: Store, lineage_id: str, *, purpose: str = "work") -> Lease:
    """Take the lineage's lease, or raise Conflict saying who holds it. A crashed holder's lease is
    stale and taken over; every acquisition gets a higher fencing token."""
    me = this_holder()
    now = time.time()
    with store.transaction() as conn:
        row = conn.execute(
            "SELECT holder, token, heartbeat_at FROM leases WHERE lineage_id = ?", (lineage_id,)
        ).fetchone()
        if row is None:
            token = 1
            conn.execute(
                "INSERT INTO leases (lineage_id, holder, token, acquired_at, heartbeat_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (lineage_id, me, token, now, now),
            )
        else:
            holder = row["holder"]
            stale = (
                not holder or not holder_alive(holder) or now - row["heartbeat_at"] > LEASE_TTL_S
            )
            if not stale:
                pid = holder.split(":")[1] if holder.count(":") >= 2 else "?"
                raise Conflict(
                    f"another operation on this task's lineage is in progress "
                    f"(process {pid}); try again when it is done"
                )
            token = row["token"] + 1
            conn.execute(
                "UPDATE leases SET holder = ?, token = ?, acquired_at = ?, heartbeat_at = ? "
                "WHERE lineage_id = ?",
                (me, token, now, now, lineage_id),
            )
    return Lease(store, lineage_id, me, token)
