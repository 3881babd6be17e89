"""A file's diff as rows of text to show, unified or side by side, and its change in words.

Owns turning `core.diffs.FileDiff` hunks into display rows (kind, text, line numbers, and which
diff line each row shows) and the chunks a long file is shown in. Pure Python: drawing, colouring
and paging belong to the widgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.diffs import Diff, FileDiff

# Row kinds. The diff-line kinds keep core.diffs' characters; the others are the view's own.
ROW_CONTEXT = " "
ROW_ADDED = "+"
ROW_REMOVED = "-"
ROW_NO_NEWLINE = "\\"
ROW_HUNK = "@"
ROW_NOTE = "!"  # a sentence instead of content: binary file, mode change, left out by the cap
ROW_FILLER = "~"  # side by side: the blank opposite a line the other side does not have

MAX_LINE_CHARS = 2_000  # longer lines are cut for display: laying out one huge line freezes Qt

UNIFIED = "unified"
SIDE_BY_SIDE = "side-by-side"


@dataclass(slots=True)
class Rows:
    """Parallel lists, one entry per row; `refs` is the index of the diff line shown (or -1)."""

    kinds: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    old_nos: list[int | None] = field(default_factory=list)
    new_nos: list[int | None] = field(default_factory=list)
    refs: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kinds)

    def add(
        self,
        kind: str,
        text: str,
        old_no: int | None = None,
        new_no: int | None = None,
        ref: int = -1,
    ) -> None:
        self.kinds.append(kind)
        self.texts.append(text)
        self.old_nos.append(old_no)
        self.new_nos.append(new_no)
        self.refs.append(ref)

    def slice(self, start: int, end: int) -> Rows:
        return Rows(
            self.kinds[start:end],
            self.texts[start:end],
            self.old_nos[start:end],
            self.new_nos[start:end],
            self.refs[start:end],
        )


@dataclass(slots=True)
class FileLines:
    """Every diff line of one file, numbered in order (the `ref` rows point at)."""

    kinds: list[str]
    texts: list[str]
    hunk_of: list[int]
    pairs: list[tuple[int, int]]  # (removed ref, added ref): the changed line pairs, in order


def shown_text(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return f"{text[:MAX_LINE_CHARS]} … ({len(text) - MAX_LINE_CHARS:,} more characters)"


def file_lines(f: FileDiff) -> FileLines:
    kinds: list[str] = []
    texts: list[str] = []
    hunk_of: list[int] = []
    pairs: list[tuple[int, int]] = []
    for h_index, hunk in enumerate(f.hunks):
        removed: list[int] = []
        added: list[int] = []
        for line in hunk.lines:
            ref = len(kinds)
            kinds.append(line.kind)
            texts.append(line.text)
            hunk_of.append(h_index)
            if line.kind == ROW_REMOVED:
                if added:  # a new "-" run after "+" lines: the previous change block is over
                    pairs.extend(zip(removed, added))
                    removed, added = [], []
                removed.append(ref)
            elif line.kind == ROW_ADDED:
                added.append(ref)
            elif line.kind == ROW_CONTEXT:
                pairs.extend(zip(removed, added))
                removed, added = [], []
        pairs.extend(zip(removed, added))
    return FileLines(kinds, texts, hunk_of, pairs)


def notes_for(f: FileDiff, blob_sizes: dict[str, int] | None = None) -> list[str]:
    """Sentences shown instead of (or before) the hunks: binary, mode, submodule, cap."""
    notes: list[str] = []
    if f.is_submodule:
        notes.append(f"submodule: commit {_short(f.old_sha)} → {_short(f.new_sha)}")
    elif f.binary:
        notes.append(binary_note(f, blob_sizes or {}))
    if f.status == "mode" or (f.old_mode and f.new_mode and f.old_mode != f.new_mode):
        notes.append(
            f"mode changed: {f.old_mode} → {f.new_mode}"
            + ("; contents unchanged" if f.status == "mode" else "")
        )
    if f.status in ("renamed", "copied") and not f.hunks and not f.binary and not f.truncated:
        notes.append(f"{f.status} without changes to its contents")
    if f.truncated:
        notes.append(
            "the diff's size cap left out "
            + ("the rest of this file's changes" if f.hunks else "this file's changes")
        )
    if not notes and not f.hunks:
        notes.append("no changes to show")
    return notes


def binary_note(f: FileDiff, sizes: dict[str, int]) -> str:
    old = sizes.get(f.old_sha or "") if f.old_sha else None
    new = sizes.get(f.new_sha or "") if f.new_sha else None
    if f.status == "added" or f.old_sha is None:
        return f"binary file, {_bytes(new)}"
    if f.status == "removed" or f.new_sha is None:
        return f"binary file removed, {_bytes(old)}"
    return f"binary file, {_bytes(old)} → {_bytes(new)}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "size unknown"
    return f"{n:,} byte{'' if n == 1 else 's'}"


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "none"


def unified_rows(f: FileDiff, lines: FileLines, blob_sizes: dict[str, int] | None = None) -> Rows:
    rows = Rows()
    for note in notes_for(f, blob_sizes):
        rows.add(ROW_NOTE, note)
    ref = 0
    for hunk in f.hunks:
        rows.add(ROW_HUNK, hunk.header)
        for line in hunk.lines:
            rows.add(line.kind, _marked(line.kind, line.text), line.old_no, line.new_no, ref)
            ref += 1
    return rows


def _marked(kind: str, text: str) -> str:
    if kind == ROW_NO_NEWLINE:
        return "\\ " + text
    return kind + shown_text(text)


def side_by_side_rows(
    f: FileDiff, lines: FileLines, blob_sizes: dict[str, int] | None = None
) -> tuple[Rows, Rows]:
    """Old side and new side, row for row: a removed line faces the added line it became."""
    left, right = Rows(), Rows()
    for note in notes_for(f, blob_sizes):
        left.add(ROW_NOTE, note)
        right.add(ROW_NOTE, "")
    ref = 0
    for hunk in f.hunks:
        left.add(ROW_HUNK, hunk.header)
        right.add(ROW_HUNK, "")
        removed: list[tuple] = []
        added: list[tuple] = []

        def flush() -> None:
            for i in range(max(len(removed), len(added))):
                if i < len(removed):
                    left.add(*removed[i])
                else:
                    left.add(ROW_FILLER, "")
                if i < len(added):
                    right.add(*added[i])
                else:
                    right.add(ROW_FILLER, "")
            removed.clear()
            added.clear()

        last = ROW_CONTEXT
        for line in hunk.lines:
            if line.kind == ROW_REMOVED:
                if added:
                    flush()
                removed.append((ROW_REMOVED, shown_text(line.text), line.old_no, None, ref))
            elif line.kind == ROW_ADDED:
                added.append((ROW_ADDED, shown_text(line.text), None, line.new_no, ref))
            elif line.kind == ROW_NO_NEWLINE:
                marker = (ROW_NO_NEWLINE, "\\ " + line.text, None, None, ref)
                # The marker belongs to the side of the line before it.
                if last == ROW_REMOVED and not added:
                    removed.append(marker)
                elif last == ROW_ADDED:
                    added.append(marker)
                else:
                    flush()
                    left.add(*note)
                    right.add(*note)
            else:
                flush()
                text = shown_text(line.text)
                left.add(ROW_CONTEXT, text, line.old_no, line.new_no, ref)
                right.add(ROW_CONTEXT, text, line.old_no, line.new_no, ref)
            if line.kind != ROW_NO_NEWLINE:
                last = line.kind
            ref += 1
        flush()
    return left, right


def counts_as_line(kind: str) -> bool:
    """Whether a row is one of the file's lines (hunk headers, notes and "no newline" markers
    are not): what "show more" counts."""
    return kind not in (ROW_HUNK, ROW_NOTE, ROW_NO_NEWLINE)


def line_count(rows: Rows, start: int = 0, end: int | None = None) -> int:
    """How many of the rows from `start` to `end` are lines of the file."""
    return sum(1 for kind in rows.kinds[start:end] if counts_as_line(kind))


def chunk_end(rows: Rows, start: int, max_lines: int, max_chars: int) -> int:
    """Where the chunk that starts at `start` ends: at most `max_lines` lines of the file (hunk
    headers and notes ride along uncounted) and about `max_chars` characters, always at least
    one row, so a huge line still makes progress. A chunk never leaves behind only rows that are
    not lines: what would be left is taken along."""
    kinds = rows.kinds
    texts = rows.texts
    total = len(kinds)
    lines = used = 0
    end = start
    while end < total:
        kind = kinds[end]
        counted = counts_as_line(kind)
        if counted and lines >= max_lines:
            break
        used += len(texts[end]) + 1
        if used > max_chars and end > start:
            break
        lines += counted
        end += 1
    if end < total and not any(counts_as_line(k) for k in kinds[end:]):
        return total
    # Headers of the next hunk wait for its lines.
    while end > start + 1 and end < total and kinds[end - 1] == ROW_HUNK:
        end -= 1
    return end


def more_text(step: int, left: int) -> str:
    """The "show more" button's words: exact counts, one line said as one line."""
    noun = "line" if step == 1 else "lines"
    if step >= left:
        return f"Show {step:,} more {noun}"
    return f"Show {step:,} more {noun} ({left:,} not shown yet)"


# -- the file list ------------------------------------------------------------------------------

STATUS_LETTERS = {
    "added": "A",
    "removed": "D",
    "modified": "M",
    "renamed": "R",
    "copied": "C",
    "typechange": "T",
    "mode": "X",
}
STATUS_WORDS = {
    "added": "added",
    "removed": "removed",
    "modified": "modified",
    "renamed": "renamed",
    "copied": "copied",
    "typechange": "type changed",
    "mode": "permissions changed",
}


def status_letter(f: FileDiff) -> str:
    if f.is_submodule:
        return "S"
    return STATUS_LETTERS.get(f.status, "M")


def file_label(f: FileDiff) -> str:
    """The path to list: `old → new` for a rename or copy."""
    if f.status in ("renamed", "copied") and f.old_path and f.new_path and f.old_path != f.new_path:
        return f"{f.old_path} → {f.new_path}"
    return f.path


def file_summary(f: FileDiff) -> str:
    """One line saying what happened to the file (the tooltip, and the heading of its view)."""
    words = STATUS_WORDS.get(f.status, f.status)
    if f.is_submodule:
        words = f"submodule {words}"
    text = f"{words}: {file_label(f)}"
    if f.status in ("renamed", "copied") and f.similarity is not None:
        text += f" ({f.similarity}% similar)"
    if f.old_mode and f.new_mode and f.old_mode != f.new_mode:
        text += f", mode {f.old_mode} → {f.new_mode}"
    elif f.status == "added" and f.new_mode:
        text += f", mode {f.new_mode}"
    if f.binary:
        text += ", binary"
    return text


def counts_text(f: FileDiff) -> str:
    if f.binary:
        return "binary"
    if f.is_submodule:
        return ""
    return f"+{f.additions} −{f.deletions}"


def binary_shas(diff: Diff) -> list[str]:
    """The blob ids whose sizes the binary notes need."""
    out: list[str] = []
    for f in diff.files:
        if f.binary and not f.is_submodule:
            out.extend(s for s in (f.old_sha, f.new_sha) if s)
    return list(dict.fromkeys(out))


# -- the folder tree ----------------------------------------------------------------------------


@dataclass(slots=True)
class TreeNode:
    """A folder (file -1) or a changed file (its index in the diff's file list)."""

    name: str
    file: int = -1
    children: list[TreeNode] = field(default_factory=list)


def folder_tree(paths: list[str]) -> list[TreeNode]:
    """The changed files' paths as folders and files: folders first, each level by name; a
    folder holding only one folder is shown as one ("gui/diff")."""
    root = TreeNode("")
    for index, path in enumerate(paths):
        parts = [p for p in path.split("/") if p] or [path]
        node = root
        for part in parts[:-1]:
            child = next((c for c in node.children if c.file < 0 and c.name == part), None)
            if child is None:
                child = TreeNode(part)
                node.children.append(child)
            node = child
        node.children.append(TreeNode(parts[-1], index))
    _tidy(root)
    return root.children


def _tidy(node: TreeNode) -> None:
    for child in node.children:
        _tidy(child)
        while child.file < 0 and len(child.children) == 1 and child.children[0].file < 0:
            only = child.children[0]
            child.name = f"{child.name}/{only.name}"
            child.children = only.children
    node.children.sort(key=lambda c: (c.file >= 0, c.name.lower(), c.file))


def tree_order(nodes: list[TreeNode]) -> list[int]:
    """The files' indexes in the order the tree shows them, top to bottom."""
    out: list[int] = []
    for node in nodes:
        if node.file >= 0:
            out.append(node.file)
        out.extend(tree_order(node.children))
    return out
