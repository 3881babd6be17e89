"""Enter in a Settings field does that field's action and never closes the dialog."""

from __future__ import annotations

from gui.qt import Qt
from gui.settings.credentials import CredentialsPage
from gui.settings.dialog import SettingsDialog


def test_enter_in_the_secret_value_field_adds_the_secret_and_keeps_settings_open(qtbot, context):
    dialog = SettingsDialog(context)
    qtbot.addWidget(dialog)
    page = CredentialsPage(context)
    dialog.add_credentials_page(page)
    dialog.show()
    dialog.activateWindow()
    qtbot.waitActive(dialog)
    qtbot.waitUntil(dialog.ok_button.isEnabled, timeout=10_000)  # once the settings are read
    assert dialog.ok_button.isDefault()  # what Enter in the dialog presses
    dialog.pages.setCurrentWidget(page)
    added: list[str] = []
    page.add_secret = lambda: added.append(page.value_edit.text())  # type: ignore[method-assign]
    page.value_edit.returnPressed.disconnect()
    page.value_edit.returnPressed.connect(page.add_secret)
    page.value_edit.setFocus()
    page.value_edit.setText("a-value")
    qtbot.keyClick(page.value_edit, Qt.Key.Key_Return)
    assert added == ["a-value"]
    assert dialog.isVisible()
    qtbot.keyClick(page.env_var_edit, Qt.Key.Key_Enter)
    assert dialog.isVisible()
