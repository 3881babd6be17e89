"""The Credentials page on a real facade: secrets listed by name, added, rotated and removed
through jobs with their values never shown, a task's grants granted and revoked, and a locked
keyring shown with its fix. The keyring is an in-memory stand-in, except in the one test marked
`keyring`, which uses the real Secret Service."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from keyring.errors import KeyringLocked as LibraryKeyringLocked

from core.credentials import INDEX_KEY, SecretMissing, SecretStore
from core.ids import new_id
from core.models import Task
from core.redact import Redactor
from gui.qt import QComboBox, QLabel, QLineEdit, QMessageBox, QTableWidget, QWidget
from gui.settings import credentials as credentials_page
from gui.settings.credentials import CredentialsPage, open_credentials_dialog

WAIT_MS = 10_000


class MemoryKeyring:
    """A keyring backend in a dict; with `locked` set every call fails as a locked keyring does.
    It passes for the Secret Service backend, so the page treats it as the OS keyring."""

    __module__ = "keyring.backends.SecretService"

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], str] = {}
        self.locked = False

    def _check(self) -> None:
        if self.locked:
            raise LibraryKeyringLocked("Failed to unlock the collection!")

    def get_password(self, service: str, username: str) -> str | None:
        self._check()
        return self.values.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self._check()
        self.values[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        from keyring.errors import PasswordDeleteError

        self._check()
        if self.values.pop((service, username), None) is None:
            raise PasswordDeleteError("not found")


MemoryKeyring.__name__ = MemoryKeyring.__qualname__ = "Keyring"


class PlaintextKeyring(MemoryKeyring):
    __module__ = "keyrings.alt.file"


PlaintextKeyring.__name__ = PlaintextKeyring.__qualname__ = "PlaintextKeyring"


@pytest.fixture
def backend() -> MemoryKeyring:
    return MemoryKeyring()


@pytest.fixture
def secrets(backend) -> SecretStore:
    return SecretStore(backend=backend, redactor=Redactor())


@pytest.fixture
def cairn(data_dir: Path, secrets):
    """The facade with its secrets in the stand-in keyring (overrides the conftest fixture)."""
    from core.app import Cairn

    facade = Cairn(data_dir, secrets=secrets)
    yield facade
    facade.close()


@pytest.fixture
def tasks(cairn, repo) -> dict[str, str]:
    """A task made from a folder and a child of it (continue): their ids."""
    root = cairn.tasks.new(repo, title="login fix").task
    child = Task(
        new_id("task"),
        "logout too",
        root.source_id,
        root.workspace_id,
        "shell",
        "",
        root.id,
        "continue",
        None,
        time.time(),
    )
    cairn.ctx.store.add_task(child)
    return {"root": root.id, "child": child.id}


def make_page(qtbot, context) -> CredentialsPage:
    page = CredentialsPage(context)
    qtbot.addWidget(page)
    page.show()
    settle(qtbot, context)
    return page


def settle(qtbot, context) -> None:
    qtbot.waitUntil(context.jobs.idle, timeout=WAIT_MS)


def listed(page: CredentialsPage) -> list[str]:
    table = page.secrets_table
    return [table.item(row, 0).text() for row in range(table.rowCount())]


def grants_shown(page: CredentialsPage) -> list[list[str]]:
    table = page.grants_table
    return [
        [table.item(row, col).text() for col in range(table.columnCount())]
        for row in range(table.rowCount())
    ]


def every_text(root: QWidget) -> list[str]:
    """What any line edit, label, combo box or table cell under `root` holds."""
    texts = []
    for edit in root.findChildren(QLineEdit):
        texts += [edit.text(), edit.displayText(), edit.placeholderText()]
    texts += [label.text() for label in root.findChildren(QLabel)]
    for combo in root.findChildren(QComboBox):
        texts += [combo.itemText(i) for i in range(combo.count())] + [combo.currentText()]
    for table in root.findChildren(QTableWidget):
        texts += [
            table.item(r, c).text()
            for r in range(table.rowCount())
            for c in range(table.columnCount())
            if table.item(r, c) is not None
        ]
    return texts


def test_the_secret_names_in_the_keyring_are_listed_and_the_keyring_named(qtbot, context, secrets):
    secrets.set("github-token", "ghp-value-1")
    secrets.set("api.key", "sk-value-2")
    page = make_page(qtbot, context)
    assert listed(page) == ["api.key", "github-token"]
    assert "keyring.backends.SecretService.Keyring" in page.keyring_label.text()
    assert page.retry_button.isHidden() and page.keyring_warning.isHidden()
    assert "ghp-value-1" not in every_text(page) and "sk-value-2" not in every_text(page)


def test_add_stores_the_value_empties_its_field_and_never_shows_it(qtbot, context, secrets):
    page = make_page(qtbot, context)
    value = f"canary-{uuid.uuid4().hex}"
    page.name_edit.setText("deploy-key")
    page.value_edit.setText(value)
    assert page.value_edit.echoMode() == QLineEdit.EchoMode.Password
    qtbot.mouseClick(page.add_button, credentials_page.Qt.MouseButton.LeftButton)
    assert page.value_edit.text() == ""  # emptied as soon as the job is queued, before it ran
    assert not page.value_edit.isUndoAvailable()
    settle(qtbot, context)
    assert listed(page) == ["deploy-key"]
    assert secrets.get("deploy-key") == value
    assert page.name_edit.text() == ""
    assert "Stored" in page.secrets_message.text()
    assert not any(value in text for text in every_text(page))


def test_rotate_replaces_the_stored_value(qtbot, context, secrets):
    secrets.set("api.key", "first-value")
    page = make_page(qtbot, context)
    assert page.select_secret("api.key")
    page.value_edit.setText("second-value")
    page.rotate_button.click()
    assert page.value_edit.text() == ""
    settle(qtbot, context)
    assert secrets.get("api.key") == "second-value"
    assert "Rotated" in page.secrets_message.text()
    assert page.selected_secret() == "api.key"
    assert not any("second-value" in text for text in every_text(page))


def test_adding_a_name_already_stored_points_to_rotate_and_writes_nothing(qtbot, context, secrets):
    secrets.set("api.key", "first-value")
    page = make_page(qtbot, context)
    page.name_edit.setText("api.key")
    page.value_edit.setText("other-value")
    page.add_button.click()
    assert context.jobs.idle()
    assert "Rotate" in page.secrets_message.text()
    assert secrets.get("api.key") == "first-value"


def test_remove_asks_naming_the_tasks_with_grants_then_removes(
    qtbot, context, cairn, secrets, tasks, monkeypatch
):
    secrets.set("api.key", "value-1234")
    cairn.credentials.grant(tasks["root"], "api.key", "API_KEY")
    asked: list[str] = []

    def accept(_parent, _title, text, *_args):
        asked.append(text)
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(credentials_page.QMessageBox, "question", accept)
    page = make_page(qtbot, context)
    assert page.select_secret("api.key")
    page.remove_button.click()
    settle(qtbot, context)
    assert len(asked) == 1
    assert "api.key" in asked[0] and "login fix" in asked[0]
    assert "logout too" not in asked[0]  # the child only inherits the grant
    assert listed(page) == []
    with pytest.raises(SecretMissing):
        secrets.get("api.key")
    assert "Removed" in page.secrets_message.text()


def test_remove_cancelled_keeps_the_secret(qtbot, context, secrets, monkeypatch):
    secrets.set("api.key", "value-1234")
    monkeypatch.setattr(
        credentials_page.QMessageBox, "question", lambda *_a: QMessageBox.StandardButton.Cancel
    )
    page = make_page(qtbot, context)
    page.select_secret("api.key")
    page.remove_button.click()
    settle(qtbot, context)
    assert listed(page) == ["api.key"] and secrets.get("api.key") == "value-1234"


@pytest.mark.parametrize("name", ["has space", "colon:name", "x" * 65, "slash/name"])
def test_an_invalid_name_is_refused_inline_and_nothing_is_stored(qtbot, context, backend, name):
    page = make_page(qtbot, context)
    page.name_edit.setText(name)
    page.value_edit.setText("value-1234")
    page.add_button.click()
    assert context.jobs.idle()  # no job was queued
    assert "is not a valid secret name" in page.secrets_message.text()
    assert page.secrets_message.isVisible()
    assert backend.values == {}
    assert listed(page) == []


def test_the_grants_table_shows_own_inherited_and_revoked_grants(qtbot, context, cairn, tasks):
    creds = cairn.credentials
    creds.grant(tasks["root"], "api.key", "API_KEY")
    creds.grant(tasks["child"], "gh-token", "GITHUB_TOKEN", scope="task")
    creds.grant(tasks["root"], "old-token", "OLD_TOKEN")
    creds.revoke(tasks["child"], "old-token")
    page = make_page(qtbot, context)
    page.set_task(tasks["child"])
    settle(qtbot, context)
    assert page.task_combo.currentData() == tasks["child"]
    assert "logout too" in page.task_combo.currentText()
    rows = {row[0]: row for row in grants_shown(page)}
    assert rows["api.key"][1] == "API_KEY"
    assert rows["api.key"][3].startswith("inherited from login fix")
    assert rows["gh-token"][1:] == ["GITHUB_TOKEN", "this task only", "granted"]
    assert rows["old-token"][3] == "revoked"
    assert set(rows) == {"api.key", "gh-token", "old-token"}
    assert "next starts or resumes" in page.hint_label.text()


def test_grant_then_revoke_round_trip(qtbot, context, cairn, secrets, tasks):
    secrets.set("api.key", "value-1234")
    page = make_page(qtbot, context)
    page.set_task(tasks["root"])
    settle(qtbot, context)
    assert grants_shown(page) == []
    page.grant_secret_combo.setEditText("api.key")
    page.env_var_edit.setText("API_KEY")
    page.grant_button.click()
    settle(qtbot, context)
    assert [(g.secret_name, g.env_var) for g in cairn.credentials.grants_for(tasks["root"])] == [
        ("api.key", "API_KEY")
    ]
    assert grants_shown(page) == [
        ["api.key", "API_KEY", "this task and its descendants", "granted"]
    ]
    assert "Granted" in page.grants_message.text()

    page.grants_table.selectRow(0)
    assert page.revoke_button.isEnabled()
    page.revoke_button.click()
    settle(qtbot, context)
    assert cairn.credentials.grants_for(tasks["root"]) == []
    assert cairn.credentials.revoked_for(tasks["root"]) == ["api.key"]
    assert grants_shown(page) == [["api.key", "—", "—", "revoked"]]
    page.grants_table.selectRow(0)
    assert not page.revoke_button.isEnabled()


def test_a_bad_environment_variable_is_refused_inline(qtbot, context, cairn, tasks):
    page = make_page(qtbot, context)
    page.grant_secret_combo.setEditText("api.key")
    page.env_var_edit.setText("lower-case")
    page.grant_button.click()
    assert context.jobs.idle()
    assert "not a valid environment variable name" in page.grants_message.text()
    assert cairn.credentials.grants_for(tasks["root"]) == []


def test_a_conflicting_grant_shows_the_cores_message(qtbot, context, cairn, tasks):
    cairn.credentials.grant(tasks["root"], "api.key", "API_KEY")
    page = make_page(qtbot, context)
    page.set_task(tasks["root"])
    page.grant_secret_combo.setEditText("other-key")
    page.env_var_edit.setText("API_KEY")
    page.grant_button.click()
    settle(qtbot, context)
    assert "already granted" in page.grants_message.text()


def test_a_locked_keyring_shows_the_fix_and_try_again_recovers(qtbot, context, backend, secrets):
    secrets.set("api.key", "value-1234")
    backend.locked = True
    page = make_page(qtbot, context)
    text = page.keyring_label.text()
    assert text.startswith("The keyring is locked")
    assert "unlock your desktop keyring" in text
    assert page.retry_button.isVisible()
    assert not page.add_button.isEnabled()
    assert listed(page) == []

    page.name_edit.setText("new-key")  # the page stays usable while locked
    page.value_edit.setText("value-5678")
    page.add_secret()
    settle(qtbot, context)
    assert "locked" in page.secrets_message.text()
    assert page.value_edit.text() == ""

    backend.locked = False
    page.retry_button.click()
    settle(qtbot, context)
    assert page.retry_button.isHidden()
    assert "OS keyring" in page.keyring_label.text()
    assert listed(page) == ["api.key"]


def test_a_plaintext_keyring_is_warned_about(qtbot, context, data_dir):
    from core.app import Cairn

    plain = Cairn(
        data_dir.parent / "plain",
        secrets=SecretStore(backend=PlaintextKeyring(), redactor=Redactor()),
    )
    context.cairn = plain
    try:
        page = make_page(qtbot, context)
        assert "unencrypted" in page.keyring_warning.text()
        assert page.keyring_warning.isVisible()
    finally:
        plain.close()


def test_the_dialog_wraps_the_page_with_a_close_button(qtbot, context, tasks):
    dialog = open_credentials_dialog(context, task_id=tasks["child"])
    qtbot.addWidget(dialog)
    settle(qtbot, context)
    assert dialog.isVisible() and dialog.windowTitle() == "Credentials"
    assert dialog.page.task_combo.currentData() == tasks["child"]
    dialog.reject()
    assert not dialog.isVisible()


# -- the real Secret Service ---------------------------------------------------------------------


@pytest.mark.keyring
def test_add_rotate_and_remove_through_the_real_secret_service(
    qtbot, settings, data_dir, secret_service, monkeypatch
):
    from core.app import Cairn
    from gui.context import AppContext

    store = SecretStore(
        f"cairn-test-{uuid.uuid4().hex[:12]}", backend=secret_service, redactor=Redactor()
    )
    facade = Cairn(data_dir, secrets=store)
    ctx = AppContext(facade, settings=settings, data_dir=data_dir)
    monkeypatch.setattr(
        credentials_page.QMessageBox, "question", lambda *_a: QMessageBox.StandardButton.Yes
    )
    try:
        page = make_page(qtbot, ctx)
        assert "keyring.backends.SecretService.Keyring" in page.keyring_label.text()
        first, second = f"canary-{uuid.uuid4().hex}", f"canary-{uuid.uuid4().hex}"
        page.name_edit.setText("ui-token")
        page.value_edit.setText(first)
        page.add_button.click()
        assert page.value_edit.text() == ""
        settle(qtbot, ctx)
        assert listed(page) == ["ui-token"]
        assert secret_service.get_password(store.service, "ui-token") == first

        page.select_secret("ui-token")
        page.value_edit.setText(second)
        page.rotate_button.click()
        settle(qtbot, ctx)
        assert secret_service.get_password(store.service, "ui-token") == second
        assert not any(v in t for t in every_text(page) for v in (first, second))

        page.select_secret("ui-token")
        page.remove_button.click()
        settle(qtbot, ctx)
        assert listed(page) == []
        assert secret_service.get_password(store.service, "ui-token") is None
    finally:
        ctx.close(close_facade=False)
        facade.close()
        for name in ("ui-token", INDEX_KEY):
            try:
                secret_service.delete_password(store.service, name)
            except Exception:  # already gone
                pass
