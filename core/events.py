"""The event stream: what happened in core (a task created, a revision recorded...), in order.

Owns publishing (persisted in the store, then handed to in-process listeners) and every event
kind's name; it does not choose threads: listeners are called on the publishing thread and the GUI
re-posts to its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

TASK_CREATED = "task.created"
TASK_CHANGED = "task.changed"  # renamed, or its instructions edited
TASK_DELETED = "task.deleted"
REVISION_RECORDED = "revision.recorded"
SNAPSHOT_CREATED = "snapshot.created"
SNAPSHOT_RENAMED = "snapshot.renamed"  # named, renamed, or its name removed
WORKSPACE_STATE = "workspace.state"
WORKSPACE_PROBLEM = "workspace.problem"
RUN_STATE = "run.state"
RUN_RESUMED = "run.resumed"
POLICY_CHANGED = "policy.changed"
APPROVAL_REQUESTED = "approval.requested"
APPROVAL_DECIDED = "approval.decided"
RUN_OUTPUT = "run.output"  # written by core.runs.states in the transaction that moves the offset
ARTIFACT_PROMOTED = "artifact.promoted"
BRANCH_PROMOTED = "branch.promoted"
HOUSEKEEPING_DONE = "housekeeping.cleaned"


@dataclass(frozen=True)
class Event:
    kind: str
    subject: str | None
    payload: dict[str, Any] = field(default_factory=dict)
    seq: int = 0
    created_at: float = 0.0


Listener = Callable[[Event], None]


class EventBus:
    def __init__(self, persist: Callable[[str, str | None, dict], int] | None = None):
        self._persist = persist
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def publish(self, kind: str, subject: str | None = None, **payload: Any) -> Event:
        seq = self._persist(kind, subject, payload) if self._persist else 0
        event = Event(kind, subject, payload, seq, time.time())
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # a broken listener must not break the publisher
                log.exception("event listener failed for %s", kind)
        return event
