#!/usr/bin/env python3
"""Run a command inside the sandbox and pass its stdout and stderr on with the values of the
secret environment variables replaced, so secrets never reach the run's files on the host.

    redact-output.py -- COMMAND [ARGS...]

The variables to hide are named in CAIRN_REDACT_VARS (comma-separated); their values are taken
from this process's own environment, which the command inherits. Each value is hidden as is,
URL-encoded and base64-encoded. Exits with the command's exit code. Python 3 stdlib only.

Nothing the command printed is kept back longer than it must be: a complete line is written at
once, and text after the last line end is written at once unless it could be the start of a
secret that the next write completes; only that possible start is held. Whatever is held is
written when the command exits or its output ends, so a filter killed outright (SIGKILL, the
container going away) can lose at most an unfinished secret on an unfinished line. A secret with
line ends in it is matched line by line, so no match ever has to wait across a line end.
TERM, INT and HUP are passed on to the command; the filter keeps its output flowing until the
command is gone.
"""

import base64
import contextlib
import errno
import os
import re
import select
import signal
import subprocess
import sys
import urllib.parse

MIN_LENGTH = 4  # shorter values would hide too much ordinary text
READ_SIZE = 65536
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def forms_of(raw):
    """The byte strings that stand for the value `raw`: as is, URL-encoded and base64-encoded;
    a form with line ends in it is split into its lines (each matched on its own)."""
    forms = {
        raw,
        urllib.parse.quote(raw, safe="").encode(),
        urllib.parse.quote_plus(raw, safe="").encode(),
    }
    for encoder in (base64.b64encode, base64.urlsafe_b64encode):
        encoded = encoder(raw)
        forms.update((encoded, encoded.rstrip(b"=")))
    out = set()
    for form in forms:
        for line in form.split(b"\n"):
            out.update((line, line.rstrip(b"\r")))
    return {form for form in out if len(form) >= MIN_LENGTH}


def patterns(environ=None):
    """(form, placeholder) pairs for the variables named in CAIRN_REDACT_VARS, longest first."""
    environ = os.environb if environ is None else environ
    names = environ.get(b"CAIRN_REDACT_VARS", b"").decode("utf-8", "replace").split(",")
    marks = {}
    for name in filter(None, (n.strip() for n in names)):
        value = environ.get(name.encode(), b"")
        if len(value.decode("utf-8", "surrogateescape")) < MIN_LENGTH:
            continue
        for form in forms_of(value):
            marks.setdefault(form, f"[secret:{name}]".encode())
    return sorted(marks.items(), key=lambda p: (-len(p[0]), p[0]))


class Redacting:
    """One output stream: redacts what is fed to it and writes it to `fd` as soon as no secret
    can still be completed by the next write."""

    def __init__(self, fd, pats):
        self.fd = fd
        self.marks = dict(pats)
        self.forms = [form for form, _ in pats]
        self.longest = max((len(f) for f in self.forms), default=0)
        self.starts = {f[0] for f in self.forms}
        self.regex = re.compile(b"|".join(re.escape(f) for f in self.forms)) if pats else None
        self.pending = b""

    def feed(self, chunk):
        self._emit(self.pending + chunk, final=False)

    def flush(self):
        """Write everything held (an unfinished secret is no secret: it is written as is)."""
        self._emit(self.pending, final=True)

    def _emit(self, buf, final):
        out, self.pending = self.settle(buf, final)
        write_all(self.fd, out)

    def settle(self, buf, final=False):
        """`buf` split into its redacted part that can be written now and the raw rest."""
        if self.regex is None:
            return buf, b""
        hold = len(buf) if final else self._hold_from(buf, 0)
        out = []
        pos = 0
        for match in self.regex.finditer(buf):
            if match.start() >= hold:
                break
            out.append(buf[pos : match.start()])
            out.append(self.marks[match.group(0)])
            pos = match.end()
            if pos > hold:
                hold = len(buf) if final else self._hold_from(buf, pos)
        out.append(buf[pos:hold])
        return b"".join(out), buf[hold:]

    def _hold_from(self, buf, lo):
        """Where the held tail starts: the earliest position at or after `lo`, after the last
        line end, from which the rest of `buf` is the beginning of a secret (len(buf) if none)."""
        end = len(buf)
        start = max(lo, buf.rfind(b"\n") + 1, end - (self.longest - 1))
        for i in range(start, end):
            if buf[i] not in self.starts:
                continue
            tail = buf[i:]
            for form in self.forms:
                if len(form) > len(tail) and form.startswith(tail):
                    return i
        return end


def write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BrokenPipeError:
            return  # nobody reads any more; keep draining the command so it is not blocked
        view = view[n:]


def read_some(fd):
    """Bytes read from a non-blocking `fd`: None when none are ready, b"" at its end."""
    try:
        return os.read(fd, READ_SIZE)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno == errno.EINTR:
            return None
        if exc.errno == errno.EIO:
            return b""
        raise


def pump(child, streams):
    """Copy the command's output through the filters until both pipes end. Signals wake the
    loop (set_wakeup_fd) so the command's exit is seen at once; then everything held is written,
    and whatever the command's own children still print keeps flowing until the pipes close."""
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda _s, _f: None)
    for fd in streams:
        os.set_blocking(fd, False)
    exited = False
    while streams:
        if not exited and child.poll() is not None:
            exited = True
            # The command is gone: take what it left in the pipes, then write all that is held.
            for fd in list(streams):
                if drain(fd, streams[fd]):
                    del streams[fd]
            for filt in streams.values():
                filt.flush()
            if not streams:
                break
        try:
            ready, _, _ = select.select([*streams, wake_r], [], [], None if exited else 1.0)
        except InterruptedError:
            continue
        if wake_r in ready:
            while read_some(wake_r):
                pass
        for fd in ready:
            if fd == wake_r or fd not in streams:
                continue
            chunk = read_some(fd)
            if chunk is None:
                continue
            if chunk:
                streams[fd].feed(chunk)
            else:
                streams.pop(fd).flush()
    signal.set_wakeup_fd(-1)


def drain(fd, filt):
    """Feed everything readable now; True when the pipe has ended."""
    while True:
        chunk = read_some(fd)
        if chunk is None:
            return False
        if not chunk:
            filt.flush()
            return True
        filt.feed(chunk)


def forward(child, sig):
    with contextlib.suppress(OSError):  # it is gone already
        child.send_signal(sig)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        sys.stderr.write("redact-output.py: no command given\n")
        return 2
    pats = patterns()
    env = dict(os.environb)
    env.pop(b"CAIRN_REDACT_VARS", None)
    # A signal that arrives while the command is being started is passed on once it runs.
    early = []
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: early.append(s))
    try:
        child = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
    except OSError as exc:
        sys.stderr.write(f"redact-output.py: cannot run {args[0]}: {exc}\n")
        return 127
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: forward(child, s))
    for sig in early:
        forward(child, sig)
    streams = {
        child.stdout.fileno(): Redacting(sys.stdout.fileno(), pats),
        child.stderr.fileno(): Redacting(sys.stderr.fileno(), pats),
    }
    try:
        pump(child, streams)
    finally:
        for filt in streams.values():
            filt.flush()
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
