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
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QWidget

import gui.main as app_main
from gui.diff.file_list import COL_PATH
from gui.lineage.model import ROLE_TASK_ID
from gui.main_window import MainWindow
from gui.task_view.actions import CONTINUE, RESUME, START

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
APPROVE_COMMAND = "git push --force origin main || true; echo pushed > pushed.txt"
DENY_COMMAND = "sudo rm -f app.py"
LONG_COMMAND = "sleep 120"


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
                    f"{self.w.statusBar().currentMessage()!r}"
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
        edit.setFocus()
        QTest.keyClicks(edit, text)

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
        self.wait(
            lambda: (
                self.w.task_view.task_id == task_id
                and self.w.task_view.data is not None
                and self.w.task_view.data.details["task_id"] == task_id
            ),
            f"task {task_id} to show",
        )

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

        self.drop_folder(repo)
        dialog = self.wait(
            lambda: (
                w.new_task_dialog is not None
                and w.new_task_dialog.isVisible()
                and w.new_task_dialog
            ),
            "the New Task dialog after the drop",
        )
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
        self.sandbox_removed_mid_run(task)
        self.result["state"] = self.state()

    def sandbox_removed_mid_run(self, task) -> None:
        """Continue with a long command, remove its container behind Cairn's back: within
        seconds the run shows interrupted, Resume is enabled, and no Docker text shows."""
        w = self.w
        self.select_task(task.id)
        known = {t.id for t in self.tasks()}
        before = getattr(w.task_view, "continue_dialog", None)
        self.click_action(CONTINUE)
        dialog = self.wait(
            lambda: (
                w.task_view.continue_dialog is not before
                and w.task_view.continue_dialog.isVisible()
                and w.task_view.continue_dialog
            ),
            "the Continue dialog",
        )
        self.type_into(dialog.instructions_edit, LONG_COMMAND)
        self.click(dialog.ok_button)
        child = self.wait(
            lambda: next((t for t in self.tasks() if t.id not in known), None),
            "the long continuation",
        )
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

    def continue_with(self, task, command: str, shot: str):
        """Continue the shown task with a risky command through the Continue dialog; returns
        the continuation and its approval card, once the card is in the queue."""
        w = self.w
        before = getattr(w.task_view, "continue_dialog", None)
        self.click_action(CONTINUE)
        dialog = self.wait(
            lambda: (
                w.task_view.continue_dialog is not before
                and w.task_view.continue_dialog.isVisible()
                and w.task_view.continue_dialog
            ),
            "the Continue dialog",
        )
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
            lambda: next((c for c in panel.cards.values() if c.approval.command == command), None),
            f"an approval card for {command!r}",
        )

    def again(self) -> None:
        w = self.w
        self.wait(lambda: w.lineage._loaded, "the task tree to load")
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
    parser.add_argument("--shots", required=True)
    parser.add_argument("--result", required=True)
    args, cairn_args = parser.parse_known_args()

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
