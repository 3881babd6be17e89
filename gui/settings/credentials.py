"""The Credentials page: the keyring's state, the secrets stored in it (names only), and each
task's grants of them as environment variables.

Owns showing those and sending the user's changes through the facade's `credentials` (keyring
status, secret names, set / delete / grant / revoke), every call in a job; the reads are
gui.settings.data's. A value typed here goes from its password field into a write job
and the field is emptied at once; no widget ever shows one. Where the page lives (a Settings
tab, or a dialog of its own through `open_credentials_dialog`) is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.credentials import (
    SCOPE_LINEAGE,
    SCOPE_TASK,
    KeyringLocked,
    KeyringStatus,
    validate_env_var,
    validate_secret_name,
)
from core.errors import InputError
from core.events import TASK_CREATED, Event
from gui.errors import is_keyring_problem
from gui.jobs import JobFailure
from gui.qt import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QKeyEvent,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
    Signal,
)
from gui.settings.data import (
    GrantRow,
    grant_holders,
    grant_rows,
    task_grants,
    task_label,
    task_titles,
)

if TYPE_CHECKING:
    from core.credentials import Grant
    from gui.context import AppContext

CHECKING_TEXT = "Checking the keyring…"
APPLY_HINT = (
    "Grants, revocations and new secret values take effect when a run of the task next "
    "starts or resumes: the values are read from the keyring then and put into that "
    "run's environment. A run already going keeps the environment it started with, and "
    "the task's sandbox policy can still withhold a granted secret."
)
NO_TASKS_TEXT = "No tasks yet: drop a folder into Cairn to make one, then grant it secrets here."
SCOPE_CHOICES = ((SCOPE_LINEAGE, "This task and its descendants"), (SCOPE_TASK, "This task only"))
PAGE_STYLE = 'QLabel[tone="error"] { color: #c62828; } QLabel[tone="warning"] { color: #b26a00; }'


def _set_tone(label: QLabel, tone: str | None) -> None:
    label.setProperty("tone", tone or "")
    label.style().unpolish(label)
    label.style().polish(label)


def _say(label: QLabel, text: str, tone: str | None = None) -> None:
    label.setText(text)
    label.setVisible(bool(text))
    _set_tone(label, tone)


def _heading(text: str, parent: QWidget) -> QLabel:
    label = QLabel(f"<b>{text}</b>", parent)
    label.setTextFormat(Qt.TextFormat.RichText)
    return label


def _table(headers: list[str], parent: QWidget) -> QTableWidget:
    table = QTableWidget(0, len(headers), parent)
    table.setHorizontalHeaderLabels(headers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(False)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.horizontalHeader().setStretchLastSection(True)
    table.setAlternatingRowColors(True)
    return table


def confirm_removal(parent: QWidget, name: str, holders: list[tuple[str, str]]) -> bool:
    """Ask before removing a secret, naming the tasks whose grants of it would then find nothing."""
    text = f"Remove the secret “{name}” from the keyring?"
    if holders:
        listed = "\n".join(f"• {task_label(task_id, title)}" for task_id, title in holders)
        text += (
            f"\n\nThese tasks have grants for it (their descendants may inherit them):\n"
            f"{listed}\n\nTheir next run will not start until the secret is stored again "
            "or the grant is revoked."
        )
    else:
        text += "\n\nNo task has a grant for it."
    answer = QMessageBox.question(
        parent,
        "Remove secret",
        text,
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
        QMessageBox.StandardButton.Cancel,
    )
    return answer == QMessageBox.StandardButton.Yes


# Unlike an engine's sign-in (added to model requests by the proxy on this computer), a grant is
# put into each command's environment in the sandbox: people should know what that means.
GRANTS_VISIBILITY = (
    "A granted secret is put into the environment of every command the task runs: it is "
    "visible to everything in the sandbox, the agent included. An engine's sign-in is not a "
    "grant: its key stays on this computer and is added to each model request by Cairn's proxy."
)


class FieldEdit(QLineEdit):
    """A line edit whose Enter does its own action (returnPressed) and nothing else: in a dialog,
    Enter would also press the default button and close it."""

    def keyPressEvent(self, event: QKeyEvent) -> None:
        super().keyPressEvent(event)
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            event.accept()  # handled here: the dialog must not see it


class CredentialsPage(QWidget):
    """The keyring state, the secrets (add, rotate, remove) and a task's grants (grant, revoke)."""

    sig_secrets_changed = Signal(list)
    """The secret names were (re)loaded: the sorted list of names."""

    sig_grants_changed = Signal(str)
    """A grant or revocation was written for the task with this id."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.setObjectName("credentialsPage")
        self.setStyleSheet(PAGE_STYLE)
        self.status: KeyringStatus | None = None
        self.names: list[str] = []
        self.task_id: str | None = None
        self._wanted_task: str | None = None
        self._titles: dict[str, str] = {}
        self._rows: list[GrantRow] = []
        self.tasks_loaded = False
        self.names_loaded = False
        self.grants_loaded = False
        self._keys = {
            part: f"credentials-{part}-{id(self)}"
            for part in ("keyring", "names", "tasks", "grants")
        }

        layout = QVBoxLayout(self)

        # -- the keyring --
        layout.addWidget(_heading("Keyring", self))
        keyring_row = QHBoxLayout()
        self.keyring_label = QLabel(CHECKING_TEXT, self)
        self.keyring_label.setObjectName("keyringState")
        self.keyring_label.setWordWrap(True)
        self.keyring_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        keyring_row.addWidget(self.keyring_label, 1)
        self.retry_button = QPushButton("Try Again", self)
        self.retry_button.setToolTip("check the keyring again (it may ask you to unlock it)")
        self.retry_button.clicked.connect(self.reload)
        self.retry_button.hide()
        keyring_row.addWidget(self.retry_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(keyring_row)
        self.keyring_warning = QLabel(self)
        self.keyring_warning.setObjectName("keyringWarning")
        self.keyring_warning.setWordWrap(True)
        _say(self.keyring_warning, "")
        layout.addWidget(self.keyring_warning)

        # -- secrets --
        layout.addSpacing(8)
        layout.addWidget(_heading("Secrets", self))
        self.secrets_table = _table(["Secret"], self)
        self.secrets_table.setObjectName("secretsTable")
        self.secrets_table.itemSelectionChanged.connect(self._update_buttons)
        layout.addWidget(self.secrets_table, 1)
        form = QHBoxLayout()
        self.name_edit = QLineEdit(self)
        self.name_edit.setObjectName("secretName")
        self.name_edit.setPlaceholderText("name, e.g. github-token")
        self.name_edit.textChanged.connect(self._update_buttons)
        form.addWidget(self.name_edit, 1)
        self.value_edit = FieldEdit(self)
        self.value_edit.setObjectName("secretValue")
        self.value_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.value_edit.setPlaceholderText("value (hidden)")
        self.value_edit.setToolTip("the value goes straight to the keyring; Cairn never shows it")
        self.value_edit.textChanged.connect(self._update_buttons)
        self.value_edit.returnPressed.connect(self.add_secret)
        form.addWidget(self.value_edit, 1)
        self.add_button = QPushButton("Add", self)
        self.add_button.setToolTip("store a new secret under this name")
        self.add_button.clicked.connect(self.add_secret)
        form.addWidget(self.add_button)
        layout.addLayout(form)
        secret_buttons = QHBoxLayout()
        self.rotate_button = QPushButton("Rotate Selected", self)
        self.rotate_button.setToolTip(
            "replace the selected secret's value with the one typed in the value field"
        )
        self.rotate_button.clicked.connect(self.rotate_secret)
        secret_buttons.addWidget(self.rotate_button)
        self.remove_button = QPushButton("Remove Selected…", self)
        self.remove_button.clicked.connect(self.remove_secret)
        secret_buttons.addWidget(self.remove_button)
        secret_buttons.addStretch(1)
        layout.addLayout(secret_buttons)
        self.secrets_message = QLabel(self)
        self.secrets_message.setObjectName("secretsMessage")
        self.secrets_message.setWordWrap(True)
        _say(self.secrets_message, "")
        layout.addWidget(self.secrets_message)

        # -- grants --
        layout.addSpacing(8)
        layout.addWidget(_heading("Grants", self))
        self.grants_visibility = QLabel(GRANTS_VISIBILITY, self)
        self.grants_visibility.setObjectName("grantsVisibility")
        self.grants_visibility.setWordWrap(True)
        layout.addWidget(self.grants_visibility)
        task_row = QHBoxLayout()
        task_row.addWidget(QLabel("Task:", self))
        self.task_combo = QComboBox(self)
        self.task_combo.setObjectName("grantTask")
        self.task_combo.currentIndexChanged.connect(self._task_chosen)
        task_row.addWidget(self.task_combo, 1)
        layout.addLayout(task_row)
        self.grants_table = _table(["Secret", "Environment variable", "Applies to", "State"], self)
        self.grants_table.setObjectName("grantsTable")
        self.grants_table.itemSelectionChanged.connect(self._update_buttons)
        layout.addWidget(self.grants_table, 1)
        grant_form = QHBoxLayout()
        self.grant_secret_combo = QComboBox(self)
        self.grant_secret_combo.setObjectName("grantSecret")
        self.grant_secret_combo.setEditable(True)
        self.grant_secret_combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        typed_name = self.grant_secret_combo.lineEdit()  # there is one: the combo is editable
        if typed_name is not None:
            typed_name.setPlaceholderText("secret name")
        self.grant_secret_combo.currentTextChanged.connect(self._update_buttons)
        grant_form.addWidget(self.grant_secret_combo, 1)
        grant_form.addWidget(QLabel("as", self))
        self.env_var_edit = FieldEdit(self)
        self.env_var_edit.setObjectName("grantEnvVar")
        self.env_var_edit.setPlaceholderText("ENV_VAR, e.g. GITHUB_TOKEN")
        self.env_var_edit.textChanged.connect(self._update_buttons)
        self.env_var_edit.returnPressed.connect(self.grant)
        grant_form.addWidget(self.env_var_edit, 1)
        self.scope_combo = QComboBox(self)
        for scope, label in SCOPE_CHOICES:
            self.scope_combo.addItem(label, scope)
        grant_form.addWidget(self.scope_combo)
        self.grant_button = QPushButton("Grant", self)
        self.grant_button.clicked.connect(self.grant)
        grant_form.addWidget(self.grant_button)
        layout.addLayout(grant_form)
        grant_buttons = QHBoxLayout()
        self.revoke_button = QPushButton("Revoke Selected", self)
        self.revoke_button.setToolTip(
            "stop delivering the selected secret to this task and its "
            "descendants (an ancestor keeps its own grant)"
        )
        self.revoke_button.clicked.connect(self.revoke)
        grant_buttons.addWidget(self.revoke_button)
        grant_buttons.addStretch(1)
        layout.addLayout(grant_buttons)
        self.grants_message = QLabel(self)
        self.grants_message.setObjectName("grantsMessage")
        self.grants_message.setWordWrap(True)
        _say(self.grants_message, "")
        layout.addWidget(self.grants_message)
        self.hint_label = QLabel(APPLY_HINT, self)
        self.hint_label.setObjectName("credentialsHint")
        self.hint_label.setWordWrap(True)
        layout.addWidget(self.hint_label)

        context.events.sig_events.connect(self._on_events)
        self._update_buttons()
        self.reload()
        self.reload_tasks()

    # -- loading ---------------------------------------------------------------------------------

    def reload(self) -> None:
        """Check the keyring and load the secret names (two jobs; the check may wait on an
        unlock prompt, the list never waits for it)."""
        cairn = self.context.cairn
        self.retry_button.setEnabled(False)
        if self.status is None or not self.status.usable:
            _say(self.keyring_label, CHECKING_TEXT)
        self.context.jobs.job(
            # `credentials` is made on first use (it opens the keyring): in the job, not here
            lambda: cairn.credentials.keyring_status(),
            key=self._keys["keyring"],
            what="check the keyring",
            parent=self,
        ).success(self._show_status).failure(self._keyring_failed).finished(
            lambda: self.retry_button.setEnabled(True)
        ).run()
        self.reload_names()

    def reload_names(self) -> None:
        cairn = self.context.cairn
        self.context.jobs.job(
            lambda: cairn.credentials.secret_names(),
            key=self._keys["names"],
            what="list the secrets",
            parent=self,
        ).success(self._show_names).failure(self._names_failed).run()

    def reload_tasks(self) -> None:
        cairn = self.context.cairn
        self.context.jobs.job(
            lambda: task_titles(cairn), key=self._keys["tasks"], what="list the tasks", parent=self
        ).success(self._show_tasks).failure(self._grants_failed).run()

    def reload_grants(self) -> None:
        task_id = self.task_id
        if task_id is None:
            self.context.jobs.supersede(self._keys["grants"])
            self._show_grants((None, [], []))
            return
        cairn = self.context.cairn
        self.context.jobs.job(
            lambda: task_grants(cairn, task_id),
            key=self._keys["grants"],
            what="load the task's grants",
            parent=self,
        ).success(self._show_grants).failure(self._grants_failed).run()

    def set_task(self, task_id: str | None) -> None:
        """Show this task's grants (the main window's selection); kept until the tasks load."""
        self._wanted_task = task_id
        if task_id is None:
            return
        index = self.task_combo.findData(task_id)
        if index >= 0:
            self.task_combo.setCurrentIndex(index)
        elif self.tasks_loaded:
            self.reload_tasks()  # a task made since the list was loaded

    def _on_events(self, events: list[Event]) -> None:
        if any(e.kind == TASK_CREATED for e in events):
            self.reload_tasks()

    # -- showing ---------------------------------------------------------------------------------

    def _show_status(self, status: KeyringStatus) -> None:
        self.status = status
        if status.usable:
            _say(self.keyring_label, _sentence(status.message))
            self.retry_button.hide()
        else:
            self._show_unusable(status.message, locked=status.locked)
        if status.warning:
            _say(self.keyring_warning, f"Warning: {_sentence(status.warning)}", "warning")
        else:
            _say(self.keyring_warning, "")
        self._update_buttons()

    def _show_unusable(self, message: str, *, locked: bool) -> None:
        lead = "The keyring is locked." if locked else "No usable keyring."
        text = _sentence(message)
        _say(
            self.keyring_label,
            text if text.lower().startswith(lead.lower()[:-1]) else f"{lead} {text}",
            "error",
        )
        self.retry_button.show()

    def _show_names(self, names: list[str]) -> None:
        self.names = list(names)
        self.names_loaded = True
        selected = self.selected_secret()
        self.secrets_table.setRowCount(len(self.names))
        for row, name in enumerate(self.names):
            self.secrets_table.setItem(row, 0, QTableWidgetItem(name))
            if name == selected:
                self.secrets_table.selectRow(row)
        typed = self.grant_secret_combo.currentText()
        self.grant_secret_combo.blockSignals(True)
        self.grant_secret_combo.clear()
        self.grant_secret_combo.addItems(self.names)
        self.grant_secret_combo.setEditText(typed)
        self.grant_secret_combo.blockSignals(False)
        self._update_buttons()
        self.sig_secrets_changed.emit(list(self.names))

    def _show_tasks(self, tasks: list[tuple[str, str]]) -> None:
        self.tasks_loaded = True
        self._titles = dict(tasks)
        keep = self._wanted_task or self.task_id
        self.task_combo.blockSignals(True)
        self.task_combo.clear()
        for task_id, title in tasks:
            self.task_combo.addItem(task_label(task_id, title), task_id)
            self.task_combo.setItemData(
                self.task_combo.count() - 1, f"{title}\n{task_id}", Qt.ItemDataRole.ToolTipRole
            )
        if not tasks:
            self.task_combo.addItem(NO_TASKS_TEXT, None)
        index = self.task_combo.findData(keep) if keep else -1
        self.task_combo.setCurrentIndex(index if index >= 0 else 0)
        self.task_combo.setEnabled(bool(tasks))
        self.task_combo.blockSignals(False)
        self._task_chosen()

    def _task_chosen(self, _index: int = -1) -> None:
        task_id = self.task_combo.currentData()
        if task_id is not None:
            self._wanted_task = None
        if task_id != self.task_id or not self.grants_loaded:
            self.task_id = task_id
            self.grants_loaded = False
            _say(self.grants_message, "")
            self.reload_grants()
        self._update_buttons()

    def _show_grants(self, loaded: tuple[str | None, list[Grant], list[str]]) -> None:
        task_id, grants, revoked = loaded
        if task_id != self.task_id:
            return
        self.grants_loaded = True
        self._rows = grant_rows(task_id, grants, revoked) if task_id else []
        table = self.grants_table
        table.setRowCount(len(self._rows))
        for row, grant in enumerate(self._rows):
            if grant.revoked:
                applies, state = "—", "revoked"
            else:
                applies = (
                    "this task and its descendants"
                    if grant.scope == SCOPE_LINEAGE
                    else "this task only"
                )
                state = "granted"
                if grant.from_task_id:
                    title = self._titles.get(grant.from_task_id, grant.from_task_id)
                    state = f"inherited from {task_label(grant.from_task_id, title)}"
            cells = [grant.secret_name, grant.env_var or "—", applies, state]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if grant.revoked:
                    item.setForeground(table.palette().placeholderText())
                    item.setToolTip(
                        "revoked in this task's lineage: not delivered until it is granted again"
                    )
                elif grant.from_task_id:
                    item.setToolTip(
                        "granted on an ancestor; revoking it here keeps the ancestor's grant"
                    )
                table.setItem(row, column, item)
        self._update_buttons()

    # -- secrets ---------------------------------------------------------------------------------

    def selected_secret(self) -> str | None:
        rows = self.secrets_table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.secrets_table.item(rows[0].row(), 0)
        return item.text() if item is not None else None

    def select_secret(self, name: str) -> bool:
        for row in range(self.secrets_table.rowCount()):
            item = self.secrets_table.item(row, 0)
            if item is not None and item.text() == name:
                self.secrets_table.selectRow(row)
                return True
        return False

    def add_secret(self) -> None:
        """Store a new secret: the name checked here, the value handed to a write job and
        cleared from its field before anything else happens."""
        name = self.name_edit.text().strip()
        try:
            validate_secret_name(name)
        except InputError as exc:
            _say(self.secrets_message, _sentence(str(exc)), "error")
            return
        if name in self.names:
            _say(
                self.secrets_message,
                f"“{name}” is already stored: select it and use Rotate "
                "Selected to replace its value.",
                "error",
            )
            return
        if not self.value_edit.text():
            _say(self.secrets_message, f"Type the value for “{name}” first.", "error")
            return
        self._store(name, f"Stored “{name}” in the keyring.", what=f"store the secret {name}")
        self.name_edit.setText("")

    def rotate_secret(self) -> None:
        """Replace the selected secret's value with the one typed in the value field."""
        name = self.selected_secret()
        if name is None:
            _say(self.secrets_message, "Select the secret to rotate.", "error")
            return
        if not self.value_edit.text():
            _say(self.secrets_message, f"Type the new value for “{name}” first.", "error")
            return
        self._store(
            name,
            f"Rotated “{name}”: the next run start or resume reads the new value.",
            what=f"rotate the secret {name}",
        )

    def _store(self, name: str, done: str, *, what: str) -> None:
        cairn = self.context.cairn
        value = self.value_edit.text()

        def work() -> None:
            cairn.credentials.secrets.set(name, value)

        self._write(work, what, lambda _none: self._secret_written(done), self._secrets_failed)
        self.value_edit.setText("")  # at once, and setText (not clear) drops the undo history

    def remove_secret(self) -> None:
        """Ask (naming the tasks with grants for it), then remove the selected secret."""
        name = self.selected_secret()
        if name is None:
            _say(self.secrets_message, "Select the secret to remove.", "error")
            return
        cairn = self.context.cairn
        self.remove_button.setEnabled(False)
        self.context.jobs.job(
            lambda: grant_holders(cairn, name), what=f"find the grants of {name}", parent=self
        ).success(lambda found: self._confirm_remove(name, found)).failure(
            self._secrets_failed
        ).finished(self._update_buttons).run()

    def _confirm_remove(self, name: str, holders: list[tuple[str, str]]) -> None:
        if not confirm_removal(self, name, holders):
            return
        cairn = self.context.cairn

        def work() -> None:
            cairn.credentials.secrets.delete(name)

        done = f"Removed “{name}” from the keyring."
        if holders:
            done += " Its grants remain: revoke them or store the secret again."
        self._write(
            work,
            f"remove the secret {name}",
            lambda _none: self._secret_written(done),
            self._secrets_failed,
        )

    def _secret_written(self, done: str) -> None:
        _say(self.secrets_message, done, "ok")
        self.reload_names()

    # -- grants ----------------------------------------------------------------------------------

    def selected_grant(self) -> GrantRow | None:
        rows = self.grants_table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self._rows):
            return None
        return self._rows[rows[0].row()]

    def grant(self) -> None:
        """Grant the chosen secret to the task as the typed variable, checked as the core does."""
        task_id = self.task_id
        name = self.grant_secret_combo.currentText().strip()
        env_var = self.env_var_edit.text().strip()
        scope = self.scope_combo.currentData()
        if task_id is None:
            _say(self.grants_message, "Choose a task first.", "error")
            return
        try:
            validate_secret_name(name)
            validate_env_var(env_var)
        except InputError as exc:
            _say(self.grants_message, _sentence(str(exc)), "error")
            return
        cairn = self.context.cairn
        title = self._titles.get(task_id, task_id)
        note = (
            ""
            if name in self.names
            else " It is not in the keyring yet: store it before the next run."
        )

        def work() -> None:
            cairn.credentials.grant(task_id, name, env_var, scope=scope)

        def done(_none: None) -> None:
            self.env_var_edit.setText("")
            self._grants_written(task_id, f"Granted “{name}” as {env_var} to {title}.{note}")

        self._write(work, f"grant {name} as {env_var}", done, self._grants_failed)

    def revoke(self) -> None:
        """Revoke the selected secret for the task (and its descendants)."""
        task_id = self.task_id
        grant = self.selected_grant()
        if task_id is None or grant is None or grant.revoked:
            _say(self.grants_message, "Select a granted secret to revoke.", "error")
            return
        cairn = self.context.cairn
        name = grant.secret_name
        title = self._titles.get(task_id, task_id)

        def work() -> None:
            cairn.credentials.revoke(task_id, name)

        self._write(
            work,
            f"revoke {name}",
            lambda _none: self._grants_written(task_id, f"Revoked “{name}” for {title}."),
            self._grants_failed,
        )

    def _grants_written(self, task_id: str, done: str) -> None:
        self.sig_grants_changed.emit(task_id)
        if task_id == self.task_id:
            _say(self.grants_message, done, "ok")
            self.reload_grants()

    # -- shared ----------------------------------------------------------------------------------

    def _write(
        self,
        work: Callable[[], Any],
        what: str,
        on_success: Callable[[Any], None],
        on_failure: Callable[[JobFailure], None],
    ) -> None:
        self.context.jobs.job(work, write=True, what=what, parent=self).success(on_success).failure(
            on_failure
        ).run()

    def _keyring_failed(self, failure: JobFailure) -> None:
        self._show_unusable(failure.message, locked=isinstance(failure.error, KeyringLocked))
        self._update_buttons()

    def _names_failed(self, failure: JobFailure) -> None:
        if is_keyring_problem(failure.error):
            self._keyring_failed(failure)  # said once, in the keyring's own place
        else:
            _say(self.secrets_message, _sentence(failure.sentence()), "error")

    def _secrets_failed(self, failure: JobFailure) -> None:
        if is_keyring_problem(failure.error):
            self._keyring_failed(failure)
        _say(self.secrets_message, _sentence(failure.sentence()), "error")

    def _grants_failed(self, failure: JobFailure) -> None:
        _say(self.grants_message, _sentence(failure.sentence()), "error")

    def _update_buttons(self) -> None:
        usable = self.status is None or self.status.usable
        selected = self.selected_secret() is not None
        typed = bool(self.value_edit.text())
        self.add_button.setEnabled(usable and bool(self.name_edit.text().strip()) and typed)
        self.rotate_button.setEnabled(usable and selected and typed)
        self.remove_button.setEnabled(usable and selected)
        has_task = self.task_id is not None
        self.grant_button.setEnabled(
            has_task
            and bool(self.grant_secret_combo.currentText().strip())
            and bool(self.env_var_edit.text().strip())
        )
        grant = self.selected_grant()
        self.revoke_button.setEnabled(has_task and grant is not None and not grant.revoked)


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?", ")")) else f"{text}."


def open_credentials_dialog(
    context: AppContext, parent: QWidget | None = None, *, task_id: str | None = None
) -> QDialog:
    """The page alone in a window-modal dialog with a Close button (deleted when closed)."""
    dialog = QDialog(parent)
    dialog.setObjectName("credentialsDialog")
    dialog.setWindowTitle("Credentials")
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    layout = QVBoxLayout(dialog)
    page = CredentialsPage(context, dialog)
    if task_id is not None:
        page.set_task(task_id)
    layout.addWidget(page)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, dialog)
    buttons.rejected.connect(dialog.reject)
    layout.addWidget(buttons)
    dialog.page = page  # type: ignore[attr-defined]
    dialog.resize(720, 640)
    dialog.open()
    return dialog
