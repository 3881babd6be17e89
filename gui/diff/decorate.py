"""Syntax colouring and intraline emphasis for the lines of a file's diff, computed off the GUI
thread; the result is plain spans per diff line that the view applies in batches.

Owns choosing a pygments lexer by file name (plain text when none fits), tokenising each hunk's
old and new side separately (a lexer only ever sees lines that follow each other in one version of
the file), mapping token types to a few colour categories, and merging them with the intraline
ranges. No Qt here.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePosixPath

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_for_filename
from pygments.token import (
    Comment,
    Keyword,
    Literal,
    Name,
    Number,
    Operator,
    String,
    Token,
    _TokenType,
)
from pygments.util import ClassNotFound

from gui.diff.intraline import MAX_PAIRS, pair_ranges
from gui.diff.model import MAX_LINE_CHARS, ROW_ADDED, ROW_CONTEXT, ROW_REMOVED, FileLines

# A span: (start, length, category or "", emphasised) in the line's own text (no +/- marker).
Span = tuple[int, int, str, bool]

MAX_TOKENISED_LINE = MAX_LINE_CHARS  # a longer line is shown cut, so it is shown uncoloured

_CATEGORIES: list[tuple[_TokenType, str]] = [
    (Comment, "comment"),
    (String.Doc, "comment"),
    (String, "string"),
    (Number, "number"),
    (Literal, "number"),
    (Keyword.Constant, "constant"),
    (Keyword, "keyword"),
    (Operator.Word, "keyword"),
    (Name.Builtin, "builtin"),
    (Name.Decorator, "decorator"),
    (Name.Function, "function"),
    (Name.Class, "type"),
    (Name.Tag, "keyword"),
    (Name.Attribute, "attribute"),
    (Name.Constant, "constant"),
]
CATEGORIES = sorted({c for _t, c in _CATEGORIES})


@lru_cache(maxsize=4096)
def category_of(ttype: _TokenType) -> str:
    t: _TokenType | None = ttype
    while t is not Token and t is not None:
        for base, category in _CATEGORIES:
            if t is base:
                return category
        t = t.parent
    return ""


@lru_cache(maxsize=256)
def _lexer_class_for(name: str) -> type[Lexer] | None:
    try:
        return type(get_lexer_for_filename(name))
    except ClassNotFound:
        return None


def lexer_for(path: str) -> Lexer | None:
    """A lexer chosen by file name, or None for plain text."""
    name = PurePosixPath(path).name
    if not name:
        return None
    cls = _lexer_class_for(name)
    if cls is None:
        return None
    # Offsets must match the text exactly: no stripping, no added final newline.
    return cls(stripnl=False, stripall=False, ensurenl=False)


def tokenise(lexer: Lexer, texts: list[str]) -> list[list[tuple[int, int, str]]]:
    """Coloured token ranges per line for consecutive lines of one version of a file."""
    out: list[list[tuple[int, int, str]]] = [[] for _ in texts]
    if not texts:
        return out
    starts: list[int] = []
    pos = 0
    for t in texts:
        starts.append(pos)
        pos += len(t) + 1
    whole = "\n".join(texts)
    for index, ttype, value in lexer.get_tokens_unprocessed(whole):
        category = category_of(ttype)
        if not category or not value:
            continue
        end = index + len(value)
        line = bisect.bisect_right(starts, index) - 1
        while index < end and line < len(texts):
            line_end = starts[line] + len(texts[line])
            stop = min(end, line_end)
            if stop > index:
                spans = out[line]
                start = index - starts[line]
                if spans and spans[-1][2] == category and spans[-1][0] + spans[-1][1] == start:
                    # Adjacent tokens of one colour become one span: fewer formats to apply.
                    spans[-1] = (spans[-1][0], spans[-1][1] + stop - index, category)
                else:
                    spans.append((start, stop - index, category))
            index = line_end + 1
            line += 1
    return out


def merge(tokens: list[tuple[int, int, str]], emphasis: list[tuple[int, int]]) -> list[Span]:
    """Non-overlapping spans carrying both the colour category and the intraline emphasis."""
    if not emphasis:
        return [(s, n, c, False) for s, n, c in tokens]
    bounds = sorted(
        {p for s, n, _c in tokens for p in (s, s + n)}
        | {p for s, n in emphasis for p in (s, s + n)}
    )
    out: list[Span] = []
    ti = ei = 0
    for a, b in zip(bounds, bounds[1:]):
        while ti < len(tokens) and tokens[ti][0] + tokens[ti][1] <= a:
            ti += 1
        while ei < len(emphasis) and emphasis[ei][0] + emphasis[ei][1] <= a:
            ei += 1
        category = tokens[ti][2] if ti < len(tokens) and tokens[ti][0] <= a else ""
        emph = ei < len(emphasis) and emphasis[ei][0] <= a
        if not category and not emph:
            continue
        if out and out[-1][0] + out[-1][1] == a and out[-1][2:] == (category, emph):
            s, n, c, e = out[-1]
            out[-1] = (s, n + b - a, c, e)
        else:
            out.append((a, b - a, category, emph))
    return out


@dataclass
class DecorateRequest:
    """One batch of a file's lines to decorate: refs `start` to `end` (exclusive)."""

    path: str
    lines: FileLines
    start: int
    end: int
    intraline: bool = True
    cancel: threading.Event = field(default_factory=threading.Event)


def decorate(req: DecorateRequest) -> dict[int, list[Span]]:
    """Spans by diff-line ref for the request's lines. Runs in a worker; stops early (returning
    what it has) when `req.cancel` is set."""
    cancelled: Callable[[], bool] = req.cancel.is_set
    lines = req.lines
    tokens: dict[int, list[tuple[int, int, str]]] = {}
    lexer = lexer_for(req.path)
    if lexer is not None:
        for refs in _runs(lines, req.start, req.end):
            if cancelled():
                break
            texts = [
                lines.texts[r] if len(lines.texts[r]) <= MAX_TOKENISED_LINE else "" for r in refs
            ]
            for ref, spans in zip(refs, tokenise(lexer, texts)):
                if spans:
                    tokens[ref] = spans
    emphasis: dict[int, list[tuple[int, int]]] = {}
    if req.intraline and not cancelled():
        pairs = [
            p for p in lines.pairs if req.start <= p[0] < req.end or req.start <= p[1] < req.end
        ]
        emphasis = pair_ranges(
            pairs, lines.texts.__getitem__, cancelled=cancelled, max_pairs=MAX_PAIRS
        )
    out: dict[int, list[Span]] = {}
    for ref in tokens.keys() | emphasis.keys():
        out[ref] = merge(tokens.get(ref, []), emphasis.get(ref, []))
    return out


def _runs(lines: FileLines, start: int, end: int) -> list[list[int]]:
    """Consecutive refs of one hunk and one side (old: context and removed; new: context and
    added), clipped to [start, end). A context line is lexed with the new side."""
    runs: list[list[int]] = []
    for side in (ROW_REMOVED, ROW_ADDED):
        current: list[int] = []
        hunk = -1
        for ref in range(start, end):
            kind = lines.kinds[ref]
            if lines.hunk_of[ref] != hunk:
                if current:
                    runs.append(current)
                current, hunk = [], lines.hunk_of[ref]
            if kind in (side, ROW_CONTEXT):
                current.append(ref)
        if current:
            runs.append(current)
    # Context lines are in both sides' runs; the new side's result (lexed last) wins.
    return runs
