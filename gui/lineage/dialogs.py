"""The dialog that edits a task's instructions before its first run.

Owns the editing only; the facade refuses what it cannot take (a task that has run, blank text)
and the panel shows that. Renaming uses a plain input dialog.
"""

from __future__ import annotations

from gui.dialogs.task import submit_on_ctrl_enter
from gui.lineage.data import TaskRow
from gui.qt import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

SHELL_NOTE = "The shell engine runs these as commands, one per line."
AGENT_NOTE = "The agent gets these as its first message."


class InstructionsDialog(QDialog):
    def __init__(self, title: str, row: TaskRow | None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("editInstructions")
        self.setWindowTitle(f"Instructions of {title}")
        layout = QVBoxLayout(self)
        shell = row is None or row.engine == "shell"
        layout.addWidget(QLabel(SHELL_NOTE if shell else AGENT_NOTE, self))
        self.edit = QPlainTextEdit(self)
        self.edit.setPlainText(row.instructions if row else "")
        layout.addWidget(self.edit)
        self.reason = QLabel(self)
        self.reason.setEnabled(False)
        layout.addWidget(self.reason)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel, self
        )
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Save)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        submit_on_ctrl_enter(self, self.ok_button)
        self.edit.textChanged.connect(self._update_ok)
        self._update_ok()
        self.resize(520, 300)

    def _update_ok(self) -> None:
        blank = not self.edit.toPlainText().strip()
        why = "the instructions cannot be blank" if blank else ""
        self.ok_button.setEnabled(not blank)
        self.ok_button.setToolTip(why)
        self.reason.setText(why)

    def text(self) -> str:
        return self.edit.toPlainText()
