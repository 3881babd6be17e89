"""What cairnctl prints: one JSON object (--json) or text on stdout, one line per error or warning
on stderr, and the exit codes.

Owns the shape of the output; what goes into it is each command's, and figures in words are
core.humanize's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from core import humanize

PROG = "cairnctl"

EXIT_OK = 0
EXIT_FAILED = 1  # the command worked and the answer is no: a run that failed, an unset setting
EXIT_ERROR = 2  # a usage error or a refusal, said in one line on stderr
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


def emit(args: argparse.Namespace, obj: dict[str, Any], text: str | Callable[[], str]) -> None:
    """The command's result: `obj` as one JSON object with --json, else `text` (made only then)."""
    if args.json:
        sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    else:
        sys.stdout.write((text() if callable(text) else text).rstrip("\n") + "\n")


def error(message: str) -> None:
    """One line on stderr saying why the command did not do what was asked."""
    sys.stderr.write(f"{PROG}: {message}\n")


def warn(message: str) -> None:
    """One line on stderr about something the command carries on regardless of."""
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


def progress(line: str) -> None:
    """A line of text output printed at once, before the command ends (not with --json)."""
    print(line, flush=True)


def stream(name: str, text: str) -> None:
    """A run's output as it arrives: its stdout to ours, its stderr to ours."""
    target = sys.stdout if name == "stdout" else sys.stderr
    target.write(text)
    target.flush()


def when(ts: float) -> str:
    """A moment in local time, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def size(n: float | None) -> str:
    """A size in core.humanize's words; `?` when it is not known."""
    return "?" if n is None else humanize.size(n)
