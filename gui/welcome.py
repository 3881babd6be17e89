"""The welcome dialog (first run) and System Check (Help menu): what this computer has of what
Cairn needs (Docker, a keyring, git, disk space, and each agent engine: found, signed in, its
endpoint reachable), and how to fix each missing piece.

Owns showing the checks, copying a fix, the buttons that fix an engine here (Sign In…, Choose
Binary…), remembering that the user has been welcomed, and the explicit, confirmed switch to the
unsafe host backend; the checks themselves are core.health's, reached through the facade in a job
(the GUI thread never waits on Docker, the keyring or the disk).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from core.health import ACTION_SEND_IMAGE, Check, summary
from core.signin import ACTION_CHOOSE_BINARY, ACTION_SIGN_IN
from gui.icons import icon
from gui.jobs import JobFailure
from gui.qt import (
    QDialog,
    QFileDialog,
    QFont,
    QFrame,
    QGuiApplication,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSettings,
    Qt,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)
from gui.settings.signin import SignInDialog

if TYPE_CHECKING:
    from gui.context import AppContext

WELCOMED_KEY = "app/welcomed"
BACKEND_SETTING = "defaults.backend"
HOST_BACKEND = "host"

STATE_ICONS = {"ok": "ok", "warning": "warning", "error": "error"}
STATE_WORDS = {"ok": "OK", "warning": "Warning", "error": "Problem"}

INTRO = (
    "Cairn runs coding agents in Docker sandboxes, keeps their secrets in your keyring and "
    "records every revision with git. This is what it found on this computer."
)
HOST_TEXT = (
    "Runs can start directly on this computer instead, with no isolation: the agent "
    "can read and change anything your user can."
)
HOST_BUTTON = "Use the host backend (unsafe: no isolation)"
CONFIRM_TITLE = "Run agents without isolation?"
CONFIRM_TEXT = (
    "With the host backend, agents run as you, directly on this computer: no sandbox, "
    "no network limits, and access to every file your user can read or change.\n\n"
    "Use it only for agents and repositories you trust. You can switch back to Docker "
    "in Settings once it works."
)


def should_welcome(settings: QSettings) -> bool:
    """Whether the welcome dialog is still due (the user never pressed Continue in it)."""
    return not settings.value(WELCOMED_KEY, False, type=bool)


def confirm_host_backend(parent: QWidget | None) -> bool:
    """Ask before giving up isolation; No is the default answer."""
    answer = QMessageBox.warning(
        parent,
        CONFIRM_TITLE,
        CONFIRM_TEXT,
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        QMessageBox.StandardButton.No,
    )
    return answer == QMessageBox.StandardButton.Yes


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def binary_setting(engine: str) -> str:
    return f"engines.{engine}.binary"


class CheckRow(QFrame):
    """One check: its state as an icon and a word, what was found, and the fix."""

    sig_copied = Signal(str)
    """The fix's command was copied to the clipboard."""

    sig_sign_in = Signal(str)
    """Sign In… was pressed on an engine's row: the engine."""

    sig_choose_binary = Signal(str)
    """Choose Binary… was pressed on an engine's row: the engine."""

    sig_send_image = Signal(str)
    """Send Image was pressed on a sandbox host's row: the host."""

    def __init__(self, check: Check, parent: QWidget | None = None):
        super().__init__(parent)
        self.check = check
        self.setObjectName(f"check-{check.id}")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        state = check.state if check.state in STATE_ICONS else "error"
        row = QHBoxLayout(self)
        self.icon_label = QLabel(self)
        self.icon_label.setPixmap(icon(STATE_ICONS[state]).pixmap(24, 24))
        self.icon_label.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.icon_label.setAccessibleName(STATE_WORDS[state])
        row.addWidget(self.icon_label)
        text = QVBoxLayout()
        self.title_label = QLabel(f"{check.title} — {STATE_WORDS[state]}", self)
        bold = QFont(self.title_label.font())
        bold.setBold(True)
        self.title_label.setFont(bold)
        text.addWidget(self.title_label)
        detail = "\n".join(check.facts) if check.facts else _sentence(check.detail)
        self.detail_label = QLabel(detail, self)
        self.detail_label.setWordWrap(True)
        self.detail_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        text.addWidget(self.detail_label)
        self.fix_label = QLabel(self)
        self.fix_label.setWordWrap(True)
        self.fix_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        if check.problems:
            self.fix_label.setText("\n".join(self._problem_lines(check)))
        elif check.fix:
            self.fix_label.setText(f"To fix, {check.fix}")
        else:
            self.fix_label.hide()
        text.addWidget(self.fix_label)
        self.note_label = QLabel(check.note or "", self)
        self.note_label.setObjectName("checkNote")
        self.note_label.setWordWrap(True)
        self.note_label.setVisible(bool(check.note))
        text.addWidget(self.note_label)
        row.addLayout(text, 1)
        buttons = QVBoxLayout()
        self.command = check.command or next((p.command for p in check.problems if p.command), None)
        self.copy_button = QPushButton("Copy fix", self)
        self.copy_button.setToolTip(self.command or "")
        self.copy_button.clicked.connect(self.copy_fix)
        self.copy_button.setVisible(bool(self.command))
        buttons.addWidget(self.copy_button)
        actions = check.actions()
        self.sign_in_button = QPushButton("Sign In…", self)
        self.sign_in_button.setObjectName(f"signIn-{check.engine}")
        self.sign_in_button.clicked.connect(lambda: self.sig_sign_in.emit(check.engine or ""))
        self.sign_in_button.setVisible(bool(check.engine) and ACTION_SIGN_IN in actions)
        buttons.addWidget(self.sign_in_button)
        self.choose_button = QPushButton("Choose Binary…", self)
        self.choose_button.setObjectName(f"chooseBinary-{check.engine}")
        self.choose_button.clicked.connect(lambda: self.sig_choose_binary.emit(check.engine or ""))
        self.choose_button.setVisible(bool(check.engine) and ACTION_CHOOSE_BINARY in actions)
        buttons.addWidget(self.choose_button)
        self.send_image_button = QPushButton("Send Image", self)
        self.send_image_button.setObjectName(f"sendImage-{check.host}")
        self.send_image_button.setToolTip(
            "Copy the sandbox image from the local Docker engine to this host "
            "(docker save | load; never a registry)"
        )
        self.send_image_button.clicked.connect(lambda: self.sig_send_image.emit(check.host or ""))
        self.send_image_button.setVisible(bool(check.host) and ACTION_SEND_IMAGE in actions)
        buttons.addWidget(self.send_image_button)
        buttons.addStretch(1)
        row.addLayout(buttons)

    @staticmethod
    def _problem_lines(check: Check) -> list[str]:
        lines = []
        for p in check.problems:
            line = f"• {_sentence(p.what)}"
            if p.fix:
                line += f". To fix, {p.fix}"
            lines.append(line)
        return lines

    def copy_fix(self) -> None:
        if self.command:
            QGuiApplication.clipboard().setText(self.command)
            self.sig_copied.emit(self.command)


class WelcomeDialog(QDialog):
    """First-run welcome and Help ▸ System Check: the checks, Check Again, Continue, and the
    host backend when Docker cannot be used. Open it with `open()` (it never blocks)."""

    sig_checked = Signal(object)
    """The checks finished: the list of core.health.Check values."""

    sig_backend_changed = Signal(str)
    """The default sandbox backend was changed here (to "host"): check the sandboxes again."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.checks: list[Check] = []
        self.rows: list[CheckRow] = []
        self.checked = False
        self.sign_in_dialog: SignInDialog | None = None
        self._first_run = should_welcome(context.settings)
        self.setObjectName("welcomeDialog")
        self.setWindowTitle("Welcome to Cairn" if self._first_run else "System Check")
        self.setMinimumWidth(560)
        layout = QVBoxLayout(self)

        self.intro_label = QLabel(INTRO, self)
        self.intro_label.setWordWrap(True)
        layout.addWidget(self.intro_label)

        # The rows scroll when they are taller than the screen (an engine row with its problems
        # and fixes takes many lines), so Continue always stays in view.
        self.rows_scroll = QScrollArea(self)
        self.rows_scroll.setObjectName("welcomeRows")
        self.rows_scroll.setWidgetResizable(True)
        self.rows_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.rows_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.rows_widget = QWidget(self.rows_scroll)
        self.rows_layout = QVBoxLayout(self.rows_widget)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows_scroll.setWidget(self.rows_widget)
        layout.addWidget(self.rows_scroll, 1)

        self.status_label = QLabel("Checking this computer…", self)
        self.status_label.setObjectName("welcomeStatus")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status_label)

        self.host_box = QFrame(self)
        self.host_box.setObjectName("hostBackendBox")
        self.host_box.setFrameShape(QFrame.Shape.StyledPanel)
        host_row = QHBoxLayout(self.host_box)
        host_icon = QLabel(self.host_box)
        host_icon.setPixmap(icon("warning").pixmap(24, 24))
        host_icon.setAlignment(Qt.AlignmentFlag.AlignTop)
        host_row.addWidget(host_icon)
        host_text = QVBoxLayout()
        self.host_label = QLabel(HOST_TEXT, self.host_box)
        self.host_label.setWordWrap(True)
        host_text.addWidget(self.host_label)
        self.host_button = QPushButton(HOST_BUTTON, self.host_box)
        self.host_button.setObjectName("useHostBackend")
        self.host_button.clicked.connect(self.use_host_backend)
        host_text.addWidget(self.host_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.host_result = QLabel(self.host_box)
        self.host_result.setWordWrap(True)
        self.host_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.host_result.hide()
        host_text.addWidget(self.host_result)
        host_row.addLayout(host_text, 1)
        self.host_box.hide()
        layout.addWidget(self.host_box)

        buttons = QHBoxLayout()
        self.check_again_button = QPushButton("Check Again", self)
        self.check_again_button.clicked.connect(self.run_checks)
        buttons.addWidget(self.check_again_button)
        buttons.addStretch(1)
        self.continue_button = QPushButton("Continue", self)
        self.continue_button.setDefault(True)
        self.continue_button.setEnabled(False)
        self.continue_button.clicked.connect(self.continue_)
        buttons.addWidget(self.continue_button)
        layout.addLayout(buttons)

        self.run_checks()

    # -- the checks ----------------------------------------------------------------------------

    def run_checks(self) -> None:
        """Run the checks in a job; the rows are replaced when the answer comes back."""
        cairn = self.context.cairn
        self.check_again_button.setEnabled(False)
        self.status_label.setText("Checking this computer…")
        self.context.jobs.job(
            lambda: cairn.health_checks(),
            key=f"welcome-checks-{id(self)}",
            what="check this computer",
            parent=self,
        ).success(self.show_checks).failure(self._checks_failed).finished(
            self._checks_finished
        ).run()

    def show_checks(self, checks: Sequence[Check]) -> None:
        self.checks = list(checks)
        for row in self.rows:
            self.rows_layout.removeWidget(row)
            row.deleteLater()
        self.rows = []
        for check in self.checks:
            row = CheckRow(check, self.rows_widget)
            row.sig_copied.connect(self._copied)
            row.sig_sign_in.connect(self.open_sign_in)
            row.sig_choose_binary.connect(self.choose_binary)
            row.sig_send_image.connect(self.send_image)
            self.rows_layout.addWidget(row)
            row.show()  # at once: a child added to a shown widget is otherwise shown later
            self.rows.append(row)
        result = summary(self.checks)
        self.status_label.setText(result.headline)
        self.host_box.setVisible(not result.sandboxes)
        QTimer.singleShot(0, self.fit_to_content)  # once the new rows are shown
        self.sig_checked.emit(self.checks)

    def fit_to_content(self) -> None:
        """Grow to the height the wrapped texts need at the current width (a dialog's own size
        does not follow its rows' height-for-width when they change after it is shown)."""
        layout = self.layout()
        if layout is None:
            return
        layout.activate()
        rows = self.rows_layout.totalHeightForWidth(self.rows_scroll.viewport().width())
        others = layout.totalHeightForWidth(self.width()) - self.rows_scroll.sizeHint().height()
        needed = others + rows + 2 * self.rows_scroll.frameWidth()
        screen = self.screen()
        if screen is not None:  # never taller than the screen: the rows scroll instead
            needed = min(needed, int(screen.availableGeometry().height() * 0.9))
        if needed > self.height():
            self.resize(self.width(), needed)
        if screen is not None:  # grown downwards: moved up as far as it must to stay on screen
            avail, frame = screen.availableGeometry(), self.frameGeometry()
            if frame.bottom() > avail.bottom():
                self.move(self.x(), max(avail.top(), avail.bottom() - frame.height()))

    def _checks_failed(self, failure: JobFailure) -> None:
        self.status_label.setText(f"{failure.sentence()}. You can still continue.")

    def _checks_finished(self) -> None:
        self.checked = True
        self.check_again_button.setEnabled(True)
        self.continue_button.setEnabled(True)  # whatever was found, Cairn is usable to browse

    def row(self, check_id: str) -> CheckRow | None:
        return next((r for r in self.rows if r.check.id == check_id), None)

    def _copied(self, command: str) -> None:
        self.context.sig_status.emit(f"Copied to the clipboard: {command}")

    # -- fixing an engine ----------------------------------------------------------------------

    def open_sign_in(self, engine: str) -> None:
        """The Sign In dialog for the engine; the checks run again once it is signed in."""
        dialog = SignInDialog(self.context, engine, self)
        dialog.sig_signed_in.connect(lambda *_: self.run_checks())
        self.sign_in_dialog = dialog
        dialog.open()

    def pick_binary(self, engine: str) -> str:
        """Ask for the engine's program (a separate method, so tests can answer it)."""
        chosen, _filter = QFileDialog.getOpenFileName(
            self, f"Choose the {engine} program", str(Path.home())
        )
        return chosen

    def choose_binary(self, engine: str) -> None:
        """Set `engines.<engine>.binary` to a program the person picks, then check again."""
        chosen = self.pick_binary(engine)
        if not chosen:
            return
        cairn, key = self.context.cairn, binary_setting(engine)
        self.context.jobs.job(
            lambda: cairn.settings.set(key, chosen),
            write=True,
            what=f"set {key}",
            parent=self,
        ).success(lambda _stored: self.run_checks()).failure(self._binary_failed).run()

    def _binary_failed(self, failure: JobFailure) -> None:
        self.status_label.setText(f"{failure.sentence()}.")

    # -- the sandbox host -----------------------------------------------------------------------

    def send_image(self, host: str) -> None:
        """Send the sandbox image to the host from the local Docker engine, then check again."""
        cairn = self.context.cairn
        row = self.row("host")
        if row is not None:
            row.send_image_button.setEnabled(False)
        self.status_label.setText(f"Sending the sandbox image to {host}…")
        self.context.jobs.job(
            lambda: cairn.hosts.send_image(host),
            what=f"send the sandbox image to {host}",
            parent=self,
        ).success(lambda _id: self.run_checks()).failure(self._send_failed).run()

    def _send_failed(self, failure: JobFailure) -> None:
        self.status_label.setText(f"{failure.sentence()}.")
        row = self.row("host")
        if row is not None:
            row.send_image_button.setEnabled(True)

    # -- the host backend ----------------------------------------------------------------------

    def use_host_backend(self) -> None:
        """After a confirmation, make the unsafe host backend the default for new sandboxes."""
        if not confirm_host_backend(self):
            return
        cairn = self.context.cairn
        self.host_button.setEnabled(False)

        def switch() -> str:
            cairn.settings.set(BACKEND_SETTING, HOST_BACKEND)
            cairn.reset_sandboxes()  # the next sandbox is made by the backend just chosen
            return HOST_BACKEND

        self.context.jobs.job(
            switch, write=True, what="switch to the host backend", parent=self
        ).success(self._host_chosen).failure(self._host_failed).run()

    def _host_chosen(self, backend: str) -> None:
        self.host_result.setText(
            "Runs now start on this computer with no isolation (the host "
            "backend). Switch back to Docker in Settings once it works."
        )
        self.host_result.show()
        self.sig_backend_changed.emit(backend)

    def _host_failed(self, failure: JobFailure) -> None:
        self.host_result.setText(failure.sentence())
        self.host_result.show()
        self.host_button.setEnabled(True)

    # -- leaving -------------------------------------------------------------------------------

    def continue_(self) -> None:
        """Remember that the user has been welcomed, and close."""
        self.context.settings.setValue(WELCOMED_KEY, True)
        self.context.settings.sync()
        self.accept()
