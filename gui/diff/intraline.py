"""Word-level differences inside a changed line pair, with limits; a pure algorithm layer.

Owns finding which parts of a removed line and its added counterpart differ. It draws nothing:
the views decide how emphasised ranges look. Work is bounded (line length, pair count) and can be
cancelled between pairs, because it runs for every changed pair of a possibly huge diff.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from difflib import SequenceMatcher

MAX_LINE_CHARS = 500  # longer lines get no intraline pass: the matcher is quadratic
MAX_PAIRS = 5_000  # per request; the rest keep their plain added/removed colour
MIN_SIMILARITY = 0.3  # below this the lines are rewrites, and emphasis would be noise

Range = tuple[int, int]  # (start, length) in characters

_WORDS = re.compile(r"\w+|\s+|[^\w\s]")


def _split(text: str) -> tuple[list[str], list[int]]:
    words = _WORDS.findall(text)
    starts: list[int] = []
    pos = 0
    for w in words:
        starts.append(pos)
        pos += len(w)
    return words, starts


def changed_ranges(old: str, new: str) -> tuple[list[Range], list[Range]] | None:
    """The ranges of `old` and of `new` that differ, word by word; None when the pair is out of
    limits or too different to be worth emphasising."""
    if old == new or len(old) > MAX_LINE_CHARS or len(new) > MAX_LINE_CHARS:
        return None
    a, a_starts = _split(old)
    b, b_starts = _split(new)
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    if matcher.real_quick_ratio() < MIN_SIMILARITY or matcher.quick_ratio() < MIN_SIMILARITY:
        return None
    if matcher.ratio() < MIN_SIMILARITY:
        return None
    old_ranges: list[Range] = []
    new_ranges: list[Range] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if i2 > i1:
            _extend(old_ranges, a_starts[i1], a_starts[i2 - 1] + len(a[i2 - 1]) - a_starts[i1])
        if j2 > j1:
            _extend(new_ranges, b_starts[j1], b_starts[j2 - 1] + len(b[j2 - 1]) - b_starts[j1])
    return old_ranges, new_ranges


def _extend(ranges: list[Range], start: int, length: int) -> None:
    if ranges and ranges[-1][0] + ranges[-1][1] == start:
        ranges[-1] = (ranges[-1][0], ranges[-1][1] + length)
    else:
        ranges.append((start, length))


def pair_ranges(
    pairs: Iterable[tuple[int, int]],
    text_of: Callable[[int], str],
    *,
    cancelled: Callable[[], bool] = lambda: False,
    max_pairs: int = MAX_PAIRS,
) -> dict[int, list[Range]]:
    """Emphasised ranges by line ref for each (removed ref, added ref) pair, at most `max_pairs`
    of them; stops early (returning what it has) once `cancelled()` says so."""
    out: dict[int, list[Range]] = {}
    for n, (old_ref, new_ref) in enumerate(pairs):
        if n >= max_pairs or cancelled():
            break
        found = changed_ranges(text_of(old_ref), text_of(new_ref))
        if found is None:
            continue
        old_ranges, new_ranges = found
        if old_ranges:
            out[old_ref] = old_ranges
        if new_ranges:
            out[new_ref] = new_ranges
    return out
