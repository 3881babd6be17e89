"""Settings ▸ Risk rules says which protections hold by the sandbox's construction and which
wait for an approval, and where a run can write."""

from __future__ import annotations

from core.sandboxes import BY_APPROVAL, BY_CONSTRUCTION, PROTECTIONS
from gui.qt import QLabel
from gui.settings.dialog import SettingsDialog
from gui.settings.protections import protections_html


def test_every_protection_is_listed_with_how_it_holds():
    text = protections_html()
    for p in PROTECTIONS:
        assert p.what in text
    assert text.index("by construction") < text.index("by approval")
    assert "Git hooks" in text and "/workspace" in text and "/tmp" in text
    assert {p.how for p in PROTECTIONS} == {BY_CONSTRUCTION, BY_APPROVAL}


def test_the_risk_rules_page_shows_the_protections(qtbot, context):
    dialog = SettingsDialog(context)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.loaded is not None and not dialog.busy, timeout=10_000)
    rules = next(i for i in range(dialog.pages.count()) if dialog.pages.tabText(i) == "Risk rules")
    label = dialog.pages.widget(rules).findChild(QLabel, "protections")
    assert label is not None
    assert "Git hooks and the workspace's git config" in label.text()
    assert "by construction" in label.text() and "by approval" in label.text()
