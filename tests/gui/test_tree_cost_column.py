"""The lineage tree's optional Cost column: hidden until the header's context menu shows it (and
remembered), each task's cost in its cell and its tokens in the tooltip, a parent's tooltip with
the sum over it and the tasks below it (at the top of a lineage, the lineage's total, which is
the sum of its runs), a folder's sum on its row; the figures are read in the tree's jobs, never
on the GUI thread, and follow a run that ends."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from core import events as ev
from core.models import Run, Task, TaskSource
from gui.lineage import LineagePanel
from gui.lineage.data import load_lineage
from gui.lineage.model import COST_COLUMN, ROLE_USAGE, LineageModel
from gui.lineage.panel import COST_COLUMN_SETTING
from gui.qt import QModelIndex, QPoint, Qt
from tests.gui.support import task_row

SAMPLE = (
    Path(__file__).resolve().parents[1] / "agents" / "samples" / "claude-stream.jsonl"
).read_text()
LINES = SAMPLE.splitlines(keepends=True)
TOOLTIP = Qt.ItemDataRole.ToolTipRole


def figures(cost: float | None, tokens: int = 0, runs: int = 1) -> dict:
    return {
        "input_tokens": tokens,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "total_tokens": tokens,
        "cost_usd": cost,
        "cost_complete": True,
        "unpriced_tokens": 0,
        "cost_source": "engine" if cost is not None else None,
        "models": [],
        "runs": runs,
    }


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


def child_of(root: Task, task_id: str, title: str) -> Task:
    return Task(
        task_id,
        title,
        root.source_id,
        root.workspace_id,
        root.engine,
        "more",
        root.id,
        TaskSource.CONTINUE.value,
        None,
        time.time(),
    )


@pytest.fixture
def lineage(cairn, repo):
    """A root with one run and a Continue child with one run (the recorded Claude Code lines)."""
    root = cairn.tasks.new(repo, title="Root", engine="claude-code").task
    child = child_of(root, "t_cost_child", "Child")
    cairn.ctx.store.add_task(child)
    add_run(cairn, root, LINES[0:11])
    add_run(cairn, child, LINES[11:15])
    return root, child


def shown_panel(qtbot, context) -> LineagePanel:
    panel = LineagePanel(context)
    qtbot.addWidget(panel)
    panel.resize(600, 400)
    panel.show()
    panel.reload()
    qtbot.waitUntil(lambda: panel._loaded, timeout=10_000)
    panel.model.fetch_all()
    return panel


def cell(panel: LineagePanel, task_id: str, role: int = Qt.ItemDataRole.DisplayRole):
    index = panel.model.index_of_task(task_id)
    return panel.model.index(index.row(), COST_COLUMN, index.parent()).data(role)


# -- the model (no facade) --------------------------------------------------------------------------


def test_a_task_shows_its_cost_and_a_parent_the_sum_below_it(qtbot):
    model = LineageModel()
    rows = [
        task_row(1, None, usage=figures(0.5, 1200)),
        task_row(2, "t000001", usage=figures(0.25, 300)),
        task_row(3, "t000002", usage=figures(None, 0, runs=0)),  # never ran
    ]
    model.set_rows(rows)
    model.fetch_all()
    top = model.index_of_task("t000001")
    middle = model.index_of_task("t000002")
    leaf = model.index_of_task("t000003")

    def at(index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        return model.index(index.row(), COST_COLUMN, index.parent()).data(role)

    assert model.headerData(COST_COLUMN, Qt.Orientation.Horizontal) == "Cost"
    assert (at(top), at(middle), at(leaf)) == ("$0.5000", "$0.2500", "")
    assert at(top, Qt.ItemDataRole.TextAlignmentRole) & Qt.AlignmentFlag.AlignRight
    tip = at(top, TOOLTIP)
    assert "This task: $0.5000 over 1 run" in tip
    assert "Tokens: 1.2k (1.2k in · 0 out · 0 cache read · 0 cache write)" in tip
    assert "Lineage total: $0.7500" in tip and "over 3 tasks, 2 runs" in tip
    assert "With the tasks below it: $0.2500" in at(middle, TOOLTIP)
    assert at(leaf, TOOLTIP) == "This task: nothing used yet (no runs)"  # no children, no sum
    # The folder's row sums its tasks.
    folder = top.parent()
    assert model.index(folder.row(), COST_COLUMN).data() == "$0.7500"
    assert model.index_of_task("t000001").data(ROLE_USAGE)["cost_usd"] == 0.5


def test_new_figures_redraw_the_task_and_every_row_above_it(qtbot):
    model = LineageModel()
    model.set_rows([task_row(1, None), task_row(2, "t000001"), task_row(3, "t000002")])
    model.fetch_all()
    top = model.index_of_task("t000001")
    assert model.index(top.row(), COST_COLUMN, top.parent()).data() == ""  # not read yet
    assert "Not read yet" in model.index(top.row(), COST_COLUMN, top.parent()).data(TOOLTIP)
    model.set_usage({f"t00000{i}": figures(None, runs=0) for i in (1, 2, 3)})
    assert "Lineage total: — over 3 tasks, 0 runs" in model.index(
        top.row(), COST_COLUMN, top.parent()
    ).data(TOOLTIP)
    changed: list[tuple[str, int]] = []
    model.dataChanged.connect(
        lambda first, _last, _roles: changed.append(
            (model.node(first).key, first.column())
        )  # fmt: skip
    )
    model.set_task_fields("t000003", usage=figures(0.125, 50))
    assert {("t000003", COST_COLUMN), ("t000002", COST_COLUMN), ("t000001", COST_COLUMN)} <= set(
        changed
    )
    assert "Lineage total: $0.1250" in model.index(top.row(), COST_COLUMN, top.parent()).data(
        TOOLTIP
    )
    model.set_usage({"t000001": figures(1.0), "t000002": figures(0.0), "t000003": figures(2.0)})
    assert "Lineage total: $3.00" in model.index(top.row(), COST_COLUMN, top.parent()).data(TOOLTIP)


# -- the panel over a real facade -------------------------------------------------------------------


def test_the_cost_column_is_hidden_until_the_header_menu_shows_it(qtbot, context, lineage):
    root, child = lineage
    panel = shown_panel(qtbot, context)
    assert panel.tree.isColumnHidden(COST_COLUMN)
    assert panel.model.task_row(root.id).usage is None  # hidden: nothing read for it
    menu = panel.header_menu()
    (action,) = [a for a in menu.actions() if a.text() == "Cost"]
    assert action.isCheckable() and not action.isChecked()

    action.trigger()
    assert not panel.tree.isColumnHidden(COST_COLUMN)
    assert context.settings.value(COST_COLUMN_SETTING, type=bool) is True
    qtbot.waitUntil(lambda: panel.model.task_row(root.id).usage is not None, timeout=10_000)
    assert cell(panel, root.id) == "$0.0495"
    assert cell(panel, child.id) == "$0.0130"
    expected = context.cairn.views.usage(child.id)["lineage"]
    tip = cell(panel, root.id, TOOLTIP)
    assert "Tokens: " in tip and "11.6k in · 150 out" in tip
    assert "Lineage total: $0.0624" in tip and "over 2 tasks, 2 runs" in tip
    # The lineage's total is the sum of its runs, as the core adds it up.
    runs = context.cairn.views.usage(root.id)["runs"] + context.cairn.views.usage(child.id)["runs"]
    assert panel.model.usage_sum(panel.model.task_node(root.id)).figures()["cost_usd"] == (
        pytest.approx(sum(r["cost_usd"] for r in runs))
    )
    assert expected["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in runs))
    wanted = panel.tree.fontMetrics().horizontalAdvance("$0.0495")
    qtbot.waitUntil(lambda: panel.tree.columnWidth(COST_COLUMN) >= wanted, timeout=5_000)

    action.trigger()
    assert panel.tree.isColumnHidden(COST_COLUMN)
    assert context.settings.value(COST_COLUMN_SETTING, type=bool) is False


def test_a_shown_column_is_remembered_and_read_with_the_tree(qtbot, context, lineage):
    root, _child = lineage
    context.settings.setValue(COST_COLUMN_SETTING, True)
    panel = shown_panel(qtbot, context)
    assert not panel.tree.isColumnHidden(COST_COLUMN)
    assert panel.cost_column_action.isChecked()
    # Read in the same load as the rows: the cell has its figure as soon as the tree shows.
    assert cell(panel, root.id) == "$0.0495"


def test_the_figures_are_read_in_jobs_never_on_the_gui_thread(qtbot, context, lineage, monkeypatch):
    root, child = lineage
    views = context.cairn.views
    threads: list[threading.Thread] = []
    for name in ("usage_all", "usage"):
        real = getattr(views, name)

        def spy(*args, _real=real, **kwargs):
            threads.append(threading.current_thread())
            return _real(*args, **kwargs)

        monkeypatch.setattr(views, name, spy)
    context.settings.setValue(COST_COLUMN_SETTING, True)
    panel = shown_panel(qtbot, context)  # the load
    panel.show_cost_column(False)
    panel.show_cost_column(True)  # shown again: read again
    qtbot.waitUntil(lambda: len(threads) >= 2, timeout=10_000)
    panel.fetch_task(child.id)  # one row read again (a run of it ended)
    qtbot.waitUntil(lambda: len(threads) >= 3, timeout=10_000)
    assert threads and all(t is not threading.main_thread() for t in threads)


def test_a_run_that_ends_updates_its_cell_and_the_lineage_total(qtbot, context, lineage):
    root, child = lineage
    context.settings.setValue(COST_COLUMN_SETTING, True)
    panel = shown_panel(qtbot, context)
    assert cell(panel, child.id) == "$0.0130"
    before = panel.model.usage_sum(panel.model.task_node(root.id)).figures()["cost_usd"]

    run_id = add_run(context.cairn, child, LINES[15:19])
    context.cairn.ctx.events.publish(ev.RUN_STATE, run_id, state="succeeded", task_id=child.id)
    qtbot.waitUntil(lambda: panel.model.task_row(child.id).usage["runs"] == 2, timeout=10_000)
    after = context.cairn.views.usage(child.id)
    assert cell(panel, child.id) == f"${after['task']['cost_usd']:.4f}"
    total = panel.model.usage_sum(panel.model.task_node(root.id)).figures()
    assert total["cost_usd"] == pytest.approx(after["lineage"]["cost_usd"])
    assert total["cost_usd"] > before and total["runs"] == 3
    assert "over 2 tasks, 3 runs" in cell(panel, root.id, TOOLTIP)


def test_a_hidden_column_reads_no_figures(cairn, lineage, monkeypatch):
    monkeypatch.setattr(cairn.views, "usage_all", lambda: pytest.fail("read figures nobody shows"))
    data = load_lineage(cairn, with_sessions=False)
    assert data.rows and all(r.usage is None for r in data.rows)


def test_the_header_s_context_menu_offers_the_column(qtbot, context, lineage):
    panel = shown_panel(qtbot, context)
    header = panel.tree.header()
    header.customContextMenuRequested.emit(QPoint(10, header.height() // 2))
    menu = panel.header_context_menu
    qtbot.waitUntil(menu.isVisible, timeout=5_000)
    assert [a.text() for a in menu.actions()] == ["Cost"]
    assert "tokens" in menu.actions()[0].toolTip()
    menu.close()


def test_a_run_writing_output_updates_the_cell_now_and_then(qtbot, context, lineage):
    root, child = lineage
    context.settings.setValue(COST_COLUMN_SETTING, True)
    panel = shown_panel(qtbot, context)
    panel._usage_timer.setInterval(50)
    run_id = add_run(context.cairn, child, LINES[15:19], state="running")
    context.cairn.ctx.events.publish(ev.RUN_OUTPUT, run_id, run_id=run_id, stream="stdout", text="")
    qtbot.waitUntil(lambda: panel.model.task_row(child.id).usage["runs"] == 2, timeout=10_000)
    panel.model.set_task_fields(child.id, run_state="running")
    assert "A run is in flight: so far" in cell(panel, child.id, TOOLTIP)
