"""The Approvals tab over the real judge: a program start a shell run's supervisor held becomes a
card naming the program, its arguments and the script step; a denial with a reason reaches the
judge (kept in the row's details) and shows in the recent decisions."""

from __future__ import annotations

import json
import time
from pathlib import Path

from core import approvals
from core.ids import new_id
from core.models import Run
from core.models import RunState as R
from gui.approvals import ApprovalsPanel
from gui.qt import Qt

STEPS = ["echo one", "git push --force origin main || true", "echo three"]


def held_program_start(cairn, src: Path) -> str:
    """A shell run in flight and a program start its supervisor holds; returns the request id."""
    src.mkdir()
    (src / "README").write_text("hello\n")
    cairn.tasks.new(src, title="Publish the site")
    task = cairn.tasks.all()[0]
    run = Run(
        new_id("run"),
        task.id,
        R.RUNNING.value,
        0,
        "shell",
        {"commands": STEPS},
        workspace_id=task.workspace_id,
        attempt=1,
        created_at=time.time(),
    )
    cairn.ctx.store.add_run(run)
    request_id = f"ap_{time.time_ns() % 10**14:014d}"
    folder = approvals.requests_dir(cairn.data.runs_root, run)
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "id": request_id,
        "run_id": run.id,
        "exec_id": run.exec_id,
        "engine": "shell",
        "tool": "exec",
        "command": "git push --force origin main",
        "cwd": "/workspace",
        "program": "/usr/bin/git",
        "argv": ["git", "push", "--force", "origin", "main"],
        "env": {"HOME": "/home/agent"},
        "stdin": "null",
        "parents": [{"pid": 7, "program": "sh -c 'git push --force origin main || true'"}],
        "script_line": {"number": 2, "text": None},
        "created_at": time.time(),
    }
    (folder / f"{request_id}.json").write_text(json.dumps(doc))
    return request_id


def test_a_held_program_start_is_shown_and_denied_with_a_reason(qtbot, context, tmp_path):
    cairn = context.cairn
    request_id = held_program_start(cairn, tmp_path / "src")
    panel = ApprovalsPanel(context)
    qtbot.addWidget(panel)
    panel.resize(900, 700)
    panel.show()
    qtbot.waitUntil(lambda: request_id in panel.cards, timeout=10_000)
    card = panel.cards[request_id]
    assert card.command_label.text() == "/usr/bin/git push --force origin main"
    assert card.cwd_label is not None and card.cwd_label.text() == "/workspace"
    assert card.why_label.text().startswith("git-force-push — ")
    assert card.remember.text() == "&Remember rule git-force-push for this task"
    assert card.script_view is not None
    assert card.script_view.marked_text() == "▶2  git push --force origin main || true"
    assert card.parents_label is not None
    assert card.parents_label.full_text() == "sh -c 'git push --force origin main || true'"

    card.reason_edit.setFocus()
    qtbot.keyClicks(card.reason_edit, "push to a branch instead")
    qtbot.keyClick(card.reason_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: panel.count == 0, timeout=10_000)
    denied = cairn.approvals.get(request_id)
    assert denied.state == approvals.DENIED
    assert denied.details["note"] == "push to a branch instead"
    qtbot.waitUntil(lambda: panel.history.table.rowCount() == 1, timeout=10_000)
    when, who, command, outcome, rule, reason = panel.history.row_texts(0)
    assert (command, outcome, rule, reason) == (
        "git push --force origin main",
        "denied",
        "git-force-push",
        "push to a branch instead",
    )
    assert who == denied.decided_by and when
