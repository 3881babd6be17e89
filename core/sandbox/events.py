"""Sandbox events: the Docker daemon's (or Podman's) word that one of a data folder's sandboxes
stopped, died, was removed, paused or started, as it happens.

Owns listening to the daemon's event stream (filtered to containers labelled `cairn.managed=1`
and this data folder), turning each event into a plain `SandboxEvent`, and reconnecting when the
daemon goes away and comes back (events missed meanwhile are asked for again with `since`, and
the listener is told the stream was down, so it can check the state itself). What an event
means for runs and workspaces is the caller's: the stream only reports. Polling stays the
fallback; this makes a vanished sandbox known in about a second instead of at the next poll.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import CairnError, exception_chain

log = logging.getLogger(__name__)

# Kept here rather than imported from core.sandbox.docker: that module imports docker-py's types
# and this one must stay cheap to import. tests/unit/test_sandbox_events.py checks they agree.
LABEL_MANAGED = "cairn.managed"
LABEL_WORKSPACE = "cairn.workspace"
LABEL_SESSION = "cairn.session"
LABEL_DATA_DIR = "cairn.data_dir"

# What a container can do that changes what Cairn shows. `exec_*` and health events are noise.
WATCHED_ACTIONS = frozenset(
    {"start", "die", "stop", "kill", "oom", "destroy", "pause", "unpause", "restart"}
)
# Podman's words for the same actions, on its Docker-compatible event stream.
ACTION_NAMES = {"remove": "destroy", "died": "die"}
# Actions after which a sandbox's processes may be gone.
ENDING_ACTIONS = frozenset({"die", "stop", "kill", "oom", "destroy", "pause"})

RECONNECT_DELAY_S = 1.0
RECONNECT_DELAY_MAX_S = 10.0


@dataclass(frozen=True)
class SandboxEvent:
    """One container event of a Cairn sandbox, in Cairn's terms."""

    action: str  # start, die, stop, kill, oom, destroy, pause, unpause, restart
    container_id: str
    container_name: str
    workspace_id: str | None
    session_id: str | None
    exit_code: int | None
    time: float

    @property
    def ends(self) -> bool:
        """Whether the sandbox's processes may be gone after this event."""
        return self.action in ENDING_ACTIONS


def _root(data_dir: str | os.PathLike[str]) -> str:
    return str(Path(data_dir).expanduser().resolve())


def event_filters(data_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The daemon-side filter: containers of this data folder's sandboxes only. One label:
    Docker takes all of several labels, but Podman's event stream (4.3) takes any of them, and
    `cairn.managed=1` alone would let every data folder's sandboxes through."""
    return {"type": ["container"], "label": [f"{LABEL_DATA_DIR}={_root(data_dir)}"]}


def parse_event(raw: dict[str, Any], data_dir: str | None = None) -> SandboxEvent | None:
    """A daemon event as a SandboxEvent; None for events that change nothing Cairn shows, and
    (given the data folder's resolved path) for another data folder's sandboxes."""
    if raw.get("Type", "container") != "container":
        return None
    action = str(raw.get("Action") or raw.get("status") or "")
    action = action.split(":", 1)[0].strip()
    action = ACTION_NAMES.get(action, action)
    if action not in WATCHED_ACTIONS:
        return None
    actor = raw.get("Actor") or {}
    attrs = actor.get("Attributes") or {}
    if attrs.get(LABEL_MANAGED) not in (None, "1"):
        return None
    if data_dir is not None and attrs.get(LABEL_DATA_DIR) not in (None, data_dir):
        return None  # what the daemon's filter should have kept out, whatever the engine
    code = attrs.get("exitCode")
    when = raw.get("timeNano")
    return SandboxEvent(
        action=action,
        container_id=str(actor.get("ID") or raw.get("id") or ""),
        container_name=str(attrs.get("name") or ""),
        workspace_id=attrs.get(LABEL_WORKSPACE) or None,
        session_id=attrs.get(LABEL_SESSION) or None,
        exit_code=int(code) if isinstance(code, str) and code.lstrip("-").isdigit() else None,
        time=int(when) / 1e9 if isinstance(when, int) else float(raw.get("time") or time.time()),
    )


class SandboxEventStream:
    """Listens to one data folder's sandbox events on a thread of its own until `stop()`.

    `on_event(event)` is called on that thread for each SandboxEvent; `on_connection(problem)`
    when the stream comes up (None) or goes down (the problem in words). Both must be quick and
    must not touch a GUI: hand the value to the GUI thread (a queued signal).

    `base_url` is the engine's API address (the local one, as DOCKER_HOST says, when None), or
    a function that gives it, called on the stream's thread at each connection: a remote host's
    bridge, which may wait on ssh and fails (a CairnError, said as the problem) while the host
    does not answer."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        on_event: Callable[[SandboxEvent], None],
        on_connection: Callable[[str | None], None] | None = None,
        base_url: str | Callable[[], str] | None = None,
        reconnect_delay: float = RECONNECT_DELAY_S,
    ):
        self.filters = event_filters(data_dir)
        self._root = _root(data_dir)
        self._on_event = on_event
        self._on_connection = on_connection or (lambda _problem: None)
        self._base_url = base_url
        self._reconnect_delay = reconnect_delay
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._stream: Any = None
        self._client: Any = None
        self._thread: threading.Thread | None = None
        self.connected = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="cairn-sandbox-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop listening; the thread ends once its blocking read is cancelled."""
        self._stopping.set()
        self._close_stream()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the thread ------------------------------------------------------------------------------

    def _loop(self) -> None:
        since: float | None = None
        delay = self._reconnect_delay
        was_up: bool | None = None
        while not self._stopping.is_set():
            try:
                events = self._open(since)
                self.connected.set()
                if was_up is not True:
                    self._on_connection(None)
                was_up, delay = True, self._reconnect_delay
                for raw in events:
                    if self._stopping.is_set():
                        break
                    if isinstance(raw, dict):
                        event = parse_event(raw, self._root)
                        since = max(since or 0.0, _event_time(raw))
                        if event is not None:
                            self._deliver(event)
                if not self._stopping.is_set():
                    raise ConnectionError("the Docker daemon closed its event stream")
            except Exception as exc:  # noqa: BLE001 - every way the daemon can go away
                self.connected.clear()
                self._close_stream()
                if self._stopping.is_set():
                    break
                if was_up is not False:
                    self._on_connection(describe_stream_problem(exc))
                was_up = False
                log.debug("sandbox events: %s; reconnecting in %.1fs", exc, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, RECONNECT_DELAY_MAX_S)
        self.connected.clear()
        self._close_stream()

    def _open(self, since: float | None) -> Iterator[Any]:
        import docker  # slow to import: only when the stream is wanted

        url = self._base_url() if callable(self._base_url) else self._base_url
        client = docker.DockerClient(base_url=url) if url else docker.from_env()
        # A ping first: a dead socket fails here with a clear error instead of inside the stream.
        client.api.ping()
        # `since` asks again for what happened while the stream was down (a second's overlap is
        # harmless: the listener treats events as hints to look, not as counts).
        stream = client.api.events(
            since=int(since) if since else None, filters=self.filters, decode=True
        )
        with self._lock:
            self._client, self._stream = client, stream
        if self._stopping.is_set():
            self._close_stream()
        return iter(stream)

    def _deliver(self, event: SandboxEvent) -> None:
        try:
            self._on_event(event)
        except Exception:  # a listener's bug must not end the stream
            log.exception("a sandbox event listener failed")

    def _close_stream(self) -> None:
        with self._lock:
            stream, client = self._stream, self._client
            self._stream = self._client = None
        for thing in (stream, client):
            if thing is None:
                continue
            try:
                thing.close()
            except Exception:  # closing a broken connection may fail; it is gone either way
                log.debug("closing the event stream failed", exc_info=True)


def _event_time(raw: dict[str, Any]) -> float:
    when = raw.get("timeNano")
    if isinstance(when, int):
        return when / 1e9
    try:
        return float(raw.get("time") or 0.0)
    except (TypeError, ValueError):
        return 0.0


def describe_stream_problem(exc: BaseException) -> str:
    """Why the event stream is down, in one line (never the client library's own text)."""
    chain = exception_chain(exc)
    said = next((e for e in chain if isinstance(e, CairnError)), None)
    if said is not None:  # a remote host's bridge, saying why it cannot be reached
        return said.message
    if any(isinstance(e, PermissionError) for e in chain):
        return "Cairn may not use the Docker socket (permission denied)"
    if any(isinstance(e, (FileNotFoundError, ConnectionRefusedError)) for e in chain):
        return "Docker is not running"
    if any(isinstance(e, ConnectionError) and "closed its event stream" in str(e) for e in chain):
        return "Docker closed its event stream (restarting?)"
    return "Docker is not answering"
