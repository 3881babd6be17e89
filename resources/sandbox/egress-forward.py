#!/usr/bin/env python3
"""Egress forwarder, run inside a sandbox whose only network is loopback.

Listens on 127.0.0.1 and relays each TCP connection to Cairn's egress proxy over the unix socket
mounted at /cairn/egress/egress.sock, after a one-line header saying what the connection is for:

    --proxy PORT                      an HTTP proxy (for HTTP_PROXY / HTTPS_PROXY): sends `PROXY`,
                                      the host proxy reads the CONNECT or GET http://... request
    --forward LOCAL=HOST:PORT         a fixed forward: 127.0.0.1:LOCAL reaches HOST:PORT (so a
                                      client without proxy support can use http://127.0.0.1:LOCAL);
                                      sends `FORWARD HOST:PORT`
    --endpoint NAME=PORT              a model endpoint: http://127.0.0.1:PORT is the engine's base
                                      URL; sends `ENDPOINT NAME`, and the host proxy sends each
                                      request to that endpoint's upstream with the real credential

Deciding is the host proxy's job: it allows only its allowlist, answers refused proxy requests with
403 and closes refused forwards. This program only relays and never sees a credential, so it needs
no privileges and no configuration besides its arguments. Python 3.7 or later, standard library
only.
"""

import argparse
import asyncio
import contextlib
import os
import re
import signal
import sys

DEFAULT_SOCKET = "/cairn/egress/egress.sock"
LISTEN_HOST = "127.0.0.1"
CHUNK = 64 * 1024
_DESTINATION = re.compile(r"[A-Za-z0-9._\-]+:[0-9]{1,5}|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}")
_ENDPOINT_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def log(message):
    print("egress-forward: " + message, file=sys.stderr, flush=True)


def parse_forward(text):
    local, sep, destination = text.partition("=")
    if (
        not sep
        or not local.isdigit()
        or not 0 < int(local) < 65536
        or not _DESTINATION.fullmatch(destination)
    ):
        raise argparse.ArgumentTypeError(f"expected LOCAL_PORT=HOST:PORT, got {text!r}")
    return int(local), destination


def parse_endpoint(text):
    name, sep, port = text.rpartition("=")
    if (
        not sep
        or not _ENDPOINT_NAME.fullmatch(name)
        or not port.isdigit()
        or not 0 < int(port) < 65536
    ):
        raise argparse.ArgumentTypeError(f"expected NAME=PORT, got {text!r}")
    return name, int(port)


def parse_port(text):
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}")
    return int(text)


async def pump(reader, writer):
    while True:
        data = await reader.read(CHUNK)
        if not data:
            break
        writer.write(data)
        await writer.drain()
    # Pass the half-close on: an HTTP client may wait for the reply after sending its request.
    if writer.can_write_eof() and not writer.is_closing():
        with contextlib.suppress(OSError):
            writer.write_eof()


async def relay(client_reader, client_writer, header, socket_path):
    upstream_writer = None
    try:
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(
                socket_path, limit=CHUNK
            )
        except OSError as exc:
            log(f"cannot reach the egress proxy at {socket_path}: {exc}")
            return
        upstream_writer.write(header)
        tasks = [
            asyncio.ensure_future(pump(client_reader, upstream_writer)),
            asyncio.ensure_future(pump(upstream_reader, client_writer)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.exception()  # a reset on either side ends both; nothing to report
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for writer in (upstream_writer, client_writer):
            if writer is not None:
                writer.close()


def handler(header, socket_path):
    async def handle(reader, writer):
        try:
            await relay(reader, writer, header, socket_path)
        except (OSError, asyncio.CancelledError):
            writer.close()

    return handle


async def serve(args):
    servers = []
    if args.proxy is not None:
        servers.append((args.proxy, b"PROXY\n", "HTTP proxy"))
    for local, destination in args.forward:
        servers.append(
            (local, f"FORWARD {destination}\n".encode("ascii"), "forward to " + destination)
        )
    for name, local in args.endpoint:
        servers.append((local, f"ENDPOINT {name}\n".encode("ascii"), "model endpoint " + name))
    ports = [port for port, _, _ in servers]
    if len(set(ports)) != len(ports):
        raise SystemExit("egress-forward: a port is given twice")
    if not servers:
        raise SystemExit(
            "egress-forward: nothing to do (give --proxy, --forward and/or --endpoint)"
        )
    if not os.path.exists(args.socket):
        log(f"{args.socket} does not exist yet; connections fail until the egress proxy serves it")

    started = []
    for port, header, what in servers:
        server = await asyncio.start_server(
            handler(header, args.socket), LISTEN_HOST, port, limit=CHUNK
        )
        started.append(server)
        log(f"listening on {LISTEN_HOST}:{port} ({what})")

    stopping = asyncio.Event()
    loop = asyncio.get_event_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    for server in started:
        server.close()


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Relay loopback TCP to Cairn's egress proxy socket."
    )
    parser.add_argument("--socket", default=DEFAULT_SOCKET, help="the egress proxy's unix socket")
    parser.add_argument(
        "--proxy", type=parse_port, metavar="PORT", help="serve an HTTP proxy on 127.0.0.1:PORT"
    )
    parser.add_argument(
        "--forward",
        type=parse_forward,
        action="append",
        default=[],
        metavar="LOCAL=HOST:PORT",
        help="relay 127.0.0.1:LOCAL to HOST:PORT (repeatable)",
    )
    parser.add_argument(
        "--endpoint",
        type=parse_endpoint,
        action="append",
        default=[],
        metavar="NAME=PORT",
        help="serve the model endpoint NAME on 127.0.0.1:PORT (repeatable)",
    )
    args = parser.parse_args(argv)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve(args))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
