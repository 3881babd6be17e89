"""A run's stored output as records that keep what the flat text loses: which stream, when it was
observed, and where each attempt began (with why it was resumed).

Owns reading the `run.output` and `run.resumed` events of one run into `OutputRecord`s and
`AttemptStart`s, and writing them as one text in which marker lines carry the structure (so the
text travels through the same channels as plain output; `decode` reads it back). Cutting the
lines into blocks and drawing them belong to the callers. No Qt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from core import events as ev
from core.store import Store

MARKER = "\x1e"  # a line starting with it is structure, not output


@dataclass(frozen=True)
class OutputRecord:
    stream: str  # stdout or stderr
    text: str
    at: float | None = None  # when Cairn observed it


@dataclass(frozen=True)
class AttemptStart:
    number: int
    reason: str = ""  # what the resume did, in words ("sandbox recreated")
    at: float | None = None

    @property
    def header(self) -> str:
        return f"attempt {self.number}" + (f" · resumed: {self.reason}" if self.reason else "")


Record = OutputRecord | AttemptStart

_REASON_STEPS = ("sandbox", "workspace", "engine")


def resume_reason(report: dict | None) -> str:
    """The resume report's path in a few words: what happened to the sandbox, the workspace and
    the engine ("sandbox recreated, engine native resume of session s-1")."""
    path = (report or {}).get("path") or []
    words = []
    for step in _REASON_STEPS:
        for entry in path:
            name, _, outcome = str(entry).partition(": ")
            if name == step and outcome:
                words.append(f"{name} {outcome}")
    return ", ".join(words)


def records_from_events(rows: Iterable[tuple[str, dict, float]]) -> list[Record]:
    """Records from a run's events in order: (kind, payload, created_at). A new attempt starts at
    a `run.resumed` event, or where a stream's offset goes back (the next attempt's files)."""
    out: list[Record] = []
    attempt = 1
    offsets: dict[str, int] = {}
    pending_reason: str | None = None
    resumed_at: float | None = None
    for kind, payload, created_at in rows:
        if kind == ev.RUN_RESUMED:
            pending_reason = resume_reason(payload.get("report"))
            resumed_at = created_at
            continue
        if kind != ev.RUN_OUTPUT:
            continue
        stream = str(payload.get("stream") or "stdout")
        offset = payload.get("offset")
        went_back = isinstance(offset, int) and offset < offsets.get(stream, -1)
        if pending_reason is not None or went_back:
            # A resume is said even when the attempt before it printed nothing.
            seen = any(isinstance(r, OutputRecord) for r in out)
            if seen and attempt == 1:
                out.insert(0, AttemptStart(1, "", None))
            attempt += 1
            out.append(AttemptStart(attempt, pending_reason or "", resumed_at or created_at))
            offsets = {}
            pending_reason = resumed_at = None
        if isinstance(offset, int):
            offsets[stream] = offset
        out.append(OutputRecord(stream, str(payload.get("text") or ""), created_at))
    return out


def read_records(store: Store, run_id: str) -> list[Record]:
    """The records of one run's stored output."""
    rows = store.query(
        "SELECT kind, payload, created_at FROM events WHERE subject = ? AND kind IN (?, ?) "
        "ORDER BY seq",
        (run_id, ev.RUN_OUTPUT, ev.RUN_RESUMED),
    )
    return records_from_events(
        (row["kind"], json.loads(row["payload"]), row["created_at"]) for row in rows
    )


# -- as one text ---------------------------------------------------------------------------------


def marker(**fields: object) -> str:
    """A marker line (with its newline)."""
    return MARKER + json.dumps(fields, sort_keys=True) + "\n"


def encode(records: Iterable[Record]) -> str:
    """The records as one text: output as it was, marker lines for streams, times and attempts.
    Without markers the text is plain stdout, as before."""
    parts: list[str] = []
    stream = "stdout"
    ends_line = True
    for record in records:
        if isinstance(record, AttemptStart):
            if not ends_line:
                parts.append("\n")  # an attempt always starts on its own line
            parts.append(marker(attempt=record.number, reason=record.reason, at=record.at))
            ends_line = True
            continue
        if not record.text:
            continue
        fields: dict[str, object] = {}
        if record.stream != stream:
            fields["stream"] = record.stream
            stream = record.stream
        if record.at is not None:
            fields["at"] = record.at
        if fields:
            if not ends_line:
                parts.append("\n")
            parts.append(marker(**fields))
        parts.append(record.text)
        ends_line = record.text.endswith("\n")
    return "".join(parts)


def decode(text: str, stream: str = "stdout") -> Iterator[Record]:
    """Records back from `encode`'s text (plain text is one stdout record)."""
    if MARKER not in text:
        if text:
            yield OutputRecord(stream, text)
        return
    at: float | None = None
    buffer: list[str] = []
    # Not splitlines(): it also cuts at the marker character itself.
    pieces = text.split("\n")
    lines = [p + "\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    for line in lines:
        if not line.startswith(MARKER):
            buffer.append(line)
            continue
        if buffer:
            yield OutputRecord(stream, "".join(buffer), at)
            buffer = []
        try:
            fields = json.loads(line[1:])
        except ValueError:
            fields = {}
        if not isinstance(fields, dict):
            fields = {}
        if "attempt" in fields:
            yield AttemptStart(
                int(fields["attempt"]), str(fields.get("reason") or ""), fields.get("at")
            )
            continue
        stream = str(fields.get("stream") or stream)
        at = fields.get("at", at)
    if buffer:
        yield OutputRecord(stream, "".join(buffer), at)
