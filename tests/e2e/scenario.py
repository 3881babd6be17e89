"""The end-to-end scenario, run inside the real app: `gui.main.main()` starts Cairn as a person
would (its QApplication, data folder, settings, signal handlers and event loop); the window it
shows is the real MainWindow, which this module subclasses only to be told when it is up. The
steps then act through the widgets a person uses: a drop from another X client (a real XDND
drag driven by xdotool), clicks on buttons, text typed into dialogs, keyboard shortcuts.

    python -m tests.e2e.scenario first|again --repo DIR --shots DIR --result FILE [cairn args]

`first` passes the first-run system check, drops the repository, runs a shell task that edits
files, diffs two revisions, forks from the first revision, continues the fork, approves one
request and denies another, writes what it saw to the result file and quits with File ▸ Quit. `again` relaunches on the same data and
writes what it finds. A failed step writes the error to the result file and a screenshot named
after it; the process exits non-zero either way it fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, QPoint, Qt, QTimer
from PySide6.QtGui import QColor, QGuiApplication, QImage, QKeySequence, QPalette
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QLineEdit, QWidget

import gui.main as app_main
from gui.diff.file_list import COL_PATH
from gui.lineage.model import ROLE_TASK_ID
from gui.main_window import MainWindow
from gui.promote_result import PromotedDialog
from gui.qt import is_alive
from gui.shortcuts import TASK_SHORTCUTS
from gui.task_view.actions import (
    BUTTONS,
    CONTINUE,
    EXPORT_PATCH,
    FORK,
    PROMOTE,
    RESUME,
    START,
    STOP,
)

STEP_TIMEOUT_S = 90
WINDOW_RECT = (0, 0, 960, 780)
SOURCE_POS = (1010, 60)

# The task's commands, one step each; the sleeps let the recorder capture between them.
TASK_COMMANDS = [
    "echo 'def logout(user):' >> app.py",
    "sleep 3",
    "echo '    return None' >> app.py; echo 'hello' > greeting.txt",
    "sleep 3",
    "sed -i 's/admin/root/' app.py; rm notes.txt",
]
FORK_COMMAND = "echo 'forked from the base' > fork.txt"
# A command that rewrites one file a dozen times (the 90-second loop, shortened).
LOOP_COMMANDS = "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo tick $i >> loop.log; sleep 0.5; done"
APPROVE_COMMAND = "git push --force origin main || true; echo pushed > pushed.txt"
# Asked about (a push), denied, so the removal after it never runs.
DENY_COMMAND = "git push origin main && rm -f app.py"
LONG_COMMAND = "sleep 120"
KEYBOARD_COMMANDS = ["echo typed > typed.txt"]
KEYBOARD_EDITED = ["echo typed > typed.txt", "echo edited >> typed.txt"]
KEYBOARD_CONTINUE = "echo continued >> typed.txt"
KEYBOARD_FORK = "echo forked > forked.txt"
BRANCH = "cairn/typed"
# The screenshots of the window at the sizes it is laid out for.
SIZES = ((1024, 700), (1366, 768), (1920, 1080))


class Failed(AssertionError):
    pass


class Scenario:
    def __init__(self, window: MainWindow, args: argparse.Namespace):
        self.w = window
        self.args = args
        self.shots = Path(args.shots)
        self.shots.mkdir(parents=True, exist_ok=True)
        self.result: dict[str, Any] = {"phase": args.phase, "steps": []}
        self.shot_count = 0

    # -- tools -----------------------------------------------------------------------------------

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = STEP_TIMEOUT_S) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise Failed(
                    f"timed out after {timeout:.0f} s waiting for {what}; status bar: "
                    f"{self.w.statusBar().currentMessage()!r}; jobs in flight: "
                    f"{self.w.context.jobs.in_flight()}"
                )
            QTest.qWait(50)

    def shot(self, name: str) -> Path:
        QTest.qWait(300)  # let the last paint reach the screen
        self.shot_count += 1
        path = self.shots / f"{self.args.phase}-{self.shot_count:02d}-{name}.png"
        QGuiApplication.primaryScreen().grabWindow(0).save(str(path))
        self.result["steps"].append(name)
        return path

    def click(self, widget: QWidget) -> None:
        self.wait(
            lambda: widget.isVisible() and widget.isEnabled(),
            f"{widget.objectName() or type(widget).__name__} to be clickable "
            f"(tooltip: {widget.toolTip()!r})",
        )
        QTest.mouseClick(widget, Qt.MouseButton.LeftButton)

    def click_action(self, name: str) -> None:
        action = self.w.task_view.buttons[name]
        self.wait(action.isEnabled, f"the {name} button (why not: {action.toolTip()!r})")
        self.click(self.w.task_view.toolbar.widgetForAction(action))

    def type_into(self, edit: QWidget, text: str) -> None:
        """Type into a field; a line break is Return, as typed."""
        edit.setFocus()
        for n, line in enumerate(text.split("\n")):
            if n:
                QTest.keyClick(edit, Qt.Key.Key_Return)
            QTest.keyClicks(edit, line)

    def select_task(self, task_id: str) -> None:
        """Click the task's row in the lineage tree."""
        tree = self.w.lineage.tree
        lineage = self.w.lineage

        def row() -> QModelIndex | None:  # asked again until the task's row has arrived
            index = lineage.proxy.mapFromSource(lineage.model.index_of_task(task_id))
            return index if index.isValid() else None

        index = self.wait(row, f"task {task_id} in the tree")
        tree.scrollTo(index)
        QTest.mouseClick(
            tree.viewport(),
            Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier,
            tree.visualRect(index).center(),
        )
        self.wait_task_shown(task_id)

    def tasks(self) -> list:
        return self.w.context.cairn.tasks.all()

    def run_state(self, task_id: str) -> str | None:
        run = self.w.context.cairn.runs.latest(task_id)
        return run.state if run else None

    def wait_run(self, task_id: str, states: tuple[str, ...], what: str) -> str:
        return self.wait(
            lambda: self.run_state(task_id) in states and self.run_state(task_id), what
        )

    def show_tab(self, widget: QWidget) -> None:
        tabs = self.w.tabs
        bar = tabs.tabBar()
        index = tabs.indexOf(widget)
        QTest.mouseClick(
            bar,
            Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier,
            bar.tabRect(index).center(),
        )
        self.wait(lambda: tabs.currentWidget() is widget, "the tab to show")

    def timeline_ids(self) -> list[str]:
        """The timeline's revisions, oldest first (it shows them newest first)."""
        return [entry.id for entry in reversed(self.w.revisions_panel.model.entries())]

    # -- the keyboard --------------------------------------------------------------------------

    def focused(self) -> QWidget:
        """Where a key press goes: the focused widget of the active window (a dialog when one
        is open)."""
        popup = QApplication.activePopupWidget()
        if popup is not None:
            return popup.focusWidget() or popup
        modal = QApplication.activeModalWidget()
        if modal is not None:
            if not modal.isActiveWindow():  # a window manager would activate it on showing
                modal.activateWindow()
                QTest.qWait(100)
            return modal.focusWidget() or modal
        widget = QApplication.focusWidget()
        if widget is None:
            self.w.activateWindow()
            QTest.qWait(100)
            widget = QApplication.focusWidget() or self.w
        return widget

    def press(self, keys: str) -> None:
        """Press a key sequence ("Ctrl+Shift+R", "F2", "Return") where the keyboard is."""
        combo = QKeySequence(keys)[0]
        QTest.keyClick(self.focused(), combo.key(), combo.keyboardModifiers())
        self.result.setdefault("keys", []).append(keys)
        QTest.qWait(50)

    def type_text(self, text: str) -> None:
        """Type into the focused field; a line break is Return, as typed."""
        for n, line in enumerate(text.split("\n")):
            if n:
                QTest.keyClick(self.focused(), Qt.Key.Key_Return)
            QTest.keyClicks(self.focused(), line)

    def key_action(self, name: str) -> None:
        """A task action by its keys, once it is enabled."""
        action = self.w.task_view.buttons[name]
        self.wait(action.isEnabled, f"the {name} action (why not: {action.toolTip()!r})")
        self.press(TASK_SHORTCUTS[name])

    def answer_next_modal(self, *keys: str, text: str = "", what: str) -> None:
        """Some actions ask in a dialog that blocks until answered (a file to save to, a
        branch name): answer it by keys once it shows."""

        def answer(tries: int = 100) -> None:
            modal = QApplication.activeModalWidget()
            if modal is None or not modal.isVisible():
                if tries:
                    QTimer.singleShot(100, lambda: answer(tries - 1))
                else:
                    self.result.setdefault("unanswered", []).append(what)
                return
            self.result.setdefault("answered", []).append(f"{what}: {modal.windowTitle()}")
            QTest.qWait(300)
            if text:
                field = self.focused()
                if isinstance(field, QLineEdit):
                    field.selectAll()
                self.type_text(text)
            for key in keys:
                self.press(key)
            # A completer's list may take the first Return: press it again while it stays.
            QTimer.singleShot(600, lambda: again(modal, 3))

        def again(modal: QWidget, tries: int) -> None:
            if not (tries and is_alive(modal)):  # answered: a static dialog is deleted
                return
            if modal.isVisible() and QApplication.activeModalWidget() is modal:
                self.press(keys[-1])
                QTimer.singleShot(600, lambda: again(modal, tries - 1))

        QTimer.singleShot(200, answer)

    def wait_task_shown(self, task_id: str) -> None:
        """Until the task view shows `task_id` with its data loaded."""
        self.wait(
            lambda: (
                self.w.task_view.task_id == task_id
                and self.w.task_view.data is not None
                and self.w.task_view.data.details["task_id"] == task_id
            ),
            f"task {task_id} to show",
        )

    def select_by_keys(self, task_id: str) -> None:
        """Ctrl+1 to the tree, then the arrow keys through it (opening folders and parents
        on the way) until the task is the current row. A reload of the tree (a reconcile or a
        run's end asks for one) can put the current row back under a key press: the walk
        then starts again once the window's work has ended."""
        for _ in range(3):
            if self._walk_tree_to(task_id):
                break
            self.wait(lambda: self.w.context.jobs.working == 0, "the work to end")
        else:
            raise Failed(f"task {task_id} is not in the tree")
        self.wait_task_shown(task_id)

    def _walk_tree_to(self, task_id: str) -> bool:
        """One walk from the top of the tree; False when a Down key left the row as it was."""
        self.press("Ctrl+1")
        tree, lineage = self.w.lineage.tree, self.w.lineage
        self.wait(tree.hasFocus, "the tree to take the keyboard")
        self.press("Home")
        for _ in range(200):
            if lineage.selected_task() == task_id:
                return True
            current = tree.currentIndex()
            if tree.model().hasChildren(current) and not tree.isExpanded(current):
                self.press("Right")
            else:
                before = current
                self.press("Down")
                if tree.currentIndex() == before:
                    return False
        return lineage.selected_task() == task_id

    def wait_dialog(self, attribute: str, before: Any, what: str) -> Any:
        view = self.w.task_view
        return self.wait(
            lambda: (
                getattr(view, attribute, None) is not before
                and getattr(view, attribute).isVisible()
                and getattr(view, attribute)
            ),
            what,
        )

    def open_continue(self) -> Any:
        """Click Continue on the shown task; returns the Continue dialog once it shows (a new
        one, not the one a previous Continue left behind)."""
        before = getattr(self.w.task_view, "continue_dialog", None)
        self.click_action(CONTINUE)
        return self.wait_dialog("continue_dialog", before, "the Continue dialog")

    def continue_through_dialog(self, task, commands: str, what: str):
        """Continue `task` with `commands` typed into the Continue dialog and submitted with
        its OK button; returns the continuation once it is listed."""
        self.select_task(task.id)
        known = {t.id for t in self.tasks()}
        dialog = self.open_continue()
        self.type_into(dialog.instructions_edit, commands)
        self.click(dialog.ok_button)
        return self.wait(lambda: next((t for t in self.tasks() if t.id not in known), None), what)

    # -- steps -----------------------------------------------------------------------------------

    def drop_folder(self, folder: Path) -> None:
        """Drag the folder from another X client onto the window, as from a file manager."""
        source = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.e2e.drag_source",
                str(SOURCE_POS[0]),
                str(SOURCE_POS[1]),
                str(folder),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert source.stdout is not None
            if source.stdout.readline().strip() != "ready":
                raise Failed("the drag source did not start")
            QTest.qWait(300)
            sx, sy = SOURCE_POS[0] + 100, SOURCE_POS[1] + 60
            target = self.w.mapToGlobal(QPoint(self.w.width() // 2, self.w.height() // 2))
            moves = subprocess.Popen(
                [
                    "xdotool",
                    "mousemove",
                    str(sx),
                    str(sy),
                    "mousedown",
                    "1",
                    "mousemove",
                    str(sx - 15),
                    str(sy + 10),
                    "sleep",
                    "0.3",
                    "mousemove",
                    str((sx + target.x()) // 2),
                    str(sy + 80),
                    "sleep",
                    "0.3",
                    "mousemove",
                    str(target.x()),
                    str(target.y()),
                    "sleep",
                    "0.3",
                    "mousemove",
                    str(target.x() + 10),
                    str(target.y() + 10),
                    "sleep",
                    "0.5",
                    "mouseup",
                    "1",
                ]
            )
            self.wait(lambda: moves.poll() is not None, "xdotool to finish the drag", 30)
            if moves.returncode != 0:
                raise Failed(f"xdotool exited with {moves.returncode}")
            dropped = source.stdout.readline().strip()
            self.result["drag_result"] = dropped
        finally:
            if source.poll() is None:
                source.terminate()
            source.wait(10)

    def first(self) -> None:
        w, repo = self.w, Path(self.args.repo)
        self.wait(lambda: w.lineage._loaded, "the task tree to load")
        # The first start shows the system check; Docker and the keyring are there.
        welcome = self.wait(
            lambda: w.system_check is not None and w.system_check.isVisible() and w.system_check,
            "the first-run system check",
        )
        self.wait(lambda: welcome.checked, "the checks to finish")
        self.result["checks"] = {c.id: c.state for c in welcome.checks}
        self.result["check_facts"] = {c.id: list(c.facts) for c in welcome.checks}
        self.shot("first-run-check")
        self.click(welcome.continue_button)
        self.wait(lambda: not welcome.isVisible(), "the system check to close")
        self.shot("started-empty")

        def new_task_dialog() -> Any:
            return (
                w.new_task_dialog is not None
                and w.new_task_dialog.isVisible()
                and w.new_task_dialog
            )

        self.drop_folder(repo)
        self.result["status_after_drop"] = w.statusBar().currentMessage()
        try:
            dialog = self.wait(new_task_dialog, "the New Task dialog after the drop", 20)
        except Failed as exc:
            # Kept in the result: in a whole-suite run, the first drop has been seen to end with
            # no New Task dialog although the drag source was told it was taken (cause not found
            # yet: the status bar after the drop, also kept, says whether the window saw it).
            self.result["first_drop_lost"] = str(exc)
            self.drop_folder(repo)
            dialog = self.wait(new_task_dialog, "the New Task dialog after a second drop")
        if [e.text() for e in dialog.title_edits] != [repo.name]:
            raise Failed(
                f"the dialog is not prefilled with the folder's name: "
                f"{[e.text() for e in dialog.title_edits]}"
            )
        dialog.engine_combo.setCurrentText("shell")
        dialog.instructions_edit.setPlainText("\n".join(TASK_COMMANDS))
        self.shot("new-task-dialog")
        self.click(dialog.ok_button)
        task = self.wait(lambda: len(self.tasks()) == 1 and self.tasks()[0], "the task")
        self.wait(lambda: w.task_view.task_id == task.id, "the new task to be selected")
        self.shot("task-created")

        self.click_action(START)
        self.wait_run(task.id, ("running", "succeeded", "failed"), "the run to start")
        self.show_tab(w.revisions_panel)
        self.shot("running")
        state = self.wait_run(
            task.id, ("succeeded", "failed", "interrupted", "cancelled"), "the run to end"
        )
        if state != "succeeded":
            raise Failed(f"the task's run {state}: {w.task_view.output.toPlainText()[-400:]}")
        self.wait(lambda: "succeeded" in w.task_view.state_label.text(), "the state label")
        cairn = w.context.cairn

        def timeline_complete():
            recorded = [r.id for r in cairn.revisions.all(task.id)]
            return len(recorded) >= 3 and self.timeline_ids() == recorded and recorded

        revisions = self.wait(timeline_complete, "the run's revisions to appear in the timeline")
        self.result["task"] = task.id
        self.result["task_revisions"] = len(revisions)
        self.shot("run-finished-revisions")

        # The diff of the first (base) and the last revision.
        panel = w.revisions_panel
        panel.select_revisions(revisions[0], revisions[-1])
        self.wait(lambda: panel.viewer.file_model.rowCount() >= 3, "the diff's file list")
        files = [
            panel.viewer.file_model.index(r, COL_PATH).data()
            for r in range(panel.viewer.file_model.rowCount())
        ]
        self.result["diff_files"] = files
        self.wait(lambda: panel.viewer.colouring_complete, "the diff's colours")
        self.shot("diff-two-revisions")

        # Fork from the first revision, through the timeline's "Fork from here".
        panel.select_revisions(revisions[0])
        self.click(panel.fork_button)
        fork_dialog = self.wait(
            lambda: (
                getattr(w.task_view, "fork_dialog", None) is not None
                and w.task_view.fork_dialog.isVisible()
                and w.task_view.fork_dialog
            ),
            "the Fork dialog",
        )
        if fork_dialog.revision() != revisions[0]:
            raise Failed(f"the Fork dialog picked {fork_dialog.revision()}, not the first revision")
        self.type_into(fork_dialog.instructions_edit, FORK_COMMAND)
        self.shot("fork-dialog")
        self.click(fork_dialog.ok_button)
        fork = self.wait(
            lambda: next((t for t in self.tasks() if t.parent_task_id == task.id), None), "the fork"
        )
        self.wait_run(fork.id, ("succeeded",), "the fork's run to succeed")
        self.select_task(fork.id)
        self.wait(lambda: "succeeded" in w.task_view.state_label.text(), "the fork's state")
        fork_ws = Path(w.context.cairn.tasks.workspace_of(fork).root)
        if (fork_ws / "greeting.txt").exists() or not (fork_ws / "fork.txt").is_file():
            raise Failed("the fork's workspace is not the first revision plus its own edit")
        self.result["fork"] = fork.id
        self.shot("fork-finished")
        sessions = w.sessions_panel
        self.show_tab(sessions)
        self.wait(lambda: sessions.sessions.rowCount() >= 2, "both sandboxes in the sessions tab")
        self.shot("sessions-and-snapshots")

        # Continue the fork with a risky command: approve it.
        cont, card = self.continue_with(fork, APPROVE_COMMAND, "approval-waiting")
        self.click(card.approve_button)
        self.wait_run(cont.id, ("succeeded",), "the approved run to succeed")
        cont_ws = Path(w.context.cairn.tasks.workspace_of(cont).root)
        if not (cont_ws / "pushed.txt").is_file():
            raise Failed("the approved command did not run")

        # Continue again with another risky command: deny it.
        self.select_task(cont.id)
        denied, card = self.continue_with(cont, DENY_COMMAND, "second-approval-waiting")
        self.click(card.deny_button)
        self.wait_run(denied.id, ("failed",), "the denied run to fail")
        if not (cont_ws / "app.py").is_file():
            raise Failed("the denied command ran")
        self.wait(lambda: w.approvals_panel.count == 0, "the queue to empty")
        self.select_task(denied.id)
        self.wait(lambda: "failed" in w.task_view.state_label.text(), "the denied run's state")
        self.show_tab(w.revisions_panel)
        self.shot("after-approve-and-deny")
        child = self.sandbox_removed_mid_run(task)
        self.by_keyboard(child)
        self.loop_as_one_group(task)
        self.sizes(task)
        self.dark_palette(task)
        self.result["state"] = self.state()

    def dark_palette(self, task) -> None:
        """The window under a dark palette, as the screen shows it: a disabled task action's
        icon is painted dimmer than an enabled one's (measured on the screenshot)."""
        w = self.w
        app = QApplication.instance()
        before = app.palette()
        back, fore = QColor("#2b2b2b"), QColor("#f0f0f0")
        dark = QPalette(fore, back)
        grey = QColor("#8d8d8d")
        for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive):
            for role in (
                QPalette.ColorRole.Window,
                QPalette.ColorRole.Base,
                QPalette.ColorRole.Button,
            ):
                dark.setColor(group, role, back)
            for role in (
                QPalette.ColorRole.WindowText,
                QPalette.ColorRole.Text,
                QPalette.ColorRole.ButtonText,
            ):
                dark.setColor(group, role, fore)
        for role in (
            QPalette.ColorRole.WindowText,
            QPalette.ColorRole.Text,
            QPalette.ColorRole.ButtonText,
        ):
            dark.setColor(QPalette.ColorGroup.Disabled, role, grey)
        app.setPalette(dark)
        try:
            self.select_task_quietly(task.id)
            buttons = w.task_view.buttons
            self.wait(
                lambda: (
                    any(a.isEnabled() for a in buttons.values())
                    and any(not a.isEnabled() for a in buttons.values())
                ),
                "task actions both enabled and disabled",
            )
            path = self.shot("dark-palette")
            image = QImage(str(path))
            screen = QGuiApplication.primaryScreen().geometry()
            scale = image.width() / max(1, screen.width())

            def brightness(action) -> float:
                button = w.task_view.toolbar.widgetForAction(action)
                corner = button.mapToGlobal(button.rect().topLeft())
                side = button.height()  # the icon sits at the button's left, within its height
                values = []
                for y in range(int(corner.y() * scale), int((corner.y() + side) * scale)):
                    for x in range(int(corner.x() * scale), int((corner.x() + side) * scale)):
                        c = image.pixelColor(x, y)
                        values.append(0.299 * c.red() + 0.587 * c.green() + 0.114 * c.blue())
                values.sort()
                return sum(values[-40:]) / 40  # the icon's strokes: its brightest pixels

            on = next(a for a in buttons.values() if a.isEnabled() and a.isVisible())
            off = next(a for a in buttons.values() if not a.isEnabled() and a.isVisible())
            self.result["dark_icons"] = {
                "enabled": [on.text(), brightness(on)],
                "disabled": [off.text(), brightness(off)],
                "screenshot": str(path),
            }
        finally:
            app.setPalette(before)

    def loop_as_one_group(self, task) -> None:
        """A step that rewrites one file over and over (a loop writing every half second) shows
        in the Revisions tab as one collapsible group whose rows name the step and the file."""
        w = self.w
        looped = self.continue_through_dialog(task, LOOP_COMMANDS, "the loop task")
        self.wait_run(looped.id, ("succeeded",), "the loop to end")
        self.select_task(looped.id)
        self.show_tab(w.revisions_panel)
        model = w.revisions_panel.model

        def burst_row():
            return next((r for r in range(model.rowCount()) if model.kind(r) == "burst"), None)

        row = self.wait(lambda: burst_row(), "the loop's revisions as one group")
        self.result["loop_group"] = model.data(model.index(row, 2))
        self.shot("revisions-loop-group")
        w.revisions_panel.open_group(row)

        def members() -> list[str]:
            # The rows may be rebuilt meanwhile (a checkpoint's marker arriving): found again.
            found = burst_row()
            if found is not None and not model.is_open(found):
                w.revisions_panel.open_group(found)
            return [
                model.data(model.index(r, 2))
                for r in range(model.rowCount())
                if model.kind(r) == "member"
            ]

        self.wait(lambda: len(members()) >= 3, "the group to open")
        self.result["loop_rows"] = members()
        self.shot("revisions-loop-open")

    def sandbox_removed_mid_run(self, task) -> None:
        """Continue with a long command, remove its container behind Cairn's back: within
        seconds the run shows interrupted, Resume is enabled, and no Docker text shows."""
        w = self.w
        child = self.continue_through_dialog(task, LONG_COMMAND, "the long continuation")
        self.wait_run(child.id, ("running",), "the long run to start")
        self.select_task(child.id)
        self.wait(lambda: "running" in w.task_view.state_label.text(), "the running state")
        ws = w.context.cairn.tasks.workspace_of(child)
        found = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=cairn.workspace={ws.id}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        containers = found.stdout.split()
        if not containers:
            raise Failed("the long run has no container to remove")
        started = time.monotonic()
        subprocess.run(["docker", "rm", "-f", *containers], capture_output=True, check=True)
        resume = w.task_view.buttons[RESUME]
        self.wait(
            lambda: (
                self.run_state(child.id) == "interrupted"
                and "interrupted" in w.task_view.state_label.text()
                and resume.isEnabled()
            ),
            "the run to show interrupted with Resume enabled",
        )
        self.result["noticed_removal_s"] = time.monotonic() - started
        shown = " ".join(
            [w.statusBar().currentMessage(), w.task_view.state_label.text(), resume.toolTip()]
        )
        self.result["raw_docker_text"] = any(
            raw in shown for raw in ("docker.errors", "APIError", "NotFound: 404", "404 Client")
        )
        self.shot("sandbox-removed-mid-run")
        return child

    def by_keyboard(self, interrupted) -> None:
        """Every task action from the keyboard alone: no mouse event from here on."""
        w, repo = self.w, Path(self.args.repo)
        used: list[str] = []
        self.result["keyboard_actions"] = used
        w.activateWindow()  # what a window manager does; the mouse stays still
        self.wait(lambda: QApplication.activeWindow() is w, "the window to be active")

        # Resume the run whose sandbox was removed, then Stop it: "stopping…" shows at once.
        self.select_by_keys(interrupted.id)
        self.key_action(RESUME)
        used.append("resume")
        self.wait_run(interrupted.id, ("running",), "the resumed run to be running")
        self.wait(lambda: "running" in w.task_view.state_label.text(), "the resumed run shown")
        stop_pressed = time.monotonic()
        self.key_action(STOP)
        used.append("stop")
        self.result["stop_pending"] = w.task_view.state_label.text()
        badges = []  # what the tree's row says until the run is recorded as cancelled

        def badge() -> str:
            index = w.lineage.model.index_of_task(interrupted.id).siblingAtColumn(1)
            return str(index.data()).split(" · ")[0]

        self.shot("keyboard-stopping")
        if "stopping…" not in self.result["stop_pending"]:
            raise Failed(f"Stop did not say stopping…: {self.result['stop_pending']!r}")
        seen: list[str] = []

        def cancelled() -> bool:
            state = self.run_state(interrupted.id) or ""
            if not seen or seen[-1] != state:
                seen.append(state)
            shown = badge()
            if not badges or badges[-1] != shown:
                badges.append(shown)
            return state == "cancelled"

        self.wait(cancelled, "the stopped run to be cancelled")
        self.result["stop_states"] = seen  # what the run went through on its way
        self.wait(lambda: badge() == "cancelled", "the tree to say cancelled")
        self.result["stop_badges"] = badges
        self.result["stop_took_s"] = round(time.monotonic() - stop_pressed, 1)
        self.wait(lambda: w.task_view.buttons[RESUME].toolTip() != "", "the buttons back")

        # New Task (Ctrl+N): the folder typed into the chooser, the task made with Ctrl+Enter.
        known = {t.id for t in self.tasks()}
        self.answer_next_modal("Return", text=str(repo), what="the folder chooser")
        self.press("Ctrl+N")
        used.append("new task")
        dialog = self.wait(
            lambda: (
                w.new_task_dialog is not None
                and w.new_task_dialog.isVisible()
                and w.new_task_dialog.title_edits[0].text() == repo.name
                and w.new_task_dialog
            ),
            "the New Task dialog from the keyboard",
        )
        self.wait(lambda: self.focused().window() is dialog, "the dialog to take the keyboard")
        dialog.title_edits[0].setFocus()
        dialog.title_edits[0].selectAll()
        self.type_text("typed task")
        self.press("Tab")  # the engine
        self.wait(lambda: self.focused() is dialog.engine_combo, "the engine box")
        for _ in range(5):
            if dialog.engine_combo.currentText() == "shell":
                break
            self.press("Up")
        dialog.instructions_edit.setFocus()
        self.type_text("\n".join(KEYBOARD_COMMANDS))
        self.shot("keyboard-new-task")
        self.press("Ctrl+Return")
        typed = self.wait(
            lambda: next((t for t in self.tasks() if t.id not in known), None), "the typed task"
        )
        self.wait(lambda: w.lineage.selected_task() == typed.id, "the typed task selected")
        self.wait(lambda: w.task_view.data is not None, "the typed task shown")

        # Rename (F2 in the tree) and Edit Instructions (Ctrl+I), before the first run.
        self.select_by_keys(typed.id)
        self.press("F2")
        used.append("rename")
        self.wait(
            lambda: (
                getattr(w.lineage, "rename_dialog", None) is not None
                and w.lineage.rename_dialog.isVisible()
            ),
            "the rename dialog",
        )
        self.press("Ctrl+A")
        self.type_text("typed and renamed")
        self.press("Return")
        cairn = w.context.cairn
        self.wait(lambda: cairn.tasks.get(typed.id).title == "typed and renamed", "the rename")
        self.press("Ctrl+I")
        used.append("edit instructions")
        self.wait(
            lambda: (
                getattr(w.lineage, "instructions_dialog", None) is not None
                and w.lineage.instructions_dialog.isVisible()
            ),
            "the instructions dialog",
        )
        self.press("Ctrl+A")
        self.type_text("\n".join(KEYBOARD_EDITED))
        self.press("Ctrl+Return")
        self.wait(
            lambda: cairn.tasks.get(typed.id).instructions.strip() == "\n".join(KEYBOARD_EDITED),
            "the edited instructions",
        )

        # Start (Ctrl+R), then Promote (Ctrl+Shift+B) and Export patch (Ctrl+Shift+E).
        self.wait(lambda: w.task_view.data.details["instructions"].startswith("echo"), "reload")
        self.key_action(START)
        used.append("start")
        self.wait_run(typed.id, ("succeeded",), "the typed task's run to succeed")
        self.wait(lambda: w.task_view.buttons[PROMOTE].isEnabled(), "Promote to be possible")
        self.answer_next_modal("Return", text=BRANCH, what="the branch name")
        self.key_action(PROMOTE)
        used.append("promote")
        self.wait(
            lambda: BRANCH in subprocess.run(
                ["git", "-C", str(repo), "branch", "--list", BRANCH],
                capture_output=True, text=True,
            ).stdout,
            "the promoted branch",
        )  # fmt: skip
        # Promote offers the next steps; Escape closes them and the window has the keys again.
        promoted = self.wait(
            lambda: next(
                (
                    t
                    for t in QApplication.topLevelWidgets()
                    if isinstance(t, PromotedDialog) and t.isVisible()
                ),
                None,
            ),
            "the promoted branch's next steps",
        )
        if BRANCH not in promoted.summary.text():
            raise Failed(f"the next steps do not name the branch: {promoted.summary.text()!r}")
        self.shot("promoted-next-steps")
        promoted.activateWindow()
        self.wait(lambda: QApplication.activeWindow() is promoted, "the next steps to have focus")
        self.press("Escape")
        self.wait(lambda: not is_alive(promoted) or not promoted.isVisible(), "them to close")
        w.activateWindow()  # what a window manager does when a dialog closes
        self.wait(lambda: QApplication.activeWindow() is w, "the window to have the keys again")
        patch = self.shots.parent / f"{self.args.phase}-typed.patch"
        patch.unlink(missing_ok=True)
        self.answer_next_modal("Return", text=str(patch), what="the patch file")
        self.key_action(EXPORT_PATCH)
        used.append("export patch")
        self.wait(lambda: patch.is_file() and patch.stat().st_size > 0, "the exported patch")
        if "typed" not in patch.read_text():
            raise Failed("the exported patch does not hold the run's change")
        self.result["exported_patch"] = str(patch)

        # Continue (Ctrl+Shift+C) and Fork (Ctrl+Shift+F), each submitted with Ctrl+Enter.
        known = {t.id for t in self.tasks()}
        before = getattr(w.task_view, "continue_dialog", None)
        self.key_action(CONTINUE)
        used.append("continue")
        dialog = self.wait_dialog("continue_dialog", before, "the Continue dialog")
        self.wait(lambda: self.focused() is dialog.instructions_edit, "the instructions field")
        self.type_text(KEYBOARD_CONTINUE)
        self.press("Ctrl+Return")
        continued = self.wait(
            lambda: next((t for t in self.tasks() if t.id not in known), None), "the continuation"
        )
        self.wait_run(continued.id, ("succeeded",), "the typed continuation to succeed")
        self.select_by_keys(typed.id)
        known = {t.id for t in self.tasks()}
        before = getattr(w.task_view, "fork_dialog", None)
        self.key_action(FORK)
        used.append("fork")
        dialog = self.wait_dialog("fork_dialog", before, "the Fork dialog")
        dialog.instructions_edit.setFocus()
        self.type_text(KEYBOARD_FORK)
        self.press("Ctrl+Return")
        forked = self.wait(
            lambda: next((t for t in self.tasks() if t.id not in known), None), "the typed fork"
        )
        self.wait_run(forked.id, ("succeeded",), "the typed fork to succeed")

        # Copy Task ID, Archive and Unarchive, Delete: on the fork.
        self.select_by_keys(forked.id)
        self.press("Ctrl+Shift+I")
        used.append("copy task id")
        self.wait(lambda: QGuiApplication.clipboard().text() == forked.id, "the copied id")
        if w.task_view.buttons[STOP].isEnabled():  # its sandbox is still up: let it go
            self.key_action(STOP)
            self.wait(lambda: not w.task_view.buttons[STOP].isEnabled(), "the sandbox to stop")
        self.wait(w.lineage.archive_action.isEnabled, "Archive to be possible")
        self.press("Ctrl+Shift+X")
        used.append("archive")
        ws = lambda: w.context.cairn.tasks.workspace_of(cairn.tasks.get(forked.id))  # noqa: E731
        self.wait(lambda: ws().state == "archived", "the fork to be archived")
        self.wait(lambda: w.lineage.archive_action.text() == "Unarchive Task", "Unarchive")
        self.shot("keyboard-archived")
        self.press("Ctrl+Shift+X")
        used.append("unarchive")
        self.wait(lambda: ws().state != "archived", "the fork to be back")
        self.press("Ctrl+1")
        self.press("Delete")
        used.append("delete")
        box = self.wait(
            lambda: (
                getattr(w.lineage, "confirm_box", None) is not None
                and w.lineage.confirm_box.isVisible()
                and w.lineage.confirm_box
            ),
            "the delete confirmation",
        )
        self.shot("keyboard-delete-confirm")
        self.press("Alt+D")
        self.wait(lambda: not box.isVisible(), "the confirmation to close")
        self.wait(lambda: all(t.id != forked.id for t in self.tasks()), "the fork to be deleted")

        # The command palette: Reconcile Runs, found by typing.
        self.press("Ctrl+Shift+P")
        palette = self.wait(
            lambda: (
                getattr(w, "command_palette", None) is not None
                and w.command_palette.isVisible()
                and w.command_palette
            ),
            "the command palette",
        )
        palette.activateWindow()
        self.type_text("reconcile")
        self.wait(lambda: palette.current_action() is w.reconcile_action, "Reconcile Runs")
        self.shot("keyboard-palette")
        self.press("Return")
        used.append("reconcile")
        self.wait(lambda: not palette.isVisible(), "the palette to close")
        self.result["task_actions_by_keyboard"] = sorted(
            {name for name in BUTTONS if name.replace("_", " ") in used}
        )
        self.result["typed_task"] = typed.id
        if self.result.get("unanswered"):
            raise Failed(f"no dialog came to answer: {self.result['unanswered']}")
        self.select_by_keys(typed.id)
        self.wait(lambda: w.context.jobs.working == 0, "the work to end")
        self.wait(lambda: w.activity_label.text() == "", "the status bar to clear")

    def sizes(self, task) -> None:
        """The window at 1024×700, 1366×768 and 1920×1080, showing the first task's diff;
        then back to where it was."""
        w = self.w
        self.select_task_quietly(task.id)
        w.tabs.setCurrentWidget(w.revisions_panel)
        self.wait(lambda: len(self.timeline_ids()) >= 2, "the first task's timeline")
        ids = self.timeline_ids()
        w.revisions_panel.select_revisions(ids[0], ids[-1])
        geometry = w.geometry()
        shots: dict[str, dict] = {}
        for width, height in SIZES:
            w.setGeometry(0, 0, width, height)
            self.wait(lambda n=width: w.width() == n, f"the window at {width}×{height}", 10)
            self.wait(lambda: w.revisions_panel.viewer.colouring_complete, "the diff's colours")
            QTest.qWait(400)
            path = self.shots / f"{self.args.phase}-size-{width}x{height}.png"
            frame = w.frameGeometry()
            QGuiApplication.primaryScreen().grabWindow(
                0, frame.x(), frame.y(), frame.width(), frame.height()
            ).save(str(path))
            shown = {
                name: bool(
                    w.task_view.toolbar.widgetForAction(a)
                    and w.task_view.toolbar.widgetForAction(a).isVisible()
                )
                for name, a in w.task_view.buttons.items()
            }
            shots[f"{width}x{height}"] = {
                "path": str(path),
                "buttons_shown": shown,
                "tree_state_share": w.lineage.tree.columnWidth(1)
                / max(1, w.lineage.tree.viewport().width()),
                "diff_height": w.revisions_panel.viewer.height(),
                "task_view_height": w.task_scroll.height(),
            }
        self.result["sizes"] = shots
        w.setGeometry(geometry)
        self.wait(lambda: w.geometry() == geometry, "the window back where it was", 10)

    def select_task_quietly(self, task_id: str) -> None:
        self.w.lineage.select_task(task_id)
        self.wait(lambda: self.w.task_view.task_id == task_id, f"task {task_id} to show")

    def continue_with(self, task, command: str, shot: str):
        """Continue the shown task with a risky command through the Continue dialog; returns
        the continuation and its approval card, once the card is in the queue."""
        w = self.w
        dialog = self.open_continue()
        self.type_into(dialog.instructions_edit, command)
        self.shot("continue-dialog")
        self.click(dialog.ok_button)
        child = self.wait(
            lambda: next((t for t in self.tasks() if t.parent_task_id == task.id), None),
            "the continuation",
        )
        card = self.wait_card(command)
        self.show_tab(w.approvals_panel)
        self.shot(shot)
        return child, card

    def wait_card(self, command: str):
        panel = self.w.approvals_panel
        return self.wait(
            # The whole line, or the one program in it the sandbox's supervisor asks about.
            lambda: next(
                (c for c in panel.cards.values() if c.approval.command.strip() in command), None
            ),
            f"an approval card for {command!r}",
        )

    def again(self) -> None:
        w = self.w
        self.wait(lambda: w.lineage._loaded, "the task tree to load")
        if self.args.folder:  # started as `cairn -platform xcb -style Fusion FOLDER`
            dialog = self.wait(
                lambda: (
                    w.new_task_dialog is not None
                    and w.new_task_dialog.isVisible()
                    and w.new_task_dialog
                ),
                "the New Task dialog for the folder given on the command line",
            )
            self.result["offered_folders"] = [str(f) for f in dialog.folders]
            self.result["style"] = QApplication.style().name()
            self.shot("relaunched-with-a-folder")
            self.press("Escape")  # not made: the state stays the first phase's
            self.wait(lambda: not dialog.isVisible(), "the New Task dialog to close")
        self.wait(lambda: w.task_view.data is not None, "the restored selection to show")
        self.wait(lambda: w.revisions_panel.model.rowCount() > 0, "the restored timeline")
        self.wait(lambda: w.approvals_panel.loaded, "the approvals queue")
        self.shot("relaunched")
        self.result["state"] = self.state()

    def state(self) -> dict:
        """What the window shows, to compare before quitting and after relaunching."""
        w, cairn = self.w, self.w.context.cairn
        model = w.lineage.model
        shown = {}
        for task in cairn.tasks.all():
            index = model.index_of_task(task.id)
            shown[task.id] = {
                "title": index.data() if index.isValid() else None,
                # What the tree says live must be what it reads back after a relaunch.
                "badges": index.siblingAtColumn(1).data() if index.isValid() else None,
                "parent": task.parent_task_id,
                "tree_parent": (
                    index.parent().data(ROLE_TASK_ID)
                    if index.isValid() and index.parent().isValid()
                    else None
                ),
                "revisions": len(cairn.revisions.all(task.id)),
                "run": self.run_state(task.id),
            }
        return {
            "tasks": shown,
            "selected": w.lineage.selected_task(),
            "task_view_title": w.task_view.title_label.text(),
            "timeline_rows": w.revisions_panel.model.rowCount(),
            "tab": w.tabs.currentIndex(),
            "approvals_pending": w.approvals_panel.count,
            "geometry": [w.x(), w.y(), w.width(), w.height()],
        }

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            (self.first if self.args.phase == "first" else self.again)()
            self.result["ok"] = True
        except BaseException as exc:
            self.result["ok"] = False
            self.result["error"] = f"{type(exc).__name__}: {exc}"
            self.result["traceback"] = traceback.format_exc()
            try:
                self.shot("FAILED")
            except Exception:
                pass
        Path(self.args.result).write_text(json.dumps(self.result, indent=2))
        # Quit as a person does: File ▸ Quit (the window saves its state on the way out).
        QTimer.singleShot(15_000, lambda: os._exit(3))  # a quit that hangs fails the test
        self.choose_menu(self.w.quit_action)

    def choose_menu(self, action) -> None:
        """Click the menu bar's menu holding the action, then the action in it."""
        bar = self.w.menuBar()
        menu = next(a.menu() for a in bar.actions() if a.menu() and action in a.menu().actions())
        QTest.mouseClick(
            bar,
            Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier,
            bar.actionGeometry(menu.menuAction()).center(),
        )
        self.wait(menu.isVisible, "the menu to open", 10)
        QTest.qWait(200)
        QTest.mouseClick(
            menu,
            Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier,
            menu.actionGeometry(action).center(),
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=("first", "again"))
    parser.add_argument("--repo", default="")
    parser.add_argument("--folder", default="", help="the folder the app is also given")
    parser.add_argument("--shots", required=True)
    parser.add_argument("--result", required=True)
    args, cairn_args = parser.parse_known_args()
    if args.folder:
        cairn_args = [*cairn_args, args.folder]

    class DrivenWindow(MainWindow):
        def __init__(self, *a: Any, **kw: Any):
            super().__init__(*a, **kw)
            if args.phase == "first":
                self.setGeometry(*WINDOW_RECT)
            # Kept on the window: Qt holds a bound method's object only weakly.
            self.scenario = Scenario(self, args)
            QTimer.singleShot(500, self.scenario.run)

    app_main.MainWindow = DrivenWindow
    return app_main.main(cairn_args)


if __name__ == "__main__":
    sys.exit(main())
