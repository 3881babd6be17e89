"""The Settings dialog over a real facade on a temporary data folder: it shows what the settings
file holds, writes only what changed, refuses bad values with the reason and writes nothing,
warns about the host backend, edits the risk rules, and stores the next data folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core import signin
from core.engines.codex import CHATGPT_SIGN_IN_NOTE
from core.settings import settings_path
from core.signin import Found
from gui.context import AppContext
from gui.qt import QLabel, QLineEdit, QPushButton, Qt, QTabWidget
from gui.settings.dialog import DATA_DIR_KEY, HOST_WARNING, SettingsDialog

OVERRIDE = {
    "version": 3,
    "rules": [{"id": "make-deploy", "pattern": "\\bmake\\s+deploy\\b", "reason": "deploys"}],
}


@pytest.fixture
def open_dialog(qtbot, context):
    def make() -> SettingsDialog:
        dialog = SettingsDialog(context)
        qtbot.addWidget(dialog)
        dialog.show()
        qtbot.waitUntil(lambda: dialog.loaded is not None and not dialog.busy, timeout=10_000)
        return dialog

    return make


def settle(qtbot, dialog: SettingsDialog) -> None:
    qtbot.waitUntil(lambda: not dialog.busy and dialog.context.jobs.idle(), timeout=10_000)


def stored(cairn) -> dict:
    path = settings_path(cairn.data.root)
    return json.loads(path.read_text()) if path.exists() else {}


def test_the_pages_are_a_plain_tab_widget_others_can_add_to(open_dialog):
    dialog = open_dialog()
    assert isinstance(dialog.pages, QTabWidget)
    assert [dialog.pages.tabText(i) for i in range(dialog.pages.count())] == [
        "General",
        "Engines",
        "Risk rules",
    ]


def test_fields_show_what_the_settings_file_holds(cairn, open_dialog):
    cairn.settings.set("defaults.engine", "codex")
    cairn.settings.set("defaults.image", "my-sandbox:2")
    cairn.settings.set("defaults.network", "allowlist")
    cairn.settings.set("defaults.allow", "api.example.com:443,127.0.0.1:11434")
    cairn.settings.set("engines.codex.model", "gpt-5.5")
    dialog = open_dialog()
    assert dialog.engine_combo.currentData() == "codex"
    assert dialog.image_edit.text() == "my-sandbox:2"
    assert dialog.network_combo.currentData() == "allowlist"
    assert dialog.allow_edit.isEnabled()
    assert dialog.allow_edit.text() == "api.example.com:443, 127.0.0.1:11434"
    assert dialog.backend_combo.currentData() == "docker"
    assert dialog.engine_edits[("codex", "model")].text() == "gpt-5.5"
    assert dialog.engine_edits[("claude-code", "model")].text() == ""
    assert {key for _, key in dialog.engine_edits} == {
        "binary",
        "version",
        "base_url",
        "model",
        "api_key_secret",
    }
    assert not dialog.changes()


def test_unset_defaults_show_the_fallbacks_and_the_allowlist_is_off(open_dialog):
    dialog = open_dialog()
    assert dialog.engine_combo.currentData() == "shell"
    assert dialog.network_combo.currentData() == "none"
    assert not dialog.allow_edit.isEnabled()
    dialog.network_combo.setCurrentIndex(dialog.network_combo.findData("allowlist"))
    assert dialog.allow_edit.isEnabled()


def test_apply_writes_only_the_changed_keys(qtbot, cairn, open_dialog):
    cairn.settings.set("engines.codex.model", "old")
    cairn.settings.set("defaults.image", "keep-me:1")
    dialog = open_dialog()
    dialog.engine_combo.setCurrentIndex(dialog.engine_combo.findData("claude-code"))
    dialog.network_combo.setCurrentIndex(dialog.network_combo.findData("allowlist"))
    dialog.allow_edit.setText("api.example.com:443")
    dialog.engine_edits[("codex", "model")].setText("")
    dialog.engine_edits[("claude-code", "model")].setText("sonnet")
    changes = dialog.changes()
    assert changes.set == {
        "defaults.engine": "claude-code",
        "defaults.network": "allowlist",
        "defaults.allow": "api.example.com:443",
        "engines.claude-code.model": "sonnet",
    }
    assert changes.unset == ("engines.codex.model",) and changes.rules_text is None
    with qtbot.waitSignal(dialog.sig_saved, timeout=10_000):
        dialog.apply_button.click()
    settle(qtbot, dialog)
    assert stored(cairn) == {
        "defaults": {
            "engine": "claude-code",
            "image": "keep-me:1",
            "network": "allowlist",
            "allow": "api.example.com:443",
        },
        "engines": {"claude-code": {"model": "sonnet"}},
    }
    assert "Saved" in dialog.message.text()
    assert not dialog.changes()
    assert dialog.isVisible()


def test_ok_writes_and_closes(qtbot, cairn, open_dialog):
    dialog = open_dialog()
    dialog.image_edit.setText("cairn-sandbox:2")
    dialog.ok_button.click()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=10_000)
    assert cairn.settings.get("defaults.image") == "cairn-sandbox:2"


def test_an_invalid_allowlist_entry_is_refused_with_the_reason_and_nothing_is_written(
    qtbot, cairn, open_dialog
):
    dialog = open_dialog()
    dialog.image_edit.setText("fine-image:1")  # valid, but must not be written alone
    dialog.network_combo.setCurrentIndex(dialog.network_combo.findData("allowlist"))
    dialog.allow_edit.setText("api.example.com:443, example.com")
    dialog.ok_button.click()
    settle(qtbot, dialog)
    assert dialog.isVisible()
    text = dialog.message.text()
    assert "nothing was saved" in text
    assert "defaults.allow" in text and "'example.com' is not a usable host:port" in text
    assert dialog.message.property("tone") == "error"
    assert not settings_path(cairn.data.root).exists()


def test_the_host_backend_shows_the_unsafe_warning_and_is_stored(
    qtbot, cairn, open_dialog, monkeypatch
):
    monkeypatch.delenv("CAIRN_BACKEND", raising=False)
    dialog = open_dialog()
    assert dialog.host_warning.isHidden()
    dialog.backend_combo.setCurrentIndex(dialog.backend_combo.findData("host"))
    assert not dialog.host_warning.isHidden()
    assert dialog.host_warning.text() == HOST_WARNING and "UNSAFE" in HOST_WARNING
    with qtbot.waitSignal(dialog.sig_saved, timeout=10_000):
        dialog.apply()
    settle(qtbot, dialog)
    assert cairn.settings.get("defaults.backend") == "host"
    from core.sandbox.host import HostBackend

    assert isinstance(cairn.sandboxes.backend, HostBackend)
    dialog.backend_combo.setCurrentIndex(dialog.backend_combo.findData("docker"))
    assert dialog.host_warning.isHidden()


def test_the_data_folder_is_shown_and_a_new_one_is_stored_for_the_next_start(
    qtbot, context, settings, open_dialog, tmp_path, data_dir, monkeypatch
):
    dialog = open_dialog()
    assert dialog.data_dir_edit.text() == str(data_dir) and dialog.data_dir_edit.isReadOnly()
    assert "next start" in dialog.data_dir_note.text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setattr(dialog, "pick_folder", lambda: str(elsewhere))
    dialog.data_dir_button.click()
    assert settings.value(DATA_DIR_KEY) == str(elsewhere)
    assert str(elsewhere) in dialog.data_dir_note.text()
    assert "next start" in dialog.data_dir_note.text()
    assert dialog.data_dir_edit.text() == str(data_dir)  # the running Cairn keeps its folder
    monkeypatch.setattr(dialog, "pick_folder", lambda: "")  # cancelled: nothing changes
    dialog.data_dir_button.click()
    assert settings.value(DATA_DIR_KEY) == str(elsewhere)


def test_risk_rules_validate_save_and_reset_round_trip(qtbot, cairn, open_dialog, monkeypatch):
    dialog = open_dialog()
    assert "Cairn's own rules" in dialog.rules_source.text()
    bundled_rows = dialog.rules_table.rowCount()
    assert bundled_rows == len(cairn.approvals.risk_rules()["rules"]) > 0
    assert not dialog.reset_rules_button.isEnabled()

    dialog.rules_edit.setPlainText(
        json.dumps({"version": 1, "rules": [{"id": "broken", "pattern": "(", "reason": "r"}]})
    )
    dialog.validate_button.click()
    qtbot.waitUntil(lambda: dialog.rules_message.text() != "", timeout=10_000)
    assert "rule 'broken'" in dialog.rules_message.text()
    assert dialog.rules_message.property("tone") == "error"
    dialog.save_rules_button.click()
    settle(qtbot, dialog)
    assert "rule 'broken'" in dialog.rules_message.text()
    assert not (cairn.data.root / "risk-rules.json").exists()

    dialog.rules_edit.setPlainText(json.dumps(OVERRIDE, indent=2))
    dialog.validate_button.click()
    qtbot.waitUntil(lambda: "Valid" in dialog.rules_message.text(), timeout=10_000)
    assert dialog.rules_table.rowCount() == 1
    assert not (cairn.data.root / "risk-rules.json").exists()  # validating writes nothing
    with qtbot.waitSignal(dialog.sig_saved, timeout=10_000):
        dialog.save_rules_button.click()
    settle(qtbot, dialog)
    assert json.loads((cairn.data.root / "risk-rules.json").read_text()) == OVERRIDE
    assert cairn.approvals.risk_rules()["user"] is True
    assert cairn.approvals.rules.version == 3
    assert dialog.rules_table.item(0, 0).text() == "make-deploy"
    assert "Your rules" in dialog.rules_source.text()
    assert dialog.reset_rules_button.isEnabled()

    monkeypatch.setattr(dialog, "confirm_reset", lambda: False)
    dialog.reset_rules_button.click()
    assert (cairn.data.root / "risk-rules.json").exists()
    monkeypatch.setattr(dialog, "confirm_reset", lambda: True)
    with qtbot.waitSignal(dialog.sig_saved, timeout=10_000):
        dialog.reset_rules_button.click()
    settle(qtbot, dialog)
    assert not (cairn.data.root / "risk-rules.json").exists()
    assert dialog.rules_table.rowCount() == bundled_rows
    assert "Cairn's own rules" in dialog.rules_source.text()
    assert not dialog.reset_rules_button.isEnabled()


def test_rules_edited_then_ok_are_saved_with_the_settings_or_not_at_all(qtbot, cairn, open_dialog):
    dialog = open_dialog()
    dialog.engine_combo.setCurrentIndex(dialog.engine_combo.findData("codex"))
    dialog.rules_edit.setPlainText('{"version": 1, "rules": [{"id": "x", "pattern": "a"}]}')
    dialog.apply()
    settle(qtbot, dialog)
    assert "risk rules: rule 'x' needs a 'reason'" in dialog.message.text()
    assert not settings_path(cairn.data.root).exists()
    assert not (cairn.data.root / "risk-rules.json").exists()
    dialog.rules_edit.setPlainText(json.dumps(OVERRIDE))
    with qtbot.waitSignal(dialog.sig_saved, timeout=10_000):
        dialog.apply()
    settle(qtbot, dialog)
    assert cairn.settings.get("defaults.engine") == "codex"
    assert cairn.approvals.risk_rules()["version"] == 3


def test_a_broken_override_is_shown_with_its_problem(qtbot, cairn, open_dialog):
    (cairn.data.root / "risk-rules.json").write_text('{"version": 1, "rules": [')
    dialog = open_dialog()
    assert "Your rules cannot be used" in dialog.rules_message.text()
    assert dialog.rules_edit.toPlainText() == '{"version": 1, "rules": ['
    assert dialog.reset_rules_button.isEnabled()


def test_an_unreadable_settings_file_is_reported_and_nothing_can_be_saved(qtbot, cairn, context):
    settings_path(cairn.data.root).write_text("{not json")
    dialog = SettingsDialog(context)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.message.text() != "", timeout=10_000)
    settle(qtbot, dialog)
    assert "cannot be read" in dialog.message.text()
    assert not dialog.ok_button.isEnabled() and not dialog.apply_button.isEnabled()
    assert settings_path(cairn.data.root).read_text() == "{not json"


def test_the_dialog_never_touches_the_disk_on_the_gui_thread(qtbot, cairn, context, monkeypatch):
    import threading

    main = threading.get_ident()
    calls: list[str] = []
    spied = [(cairn.settings, n) for n in ("keys", "get", "check", "set")]
    spied.append((cairn.approvals, "risk_rules"))
    for service, name in spied:
        original = getattr(service, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            if threading.get_ident() == main:
                calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(service, name, spy)
    dialog = SettingsDialog(context)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.loaded is not None and not dialog.busy, timeout=10_000)
    dialog.image_edit.setText("other:1")
    dialog.apply()
    settle(qtbot, dialog)
    assert calls == []
    assert cairn.settings.get("defaults.image") == "other:1"


def test_the_new_task_dialog_preselects_the_default_engine(qtbot, tmp_path):
    from gui.dialogs import NewTaskDialog

    dialog = NewTaskDialog([tmp_path], ("shell", "claude-code", "codex"), default_engine="codex")
    qtbot.addWidget(dialog)
    assert dialog.engine_combo.currentText() == "codex"
    assert "agent" in dialog.hint.text()
    other = NewTaskDialog([tmp_path], ("shell", "codex"), default_engine="gone")
    qtbot.addWidget(other)
    assert other.engine_combo.currentText() == "shell"


# -- Settings ▸ Engines --------------------------------------------------------------------------

CLAUDE = Path("/home/me/.local/bin/claude")
CLAUDE_NATIVE = Path("/home/me/.local/share/claude/versions/2.1.197")


class FakeSecrets:
    """The SecretStore methods signing in uses, on a dict."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, name: str, value: str) -> None:
        self.values[name] = value

    def has(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str) -> str:
        return self.values[name]


@pytest.fixture
def found_claude(monkeypatch):
    """claude-code found where the native installer puts it; codex nowhere."""

    def find(name, engine_settings, **_):
        if name == "claude-code":
            return Found(name, CLAUDE, CLAUDE_NATIVE, "2.1.197", "native installer", None)
        return Found(name, None, None, None, "", "Codex was not found on PATH: install it")

    monkeypatch.setattr(signin, "find_engine", find)


@pytest.fixture
def fake_keyring_dialog(qtbot, data_dir, settings, found_claude):
    from core.app import Cairn

    secrets = FakeSecrets()
    facade = Cairn(data_dir, secrets=secrets)  # type: ignore[arg-type]
    ctx = AppContext(facade, settings=settings, data_dir=data_dir)
    dialog = SettingsDialog(ctx)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.loaded is not None and not dialog.busy, timeout=10_000)
    yield dialog, secrets
    dialog.close()
    ctx.close()


def choose_engine(dialog: SettingsDialog, engine: str) -> None:
    assert dialog.engine_choice is not None
    dialog.engine_choice.setCurrentIndex(dialog.engine_choice.findData(engine))


def test_the_shell_engine_shows_no_endpoint_key_or_model(qtbot, open_dialog, found_claude):
    dialog = open_dialog()
    dialog.pages.setCurrentIndex(1)
    choose_engine(dialog, "shell")
    box = dialog.engine_boxes["shell"]
    assert dialog.engine_stack is not None and dialog.engine_stack.currentWidget() is box
    assert not [key for engine, key in dialog.engine_edits if engine == "shell"]
    assert not box.findChildren(QLineEdit) and not box.findChildren(QPushButton)
    note = box.findChild(QLabel, "engineNote-shell")
    assert note.text() == "The shell engine runs your commands; it needs no model or key."
    assert note.isVisible()
    choose_engine(dialog, "claude-code")
    assert not note.isVisible()
    assert dialog.engine_edits[("claude-code", "model")].isVisible()


def test_an_agent_engine_shows_its_found_path_and_version(qtbot, open_dialog, found_claude):
    dialog = open_dialog()
    dialog.pages.setCurrentIndex(1)
    choose_engine(dialog, "claude-code")
    found = dialog.engine_found["claude-code"]
    qtbot.waitUntil(lambda: "claude-code" in dialog.engine_statuses, timeout=10_000)
    assert found.text() == f"{CLAUDE} (version 2.1.197, from native installer)"
    assert found.isVisible()
    assert {key for engine, key in dialog.engine_edits if engine == "claude-code"} == {
        "binary",
        "version",
        "base_url",
        "model",
        "api_key_secret",
    }
    assert dialog.engine_boxes["claude-code"].findChild(QPushButton, "signIn-claude-code")
    choose_engine(dialog, "codex")
    qtbot.waitUntil(lambda: "codex" in dialog.engine_statuses, timeout=10_000)
    assert "Codex was not found on PATH" in dialog.engine_found["codex"].text()
    note = dialog.engine_boxes["codex"].findChild(QLabel, "engineNote-codex")
    assert note.text() == CHATGPT_SIGN_IN_NOTE and note.isVisible()


def test_sign_in_stores_the_value_clears_the_field_and_shows_it(qtbot, fake_keyring_dialog):
    dialog, secrets = fake_keyring_dialog
    dialog.pages.setCurrentIndex(1)
    choose_engine(dialog, "claude-code")
    qtbot.waitUntil(lambda: "claude-code" in dialog.engine_statuses, timeout=10_000)
    signed = dialog.engine_sign_in["claude-code"]
    assert "not signed in" in signed.text()
    dialog.engine_boxes["claude-code"].findChild(QPushButton, "signIn-claude-code").click()
    sign_in = dialog.sign_in_dialog
    assert sign_in is not None and sign_in.isVisible()
    assert [sign_in.kind_combo.itemData(i) for i in range(sign_in.kind_combo.count())] == [
        "oauth-token",
        "api-key",
    ]
    assert "claude setup-token" in sign_in.how_label.text()
    assert sign_in.value_edit.echoMode() == QLineEdit.EchoMode.Password

    sign_in.value_edit.setText("sk-ant-api03-wrong-kind-for-a-token")  # refused: nothing stored
    qtbot.keyClick(sign_in.value_edit, Qt.Key.Key_Return)
    assert sign_in.value_edit.text() == ""
    qtbot.waitUntil(
        lambda: "looks like an Anthropic API key" in sign_in.message.text(), timeout=5000
    )
    assert "sk-ant-api03-wrong" not in sign_in.message.text()
    assert secrets.values == {} and sign_in.isVisible()

    token = "sk-ant-oat01-" + "t" * 40
    sign_in.value_edit.setText(token)
    qtbot.keyClick(sign_in.value_edit, Qt.Key.Key_Return)
    assert sign_in.value_edit.text() == ""  # cleared once queued, before the keyring answers
    qtbot.waitUntil(lambda: not sign_in.isVisible(), timeout=5000)
    assert secrets.values == {"CLAUDE_CODE_OAUTH_TOKEN": token}
    qtbot.waitUntil(lambda: signed.text().startswith("Claude subscription"), timeout=10_000)
    assert (
        signed.text() == "Claude subscription (long-lived token) (keyring: CLAUDE_CODE_OAUTH_TOKEN)"
    )
    assert token not in signed.text()


def test_the_engine_status_is_read_in_a_job(qtbot, cairn, context, monkeypatch, found_claude):
    import threading

    main = threading.get_ident()
    threads: list[bool] = []
    original = signin.status

    def spy(*args, **kwargs):
        threads.append(threading.get_ident() == main)
        return original(*args, **kwargs)

    monkeypatch.setattr(signin, "status", spy)
    dialog = SettingsDialog(context)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: "claude-code" in dialog.engine_statuses, timeout=10_000)
    assert threads and not any(threads)
