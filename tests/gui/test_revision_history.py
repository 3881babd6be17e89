"""The Revisions tab reads as a history: each row says what produced it (the step or tool call)
and its files, under its run and step; a loop rewriting one file is one group that opens; the list
is searched by path and text; markers sit at their revision and select it; a file's own history
opens from the diff's file list; and restores run from the list and the diff, asking first,
saying what happened, and refused with the reason while a run is live."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from core import events as ev
from core.app import Cairn
from core.models import Run, Task
from gui.context import AppContext
from gui.qt import QCoreApplication, QEvent, QPoint, QSettings, Qt
from gui.revisions import RevisionsPanel
from gui.revisions.timeline_model import BURST, COL_SEQ, COL_WHAT, HEADING, MARKER, MEMBER

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

LOOP = "for i in $(seq 90); do date >> loop.log; sleep 1; done"


@pytest.fixture
def cairn(data_dir):
    app = Cairn(data_dir)
    yield app
    app.close()


@pytest.fixture
def context(qtbot, cairn, tmp_path):
    ctx = AppContext(
        cairn, settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )
    yield ctx
    ctx.close(close_facade=False)


@pytest.fixture
def panel(qtbot, context) -> RevisionsPanel:
    widget = RevisionsPanel(context)
    qtbot.addWidget(widget)
    widget.resize(1200, 800)
    widget.show()
    qtbot.waitExposed(widget)
    yield widget
    widget.close()
    widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture
def made(cairn, tmp_path):
    src = tmp_path / "project"
    src.mkdir()
    (src / "app.py").write_text("one\ntwo\nthree\nfour\nfive\nsix\nseven\n")
    (src / "README.md").write_text("# Project\n")
    new = cairn.tasks.new(src, title="history", engine="shell")
    return new.task.id, new.workspace.id, Path(new.workspace.root)


def shell_run(cairn: Cairn, task: str, ws: str, run_id: str, state: str = "succeeded") -> Run:
    run = Run(run_id, task, state, 1, "shell", workspace_id=ws, created_at=time.time())
    cairn.ctx.store.add_run(run)
    return run


def say(cairn: Cairn, run_id: str, text: str) -> None:
    cairn.ctx.events.publish(ev.RUN_OUTPUT, run_id, stream="stdout", text=text, offset=0)


def loop_history(cairn: Cairn, task: str, ws: str, root: Path) -> list[str]:
    """What the 90-second loop leaves: a step that writes loop.log 90 times (written here as
    fast as captures go), then a step that edits app.py."""
    run = shell_run(cairn, task, ws, "r_loop")
    say(cairn, run.id, f"cairn: step 1/2: {LOOP}\n")
    revs = []
    for i in range(90):
        with open(root / "loop.log", "a") as f:
            f.write(f"tick {i}\n")
        rev, _ = cairn.revisions.capture(task, trigger="watch", run_id=run.id)
        revs.append(rev.id)
    say(cairn, run.id, "cairn: step 2/2: sed -i s/two/TWO/ app.py\n")
    (root / "app.py").write_text("one\nTWO\nthree\nfour\nfive\nsix\nseven\n")
    rev, _ = cairn.revisions.capture(task, trigger="watch", run_id=run.id)
    revs.append(rev.id)
    return revs


def rows(panel: RevisionsPanel) -> list[tuple[str, str]]:
    m = panel.model
    return [(m.kind(r), m.data(m.index(r, COL_WHAT))) for r in range(m.rowCount())]


def wait_rows(qtbot, panel: RevisionsPanel, predicate) -> None:
    qtbot.waitUntil(lambda: predicate(rows(panel)), timeout=15_000)


def test_the_90_second_loop_is_one_group_and_every_row_names_its_step_and_files(
    qtbot, panel, cairn, made
):
    task, ws, root = made
    revs = loop_history(cairn, task, ws, root)
    panel.set_task(task)
    wait_rows(qtbot, panel, lambda r: any(k == BURST for k, _ in r))

    shown = rows(panel)
    assert shown == [
        (HEADING, "run r_loop · step 2/2: sed -i s/two/TWO/ app.py"),
        ("revision", "step 2/2: sed -i s/two/TWO/ app.py · app.py"),
        (HEADING, f"run r_loop · step 1/2: {LOOP}"),
        (BURST, f"step 1/2: {LOOP} · 90 revisions of loop.log"),
        ("revision", "the folder the task started from · README.md, app.py"),
    ]
    burst = 3
    m = panel.model
    assert m.data(m.index(burst, COL_SEQ)).startswith("▸ 2–91")
    panel.table.grab().save("/tmp/revisions_loop_closed.png")

    # A click on ▸ opens it: the 90 revisions, newest first, each naming the step and file.
    rect = panel.table.visualRect(m.index(burst, COL_SEQ))
    qtbot.mouseClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert m.is_open(burst)
    members = [r for r in range(m.rowCount()) if m.kind(r) == MEMBER]
    assert len(members) == 90
    assert [m.entry(r).id for r in members] == revs[:90][::-1]
    assert all(m.data(m.index(r, COL_WHAT)) == f"step 1/2: {LOOP} · loop.log" for r in members)
    panel.table.grab().save("/tmp/revisions_loop_open.png")

    # Read again from scratch (the task shown anew), the group stays open.
    m.set_entries(list(m.entries()), keep_stats=False, markers=[])
    assert m.is_open(m.row_of(revs[0])) or any(m.kind(r) == MEMBER for r in range(m.rowCount()))
    assert len([r for r in range(m.rowCount()) if m.kind(r) == MEMBER]) == 90

    # Space on the group closes it again.
    panel.table.setCurrentIndex(m.index(burst, COL_SEQ))
    qtbot.keyClick(panel.table, Qt.Key.Key_Space)
    assert not m.is_open(burst) and m.rowCount() == 5

    # Selecting the closed group shows the loop's whole change: its first parent to its last.
    panel.select_revisions(revs[89])
    qtbot.waitUntil(lambda: panel.viewer.diff is not None, timeout=10_000)
    assert panel.comparison_refs() == (m.row(burst).members[0].parent_id, revs[89])
    assert [f.path for f in panel.viewer.diff.files] == ["loop.log"]
    qtbot.waitUntil(lambda: m.stats(m.row(burst).key) is not None, timeout=10_000)
    assert m.stats(m.row(burst).key)[1] == 90


def test_the_list_is_searched_by_path_and_text(qtbot, panel, cairn, made):
    task, ws, root = made
    loop_history(cairn, task, ws, root)
    panel.set_task(task)
    wait_rows(qtbot, panel, lambda r: any(k == BURST for k, _ in r))

    panel.set_search("app.py")
    assert [k for k, _ in rows(panel)] == [HEADING, "revision", "revision"]
    panel.set_search("sed TWO")
    assert rows(panel) == [
        (HEADING, "run r_loop · step 2/2: sed -i s/two/TWO/ app.py"),
        ("revision", "step 2/2: sed -i s/two/TWO/ app.py · app.py"),
    ]
    panel.set_search("nothing-like-this")
    assert rows(panel) == []
    panel.set_search("")
    assert len(rows(panel)) == 5


def test_markers_sit_at_their_revision_and_a_click_selects_it(qtbot, panel, cairn, made):
    task, ws, root = made
    (root / "app.py").write_text("changed\n")
    first, _ = cairn.revisions.capture(task)
    snap = cairn.snapshots.take(task, name="known good")
    (root / "README.md").write_text("# Later\n")
    cairn.revisions.capture(task)
    child = Task(
        "t_child",
        "try another way",
        cairn.ctx.task(task).source_id,
        None,
        "shell",
        "",
        task,
        "fork",
        first.id,
        time.time(),
    )
    cairn.ctx.store.add_task(child)  # a fork's row: no run, no sandbox
    panel.set_task(task)
    wait_rows(qtbot, panel, lambda r: sum(k == MARKER for k, _ in r) == 2)

    m = panel.model
    markers = {m.row(r).marker.kind: r for r in m.marker_rows()}
    assert m.data(m.index(markers["snapshot"], COL_WHAT)) == "● snapshot known good"
    assert m.row(markers["snapshot"]).marker.ref == snap.id
    assert m.data(m.index(markers["fork"], COL_WHAT)) == f"↗ fork: {child.title}"
    # Both sit just above the revision they belong to.
    below = max(markers.values()) + 1
    assert m.entry(below).id == first.id
    panel.table.grab().save("/tmp/revisions_markers.png")

    rect = panel.table.visualRect(m.index(markers["fork"], COL_WHAT))
    qtbot.mouseClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert panel.selected_revisions() == [first.id]


def test_restore_workspace_and_undo_ask_first_and_report_each_conflict(qtbot, panel, cairn, made):
    task, ws, root = made
    (root / "app.py").write_text("one\nTWO\nthree\nfour\nfive\nsix\nseven\n")
    middle, _ = cairn.revisions.capture(task)
    (root / "app.py").write_text("one\nTWO!\nthree\nfour\nfive\nsix\nSEVEN\n")
    (root / "new.txt").write_text("new\n")
    cairn.revisions.capture(task)
    asked: list[tuple[str, str]] = []
    told: list[tuple[str, bool]] = []
    panel.restores.confirm = lambda _w, title, text: asked.append((title, text)) or True
    panel.restores.report = lambda _w, _title, text, problem: told.append((text, problem))
    offered: list[str] = []
    panel.restores.offer_markers = lambda _w, _title, text: offered.append(text) and False
    panel.set_task(task)
    wait_rows(qtbot, panel, lambda r: len(r) == 3)

    # Undo the middle revision: its line was edited again since, so app.py is a conflict.
    panel.select_revisions(middle.id)
    assert panel.undo_button.isEnabled()
    panel.undo_button.click()
    qtbot.waitUntil(lambda: len(told) == 1, timeout=15_000)
    title, text = asked[0]
    assert title == "Undo #2's change"
    assert "app.py" in text and "conflict" in text
    report, problem = told[0]
    assert problem
    assert "app.py — edited since revision" in report
    assert (root / "app.py").read_text() == "one\nTWO!\nthree\nfour\nfive\nsix\nSEVEN\n"
    # The person was offered to write it with conflict markers, and left it.
    assert len(offered) == 1 and "conflict markers" in offered[0]

    # Restore the workspace to the base: the confirmation names what it writes and deletes.
    base = panel.model.entries()[-1]
    menu = panel.context_menu_for(panel.model.row_of(base.id))
    action = next(a for a in menu.actions() if a.objectName() == "restoreWorkspace")
    assert action.isEnabled()
    action.trigger()
    qtbot.waitUntil(lambda: len(told) == 2, timeout=15_000)
    assert "writes 1 file" in asked[1][1] and "deletes 1 file" in asked[1][1]
    assert "new.txt" in asked[1][1]
    report, problem = told[1]
    assert not problem and "wrote 1 file (app.py) and deleted 1 file (new.txt)" in report
    assert (root / "app.py").read_text().startswith("one\ntwo\n")
    assert not (root / "new.txt").exists()
    # The restore is in the list, described as one.
    wait_rows(
        qtbot, panel, lambda r: r and r[0][1] == "restored the workspace to #1 · app.py, new.txt"
    )


def test_restore_this_file_from_the_diff_and_its_history(qtbot, panel, cairn, made):
    task, ws, root = made
    (root / "app.py").write_text("first edit\n")
    (root / "README.md").write_text("# Edited\n")
    first, _ = cairn.revisions.capture(task)
    (root / "app.py").write_text("second edit\n")
    cairn.revisions.capture(task)
    told: list[str] = []
    panel.restores.confirm = lambda _w, _t, _x: True
    panel.restores.report = lambda _w, _t, text, _p: told.append(text)
    panel.set_task(task)
    wait_rows(qtbot, panel, lambda r: len(r) == 3)

    panel.select_revisions(first.id)
    qtbot.waitUntil(lambda: bool(panel.viewer.file_actions), timeout=10_000)
    menu = panel.viewer.file_menu("app.py")
    texts = [a.text() for a in menu.actions()]
    assert texts == ["Restore this file to here (#2)…", "Show this file's history…"]
    menu.actions()[0].trigger()
    qtbot.waitUntil(lambda: bool(told), timeout=15_000)
    assert (root / "app.py").read_text() == "first edit\n"
    assert (root / "README.md").read_text() == "# Edited\n"
    assert "Restore app.py to #2: wrote 1 file (app.py)" in told[0]

    # The diff view's own menu offers the same for the shown file.
    panel.viewer.select_file(
        next(i for i, f in enumerate(panel.viewer.diff.files) if f.path == "app.py")
    )
    menu = panel.viewer.text_menu(panel.viewer.unified, QPoint(5, 5))
    restore = next(a for a in menu.actions() if a.objectName() == "fileAction-restore")
    assert restore.text() == "Restore this file to here (#2)…" and restore.isEnabled()
    menu.popup(panel.viewer.mapToGlobal(QPoint(300, 40)))
    qtbot.waitExposed(menu)
    menu.grab().save("/tmp/revisions_diff_menu.png")
    menu.close()

    panel.viewer.file_menu("app.py").actions()[1].trigger()
    dialogs = [w for w in panel.findChildren(object) if w.objectName() == "fileHistory"]
    assert dialogs
    dialog = dialogs[0]
    qtbot.waitUntil(lambda: len(dialog.entries()) == 4, timeout=15_000)
    assert [e.what for e in dialog.entries()] == [
        "restored to #2",
        "captured by hand",
        "captured by hand",
        "the folder the task started from",
    ]
    qtbot.waitUntil(lambda: dialog.viewer.diff is not None, timeout=10_000)
    assert [f.path for f in dialog.viewer.diff.files] == ["app.py"]
    dialog.grab().save("/tmp/revisions_file_history.png")
    dialog.close()


def test_restores_are_refused_with_the_reason_while_a_run_is_live(qtbot, panel, cairn, made):
    task, ws, root = made
    (root / "app.py").write_text("edited\n")
    rev, _ = cairn.revisions.capture(task)
    shell_run(cairn, task, ws, "r_live", state="running")
    panel.set_task(task)
    wait_rows(qtbot, panel, lambda r: len(r) == 2)
    qtbot.waitUntil(lambda: panel.refused() != "", timeout=10_000)

    panel.select_revisions(rev.id)
    assert not panel.restore_button.isEnabled()
    assert "run r_live is live" in panel.restore_button.toolTip()
    assert not panel.undo_button.isEnabled()
    assert "run r_live is live" in panel.undo_button.toolTip()
    assert panel.refusal.isVisible() and "run r_live is live" in panel.refusal.text()
    menu = panel.context_menu_for(panel.model.row_of(rev.id))
    for name in ("restoreWorkspace", "undoRevision"):
        action = next(a for a in menu.actions() if a.objectName() == name)
        assert not action.isEnabled() and "run r_live is live" in action.toolTip()
    qtbot.waitUntil(lambda: bool(panel.viewer.file_actions), timeout=10_000)
    restore_file = panel.viewer.file_menu("app.py").actions()[0]
    assert not restore_file.isEnabled() and "run r_live is live" in restore_file.toolTip()
    panel.grab().save("/tmp/revisions_refused.png")


def test_an_undo_that_overlaps_can_be_written_with_conflict_markers(qtbot, panel, cairn, made):
    task, ws, root = made
    (root / "app.py").write_text("one\nTWO\nthree\n")
    middle, _ = cairn.revisions.capture(task)
    (root / "app.py").write_text("one\nTWO!\nthree\n")
    cairn.revisions.capture(task)
    told: list[tuple[str, bool]] = []
    panel.restores.confirm = lambda _w, _title, _text: True
    panel.restores.report = lambda _w, _title, text, problem: told.append((text, problem))
    panel.restores.offer_markers = lambda _w, _title, _text: True
    panel.set_task(task)
    wait_rows(qtbot, panel, lambda r: len(r) >= 3)
    panel.select_revisions(middle.id)
    panel.undo_button.click()
    qtbot.waitUntil(lambda: len(told) == 1, timeout=15_000)
    text = (root / "app.py").read_text()
    assert "<<<<<<< current app.py" in text and "TWO!" in text
    report, problem = told[0]
    assert "app.py" in report
