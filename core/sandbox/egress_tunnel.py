"""The egress tunnel: how a sandbox on another machine reaches the egress proxy on this one.

Nothing of this machine can be mounted into such a sandbox, so the proxy's socket is not there.
Instead the sandbox has an empty tmpfs at /cairn/egress, and this module's detached process
keeps one `ssh … docker exec -i <container> python3 /cairn/tools/egress-relay.py` running: the
relay serves /cairn/egress/egress.sock there (where the in-sandbox forwarder connects, as on this
machine) and carries each connection made to it over the exec's stdin and stdout, framed
(resources/sandbox/egress-relay.py, whose `Mux` both ends use); here each one is connected to
the session's egress proxy socket. So the allowlist, the model endpoints and the credentials they
add stay on this machine: the other one only ever sees the bytes a run sends and receives.
Whatever the frames from there say, this end only ever connects to that one socket (which the
sandbox could reach anyway) and reads no frame longer than `MAX_FRAME`: a sandbox that writes
into the relay's output gains nothing, and a frame it cannot read ends the connection.

The process outlives the GUI, as the proxy does. It reconnects when the connection drops (1 s,
doubling to 30 s), ends when the container is gone or the proxy no longer runs, and is found by
its pid file's flock (`tunnel.pid` beside the proxy's, in `egress/<session>/`), with the
container it serves in `tunnel.target`. `ensure_tunnel` returns once the relay serves the
socket there (so the first request of a run finds it), or says why it could not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from core.errors import CairnError
from core.launch import python_command, resource_path, stop_process
from core.locks import flock_holder_pid
from core.sandbox.egress import (
    SANDBOX_SOCKET,
    EgressPaths,
    _acquire_pid_file,
    _connect_unix,
    _output_lines,
    running_pid,
)
from core.sandbox.ssh_bridge import SshBridge, SshTarget

RELAY_SCRIPT = resource_path("sandbox", "egress-relay.py")
RELAY_IN_SANDBOX = "/cairn/tools/egress-relay.py"
START_TIMEOUT_S = 40.0  # ssh's connect timeout, the exec and python's start
STOP_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0  # to the proxy's socket here
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
STEADY_S = 30.0  # a connection that lasted this long starts the waits from the first again
GONE_WORDS = ("No such container", "is not running")


class TunnelError(CairnError):
    """The tunnel to a remote sandbox's relay could not be started."""


@dataclass(frozen=True)
class TunnelPaths:
    state_dir: Path  # the session's egress state folder (never mounted)

    @classmethod
    def of(cls, egress_socket: os.PathLike[str] | str) -> TunnelPaths:
        return cls(EgressPaths(Path(egress_socket)).state_dir)

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "tunnel.pid"  # EgressPaths.tunnel_pid_file: egress.stop's too

    @property
    def target_file(self) -> Path:
        return self.state_dir / "tunnel.target"

    @property
    def output_file(self) -> Path:
        return self.state_dir / "tunnel.stderr"

    @property
    def serving_file(self) -> Path:
        """Present while a connection to the relay is up (it serves the socket there)."""
        return self.state_dir / "tunnel.serving"


_relay: ModuleType | None = None


def relay_module() -> ModuleType:
    """The relay script as a module: its `Mux` is this end's too."""
    global _relay
    if _relay is None:
        spec = importlib.util.spec_from_file_location("cairn_egress_relay", RELAY_SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _relay = module
    return _relay


def tunnel_pid(egress_socket: os.PathLike[str] | str) -> int | None:
    """The pid of the tunnel of this proxy socket's session, or None when none runs."""
    return flock_holder_pid(TunnelPaths.of(egress_socket).pid_file)


def tunnel_target(egress_socket: os.PathLike[str] | str) -> str | None:
    """The container the running tunnel serves (None when none runs)."""
    paths = TunnelPaths.of(egress_socket)
    if tunnel_pid(egress_socket) is None:
        return None
    try:
        return paths.target_file.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def ensure_tunnel(
    egress_socket: os.PathLike[str] | str,
    container_id: str,
    bridge: SshBridge,
    *,
    python: str | None = None,
    timeout: float = START_TIMEOUT_S,
) -> int:
    """The pid of a tunnel carrying `container_id`'s egress socket to `egress_socket`: the
    running one when it serves that container, else a new one (one serving another container,
    an earlier generation's, is stopped first). Returns once the relay serves the socket there;
    TunnelError (a CairnError) says why it does not."""
    socket_path = Path(egress_socket)
    paths = TunnelPaths.of(socket_path)
    pid = tunnel_pid(socket_path)
    if pid is not None and tunnel_target(socket_path) == container_id:
        # Between two connections (a dropped one, a wait before the next): until it serves
        # again, a run's first request would find nothing there.
        deadline = time.monotonic() + timeout
        while not paths.serving_file.exists():
            if tunnel_pid(socket_path) is None:
                break  # it ended (the sandbox went away meanwhile): start another
            if time.monotonic() > deadline:
                lines = _output_lines(paths.output_file, 0)
                why = lines[-1].removeprefix("egress tunnel: ") if lines else "no output"
                raise TunnelError(f"the egress tunnel to the sandbox is not connected: {why[:300]}")
            time.sleep(0.1)
        else:
            return pid
        pid = tunnel_pid(socket_path)
    if pid is not None:
        stop_tunnel(socket_path)
    paths.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    argv = python_command(
        "core.sandbox.egress_tunnel",
        "--egress-socket", str(socket_path),
        "--container", container_id,
        "--ssh", bridge.target.url,
        "--detach",
        python=python,
    )  # fmt: skip
    if bridge.key_file is not None:
        argv += ["--key", str(bridge.key_file)]
    if bridge.known_hosts is not None:
        argv += ["--known-hosts", str(bridge.known_hosts)]
    try:
        with open(paths.output_file, "ab") as output:
            since = os.fstat(output.fileno()).st_size
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                    cwd="/",
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                stop_tunnel(socket_path)
                raise _failed(
                    f"the relay in the sandbox did not answer within {timeout:g} s", paths, since
                ) from None
    except OSError as exc:
        raise TunnelError(f"the egress tunnel cannot start: {exc}") from None
    pid = tunnel_pid(socket_path)
    if done.returncode != 0 or pid is None:
        raise _failed("the egress tunnel to the sandbox failed to start", paths, since)
    return pid


def _failed(what: str, paths: TunnelPaths, since: int) -> TunnelError:
    lines = _output_lines(paths.output_file, since)
    detail = lines[-1].removeprefix("egress tunnel: ")[:300] if lines else "no output"
    hint = f"its output is in {paths.output_file}" if len(lines) > 1 else None
    return TunnelError(f"{what}: {detail}", hint=hint)


def stop_tunnel(egress_socket: os.PathLike[str] | str, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the session's tunnel (SIGTERM, then SIGKILL); True if one was running."""
    pid = tunnel_pid(egress_socket)
    if pid is None:
        return False
    if not stop_process(pid, lambda: tunnel_pid(egress_socket) is not None, timeout):
        raise TunnelError(f"egress tunnel pid {pid} did not stop")
    return True


# --- The detached process -----------------------------------------------------------------------


class Tunnel:
    """One session's tunnel: the relay in `container` run over ssh again and again, each
    channel it opens connected to `egress_socket` here."""

    def __init__(self, egress_socket: Path, container: str, bridge: SshBridge):
        self.egress_socket = egress_socket
        self.container = container
        self.bridge = bridge
        self.serving_file = TunnelPaths.of(egress_socket).serving_file

    def relay_argv(self) -> list[str]:
        command = ["docker", "exec", "-i", self.container, "python3", RELAY_IN_SANDBOX]
        command += ["--socket", SANDBOX_SOCKET]
        # ssh hands the far side one command line, read by a shell there.
        return self.bridge.ssh_argv(*(shlex.quote(word) for word in command))

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # A local socket answers at once; its path may be longer than a socket address holds.
        sock = _connect_unix(self.egress_socket, CONNECT_TIMEOUT_S)
        sock.setblocking(False)
        return await asyncio.open_unix_connection(sock=sock)

    async def session(self, on_served: object = None) -> tuple[bool, str]:
        """One connection to the relay, until it ends: (whether the relay served the socket,
        the last of what ssh and the far side said on stderr)."""
        relay = relay_module()
        process = await asyncio.create_subprocess_exec(
            *self.relay_argv(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdin and process.stdout and process.stderr
        mux = relay.Mux(process.stdout, process.stdin, connect=self.connect)
        said = bytearray()

        async def read_stderr() -> None:
            assert process.stderr
            while chunk := await process.stderr.read(4096):
                said.extend(chunk)
                del said[:-4096]

        async def served() -> None:
            await mux.hello.wait()
            with contextlib.suppress(OSError):
                self.serving_file.touch()
            if callable(on_served):
                on_served()

        helpers = [asyncio.ensure_future(read_stderr()), asyncio.ensure_future(served())]
        try:
            with contextlib.suppress(relay.ProtocolError, OSError, ConnectionError):
                await mux.run()
        finally:
            with contextlib.suppress(OSError):
                self.serving_file.unlink(missing_ok=True)
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
            await process.wait()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(helpers[0], 2)
            for task in helpers:
                task.cancel()
        return mux.hello.is_set(), said.decode("utf-8", "replace").strip()

    def run(self, ready: object = None) -> int:
        """Connect again and again until the container is gone or the proxy stops. `ready` is
        told once, after the first connection served the socket (or with the reason it did
        not: then this returns 1 at once)."""
        delay = RETRY_FIRST_S
        first = True
        while True:
            if running_pid(self.egress_socket) is None:
                log("the egress proxy no longer runs: the tunnel ends")
                return 0
            began = time.monotonic()

            def served() -> None:
                if callable(ready):
                    ready(None)

            was_served, said = asyncio.run(self.session(served if first else None))
            last = said.splitlines()[-1] if said else "the connection ended"
            if first and not was_served:
                if callable(ready):
                    ready(last)
                return 1
            first = False
            if any(words in said for words in GONE_WORDS):
                log(f"the sandbox is gone ({last}): the tunnel ends")
                return 0
            if time.monotonic() - began > STEADY_S:
                delay = RETRY_FIRST_S
            log(f"{last}; connecting again in {delay:g} s")
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f"egress tunnel: {stamp} {message}", file=sys.stderr, flush=True)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m core.sandbox.egress_tunnel",
        description="Carry a remote sandbox's egress socket to the egress proxy here.",
    )
    parser.add_argument("--egress-socket", required=True, help="the session's proxy socket")
    parser.add_argument("--container", required=True, help="the sandbox's container id")
    parser.add_argument("--ssh", required=True, help="ssh://user@host[:port] of its engine")
    parser.add_argument("--key", help="the SSH key file")
    parser.add_argument("--known-hosts", help="the known_hosts file")
    parser.add_argument(
        "--detach", action="store_true", help="fork into a new session; exit once serving"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    socket_path = Path(os.path.abspath(args.egress_socket))
    paths = TunnelPaths.of(socket_path)
    bridge = SshBridge(
        SshTarget.parse(args.ssh),
        key_file=Path(args.key) if args.key else None,
        known_hosts=Path(args.known_hosts) if args.known_hosts else None,
    )
    ready_fd = None
    if args.detach:
        read_end, ready_fd = os.pipe()
        if os.fork() > 0:
            os.close(ready_fd)
            with os.fdopen(read_end, "rb") as pipe:
                message = pipe.read().decode("utf-8", "replace")
            if message == "ready":
                return 0
            print(f"egress tunnel: {message or 'exited before it was ready'}", file=sys.stderr)
            return 1
        os.close(read_end)
        os.setsid()
        os.chdir("/")

    def ready(problem: str | None) -> None:
        nonlocal ready_fd
        if ready_fd is None:
            return
        with contextlib.suppress(OSError):
            os.write(ready_fd, (problem or "ready").encode("utf-8", "replace"))
            os.close(ready_fd)
        ready_fd = None

    try:
        pid_fd = _acquire_pid_file(paths.pid_file)
    except CairnError as exc:
        ready(f"another tunnel runs: {exc}")
        return 3
    # Stopped (egress.stop): the connection ends and the files say so, as at any other end.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        paths.target_file.write_text(f"{args.container}\n", encoding="ascii")
        os.ftruncate(pid_fd, 0)
        os.pwrite(pid_fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return Tunnel(socket_path, args.container, bridge).run(ready)
    finally:
        ready("the tunnel ended before the relay served its socket")
        with contextlib.suppress(OSError):
            paths.serving_file.unlink(missing_ok=True)
        os.close(pid_fd)


if __name__ == "__main__":
    sys.exit(main())
