"""Background jobs: the one way gui/ calls anything that may wait (the facade, Docker, git, disk).

Owns where work runs and how its outcome comes back; what the work does is the caller's. A job
reads as a sentence:

    ctx.jobs.job(lambda: load(cairn, task_id), what="load the task", parent=self) \
        .success(self.show_details).failure(self.show_error).run()

The work function runs on a pool thread and must never touch a widget: it captures, before the
job starts, the values it needs (`cairn`, `task_id` above), never `self` or a widget's state. Its
return value or its exception comes back to the GUI thread through a queued signal and is handed
to `success` or `failure`. A job with a `key` is superseded by the next job with the same key:
the late result for an old selection is dropped instead of painted (a counter per key, as git-cola
does). Jobs with `write=True` share one single-thread pool so store and vault writes never
overlap; `observe=True` is for long loops (following a run) that must not hold a read thread. A
failure without its own handler is emitted as `sig_failed`, which the main window shows: nothing
fails silently.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import Conflict, InputError, NotFound
from gui.errors import describe_error
from gui.qt import QObject, QRunnable, QThreadPool, Signal, Slot, is_alive

log = logging.getLogger(__name__)

# Refusals a person caused and is told about (a bad input, a clash, something not there): one
# line in the log at INFO, not a traceback at WARNING.
EXPECTED_REFUSALS = (InputError, Conflict, NotFound)

READ_THREADS = 4
OBSERVE_THREADS = 32
# Threads only for quick answers to what a person just did (a dropped folder looked at): the
# read threads may all be waiting on a busy Docker engine for the panels' periodic loads, and
# such an answer must not queue behind them.
PROMPT_THREADS = 2

# How long a thread may keep the interpreter before another gets a turn (Python's default is
# 5 ms). The GUI thread gives the lock up at every Qt call it makes while painting, and with a
# CPU-bound job running (colouring a diff) it then waits a whole interval to get it back, many
# times per paint: a 20,000-line diff's colouring stalled the window 100-130 ms. At 1 ms the
# longest stall is about 45 ms and the job is no slower.
SWITCH_INTERVAL_S = 0.001


def share_the_interpreter_with_the_gui() -> None:
    """Give the GUI thread its turns on the interpreter lock soon enough (see above); the app
    calls this once at start, and so do the benchmarks that measure it."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


@dataclass(frozen=True)
class JobFailure:
    """A job's error as a value: what was being done, the exception and one line for people."""

    what: str
    error: BaseException
    details: str = ""  # the traceback, for the log and a "details" box

    @property
    def message(self) -> str:
        return describe_error(self.error)

    def sentence(self) -> str:
        return f"Could not {self.what}: {self.message}" if self.what else self.message


# A job's outcome on its way back: (succeeded, its value or JobFailure, the work function, which
# is released on the GUI thread).
Outcome = tuple[bool, Any, Callable[[], Any]]
Deliver = Callable[[int, Outcome], None]


class Job:
    """One piece of work and what to do with its outcome; built by `JobRunner.job`."""

    def __init__(
        self,
        runner: JobRunner,
        work: Callable[[], Any],
        *,
        key: str | None,
        write: bool,
        observe: bool,
        prompt: bool = False,
        what: str,
        parent: QObject,
    ):
        self._runner = runner
        self.work: Callable[[], Any] | None = work
        self.key = key
        self.write = write
        self.observe = observe
        self.prompt = prompt
        self.submitted_at = 0.0
        self.what = what
        self.parent = parent
        self.token = 0
        self.ident = 0
        self.on_success: Callable[[Any], None] | None = None
        self.on_failure: Callable[[JobFailure], None] | None = None
        self.on_finished: Callable[[], None] | None = None

    def success(self, callback: Callable[[Any], None]) -> Job:
        self.on_success = callback
        return self

    def failure(self, callback: Callable[[JobFailure], None]) -> Job:
        self.on_failure = callback
        return self

    def finished(self, callback: Callable[[], None]) -> Job:
        """Called after success or failure (not for a dropped stale result)."""
        self.on_finished = callback
        return self

    def run(self) -> Job:
        self._runner.submit(self)
        return self


class _Runnable(QRunnable):
    """Runs one job's work on a pool thread.

    It holds no reference that outlives `run()`: the work function (whose closure may hold the
    last reference to a Qt object) travels back to the GUI thread with the outcome and is
    released there. A Qt object freed on a pool thread takes its timers down from the wrong
    thread, and the process crashes later in the GUI thread's event loop.
    """

    def __init__(self, deliver: Deliver, ident: int, what: str, work: Callable[[], Any]):
        super().__init__()
        self.setAutoDelete(True)
        self._parts: tuple[Deliver, int, str, Callable[[], Any]] | None = (
            deliver,
            ident,
            what,
            work,
        )

    def run(self) -> None:  # on a pool thread: no widgets here
        if self._parts is None:  # run once only
            return
        deliver, ident, what, work = self._parts
        self._parts = None
        try:
            outcome = (True, work(), work)
        except BaseException as exc:  # noqa: BLE001 - handed to the GUI thread as a value
            outcome = (False, JobFailure(what, exc, traceback.format_exc()), work)
        del work
        deliver(ident, outcome)  # the last references now live in the runner's outcome table
        del outcome


class JobRunner(QObject):
    """Runs jobs on pool threads and brings their outcomes back to the GUI thread."""

    sig_failed = Signal(object)
    """A job without its own failure handler failed (a JobFailure)."""

    sig_busy = Signal(int)
    """The number of jobs working (run observers not counted) changed: a status-bar hint."""

    _sig_done = Signal(int)  # only the job's number crosses threads; outcomes wait in a dict

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._read_pool = QThreadPool(self)
        self._read_pool.setMaxThreadCount(READ_THREADS)
        self._write_pool = QThreadPool(self)
        self._write_pool.setMaxThreadCount(1)  # store and vault writes never overlap
        self._observe_pool = QThreadPool(self)
        self._observe_pool.setMaxThreadCount(OBSERVE_THREADS)
        self._prompt_pool = QThreadPool(self)
        self._prompt_pool.setMaxThreadCount(PROMPT_THREADS)
        self._pending: dict[int, Job] = {}
        self._outcomes: dict[int, Outcome] = {}
        self._generations: dict[str, int] = {}
        self._next_ident = 0
        self._lock = threading.Lock()
        self._closed = False
        self._sig_done.connect(self._on_done)  # queued: emitted from pool threads

    # -- building and submitting -----------------------------------------------------------------

    def job(
        self,
        work: Callable[[], Any],
        *,
        key: str | None = None,
        write: bool = False,
        observe: bool = False,
        prompt: bool = False,
        what: str = "",
        parent: QObject,
    ) -> Job:
        """A job to configure with success/failure and then `run()`.

        `parent`: the object the outcome is for (the widget that asked); once it is destroyed
        the outcome is moot and dropped, so a callback never reaches a deleted widget.
        `key`: a newer job with the same key makes this one's outcome stale (dropped).
        `write`: run on the single write thread. `observe`: a long loop on its own thread.
        `prompt`: a quick answer to what a person just did, on threads no periodic load uses.
        """
        return Job(
            self,
            work,
            key=key,
            write=write,
            observe=observe,
            prompt=prompt,
            what=what,
            parent=parent,
        )

    def submit(self, job: Job) -> None:
        if self._closed:  # the window is closing: a timer's late request is moot
            log.debug("not started after shutdown: %r", job.what)
            return
        self._next_ident += 1
        job.ident = self._next_ident
        if job.key is not None:
            job.token = self._generations.get(job.key, 0) + 1
            self._generations[job.key] = job.token
        self._pending[job.ident] = job
        job.submitted_at = time.monotonic()
        pool = (
            self._write_pool
            if job.write
            else self._observe_pool
            if job.observe
            else self._prompt_pool
            if job.prompt
            else self._read_pool
        )
        if job.work is None:
            raise RuntimeError(f"the job {job.what!r} was run already")
        pool.start(_Runnable(self._deliver, job.ident, job.what, job.work))
        job.work = None  # the runnable carries it; it comes back with the outcome
        self.sig_busy.emit(self.working)

    def supersede(self, key: str) -> None:
        """Make any job with this key in flight stale (e.g. the selection was cleared)."""
        self._generations[key] = self._generations.get(key, 0) + 1

    def is_current(self, job: Job) -> bool:
        return job.key is None or self._generations.get(job.key) == job.token

    # -- outcomes --------------------------------------------------------------------------------

    def _deliver(self, ident: int, outcome: Outcome) -> None:
        with self._lock:
            self._outcomes[ident] = outcome  # kept even after shutdown: released on this side
            if not self._closed:
                self._sig_done.emit(ident)

    # A declared slot: PySide then queues the cross-thread call to this object's thread as Qt does
    # for C++ slots (a plain Python callable connected to a signal emitted on a pool thread can
    # crash the process in PySide 6.8 and later).
    @Slot(int)
    def _on_done(self, ident: int) -> None:
        with self._lock:
            outcome = self._outcomes.pop(ident, None)
        job = self._pending.pop(ident, None)
        self.sig_busy.emit(self.working)
        if job is None or outcome is None:
            return
        ok, value, _work = outcome  # released here, on the GUI thread
        if not self.is_current(job):
            log.debug("dropped the stale outcome of %r (key %s)", job.what, job.key)
            return
        if not is_alive(job.parent):
            if not ok:
                log.warning("%s (its window is gone)", value.sentence())
            return
        try:
            if ok:
                if job.on_success is not None:
                    job.on_success(value)
            else:
                if isinstance(value.error, EXPECTED_REFUSALS):  # said to the person; no trace
                    log.info("%s", value.sentence())
                else:
                    log.warning("%s\n%s", value.sentence(), value.details)
                if job.on_failure is not None:
                    job.on_failure(value)
                else:
                    self.sig_failed.emit(value)
        except Exception as exc:  # a broken callback is a failure the user sees too
            log.exception("the handler of %r failed", job.what)
            self.sig_failed.emit(
                JobFailure(f"show the result of {job.what or 'a job'}", exc, traceback.format_exc())
            )
        finally:
            if job.on_finished is not None:
                job.on_finished()

    # -- state and shutdown ----------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def working(self) -> int:
        """Jobs doing work now: observers (following a run for as long as it lasts) are not."""
        return sum(1 for job in self._pending.values() if not job.observe)

    def idle(self) -> bool:
        return not self._pending

    def in_flight(self) -> list[str]:
        """What each job submitted and not yet delivered is doing, and for how long (oldest
        first): for a log line or a test's report when something waits too long."""
        now = time.monotonic()
        return [
            f"{job.what or 'a job'} ({now - job.submitted_at:.0f} s)"
            for job in sorted(self._pending.values(), key=lambda j: j.submitted_at)
        ]

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Stop delivering outcomes and wait (bounded) for running work; True if all ended."""
        with self._lock:
            self._closed = True
        done = True
        for pool in (self._read_pool, self._write_pool, self._observe_pool, self._prompt_pool):
            pool.clear()
            done = pool.waitForDone(timeout_ms) and done
        self._pending.clear()
        with self._lock:
            self._outcomes.clear()
        return done
