"""The task view shows what a task's runs used of their model: the task's cost and tokens, the
lineage's sum over its tasks, each run in a table, and a run ending updates it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core import events as ev
from core.models import Run, Task, TaskSource
from gui.task_view import TaskView
from gui.task_view.cost import COLUMNS, CostPanel, summary_line

SAMPLE = (
    Path(__file__).resolve().parents[1] / "agents" / "samples" / "claude-stream.jsonl"
).read_text()
LINES = SAMPLE.splitlines(keepends=True)


def add_run(cairn, task: Task, lines: list[str], state: str = "succeeded") -> str:
    run_id = f"r_{task.id}_{len(cairn.ctx.store.runs_of([task.id]))}"
    cairn.ctx.store.add_run(
        Run(run_id, task.id, state, 0, task.engine, workspace_id=task.workspace_id,
            created_at=time.time())
    )  # fmt: skip
    cairn.ctx.store.append_event(
        ev.RUN_OUTPUT, run_id, {"run_id": run_id, "stream": "stdout", "text": "".join(lines)}
    )
    return run_id


@pytest.fixture
def lineage(cairn, repo):
    root = cairn.tasks.new(repo, title="Root", engine="claude-code").task
    child = Task(
        "t_cost_child",
        "Child",
        root.source_id,
        root.workspace_id,
        root.engine,
        "more",
        root.id,
        TaskSource.CONTINUE.value,
        None,
        time.time(),
    )
    cairn.ctx.store.add_task(child)
    add_run(cairn, root, LINES[0:11])
    return root, child


def test_the_task_view_shows_the_task_and_lineage_cost_and_each_run(qtbot, context, lineage):
    root, child = lineage
    view = TaskView(context)
    qtbot.addWidget(view)
    view.show()
    panel = view.cost
    assert isinstance(panel, CostPanel)
    view.set_task(root.id)
    qtbot.waitUntil(lambda: panel.figures is not None, timeout=10_000)
    assert panel.summary.text().startswith("Used: $0.0495")
    assert "11.6k in · 150 out" in panel.summary.text()
    assert "lineage" in panel.summary.text()  # two tasks, one with no runs yet

    add_run(view.context.cairn, child, LINES[11:15])
    view.set_task(child.id)
    qtbot.waitUntil(
        lambda: panel.figures is not None and panel.figures["task_id"] == child.id,
        timeout=10_000,
    )
    figures = panel.figures
    assert figures["lineage"]["cost_usd"] == pytest.approx(0.049452 + 0.012996)
    assert "lineage $0.0624 over 2 tasks, 2 runs" in panel.summary.text()
    assert root.title in panel.summary.toolTip() and "engine" in panel.summary.toolTip()
    assert not panel.table.isVisible()
    panel.toggle.click()
    assert panel.table.isVisible() and panel.table.rowCount() == 1
    cells = [panel.table.item(0, c).text() for c in range(len(COLUMNS))]
    assert cells[2] == "$0.0130" and cells[3] == "3.2k" and cells[4] == "14"

    # A run of the task ending shows up without choosing the task again.
    add_run(view.context.cairn, child, LINES[15:19])
    context.cairn.ctx.events.publish(ev.RUN_STATE, "r_x", state="succeeded", task_id=child.id)
    qtbot.waitUntil(lambda: panel.table.rowCount() == 2, timeout=10_000)

    view.set_task(None)
    assert not panel.isVisible()


def test_a_task_with_no_runs_offers_no_table(qtbot, context, repo):
    task = context.cairn.tasks.new(repo, title="Fresh", engine="claude-code").task
    panel = CostPanel(context)
    qtbot.addWidget(panel)
    panel.show()
    panel.set_task(task.id)
    qtbot.waitUntil(lambda: panel.figures is not None, timeout=10_000)
    assert panel.summary.text() == "Used: nothing yet (no runs)"
    assert not panel.toggle.isEnabled() and not panel.table.isVisible()


def test_a_task_with_no_runs_says_so():
    figures = {
        "task_id": "t",
        "runs": [],
        "task": {"runs": 0, "total_tokens": 0, "cost_usd": None},
        "lineage": {"runs": 0},
        "lineage_tasks": [{"task_id": "t"}],
    }
    assert summary_line(figures) == "Used: nothing yet (no runs)"
