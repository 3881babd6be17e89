"""The argument parsing every cairnctl command shares: usage errors in one line, the options each
command takes (--data-dir, --json), and the types that read sizes and durations.

Owns reading the command line; each command declares its own arguments (core/cli/commands/).
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from core.cli import output


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage errors: one line, exit 2
        output.error(message)
        raise SystemExit(output.EXIT_ERROR)


def add_common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """--data-dir and --json, before the command (`top`) or after it; given after, they win."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--data-dir", default=default, help="Cairn's data folder (or CAIRN_DATA_DIR)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print one JSON object",
    )


def size(text: str) -> int:
    """A size such as 500M, 2G or 2GiB, in bytes."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        value = int(float(num) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 500M or 2G)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a quota must be positive: {text!r}")
    return value


def duration(text: str) -> float:
    """A duration such as 90s, 12h or 30d (a bare number is seconds), in seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 12h or 30d)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive: {text!r}")
    return value
