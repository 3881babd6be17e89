"""The selected task: its title, engine and instructions, its run's output (live while the run
goes on), and the actions Start, Continue, Fork, Stop, Resume, Promote to branch, Export patch,
and Resume on Host… (in the menus and the palette: Resume on a sandbox host chosen in a dialog).

Owns showing one task and offering its actions. Which action is possible, and why not, comes
from gui.task_view.actions; the reads are gui.task_view.data's and every facade call goes
through a job; output arrives from the run followers (gui.task_view.follow) through the event
bridge and is drawn by gui.task_view.output_view.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.events import RUN_OUTPUT, Event
from core.models import Run, Task
from core.runs.ladder import NeedsChoice
from gui.dialogs import ContinueDialog, ForkDialog, ResumeOnHostDialog, ask_resume_choice
from gui.errors import describe_error
from gui.icons import icon
from gui.jobs import JobFailure
from gui.promote_result import show_promoted
from gui.qt import (
    QAction,
    QFileDialog,
    QFrame,
    QInputDialog,
    QLabel,
    QMessageBox,
    QSizePolicy,
    QStackedWidget,
    Qt,
    QTimer,
    QToolBar,
    QVBoxLayout,
    QWidget,
    Signal,
)
from gui.run_state import FOLLOWABLE, IN_FLIGHT, STATE_COLOURS, run_state_label
from gui.task_view.actions import (
    BUTTONS,
    CONTINUE,
    EXPORT_PATCH,
    FORK,
    LABELS,
    PROMOTE,
    RESUME,
    RESUME_ON_HOST,
    START,
    STOP,
    STOPPING,
    button_states,
    pending_state,
    resume_on_host_state,
)
from gui.task_view.data import TaskViewData, run_output, task_view
from gui.task_view.output_view import OutputView

if TYPE_CHECKING:
    from gui.context import AppContext

log = logging.getLogger(__name__)

EMPTY_STATE_TEXT = "Drop a repository folder here to start a task"
EMPTY_STATE_HINT = "or choose File ▸ New Task…; tasks you made are in the tree on the left."
ICONS = {
    START: "start",
    CONTINUE: "continue",
    FORK: "fork",
    STOP: "stop",
    RESUME: "resume",
    PROMOTE: "promote",
    EXPORT_PATCH: "export",
}
TASK_VIEW_KEY = "task-view"


class TaskView(QWidget):
    """Shows one task (`set_task`) and offers its actions."""

    sig_task_created = Signal(str)
    """An action made a new task (continue, fork): its id, to select it."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.task_id: str | None = None
        self.data: TaskViewData | None = None
        self._busy: dict[str, str] = {}  # task id -> the action in progress on it
        self._shown_run: str | None = None
        self._build()
        self._reload_timer = QTimer(self)
        self._reload_timer.setSingleShot(True)
        self._reload_timer.setInterval(250)
        self._reload_timer.timeout.connect(self.reload)
        context.events.sig_event.connect(self._on_event)
        context.sig_sandbox_problem.connect(lambda _problem: self._update_buttons())
        context.followers.sig_run_ended.connect(self._on_run_ended)
        self._show_empty()

    # -- building --------------------------------------------------------------------------------

    def _build(self) -> None:
        self.stack = QStackedWidget(self)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.stack)

        self.empty = QWidget(self)
        empty_layout = QVBoxLayout(self.empty)
        self.empty_label = QLabel(EMPTY_STATE_TEXT, self.empty)
        self.empty_label.setObjectName("emptyState")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        font = self.empty_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        self.empty_label.setFont(font)
        hint = QLabel(EMPTY_STATE_HINT, self.empty)
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        hint.setWordWrap(True)
        hint.setEnabled(False)  # the palette's disabled text: quieter, in light and dark
        empty_layout.addStretch(1)
        empty_layout.addWidget(self.empty_label)
        empty_layout.addWidget(hint)
        empty_layout.addStretch(2)
        self.stack.addWidget(self.empty)

        self.page = QWidget(self)
        layout = QVBoxLayout(self.page)
        self.title_label = QLabel(self.page)
        self.title_label.setObjectName("taskTitle")
        self.title_label.setWordWrap(True)
        self.title_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        font = self.title_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.4)
        font.setBold(True)
        self.title_label.setFont(font)
        layout.addWidget(self.title_label)
        self.facts_label = QLabel(self.page)
        self.facts_label.setObjectName("taskFacts")
        self.facts_label.setWordWrap(True)
        self.facts_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.facts_label)
        self.state_label = QLabel(self.page)
        self.state_label.setObjectName("runState")
        layout.addWidget(self.state_label)

        # A tool bar rather than a row of buttons: on a narrow window the actions that do not
        # fit move into its overflow menu instead of widening the window.
        self.toolbar = QToolBar(self.page)
        self.toolbar.setObjectName("taskActions")
        self.toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.buttons: dict[str, QAction] = {}
        for name in BUTTONS:
            action = QAction(icon(ICONS[name]), LABELS[name], self)
            action.setObjectName(f"action_{name}")
            action.triggered.connect(lambda _checked=False, n=name: self.trigger(n))
            self.buttons[name] = action
            self.toolbar.addAction(action)
        layout.addWidget(self.toolbar)
        # Not on the toolbar: the window puts it in the Task menu and the tree's context menu
        # (and so the palette), beside Resume.
        self.resume_on_host_action = QAction(icon(ICONS[RESUME]), LABELS[RESUME_ON_HOST], self)
        self.resume_on_host_action.setObjectName(f"action_{RESUME_ON_HOST}")
        self.resume_on_host_action.triggered.connect(lambda _checked=False: self.resume_on_host())

        self.instructions_title = QLabel("<b>Instructions</b>", self.page)
        layout.addWidget(self.instructions_title)
        self.instructions = QLabel(self.page)
        self.instructions.setObjectName("taskInstructions")
        self.instructions.setWordWrap(True)
        self.instructions.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.instructions.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        layout.addWidget(self.instructions)
        line = QFrame(self.page)
        line.setFrameShape(QFrame.Shape.HLine)
        line.setFrameShadow(QFrame.Shadow.Sunken)
        layout.addWidget(line)
        self.output_title = QLabel("<b>Run output</b>", self.page)
        layout.addWidget(self.output_title)
        self.output = OutputView(self.page)
        layout.addWidget(self.output, 1)
        self.stack.addWidget(self.page)

    def refresh_icons(self) -> None:
        for name, button in self.buttons.items():
            button.setIcon(icon(ICONS[name]))
        self.resume_on_host_action.setIcon(icon(ICONS[RESUME]))

    # -- showing a task --------------------------------------------------------------------------

    def set_task(self, task_id: str | None) -> None:
        if task_id == self.task_id:
            return
        self.task_id = task_id
        self.data = None
        self._shown_run = None
        if task_id is None:
            self.context.jobs.supersede(TASK_VIEW_KEY)
            self._show_empty()
            return
        self.title_label.setText("…")
        self.facts_label.setText("Loading the task…")
        self.state_label.setText("")
        self.instructions.setText("")
        self.output.reset()
        self.stack.setCurrentWidget(self.page)
        self._update_buttons()
        self.reload()

    def reload(self) -> None:
        """Load the shown task again (after an event or an action); the latest request wins."""
        task_id = self.task_id
        if task_id is None:
            return
        cairn = self.context.cairn

        def work() -> TaskViewData:
            # A run in flight is shown from its follower's transcript; an ended one from its log.
            data = task_view(cairn, task_id, with_output=False)
            if data.run is not None and data.run.state not in IN_FLIGHT:
                data.output = run_output(cairn, data.run.id)
            return data

        self.context.jobs.job(work, key=TASK_VIEW_KEY, what="load the task", parent=self).success(
            self._show
        ).run()

    def _show_empty(self) -> None:
        self.stack.setCurrentWidget(self.empty)

    def _show(self, data: TaskViewData) -> None:
        if data.details["task_id"] != self.task_id:
            return
        self.data = data
        d = data.details
        self.title_label.setText(d["title"])
        origin = {"continue": "continued from", "fork": "forked from"}.get(d.get("source") or "")
        parent = f" · {origin} {d['parent_task_id']}" if origin and d.get("parent_task_id") else ""
        revisions = len(d.get("revisions") or [])
        self.facts_label.setText(
            f"{d['engine']} · {d['task_id']}{parent}\n{d['source_path']} · workspace "
            f"{d['state']}{'' if d.get('workspace_present', True) else ' (folder missing)'} · "
            f"{revisions} revision{'s' if revisions != 1 else ''} · "
            f"{len(d.get('snapshots') or [])} snapshot(s)"
        )
        self.facts_label.setToolTip(d.get("workspace_root") or "")
        self.instructions.setText(d.get("instructions") or "(none)")
        self._show_run_state()
        self._show_output(data)
        self._update_buttons()

    def _show_run_state(self) -> None:
        run = self.data.run if self.data else None
        self.output.setPlaceholderText(output_placeholder(run))
        pending = pending_state(
            self._busy.get(self.task_id or ""),
            run_in_flight=run is not None and run.state in IN_FLIGHT,
        )
        if pending is not None:  # said at once; the run's state follows when the core is done
            state, waiting_for = pending
            self.state_label.setText(
                f"{f'Run {run.id}: ' if run else ''}<b>{state}</b> — {html.escape(waiting_for)}"
            )
            return
        if run is None:
            self.state_label.setText("Not started yet.")
            return
        colour = STATE_COLOURS.get(run.state, "")
        note = f" — {run.note}" if run.note else ""
        style = f' style="color:{colour}"' if colour else ""
        self.state_label.setText(
            f"Run {run.id}: <b{style}>{run_state_label(run.state)}</b>{html.escape(note)}"
        )

    def _show_output(self, data: TaskViewData) -> None:
        run = data.run
        if run is None:
            self._shown_run = None
            self.output.reset()
            return
        if run.id == self._shown_run and data.output is None:
            return  # already showing it live
        self._shown_run = run.id
        if data.output is not None:
            self.output.reset(data.output)
            # An ended run's last step (or open tool call) takes the run's own exit status.
            self.output.finish(run.exit_code if run.state not in FOLLOWABLE else None)
            return
        transcript = self.context.followers.transcript(run.id)
        self.output.reset(transcript or "")
        if not self.context.followers.is_following(run.id) and run.state in FOLLOWABLE:
            self.context.followers.follow(run.id)

    def _update_buttons(self) -> None:
        data = self.data
        states = button_states(
            data.details if data else None,
            data.run if data else None,
            lineage_run=data.lineage_run if data else None,
            busy=self._busy.get(self.task_id or ""),
            sandbox_problem=self.context.sandbox_problem,
        )
        for name, (enabled, why) in states.items():
            button = self.buttons[name]
            button.setEnabled(enabled)
            button.setToolTip(why or LABELS[name].rstrip("…"))
        enabled, why = resume_on_host_state(
            data.details if data else None,
            data.run if data else None,
            hosts=data.hosts if data else (),
            lineage_run=data.lineage_run if data else None,
            busy=self._busy.get(self.task_id or ""),
        )
        self.resume_on_host_action.setEnabled(enabled)
        self.resume_on_host_action.setToolTip(
            why or "Resume the interrupted run on another sandbox host"
        )

    # -- events ----------------------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if self.task_id is None:
            return
        if event.kind == RUN_OUTPUT:
            if event.subject == self._shown_run:
                if event.payload.get("backlog"):
                    self.output.reset(event.payload.get("text", ""))
                else:
                    self.output.add_chunk(
                        event.payload.get("stream", "stdout"), event.payload.get("text", "")
                    )
            return
        payload = event.payload
        mine = (
            payload.get("task_id") == self.task_id
            or (
                self.data is not None
                and event.subject
                in (
                    self.data.details.get("workspace_id"),
                    self.data.run.id if self.data.run else None,
                )
            )
            or event.kind in ("run.state", "run.resumed")
        )  # lineage runs change buttons too
        if mine:
            self._reload_timer.start()

    def _on_run_ended(self, run_id: str, run: Run) -> None:
        if run_id == self._shown_run:
            self.output.finish(run.exit_code)
            self._reload_timer.start()

    # -- actions ---------------------------------------------------------------------------------

    def trigger(self, name: str) -> None:
        """Run an action on the shown task (as its button does)."""
        data = self.data
        if data is None or self.task_id is None or not self.buttons[name].isEnabled():
            return
        handler: Callable[[dict], None] = {
            START: self._start,
            CONTINUE: self._continue,
            FORK: self._fork,
            STOP: self._stop,
            RESUME: self._resume,
            PROMOTE: self._promote,
            EXPORT_PATCH: self._export_patch,
        }[name]
        handler(data.details)

    def _act(
        self,
        task_id: str,
        what: str,
        work: Callable[[], Any],
        *,
        done: str,
        on_success: Callable[[Any], None] | None = None,
        busy: str | None = None,
    ) -> None:
        """A facade call on the write thread; the task's buttons wait while it runs."""
        self._busy[task_id] = busy or what
        self._update_buttons()
        if task_id == self.task_id:
            self._show_run_state()

        def finished() -> None:
            self._busy.pop(task_id, None)
            self._update_buttons()
            self.reload()

        def succeeded(result: Any) -> None:
            self.context.sig_status.emit(done)
            if on_success is not None:
                on_success(result)

        self.context.jobs.job(work, write=True, what=what, parent=self).success(succeeded).failure(
            self.report_failure
        ).finished(finished).run()

    def report_failure(self, failure: JobFailure) -> None:
        """An action failed: a message box says what and why (and the status bar keeps it)."""
        self.context.sig_status.emit(failure.sentence())
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Cairn",
            failure.sentence()[:1].upper() + failure.sentence()[1:],
            QMessageBox.StandardButton.Ok,
            self,
        )
        box.setObjectName("actionFailed")
        if failure.details:
            box.setDetailedText(failure.details)
        box.open()

    def _start(self, d: dict) -> None:
        cairn, task_id = self.context.cairn, d["task_id"]
        instructions = d.get("instructions") or ""
        if d["engine"] == "shell":  # the instructions are its commands, one per line
            commands = [line for line in instructions.splitlines() if line.strip()]
            work = lambda: cairn.runs.start(task_id, commands=commands)  # noqa: E731
        else:
            work = lambda: cairn.runs.start(task_id, prompt=instructions)  # noqa: E731
        self._act(
            task_id,
            "start the run",
            work,
            done=f"Started a run of {d['title']}",
            busy="starting the run",
            on_success=self._follow,
        )

    def _follow(self, run: Run | None) -> None:
        """Follow a run an action started (its output then shows here live)."""
        if run is not None and run.state in FOLLOWABLE:
            self.context.followers.follow(run.id)

    def _continue(self, d: dict) -> None:
        dialog = ContinueDialog(d["title"], self, engine=d.get("engine"))
        cairn, task_id = self.context.cairn, d["task_id"]

        def accepted() -> None:
            message = dialog.message()
            self._act(
                task_id,
                "continue the task",
                lambda: cairn.tasks.continue_from(task_id, message),
                done=f"Continued {d['title']}",
                busy="continuing",
                on_success=self._created,
            )

        dialog.accepted.connect(accepted)
        self.continue_dialog = dialog
        dialog.open()

    def fork_from(self, task_id: str, revision_id: str) -> bool:
        """Fork the shown task from a given revision ("Fork from here" in the timeline); False
        (with the reason in the status bar) when forking it is not possible now."""
        button = self.buttons[FORK]
        if task_id != self.task_id or self.data is None:
            return False
        if not button.isEnabled():
            self.context.sig_status.emit(f"Cannot fork now: {button.toolTip()}")
            return False
        self._fork(self.data.details, at_revision=revision_id)
        return True

    def _fork(self, d: dict, at_revision: str | None = None) -> None:
        dialog = ForkDialog(
            d["title"],
            d.get("revisions") or [],
            self,
            at_revision=at_revision,
            engine=d.get("engine"),
            hosts=self.data.hosts if self.data else (),
            default_host=self.data.default_host if self.data else None,
        )
        cairn, task_id = self.context.cairn, d["task_id"]

        def accepted() -> None:
            revision, message, host = dialog.revision(), dialog.message(), dialog.host()
            self._act(
                task_id,
                "fork the task",
                lambda: cairn.tasks.fork(task_id, message, at_revision=revision, host=host),
                done=f"Forked {d['title']} from revision {str(revision)[:10]}",
                busy="forking",
                on_success=self._created,
            )

        dialog.accepted.connect(accepted)
        self.fork_dialog = dialog
        dialog.open()

    def _created(self, result: tuple[Task, Run | None]) -> None:
        """Continue and fork return (the new task, its run or None)."""
        task, run = result
        self.sig_task_created.emit(task.id)
        self._follow(run)

    def _stop(self, d: dict) -> None:
        cairn, task_id, title = self.context.cairn, d["task_id"], d["title"]
        self._act(
            task_id,
            "stop the run",
            lambda: cairn.runs.stop(task_id),
            done=f"Stopped {title}",
            busy=STOPPING,
        )

    def resume_on_host(self) -> ResumeOnHostDialog | None:
        """Resume on Host…: choose the sandbox host (the task's own preselected), then resume
        there as Resume does; the hosts were read with the task's data, in its job."""
        data = self.data
        if data is None or not self.resume_on_host_action.isEnabled():
            return None
        d = data.details
        dialog = ResumeOnHostDialog(
            d["title"],
            data.hosts,
            d.get("host"),
            self,
            states=self._host_states(data),
            default=data.default_host,
        )

        def accepted() -> None:
            host = dialog.host()
            if host is not None:
                self._resume(d, host=host)

        dialog.accepted.connect(accepted)
        self.resume_on_host_dialog = dialog
        dialog.open()
        return dialog

    def _host_states(self, data: TaskViewData) -> dict[str, str]:
        """What the last status check said of the hosts that did not answer (the default
        host's problem, the others'); nothing is said of the rest."""
        problems = dict(self.context.host_problems)
        if data.default_host is not None and self.context.sandbox_problem:
            problems[data.default_host] = self.context.sandbox_problem
        return {name: f"did not answer at the last check: {why}" for name, why in problems.items()}

    def _resume(self, d: dict, choice: str | None = None, *, host: str | None = None) -> None:
        """Resume the task's interrupted run; with `host`, on that sandbox host (its sandbox is
        made again there from the same snapshot when it is another)."""
        cairn, task_id, title = self.context.cairn, d["task_id"], d["title"]
        self._busy[task_id] = "resuming"
        self._update_buttons()

        def finished() -> None:
            self._busy.pop(task_id, None)
            self._update_buttons()
            self.reload()

        def failed(failure: JobFailure) -> None:
            if isinstance(failure.error, NeedsChoice) and choice is None:
                picked = ask_resume_choice(self, describe_error(failure.error))
                if picked is not None:
                    self._resume(d, picked, host=host)
                return
            self.report_failure(failure)

        def succeeded(result: tuple[Run, Any]) -> None:
            self.context.sig_status.emit(f"Resumed {title}" + (f" on {host}" if host else ""))
            self._follow(result[0])

        def work() -> tuple[Run, Any]:
            if host is None:
                return cairn.runs.resume(task_id, choice=choice)
            return cairn.runs.resume(task_id, choice=choice, host=host)

        self.context.jobs.job(
            work,
            write=True,
            what="resume the run",
            parent=self,
        ).success(succeeded).failure(failed).finished(finished).run()

    def _promote(self, d: dict) -> None:
        cairn, task_id, title = self.context.cairn, d["task_id"], d["title"]
        branch, ok = QInputDialog.getText(
            self,
            "Promote to branch",
            f"A new branch in {d['source_path']} will hold the task's latest revision.\n"
            "Branch name:",
            text=d.get("branch") or "",
        )
        branch = branch.strip()
        if not ok or not branch:
            return
        self._act(
            task_id,
            "promote to a branch",
            lambda: cairn.artifacts.promote_to_branch(task_id, branch),
            done=f"Promoted {title} to the branch {branch}",
            # What people do next with a branch: open it, copy its name, push it.
            on_success=lambda promoted: show_promoted(self.context, self, promoted),
            busy="promoting",
        )

    def _export_patch(self, d: dict) -> None:
        cairn, task_id, title = self.context.cairn, d["task_id"], d["title"]
        path, _filter = QFileDialog.getSaveFileName(
            self, "Export patch", f"{title}.patch", "Patches (*.patch *.diff)"
        )
        if not path:
            return

        def work() -> None:
            patch = cairn.artifacts.export_patch(task_id)
            with open(path, "wb") as out:
                out.write(patch)

        self._act(
            task_id,
            "export the patch",
            work,
            done=f"Exported the patch of {title} to {path}",
            busy="exporting",
        )


def output_placeholder(run: Run | None) -> str:
    """What the empty output area says: why it is empty."""
    if run is None:
        return "No run yet. Start runs the instructions in the task's sandbox."
    if run.state in FOLLOWABLE:
        return "Waiting for the run's output…"
    return "The run printed nothing."
