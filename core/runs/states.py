"""Run states and run files: the state machine, where a run's files live, and observing them.

Owns the run states and the legal moves between them, where a run's files live, and tailing
those files exactly once (output and offset are committed together). Starting, checkpointing
and resuming runs is core.runs.service's and the resume ladder's job.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core import events as ev
from core.models import Run
from core.models import RunState as R
from core.redact import redact
from core.sandbox.base import (
    RUN_STDERR_FILE,
    RUN_STDOUT_FILE,
    read_exit_code,
    read_pid,
)
from core.store import Store

TRANSITIONS: dict[R, frozenset[R]] = {
    R.QUEUED: frozenset({R.PREPARING, R.CANCELLED, R.FAILED, R.INTERRUPTED}),
    R.PREPARING: frozenset({R.RUNNING, R.FAILED, R.CANCELLED, R.INTERRUPTED}),
    R.RUNNING: frozenset({R.WAITING_APPROVAL, R.SUCCEEDED, R.FAILED, R.CANCELLED, R.INTERRUPTED}),
    R.WAITING_APPROVAL: frozenset({R.RUNNING, R.SUCCEEDED, R.FAILED, R.CANCELLED, R.INTERRUPTED}),
    R.INTERRUPTED: frozenset({R.PREPARING, R.CANCELLED, R.FAILED}),
    R.SUCCEEDED: frozenset(),
    R.FAILED: frozenset(),
    R.CANCELLED: frozenset(),
}

IN_FLIGHT = tuple(s.value for s in R if s.in_flight)
FINISHED = (R.SUCCEEDED.value, R.FAILED.value, R.CANCELLED.value)
STEP_FILE = "step"


def sources_of(target: R) -> tuple[str, ...]:
    return tuple(s.value for s, targets in TRANSITIONS.items() if target in targets)


def move(store: Store, run_id: str, to: R, **changes: object) -> Run:
    """A legal state change, checked and written in one statement (see Store.transition_run)."""
    if to in (R.SUCCEEDED, R.FAILED, R.CANCELLED):
        changes.setdefault("ended_at", time.time())
    return store.transition_run(run_id, sources_of(to), to.value, **changes)


@dataclass(frozen=True)
class RunFiles:
    """One attempt's folder on the host: runs/<workspace>/<run>.<attempt>/."""

    folder: Path

    @property
    def stdout(self) -> Path:
        return self.folder / RUN_STDOUT_FILE

    @property
    def stderr(self) -> Path:
        return self.folder / RUN_STDERR_FILE

    @property
    def pid(self) -> int | None:
        return read_pid(self.folder)

    @property
    def exit_code(self) -> int | None:
        return read_exit_code(self.folder)

    @property
    def step(self) -> int | None:
        try:
            text = (self.folder / STEP_FILE).read_text().strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None

    def exists(self) -> bool:
        return self.folder.is_dir()


def run_files(runs_root: Path, run: Run) -> RunFiles:
    return RunFiles(runs_root / (run.workspace_id or "_") / run.exec_id)


class OutputTail:
    """Reads new complete lines from a run's stdout and stderr, starting at the saved offsets.

    Each batch of lines and the new offsets are committed to the store in one transaction (as
    `run.output` events), so a Cairn killed at any moment neither loses nor repeats a line when
    it comes back. A last line without a newline is delivered once the run has ended.
    """

    MAX_CHUNK = 256 * 1024

    def __init__(
        self,
        store: Store,
        run_id: str,
        files: RunFiles,
        on_output: Callable[[str, str], None] | None = None,
    ):
        self.store = store
        self.run_id = run_id
        self.files = files
        self.on_output = on_output

    def poll(self, *, final: bool = False) -> int:
        """Take in what was written since the last poll; returns how many bytes were taken."""
        run = self.store.get_run(self.run_id)
        taken = 0
        for stream, path, column, offset in (
            ("stdout", self.files.stdout, "output_offset", run.output_offset),
            ("stderr", self.files.stderr, "stderr_offset", run.stderr_offset),
        ):
            data = _read_from(path, offset, self.MAX_CHUNK)
            if not data:
                continue
            cut = data.rfind(b"\n") + 1
            if cut == 0 and not final and len(data) < self.MAX_CHUNK:
                continue  # wait for the rest of the line
            if final or len(data) >= self.MAX_CHUNK and cut == 0:
                cut = len(data)
            chunk = data[:cut]
            # Complete lines only, so a secret is never split across two chunks here.
            text = redact(chunk.decode("utf-8", "replace"))
            payload = json.dumps(
                {"run_id": self.run_id, "stream": stream, "text": text, "offset": offset},
                sort_keys=True,
            )
            with self.store.transaction() as conn:
                current = conn.execute(
                    f"SELECT {column} FROM runs WHERE id = ?", (self.run_id,)
                ).fetchone()[0]
                if current != offset:  # someone else took this part already
                    continue
                conn.execute(
                    "INSERT INTO events (kind, subject, payload, created_at) VALUES (?, ?, ?, ?)",
                    (ev.RUN_OUTPUT, self.run_id, payload, time.time()),
                )
                conn.execute(
                    f"UPDATE runs SET {column} = ? WHERE id = ?", (offset + len(chunk), self.run_id)
                )
            taken += len(chunk)
            if self.on_output:
                self.on_output(stream, text)
        return taken


def _read_from(path: Path, offset: int, limit: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""


def output_of(store: Store, run_id: str, stream: str | None = None) -> str:
    """Everything observed of a run so far, in order (for the CLI, the GUI and tests)."""
    rows = store.query(
        "SELECT payload FROM events WHERE kind = ? AND subject = ? ORDER BY seq",
        (ev.RUN_OUTPUT, run_id),
    )
    parts = []
    for row in rows:
        payload = json.loads(row["payload"])
        if stream is None or payload["stream"] == stream:
            parts.append(payload["text"])
    return "".join(parts)
