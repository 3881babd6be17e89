"""The diff viewer's pure layers: rows for unified and side-by-side views, chunking, lexer choice
and tokens across lines, intraline ranges with their limits and cancellation, and span merging."""

from __future__ import annotations

import threading

from core.diffs import DiffLine, FileDiff, Hunk
from gui.diff import intraline
from gui.diff.decorate import DecorateRequest, decorate, lexer_for, merge, tokenise
from gui.diff.model import (
    MAX_LINE_CHARS,
    ROW_FILLER,
    ROW_NO_NEWLINE,
    Rows,
    chunk_end,
    file_label,
    file_lines,
    notes_for,
    side_by_side_rows,
    unified_rows,
)


def _file(lines: list[tuple[str, str]], path: str = "a.py", **kw) -> FileDiff:
    hunk = Hunk(1, 3, 1, 3, "@@ -1,3 +1,3 @@")
    old = new = 1
    for kind, text in lines:
        o = old if kind in " -" else None
        n = new if kind in " +" else None
        hunk.lines.append(DiffLine(kind, text, o, n))
        old += kind in " -"
        new += kind in " +"
    return FileDiff(
        kw.pop("status", "modified"),
        path,
        path,
        "100644",
        "100644",
        "1" * 40,
        "2" * 40,
        hunks=[hunk],
        **kw,
    )


def test_changed_pairs_follow_removed_then_added_runs():
    f = _file([(" ", "a"), ("-", "b"), ("-", "c"), ("+", "B"), (" ", "d"), ("+", "e")])
    lines = file_lines(f)
    assert lines.pairs == [(1, 3)]


def test_side_by_side_keeps_no_newline_markers_on_their_side():
    f = _file(
        [
            ("-", "old"),
            ("\\", "No newline at end of file"),
            ("+", "new"),
            ("\\", "No newline at end of file"),
        ]
    )
    left, right = side_by_side_rows(f, file_lines(f))
    assert left.texts[1:] == ["old", "\\ No newline at end of file"]
    assert right.texts[1:] == ["new", "\\ No newline at end of file"]
    assert left.kinds[2] == right.kinds[2] == ROW_NO_NEWLINE


def test_side_by_side_pads_the_shorter_side():
    f = _file([("-", "x"), ("+", "y"), ("+", "z")])
    left, right = side_by_side_rows(f, file_lines(f))
    assert left.kinds[1:] == ["-", ROW_FILLER] and right.kinds[1:] == ["+", "+"]


def test_very_long_lines_are_cut_for_display():
    f = _file([("+", "x" * (MAX_LINE_CHARS + 10))])
    rows = unified_rows(f, file_lines(f))
    assert rows.texts[1].endswith("(10 more characters)")


def test_chunks_respect_lines_and_characters_and_always_progress():
    rows = Rows()
    for i in range(10):
        rows.add("+", "y" * 100, None, i, i)
    assert chunk_end(rows, 0, 4, 10_000) == 4
    assert chunk_end(rows, 0, 100, 250) == 2
    assert chunk_end(rows, 9, 100, 1) == 10


def test_renames_binary_and_mode_are_described():
    f = FileDiff(
        "renamed",
        "a/old.txt",
        "a/new.txt",
        "100644",
        "100755",
        "1" * 40,
        "2" * 40,
        similarity=90,
        binary=True,
    )
    assert file_label(f) == "a/old.txt → a/new.txt"
    notes = notes_for(f, {"1" * 40: 10, "2" * 40: 1})
    assert notes[0] == "binary file, 10 bytes → 1 byte"
    assert notes[1] == "mode changed: 100644 → 100755"
    assert notes_for(f)[0] == "binary file, size unknown → size unknown"


def test_lexer_by_file_name_and_plain_text_fallback():
    assert lexer_for("src/app.py") is not None
    assert lexer_for("Makefile") is not None
    assert lexer_for("notes.unknown-extension") is None


def test_tokens_of_a_multiline_string_are_split_per_line():
    spans = tokenise(lexer_for("a.py"), ['x = """one', 'two"""', "y = 1"])
    assert (4, 6, "string") in spans[0]
    assert spans[1] == [(0, 6, "string")]
    assert (4, 1, "number") in spans[2]


def test_intraline_limits_and_cancel():
    assert intraline.changed_ranges("total = a + b", "total = a - b") == ([(10, 1)], [(10, 1)])
    assert intraline.changed_ranges("x" * 600, "y" * 600) is None  # too long
    assert intraline.changed_ranges("completely", "different words here") is None  # rewrite
    texts = ["a = 1", "a = 2"] * 10
    pairs = [(i, i + 1) for i in range(0, 20, 2)]
    assert len(intraline.pair_ranges(pairs, texts.__getitem__, max_pairs=3)) == 6
    assert intraline.pair_ranges(pairs, texts.__getitem__, cancelled=lambda: True) == {}


def test_merge_splits_tokens_at_emphasis_edges():
    merged = merge([(0, 5, "keyword"), (6, 3, "string")], [(3, 5)])
    assert merged == [
        (0, 3, "keyword", False),
        (3, 2, "keyword", True),
        (5, 1, "", True),
        (6, 2, "string", True),
        (8, 1, "string", False),
    ]


def test_decorate_stops_when_cancelled():
    f = _file([("-", "x = 1"), ("+", "x = 2")])
    cancel = threading.Event()
    cancel.set()
    assert decorate(DecorateRequest("a.py", file_lines(f), 0, 2, cancel=cancel)) == {}
    spans = decorate(DecorateRequest("a.py", file_lines(f), 0, 2))
    assert (4, 1, "number", True) in spans[1]
