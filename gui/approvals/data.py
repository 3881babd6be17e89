"""What the Approvals tab reads through the facade, as plain values (no Qt).

Owns the queue a person answers: the judge asked to decide what its rules can and to apply
timeouts, then the requests still waiting, each with its task's title and, for a program start,
what will run (program, arguments, folder, the programs above it, the script step it came from);
and the recent decisions shown under the queue. The functions here run inside jobs, never on the
GUI thread.
"""

from __future__ import annotations

import os
import shlex
import time
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.app import Cairn
from core.approvals import BY_RULES, BY_TIMEOUT, EXEC_TOOL, PENDING, Approval
from core.errors import NotFound

HISTORY_LIMIT = 200
# A card shows this much of one text (an argument, a script step) and says how much it left out:
# a megabyte of argv would make a card nobody can read or scroll.
SHOWN_CHARS = 4000

OUTCOMES = {
    "approved": "approved",
    "denied": "denied",
    "timed-out": "timed out",
    "auto-allowed": "allowed by rules",
    "withdrawn": "withdrawn",
}


def visible(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` as a person can read it exactly: control and format characters (a carriage return
    that hides what precedes it, a right-to-left override that reorders what follows) written
    as escapes, and a text longer than `limit` cut with how much is missing."""
    out = []
    for ch in text[:limit]:
        if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"):
            out.append(ch)
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    shown = "".join(out)
    if len(text) > limit:
        shown += f" … ({len(text) - limit} more characters)"
    return shown


@dataclass(frozen=True)
class ProgramStart:
    """A program a run is about to start, as the supervisor saw it (an exec request's details)."""

    program: str  # the resolved path
    argv: tuple[str, ...]
    cwd: str | None = None
    what: str | None = None  # the command as the rule matched it
    stdin: str | None = None
    parents: tuple[str, ...] = ()  # command lines of the programs above it, nearest first
    script: tuple[str, ...] = ()  # every step of the run's shell script
    step: int | None = None  # the index in `script` this program came from
    rule_reason: str | None = None
    # What the program really is or touches when its words say otherwise: the image programs it
    # is a copy of, the file its input reads, arguments that lead elsewhere through links.
    same_as: tuple[str, ...] = ()
    stdin_path: str | None = None
    links: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, details: Mapping[str, Any]) -> ProgramStart | None:
        """The program start a request's details describe, or None when they describe none (a
        tool call) or are not usable."""
        if details.get("kind") != EXEC_TOOL:
            return None
        program, argv = details.get("program"), details.get("argv")
        if not isinstance(program, str) or not isinstance(argv, list):
            return None
        script: tuple[str, ...] = ()
        step = None
        found = details.get("script")
        if isinstance(found, Mapping) and isinstance(found.get("commands"), list):
            script = tuple(str(c) for c in found["commands"])
            index = found.get("step")
            if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(script):
                step = index
        parents = details.get("parents")
        return cls(
            program=program,
            argv=tuple(str(a) for a in argv),
            cwd=_text(details.get("cwd")),
            what=_text(details.get("what")),
            stdin=_text(details.get("stdin")),
            parents=tuple(str(p) for p in parents) if isinstance(parents, list) else (),
            script=script,
            step=step,
            rule_reason=_text(details.get("rule_reason")),
            same_as=tuple(str(p) for p in details.get("same_as") or () if isinstance(p, str)),
            stdin_path=_text(details.get("stdin_path")),
            links=tuple(
                (str(word), str(target))
                for word, target in (
                    details["links"].items() if isinstance(details.get("links"), Mapping) else ()
                )
            ),
        )

    @property
    def command_line(self) -> str:
        """The resolved program and its arguments, quoted as a shell would need them, so an
        argument holding spaces or nothing at all shows as one."""
        return shlex.join([self.program, *self.argv[1:]])

    @property
    def started_as(self) -> str | None:
        """The name the program was started under, when it is not the program's own (argv[0])."""
        if not self.argv:
            return None
        name = self.argv[0]
        return None if name in (self.program, os.path.basename(self.program)) else name


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


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
    program: ProgramStart | None = None  # None: an agent's tool call

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
            program=ProgramStart.of(approval.details or {}),
        )


@dataclass(frozen=True)
class Decision:
    """One decided request, as the history lists it."""

    id: str
    task_id: str | None
    command: str
    state: str
    decided_by: str | None
    at: float  # when it was decided (when it was asked, for a row without a decision time)
    rule: str | None
    note: str | None  # the reason a person gave with a denial

    @classmethod
    def of(cls, approval: Approval) -> Decision:
        details = approval.details or {}
        return cls(
            id=approval.id,
            task_id=approval.task_id,
            command=approval.command,
            state=approval.state,
            decided_by=approval.decided_by,
            at=approval.decided_at if approval.decided_at is not None else approval.created_at,
            rule=approval.rule,
            note=_text(details.get("note")),
        )

    @property
    def who(self) -> str:
        if self.decided_by == BY_RULES:
            return "rules"
        if self.decided_by == BY_TIMEOUT:
            return "timeout"
        return self.decided_by or "—"

    @property
    def outcome(self) -> str:
        return OUTCOMES.get(self.state, self.state)


def recent_decisions(approvals: Iterable[Approval], limit: int = HISTORY_LIMIT) -> list[Decision]:
    """The latest `limit` decided requests, newest first."""
    decided = [Decision.of(a) for a in approvals if a.state != PENDING]
    decided.sort(key=lambda d: (d.at, d.id), reverse=True)
    return decided[:limit]


@dataclass
class PendingQueue:
    approvals: list[PendingApproval]
    titles: dict[str, str | None] = field(default_factory=dict)  # task titles read this time
    history: list[Decision] | None = None  # None: not read this time


def load_pending(
    cairn: Cairn, known_titles: Mapping[str, str | None], *, history: bool = False
) -> PendingQueue:
    """Let the judge answer what its rules can and apply timeouts (a write), then the requests
    that wait for a person, and with `history` the recent decisions. A task's title is read once:
    `known_titles` are the ones read before, and the ones read now come back with the queue."""
    found: dict[str, str | None] = {}
    pending = []
    for approval in cairn.approvals.pending():
        if approval.state != PENDING:
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
    decisions = recent_decisions(cairn.approvals.decided(HISTORY_LIMIT)) if history else None
    return PendingQueue(pending, found, decisions)


def when(at: float, now: float | None = None) -> str:
    """A decision's time: the clock time today, the date too before today."""
    moment = time.localtime(at)
    today = time.localtime(now if now is not None else time.time())
    if moment[:3] == today[:3]:
        return time.strftime("%H:%M:%S", moment)
    return time.strftime("%Y-%m-%d %H:%M", moment)


def waited(seconds: float) -> str:
    """How long a request has waited, to the second while it is short."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"waiting {seconds} s"
    if seconds < 3600:
        return f"waiting {seconds // 60} min {seconds % 60:02d} s"
    return f"waiting {seconds // 3600} h {seconds % 3600 // 60:02d} min"
