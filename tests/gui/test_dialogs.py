"""The New Task, Continue, Fork and keyring dialogs collect what the user wants."""

from __future__ import annotations

from gui.dialogs import (
    ContinueDialog,
    ForkDialog,
    KeyringDialog,
    NewTaskDialog,
    NewTaskRequest,
    engine_choices,
)
from gui.dialogs.data import check_folder, sort_paths
from gui.qt import QLabel, Qt


def test_new_task_dialog_is_prefilled_from_the_folder(qtbot, tmp_path):
    folder = tmp_path / "login-service"
    folder.mkdir()
    dialog = NewTaskDialog([folder])
    qtbot.addWidget(dialog)
    assert dialog.windowTitle() == "New Task"
    assert dialog.title_edits[0].text() == "login-service"
    assert dialog.engine_combo.currentText() == "shell"
    assert any(label.toolTip() == str(folder) for label in dialog.findChildren(QLabel))
    dialog.title_edits[0].setText("Fix the login test")
    dialog.engine_combo.setCurrentText("claude-code")
    dialog.instructions_edit.setPlainText("  make the login test pass  ")
    assert dialog.ok_button.isEnabled()
    assert dialog.requests() == [
        NewTaskRequest(folder, "Fix the login test", "claude-code", "make the login test pass")
    ]


def test_new_task_dialog_refuses_empty_instructions_with_the_reason(qtbot, tmp_path):
    dialog = NewTaskDialog([tmp_path])
    qtbot.addWidget(dialog)
    assert not dialog.ok_button.isEnabled()
    assert "runs the instructions as commands" in dialog.ok_button.toolTip()
    assert dialog.ok_reason.text() == dialog.ok_button.toolTip()
    dialog.instructions_edit.setPlainText("   \n  ")
    assert not dialog.ok_button.isEnabled()
    dialog.engine_combo.setCurrentText("claude-code")
    assert "what the agent should do" in dialog.ok_button.toolTip()
    dialog.instructions_edit.setPlainText("fix it")
    assert dialog.ok_button.isEnabled()
    assert dialog.ok_reason.text() == ""


def test_new_task_dialog_needs_a_title(qtbot, tmp_path):
    dialog = NewTaskDialog([tmp_path])
    qtbot.addWidget(dialog)
    dialog.title_edits[0].setText("   ")
    assert not dialog.ok_button.isEnabled()
    assert dialog.ok_button.toolTip() == "every task needs a title"


def test_new_task_dialog_lists_several_folders_one_title_each(qtbot, tmp_path):
    folders = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for f in folders:
        f.mkdir()
    dialog = NewTaskDialog(folders)
    qtbot.addWidget(dialog)
    assert dialog.windowTitle() == "New Tasks (3 folders)"
    assert [e.text() for e in dialog.title_edits] == ["a", "b", "c"]
    assert dialog.ok_button.text() == "Create Tasks"
    dialog.instructions_edit.setPlainText("make test")
    requests = dialog.requests()
    assert [r.folder for r in requests] == folders
    assert {r.instructions for r in requests} == {"make test"}


def test_new_task_dialog_explains_what_instructions_mean_per_engine(qtbot, tmp_path):
    dialog = NewTaskDialog([tmp_path])
    qtbot.addWidget(dialog)
    assert "one per line" in dialog.hint.text()
    dialog.engine_combo.setCurrentText("codex")
    assert "prompt" in dialog.hint.text()


def test_engine_choices_offer_the_shell_engine_first():
    assert engine_choices(["claude-code", "codex", "shell"]) == ("shell", "claude-code", "codex")
    assert engine_choices(["codex", "shell"]) == ("shell", "codex")
    assert engine_choices([]) == ("shell", "claude-code", "codex")


def test_continue_dialog_needs_instructions(qtbot):
    dialog = ContinueDialog("Fix login")
    qtbot.addWidget(dialog)
    assert "Fix login" in dialog.windowTitle()
    assert not dialog.ok_button.isEnabled()
    dialog.instructions_edit.setPlainText("now the logout path")
    assert dialog.ok_button.isEnabled()
    assert dialog.message() == "now the logout path"


def revisions(n: int) -> list[dict]:
    return [
        {
            "id": f"{i:040x}",
            "seq": i,
            "trigger": "watch",
            "files_changed": i,
            "created_at": 1_700_000_000 + i,
        }
        for i in range(1, n + 1)
    ]


def test_fork_dialog_defaults_to_the_latest_revision(qtbot):
    dialog = ForkDialog("Fix login", revisions(4))
    qtbot.addWidget(dialog)
    assert dialog.revision_combo.count() == 4
    assert dialog.revision() == f"{4:040x}"
    assert "(latest)" in dialog.revision_combo.currentText()
    dialog.revision_combo.setCurrentIndex(1)
    dialog.instructions_edit.setPlainText("try another way")
    assert dialog.revision() == f"{2:040x}"
    assert dialog.ok_button.isEnabled() and dialog.ok_button.text() == "Fork"


def test_fork_dialog_without_revisions_cannot_be_accepted(qtbot):
    dialog = ForkDialog("Fix login", [])
    qtbot.addWidget(dialog)
    dialog.instructions_edit.setPlainText("go")
    assert not dialog.ok_button.isEnabled()


def test_keyring_dialog_explains_how_to_unlock(qtbot):
    dialog = KeyringDialog("the keyring is locked (Prompt dismissed)")
    qtbot.addWidget(dialog)
    text = " ".join(label.text() for label in dialog.findChildren(QLabel))
    assert "Prompt dismissed" in text and "unlock" in text
    with qtbot.waitSignal(dialog.accepted):
        qtbot.mouseClick(dialog.retry_button, Qt.MouseButton.LeftButton)


def test_paths_are_sorted_into_folders_and_refusals(tmp_path):
    folder = tmp_path / "repo"
    folder.mkdir()
    note = tmp_path / "notes.txt"
    note.write_text("x")
    missing = tmp_path / "gone"
    result = sort_paths([folder, note, missing, folder])
    assert result.folders == [folder]
    assert [(p.name, why) for p, why in result.refused] == [
        ("notes.txt", "it is a file, not a folder"),
        ("gone", "it does not exist"),
    ]
    assert result.message().startswith("Cannot start a task from these: notes.txt: it is a file")
    assert check_folder(folder) is None


def test_new_task_dialog_shows_each_engines_network_from_the_settings(qtbot, tmp_path):
    from core.settings import Settings
    from gui.dialogs.data import default_policies

    settings = Settings(tmp_path / "data")
    policies = default_policies(settings, ("shell", "claude-code", "codex"))
    assert policies["shell"].startswith("None")
    assert (
        policies["claude-code"] == "Allowlist: only api.anthropic.com:443 (through Cairn's proxy)"
    )
    dialog = NewTaskDialog([tmp_path], ("shell", "claude-code", "codex"), policies=policies)
    qtbot.addWidget(dialog)
    assert dialog.network_label.text().startswith("None")
    dialog.engine_combo.setCurrentText("claude-code")
    assert "api.anthropic.com:443" in dialog.network_label.text()
    dialog.engine_combo.setCurrentText("codex")
    assert "api.openai.com:443" in dialog.network_label.text()
    settings.set("defaults.network", "open")
    assert default_policies(settings, ("codex",))["codex"].startswith("Open")


def test_ctrl_enter_submits_the_task_dialogs_when_they_can_be(qtbot, tmp_path):
    from gui.dialogs import ContinueDialog

    new = NewTaskDialog([tmp_path], ("shell",))
    qtbot.addWidget(new)
    new.show()
    new.activateWindow()
    qtbot.waitActive(new)  # shortcuts reach the active window
    new.instructions_edit.setFocus()
    qtbot.keyClicks(new.instructions_edit, "make test")
    qtbot.keyClick(new.instructions_edit, Qt.Key.Key_Return)  # a new line, not a submit
    assert new.isVisible() and new.instructions_edit.toPlainText() == "make test\n"
    with qtbot.waitSignal(new.accepted, timeout=2000):
        qtbot.keyClick(
            new.instructions_edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
        )

    cont = ContinueDialog("a task")
    qtbot.addWidget(cont)
    cont.show()
    cont.activateWindow()
    qtbot.waitActive(cont)
    qtbot.keyClick(cont.instructions_edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert cont.isVisible()  # nothing to continue with yet: OK is off, so nothing happens


def test_create_and_start_asks_for_the_first_run_in_the_same_step(qtbot, tmp_path):
    dialog = NewTaskDialog([tmp_path])
    qtbot.addWidget(dialog)
    assert not dialog.start_button.isEnabled()  # no instructions yet: nothing could start
    dialog.instructions_edit.setPlainText("make test")
    assert dialog.start_button.isEnabled() and dialog.ok_button.isEnabled()
    with qtbot.waitSignal(dialog.accepted):
        dialog.start_button.click()
    assert [r.start for r in dialog.requests()] == [True]

    plain = NewTaskDialog([tmp_path])
    qtbot.addWidget(plain)
    plain.instructions_edit.setPlainText("make test")
    plain.ok_button.click()
    assert [r.start for r in plain.requests()] == [False]


def test_the_instructions_example_fits_the_engine(qtbot, tmp_path):
    dialog = NewTaskDialog([tmp_path], ("shell", "claude-code", "codex"))
    qtbot.addWidget(dialog)
    dialog.engine_combo.setCurrentText("shell")
    assert "one per line" in dialog.instructions_edit.placeholderText()
    for agent in ("claude-code", "codex"):
        dialog.engine_combo.setCurrentText(agent)
        example = dialog.instructions_edit.placeholderText()
        assert "plain words" in example and "Fix the failing test" in example
        assert "make test" not in example
    shell_continue = ContinueDialog("t", engine="shell")
    agent_fork = ForkDialog("t", [{"id": "r1", "seq": 1}], engine="claude-code")
    for d in (shell_continue, agent_fork):
        qtbot.addWidget(d)
    assert "one per line" in shell_continue.instructions_edit.placeholderText()
    assert "plain words" in agent_fork.instructions_edit.placeholderText()


def test_a_long_folder_path_is_elided_in_the_middle_with_the_whole_in_the_tooltip(qtbot, tmp_path):
    folder = tmp_path.joinpath(*["a-rather-long-folder-name"] * 12, "login-service")
    folder.mkdir(parents=True)
    dialog = NewTaskDialog([folder])
    qtbot.addWidget(dialog)
    dialog.show()
    where = dialog.findChild(QLabel, "newTaskFolder")
    assert where.toolTip() == str(folder)
    assert dialog.width() < 1000  # the path does not widen the dialog
    assert "…" in where.text() and where.text().endswith("login-service")
