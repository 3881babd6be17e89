"""Structured diffs between two revisions (or trees) of one vault, and their text and JSON forms.

Owns asking git for the changes, parsing its output into files, hunks and lines, and the size cap.
It draws nothing: colouring, word-level highlighting and paging belong to the callers.

Revisions of every workspace of a lineage live in one vault, so a diff across workspaces is just a
diff between two commits of that vault. Git runs without any user configuration and without
textconv or external diff drivers, so what is shown is the recorded bytes.

Text is decoded as UTF-8 with surrogateescape:
`render_unified(d).encode("utf-8", "surrogateescape")` gives back git's bytes exactly.
`diff_to_json` replaces undecodable bytes instead, so its output is valid Unicode.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import NotFound, VaultError
from core.vault.objects import EMPTY_TREE, MODE_GITLINK, MODE_LINK, git_env, run_git

ZERO_SHA = "0" * 40
DEFAULT_MAX_BYTES = 2_000_000
_NOTE_LIST_LIMIT = 50  # render_unified lists at most this many files left out by the cap

_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_STATUS = {
    "A": "added",
    "D": "removed",
    "M": "modified",
    "T": "typechange",
    "R": "renamed",
    "C": "copied",
}


@dataclass(slots=True)
class DiffLine:
    kind: str  # " " context, "+" added, "-" removed, "\\" no newline at end of file
    text: str  # without the kind character and without the line's "\n"
    old_no: int | None
    new_no: int | None


@dataclass(slots=True)
class Hunk:
    old_start: int
    old_lines: int
    new_start: int
    new_lines: int
    header: str  # the whole "@@ -a,b +c,d @@ section" line
    lines: list[DiffLine] = field(default_factory=list)


@dataclass(slots=True)
class FileDiff:
    """One changed path. "renamed"/"copied" may carry content changes too (similarity < 100);
    "mode" is a pure permission change; "typechange" is file <-> symlink (or submodule).
    A submodule (mode 160000) is listed with its commit ids and never has hunks."""

    status: str
    old_path: str | None
    new_path: str | None
    old_mode: str | None
    new_mode: str | None
    old_sha: str | None
    new_sha: str | None
    similarity: int | None = None
    binary: bool = False
    additions: int = 0
    deletions: int = 0
    hunks: list[Hunk] = field(default_factory=list)
    truncated: bool = False  # the size cap cut this file's hunks (or left them all out)

    @property
    def path(self) -> str:
        """The path to show for this file: the new one, or the old one when it was removed."""
        return self.new_path if self.new_path is not None else self.old_path or ""

    @property
    def is_submodule(self) -> bool:
        return MODE_GITLINK in (self.old_mode, self.new_mode)


@dataclass(slots=True)
class Diff:
    old: str
    new: str
    files: list[FileDiff]
    truncated: bool = False
    note: str | None = None

    @property
    def files_changed(self) -> int:
        return len(self.files)

    @property
    def additions(self) -> int:
        return sum(f.additions for f in self.files)

    @property
    def deletions(self) -> int:
        return sum(f.deletions for f in self.files)


# -- running git ------------------------------------------------------------------------------


def _resolve_trees(git_dir: Path, names: list[str]) -> list[str]:
    """The tree id behind each commit or tree name; NotFound for anything else."""
    if not (Path(git_dir) / "objects").is_dir():
        raise VaultError(f"no vault at {git_dir}")
    out: dict[str, str] = {EMPTY_TREE: EMPTY_TREE}
    ask = [n for n in dict.fromkeys(names) if n not in out]
    for name in ask:
        if not name or any(c.isspace() for c in name):
            raise NotFound(f"revision {name!r} is not in the vault")
    if ask:
        proc = run_git(
            ["--git-dir", str(git_dir), "cat-file", "--batch-check"],
            input="".join(f"{n}^{{tree}}\n" for n in ask).encode(),
            check=False,
        )
        answers = proc.stdout.decode(errors="replace").splitlines()
        # Padded: a name git gave no answer for gets an empty one, and is refused below.
        for name, answer in zip(ask, answers + [""] * len(ask), strict=False):
            parts = answer.split()
            if len(parts) != 3 or parts[1] != "tree":
                raise NotFound(
                    f"revision {name} is not in the vault",
                    hint="give a revision commit id or a tree id",
                )
            out[name] = parts[0]
    return [out[n] for n in names]


def _diff_args(git_dir: Path, find_renames: bool) -> list[str]:
    return [
        "--git-dir",
        str(git_dir),
        "diff-tree",
        "-r",
        "--no-color",
        "--no-textconv",
        "--no-ext-diff",
        "--no-abbrev",
        *(["-M", "-C"] if find_renames else ["--no-renames"]),
    ]


def _pathspec(paths: list[str] | None) -> list[str]:
    return ["--", *paths] if paths else []


def _env() -> dict[str, str]:
    # Paths are paths, not patterns: a file named "*.py" means that file.
    return git_env(GIT_LITERAL_PATHSPECS="1")


def _list_files(
    git_dir: Path, old_tree: str, new_tree: str, paths: list[str] | None, find_renames: bool
) -> list[FileDiff]:
    """Every changed path with its modes, ids, status and line counts (no hunks)."""
    proc = run_git(
        [
            *_diff_args(git_dir, find_renames),
            "-z",
            "--raw",
            "--numstat",
            old_tree,
            new_tree,
            *_pathspec(paths),
        ],
        env=_env(),
    )
    return _parse_raw_numstat(proc.stdout)


def _parse_raw_numstat(out: bytes) -> list[FileDiff]:
    # `--raw --numstat -z` prints every raw record, then every numstat record, in the same order.
    tokens = out.split(b"\0")
    files: list[FileDiff] = []
    i = 0
    while i < len(tokens) and tokens[i].startswith(b":"):
        old_mode, new_mode, old_sha, new_sha, status = tokens[i][1:].decode().split(" ")
        letter, score = status[:1], status[1:]
        if letter in ("R", "C"):
            old_path, new_path = os.fsdecode(tokens[i + 1]), os.fsdecode(tokens[i + 2])
            i += 3
        else:
            old_path = new_path = os.fsdecode(tokens[i + 1])
            i += 2
        kind = _STATUS.get(letter, "modified")
        if kind == "modified" and old_sha == new_sha and old_mode != new_mode:
            kind = "mode"
        absent_old, absent_new = kind == "added", kind == "removed"
        files.append(
            FileDiff(
                status=kind,
                old_path=None if absent_old else old_path,
                new_path=None if absent_new else new_path,
                old_mode=None if absent_old else old_mode,
                new_mode=None if absent_new else new_mode,
                old_sha=None if absent_old else old_sha,
                new_sha=None if absent_new else new_sha,
                similarity=int(score) if letter in ("R", "C") and score else None,
            )
        )
    for f in files:
        if i >= len(tokens) or tokens[i].count(b"\t") < 2:
            raise VaultError("git's list of changed files ended early")
        added, deleted, path = tokens[i].split(b"\t", 2)
        i += 3 if path == b"" else 1  # a rename or copy: both paths follow as their own fields
        if added == b"-":
            f.binary = True
        elif not f.is_submodule:  # git counts a submodule's commit line; it is no content
            f.additions, f.deletions = int(added), int(deleted)
    return files


# -- the patch stream -------------------------------------------------------------------------


class _PatchParser:
    """Feeds git's patch output, one line at a time, into the already listed files.

    Sections arrive in the order of the file list; a typechange comes as two sections (the old
    side removed, then the new side added). Hunk lines are consumed by the counts in their
    header, so content that looks like a header is never mistaken for one.
    """

    def __init__(self, files: list[FileDiff]):
        self.files = files
        self.owners = [
            n for n, f in enumerate(files) for _ in range(2 if f.status == "typechange" else 1)
        ]
        self.section = -1
        self.current: int | None = None
        self.hunk: Hunk | None = None
        self.keep = False
        self.old_left = self.new_left = 0
        self.old_no = self.new_no = 0

    def feed(self, line: bytes) -> None:
        if self.old_left > 0 or self.new_left > 0:
            kind = line[:1]
            text = line[1:-1] if line.endswith(b"\n") else line[1:]
            if kind == b" ":
                self._add(" ", text, self.old_no, self.new_no)
                self.old_no += 1
                self.new_no += 1
                self.old_left -= 1
                self.new_left -= 1
                return
            if kind == b"-":
                self._add("-", text, self.old_no, None)
                self.old_no += 1
                self.old_left -= 1
                return
            if kind == b"+":
                self._add("+", text, None, self.new_no)
                self.new_no += 1
                self.new_left -= 1
                return
            if kind == b"\\":
                self._add("\\", text.lstrip(b" "), None, None)
                return
            self.old_left = self.new_left = 0  # malformed hunk: read the line as a header
        if line.startswith(b"diff --git "):
            self.section += 1
            self.hunk = None
            self.current = self.owners[self.section] if self.section < len(self.owners) else None
            self.keep = self.current is not None and not self.files[self.current].is_submodule
            return
        if self.current is None:
            return
        if line.startswith(b"@@ "):
            m = _HUNK_RE.match(line)
            if m is None:
                return
            old_start, old_lines = int(m[1]), int(m[2]) if m[2] is not None else 1
            new_start, new_lines = int(m[3]), int(m[4]) if m[4] is not None else 1
            self.old_left, self.new_left = old_lines, new_lines
            self.old_no, self.new_no = old_start, new_start
            self.hunk = Hunk(
                old_start,
                old_lines,
                new_start,
                new_lines,
                line.rstrip(b"\n").decode("utf-8", "surrogateescape"),
            )
            if self.keep:
                self.files[self.current].hunks.append(self.hunk)
        elif line.startswith(b"\\") and self.hunk is not None:
            # "\ No newline at end of file" after the hunk's last counted line
            self._add("\\", line[1:].strip(b" \n"), None, None)
        elif line.startswith(b"Binary files ") and line.endswith(b" differ\n"):
            self.files[self.current].binary = True

    def _add(self, kind: str, text: bytes, old_no: int | None, new_no: int | None) -> None:
        if self.keep and self.hunk is not None:
            self.hunk.lines.append(
                DiffLine(kind, text.decode("utf-8", "surrogateescape"), old_no, new_no)
            )


def _stream_patch(
    git_dir: Path,
    old_tree: str,
    new_tree: str,
    files: list[FileDiff],
    *,
    context: int,
    max_bytes: int | None,
    paths: list[str] | None,
    find_renames: bool,
) -> int | None:
    """Parse the patch into `files`; return the index of the file the cap cut, or None."""
    args = [
        "git",
        *_diff_args(git_dir, find_renames),
        "-p",
        "--full-index",
        f"--unified={context}",
        old_tree,
        new_tree,
        *_pathspec(paths),
    ]
    parser = _PatchParser(files)
    cut = False
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=errors, env=_env())
        assert proc.stdout is not None
        try:
            readline = proc.stdout.readline
            if max_bytes is None:
                for line in iter(readline, b""):
                    parser.feed(line)
            else:
                used = 0
                while True:
                    # Never read past the cap, even inside one enormous line.
                    line = readline(max_bytes - used + 1)
                    if not line:
                        break
                    used += len(line)
                    if used > max_bytes:
                        cut = True
                        break
                    parser.feed(line)
        finally:
            if cut:
                proc.kill()
            proc.stdout.close()
            code = proc.wait()
        if not cut and code != 0:
            errors.seek(0)
            lines = errors.read().decode(errors="replace").strip().splitlines()
            raise VaultError(f"git diff-tree failed: {lines[-1] if lines else 'exit ' + str(code)}")
    if not cut:
        return None
    return parser.current if parser.current is not None else -1


# -- public API -------------------------------------------------------------------------------


def diff_revisions(
    git_dir: Path,
    old: str | None,
    new: str,
    *,
    context: int = 3,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    paths: list[str] | None = None,
    find_renames: bool = True,
) -> Diff:
    """The changes from `old` to `new` (commit or tree ids of one vault; `old` None means nothing).

    The file list and line counts are always complete; hunks stop at `max_bytes` of git's patch
    output, and the files past that point are listed with `truncated=True` and no hunks.
    """
    if context < 0:
        raise ValueError("context must be zero or more lines")
    git_dir = Path(git_dir)
    old = old or EMPTY_TREE
    old_tree, new_tree = _resolve_trees(git_dir, [old, new])
    diff = Diff(old, new, [])
    if old_tree == new_tree:
        return diff
    diff.files = _list_files(git_dir, old_tree, new_tree, paths, find_renames)
    if not diff.files:
        return diff
    cut_at = _stream_patch(
        git_dir,
        old_tree,
        new_tree,
        diff.files,
        context=context,
        max_bytes=max_bytes,
        paths=paths,
        find_renames=find_renames,
    )
    if cut_at is not None:
        for f in diff.files[max(cut_at, 0) :]:
            f.truncated = True
        left_out = len(diff.files) - cut_at - 1 if cut_at >= 0 else len(diff.files)
        where = f" in {diff.files[cut_at].path}" if cut_at >= 0 else ""
        diff.truncated = True
        diff.note = (
            f"diff cut at {_size(max_bytes or 0)}{where}; "
            f"{left_out} more file{'' if left_out == 1 else 's'} not shown"
        )
    return diff


def blob_sizes(git_dir: Path, shas: list[str]) -> dict[str, int]:
    """Sizes of blobs without reading them (for "binary file, N bytes"); unknown ids are left
    out."""
    proc = run_git(
        ["--git-dir", str(git_dir), "cat-file", "--batch-check"],
        input="".join(f"{s}\n" for s in shas).encode(),
        check=False,
    )
    out: dict[str, int] = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "blob" and parts[2].isdigit():
            out[parts[0]] = int(parts[2])
    return out


def diff_stats(
    git_dir: Path, old: str | None, new: str, *, find_renames: bool = True
) -> tuple[int, int, int]:
    """(files changed, lines added, lines removed) without building any hunks."""
    git_dir = Path(git_dir)
    old_tree, new_tree = _resolve_trees(git_dir, [old or EMPTY_TREE, new])
    if old_tree == new_tree:
        return 0, 0, 0
    files = _list_files(git_dir, old_tree, new_tree, None, find_renames)
    return len(files), sum(f.additions for f in files), sum(f.deletions for f in files)


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} MB"
    if n >= 1_000:
        return f"{n / 1_000:.1f} kB"
    return f"{n} bytes"


# -- unified text -----------------------------------------------------------------------------

_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0B: "\\v",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}


def quote_path(path: str) -> str:
    """A path as git writes it in patch headers: C-quoted when it holds anything unusual."""
    raw = os.fsencode(path)
    if not any(b < 0x20 or b >= 0x7F or b in (0x22, 0x5C) for b in raw):
        return path
    out = []
    for b in raw:
        if b in _ESCAPES:
            out.append(_ESCAPES[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'


def _label(prefix: str, path: str) -> str:
    return quote_path(prefix + path)


def _split_typechange(f: FileDiff) -> list[FileDiff]:
    # Git shows a typechange as the old side removed and the new side added.
    gone = [h for h in f.hunks if h.new_start == 0 and h.new_lines == 0]
    born = [h for h in f.hunks if not (h.new_start == 0 and h.new_lines == 0)]
    return [
        FileDiff(
            "removed",
            f.old_path,
            None,
            f.old_mode,
            None,
            f.old_sha,
            None,
            binary=f.binary and f.old_mode not in (MODE_LINK, MODE_GITLINK),
            hunks=gone,
        ),
        FileDiff(
            "added",
            None,
            f.new_path,
            None,
            f.new_mode,
            None,
            f.new_sha,
            binary=f.binary and f.new_mode not in (MODE_LINK, MODE_GITLINK),
            hunks=born,
        ),
    ]


def _render_section(f: FileDiff, out: list[str]) -> None:
    a = f.old_path if f.old_path is not None else f.new_path or ""
    b = f.new_path if f.new_path is not None else f.old_path or ""
    out.append(f"diff --git {_label('a/', a)} {_label('b/', b)}")
    if f.status == "added":
        out.append(f"new file mode {f.new_mode}")
    elif f.status == "removed":
        out.append(f"deleted file mode {f.old_mode}")
    elif f.old_mode != f.new_mode:
        out.append(f"old mode {f.old_mode}")
        out.append(f"new mode {f.new_mode}")
    if f.status in ("renamed", "copied"):
        verb = "rename" if f.status == "renamed" else "copy"
        out.append(f"similarity index {f.similarity if f.similarity is not None else 100}%")
        out.append(f"{verb} from {quote_path(a)}")
        out.append(f"{verb} to {quote_path(b)}")
    if f.old_sha != f.new_sha:
        index = f"index {f.old_sha or ZERO_SHA}..{f.new_sha or ZERO_SHA}"
        out.append(index + (f" {f.old_mode}" if f.old_mode == f.new_mode else ""))
    minus = "/dev/null" if f.status == "added" else _label("a/", a)
    plus = "/dev/null" if f.status == "removed" else _label("b/", b)
    if f.binary and not f.hunks:
        out.append(f"Binary files {minus} and {plus} differ")
        return
    if not f.hunks:
        return
    out.append(f"--- {minus}" + ("\t" if " " in minus else ""))
    out.append(f"+++ {plus}" + ("\t" if " " in plus else ""))
    for hunk in f.hunks:
        out.append(hunk.header)
        out.extend(("\\ " if line.kind == "\\" else line.kind) + line.text for line in hunk.lines)


def render_unified(diff: Diff) -> str:
    """The diff as `git diff` would print it, without colour; a cut diff ends with a note
    (lines starting with "#") naming the files left out."""
    out: list[str] = []
    left_out: list[FileDiff] = []
    for f in diff.files:
        if f.truncated and not f.hunks:
            left_out.append(f)
            continue
        for section in _split_typechange(f) if f.status == "typechange" else [f]:
            _render_section(section, out)
    if diff.truncated:
        out.append(f"# {diff.note or 'diff cut by the size cap'}")
        for f in left_out[:_NOTE_LIST_LIMIT]:
            out.append(f"#   {f.status} {quote_path(f.path)} (+{f.additions} -{f.deletions})")
        if len(left_out) > _NOTE_LIST_LIMIT:
            out.append(f"#   ... and {len(left_out) - _NOTE_LIST_LIMIT} more")
    return "".join(line + "\n" for line in out)


# -- JSON -------------------------------------------------------------------------------------


def _clean(text: str | None) -> str | None:
    """Valid Unicode for JSON: bytes that were not UTF-8 become U+FFFD."""
    if text is None or text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def diff_to_json(diff: Diff) -> dict:
    """A JSON-able form of the diff (plain dicts, lists, strings, numbers and None)."""
    return {
        "old": diff.old,
        "new": diff.new,
        "files_changed": diff.files_changed,
        "additions": diff.additions,
        "deletions": diff.deletions,
        "truncated": diff.truncated,
        "note": diff.note,
        "files": [
            {
                "status": f.status,
                "old_path": _clean(f.old_path),
                "new_path": _clean(f.new_path),
                "old_mode": f.old_mode,
                "new_mode": f.new_mode,
                "old_sha": f.old_sha,
                "new_sha": f.new_sha,
                "similarity": f.similarity,
                "binary": f.binary,
                "additions": f.additions,
                "deletions": f.deletions,
                "truncated": f.truncated,
                "hunks": [
                    {
                        "old_start": h.old_start,
                        "old_lines": h.old_lines,
                        "new_start": h.new_start,
                        "new_lines": h.new_lines,
                        "header": _clean(h.header),
                        "lines": [
                            {
                                "kind": ln.kind,
                                "text": _clean(ln.text),
                                "old_no": ln.old_no,
                                "new_no": ln.new_no,
                            }
                            for ln in h.lines
                        ],
                    }
                    for h in f.hunks
                ],
            }
            for f in diff.files
        ],
    }
