"""The questions an action asks on its way: how a resume goes on when the workspace was edited
outside Cairn, which sandbox host Resume on Host… resumes on, and how to unlock the OS keyring
when it is locked or missing.

Owns the wording and collecting the answer; acting on it is the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.runs.ladder import ON_TOP, RESTORE_INTO_NEW
from gui.qt import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    Qt,
    QVBoxLayout,
    QWidget,
)


def ask_resume_choice(parent: QWidget, message: str) -> str | None:
    """The workspace was edited outside Cairn: continue on top of the edits, or restore the
    checkpoint into a new workspace. None when the user cancels."""
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Question)
    box.setWindowTitle("The workspace changed")
    box.setText("The workspace was edited outside Cairn since the run's checkpoint.")
    box.setInformativeText(f"{message}\n\nThe edits are kept as an external revision either way.")
    on_top = box.addButton("Continue on top of the edits", QMessageBox.ButtonRole.AcceptRole)
    restore = box.addButton(
        "Restore the checkpoint into a new workspace", QMessageBox.ButtonRole.AcceptRole
    )
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    clicked = box.clickedButton()
    return ON_TOP if clicked is on_top else RESTORE_INTO_NEW if clicked is restore else None


MOVE_NOTE = "Another host gets a new sandbox for the task, re-created there from the same snapshot."


class ResumeOnHostDialog(QDialog):
    """Resume a task's interrupted run on a sandbox host of the person's choice: every host,
    the task's own marked and preselected, each with what was last known of it."""

    def __init__(
        self,
        task_title: str,
        hosts: Sequence[str],
        current: str | None,
        parent: QWidget | None = None,
        *,
        states: Mapping[str, str] | None = None,
        default: str | None = None,
    ):
        """`current`: the host the task's sandbox runs on now; `states`: a host's last known
        state in words (a host not in it is shown by name alone); `default`: the settings'
        default host, preselected when the task's own host is no longer in the settings."""
        super().__init__(parent)
        self.setWindowTitle(f"Resume “{task_title}” on Host")
        self.setObjectName("resumeOnHostDialog")
        states = states or {}
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Resume the interrupted run on this sandbox host:", self))
        self.host_list = QListWidget(self)
        self.host_list.setObjectName("resumeHostList")
        if current and current not in hosts:
            # Shown so the person sees where the sandbox was, but not to be chosen: Cairn no
            # longer knows how to reach a host removed from the settings.
            gone = QListWidgetItem(
                f"{current} (the task's host now) — no longer in Settings ▸ General ▸ "
                "Sandbox host: add it again there to resume on it",
                self.host_list,
            )
            gone.setFlags(Qt.ItemFlag.NoItemFlags)
        for name in hosts:
            text = f"{name} (the task's host now)" if name == current else name
            if states.get(name):
                text += f" — {states[name]}"
            item = QListWidgetItem(text, self.host_list)
            item.setData(Qt.ItemDataRole.UserRole, name)
            if name == current or (current not in hosts and name == default):
                self.host_list.setCurrentItem(item)
        if self.host_list.currentItem() is None:
            for row in range(self.host_list.count()):
                if self.host_list.item(row).flags() & Qt.ItemFlag.ItemIsEnabled:
                    self.host_list.setCurrentRow(row)
                    break
        layout.addWidget(self.host_list)
        self.note = QLabel(MOVE_NOTE, self)
        self.note.setObjectName("resumeHostNote")
        self.note.setWordWrap(True)
        layout.addWidget(self.note)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("Resume")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.host_list.itemDoubleClicked.connect(
            lambda _item: self.accept() if self.host() is not None else None
        )
        # Resume is for a host Cairn can reach: none while nothing of the settings is chosen.
        self.host_list.currentItemChanged.connect(
            lambda *_: self.ok_button.setEnabled(self.host() is not None)
        )
        self.ok_button.setEnabled(self.host() is not None)
        layout.addWidget(self.buttons)
        self.host_list.setFocus()

    def host(self) -> str | None:
        """The chosen host's name."""
        item = self.host_list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None


class KeyringDialog(QDialog):
    """The OS keyring is locked or missing: how to unlock it, and a way to try again."""

    def __init__(self, message: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Unlock your keyring")
        self.setObjectName("keyringDialog")
        layout = QVBoxLayout(self)
        head = QLabel(
            "<b>Cairn needs your desktop keyring to hand secrets to the sandbox.</b>", self
        )
        layout.addWidget(head)
        self.message_label = QLabel(message, self)
        self.message_label.setWordWrap(True)
        self.message_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.message_label)
        steps = QLabel(
            "To unlock it: open your desktop's password manager (GNOME: “Passwords and Keys”; "
            "KDE: KWallet Manager) and unlock the login keyring, or log out and back in so the "
            "keyring unlocks with your session. Without a desktop session, run Cairn inside one "
            "(for example with dbus-run-session and gnome-keyring-daemon --unlock).",
            self,
        )
        steps.setWordWrap(True)
        layout.addWidget(steps)
        self.buttons = QDialogButtonBox(self)
        self.retry_button = QPushButton("Try Again", self)
        self.buttons.addButton(self.retry_button, QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
