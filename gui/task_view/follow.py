"""Following runs in flight: their output reaches the GUI live, and their end is noticed.

Owns one observing job per run in flight (the facade's `runs.follow`, which tails the run's files
from their saved offsets and settles the run when it ends) and the transcript of each followed
run, kept on the GUI thread, with marker lines for streams, times and attempts
(core.output_blocks). The backlog is read on the same thread as the tail that follows
it, so no chunk is shown twice or lost between the two. Drawing the output is the task view's.
"""

from __future__ import annotations

import threading
import time

from core.app import Cairn
from core.events import RUN_OUTPUT, Event
from core.models import Run
from core.output_blocks import marker
from core.runs import RECORD_CHILD
from gui.events import EventBridge
from gui.jobs import JobFailure, JobRunner
from gui.qt import QObject, Signal
from gui.task_view.data import run_output

TRANSCRIPT_LIMIT = 4_000_000  # characters kept per run (the start is dropped beyond it)


class RunFollowers(QObject):
    """Starts and stops the observing job of each run in flight."""

    sig_run_ended = Signal(str, object)
    """A followed run ended (run id, the final Run)."""

    sig_failed = Signal(str, object)
    """Following a run failed (run id, JobFailure); the run is no longer followed."""

    def __init__(
        self, cairn: Cairn, jobs: JobRunner, bridge: EventBridge, parent: QObject | None = None
    ):
        super().__init__(parent)
        self._cairn = cairn
        self._jobs = jobs
        self._bridge = bridge
        self._stops: dict[str, threading.Event] = {}
        self.transcripts: dict[str, str] = {}
        bridge.sig_event.connect(self._on_event)

    def is_following(self, run_id: str) -> bool:
        return run_id in self._stops

    def follow(self, run_id: str) -> bool:
        """Follow a run (no-op if it is followed already); True if a new follower started."""
        if run_id in self._stops:
            return False
        stop = threading.Event()
        self._stops[run_id] = stop
        cairn, bridge = self._cairn, self._bridge

        def work() -> Run:
            backlog = run_output(cairn, run_id)
            bridge.post(
                Event(
                    RUN_OUTPUT,
                    run_id,
                    {"run_id": run_id, "stream": "stdout", "text": backlog, "backlog": True},
                )
            )

            def on_output(stream: str, text: str) -> None:
                # Marked with its stream and when it was seen, so the transcript shown again
                # later keeps both (core.output_blocks reads the marker).
                text = marker(stream=stream, at=time.time()) + text
                bridge.post(
                    Event(RUN_OUTPUT, run_id, {"run_id": run_id, "stream": stream, "text": text})
                )

            # The workspace is recorded by a child process: a big tree's index and captures
            # would otherwise compete with the window for this process's interpreter.
            return cairn.runs.follow(
                run_id, on_output=on_output, should_stop=stop.is_set, record=RECORD_CHILD
            )

        self._jobs.job(work, observe=True, what=f"follow run {run_id}", parent=self).success(
            lambda run: self._ended(run_id, run)
        ).failure(lambda failure: self._lost(run_id, failure)).run()
        return True

    def _ended(self, run_id: str, run: Run) -> None:
        stop = self._stops.pop(run_id, None)
        if stop is not None and not stop.is_set():
            self.sig_run_ended.emit(run_id, run)

    def _lost(self, run_id: str, failure: JobFailure) -> None:
        self._stops.pop(run_id, None)
        self.sig_failed.emit(run_id, failure)

    def transcript(self, run_id: str) -> str | None:
        """What a followed run printed so far; None if its backlog has not arrived yet."""
        return self.transcripts.get(run_id)

    def _on_event(self, event: Event) -> None:
        if event.kind != RUN_OUTPUT or event.subject not in self._stops:
            return
        text = event.payload.get("text", "")
        if event.payload.get("backlog"):
            self.transcripts[event.subject] = text
        else:
            self.transcripts[event.subject] = self.transcripts.get(event.subject, "") + text
        if len(self.transcripts[event.subject]) > TRANSCRIPT_LIMIT:
            kept = self.transcripts[event.subject][-TRANSCRIPT_LIMIT:]
            # From a whole line on: half a marker line would show as output.
            self.transcripts[event.subject] = kept[kept.find("\n") + 1 :]

    def stop_all(self) -> None:
        """Ask every follower to stop (their runs go on; the next start follows them again)."""
        for stop in self._stops.values():
            stop.set()
        self._stops.clear()
