"""The Revisions tab on a real Cairn: a task's timeline with lazy +/−, two selected revisions show
their diff, a revision of another task of the same folder can be compared, "fork from here" emits
its signal, and a diff that arrives for an old selection is dropped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core.app import Cairn
from gui.context import AppContext
from gui.qt import QCoreApplication, QEvent, QSettings
from gui.revisions import RevisionsPanel
from gui.revisions.data import DiffResult
from gui.revisions.timeline_model import COL_LINES, COL_TRIGGER

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def cairn(data_dir):
    app = Cairn(data_dir)
    yield app
    app.close()


@pytest.fixture
def folder(tmp_path) -> Path:
    src = tmp_path / "project"
    src.mkdir()
    (src / "main.py").write_text("def greet():\n    return 'hello'\n")
    (src / "README.md").write_text("# Project\n")
    return src


@pytest.fixture
def context(qtbot, cairn, tmp_path):
    ctx = AppContext(
        cairn, settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )
    yield ctx
    ctx.close(close_facade=False)  # the cairn fixture closes the facade


@pytest.fixture
def panel(qtbot, context) -> RevisionsPanel:
    widget = RevisionsPanel(context)
    qtbot.addWidget(widget)
    widget.resize(1100, 800)
    widget.show()
    qtbot.waitExposed(widget)
    yield widget
    # Gone before the job runner shuts down, so no pending timer submits a job to it.
    widget.close()
    widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def _task_with_revisions(cairn: Cairn, folder: Path):
    made = cairn.tasks.new(folder, title="greeter")
    ws = Path(made.workspace.root)
    (ws / "main.py").write_text("def greet(name):\n    return f'hello {name}'\n")
    first, _ = cairn.revisions.capture(made.task.id)
    (ws / "notes.txt").write_text("one\ntwo\n")
    second, _ = cairn.revisions.capture(made.task.id)
    (ws / "README.md").unlink()
    third, _ = cairn.revisions.capture(made.task.id)
    return made.task, [made.base_revision, first.id, second.id, third.id]


def _wait_timeline(qtbot, panel, count: int) -> None:
    qtbot.waitUntil(lambda: panel.model.rowCount() == count, timeout=10_000)


def test_timeline_lists_revisions_newest_first_with_lazy_line_counts(qtbot, panel, cairn, folder):
    task, revs = _task_with_revisions(cairn, folder)
    panel.set_task(task.id)
    _wait_timeline(qtbot, panel, 4)
    model = panel.model
    assert [model.entry(r).id for r in range(4)] == revs[::-1]
    assert model.data(model.index(3, COL_TRIGGER)) == "base"
    assert model.data(model.index(0, COL_TRIGGER)) == "manual"
    # +/− arrive from a job for the rows the view painted.
    qtbot.waitUntil(
        lambda: all(model.stats(model.entry(r).id) is not None for r in range(4)), timeout=10_000
    )
    assert model.data(model.index(0, COL_LINES)) == "+0 −1"  # README.md removed
    assert model.data(model.index(1, COL_LINES)) == "+2 −0"  # notes.txt added
    assert model.data(model.index(2, COL_LINES)) == "+2 −2"


def test_selecting_two_revisions_shows_their_diff(qtbot, panel, cairn, folder):
    task, revs = _task_with_revisions(cairn, folder)
    panel.set_task(task.id)
    _wait_timeline(qtbot, panel, 4)
    with qtbot.waitSignal(panel.sig_diff_shown, timeout=10_000) as shown:
        panel.select_revisions(revs[1], revs[3])
    assert shown.args == [revs[1], revs[3]]
    viewer = panel.viewer
    labels = sorted(
        viewer.file_model.data(viewer.file_model.index(r, 1))
        for r in range(viewer.file_model.rowCount())
    )
    assert labels == ["README.md", "notes.txt"]
    assert panel.comparison.text() == "Comparing #2 (manual) → #4 (manual)"


def test_one_revision_shows_what_it_changed(qtbot, panel, cairn, folder):
    task, revs = _task_with_revisions(cairn, folder)
    panel.set_task(task.id)
    _wait_timeline(qtbot, panel, 4)
    with qtbot.waitSignal(panel.sig_diff_shown, timeout=10_000) as shown:
        panel.select_revisions(revs[1])
    assert shown.args == [revs[0], revs[1]]
    text = panel.viewer.shown_text()
    assert "+def greet(name):" in text and "-def greet():" in text


def test_a_revision_of_another_task_of_the_same_folder_can_be_compared(qtbot, panel, cairn, folder):
    task, revs = _task_with_revisions(cairn, folder)
    other = cairn.tasks.new(folder, title="second try")
    (Path(other.workspace.root) / "main.py").write_text("print('other')\n")
    other_rev, _ = cairn.revisions.capture(other.task.id)
    panel.set_task(task.id)
    _wait_timeline(qtbot, panel, 4)
    qtbot.waitUntil(lambda: panel.other_picker.count() == 3, timeout=10_000)  # none + 2 revisions
    ref = f"{other.task.id}:{other_rev.id}"
    with qtbot.waitSignal(panel.sig_diff_shown, timeout=10_000) as shown:
        panel.select_revisions(revs[1])
        panel.compare_with_other(ref)
    assert shown.args == [ref, revs[1]]
    assert "second try" in panel.comparison.text()
    text = panel.viewer.shown_text()
    assert "-print('other')" in text and "+def greet(name):" in text


def test_fork_from_here_emits_the_task_and_revision(qtbot, panel, cairn, folder):
    task, revs = _task_with_revisions(cairn, folder)
    panel.set_task(task.id)
    _wait_timeline(qtbot, panel, 4)
    row = panel.model.row_of(revs[2])
    menu = panel.context_menu_for(row)
    fork = next(a for a in menu.actions() if a.objectName() == "forkFromHere")
    assert fork.text().startswith("Fork from here")
    with qtbot.waitSignal(panel.sig_fork_requested, timeout=1000) as blocker:
        fork.trigger()
    assert blocker.args == [task.id, revs[2]]
    panel.select_revisions(revs[1])
    assert panel.fork_button.isEnabled()
    with qtbot.waitSignal(panel.sig_fork_requested, timeout=1000) as blocker:
        panel.fork_button.click()
    assert blocker.args == [task.id, revs[1]]


def test_a_diff_for_an_old_selection_is_dropped(qtbot, panel, cairn, folder):
    task, revs = _task_with_revisions(cairn, folder)
    panel.set_task(task.id)
    _wait_timeline(qtbot, panel, 4)
    with qtbot.waitSignal(panel.sig_diff_shown, timeout=10_000):
        panel.select_revisions(revs[2])
    stale_request = panel.diff_request
    with qtbot.waitSignal(panel.sig_diff_shown, timeout=10_000):
        panel.select_revisions(revs[3])
    shown = panel.viewer.diff
    # The answer to the earlier request finally arrives: it must not replace the current diff.
    late = DiffResult(cairn.revisions.diff(task.id, revs[0], revs[1]), {}, revs[0], revs[1])
    with qtbot.assertNotEmitted(panel.sig_diff_shown):
        panel._show_diff(stale_request, late)
    assert panel.viewer.diff is shown


def test_quick_selection_changes_are_debounced_into_one_diff(qtbot, panel, cairn, folder):
    task, revs = _task_with_revisions(cairn, folder)
    panel.set_task(task.id)
    _wait_timeline(qtbot, panel, 4)
    shown: list[list[str]] = []
    panel.sig_diff_shown.connect(lambda a, b: shown.append([a, b]))
    for rev in revs[1:]:
        panel.select_revisions(rev)
    qtbot.waitUntil(lambda: bool(shown), timeout=10_000)
    qtbot.wait(400)
    assert shown == [[revs[2], revs[3]]]


def test_a_new_revision_recorded_in_core_appears_in_the_timeline(qtbot, panel, cairn, folder):
    task, revs = _task_with_revisions(cairn, folder)
    panel.set_task(task.id)
    _wait_timeline(qtbot, panel, 4)
    ws = Path(cairn.tasks.workspace_of(cairn.tasks.get(task.id)).root)
    (ws / "later.txt").write_text("later\n")
    cairn.revisions.capture(
        task.id
    )  # publishes revision.recorded; the bridge brings it to the panel
    _wait_timeline(qtbot, panel, 5)


def test_no_task_shows_nothing(qtbot, panel):
    panel.set_task(None)
    assert panel.model.rowCount() == 0
    assert "Select a task" in panel.viewer.shown_text()


def test_selecting_the_base_revision_clears_the_previous_diffs_figures(qtbot, panel, cairn, folder):
    task, revs = _task_with_revisions(cairn, folder)
    panel.set_task(task.id)
    _wait_timeline(qtbot, panel, 4)
    with qtbot.waitSignal(panel.sig_diff_shown, timeout=10_000):
        panel.select_revisions(revs[1], revs[3])
    assert "changed" in panel.status.text()
    panel.select_revisions(revs[0])
    qtbot.waitUntil(lambda: "base revision" in panel.viewer.shown_text(), timeout=10_000)
    assert panel.status.text() == "" and panel.comparison.text() == ""
