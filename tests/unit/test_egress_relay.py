"""The egress relay (resources/sandbox/egress-relay.py) and Cairn's end of it (its `Mux`, as
core.sandbox.egress_tunnel uses it), over a relay process of this machine: many connections at
once carried whole both ways with their half-closes, a connection the far end refuses, the
relay's end with its stdin, its socket left to a newer relay, and a frame it cannot read."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from core.sandbox.egress import EgressPaths
from core.sandbox.egress_tunnel import RELAY_SCRIPT, TunnelPaths, relay_module

relay = relay_module()
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def start_relay(socket_path: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(RELAY_SCRIPT),
        "--socket",
        str(socket_path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def carried(tmp: Path, upstream: Handler, body: Callable[[Path], Awaitable[None]]) -> None:
    """Run `body(relay socket)` while a relay carries that socket's connections to a server
    of `upstream` here, through the Mux, as the tunnel does."""
    up_path, relay_path = tmp / "up.sock", tmp / "relay.sock"
    server = await asyncio.start_unix_server(upstream, str(up_path))
    process = await start_relay(relay_path)
    assert process.stdout and process.stdin

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(str(up_path))

    mux = relay.Mux(process.stdout, process.stdin, connect=connect)
    running = asyncio.ensure_future(mux.run())
    try:
        await asyncio.wait_for(mux.hello.wait(), 10)
        await body(relay_path)
    finally:
        process.stdin.close()
        await asyncio.wait_for(process.wait(), 10)
        await asyncio.wait_for(running, 10)
        server.close()
    assert not relay_path.exists()  # its own socket, removed as it ends


async def digest_reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read everything until the client's half-close, then answer its length and sha256."""
    data = await reader.read()
    writer.write(f"{len(data)} {hashlib.sha256(data).hexdigest()}".encode())
    await writer.drain()
    writer.close()


def test_many_connections_are_carried_whole_both_ways_with_their_half_closes(tmp_path: Path):
    payloads = [os.urandom(n) for n in (0, 1, 70_000, 1_500_000, *([4096] * 16))]

    async def client(path: Path, payload: bytes) -> bytes:
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(payload)
        await writer.drain()
        writer.write_eof()  # the half-close must reach the server, which answers only then
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        return answer

    async def body(path: Path) -> None:
        answers = await asyncio.gather(*(client(path, p) for p in payloads))
        for payload, answer in zip(payloads, answers, strict=True):
            assert answer.decode() == f"{len(payload)} {hashlib.sha256(payload).hexdigest()}"

    asyncio.run(carried(tmp_path, digest_reply, body))


def test_a_large_answer_arrives_whole_before_the_end(tmp_path: Path):
    big = os.urandom(3_000_000)

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(big)
        await writer.drain()
        writer.close()  # the far side closes first: everything it sent still arrives

    async def body(path: Path) -> None:
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b"GET\n")
        await writer.drain()
        got = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        assert got == big

    asyncio.run(carried(tmp_path, upstream, body))


def test_a_connection_nobody_answers_here_is_closed_there(tmp_path: Path):
    async def body(path: Path) -> None:
        os.unlink(tmp_path / "up.sock")  # the proxy is gone: each connect fails
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b"FORWARD example.org:443\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()

    asyncio.run(carried(tmp_path, digest_reply, body))


def test_a_relay_that_ends_late_leaves_a_newer_relays_socket(tmp_path: Path):
    path = tmp_path / "relay.sock"

    async def body() -> None:
        old = await start_relay(path)
        assert old.stdout and old.stdin
        assert (await old.stdout.readexactly(relay.HEADER.size))[:1] == relay.HELLO
        new = await start_relay(path)  # the next connection's relay takes the name over
        assert new.stdout and new.stdin
        assert (await new.stdout.readexactly(relay.HEADER.size))[:1] == relay.HELLO
        old.stdin.close()
        await asyncio.wait_for(old.wait(), 10)
        assert path.exists()  # still the new one's
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(path))
        new.stdin.close()
        await asyncio.wait_for(new.wait(), 10)
        assert not path.exists()

    asyncio.run(body())


def test_a_frame_the_relay_cannot_read_ends_it_and_says_so(tmp_path: Path):
    path = tmp_path / "relay.sock"
    done = subprocess.run(
        [sys.executable, str(RELAY_SCRIPT), "--socket", str(path)],
        input=relay.HEADER.pack(relay.DATA, 1, relay.MAX_FRAME + 1),
        capture_output=True,
        timeout=20,
    )
    assert done.returncode == 0
    assert b"stopped: a frame of" in done.stderr
    assert not path.exists()
    unknown = subprocess.run(
        [sys.executable, str(RELAY_SCRIPT), "--socket", str(path)],
        input=relay.HEADER.pack(b"Z", 1, 0),
        capture_output=True,
        timeout=20,
    )
    assert b"an unknown frame" in unknown.stderr


def test_the_relay_never_opens_a_connection_it_is_asked_to(tmp_path: Path):
    """The relay never connects anywhere: an O frame sent to it is a protocol error."""
    done = subprocess.run(
        [sys.executable, str(RELAY_SCRIPT), "--socket", str(tmp_path / "relay.sock")],
        input=relay.HEADER.pack(relay.OPEN, 7, 0),
        capture_output=True,
        timeout=20,
    )
    assert b"an unexpected open of channel 7" in done.stderr


def test_the_tunnels_pid_file_is_the_one_the_proxys_stop_looks_at(tmp_path: Path):
    sock = tmp_path / "egress" / "ses_1" / "sandbox" / "egress.sock"
    assert TunnelPaths.of(sock).pid_file == EgressPaths(sock).tunnel_pid_file
