"""The diff viewer's tools: exact "show more" counts, more context around a hunk, whitespace
left out, find with next and previous, the folder tree, and moving between files (n/p) and hunks
(j/k) from the keyboard."""

from __future__ import annotations

import shutil

import pytest

from gui.diff import DiffViewer
from gui.diff.model import (
    ROW_HUNK,
    SIDE_BY_SIDE,
    Rows,
    chunk_end,
    folder_tree,
    more_text,
    tree_order,
)
from gui.diff.reshape import WHOLE_FILE_CONTEXT
from gui.diff.viewer import CHUNK_LINES
from gui.jobs import JobRunner
from gui.qt import QCoreApplication, QEvent, QPoint, Qt
from tests.gui.test_diff_view import Repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def repo(tmp_path) -> Repo:
    return Repo(tmp_path / "repo")


@pytest.fixture
def jobs(qtbot):
    runner = JobRunner()
    yield runner
    runner.shutdown()


@pytest.fixture
def viewer(qtbot, jobs) -> DiffViewer:
    widget = DiffViewer(jobs)
    qtbot.addWidget(widget)
    widget.resize(1000, 700)
    widget.show()
    qtbot.waitExposed(widget)
    yield widget
    widget.close()
    widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def _whole_file(repo: Repo, a: str, b: str):
    def read(f):
        paths = [p for p in dict.fromkeys([f.old_path, f.new_path]) if p]
        diff = repo.diff(a, b, context=WHOLE_FILE_CONTEXT, paths=paths, max_bytes=None)
        return next(g for g in diff.files if g.path == f.path)

    return read


# -- show more ------------------------------------------------------------------------------------


def test_a_2000_line_new_file_shows_all_2000_lines(qtbot, viewer, repo):
    a = repo.commit()
    repo.write("new.txt", "".join(f"line {i}\n" for i in range(1, 2001)))
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    assert viewer.total_lines == 2000
    assert viewer.shown_lines == 2000
    assert not viewer.more_button.isVisibleTo(viewer)
    doc = viewer.unified.document()
    assert doc.blockCount() == 2001  # the hunk's header and every line
    assert doc.lastBlock().text() == "+line 2000"


def test_show_more_counts_exactly_and_says_one_line(qtbot, viewer, repo):
    a = repo.commit()
    repo.write("new.txt", "".join(f"line {i}\n" for i in range(1, CHUNK_LINES + 2)))
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    assert viewer.shown_lines == CHUNK_LINES
    assert viewer.more_button.isVisibleTo(viewer)
    assert viewer.more_button.text() == "Show 1 more line"
    viewer.more_button.click()
    assert viewer.shown_lines == viewer.total_lines == CHUNK_LINES + 1
    assert not viewer.more_button.isVisibleTo(viewer)
    assert viewer.unified.document().lastBlock().text() == f"+line {CHUNK_LINES + 1}"


def test_a_4000_line_file_shows_all_4000_lines_after_show_more(qtbot, viewer, repo):
    a = repo.commit()
    repo.write("new.txt", "".join(f"line {i}\n" for i in range(1, 4001)))
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b, max_bytes=None))
    assert viewer.more_button.text() == "Show 2,000 more lines"
    viewer.more_button.click()
    assert viewer.shown_lines == 4000
    assert viewer.unified.document().lastBlock().text() == "+line 4000"


def test_chunks_count_lines_not_headers():
    rows = Rows()
    for h in range(3):
        rows.add(ROW_HUNK, f"@@ {h} @@")
        for i in range(5):
            rows.add("+", "x", None, i, h * 5 + i)
    # 5 lines: the first hunk whole; the next header waits for its lines.
    assert chunk_end(rows, 0, 5, 10_000) == 6
    assert chunk_end(rows, 6, 5, 10_000) == 12
    assert chunk_end(rows, 0, 15, 10_000) == len(rows)
    assert more_text(1, 1) == "Show 1 more line"
    assert more_text(2_000, 2_000) == "Show 2,000 more lines"
    assert more_text(2_000, 2_001) == "Show 2,000 more lines (2,001 not shown yet)"


# -- context, whitespace ----------------------------------------------------------------------------


def _hundred_lines(change_at: int = 50) -> str:
    return "".join(
        f"line {i} changed\n" if i == change_at else f"line {i}\n" for i in range(1, 101)
    )


def test_more_context_above_and_below_a_hunk_and_the_whole_file(qtbot, viewer, repo):
    repo.write("f.txt", _hundred_lines(change_at=0))
    a = repo.commit()
    repo.write("f.txt", _hundred_lines(change_at=50))
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b), whole_file=_whole_file(repo, a, b))
    hunk = viewer.shown_file.hunks[0]
    assert (hunk.new_start, hunk.new_lines) == (47, 7)
    assert viewer.expand_up_button.isEnabled()

    viewer.expand_up_button.click()  # the whole file is read in a job first
    qtbot.waitUntil(lambda: viewer.shown_file.hunks[0].new_start == 27, timeout=5_000)
    assert viewer.shown_file.hunks[0].new_lines == 27
    viewer.expand(0, "below")
    assert viewer.shown_file.hunks[0].new_lines == 47
    assert "line 73" in viewer.shown_text() and "line 74\n" not in viewer.shown_text()
    viewer.expand(0, "all")
    assert len(viewer.shown_file.hunks) == 1
    assert viewer.shown_file.hunks[0].new_lines == 100
    assert viewer.shown_lines == 101  # every line, the changed one twice (old and new)


def test_two_hunks_merge_when_the_lines_between_them_are_shown(qtbot, viewer, repo):
    repo.write("f.txt", "".join(f"line {i}\n" for i in range(1, 61)))
    a = repo.commit()
    repo.write("f.txt", "".join(f"line {i}{' x' if i in (10, 40) else ''}\n" for i in range(1, 61)))
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b), whole_file=_whole_file(repo, a, b))
    assert len(viewer.shown_file.hunks) == 2
    viewer.expand(1, "above")
    qtbot.waitUntil(
        lambda: len(viewer.shown_file.hunks) == 2 and viewer.shown_file.hunks[1].new_start == 17,
        timeout=5_000,
    )
    viewer.expand(1, "above", lines=100)
    assert len(viewer.shown_file.hunks) == 1


def test_a_double_click_on_a_hunk_header_shows_more_lines_above_it(qtbot, viewer, repo):
    repo.write("f.txt", _hundred_lines(change_at=0))
    a = repo.commit()
    repo.write("f.txt", _hundred_lines(change_at=50))
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b), whole_file=_whole_file(repo, a, b))
    view = viewer.unified
    block = view.document().findBlockByNumber(0)
    rect = view.blockBoundingGeometry(block).translated(view.contentOffset())
    qtbot.mouseDClick(
        view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(40, int(rect.center().y()))
    )
    qtbot.waitUntil(lambda: viewer.shown_file.hunks[0].new_start == 27, timeout=5_000)


def test_no_whole_file_means_no_context_buttons(qtbot, viewer, repo):
    repo.write("f.txt", _hundred_lines(0))
    a = repo.commit()
    repo.write("f.txt", _hundred_lines(50))
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    assert not viewer.expand_up_button.isEnabled()
    viewer.expand(0, "above")  # nothing happens, nothing fails
    assert viewer.shown_file.hunks[0].new_start == 47


def test_ignore_whitespace_hides_spacing_only_changes(qtbot, viewer, repo):
    repo.write("f.py", "def f():\n    a = 1\n    b = 2\n    return a + b\n")
    a = repo.commit()
    repo.write("f.py", "def f():\n  a = 1\n  b  =  2\n  return a - b\n")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    assert (viewer.shown_file.additions, viewer.shown_file.deletions) == (3, 3)
    viewer.whitespace_button.click()
    assert viewer.ignore_whitespace
    f = viewer.shown_file
    assert (f.additions, f.deletions) == (1, 1)
    lines = [(ln.kind, ln.text) for ln in f.hunks[0].lines]
    assert ("-", "    return a + b") in lines and ("+", "  return a - b") in lines
    assert (" ", "  b  =  2") in lines  # unchanged now, shown as it reads in the new version
    viewer.whitespace_button.click()
    assert (viewer.shown_file.additions, viewer.shown_file.deletions) == (3, 3)


def test_a_file_with_only_whitespace_changes_says_so(qtbot, viewer, repo):
    repo.write("f.txt", "a b\n")
    a = repo.commit()
    repo.write("f.txt", "a   b\n")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    viewer.set_ignore_whitespace(True)
    assert viewer.shown_file.hunks == []
    assert "only whitespace changed" in viewer.file_heading.text()


# -- find ---------------------------------------------------------------------------------------------


def test_find_in_diff_moves_between_matches(qtbot, viewer, repo):
    repo.write("f.txt", "".join(f"row {i}\n" for i in range(1, 200)))
    a = repo.commit()
    repo.write(
        "f.txt",
        "".join(f"row {i}{' needle' if i in (20, 90, 150) else ''}\n" for i in range(1, 200)),
    )
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    viewer.unified.setFocus()
    qtbot.keyClick(viewer.unified, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert viewer.find_bar.isVisible()
    assert viewer.find_bar.field.hasFocus()
    qtbot.keyClicks(viewer.find_bar.field, "NEEDLE")
    assert len(viewer.find_bar.matches) == 3
    assert viewer.find_bar.count.text() == "1 of 3"
    assert viewer.unified.textCursor().selectedText() == "needle"
    first_line = viewer.unified.textCursor().blockNumber()
    assert viewer.unified.textCursor().block().text() == "+row 20 needle"

    qtbot.keyClick(viewer.find_bar.field, Qt.Key.Key_Return)
    assert viewer.find_bar.count.text() == "2 of 3"
    assert viewer.unified.textCursor().block().text() == "+row 90 needle"
    viewer.find_bar.next_button.click()
    assert viewer.unified.textCursor().block().text() == "+row 150 needle"
    viewer.find_bar.next_button.click()  # round again
    assert viewer.unified.textCursor().blockNumber() == first_line
    qtbot.keyClick(viewer.find_bar.field, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert viewer.find_bar.count.text() == "3 of 3"
    viewer.find_bar.previous_button.click()
    assert viewer.find_bar.count.text() == "2 of 3"

    qtbot.keyClicks(viewer.find_bar.field, "zzz")
    assert viewer.find_bar.count.text() == "No matches"
    qtbot.keyClick(viewer.find_bar.field, Qt.Key.Key_Escape)
    assert not viewer.find_bar.isVisible()


def test_find_side_by_side_finds_removed_and_added_text(qtbot, viewer, repo):
    repo.write("f.txt", "alpha\nbeta\n")
    a = repo.commit()
    repo.write("f.txt", "alpha\ngamma beta\n")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    viewer.set_mode(SIDE_BY_SIDE)
    viewer.open_find()
    viewer.find_bar.field.setText("beta")
    assert len(viewer.find_bar.matches) == 2
    assert viewer.side.old.textCursor().selectedText() == "beta"
    viewer.find_bar.find_next()
    assert viewer.side.new.textCursor().selectedText() == "beta"
    assert viewer.side.new.textCursor().block().text() == "gamma beta"


def test_find_reaches_lines_not_loaded_yet(qtbot, viewer, repo):
    a = repo.commit()
    repo.write("new.txt", "".join(f"line {i}\n" for i in range(1, 5001)))
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b, max_bytes=None))
    assert viewer.shown_lines == CHUNK_LINES
    viewer.open_find()
    viewer.find_bar.field.setText("line 4999")
    assert viewer.unified.textCursor().block().text() == "+line 4999"
    assert viewer.shown_lines > 4000


# -- files and hunks --------------------------------------------------------------------------------


def test_folder_tree_lists_files_under_their_folders(qtbot, viewer, repo):
    a = repo.commit()
    for path in ("src/app/b.py", "src/app/a.py", "README", "docs/x.md"):
        repo.write(path, "x\n")
    b = repo.commit()
    diff = repo.diff(a, b)
    viewer.set_diff(diff)
    assert not viewer.tree_shown
    viewer.tree_button.click()
    assert viewer.tree_shown
    model = viewer.tree_model
    top = [model.item(r, 0).text() for r in range(model.rowCount())]
    assert top == ["docs/", "src/app/", "A  README"]
    src = model.item(1, 0)
    assert [src.child(r, 0).text() for r in range(src.rowCount())] == ["A  a.py", "A  b.py"]
    assert model.item(2, 1).text() == "+1 −0"

    viewer.file_tree.setCurrentIndex(src.child(1, 0).index())
    qtbot.waitUntil(lambda: viewer.diff.files[viewer.file_index].path == "src/app/b.py")
    # n and p follow the tree's order: docs/x.md, src/app/a.py, src/app/b.py, README
    viewer.file_tree.setFocus()
    qtbot.keyClick(viewer.file_tree, Qt.Key.Key_N)
    assert viewer.diff.files[viewer.file_index].path == "README"
    qtbot.keyClick(viewer.unified, Qt.Key.Key_P)
    qtbot.keyClick(viewer.unified, Qt.Key.Key_P)
    assert viewer.diff.files[viewer.file_index].path == "src/app/a.py"
    viewer.tree_button.click()
    assert not viewer.tree_shown


def test_tree_order_and_folded_single_folders():
    nodes = folder_tree(["a/b/c/x.py", "a/b/c/y.py", "z.py", "a/q.py"])
    assert [n.name for n in nodes] == ["a", "z.py"]
    assert [n.name for n in nodes[0].children] == ["b/c", "q.py"]
    assert tree_order(nodes) == [0, 1, 3, 2]


def test_j_and_k_move_between_hunks_and_n_and_p_between_files(qtbot, viewer, repo):
    repo.write("a.txt", "".join(f"line {i}\n" for i in range(1, 101)))
    repo.write("b.txt", "b\n")
    a = repo.commit()
    repo.write(
        "a.txt", "".join(f"line {i}{' x' if i in (10, 50, 90) else ''}\n" for i in range(1, 101))
    )
    repo.write("b.txt", "b changed\n")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    view = viewer.unified
    view.setFocus()
    headers = [i for i, k in enumerate(view.rows.kinds) if k == ROW_HUNK]
    assert len(headers) == 3
    qtbot.keyClick(view, Qt.Key.Key_J)
    assert view.textCursor().blockNumber() == headers[1]
    assert viewer.current_hunk() == 1
    qtbot.keyClick(view, Qt.Key.Key_J)
    assert view.textCursor().blockNumber() == headers[2]
    qtbot.keyClick(view, Qt.Key.Key_J)  # no further hunk: it stays
    assert view.textCursor().blockNumber() == headers[2]
    qtbot.keyClick(view, Qt.Key.Key_K)
    assert view.textCursor().blockNumber() == headers[1]
    qtbot.keyClick(view, Qt.Key.Key_N)
    assert viewer.file_index == 1
    qtbot.keyClick(view, Qt.Key.Key_N)  # the last file: it stays
    assert viewer.file_index == 1
    qtbot.keyClick(view, Qt.Key.Key_P)
    assert viewer.file_index == 0


def test_screenshot(qtbot, viewer, repo):
    repo.write("src/app/main.py", "".join(f"value_{i} = {i}\n" for i in range(1, 80)))
    repo.write("README.md", "hello\n")
    a = repo.commit()
    repo.write(
        "src/app/main.py",
        "".join(f"value_{i} = {i * 2 if i in (30, 60) else i}\n" for i in range(1, 80)),
    )
    repo.write("src/app/util.py", "def util():\n    return 1\n")
    repo.write("README.md", "hello world\n")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b), whole_file=_whole_file(repo, a, b))
    viewer.tree_button.click()
    viewer.select_file(
        next(i for i, f in enumerate(viewer.diff.files) if f.path.endswith("main.py"))
    )
    viewer.expand(1, "above", 5)
    qtbot.waitUntil(lambda: viewer.shown_file.hunks[1].new_start == 52, timeout=5_000)
    viewer.open_find()
    viewer.find_bar.field.setText("120")
    qtbot.waitUntil(lambda: viewer.colouring_complete, timeout=5_000)
    viewer.grab().save("/tmp/shots/diff_viewer_tools.png")


def test_a_re_indented_file_of_24000_lines_shows_no_change_with_whitespace_ignored(
    qtbot, viewer, repo
):
    count = 24_000
    repo.write("big.py", "".join(f"value_{i} = {i}\n" for i in range(count)))
    a = repo.commit()
    repo.write("big.py", "".join(f"    value_{i}  =  {i}\n" for i in range(count)))
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b, max_bytes=None))
    viewer.set_ignore_whitespace(True)
    assert viewer.shown_file.hunks == []
    assert "only whitespace changed" in viewer.file_heading.text()


def test_a_whole_file_that_does_not_match_the_hunks_is_not_used(repo):
    from gui.diff.reshape import Expansion

    repo.write("f.txt", _hundred_lines(change_at=0))
    a = repo.commit()
    repo.write("f.txt", _hundred_lines(change_at=50))
    b = repo.commit()
    repo.write("f.txt", _hundred_lines(change_at=70))
    c = repo.commit()
    shown = repo.diff(a, b).files[0]
    assert Expansion.of(shown, _whole_file(repo, a, b)(shown)) is not None
    assert Expansion.of(shown, _whole_file(repo, a, c)(shown)) is None  # other revisions


def test_folders_and_whitespace_choices_are_remembered(qtbot, jobs, tmp_path):
    from gui.qt import QSettings

    settings = QSettings(str(tmp_path / "ui.ini"), QSettings.Format.IniFormat)
    first = DiffViewer(jobs, settings=settings)
    qtbot.addWidget(first)
    assert not first.tree_shown and not first.ignore_whitespace
    first.tree_button.click()
    first.whitespace_button.click()
    second = DiffViewer(jobs, settings=settings)
    qtbot.addWidget(second)
    assert second.tree_shown and second.tree_button.isChecked()
    assert second.ignore_whitespace and second.whitespace_button.isChecked()
