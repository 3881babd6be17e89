"""The context handed to every widget: the facade, the job runner, the event bridge, the
settings, the run followers, the sandbox watch, and the app-wide fact widgets share (whether a
sandbox can be made now).

Owns creating those once and closing them in order; widgets never make their own.
"""

from __future__ import annotations

import logging
from pathlib import Path

from core.app import Cairn
from gui.events import EventBridge
from gui.jobs import JobRunner
from gui.qt import QObject, QSettings, Signal
from gui.sandbox_watch import SandboxWatch
from gui.task_view.follow import RunFollowers

log = logging.getLogger(__name__)


class AppContext(QObject):
    """One per window: `cairn` (the facade), `jobs`, `events`, `settings`, `followers`, and
    `sandbox_watch` (Docker's word that a sandbox stopped or vanished)."""

    sig_sandbox_problem = Signal(object)
    """Whether sandboxes can be made changed: the problem in words, or None when they can."""

    sig_status = Signal(str)
    """A short message for the status bar (an action finished, a drop was refused...)."""

    def __init__(
        self,
        cairn: Cairn,
        *,
        settings: QSettings | None = None,
        data_dir: Path | None = None,
        parent: QObject | None = None,
    ):
        super().__init__(parent)
        self.cairn = cairn
        self.settings = settings if settings is not None else QSettings()
        self.data_dir = data_dir
        self.jobs = JobRunner(self)
        self.events = EventBridge(self)
        self.events.attach(cairn.events)
        self.followers = RunFollowers(cairn, self.jobs, self.events, self)
        self.sandbox_watch = SandboxWatch(cairn, self.jobs, self)
        self.sandbox_problem: str | None = None
        # Other sandbox hosts that did not answer at the last status check: name -> why.
        self.host_problems: dict[str, str] = {}
        self._closed = False

    @classmethod
    def open(cls, data_dir: Path | None = None, *, settings: QSettings | None = None) -> AppContext:
        """Open the facade on a data folder (before the event loop runs: it touches the disk)."""
        cairn = Cairn(data_dir, captures_in_child=True)
        return cls(cairn, settings=settings, data_dir=cairn.data.root)

    def set_sandbox_problem(self, problem: str | None) -> None:
        if problem != self.sandbox_problem:
            self.sandbox_problem = problem
            self.sig_sandbox_problem.emit(problem)

    def set_sandbox_status(self, status: dict) -> None:
        """What a `views.status()` said of the hosts: the default host's problem and the
        others' (`host_problems`)."""
        self.host_problems = dict(status.get("host_problems") or {})
        self.set_sandbox_problem(status.get("problem"))

    def close(self, *, close_facade: bool = True, timeout_ms: int = 5000) -> None:
        """Stop following runs, stop listening, wait (bounded) for jobs, close the facade."""
        if self._closed:
            return
        self._closed = True
        self.followers.stop_all()
        self.sandbox_watch.stop()
        self.events.detach()
        if not self.jobs.shutdown(timeout_ms):
            log.warning("background work still running at exit")
        if close_facade:
            try:
                self.cairn.close()
            except Exception:  # at exit, a failure to close is logged, not shown
                log.exception("closing the facade failed")
