#!/usr/bin/env python3
"""Egress relay, run inside a sandbox on another machine, where Cairn's egress proxy socket cannot
be mounted: it serves the socket the in-sandbox forwarder (egress-forward.py) connects to, and
carries every connection made to it over its own stdin and stdout to Cairn, which connects each
one to the egress proxy on the person's machine. So the allowlist, the model endpoints and their
credentials stay there: this program relays bytes and decides nothing.

    egress-relay.py [--socket /cairn/egress/egress.sock]

Frames, both ways: kind (1 byte), channel (4 bytes), length (4 bytes, network order), then the
bytes.
    H  0 (once, from here)   the socket is served
    O  channel (from here)   a connection was made to the socket
    D  channel               bytes of that connection
    E  channel               that side sent everything (a half-close)
    C  channel               the connection is gone (either side)
The relay ends when its stdin ends (the connection to Cairn is gone: Cairn starts another), on
SIGTERM, and on a frame it cannot read. Python 3.7 or later, standard library only; Cairn's end
imports `Mux` from this file, so both ends speak one implementation.
"""

import argparse
import asyncio
import contextlib
import os
import signal
import stat
import struct
import sys

DEFAULT_SOCKET = "/cairn/egress/egress.sock"
HEADER = struct.Struct("!cII")
HELLO, OPEN, DATA, EOF, CLOSE = b"H", b"O", b"D", b"E", b"C"
CHUNK = 64 * 1024
MAX_FRAME = 1024 * 1024


class ProtocolError(Exception):
    """A frame that is not one of the protocol's."""


class Channel:
    """One connection carried over the stream: its bytes go out as D frames, D frames that
    arrive are written to it; each half-close is passed on, and it ends when both are done."""

    def __init__(self, mux, number, reader, writer):
        self.mux = mux
        self.number = number
        self.reader = reader
        self.writer = writer
        self.sent_eof = False
        self.got_eof = False
        self.task = None

    def start(self):
        self.task = asyncio.ensure_future(self.pump())

    async def pump(self):
        try:
            while True:
                data = await self.reader.read(CHUNK)
                if not data:
                    break
                await self.mux.send(DATA, self.number, data)
            await self.mux.send(EOF, self.number)
        except (OSError, ConnectionError):
            self.close(tell=True)
            return
        self.sent_eof = True
        if self.got_eof:
            self.close(tell=True)

    async def deliver(self, data):
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (OSError, ConnectionError):
            self.close(tell=True)

    def peer_eof(self):
        self.got_eof = True
        if self.sent_eof:
            self.close(tell=True)
            return
        with contextlib.suppress(OSError, RuntimeError):
            if self.writer.can_write_eof() and not self.writer.is_closing():
                self.writer.write_eof()

    def close(self, tell):
        if self.mux.channels.get(self.number) is not self:
            return
        del self.mux.channels[self.number]
        self.writer.close()
        current = asyncio.current_task() if hasattr(asyncio, "current_task") else None
        if self.task is not None and self.task is not current:
            self.task.cancel()
        if tell:
            asyncio.ensure_future(self.mux.send_quietly(CLOSE, self.number))


class Mux:
    """Connections multiplexed over one byte stream (`reader`, `writer`: asyncio streams).
    The sandbox's end accepts connections and `add`s them; Cairn's end gives `connect`, a
    coroutine function that opens the connection an O frame asks for (an OSError refuses it)."""

    def __init__(self, reader, writer, connect=None):
        self.reader = reader
        self.writer = writer
        self.connect = connect
        self.channels = {}
        self.next_number = 1
        self.lock = asyncio.Lock()
        self.hello = asyncio.Event()

    async def send(self, kind, number, data=b""):
        async with self.lock:
            self.writer.write(HEADER.pack(kind, number, len(data)) + data)
            await self.writer.drain()

    async def send_quietly(self, kind, number, data=b""):
        with contextlib.suppress(OSError, ConnectionError, RuntimeError):
            await self.send(kind, number, data)

    async def add(self, reader, writer):
        """A connection made to the served socket: a new channel."""
        number = self.next_number
        self.next_number += 1
        channel = Channel(self, number, reader, writer)
        self.channels[number] = channel
        try:
            await self.send(OPEN, number)
        except (OSError, ConnectionError, RuntimeError):
            channel.close(tell=False)
            return
        channel.start()

    async def run(self):
        """Read frames until the stream ends (or one cannot be read); every channel is closed
        then."""
        try:
            while True:
                try:
                    head = await self.reader.readexactly(HEADER.size)
                except asyncio.IncompleteReadError:
                    return
                kind, number, size = HEADER.unpack(head)
                if size > MAX_FRAME:
                    raise ProtocolError(f"a frame of {size} bytes")
                try:
                    data = await self.reader.readexactly(size) if size else b""
                except asyncio.IncompleteReadError:
                    return
                await self._dispatch(kind, number, data)
        finally:
            for channel in list(self.channels.values()):
                channel.close(tell=False)

    async def _dispatch(self, kind, number, data):
        if kind == HELLO:
            self.hello.set()
            return
        channel = self.channels.get(number)
        if kind == OPEN:
            if self.connect is None or channel is not None:
                raise ProtocolError(f"an unexpected open of channel {number}")
            try:
                reader, writer = await self.connect()
            except OSError:
                await self.send(CLOSE, number)
                return
            channel = Channel(self, number, reader, writer)
            self.channels[number] = channel
            channel.start()
        elif kind not in (DATA, EOF, CLOSE):
            raise ProtocolError(f"an unknown frame {kind!r}")
        elif channel is None:
            return  # closed here already; the other side learns it from our C
        elif kind == DATA:
            await channel.deliver(data)
        elif kind == EOF:
            channel.peer_eof()
        else:
            channel.close(tell=False)


def log(message):
    print("egress-relay: " + message, file=sys.stderr, flush=True)


def _unlink_socket(path, inode=None):
    """Remove a socket left by an earlier relay (never anything else), or only this relay's own
    (`inode`), so a relay that ends late leaves a newer relay's socket alone."""
    try:
        found = os.lstat(path)
        if stat.S_ISSOCK(found.st_mode) and inode in (None, found.st_ino):
            os.unlink(path)
    except FileNotFoundError:
        pass


async def serve(socket_path):
    loop = asyncio.get_event_loop()
    reader = asyncio.StreamReader(limit=CHUNK * 4)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout.buffer
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    mux = Mux(reader, writer)
    _unlink_socket(socket_path)
    server = await asyncio.start_unix_server(mux.add, socket_path)
    own = os.lstat(socket_path).st_ino
    log(f"serving {socket_path}")
    await mux.send(HELLO, 0)
    running = asyncio.ensure_future(mux.run())
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait([running, stop], return_when=asyncio.FIRST_COMPLETED)
        if running.done() and running.exception() is not None:
            log(f"stopped: {running.exception()}")
    finally:
        server.close()
        running.cancel()
        stop.cancel()
        _unlink_socket(socket_path, own)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Carry the egress socket's connections over stdin and stdout."
    )
    parser.add_argument("--socket", default=DEFAULT_SOCKET, help="the socket to serve")
    args = parser.parse_args(argv)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve(args.socket))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
