"""The diff viewer: text, binary, rename and mode changes shown in words; colouring applied from a
worker; a huge diff paints its first chunk quickly, "show more" appends, nothing blocks; late
colouring results for a file no longer shown are dropped."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from core.diffs import diff_revisions
from gui.diff import DiffViewer
from gui.diff.model import ROW_ADDED, ROW_REMOVED, SIDE_BY_SIDE, UNIFIED
from gui.diff.viewer import CHUNK_LINES
from gui.jobs import JobRunner
from gui.qt import QColor, QCoreApplication, QEvent, QPalette, Qt, QTextCharFormat
from tests.gui.support import longest_stall_while

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

GIT = ["git", "-c", "user.name=Test", "-c", "user.email=test@localhost", "-c", "core.fileMode=true"]


class Repo:
    """A plain git repository to make revisions in; diffs come from core.diffs as in the app."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir()
        self.git("init", "-q")

    def git(self, *args: str) -> str:
        return subprocess.run(
            [*GIT, *args], cwd=self.root, check=True, capture_output=True, text=True
        ).stdout.strip()

    def write(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(target, mode)

    def commit(self) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", "revision")
        return self.git("rev-parse", "HEAD")

    def diff(self, old: str, new: str, **kw):
        return diff_revisions(self.root / ".git", old, new, **kw)


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
    # Gone before the job runner shuts down, so no pending timer submits a job to it.
    widget.close()
    widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def _wait_coloured(qtbot, viewer: DiffViewer, timeout: int = 10_000) -> None:
    qtbot.waitUntil(lambda: viewer.colouring_complete, timeout=timeout)


def _char_format_at(view, row: int, column: int):
    block = view.document().findBlockByNumber(row)
    ranges = block.layout().formats()  # keep the list alive while reading its formats
    for fr in ranges:
        if fr.start <= column < fr.start + fr.length:
            return QTextCharFormat(fr.format)
    return None


def test_text_change_shows_hunks_numbers_colours_and_intraline(qtbot, viewer, repo):
    repo.write("app.py", "import os\n\ndef total(items):\n    return sum(items)\n")
    a = repo.commit()
    repo.write("app.py", "import os\n\ndef total(values):\n    return sum(values) + 1\n")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    assert viewer.file_model.rowCount() == 1
    assert viewer.file_model.data(viewer.file_model.index(0, 0)) == "M"
    assert viewer.file_model.data(viewer.file_model.index(0, 2)) == "+2 −2"
    text = viewer.shown_text()
    assert "@@ -1,4 +1,4 @@" in text
    assert "-def total(items):" in text and "+def total(values):" in text
    _wait_coloured(qtbot, viewer)
    view = viewer.unified
    rows = view.rows
    removed = rows.kinds.index(ROW_REMOVED)
    added = rows.kinds.index(ROW_ADDED)
    assert (rows.old_nos[removed], rows.new_nos[removed]) == (3, None)
    assert (rows.old_nos[added], rows.new_nos[added]) == (None, 3)
    # "def" is a keyword: coloured; "values" differs from "items": emphasised on the added line.
    keyword = _char_format_at(view, added, 1)
    assert keyword is not None and keyword.foreground().color() == view.colors.syntax["keyword"]
    column = view.document().findBlockByNumber(added).text().index("values")
    emph = _char_format_at(view, added, column)
    assert emph is not None and emph.background().color() == view.colors.added_emph
    # Context "import os" is not emphasised.
    context = _char_format_at(view, rows.kinds.index(" "), 1)
    assert context is None or context.background().style() == Qt.BrushStyle.NoBrush


def test_side_by_side_pairs_removed_with_added_lines(qtbot, viewer, repo):
    repo.write("notes.txt", "one\ntwo\nthree\n")
    a = repo.commit()
    repo.write("notes.txt", "one\nTWO\nthree\nfour\n")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    viewer.set_mode(SIDE_BY_SIDE)
    assert viewer.mode == SIDE_BY_SIDE
    old, new = viewer.side.old, viewer.side.new
    assert len(old.rows) == len(new.rows)
    assert old.toPlainText().split("\n")[1:] == ["one", "two", "three", ""]
    assert new.toPlainText().split("\n")[1:] == ["one", "TWO", "three", "four"]
    assert old.rows.kinds[-1] == "~"  # the filler facing the added "four"
    viewer.set_mode(UNIFIED)
    assert "+TWO" in viewer.shown_text()


def test_binary_file_is_noted_with_its_size_and_no_bytes(qtbot, viewer, repo):
    blob = bytes(range(256)) * 8 + b"\0garbage\xff"
    repo.write("logo.png", blob)
    a = repo.commit()
    repo.write("logo.png", blob + b"\0more")
    b = repo.commit()
    diff = repo.diff(a, b)
    f = diff.files[0]
    assert f.binary
    sizes = {f.old_sha: len(blob), f.new_sha: len(blob) + 5}
    viewer.set_diff(diff, blob_sizes=sizes)
    text = viewer.shown_text()
    assert f"binary file, {len(blob):,} bytes → {len(blob) + 5:,} bytes" in text
    assert "garbage" not in text and "\0" not in text
    assert viewer.file_model.data(viewer.file_model.index(0, 2)) == "binary"
    assert "binary" in viewer.file_heading.text()


def test_rename_is_shown_as_old_to_new(qtbot, viewer, repo):
    repo.write("src/old_name.py", "".join(f"line {i}\n" for i in range(30)))
    a = repo.commit()
    (repo.root / "src/old_name.py").rename(repo.root / "src/new_name.py")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    model = viewer.file_model
    assert model.data(model.index(0, 0)) == "R"
    assert model.data(model.index(0, 1)) == "src/old_name.py → src/new_name.py"
    assert "renamed: src/old_name.py → src/new_name.py (100% similar)" in viewer.file_heading.text()
    assert "renamed without changes to its contents" in viewer.shown_text()


def test_mode_change_is_shown_in_words(qtbot, viewer, repo):
    repo.write("run.sh", "#!/bin/sh\necho hi\n", mode=0o644)
    a = repo.commit()
    os.chmod(repo.root / "run.sh", 0o755)
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    model = viewer.file_model
    assert model.data(model.index(0, 0)) == "X"
    assert "permissions changed" in model.data(model.index(0, 1), 3)  # tooltip
    assert "mode changed: 100644 → 100755; contents unchanged" in viewer.shown_text()


def test_added_and_removed_files_and_the_core_cap_banner(qtbot, viewer, repo):
    repo.write("gone.txt", "bye\n")
    a = repo.commit()
    (repo.root / "gone.txt").unlink()
    for i in range(5):
        repo.write(f"new{i}.txt", "".join(f"row {n}\n" for n in range(200)))
    b = repo.commit()
    diff = repo.diff(a, b, max_bytes=3000)
    assert diff.truncated
    viewer.set_diff(diff)
    assert viewer.banner.isVisibleTo(viewer)
    assert diff.note in viewer.banner.text()
    letters = [
        viewer.file_model.data(viewer.file_model.index(r, 0))
        for r in range(viewer.file_model.rowCount())
    ]
    assert sorted(letters) == ["A"] * 5 + ["D"]
    last = viewer.file_model.rowCount() - 1
    viewer.select_file(last)
    assert "left out" in viewer.shown_text()


def test_selecting_files_is_debounced(qtbot, viewer, repo):
    for name in ("a.txt", "b.txt", "c.txt"):
        repo.write(name, "x\n")
    a = repo.commit()
    for name in ("a.txt", "b.txt", "c.txt"):
        repo.write(name, f"{name}\n")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    shown: list[int] = []
    viewer.sig_file_shown.connect(shown.append)
    viewer.file_list.selectRow(1)
    viewer.file_list.selectRow(2)
    qtbot.waitUntil(lambda: viewer.file_index == 2, timeout=2000)
    assert shown == [2]
    assert "+c.txt" in viewer.shown_text()


def test_late_colouring_for_a_file_no_longer_shown_is_dropped(qtbot, viewer, repo):
    repo.write("first.py", "x = 1\n")
    repo.write("second.py", "y = 2\n")
    a = repo.commit()
    repo.write("first.py", "x = 10\n")
    repo.write("second.py", "y = 20\n")
    b = repo.commit()
    diff = repo.diff(a, b)
    viewer.set_diff(diff)  # starts colouring first.py in a worker
    stale_generation = viewer._generation
    viewer.select_file(1)  # before that result arrives
    _wait_coloured(qtbot, viewer)
    assert viewer.file_index == 1
    # A result made for the old file is ignored when it finally comes back.
    bogus = {0: [(0, 1, "keyword", False)], 1: [(0, 1, "keyword", False)]}
    viewer._on_decorated(stale_generation, 99, bogus)
    assert viewer._spans.get(0) != bogus[0]
    assert viewer._decorated_upto != 99


def test_diff_colours_follow_the_palette(qtbot, viewer, repo):
    repo.write("f.txt", "a\n")
    a = repo.commit()
    repo.write("f.txt", "b\n")
    b = repo.commit()
    viewer.set_diff(repo.diff(a, b))
    light = viewer.unified.colors.added_bg
    dark = QPalette()
    dark.setColor(QPalette.ColorRole.Base, QColor(30, 30, 30))
    dark.setColor(QPalette.ColorRole.Text, QColor(220, 220, 220))
    dark.setColor(QPalette.ColorRole.Window, QColor(40, 40, 40))
    viewer.unified.setPalette(dark)
    assert viewer.unified.colors.dark
    assert viewer.unified.colors.added_bg != light
    assert viewer.unified.colors.added_bg.lightnessF() < 0.5


def test_huge_diff_paints_first_chunk_then_show_more_appends_without_blocking(qtbot, viewer, repo):
    count = 24_000
    repo.write("big.py", "".join(f"value_{i} = compute({i}, 'old')\n" for i in range(count)))
    a = repo.commit()
    repo.write("big.py", "".join(f"value_{i} = compute({i}, 'new')\n" for i in range(count)))
    b = repo.commit()
    diff = repo.diff(a, b, max_bytes=None)
    assert diff.files[0].additions == count

    started = time.perf_counter()
    viewer.set_diff(diff)
    first = time.perf_counter() - started
    total = viewer.total_lines
    assert total == 2 * count
    assert viewer.shown_lines == CHUNK_LINES
    assert viewer.shown_rows == CHUNK_LINES + 1  # and the hunk's header
    assert viewer.unified.document().blockCount() == CHUNK_LINES + 1
    assert viewer.more_button.isVisibleTo(viewer)
    assert viewer.more_button.text() == (
        f"Show {CHUNK_LINES:,} more lines ({total - CHUNK_LINES:,} not shown yet)"
    )
    assert first < 5.0  # loose: timing belongs to tests/perf/bench_diff_view.py

    stall = longest_stall_while(lambda: viewer.colouring_complete, 30)
    assert stall < 500, f"the event loop stalled {stall} ms while colouring"

    viewer.more_button.click()
    assert viewer.shown_lines == 2 * CHUNK_LINES
    assert viewer.unified.document().blockCount() == 2 * CHUNK_LINES + 1
    stall = longest_stall_while(lambda: viewer.colouring_complete, 30)
    assert stall < 500, f"the event loop stalled {stall} ms after show more"
    last_row = viewer.unified.document().findBlockByNumber(2 * CHUNK_LINES)
    assert last_row.text() == viewer.unified.rows.texts[-1]
    fmt = _char_format_at(viewer.unified, 2 * CHUNK_LINES, last_row.text().index("'"))
    assert fmt is not None  # the appended chunk is coloured too (its string literal)
    assert fmt.foreground().color() == viewer.unified.colors.syntax["string"]
