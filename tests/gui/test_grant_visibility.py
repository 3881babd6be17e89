"""The credentials page says plainly what a grant exposes, and how a sign-in differs."""

from __future__ import annotations

from gui.settings.credentials import GRANTS_VISIBILITY, CredentialsPage


def test_the_grants_section_says_a_granted_secret_is_visible_to_everything_in_the_sandbox(
    qtbot, context
):
    page = CredentialsPage(context)
    qtbot.addWidget(page)
    assert page.grants_visibility.text() == GRANTS_VISIBILITY
    assert "visible to everything in the sandbox" in GRANTS_VISIBILITY
    assert "added to each model request" in GRANTS_VISIBILITY
