"""The window's sandbox watch when the default sandbox host is on another machine: the stream
is given the host's SSH bridge to ask at each connection, and a host that does not answer is
said in ssh's words (here an address nobody listens on), never handed to the Docker client as
an ssh:// address it cannot use."""

from __future__ import annotations

import socket

import pytest

from core.errors import CairnError
from core.sandbox.events import SandboxEventStream
from gui.sandbox_watch import SandboxWatch, events_address
from tests.support import wait_for


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


@pytest.fixture
def remote_default(cairn, tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("")
    key.chmod(0o600)
    known = tmp_path / "known_hosts"
    known.write_text("")
    cairn.settings.set(
        "hosts.far",
        f"docker ssh://nobody@127.0.0.1:{closed_port()} key={key} known_hosts={known}",
    )
    cairn.settings.set("defaults.host", "far")
    return cairn


def test_a_remote_default_hosts_address_is_its_bridge_asked_at_each_connection(remote_default):
    address = events_address(remote_default)
    assert callable(address)
    with pytest.raises(CairnError) as refused:
        address()
    assert refused.value.message.startswith("sandbox host far cannot be reached"), refused.value


def test_the_stream_says_why_a_remote_default_host_cannot_be_heard(remote_default, data_dir):
    states: list[str | None] = []
    stream = SandboxEventStream(
        data_dir,
        on_event=lambda _e: None,
        on_connection=states.append,
        base_url=events_address(remote_default),
        reconnect_delay=0.05,
    )
    stream.start()
    try:
        wait_for(lambda: states, timeout=30, what="the stream to say it is down")
        assert states[0] and states[0].startswith("sandbox host far cannot be reached"), states
        assert not stream.connected.is_set() and stream.running  # it keeps trying
    finally:
        stream.stop()


def test_the_watch_hands_the_bridge_to_its_stream(qtbot, remote_default, context):
    made: list[dict] = []

    class FakeStream:
        def __init__(self, data_dir, **options):
            made.append(options)

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

    watch = SandboxWatch(remote_default, context.jobs, stream_factory=FakeStream)
    watch.start()
    qtbot.waitUntil(lambda: bool(made), timeout=10_000)
    assert callable(made[0]["base_url"])
    watch.stop()
