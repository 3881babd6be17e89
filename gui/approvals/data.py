"""What the Approvals tab reads through the facade, as plain values (no Qt).

Owns the queue a person answers: the judge asked to decide what its rules can and to apply
timeouts, then the requests still waiting, each with its task's title. The functions here run
inside jobs, never on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from core.app import Cairn
from core.approvals import Approval
from core.errors import NotFound


@dataclass(frozen=True)
class PendingApproval:
    """One request waiting for a person, as its card shows it."""

    id: str
    task_id: str | None
    task_title: str | None
    run_id: str | None
    command: str
    rule: str | None
    reason: str | None
    requested_at: float | None
    state: str

    @classmethod
    def of(cls, approval: Approval, task_title: str | None = None) -> PendingApproval:
        return cls(
            id=approval.id,
            task_id=approval.task_id,
            task_title=task_title,
            run_id=approval.run_id,
            command=approval.command,
            rule=approval.rule,
            reason=approval.reason,
            requested_at=approval.created_at,
            state=approval.state,
        )


@dataclass
class PendingQueue:
    approvals: list[PendingApproval]
    titles: dict[str, str | None] = field(default_factory=dict)  # task titles read this time


def load_pending(cairn: Cairn, known_titles: Mapping[str, str | None]) -> PendingQueue:
    """Let the judge answer what its rules can and apply timeouts (a write), then the requests
    that wait for a person. A task's title is read once: `known_titles` are the ones read before,
    and the ones read now come back with the queue."""
    found: dict[str, str | None] = {}
    pending = []
    for approval in cairn.approvals.pending():
        if approval.state != "pending":
            continue
        title = None
        task_id = approval.task_id
        if task_id:
            if task_id in known_titles:
                title = known_titles[task_id]
            elif task_id in found:
                title = found[task_id]
            else:
                try:
                    title = cairn.tasks.get(task_id).title
                except NotFound:  # a task gone meanwhile: its id is shown instead
                    title = None
                found[task_id] = title
        pending.append(PendingApproval.of(approval, title))
    return PendingQueue(pending, found)


def waited(seconds: float) -> str:
    """How long a request has waited, to the second while it is short."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"waiting {seconds} s"
    if seconds < 3600:
        return f"waiting {seconds // 60} min {seconds % 60:02d} s"
    return f"waiting {seconds // 3600} h {seconds % 3600 // 60:02d} min"
