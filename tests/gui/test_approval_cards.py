"""An approval card says what will run: for a program start the program and its arguments, the
folder, the rule and why, the programs that started it and the script with the step it came from
marked; "Remember" says what it keeps; Deny sends an optional reason (Enter in the field denies,
and the card's A/D/R keys keep working while the card has the focus)."""

from __future__ import annotations

import dataclasses
import time

from core.approvals import Approval
from gui.approvals.card import SCRIPT_LINES, ApprovalCard, ScriptView, remember_text
from gui.approvals.data import PendingApproval, ProgramStart, visible
from gui.qt import QColor, QFontDatabase, QPalette, Qt, QTextCursor
from tests.gui import test_approvals_panel
from tests.gui.test_approvals_panel import FakeApprovals, request

make_panel = test_approvals_panel.make_panel  # the fixture: a panel over a fake judge

STEPS = [
    "echo start > log.txt",
    "git push --force origin main || true; echo pushed > pushed.txt",
    "mkdir -p .git/hooks\necho hacked > .git/hooks/pre-commit",
    "echo after > after.txt",
]


def program_start(n: int = 1, **changes) -> Approval:
    details = {
        "kind": "exec",
        "program": "/usr/bin/git",
        "argv": ["git", "push", "--force", "origin", "main", "<b>x</b>"],
        "cwd": "/workspace/src",
        "what": "git push --force origin main",
        "stdin": "null",
        "parents": [
            "sh -c git push --force origin main || true; echo pushed > pushed.txt",
            "/bin/sh /cairn/runs/r_1/script.sh",
        ],
        "script": {"step": 1, "commands": STEPS},
        "rule_reason": "rewrites the remote's history",
    }
    details.update(changes.pop("details", {}))
    fields = {
        "command": "git push --force origin main",
        "rule": "git-force-push",
        "reason": "rewrites the remote's history",
        "details": details,
    }
    fields.update(changes)
    return request(n, **fields)


def card_for(qtbot, approval: Approval, title: str = "Deploy") -> ApprovalCard:
    card = ApprovalCard(PendingApproval.of(approval, title))
    qtbot.addWidget(card)
    card.resize(900, card.sizeHint().height())
    card.show()
    qtbot.waitExposed(card)
    return card


# -- what will run ----------------------------------------------------------------------------


def test_a_program_start_shows_program_arguments_folder_rule_and_parents(qtbot):
    card = card_for(qtbot, program_start())
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()
    # The resolved program and every argument, quoted; `<b>` is an argument, not markup.
    assert card.command_label.text() == "/usr/bin/git push --force origin main '<b>x</b>'"
    assert card.command_label.textFormat() == Qt.TextFormat.PlainText
    assert card.command_label.font().family() == fixed
    assert card.cwd_label is not None and card.cwd_label.text() == "/workspace/src"
    assert card.why_label.text() == "git-force-push — rewrites the remote's history"
    assert card.matched_label is not None
    assert card.matched_label.text() == "matched git push --force origin main"
    parents = card.parents_label
    assert parents is not None and parents.textFormat() == Qt.TextFormat.PlainText
    assert parents.full_text().startswith("sh -c git push --force origin main || true;")
    assert parents.full_text().endswith("← /bin/sh /cairn/runs/r_1/script.sh")
    assert "/bin/sh /cairn/runs/r_1/script.sh" in parents.toolTip()


def test_the_programs_above_are_elided_to_the_card_and_whole_in_the_tooltip(qtbot):
    chain = [f"sh -c step {i} " + "x" * 80 for i in range(6)]
    card = card_for(qtbot, program_start(details={"parents": chain}))
    parents = card.parents_label
    assert parents is not None
    card.resize(500, card.height())
    qtbot.waitUntil(lambda: "…" in parents.text())
    assert parents.full_text().endswith("← … 3 more")  # the nearest three, then how many more
    assert all(f"step {i}" in parents.toolTip() for i in range(6))


def test_the_script_shows_every_step_and_marks_the_one_this_program_came_from(qtbot):
    card = card_for(qtbot, program_start())
    view = card.script_view
    assert isinstance(view, ScriptView)
    assert view.isReadOnly()
    text = view.toPlainText()
    assert all(line in text for step in STEPS for line in step.split("\n"))
    assert (
        view.marked_text() == "▶2  git push --force origin main || true; echo pushed > pushed.txt"
    )
    marked = view.document().findBlockByNumber(1)
    assert marked.blockFormat().background().color() == view.mark_colour()
    other = view.document().findBlockByNumber(0)
    assert other.blockFormat().background().style() == Qt.BrushStyle.NoBrush
    assert view.verticalScrollBar().maximum() == 0  # a short script shows whole


def test_a_long_script_scrolls_inside_the_card_starting_at_the_marked_step(qtbot):
    steps = [f"echo step {i}" for i in range(40)]
    steps[30] = 'python3 -c \'import os; os.system("gi"+"t push -f")\''
    card = card_for(qtbot, program_start(details={"script": {"step": 30, "commands": steps}}))
    view = card.script_view
    assert view is not None
    assert view.height() < (SCRIPT_LINES + 2) * view.fontMetrics().lineSpacing()
    assert view.verticalScrollBar().maximum() > 0
    cursor = QTextCursor(view.document().findBlockByNumber(30))
    assert view.viewport().rect().contains(view.cursorRect(cursor))
    assert view.marked_text().startswith("▶31  python3 -c")


def test_the_marked_step_takes_its_tint_from_the_palette(qtbot):
    card = card_for(qtbot, program_start())
    view = card.script_view
    assert view is not None
    dark = QPalette(view.palette())
    dark.setColor(QPalette.ColorRole.Base, QColor("#1e1e1e"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e6e6e6"))
    dark.setColor(QPalette.ColorRole.Highlight, QColor("#2a82da"))
    view.setPalette(dark)
    colour = view.document().findBlockByNumber(1).blockFormat().background().color()
    assert colour == view.mark_colour()
    # Between the dark base and the highlight: the light text stays readable on it.
    assert QColor("#1e1e1e").lightness() < colour.lightness() < QColor("#2a82da").lightness()


def test_a_step_out_of_range_marks_nothing_and_a_plain_command_has_no_script(qtbot):
    card = card_for(qtbot, program_start(details={"script": {"step": 9, "commands": STEPS}}))
    assert card.script_view is not None and card.script_view.marked_text() == ""
    start = program_start(2)
    plain = dataclasses.replace(
        start, details={k: v for k, v in start.details.items() if k != "script"}
    )
    assert card_for(qtbot, plain).script_view is None


def test_control_characters_in_arguments_are_written_out():
    hidden = ProgramStart.of(
        {"kind": "exec", "program": "/bin/rm", "argv": ["rm", "-rf", "/x\r\x1b[2Kok", "a\u202eb"]}
    )
    assert hidden is not None
    assert visible(hidden.command_line) == "/bin/rm -rf '/x\\x0d\\x1b[2Kok' 'a\\u202eb'"
    assert visible("y" * 5000).endswith("… (1000 more characters)")


def test_details_that_are_not_a_program_start_keep_the_tool_call_card(qtbot):
    assert ProgramStart.of({}) is None
    assert ProgramStart.of({"kind": "exec", "program": "/bin/rm", "argv": "rm -rf"}) is None
    bad_step = ProgramStart.of(
        {"kind": "exec", "program": "/bin/rm", "argv": [], "script": {"step": True}}
    )
    assert bad_step is not None and bad_step.step is None and bad_step.script == ()
    card = card_for(qtbot, request(1, command="Bash: rm -rf <b>build</b>"))
    assert card.command_label.text() == "Bash: rm -rf <b>build</b>"
    assert card.command_label.textFormat() == Qt.TextFormat.PlainText
    assert card.why_label.text() == "rule destructive-rm: deletes files recursively"
    assert card.script_view is None and card.cwd_label is None and card.parents_label is None


def test_a_program_started_under_another_name_says_so(qtbot):
    card = card_for(
        qtbot,
        program_start(details={"program": "/usr/lib/git-core/git-push", "argv": ["-sh", "-f"]}),
    )
    assert card.command_label.text() == "/usr/lib/git-core/git-push -f"
    texts = [label.text() for label in card.findChildren(type(card.command_label))]
    assert "started as -sh" in texts


# -- remember ---------------------------------------------------------------------------------


def test_remember_says_exactly_what_it_keeps(qtbot):
    exec_card = card_for(qtbot, program_start())
    assert exec_card.remember.text() == "&Remember rule git-force-push for this task"
    tool_card = card_for(qtbot, request(2))
    assert tool_card.remember.text() == "&Remember this exact command for this task"
    odd = PendingApproval.of(program_start(3, rule="a&b"))
    assert remember_text(odd) == "&Remember rule a&&b for this task"  # shows as "a&b"


def test_a_program_start_without_a_rule_has_nothing_to_remember(qtbot):
    card = card_for(qtbot, program_start(rule=None))
    assert not card.remember.isEnabled()
    card.setFocus()
    qtbot.keyClick(card, Qt.Key.Key_R)
    assert not card.remember.isChecked()
    card.set_pending(False)
    assert not card.remember.isEnabled()


# -- deny with a reason -----------------------------------------------------------------------


def test_enter_in_the_reason_denies_with_it_and_typing_there_is_not_a_shortcut(qtbot, make_panel):
    facade = FakeApprovals([program_start(1)])
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.count == 1)
    card = panel.cards["ap_1"]
    assert card.reason_edit.placeholderText() == "Reason sent to the run (optional)"
    card.reason_edit.setFocus()
    qtbot.keyClicks(card.reason_edit, "push to a branch, and add a draft PR")  # a, d, r
    assert facade.decisions == [] and not card.remember.isChecked()
    statuses = []
    panel.context.sig_status.connect(statuses.append)
    qtbot.keyClick(card.reason_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: panel.count == 0)
    assert facade.decisions == [("ap_1", "denied", False)]
    assert facade.notes == {"ap_1": "push to a branch, and add a draft PR"}
    assert statuses[-1] == "Denied (reason sent to the run): git push --force origin main"


def test_a_deny_without_a_reason_sends_none(qtbot, make_panel):
    facade = FakeApprovals([program_start(1)])
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.count == 1)
    card = panel.cards["ap_1"]
    card.reason_edit.setText("   ")
    qtbot.mouseClick(card.deny_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.count == 0)
    assert facade.notes == {"ap_1": None}


def test_card_keys_work_when_the_card_has_the_focus_and_d_sends_the_typed_reason(qtbot, make_panel):
    facade = FakeApprovals([program_start(1), program_start(2)])
    panel = make_panel(facade)
    qtbot.waitUntil(lambda: panel.count == 2)
    first = panel.cards["ap_1"]
    first.setFocus()
    qtbot.keyClick(first, Qt.Key.Key_R)
    assert first.remember.isChecked()
    statuses = []
    panel.context.sig_status.connect(statuses.append)
    qtbot.keyClick(first, Qt.Key.Key_A)
    qtbot.waitUntil(lambda: panel.count == 1)
    assert statuses[-1].startswith("Approved (rule git-force-push remembered for the task)")
    second = panel.cards["ap_2"]
    second.reason_edit.setFocus()
    qtbot.keyClicks(second.reason_edit, "not now")
    qtbot.keyClick(second.reason_edit, Qt.Key.Key_Escape)  # out of the field, back to the card
    assert second.hasFocus()
    qtbot.keyClick(second, Qt.Key.Key_D)
    qtbot.waitUntil(lambda: panel.count == 0)
    assert facade.decisions == [("ap_1", "approved", True), ("ap_2", "denied", False)]
    assert facade.notes == {"ap_2": "not now"}


def test_while_a_decision_is_sent_the_reason_cannot_change(qtbot):
    card = card_for(qtbot, program_start())
    card.set_pending(True)
    assert not card.reason_edit.isEnabled() and not card.deny_button.isEnabled()
    denied = []
    card.sig_deny.connect(lambda *args: denied.append(args))
    card.deny()
    assert denied == []
    card.set_pending(False)
    card.reason_edit.setText("why")
    card.deny()
    assert denied == [("ap_1", "why")]


def test_the_waiting_time_counts_on(qtbot):
    card = card_for(qtbot, program_start(created_at=time.time() - 5))
    card.update_waiting(card.approval.requested_at + 65)  # type: ignore[operator]
    assert card.waiting_label.text() == "waiting 1 min 05 s"


def test_a_narrow_card_puts_deny_under_approve_and_a_wide_one_beside_it(qtbot):
    card = card_for(qtbot, program_start())
    card.resize(1000, card.height())
    qtbot.waitUntil(lambda: not card.stacked)
    card.resize(420, card.height())
    qtbot.waitUntil(lambda: card.stacked)
    assert card.reason_edit.isVisible() and card.deny_button.isVisible()


def test_a_card_says_what_a_renamed_copy_really_is_and_where_its_words_lead(qtbot):
    details = {
        "kind": "exec",
        "program": "/workspace/tig",
        "argv": ["./tig", "push"],
        "cwd": "/workspace",
        "same_as": ["/usr/bin/git"],
        "stdin_path": "/home/agent/.ssh/id_rsa",
        "links": {"l/": "/home/agent/keep"},
    }
    program = ProgramStart.of(details)
    assert program is not None
    assert program.same_as == ("/usr/bin/git",)
    assert program.stdin_path == "/home/agent/.ssh/id_rsa"
    assert program.links == (("l/", "/home/agent/keep"),)
    card = card_for(
        qtbot,
        program_start(
            details={
                "program": "/workspace/tig",
                "argv": ["./tig", "push"],
                "same_as": ["/usr/bin/git"],
                "stdin_path": "/home/agent/.ssh/id_rsa",
                "links": {"l/": "/home/agent/keep"},
            }
        ),
    )
    shown = " ".join(label.text() for label in card.findChildren(type(card.why_label)))
    assert "a copy of /usr/bin/git" in shown
    assert "reads /home/agent/.ssh/id_rsa" in shown
    assert "l/ leads to /home/agent/keep" in shown


def test_the_script_underlines_the_program_where_the_step_writes_it_as_is(qtbot):
    card = card_for(qtbot, program_start())
    assert card.script_view.matched == "git push --force origin main"
    disguised = program_start(
        2,
        details={
            "script": {"step": 0, "commands": ["g''it pu''sh --force origin main"]},
            "what": "git push --force origin main",
        },
    )
    other = card_for(qtbot, disguised)
    assert other.script_view.matched == ""  # marked by its step alone
    assert "g''it" in other.script_view.marked_text()
