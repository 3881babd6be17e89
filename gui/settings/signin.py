"""The Sign In dialog: an agent engine, the kind of credential (a subscription's long-lived token
or an API key), where a person gets one, and a password field; Enter signs in.

Owns asking for the value and sending it to the keyring in a write job; the field is emptied as
soon as the job is queued, and no widget ever shows the value. Which kinds an engine takes and
whether a value fits are core.signin's; the settings page and the first-run check open it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.engines.base import CredentialKind
from core.signin import SIGN_IN_NOTES, agent_engines, kinds_of
from gui.jobs import JobFailure
from gui.qt import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from gui.settings.data import sign_engine_in

if TYPE_CHECKING:
    from gui.context import AppContext

STYLE = 'QLabel[tone="error"] { color: #c62828; } QLabel[tone="ok"] { color: #2e7d32; }'
EMPTY_TEXT = "Paste the token or key first."


def _say(label: QLabel, text: str, tone: str | None = None) -> None:
    label.setText(text)
    label.setVisible(bool(text))
    label.setProperty("tone", tone or "")
    label.style().unpolish(label)
    label.style().polish(label)


class SignInDialog(QDialog):
    """Sign an agent engine in with a token or key kept in the OS keyring. Open it with `open()`."""

    sig_signed_in = Signal(str, str)
    """The engine and the kind it was signed in with (the value never leaves the job)."""

    def __init__(
        self, context: AppContext, engine: str | None = None, parent: QWidget | None = None
    ):
        super().__init__(parent)
        self.context = context
        self.busy = False
        self.setObjectName("signInDialog")
        self.setWindowTitle("Sign In")
        self.setStyleSheet(STYLE)
        self.setMinimumWidth(480)
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.engine_combo = QComboBox(self)
        self.engine_combo.setObjectName("signInEngine")
        for name in agent_engines():
            self.engine_combo.addItem(name, name)
        if engine is not None and self.engine_combo.findData(engine) >= 0:
            self.engine_combo.setCurrentIndex(self.engine_combo.findData(engine))
        self.engine_combo.currentIndexChanged.connect(self._engine_changed)
        form.addRow("Engine:", self.engine_combo)
        self.kind_combo = QComboBox(self)
        self.kind_combo.setObjectName("signInKind")
        self.kind_combo.currentIndexChanged.connect(self._kind_changed)
        form.addRow("Sign in with:", self.kind_combo)
        self.how_label = QLabel(self)
        self.how_label.setObjectName("signInHow")
        self.how_label.setWordWrap(True)
        self.how_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("", self.how_label)
        self.value_edit = QLineEdit(self)
        self.value_edit.setObjectName("signInValue")
        self.value_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.value_edit.setPlaceholderText("paste it here (hidden)")
        self.value_edit.setToolTip(
            "the value goes straight to the OS keyring; Cairn never shows it"
        )
        self.value_edit.returnPressed.connect(self.submit)
        form.addRow("Token or key:", self.value_edit)
        layout.addLayout(form)
        self.note_label = QLabel(self)
        self.note_label.setObjectName("signInNote")
        self.note_label.setWordWrap(True)
        layout.addWidget(self.note_label)
        self.message = QLabel(self)
        self.message.setObjectName("signInMessage")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        _say(self.message, "")
        layout.addWidget(self.message)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, self)
        self.sign_in_button = self.buttons.addButton(
            "Sign In", QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.sign_in_button.setDefault(True)
        self.buttons.accepted.connect(self.submit)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self._engine_changed()
        self.value_edit.setFocus()

    # -- choices ---------------------------------------------------------------------------------

    @property
    def engine(self) -> str:
        return str(self.engine_combo.currentData() or "")

    @property
    def kind(self) -> CredentialKind | None:
        wanted = self.kind_combo.currentData()
        return next((k for k in kinds_of(self.engine) if k.kind == wanted), None)

    def _engine_changed(self, *_: object) -> None:
        self.kind_combo.blockSignals(True)
        self.kind_combo.clear()
        for k in kinds_of(self.engine) if self.engine else ():
            self.kind_combo.addItem(k.label, k.kind)
        self.kind_combo.setCurrentIndex(0)
        self.kind_combo.blockSignals(False)
        note = SIGN_IN_NOTES.get(self.engine, "")
        self.note_label.setText(note)
        self.note_label.setVisible(bool(note))
        self._kind_changed()

    def _kind_changed(self, *_: object) -> None:
        kind = self.kind
        how = kind.how if kind else ""
        self.how_label.setText(how[:1].upper() + how[1:] + "." if how else "")
        self.how_label.setVisible(bool(how))

    # -- signing in ------------------------------------------------------------------------------

    def submit(self) -> None:
        """Queue the value for the keyring and empty the field at once."""
        if self.busy:
            return
        value = self.value_edit.text()
        if not value.strip():
            _say(self.message, EMPTY_TEXT, "error")
            return
        self.value_edit.clear()
        engine, kind = self.engine, self.kind
        cairn = self.context.cairn
        self._set_busy(True)
        _say(self.message, "Signing in…")
        self.context.jobs.job(
            lambda: sign_engine_in(cairn, engine, value, kind.kind if kind else None),
            write=True,
            what=f"sign the {engine} engine in",
            parent=self,
        ).success(lambda stored: self._signed_in(engine, stored)).failure(self._failed).finished(
            lambda: self._set_busy(False)
        ).run()

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.sign_in_button.setEnabled(not busy)

    def _signed_in(self, engine: str, kind: CredentialKind) -> None:
        _say(
            self.message,
            f"Signed in with {kind.label} (kept in the OS keyring as {kind.secret}).",
            "ok",
        )
        self.sig_signed_in.emit(engine, kind.kind)
        self.accept()

    def _failed(self, failure: JobFailure) -> None:
        _say(self.message, f"{failure.message[:1].upper()}{failure.message[1:]}.", "error")
        self.value_edit.setFocus()
