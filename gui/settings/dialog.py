"""The Settings dialog: the defaults new tasks and sandboxes start from, each engine's settings,
the risk rules (Cairn's own or the data folder's override), and the data folder the next start
uses.

Owns showing those and sending the user's changes through the facade, every call in a job (the
reads and the all-or-nothing write are gui.settings.data's). Checking and writing are the
facade's; what a setting does is core's. `pages` is a plain QTabWidget; the Credentials page is
made and added by the caller (`add_credentials_page`), which knows the selected task.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.health import ACTION_SEND_IMAGE, OK, Check
from core.signin import ACTION_SIGN_IN, SIGN_IN_NOTES, EngineStatus
from gui.dialogs.data import FALLBACK_ENGINE
from gui.jobs import JobFailure
from gui.qt import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFontDatabase,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSettings,
    QStackedWidget,
    Qt,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
    Signal,
)
from gui.settings.data import (
    Changes,
    LoadedSettings,
    applicable_keys,
    apply_changes,
    engine_status,
    load_settings,
)
from gui.settings.protections import ProtectionsLabel
from gui.settings.signin import SignInDialog

if TYPE_CHECKING:
    from gui.context import AppContext
    from gui.settings.credentials import CredentialsPage

DATA_DIR_KEY = "app/data_dir"  # QSettings: the data folder gui/main.py opens at the next start
FALLBACK_NETWORK = "none"
FALLBACK_BACKEND = "docker"
FALLBACK_HOST = "local"
HOST_HINT = (
    "Where Docker sandboxes run: the local Docker engine, your rootless Podman, or an engine "
    "added with `cairnctl config set hosts.NAME 'ENGINE unix:///SOCKET'`."
)
NETWORK_LABELS = {
    "none": "None: loopback only",
    "allowlist": "Allowlist: only the host:port pairs below",
    "open": "Open: any destination",
}
BACKEND_LABELS = {"docker": "Docker (isolated)", "host": "Host (UNSAFE: no isolation)"}
HOST_WARNING = (
    "UNSAFE: the host backend runs agents and their commands directly on this "
    "computer, as you, with access to all your files and the network. Nothing is "
    "isolated. Use it only when Docker is not available and you trust what runs."
)
BACKEND_HINT = (
    "Applies to sandboxes made from now on; CAIRN_BACKEND in the environment takes precedence."
)
DATA_DIR_NOTE = "Applies at the next start of Cairn."
RULES_HINT = (
    "Commands matching a rule wait for a person's approval. Each pattern is a Python "
    "regular expression searched in the command; 'when' limits a rule to tasks whose "
    "policy has those values. Saved rules apply to the next command a run asks about."
)
ENGINE_KEY_LABELS = {
    "binary": "Binary (absolute path)",
    "version": "Version",
    "base_url": "Endpoint (base URL)",
    "model": "Model",
    "api_key_secret": "API key secret (keyring name)",
}
SHELL_NOTE = "The shell engine runs your commands; it needs no model or key."
FINDING_TEXT = "Looking for the program…"
CHECKING_SIGN_IN = "Checking…"
FIRST_ENGINE = "claude-code"  # shown first when the default engine is not set
STYLE = (
    'QLabel[tone="error"] { color: #c62828; } '
    'QLabel[tone="warning"] { color: #b26a00; font-weight: bold; } '
    'QLabel[tone="ok"] { color: #2e7d32; }'
)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def next_data_dir(settings: QSettings) -> str:
    """The data folder chosen in Settings for the next start ("" when none was)."""
    chosen = settings.value(DATA_DIR_KEY, "", type=str)
    return chosen if isinstance(chosen, str) else ""


def _set_tone(label: QLabel, text: str, tone: str | None = None) -> None:
    label.setText(text)
    label.setVisible(bool(text))
    label.setProperty("tone", tone or "")
    label.style().unpolish(label)
    label.style().polish(label)


def _combo_select(combo: QComboBox, value: str) -> None:
    index = combo.findData(value)
    if index < 0:
        combo.addItem(value, value)
        index = combo.count() - 1
    combo.setCurrentIndex(index)


def _when_text(when: dict) -> str:
    return (
        ", ".join(
            f"{k} = {' or '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in sorted(when.items())
        )
        or "always"
    )


class SettingsDialog(QDialog):
    """General defaults, engine settings and risk rules; OK and Apply write what changed."""

    sig_saved = Signal(object)
    """Settings were written: the keys (and "risk rules") that changed, as a list."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.cairn = context.cairn
        self.setWindowTitle("Settings")
        self.setObjectName("settingsDialog")
        self.setStyleSheet(STYLE)
        self.loaded: LoadedSettings | None = None
        self.busy = False
        self._accept_after_write = False
        self.engine_edits: dict[tuple[str, str], QLineEdit] = {}
        self.engine_choice: QComboBox | None = None
        self.engine_stack: QStackedWidget | None = None
        self.engine_boxes: dict[str, QWidget] = {}
        self.engine_found: dict[str, QLabel] = {}
        self.engine_sign_in: dict[str, QLabel] = {}
        self.engine_statuses: dict[str, EngineStatus] = {}
        self.sign_in_dialog: SignInDialog | None = None
        self.credentials_page: CredentialsPage | None = None

        layout = QVBoxLayout(self)
        self.pages = QTabWidget(self)
        self.pages.setObjectName("settingsPages")
        layout.addWidget(self.pages)
        self.pages.addTab(self._general_page(), "General")
        self.engines_page = QWidget(self)
        self.engines_layout = QVBoxLayout(self.engines_page)
        self.engines_layout.addWidget(QLabel("Loading…", self.engines_page))
        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.engines_page)
        self.pages.addTab(scroll, "Engines")
        self.pages.addTab(self._rules_page(), "Risk rules")

        self.message = QLabel(self)
        self.message.setObjectName("settingsMessage")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        _set_tone(self.message, "")
        layout.addWidget(self.message)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Apply
            | QDialogButtonBox.StandardButton.Cancel,
            self,
        )
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.apply_button = self.buttons.button(QDialogButtonBox.StandardButton.Apply)
        self.buttons.accepted.connect(self.accept_changes)
        self.buttons.rejected.connect(self.reject)
        self.apply_button.clicked.connect(self.apply)
        layout.addWidget(self.buttons)
        self._set_enabled(False)
        self.resize(680, 560)
        self.reload()

    # -- pages -----------------------------------------------------------------------------------

    def add_credentials_page(self, page: CredentialsPage) -> None:
        """The Credentials tab (made by the caller, who knows the selected task)."""
        self.credentials_page = page
        self.pages.addTab(page, "Credentials")

    def _general_page(self) -> QWidget:
        page = QWidget(self)
        form = QFormLayout(page)
        self.engine_combo = QComboBox(page)
        self.engine_combo.setObjectName("defaultEngine")
        form.addRow("Default engine:", self.engine_combo)
        self.image_edit = QLineEdit(page)
        self.image_edit.setObjectName("defaultImage")
        self.image_edit.setPlaceholderText("the built-in sandbox image, e.g. cairn-sandbox:1")
        form.addRow("Sandbox image:", self.image_edit)
        self.network_combo = QComboBox(page)
        self.network_combo.setObjectName("defaultNetwork")
        self.network_combo.currentIndexChanged.connect(self._network_changed)
        form.addRow("Network for new tasks:", self.network_combo)
        self.allow_edit = QLineEdit(page)
        self.allow_edit.setObjectName("defaultAllow")
        self.allow_edit.setPlaceholderText("host:port, host:port (e.g. api.example.com:443)")
        form.addRow("Allowlist:", self.allow_edit)
        self.backend_combo = QComboBox(page)
        self.backend_combo.setObjectName("defaultBackend")
        self.backend_combo.currentIndexChanged.connect(self._backend_changed)
        form.addRow("Sandbox backend:", self.backend_combo)
        self.host_warning = QLabel(HOST_WARNING, page)
        self.host_warning.setObjectName("hostBackendWarning")
        self.host_warning.setWordWrap(True)
        _set_tone(self.host_warning, HOST_WARNING, "warning")
        self.host_warning.setVisible(False)
        form.addRow("", self.host_warning)
        hint = QLabel(BACKEND_HINT, page)
        hint.setWordWrap(True)
        form.addRow("", hint)
        self.host_combo = QComboBox(page)
        self.host_combo.setObjectName("defaultHost")
        self.host_combo.currentIndexChanged.connect(self._host_changed)
        host_row = QHBoxLayout()
        host_row.addWidget(self.host_combo, 1)
        self.test_host_button = QPushButton("Test", page)
        self.test_host_button.setObjectName("testHost")
        self.test_host_button.setToolTip(
            "Reachable, API version, the sandbox image there, free disk"
        )
        self.test_host_button.clicked.connect(self.test_host)
        host_row.addWidget(self.test_host_button)
        self.send_image_button = QPushButton("Send Image", page)
        self.send_image_button.setObjectName("sendImage")
        self.send_image_button.setToolTip(
            "Copy the sandbox image from the local Docker engine (docker save | load; "
            "never a registry)"
        )
        self.send_image_button.clicked.connect(self.send_image)
        self.send_image_button.setVisible(False)
        host_row.addWidget(self.send_image_button)
        form.addRow("Sandbox host:", host_row)
        self.host_result = QLabel(HOST_HINT, page)
        self.host_result.setObjectName("hostResult")
        self.host_result.setWordWrap(True)
        self.host_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("", self.host_result)

        folder_row = QHBoxLayout()
        self.data_dir_edit = QLineEdit(page)
        self.data_dir_edit.setObjectName("dataFolder")
        self.data_dir_edit.setReadOnly(True)
        data_dir = self.context.data_dir
        self.data_dir_edit.setText(str(data_dir) if data_dir else "")
        folder_row.addWidget(self.data_dir_edit, 1)
        self.data_dir_button = QPushButton("Change…", page)
        self.data_dir_button.setObjectName("changeDataFolder")
        self.data_dir_button.clicked.connect(self.choose_data_dir)
        folder_row.addWidget(self.data_dir_button)
        form.addRow("Data folder:", folder_row)
        self.data_dir_note = QLabel(page)
        self.data_dir_note.setObjectName("dataFolderNote")
        self.data_dir_note.setWordWrap(True)
        form.addRow("", self.data_dir_note)
        self._show_next_data_dir()
        return page

    def _fill_engines_page(self, loaded: LoadedSettings) -> None:
        shown = self.engine_choice.currentData() if self.engine_choice is not None else None
        while self.engines_layout.count():
            item = self.engines_layout.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        self.engine_edits.clear()
        self.engine_found.clear()
        self.engine_sign_in.clear()
        intro = QLabel(
            "Blank fields are not set: the engine uses its own default.", self.engines_page
        )
        intro.setWordWrap(True)
        self.engines_layout.addWidget(intro)
        choice = QWidget(self.engines_page)  # a widget, so the next fill removes it whole
        choice_row = QHBoxLayout(choice)
        choice_row.setContentsMargins(0, 0, 0, 0)
        choice_row.addWidget(QLabel("Engine:", choice))
        self.engine_choice = QComboBox(choice)
        self.engine_choice.setObjectName("enginesChoice")
        choice_row.addWidget(self.engine_choice, 1)
        self.engines_layout.addWidget(choice)
        stack = QStackedWidget(self.engines_page)
        stack.setObjectName("engineStack")
        self.engine_stack = stack
        self.engine_statuses.clear()
        self.engine_boxes = {}
        for engine in sorted(loaded.engines):
            box = self._engine_box(engine, loaded, stack)
            self.engine_boxes[engine] = box
            stack.addWidget(box)
            self.engine_choice.addItem(engine, engine)
        self.engines_layout.addWidget(stack)
        self.engines_layout.addStretch(1)
        self.engine_choice.currentIndexChanged.connect(self._engine_chosen)
        first = shown or loaded.defaults.get("engine") or FIRST_ENGINE
        index = self.engine_choice.findData(first)
        self.engine_choice.setCurrentIndex(max(index, 0))
        self._engine_chosen()

    def _engine_box(self, engine: str, loaded: LoadedSettings, stack: QStackedWidget) -> QWidget:
        box = QWidget(stack)
        box.setObjectName(f"engine-{engine}")
        form = QFormLayout(box)
        heading = QLabel(f"<b>{engine}</b>", box)
        heading.setTextFormat(Qt.TextFormat.RichText)
        form.addRow(heading)
        keys = applicable_keys(engine, loaded.engine_keys)
        if not keys:
            note = QLabel(SHELL_NOTE, box)
            note.setObjectName(f"engineNote-{engine}")
            note.setWordWrap(True)
            form.addRow(note)
            return box
        found = QLabel(FINDING_TEXT, box)
        found.setObjectName(f"engineFound-{engine}")
        found.setWordWrap(True)
        found.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("Program:", found)
        self.engine_found[engine] = found
        for key in keys:
            edit = QLineEdit(box)
            edit.setObjectName(f"engines.{engine}.{key}")
            edit.setText(str(loaded.engines[engine].get(key) or ""))
            form.addRow(ENGINE_KEY_LABELS.get(key, key) + ":", edit)
            self.engine_edits[(engine, key)] = edit
        sign_row = QHBoxLayout()
        signed = QLabel(CHECKING_SIGN_IN, box)
        signed.setObjectName(f"engineSignedIn-{engine}")
        signed.setWordWrap(True)
        signed.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        sign_row.addWidget(signed, 1)
        button = QPushButton("Sign In…", box)
        button.setObjectName(f"signIn-{engine}")
        button.clicked.connect(lambda: self.open_sign_in(engine))
        sign_row.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
        form.addRow("Signed in:", sign_row)
        self.engine_sign_in[engine] = signed
        note_text = SIGN_IN_NOTES.get(engine)
        if note_text:
            note = QLabel(note_text, box)
            note.setObjectName(f"engineNote-{engine}")
            note.setWordWrap(True)
            form.addRow("", note)
        return box

    def _engine_chosen(self, *_: object) -> None:
        engine = self.engine_choice.currentData() if self.engine_choice is not None else None
        box = self.engine_boxes.get(engine) if engine else None
        if box is None or self.engine_stack is None:
            return
        self.engine_stack.setCurrentWidget(box)
        if engine in self.engine_found and engine not in self.engine_statuses:
            self.load_engine_status(engine)

    def load_engine_status(self, engine: str) -> None:
        """Find the engine's program and read its sign-in (in a job: it probes the program and
        reads the keyring)."""
        cairn = self.cairn
        self.engine_statuses.pop(engine, None)
        self.context.jobs.job(
            lambda: engine_status(cairn, engine),
            key=f"settings-engine-{engine}-{id(self)}",
            what=f"look for the {engine} program",
            parent=self,
        ).success(self._show_engine_status).failure(
            lambda failure: self._engine_status_failed(engine, failure)
        ).run()

    def _show_engine_status(self, st: EngineStatus) -> None:
        self.engine_statuses[st.engine] = st
        found, signed = self.engine_found.get(st.engine), self.engine_sign_in.get(st.engine)
        if found is None or signed is None:
            return  # the page was rebuilt meanwhile; its own job shows it
        f = st.found
        if f.path is not None and f.usable:
            version = f"version {f.version}" if f.version else "version unknown"
            text = f"{f.path} ({version}, from {f.source})"
            if f.note:
                text += f"\n{_sentence(f.note)}"
            _set_tone(found, text, "ok")
        else:
            where = f"{f.path}: " if f.path is not None else ""
            _set_tone(found, _sentence(f"{where}{f.problem or 'not found'}"), "error")
        if st.sign_in is not None:
            _set_tone(signed, f"{st.sign_in.kind.label} (keyring: {st.sign_in.secret})", "ok")
        else:
            problem = next(
                (p for p in st.issues if p.action == ACTION_SIGN_IN or "keyring" in p.what),
                None,
            )
            _set_tone(signed, _sentence(str(problem)) if problem else "Not signed in", "warning")

    def _engine_status_failed(self, engine: str, failure: JobFailure) -> None:
        label = self.engine_found.get(engine)
        if label is not None:
            _set_tone(label, failure.sentence(), "error")

    def open_sign_in(self, engine: str) -> None:
        """The Sign In dialog for the engine; its status is read again once it is signed in."""
        dialog = SignInDialog(self.context, engine, self)
        dialog.sig_signed_in.connect(lambda signed, _kind: self.load_engine_status(signed))
        self.sign_in_dialog = dialog
        dialog.open()

    def _rules_page(self) -> QWidget:
        page = QWidget(self)
        layout = QVBoxLayout(page)
        layout.addWidget(ProtectionsLabel(page))
        self.rules_source = QLabel(page)
        self.rules_source.setObjectName("rulesSource")
        self.rules_source.setWordWrap(True)
        layout.addWidget(self.rules_source)
        hint = QLabel(RULES_HINT, page)
        hint.setWordWrap(True)
        layout.addWidget(hint)
        self.rules_table = QTableWidget(0, 4, page)
        self.rules_table.setObjectName("rulesTable")
        self.rules_table.setHorizontalHeaderLabels(["Rule", "Reason", "Applies when", "Pattern"])
        self.rules_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.rules_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.rules_table.verticalHeader().setVisible(False)
        header = self.rules_table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Interactive)
        layout.addWidget(self.rules_table, 2)
        self.rules_edit = QPlainTextEdit(page)
        self.rules_edit.setObjectName("rulesEditor")
        self.rules_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.rules_edit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.rules_edit.textChanged.connect(self._rules_text_changed)
        layout.addWidget(self.rules_edit, 3)
        row = QHBoxLayout()
        self.validate_button = QPushButton("Validate", page)
        self.validate_button.clicked.connect(self.validate_rules)
        self.save_rules_button = QPushButton("Save Rules", page)
        self.save_rules_button.clicked.connect(self.save_rules)
        self.reset_rules_button = QPushButton("Reset to Defaults", page)
        self.reset_rules_button.clicked.connect(self.reset_rules)
        row.addWidget(self.validate_button)
        row.addWidget(self.save_rules_button)
        row.addStretch(1)
        row.addWidget(self.reset_rules_button)
        layout.addLayout(row)
        self.rules_message = QLabel(page)
        self.rules_message.setObjectName("rulesMessage")
        self.rules_message.setWordWrap(True)
        self.rules_message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        _set_tone(self.rules_message, "")
        layout.addWidget(self.rules_message)
        return page

    # -- loading ---------------------------------------------------------------------------------

    def reload(self) -> None:
        """Read the settings and rules again (in a job) and show them."""
        self._set_busy(True)
        cairn = self.cairn
        self.context.jobs.job(
            lambda: load_settings(cairn),
            key="settings-dialog-load",
            what="read the settings",
            parent=self,
        ).success(self._show_loaded).failure(self._load_failed).finished(
            lambda: self._set_busy(False)
        ).run()

    def _load_failed(self, failure: JobFailure) -> None:
        _set_tone(self.message, failure.sentence(), "error")

    def _show_loaded(self, loaded: LoadedSettings) -> None:
        self.loaded = loaded
        d = loaded.defaults
        self.engine_combo.clear()
        for engine in loaded.engines_offered:
            self.engine_combo.addItem(engine, engine)
        _combo_select(self.engine_combo, d.get("engine") or FALLBACK_ENGINE)
        self.image_edit.setText(d.get("image", ""))
        self.network_combo.blockSignals(True)
        self.network_combo.clear()
        for mode in loaded.networks:
            self.network_combo.addItem(NETWORK_LABELS.get(mode, mode), mode)
        _combo_select(self.network_combo, d.get("network") or FALLBACK_NETWORK)
        self.network_combo.blockSignals(False)
        self.allow_edit.setText(", ".join(filter(None, d.get("allow", "").split(","))))
        self.backend_combo.blockSignals(True)
        self.backend_combo.clear()
        for backend in loaded.backends:
            self.backend_combo.addItem(BACKEND_LABELS.get(backend, backend), backend)
        _combo_select(self.backend_combo, d.get("backend") or FALLBACK_BACKEND)
        self.backend_combo.blockSignals(False)
        self.host_combo.blockSignals(True)
        self.host_combo.clear()
        for name, value in loaded.hosts:
            self.host_combo.addItem(f"{name} ({value})", name)
        _combo_select(self.host_combo, d.get("host") or FALLBACK_HOST)
        self.host_combo.blockSignals(False)
        self._network_changed()
        self._backend_changed()
        self._fill_engines_page(loaded)
        self._show_rules(loaded.rules)
        self._set_enabled(True)

    def _show_rules(self, rules: dict[str, Any]) -> None:
        user = bool(rules.get("user"))
        path = rules.get("path") or ""
        if user:
            source = f"Your rules ({path}) replace the ones Cairn ships."
        else:
            source = "Cairn's own rules are in force. Saving the text below makes it your rules."
        _set_tone(self.rules_source, source, "warning" if user else None)
        self.reset_rules_button.setEnabled(user)
        self._fill_rules_table(rules.get("rules") or [])
        self.rules_edit.blockSignals(True)
        self.rules_edit.setPlainText(rules.get("text") or "")
        self.rules_edit.blockSignals(False)
        problem = rules.get("problem")
        _set_tone(
            self.rules_message,
            f"Your rules cannot be used: {problem}" if problem else "",
            "error" if problem else None,
        )

    def _fill_rules_table(self, rules: list[dict]) -> None:
        self.rules_table.setRowCount(len(rules))
        for row, rule in enumerate(rules):
            cells = [
                rule.get("id", ""),
                rule.get("reason", ""),
                _when_text(rule.get("when") or {}),
                rule.get("pattern", ""),
            ]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(str(text))
                item.setToolTip(str(text))
                self.rules_table.setItem(row, column, item)

    # -- reactions -------------------------------------------------------------------------------

    def _network_changed(self, *_: object) -> None:
        self.allow_edit.setEnabled(self.network_combo.currentData() == "allowlist")

    def _backend_changed(self, *_: object) -> None:
        self.host_warning.setVisible(self.backend_combo.currentData() == "host")

    # -- the sandbox host ----------------------------------------------------------------------

    def _host_changed(self, *_: object) -> None:
        self.send_image_button.setVisible(False)
        _set_tone(self.host_result, HOST_HINT)

    def test_host(self) -> None:
        """Test the chosen host in a job: reachable, API version, the image, free disk."""
        name = self.host_combo.currentData()
        if not name:
            return
        cairn = self.cairn
        self.test_host_button.setEnabled(False)
        _set_tone(self.host_result, f"Testing {name}…")
        self.context.jobs.job(
            lambda: cairn.hosts.check(name),
            key="settings-host-test",
            what=f"test the sandbox host {name}",
            parent=self,
        ).success(self._show_host_check).failure(self._host_failed).finished(
            lambda: self.test_host_button.setEnabled(True)
        ).run()

    def _show_host_check(self, check: Check) -> None:
        lines = [_sentence(check.detail), *check.facts]
        if check.fix:
            lines.append(f"To fix, {check.fix}.")
        tone = "ok" if check.state == OK else "error" if check.state == "error" else "warning"
        _set_tone(self.host_result, "\n".join(lines), tone)
        self.send_image_button.setVisible(ACTION_SEND_IMAGE in check.actions())
        self.send_image_button.setEnabled(True)

    def _host_failed(self, failure: JobFailure) -> None:
        _set_tone(self.host_result, failure.sentence(), "error")

    def send_image(self) -> None:
        """Send the sandbox image to the chosen host in a job, then test it again."""
        name = self.host_combo.currentData()
        if not name:
            return
        cairn = self.cairn
        self.send_image_button.setEnabled(False)
        _set_tone(self.host_result, f"Sending the sandbox image to {name}…")
        self.context.jobs.job(
            lambda: cairn.hosts.send_image(name),
            key="settings-host-send",
            what=f"send the sandbox image to {name}",
            parent=self,
        ).success(lambda _id: self.test_host()).failure(self._send_failed).run()

    def _send_failed(self, failure: JobFailure) -> None:
        _set_tone(self.host_result, failure.sentence(), "error")
        self.send_image_button.setEnabled(True)

    def _rules_text_changed(self) -> None:
        if self.rules_message.text():  # a verdict on the earlier text no longer holds
            _set_tone(self.rules_message, "")

    def _set_enabled(self, enabled: bool) -> None:
        for widget in (
            self.ok_button,
            self.apply_button,
            self.validate_button,
            self.save_rules_button,
        ):
            widget.setEnabled(enabled)
        if not enabled:
            self.reset_rules_button.setEnabled(False)
        elif self.loaded is not None:
            self.reset_rules_button.setEnabled(bool(self.loaded.rules.get("user")))

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._set_enabled(not busy and self.loaded is not None)

    # -- the data folder (Qt settings, read by gui/main.py at the next start) ------------------

    def _show_next_data_dir(self) -> None:
        chosen = next_data_dir(self.context.settings)
        current = self.data_dir_edit.text()
        if chosen and chosen != current:
            _set_tone(
                self.data_dir_note,
                f"Cairn will use {chosen} at the next start. {DATA_DIR_NOTE}",
                "warning",
            )
        else:
            _set_tone(self.data_dir_note, DATA_DIR_NOTE)

    def pick_folder(self) -> str:
        """Ask for a folder (a separate method, so tests can answer it)."""
        start = next_data_dir(self.context.settings) or self.data_dir_edit.text()
        return QFileDialog.getExistingDirectory(self, "Data Folder for Cairn", start)

    def choose_data_dir(self) -> None:
        folder = self.pick_folder()
        if folder:
            self.set_next_data_dir(folder)

    def set_next_data_dir(self, folder: str | Path) -> None:
        """Store the data folder for the next start; the running Cairn keeps its own."""
        self.context.settings.setValue(DATA_DIR_KEY, str(Path(folder).expanduser()))
        self.context.settings.sync()
        self._show_next_data_dir()

    # -- writing ---------------------------------------------------------------------------------

    def changes(self) -> Changes:
        """What differs between the form and what was loaded (blank text fields: unset)."""
        loaded = self.loaded
        if loaded is None:
            return Changes()
        to_set: dict[str, str] = {}
        to_unset: list[str] = []
        d = loaded.defaults

        def combo(key: str, widget: QComboBox, fallback: str) -> None:
            value = widget.currentData()
            if value is not None and value != (d.get(key) or fallback):
                to_set[f"defaults.{key}"] = value

        def text(key: str, value: str, before: str | None) -> None:
            value = value.strip()
            before = (before or "").strip()
            if value == before:
                return
            if value:
                to_set[key] = value
            elif before:
                to_unset.append(key)

        combo("engine", self.engine_combo, FALLBACK_ENGINE)
        text("defaults.image", self.image_edit.text(), d.get("image"))
        combo("network", self.network_combo, FALLBACK_NETWORK)
        allow_before = ", ".join(filter(None, (d.get("allow") or "").split(",")))
        text("defaults.allow", self.allow_edit.text(), allow_before)
        combo("backend", self.backend_combo, FALLBACK_BACKEND)
        combo("host", self.host_combo, FALLBACK_HOST)
        for (engine, key), edit in self.engine_edits.items():
            text(f"engines.{engine}.{key}", edit.text(), loaded.engines.get(engine, {}).get(key))
        rules_text = self.rules_edit.toPlainText()
        rules_changed = rules_text.strip() != (loaded.rules.get("text") or "").strip()
        return Changes(to_set, tuple(to_unset), rules_text if rules_changed else None)

    def apply(self) -> None:
        """Write what changed (in a write job); a refusal is shown here and nothing is written."""
        if self.busy or self.loaded is None:
            return
        changes = self.changes()
        if not changes:
            _set_tone(self.message, "Nothing to save: no setting was changed.")
            if self._accept_after_write:
                self._accept_after_write = False
                self.accept()
            return
        _set_tone(self.message, "Saving…")
        self._set_busy(True)
        names = [*changes.set, *changes.unset] + (["risk rules"] if changes.rules_text else [])
        cairn = self.cairn
        self.context.jobs.job(
            lambda: apply_changes(cairn, changes),
            write=True,
            what="save the settings",
            parent=self,
        ).success(lambda loaded: self._written(loaded, names)).failure(self._write_failed).finished(
            lambda: self._set_busy(False)
        ).run()

    def accept_changes(self) -> None:
        """OK: write what changed, then close; a refusal keeps the dialog open with the reason."""
        self._accept_after_write = True
        self.apply()

    def _written(self, loaded: LoadedSettings, names: list[str]) -> None:
        self._show_loaded(loaded)
        _set_tone(self.message, f"Saved: {', '.join(names)}.", "ok")
        self.sig_saved.emit(names)
        if self._accept_after_write:
            self._accept_after_write = False
            self.accept()

    def _write_failed(self, failure: JobFailure) -> None:
        self._accept_after_write = False
        _set_tone(self.message, failure.message, "error")
        if not failure.message.startswith("nothing was saved"):
            self.reload()  # part was written: show what the file holds now

    # -- risk rules ------------------------------------------------------------------------------

    def validate_rules(self) -> None:
        text, cairn = self.rules_edit.toPlainText(), self.cairn
        self.context.jobs.job(
            lambda: cairn.approvals.check_risk_rules(text),
            key="settings-dialog-validate",
            what="check the risk rules",
            parent=self,
        ).success(self._rules_valid).failure(self._rules_failed).run()

    def _rules_valid(self, rules: list[dict]) -> None:
        self._fill_rules_table(rules)
        _set_tone(self.rules_message, f"Valid: {len(rules)} rule(s). Not saved yet.", "ok")

    def _rules_failed(self, failure: JobFailure) -> None:
        _set_tone(self.rules_message, failure.message, "error")

    def save_rules(self) -> None:
        if self.busy:
            return
        text, cairn = self.rules_edit.toPlainText(), self.cairn
        self._set_busy(True)
        self.context.jobs.job(
            lambda: cairn.approvals.set_risk_rules(text),
            write=True,
            what="save the risk rules",
            parent=self,
        ).success(
            lambda rules: self._rules_written(
                rules, "Saved: your rules apply to the next command a run asks about."
            )
        ).failure(self._rules_failed).finished(lambda: self._set_busy(False)).run()

    def confirm_reset(self) -> bool:
        """Ask before dropping the user's rules (a separate method, so tests can answer it)."""
        answer = QMessageBox.question(
            self,
            "Reset Risk Rules",
            "Remove your risk rules and go back to the ones Cairn ships?",
            QMessageBox.StandardButton.Reset | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        return answer == QMessageBox.StandardButton.Reset

    def reset_rules(self) -> None:
        if self.busy or not self.confirm_reset():
            return
        self._set_busy(True)
        cairn = self.cairn

        def work() -> dict:
            cairn.approvals.reset_risk_rules()
            return cairn.approvals.risk_rules()

        self.context.jobs.job(work, write=True, what="reset the risk rules", parent=self).success(
            lambda rules: self._rules_written(rules, "Cairn's own rules are in force again.")
        ).failure(self._rules_failed).finished(lambda: self._set_busy(False)).run()

    def _rules_written(self, rules: dict, note: str) -> None:
        if self.loaded is not None:
            self.loaded.rules = rules
        self._show_rules(rules)
        if not rules.get("problem"):
            _set_tone(self.rules_message, note, "ok")
        self.sig_saved.emit(["risk rules"])
