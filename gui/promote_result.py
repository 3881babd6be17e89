"""After Promote to branch: what to do next with the new branch. Open the repository in the file
manager, copy the branch's name, and, when the repository has a remote, copy the `git push`
command that publishes it (Cairn itself never pushes).

Owns the result dialog and the read of the repository's remotes it needs (`next_steps`, no Qt,
run in a job: the GUI thread does not wait on git). Promoting is core.artifacts'.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gui.qt import (
    QDesktopServices,
    QDialog,
    QDialogButtonBox,
    QGuiApplication,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    Qt,
    QUrl,
    QVBoxLayout,
    QWidget,
)

if TYPE_CHECKING:
    from gui.context import AppContext

PREFERRED_REMOTE = "origin"


@dataclass(frozen=True)
class NextSteps:
    """What the dialog offers for one promoted branch."""

    repository: str
    branch: str
    commit: str
    remote: str | None  # the remote a push would go to: origin when there is one, else the first
    push_command: str | None


def remotes_of(repository: str) -> list[str]:
    """The repository's remotes (`git remote`, read-only); none when git cannot say."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        proc = subprocess.run(
            ["git", "-C", repository, "-c", "core.fsmonitor=false", "remote"],
            capture_output=True,
            text=True,
            env=env,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return proc.stdout.split() if proc.returncode == 0 else []


def next_steps(promoted: Any) -> NextSteps:
    """The next steps for a `PromotedBranch` (or its JSON). Runs git: call it in a job."""
    data = promoted if isinstance(promoted, dict) else promoted.to_json()
    repository, branch = str(data["repository"]), str(data["branch"])
    remotes = remotes_of(repository)
    remote = PREFERRED_REMOTE if PREFERRED_REMOTE in remotes else (remotes[0] if remotes else None)
    push = shlex.join(["git", "-C", repository, "push", "-u", remote, branch]) if remote else None
    return NextSteps(repository, branch, str(data.get("commit") or ""), remote, push)


class PromotedDialog(QDialog):
    """The branch was made: its name and commit, and the next steps as buttons."""

    def __init__(self, steps: NextSteps, parent: QWidget | None = None):
        super().__init__(parent)
        self.steps = steps
        self.setWindowTitle("Promoted to a branch")
        self.setObjectName("promotedDialog")
        layout = QVBoxLayout(self)
        self.summary = QLabel(
            f"The branch <b>{_escape(steps.branch)}</b> is in {_escape(steps.repository)}"
            + (f" (commit {_escape(steps.commit[:12])})." if steps.commit else "."),
            self,
        )
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.summary)

        row = QHBoxLayout()
        self.open_button = QPushButton("Open in File Manager", self)
        self.open_button.setToolTip(steps.repository)
        self.open_button.clicked.connect(self.open_repository)
        self.copy_branch_button = QPushButton("Copy Branch Name", self)
        self.copy_branch_button.clicked.connect(self.copy_branch)
        row.addWidget(self.open_button)
        row.addWidget(self.copy_branch_button)
        row.addStretch(1)
        layout.addLayout(row)

        self.push_field: QLineEdit | None = None
        self.copy_push_button: QPushButton | None = None
        if steps.push_command:
            layout.addWidget(
                QLabel(f"To publish it on the remote {_escape(steps.remote or '')}:", self)
            )
            push_row = QHBoxLayout()
            self.push_field = QLineEdit(steps.push_command, self)
            self.push_field.setObjectName("pushCommand")
            self.push_field.setReadOnly(True)
            self.push_field.setCursorPosition(0)
            self.copy_push_button = QPushButton("Copy Command", self)
            self.copy_push_button.clicked.connect(self.copy_push)
            push_row.addWidget(self.push_field, 1)
            push_row.addWidget(self.copy_push_button)
            layout.addLayout(push_row)
        else:
            self.no_remote = QLabel("The repository has no remote to push the branch to.", self)
            self.no_remote.setEnabled(False)  # the palette's quieter text
            layout.addWidget(self.no_remote)

        self.status = QLabel("", self)
        self.status.setObjectName("promotedStatus")
        layout.addWidget(self.status)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def open_repository(self) -> None:
        # The file manager is another process: Qt hands the URL over without waiting for it.
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(self.steps.repository)):
            self.status.setText(f"No file manager opened {self.steps.repository}.")

    def copy_branch(self) -> None:
        QGuiApplication.clipboard().setText(self.steps.branch)
        self.status.setText("Branch name copied.")

    def copy_push(self) -> None:
        if self.steps.push_command:
            QGuiApplication.clipboard().setText(self.steps.push_command)
            self.status.setText("Push command copied.")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def show_promoted(context: AppContext, parent: QWidget, promoted: Any) -> None:
    """Read the next steps in a job, then show the dialog over `parent` (not modal)."""
    context.jobs.job(
        lambda: next_steps(promoted), what="read the repository's remotes", parent=parent
    ).success(lambda steps: _open(parent, steps)).run()


def _open(parent: QWidget, steps: NextSteps) -> None:
    dialog = PromotedDialog(steps, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
