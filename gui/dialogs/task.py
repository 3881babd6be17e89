"""The dialogs that make a task: New Task (one or several folders), Continue, and Fork (with a
revision picker).

Owns collecting what the user wants; making the facade calls is the caller's (through jobs).
Dialogs are opened with `open()` (window-modal, not blocking the event loop).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from gui.dialogs.data import (
    DEFAULT_ENGINES,
    NewTaskRequest,
    instructions_placeholder,
    revision_label,
)
from gui.elide import ElidedLabel
from gui.qt import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QEvent,
    QFormLayout,
    QKeyEvent,
    QLabel,
    QLineEdit,
    QObject,
    QPlainTextEdit,
    QPushButton,
    Qt,
    QVBoxLayout,
    QWidget,
)

SHELL_HINT = "The shell engine runs these as commands, one per line."
AGENT_HINT = "What the agent should do: this becomes its first prompt."


class _CtrlEnterSubmits(QObject):
    """Presses OK on Ctrl+Enter in a text field that would otherwise take it as a new line."""

    def __init__(self, dialog: QDialog, ok_button: QPushButton):
        super().__init__(dialog)
        self.ok_button = ok_button

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            event.type() in (QEvent.Type.KeyPress, QEvent.Type.ShortcutOverride)
            and isinstance(event, QKeyEvent)
            and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
            and event.modifiers() & Qt.KeyboardModifier.ControlModifier
        ):
            if event.type() == QEvent.Type.KeyPress and self.ok_button.isEnabled():
                self.ok_button.click()
            event.accept()
            return True
        return False


def submit_on_ctrl_enter(dialog: QDialog, ok_button: QPushButton) -> None:
    """Ctrl+Enter presses OK from anywhere in the dialog (Enter makes a new line in the
    instructions), when OK is enabled."""
    submitter = _CtrlEnterSubmits(dialog, ok_button)
    for child in dialog.findChildren(QWidget):
        child.installEventFilter(submitter)


def _instructions_edit(parent: QWidget, placeholder: str) -> QPlainTextEdit:
    edit = QPlainTextEdit(parent)
    edit.setPlaceholderText(placeholder)
    edit.setTabChangesFocus(True)
    edit.setMinimumHeight(90)
    return edit


class NewTaskDialog(QDialog):
    """A task for each folder: a title per folder, one engine and one set of instructions."""

    def __init__(
        self,
        folders: list[Path],
        engines: tuple[str, ...] = DEFAULT_ENGINES,
        parent: QWidget | None = None,
        *,
        default_engine: str | None = None,
        policies: Mapping[str, str] | None = None,
        hosts: Sequence[str] = (),
        default_host: str | None = None,
    ):
        """`policies`: each engine's default network for a new task, in words; `hosts`: the
        sandbox hosts to choose from (none: the settings' default, with no choice shown)."""
        super().__init__(parent)
        self.folders = list(folders)
        many = len(self.folders) > 1
        self.setWindowTitle(f"New Tasks ({len(self.folders)} folders)" if many else "New Task")
        self.setObjectName("newTaskDialog")
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.title_edits: list[QLineEdit] = []
        for folder in self.folders:
            edit = QLineEdit(folder.name or str(folder), self)
            edit.setToolTip(str(folder))
            edit.textChanged.connect(self._update_ok)
            self.title_edits.append(edit)
            label = QLabel(f"Title for {folder.name}:" if many else "Title:", self)
            label.setToolTip(str(folder))
            form.addRow(label, edit)
        if not many:
            # A long path keeps its start and its folder's name; the tooltip has it whole.
            where = ElidedLabel(self, str(self.folders[0]))
            where.setObjectName("newTaskFolder")
            where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            form.insertRow(0, "Folder:", where)
        self.engine_combo = QComboBox(self)
        self.engine_combo.addItems(list(engines))
        if default_engine in engines:  # the settings' defaults.engine, when the caller knows it
            self.engine_combo.setCurrentText(default_engine)
        self.engine_combo.currentTextChanged.connect(self._engine_changed)
        form.addRow("Engine:", self.engine_combo)
        self.policies = dict(policies or {})
        self.network_label = QLabel(self)
        self.network_label.setObjectName("newTaskNetwork")
        self.network_label.setWordWrap(True)
        self.network_label.setToolTip(
            "The sandbox's network policy for the new task; change it later with "
            "`cairnctl policy` or the defaults in Settings"
        )
        form.addRow("Network:", self.network_label)
        self.host_combo = QComboBox(self)
        self.host_combo.setObjectName("newTaskHost")
        self.host_combo.setToolTip(
            "Where the task's sandbox runs: the local Docker engine, your rootless Podman, "
            "or a host added in the settings (test one in Settings ▸ General)"
        )
        self.host_combo.addItems(list(hosts))
        if default_host is not None and default_host in hosts:
            self.host_combo.setCurrentText(default_host)
        if hosts:
            form.addRow("Sandbox host:", self.host_combo)
        else:
            self.host_combo.hide()
        self.instructions_edit = _instructions_edit(self, AGENT_HINT)
        form.addRow("Instructions:", self.instructions_edit)
        self.instructions_edit.textChanged.connect(
            lambda: self._update_ok() if hasattr(self, "ok_button") else None
        )
        self.hint = QLabel(self)
        self.hint.setWordWrap(True)
        form.addRow("", self.hint)
        layout.addLayout(form)
        if many:
            layout.addWidget(
                QLabel(
                    f"{len(self.folders)} tasks will be made, one per folder, "
                    "with the same engine and instructions.",
                    self,
                )
            )
        self.ok_reason = QLabel(self)
        self.ok_reason.setObjectName("createRefusal")
        self.ok_reason.setWordWrap(True)
        self.ok_reason.setEnabled(False)  # the palette's quieter text
        layout.addWidget(self.ok_reason)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("Create Tasks" if many else "Create Task")
        # One step from a folder to a running task, as Continue and Fork already are.
        self.start_button = QPushButton("Create and &Start All" if many else "Create and &Start")
        self.start_button.setObjectName("createAndStart")
        # Connected before the box's own handler, which accepts the dialog.
        self.start_button.clicked.connect(self._create_and_start)
        self.buttons.addButton(self.start_button, QDialogButtonBox.ButtonRole.AcceptRole)
        self.start_button.setAutoDefault(False)
        self.ok_button.setDefault(True)
        self.start_after = False
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        submit_on_ctrl_enter(self, self.ok_button)
        self._engine_changed(self.engine_combo.currentText())
        self._update_ok()
        self.resize(520, self.sizeHint().height())

    def _create_and_start(self) -> None:
        # Set before the box's accepted signal reaches accept(): requests() then carry it.
        self.start_after = True

    def _engine_changed(self, engine: str) -> None:
        shell = engine == "shell"
        self.instructions_edit.setPlaceholderText(instructions_placeholder(engine))
        self.hint.setText(SHELL_HINT if shell else AGENT_HINT)
        self.network_label.setText(self.policies.get(engine, "the settings' default"))
        if hasattr(self, "ok_button"):
            self._update_ok()

    def _update_ok(self) -> None:
        why = self.refusal()
        self.ok_button.setEnabled(why is None)
        self.ok_button.setToolTip(why or "make the task; start it later with Start")
        self.start_button.setEnabled(why is None)
        self.start_button.setToolTip(why or "make the task and start its first run at once")
        self.ok_reason.setText(why or "")

    def refusal(self) -> str | None:
        """Why Create cannot make the tasks now, or None. A task made here runs its
        instructions when started, so none means a task that can never start."""
        if any(not e.text().strip() for e in self.title_edits):
            return "every task needs a title"
        if not self.instructions_edit.toPlainText().strip():
            if self.engine_combo.currentText() == "shell":
                return "the shell engine runs the instructions as commands: give at least one"
            return "say what the agent should do: the instructions are its first message"
        return None

    def requests(self) -> list[NewTaskRequest]:
        engine = self.engine_combo.currentText()
        instructions = self.instructions_edit.toPlainText().strip()
        host = self.host_combo.currentText() or None
        return [
            NewTaskRequest(
                folder, edit.text().strip(), engine, instructions, self.start_after, host
            )
            for folder, edit in zip(self.folders, self.title_edits)
        ]


class ContinueDialog(QDialog):
    """Continue a task: a child that keeps working in the same workspace and session."""

    def __init__(
        self, task_title: str, parent: QWidget | None = None, *, engine: str | None = None
    ):
        """`engine`: the task's, for the example the empty instructions show."""
        super().__init__(parent)
        self.setWindowTitle(f"Continue “{task_title}”")
        self.setObjectName("continueDialog")
        self.main_layout = QVBoxLayout(self)
        layout = self.main_layout
        self.intro = QLabel(
            "A new task continues in this task's workspace, resuming the "
            "agent's own session. What should it do next?",
            self,
        )
        layout.addWidget(self.intro)
        self.instructions_edit = _instructions_edit(
            self, instructions_placeholder(engine, follow_up=True)
        )
        layout.addWidget(self.instructions_edit)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("Continue")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        submit_on_ctrl_enter(self, self.ok_button)
        self.instructions_edit.textChanged.connect(self._update_ok)
        self._update_ok()

    def _update_ok(self) -> None:
        empty = not self.message()
        self.ok_button.setEnabled(not empty)
        self.ok_button.setToolTip("say what the continuation should do" if empty else "")

    def message(self) -> str:
        return self.instructions_edit.toPlainText().strip()


class ForkDialog(ContinueDialog):
    """Fork a task from one of its revisions: its own workspace, sandbox and session."""

    def __init__(
        self,
        task_title: str,
        revisions: list[dict],
        parent: QWidget | None = None,
        *,
        at_revision: str | None = None,
        engine: str | None = None,
        hosts: Sequence[str] = (),
        default_host: str | None = None,
    ):
        """`hosts`: the sandbox hosts the fork's sandbox may run on (none: the settings'
        default, with no choice shown)."""
        super().__init__(task_title, parent, engine=engine)
        self.setWindowTitle(f"Fork “{task_title}”")
        self.setObjectName("forkDialog")
        self.ok_button.setText("Fork")
        self.intro.setText(
            "A new task starts from the chosen revision in a workspace of its own; "
            "this task is not touched. What should the fork do?"
        )
        self.revision_combo = QComboBox(self)
        self.revisions = list(revisions)
        for i, revision in enumerate(self.revisions):
            self.revision_combo.addItem(
                revision_label(revision, i == len(self.revisions) - 1), revision.get("id")
            )
        if self.revisions:
            ids = [r.get("id") for r in self.revisions]
            self.revision_combo.setCurrentIndex(
                ids.index(at_revision) if at_revision in ids else len(self.revisions) - 1
            )
        row = QFormLayout()
        row.addRow("From revision:", self.revision_combo)
        self.host_combo = QComboBox(self)
        self.host_combo.setObjectName("forkHost")
        self.host_combo.setToolTip("Where the fork's own sandbox runs")
        self.host_combo.addItems(list(hosts))
        if default_host is not None and default_host in hosts:
            self.host_combo.setCurrentText(default_host)
        if hosts:
            row.addRow("Sandbox host:", self.host_combo)
        else:
            self.host_combo.hide()
        self.main_layout.insertLayout(1, row)
        self._update_ok()

    def _update_ok(self) -> None:
        super()._update_ok()
        combo = getattr(self, "revision_combo", None)
        if combo is not None and combo.count() == 0:
            self.ok_button.setEnabled(False)
            self.ok_button.setToolTip("the task has no revisions to fork from")

    def revision(self) -> str | None:
        return self.revision_combo.currentData()

    def host(self) -> str | None:
        """The chosen sandbox host (None: the settings' default)."""
        return self.host_combo.currentText() or None
