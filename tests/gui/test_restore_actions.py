"""The words of a restore from the app: the confirmation says what will be written and deleted
(or that nothing is to be undone), the report names each file written, deleted, in conflict or
skipped, and where to go back."""

from __future__ import annotations

from core.diffs import Diff, FileDiff
from core.models import Revision
from core.restore import CONFLICT, DELETED, SKIPPED, WRITTEN, PathOutcome, RestoreResult
from gui.restore_actions import FILE, UNDO, WORKSPACE, Request, preview_text, result_text


def changed(path: str, status: str = "modified") -> FileDiff:
    return FileDiff(status, path, path, "100644", "100644", "a" * 40, "b" * 40)


def rev(seq: int) -> Revision:
    return Revision(f"{seq:040d}", "ws", None, "t", "restore", None, 1, 0.0, seq)


def test_the_confirmation_says_what_is_written_and_deleted_and_that_it_can_be_undone():
    diff = Diff("a", "b", [changed("a.py"), changed("b.py"), changed("gone.txt", "removed")])
    text = preview_text(Request(WORKSPACE, "t", "r", 3), diff)
    assert text.startswith(
        "This writes 2 files as they were at #3 (a.py, b.py) and deletes 1 file #3 did not "
        "have (gone.txt)."
    )
    assert "Ignored files and the workspace's .git stay as they are." in text
    assert "can be undone" in text

    same = preview_text(Request(FILE, "t", "r", 3, "a.py"), Diff("a", "b", []))
    assert same.startswith("As last recorded, a.py is already as it was at #3")

    assert preview_text(Request(UNDO, "t", "r", 4), Diff("a", "b", [])) == (
        "#4 changed nothing; there is nothing to undo."
    )
    undo = preview_text(Request(UNDO, "t", "r", 4), Diff("a", "b", [changed("a.py")]))
    assert "Takes back #4's change to 1 file (a.py)" in undo and "conflict" in undo


def test_the_report_names_each_file_and_each_conflict_with_its_reason():
    result = RestoreResult(
        "t",
        "ws",
        "undo",
        rev(4),
        rev(7),
        True,
        rev(8),
        [
            PathOutcome("a.py", WRITTEN),
            PathOutcome("old.txt", DELETED),
            PathOutcome(
                "b.py", CONFLICT, "edited since revision 0000 where the revision changed it"
            ),
            PathOutcome("sub", SKIPPED, "a submodule is not restored"),
        ],
    )
    text, problem = result_text(Request(UNDO, "t", "r", 4), result)
    assert problem
    assert text.splitlines() == [
        "Undo #4's change: wrote 1 file (a.py) and deleted 1 file (old.txt); recorded as #8.",
        "1 file not written (conflicts; left as they are):",
        "  b.py — edited since revision 0000 where the revision changed it",
        "  sub skipped — a submodule is not restored",
        "The files as they were just before are #7 (restore it to go back).",
    ]

    nothing = RestoreResult("t", "ws", "paths", rev(2), rev(7), False, None, [])
    text, problem = result_text(Request(FILE, "t", "r", 2, "a.py"), nothing)
    assert not problem
    assert text == "Restore a.py to #2: the files already matched; nothing was written."
