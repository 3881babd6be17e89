"""Figures in words: sizes, durations and ages as people read them, the same everywhere.

Owns the one convention Cairn uses for showing sizes (IEC binary units: B, KiB, MiB, GiB, TiB) and
durations; the CLI and the GUI both print through it. Parsing of user input stays with the
adapters that take it.
"""

from __future__ import annotations

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def size(n: float | None) -> str:
    """A byte count for people, in binary units: `512 B`, `1.5 KiB`, `20.0 MiB`; `—` for None."""
    if n is None:
        return "—"
    if abs(n) < 1024:
        return f"{int(n)} B"
    value = float(n)
    for unit in _UNITS:
        value /= 1024
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover - the loop always returns


def duration(seconds: float | None) -> str:
    """A span for people: `42 s`, `5 min`, `3 h 12 min`, `4 days`; `—` for None."""
    if seconds is None:
        return "—"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {rest} min"
    return f"{hours // 24} days"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`1 file`, `3 files`; `many` for nouns whose plural is not noun + s."""
    return f"{count} {noun if count == 1 else (many or noun + 's')}"
