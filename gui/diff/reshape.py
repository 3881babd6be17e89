"""A file's diff reshaped for the viewer: more context around its hunks, or changes that are only
whitespace left out.

Owns two pure transformations of a `core.diffs.FileDiff`: showing unchanged lines above and below
a hunk (taken from the same file's diff with whole-file context, which holds every line of both
versions in order), and re-aligning each hunk's old and new lines with whitespace ignored, so a
line whose only change is spacing reads as unchanged. No Qt; the viewer decides when to apply
them.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field

from core.diffs import DiffLine, FileDiff, Hunk

CONTEXT = 3  # lines of context git gives each hunk, and what whitespace re-alignment keeps
EXPAND_STEP = 20  # lines one "expand" shows
WHOLE_FILE_CONTEXT = 1_000_000  # asking git for this much context returns the whole file
MAX_REALIGN = (
    4_000_000  # removed × added lines of one change re-aligned; larger ones stay as they are
)

_SPACE = re.compile(r"\s+")


# -- whitespace ---------------------------------------------------------------------------------


def _squeezed(text: str) -> str:
    return _SPACE.sub("", text)


def without_whitespace_changes(f: FileDiff, context: int = CONTEXT) -> FileDiff:
    """`f` with lines whose only change is whitespace shown as unchanged (the new side's text),
    hunks left without a change dropped, and the +/− counts recounted."""
    hunks: list[Hunk] = []
    for hunk in f.hunks:
        hunks.extend(_realign(hunk, context))
    additions = sum(1 for h in hunks for ln in h.lines if ln.kind == "+")
    deletions = sum(1 for h in hunks for ln in h.lines if ln.kind == "-")
    return dataclasses.replace(f, hunks=hunks, additions=additions, deletions=deletions)


def _realign(hunk: Hunk, context: int) -> list[Hunk]:
    lines: list[DiffLine] = []
    removed: list[DiffLine] = []
    added: list[DiffLine] = []

    def flush() -> None:
        lines.extend(_realign_change(removed, added))
        removed.clear()
        added.clear()

    for line in hunk.lines:
        if line.kind == "-":
            if added:  # a new change after the previous one's added lines
                flush()
            removed.append(line)
        elif line.kind == "+":
            added.append(line)
        else:
            flush()
            lines.append(line)
    flush()
    return _regroup(lines, context, _section(hunk.header))


def _realign_change(removed: list[DiffLine], added: list[DiffLine]) -> list[DiffLine]:
    """One change (removed lines, then added ones) with the lines that differ only in whitespace
    paired up as unchanged."""
    if not removed or not added:
        return removed + added
    old = [_squeezed(ln.text) for ln in removed]
    new = [_squeezed(ln.text) for ln in added]
    if old == new:  # a re-indented block: every line pairs with its counterpart
        return [DiffLine(" ", b.text, a.old_no, b.new_no) for a, b in zip(removed, added)]
    if len(old) * len(new) > MAX_REALIGN:
        return removed + added
    out: list[DiffLine] = []
    matcher = difflib.SequenceMatcher(None, old, new, False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(
                DiffLine(" ", b.text, a.old_no, b.new_no)
                for a, b in zip(removed[i1:i2], added[j1:j2])
            )
        else:
            out.extend(removed[i1:i2])
            out.extend(added[j1:j2])
    return out


def _regroup(lines: list[DiffLine], context: int, section: str) -> list[Hunk]:
    """Hunks around the changed lines of `lines`, with up to `context` unchanged lines each side;
    changes closer than twice the context share a hunk, as git does."""
    changed = [i for i, ln in enumerate(lines) if ln.kind in ("+", "-")]
    if not changed:
        return []
    groups: list[list[int]] = [[max(0, changed[0] - context), changed[0]]]
    for i in changed[1:]:
        if i - groups[-1][1] > 2 * context:
            groups.append([max(0, i - context), i])
        else:
            groups[-1][1] = i
    return [
        make_hunk(lines[start : min(len(lines), end + context + 1)], section)
        for start, end in groups
    ]


def _section(header: str) -> str:
    """What git printed after a hunk's ranges (the enclosing function), or ""."""
    parts = header.split("@@", 2)
    return parts[2].strip() if len(parts) == 3 else ""


def make_hunk(lines: list[DiffLine], section: str = "", *, old_before: int = 0) -> Hunk:
    """A hunk holding `lines`, with its ranges and header worked out from their numbers.
    `old_before`/the lines' own numbers give the start of a side the hunk has no line of."""
    olds = [ln.old_no for ln in lines if ln.old_no is not None]
    news = [ln.new_no for ln in lines if ln.new_no is not None]
    old_start = olds[0] if olds else old_before
    new_start = news[0] if news else 0
    header = f"@@ -{_range(old_start, len(olds))} +{_range(new_start, len(news))} @@"
    if section:
        header += " " + section
    return Hunk(old_start, len(olds), new_start, len(news), header, list(lines))


def _range(start: int, count: int) -> str:
    return str(start) if count == 1 else f"{start},{count}"


# -- more context -------------------------------------------------------------------------------


@dataclass
class Expansion:
    """Which lines of the whole file are shown around `original`'s hunks.

    `whole` is the same file's diff with whole-file context: one hunk (or none) holding every
    line of both versions in order. `shown` holds the indexes into those lines that are on
    screen: the original hunks' lines, and whatever was expanded since."""

    original: FileDiff
    whole: list[DiffLine]
    shown: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, original: FileDiff, whole_file: FileDiff) -> Expansion | None:
        """None when the two do not describe the same changes (the whole-file diff was cut, or
        the revisions differ), so nothing wrong is ever shown as context."""
        whole = [ln for h in whole_file.hunks for ln in h.lines]
        expansion = cls(original, whole)
        olds = {ln.old_no: i for i, ln in enumerate(whole) if ln.old_no is not None}
        news = {ln.new_no: i for i, ln in enumerate(whole) if ln.new_no is not None}
        for hunk in original.hunks:
            for line in hunk.lines:
                if line.kind == "\\":
                    continue
                index = olds.get(line.old_no) if line.old_no is not None else None
                if index is None and line.new_no is not None:
                    index = news.get(line.new_no)
                if (
                    index is None
                    or whole[index].kind != line.kind
                    or whole[index].text != line.text
                ):
                    return None
                expansion.shown.add(index)
        if sum(1 for ln in whole if ln.kind in "+-") != sum(
            1 for h in original.hunks for ln in h.lines if ln.kind in "+-"
        ):
            return None
        return expansion

    def groups(self) -> list[tuple[int, int]]:
        """The shown lines as runs of consecutive indexes: (first, last) of each."""
        out: list[tuple[int, int]] = []
        for i in sorted(self.shown):
            if out and out[-1][1] == i - 1:
                out[-1] = (out[-1][0], i)
            else:
                out.append((i, i))
        return out

    def group_of(self, line: DiffLine) -> int:
        """The index of the shown run of lines holding `line` (a line of a hunk on screen), or
        -1."""
        for i, ln in enumerate(self.whole):
            same = ln.old_no == line.old_no if line.old_no is not None else ln.new_no == line.new_no
            if same and ln.kind != "\\":
                return next((g for g, (a, b) in enumerate(self.groups()) if a <= i <= b), -1)
        return -1

    def hidden_above(self, hunk: int) -> int:
        groups = self.groups()
        if not 0 <= hunk < len(groups):
            return 0
        first = groups[hunk][0]
        previous = groups[hunk - 1][1] if hunk > 0 else -1
        return first - previous - 1

    def hidden_below(self, hunk: int) -> int:
        groups = self.groups()
        if not 0 <= hunk < len(groups):
            return 0
        last = groups[hunk][1]
        following = groups[hunk + 1][0] if hunk + 1 < len(groups) else len(self.whole)
        return following - last - 1

    def expand_above(self, hunk: int, lines: int = EXPAND_STEP) -> int:
        """Show up to `lines` more lines above the shown hunk at this index; how many were."""
        groups = self.groups()
        if not 0 <= hunk < len(groups):
            return 0
        first = groups[hunk][0]
        floor = groups[hunk - 1][1] + 1 if hunk > 0 else 0
        added = range(max(floor, first - lines), first)
        self.shown.update(added)
        return len(added)

    def expand_below(self, hunk: int, lines: int = EXPAND_STEP) -> int:
        groups = self.groups()
        if not 0 <= hunk < len(groups):
            return 0
        last = groups[hunk][1]
        ceiling = groups[hunk + 1][0] if hunk + 1 < len(groups) else len(self.whole)
        added = range(last + 1, min(ceiling, last + 1 + lines))
        self.shown.update(added)
        return len(added)

    def expand_all(self) -> None:
        self.shown.update(range(len(self.whole)))

    def file(self) -> FileDiff:
        """The original file diff with the shown lines as its hunks."""
        hunks: list[Hunk] = []
        whole = self.whole
        for first, last in self.groups():
            # A "no newline" marker stays with the line it follows.
            while last + 1 < len(whole) and whole[last + 1].kind == "\\":
                last += 1
            old_before = next(
                (whole[i].old_no for i in range(first - 1, -1, -1) if whole[i].old_no), 0
            )
            hunks.append(make_hunk(whole[first : last + 1], old_before=old_before or 0))
        return dataclasses.replace(self.original, hunks=hunks)
