"""The sandbox watch: the app hears within a second that a sandbox stopped, died or was removed,
and every view is told.

Owns the Docker event stream's thread (core.sandbox.events) for the window's data folder, and
what an event leads to: a run in flight in that sandbox's workspace is settled through the facade
(`runs.settle`, which ends a run whose process is gone as interrupted, so it can be resumed), and
`sig_changed` tells the views to read their state again (header, tree badges, buttons, Sessions
tab). When the stream comes back after Docker was down, every run in flight is settled, since
events may have been missed. The stream only says where to look; the facade decides what is
true. Settling runs in a job: the thread never touches the store or a widget.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from core.app import Cairn
from core.errors import CairnError
from core.sandbox.events import SandboxEvent, SandboxEventStream
from gui.errors import describe_error
from gui.jobs import JobFailure, JobRunner
from gui.qt import QObject, QTimer, Signal, Slot

log = logging.getLogger(__name__)

SETTLE_DELAY_MS = 300  # a `die` is followed by `destroy` within milliseconds when removed
RETRY_DELAY_MS = 1500  # Docker may refuse to look at a container that is being removed
RETRIES = 3


@dataclass
class Settled:
    """What settling a workspace's runs found: each run's new state, and problems in words."""

    workspace_id: str | None
    runs: dict[str, str] = field(default_factory=dict)  # run id -> what it became
    problems: list[str] = field(default_factory=list)

    @property
    def interrupted(self) -> list[str]:
        return [r for r, state in self.runs.items() if state == "interrupted"]


def settle_workspace(cairn: Cairn, workspace_id: str | None) -> Settled:
    """Settle every run in flight of the tasks in one workspace (all workspaces when None).
    Runs in a job."""
    out = Settled(workspace_id)
    for task in cairn.tasks.all():
        if workspace_id is not None and task.workspace_id != workspace_id:
            continue
        run = cairn.runs.in_flight(task.id)
        if run is None:
            continue
        try:
            out.runs[run.id] = cairn.runs.settle(run)
        except Exception as exc:
            out.problems.append(f"run {run.id}: {describe_error(exc)}")
            if not isinstance(exc, CairnError):
                log.warning("settling run %s failed", run.id, exc_info=True)
    return out


def events_wanted(cairn: Cairn) -> bool:
    """Whether the data folder's sandboxes are Docker containers (the host backend has no
    daemon to listen to). Reads the settings file: call it in a job."""
    choice = os.environ.get("CAIRN_BACKEND") or cairn.settings.defaults().get("backend")
    return (choice or "docker") == "docker"


def events_address(cairn: Cairn) -> str | Callable[[], str] | None:
    """The API address of the sandbox host whose events to hear: None for the local Docker
    engine (as DOCKER_HOST says), else the default host's; for a host on another machine, what
    gives its SSH bridge's local socket, asked by the stream at each connection (the first
    waits on ssh, and while the host does not answer it fails with ssh's reason and is asked
    again). Reads the settings: call it in a job."""
    try:
        host = cairn.hosts.default()
    except CairnError:  # a host setting that cannot be used: said where sandboxes are made
        return None
    if host.local_docker:
        return None
    if host.remote:
        name = host.name

        def bridge() -> str:
            backend = cairn.sandboxes.backend_of(name)
            address = getattr(backend, "address", None)
            if not isinstance(address, str):
                raise CairnError(f"sandbox host {name} has no event stream to listen to")
            return address

        return bridge
    return host.address


class SandboxWatch(QObject):
    """Listens to the data folder's sandbox events and settles what they touch."""

    sig_changed = Signal(object)
    """A sandbox changed and what depends on it was settled: a Settled (read the views again)."""

    sig_connection = Signal(object)
    """The event stream came up (None) or went down (the problem in words)."""

    _sig_event = Signal(object)  # from the stream's thread, queued to the GUI thread
    _sig_stream = Signal(object)

    def __init__(
        self,
        cairn: Cairn,
        jobs: JobRunner,
        parent: QObject | None = None,
        *,
        stream_factory: Callable[..., SandboxEventStream] = SandboxEventStream,
    ):
        super().__init__(parent)
        self._cairn = cairn
        self._jobs = jobs
        self._factory = stream_factory
        self._stream: SandboxEventStream | None = None
        self._pending: dict[str | None, int] = {}  # workspace -> retries left
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SETTLE_DELAY_MS)
        self._timer.timeout.connect(self._settle_pending)
        self._sig_event.connect(self._on_event)
        self._sig_stream.connect(self._on_stream)
        self.problem: str | None = None
        self.events_seen = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start listening (a job decides first whether there is a Docker daemon to hear)."""
        if self._stream is not None:
            return
        cairn = self._cairn
        self._jobs.job(
            lambda: (events_wanted(cairn), events_address(cairn)),
            what="read the sandbox backend",
            parent=self,
        ).success(lambda found: self._start_stream(*found)).run()

    def _start_stream(self, wanted: bool, address: str | Callable[[], str] | None = None) -> None:
        if not wanted or self._stream is not None:
            return
        where = {"base_url": address} if address else {}
        self._stream = self._factory(
            self._cairn.data.root,
            on_event=self._sig_event.emit,
            on_connection=self._sig_stream.emit,
            **where,
        )
        self._stream.start()

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.stop()
        self._timer.stop()

    @property
    def listening(self) -> bool:
        return self._stream is not None and self._stream.connected.is_set()

    # -- events ---------------------------------------------------------------------------------

    @Slot(object)
    def _on_event(self, event: SandboxEvent) -> None:
        self.events_seen += 1
        if not event.ends:
            self.sig_changed.emit(Settled(event.workspace_id))  # started again: badges change
            return
        self.notice(event.workspace_id, at_once=event.action == "destroy")

    @Slot(object)
    def _on_stream(self, problem: str | None) -> None:
        was = self.problem
        self.problem = problem
        self.sig_connection.emit(problem)
        if problem is None and was is not None:
            self.notice(None)  # events may have been missed while the stream was down

    def notice(self, workspace_id: str | None, *, at_once: bool = False) -> None:
        """Something about this workspace's sandbox (None: any) changed: settle its runs."""
        self._pending.setdefault(workspace_id, RETRIES)
        if at_once:
            self._timer.stop()
            self._settle_pending()
        elif not self._timer.isActive():
            self._timer.start()

    def _settle_pending(self) -> None:
        pending, self._pending = self._pending, {}
        cairn = self._cairn
        for workspace_id, retries in pending.items():
            self._settle(cairn, workspace_id, retries)

    def _settle(self, cairn: Cairn, workspace_id: str | None, retries: int) -> None:
        def work() -> Settled:
            return settle_workspace(cairn, workspace_id)

        def settled(result: Settled) -> None:
            self._settled(result, retries)

        self._jobs.job(
            work,
            key=f"sandbox-settle-{workspace_id}",
            what="settle the runs of a sandbox that changed",
            parent=self,
        ).success(settled).failure(self._failed).run()

    def _settled(self, settled: Settled, retries: int) -> None:
        if settled.problems and retries > 1:
            # Docker may refuse to look while it removes the container: look again shortly.
            workspace_id = settled.workspace_id
            QTimer.singleShot(RETRY_DELAY_MS, self, lambda: self._retry(workspace_id, retries - 1))
        self.sig_changed.emit(settled)

    def _retry(self, workspace_id: str | None, retries: int) -> None:
        self._pending[workspace_id] = retries
        self._settle_pending()

    def _failed(self, failure: JobFailure) -> None:
        log.warning("settling a sandbox's runs failed: %s", failure.message)
        self.sig_changed.emit(Settled(None, problems=[failure.message]))
