"""The Housekeeping dialog on a real data folder: it shows the plan's figures and each task's
share, and "Clean up" frees what it said and refreshes the view."""

from __future__ import annotations

from pathlib import Path

from core import humanize
from gui.settings import HousekeepingDialog


def _archived_task(cairn, repo: Path):
    made = cairn.tasks.new(repo, title="Old experiment")
    (Path(made.workspace.root) / "data.bin").write_bytes(b"x" * 300_000)
    cairn.revisions.capture(made.task.id)
    cairn.housekeeping.archive(made.task.id)
    return made


def test_dialog_shows_the_plan_and_cleans_up(qtbot, context, cairn, repo):
    made = _archived_task(cairn, repo)
    cairn.tasks.new(repo, title="Live task")
    expected = cairn.housekeeping.plan()
    assert expected.total > 300_000

    dialog = HousekeepingDialog(context)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.plan is not None and not dialog.busy, timeout=10_000)
    plan = dialog.plan
    assert plan.total == expected.total
    assert dialog.total_label.text() == f"Will free {humanize.size(plan.total)}"
    assert dialog.usage_label.text().endswith(humanize.size(plan.usage.total))
    assert dialog.part_labels["workspaces"].text() == humanize.size(plan.usage.parts["workspaces"])
    assert dialog.items_table.rowCount() == len(plan.items) == 1
    assert dialog.items_table.item(0, 0).text() == humanize.size(plan.items[0].bytes)
    assert "Old experiment" in dialog.items_table.item(0, 2).text()
    assert dialog.clean_button.isEnabled()
    shares = plan.usage.shares
    assert dialog.shares_table.rowCount() == len(shares) == 2
    assert dialog.shares_table.item(0, 1).text() == "Old experiment"  # the largest first
    assert dialog.shares_table.item(0, 0).text() == humanize.size(shares[0].bytes)
    assert dialog.shares_table.item(1, 1).text() == "Live task"
    assert "% of the data folder" in dialog.shares_table.item(0, 0).toolTip()

    asked = []
    dialog.confirm = lambda text: asked.append(text) or False
    dialog.clean_button.click()
    assert asked and "Will free" not in asked[0] and humanize.size(plan.total) in asked[0]
    assert Path(made.workspace.root).is_dir()  # refused: nothing done

    dialog.confirm = lambda text: True
    dialog.clean_button.click()
    qtbot.waitUntil(
        lambda: dialog.last_result is not None and dialog.plan is not None and not dialog.busy,
        timeout=10_000,
    )
    assert dialog.last_result.freed == plan.total
    assert dialog.status_label.text().startswith(f"Freed {humanize.size(plan.total)}")
    assert not Path(made.workspace.root).exists()
    assert dialog.plan.empty
    assert dialog.total_label.text() == "Nothing to clean up"
    assert dialog.items_table.rowCount() == 0
    assert not dialog.clean_button.isEnabled()


def test_dialog_shows_errors(qtbot, context, cairn, monkeypatch):
    def broken():
        raise OSError(13, "Permission denied", "/data")

    monkeypatch.setattr(cairn.housekeeping, "plan", broken)
    dialog = HousekeepingDialog(context)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: bool(dialog.status_label.text()), timeout=10_000)
    assert "Permission denied" in dialog.status_label.text()
    assert not dialog.clean_button.isEnabled()
