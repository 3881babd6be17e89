"""What the diff viewer reads through the facade beyond the diff it is given; runs inside jobs,
never on the GUI thread, and uses no Qt.

Owns asking for one file's diff again with the whole file as context, which the viewer needs to
show more lines above and below a hunk.
"""

from __future__ import annotations

from collections.abc import Callable

from core.app import Cairn
from core.diffs import FileDiff
from gui.diff.reshape import WHOLE_FILE_CONTEXT

WHOLE_FILE_MAX_BYTES = 8_000_000

WholeFile = Callable[[FileDiff], FileDiff | None]
"""Given a file of the shown diff, the same file's diff with whole-file context (None: none)."""


def whole_file(
    cairn: Cairn, task_id: str, old_ref: str, new_ref: str, f: FileDiff
) -> FileDiff | None:
    paths = [p for p in dict.fromkeys([f.old_path, f.new_path]) if p]
    diff = cairn.revisions.diff(
        task_id,
        old_ref,
        new_ref,
        context=WHOLE_FILE_CONTEXT,
        paths=paths,
        max_bytes=WHOLE_FILE_MAX_BYTES,
    )
    return next((g for g in diff.files if g.path == f.path and not g.truncated), None)


def whole_file_reader(cairn: Cairn, task_id: str, old_ref: str, new_ref: str) -> WholeFile:
    """A WholeFile for one comparison of a task's revisions."""
    return lambda f: whole_file(cairn, task_id, old_ref, new_ref, f)
