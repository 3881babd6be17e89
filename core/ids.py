"""Identifiers for Cairn's objects: short, prefixed, sortable by creation time.

Owns id minting only; which object gets which prefix is listed here and nowhere else.
"""

from __future__ import annotations

import os
import time

PREFIXES = {
    "task": "t",
    "workspace": "ws",
    "run": "r",
    "snapshot": "snap",
    "source": "src",
    "session": "ses",
    "approval": "ap",
    "checkpoint": "ck",
    "artifact": "art",
    "grant": "g",
}

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(n: int, width: int) -> str:
    out = []
    for _ in range(width):
        n, r = divmod(n, 36)
        out.append(_ALPHABET[r])
    return "".join(reversed(out))


def new_id(kind: str) -> str:
    """`<prefix>_<time><random>`: time-ordered, 14 characters after the prefix."""
    prefix = PREFIXES[kind]
    ms = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(5), "big")
    return f"{prefix}_{_base36(ms, 9)}{_base36(rand, 5)}"
