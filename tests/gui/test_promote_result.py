"""After Promote: the dialog names the branch, opens the repository in the file manager, copies
the branch's name, and offers the `git push` command only when the repository has a remote."""

from __future__ import annotations

import subprocess

from gui.promote_result import PromotedDialog, next_steps, show_promoted
from gui.qt import QDesktopServices, QGuiApplication, QWidget


def promoted(repo, branch="cairn/fix-login") -> dict:
    return {"repository": str(repo), "branch": branch, "commit": "c" * 40}


def test_without_a_remote_there_is_no_push_command(qtbot, repo, monkeypatch):
    steps = next_steps(promoted(repo))
    assert steps.remote is None and steps.push_command is None
    dialog = PromotedDialog(steps)
    qtbot.addWidget(dialog)
    assert dialog.push_field is None and "no remote" in dialog.no_remote.text()
    assert "cairn/fix-login" in dialog.summary.text() and "cccccccccccc" in dialog.summary.text()

    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    dialog.open_button.click()
    assert [u.toLocalFile() for u in opened] == [str(repo)]
    dialog.copy_branch_button.click()
    assert QGuiApplication.clipboard().text() == "cairn/fix-login"
    assert dialog.status.text() == "Branch name copied."


def test_with_remotes_origin_is_pushed_to_and_the_command_is_copied(qtbot, repo, tmp_path):
    for name in ("backup", "origin"):
        subprocess.run(
            ["git", "-C", str(repo), "remote", "add", name, str(tmp_path / f"{name}.git")],
            check=True,
        )
    steps = next_steps(promoted(repo, "feature/a b"))
    assert steps.remote == "origin"
    assert steps.push_command == f"git -C {repo} push -u origin 'feature/a b'"
    dialog = PromotedDialog(steps)
    qtbot.addWidget(dialog)
    assert dialog.push_field is not None and dialog.push_field.text() == steps.push_command
    assert dialog.push_field.isReadOnly()
    assert dialog.copy_push_button is not None
    dialog.copy_push_button.click()
    assert QGuiApplication.clipboard().text() == steps.push_command


def test_the_dialog_opens_after_the_remotes_are_read_in_a_job(qtbot, context, repo):
    parent = QWidget()
    qtbot.addWidget(parent)
    show_promoted(context, parent, promoted(repo))
    qtbot.waitUntil(lambda: parent.findChild(PromotedDialog) is not None, timeout=10_000)
    dialog = parent.findChild(PromotedDialog)
    assert dialog.isVisible() and dialog.steps.branch == "cairn/fix-login"
    dialog.close()
