#!/usr/bin/env python3
"""Run a command inside the sandbox and pass its stdout and stderr on with the values of the
secret environment variables replaced, so secrets never reach the run's files on the host.

    redact-output.py -- COMMAND [ARGS...]

The variables to hide are named in CAIRN_REDACT_VARS (comma-separated); their values are taken
from this process's own environment, which the command inherits. Each value is hidden as is,
URL-encoded and base64-encoded. Exits with the command's exit code. Python 3 stdlib only.
"""

import base64
import os
import signal
import subprocess
import sys
import threading
import urllib.parse

MIN_LENGTH = 4  # shorter values would hide too much ordinary text


def patterns():
    out = []
    for name in filter(None, os.environ.get("CAIRN_REDACT_VARS", "").split(",")):
        value = os.environ.get(name, "")
        if len(value) < MIN_LENGTH:
            continue
        raw = value.encode()
        mark = f"[secret:{name}]".encode()
        forms = {
            raw,
            urllib.parse.quote(value, safe="").encode(),
            urllib.parse.quote_plus(value).encode(),
            base64.b64encode(raw),
            base64.b64encode(raw).rstrip(b"="),
            base64.urlsafe_b64encode(raw).rstrip(b"="),
        }
        out.extend((form, mark) for form in forms if len(form) >= MIN_LENGTH)
    return sorted(out, key=lambda p: -len(p[0]))  # the longest form first


def pump(src, dst, pats):
    keep = max((len(p) for p, _ in pats), default=1) - 1
    pending = b""
    while True:
        chunk = os.read(src.fileno(), 65536)
        if not chunk:
            break
        pending += chunk
        for form, mark in pats:
            pending = pending.replace(form, mark)
        # Hold back a tail that could be the start of a value split across two reads.
        cut = len(pending) - keep if keep else len(pending)
        if cut > 0:
            dst.write(pending[:cut])
            dst.flush()
            pending = pending[cut:]
    for form, mark in pats:
        pending = pending.replace(form, mark)
    dst.write(pending)
    dst.flush()


def main():
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        sys.stderr.write("redact-output.py: no command given\n")
        return 2
    pats = patterns()
    env = dict(os.environ)
    env.pop("CAIRN_REDACT_VARS", None)
    child = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    threads = [
        threading.Thread(target=pump, args=(child.stdout, sys.stdout.buffer, pats)),
        threading.Thread(target=pump, args=(child.stderr, sys.stderr.buffer, pats)),
    ]
    for t in threads:
        t.start()
    code = child.wait()
    for t in threads:
        t.join()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
