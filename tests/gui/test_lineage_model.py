"""The lineage model keeps Qt's model contract over ten thousand tasks (deep and wide), loads
lazily, groups by folder, updates rows in place, and filters while keeping ancestors."""

from __future__ import annotations

import pytest
from PySide6.QtTest import QAbstractItemModelTester

from gui.lineage.model import (
    FETCH_CHUNK,
    ROLE_APPROVALS,
    ROLE_KIND,
    ROLE_LIVE_SESSION,
    ROLE_RUN_STATE,
    ROLE_SNAPSHOT,
    ROLE_TASK_ID,
    LineageFilter,
    LineageModel,
    build_forest,
)
from gui.qt import QAbstractItemModel, QModelIndex, Qt, QTreeView
from tests.gui.support import deep_rows, task_row, wide_rows


@pytest.fixture
def model_failures(qtlog):
    """The FAIL! lines Qt's model tester logged during the test."""

    def failures() -> list[str]:
        return [r.message for r in qtlog.records if "FAIL" in r.message]

    return failures


def attach_tester(model: QAbstractItemModel) -> QAbstractItemModelTester:
    return QAbstractItemModelTester(model, QAbstractItemModelTester.FailureReportingMode.Warning)


def walk_indexes(model: QAbstractItemModel, parent: QModelIndex = QModelIndex()):
    stack = [parent]
    while stack:
        p = stack.pop()
        for row in range(model.rowCount(p)):
            index = model.index(row, 0, p)
            yield index
            stack.append(index)


@pytest.mark.no_qt_log  # the failures are expected here; pytest-qt fails tests on them elsewhere
def test_the_tester_catches_a_broken_model(qtbot):
    # The harness itself: a model whose children claim the wrong parent must be reported.
    from PySide6.QtCore import qInstallMessageHandler

    messages: list[str] = []

    class Broken(LineageModel):
        def parent(self, index=None):
            if index is None:
                return super().parent()
            result = super().parent(index)
            return self.index(0, 0) if not result.isValid() and index.row() > 0 else result

    model = Broken()
    model.set_rows(deep_rows(20, chain=5))
    model.fetch_all()
    previous = qInstallMessageHandler(lambda _type, _context, text: messages.append(text))
    try:
        tester = attach_tester(model)
    finally:
        qInstallMessageHandler(previous)
    assert any("FAIL" in m for m in messages), "a broken parent() went unnoticed"
    del tester


@pytest.mark.parametrize("shape", ["deep", "wide"])
def test_ten_thousand_tasks_pass_the_model_tester(qtbot, model_failures, shape):
    rows = deep_rows() if shape == "deep" else wide_rows()
    assert len(rows) == 10_000
    model = LineageModel()
    watching = attach_tester(model)  # checks every signal from here on
    model.set_rows(rows)
    # Fetch under the tester the way a view does when the user expands: down a whole chain of
    # 1,000 (deep), or all 5,000 children of one parent (wide), chunk by chunk.
    if shape == "deep":
        model.expose(model.task_node("t000999"))
    else:
        parent = model.expose(model.task_node("t000000"))
        while model.canFetchMore(parent):
            model.fetchMore(parent)
        assert model.rowCount(parent) == 5_000
    assert model_failures() == []
    del watching

    # Everything fetched, then a fresh tester walks the whole tree (Qt's tester goes 10 deep).
    model.fetch_all()
    full = attach_tester(model)
    assert model_failures() == []

    # Every one of the 10,000 is reachable and each index's parent leads back to it, at every
    # depth (down to 1,000 in the deep shape).
    seen = 0
    for index in walk_indexes(model):
        if index.data(ROLE_KIND) == "task":
            seen += 1
        assert model.index(index.row(), 0, index.parent()) == index
    assert seen == 10_000

    # New tasks and changed states under the tester.
    assert model.add_task(task_row(20_000, rows[-1].task_id, source=int(rows[-1].source_id[3:])))
    assert model.add_task(task_row(20_001, None, source=77, source_path="/repos/new"))
    assert model.set_task_fields(rows[5].task_id, run_state="running", approvals=3)
    assert model_failures() == []
    del full


def test_a_fetch_asked_for_during_a_change_runs_after_it(qtbot, model_failures):
    model = LineageModel()
    model.set_rows(deep_rows(30, chain=10))
    fetched_inside: list[int] = []

    def fetch_from_slot(*_args):
        # What Qt's tester (or a proxy) does from a slot of the model's own signals.
        folder = model.index(0, 0)
        if folder.isValid() and model.canFetchMore(folder):
            model.fetchMore(folder)
            fetched_inside.append(model.rowCount(folder))

    model.rowsInserted.connect(fetch_from_slot)
    tester = attach_tester(model)
    model.fetchMore(QModelIndex())
    assert fetched_inside == [0]  # not nested inside the insert being announced
    qtbot.waitUntil(lambda: model.rowCount(model.index(0, 0)) == 1)
    model.rowsInserted.disconnect(fetch_from_slot)
    assert model_failures() == []
    del tester


def test_deep_chain_index_round_trips_at_depth_one_thousand(qtbot):
    model = LineageModel()
    model.set_rows(deep_rows(1_000, chain=1_000))
    leaf = model.index_of_task("t000999")
    assert leaf.isValid()
    depth = 0
    walker = leaf
    while walker.isValid():
        depth += 1
        walker = walker.parent()
    assert depth == 1_001  # 1,000 tasks under their folder


def test_children_are_fetched_lazily_in_chunks(qtbot):
    model = LineageModel()
    model.set_rows(wide_rows())
    assert model.rowCount() == 0 and model.canFetchMore(QModelIndex())
    model.fetchMore(QModelIndex())
    assert model.rowCount() == 2  # two folders
    folder = model.index(0, 0)
    assert model.hasChildren(folder) and model.rowCount(folder) == 0
    model.fetchMore(folder)
    parent = model.index(0, 0, folder)
    assert parent.data(ROLE_TASK_ID) == "t000000"
    model.fetchMore(parent)
    assert model.rowCount(parent) == FETCH_CHUNK
    assert model.canFetchMore(parent)


def test_a_view_shows_only_what_is_expanded(qtbot):
    model = LineageModel()
    model.set_rows(wide_rows())
    view = QTreeView()
    qtbot.addWidget(view)
    view.setModel(model)
    view.show()
    qtbot.waitExposed(view)
    assert model.rowCount() == 2
    first = model.index(0, 0)
    view.expand(first)
    qtbot.waitUntil(lambda: model.rowCount(first) > 0)


def test_rows_carry_title_badge_text_and_badge_roles(qtbot):
    model = LineageModel()
    row = task_row(
        7,
        None,
        run_state="waiting_approval",
        live=True,
        snapshot="stale",
        approvals=2,
        title="Fix the login test",
    )
    model.set_rows([row])
    index = model.index_of_task(row.task_id)
    assert index.data() == "Fix the login test"
    state = index.siblingAtColumn(1)
    assert state.data() == "waiting for approval · live · snapshot behind · 2 to approve"
    assert state.data(Qt.ItemDataRole.ForegroundRole) is not None
    assert index.data(ROLE_RUN_STATE) == "waiting_approval"
    assert index.data(ROLE_LIVE_SESSION) is True
    assert index.data(ROLE_SNAPSHOT) == "stale"
    assert index.data(ROLE_APPROVALS) == 2
    assert "2 commands waiting for approval" in index.data(Qt.ItemDataRole.ToolTipRole)
    folder = index.parent()
    assert folder.data() == "project-0"
    assert folder.data(Qt.ItemDataRole.ToolTipRole) == "/repos/project-0"
    assert folder.siblingAtColumn(1).data() == "1 task"


def test_tasks_group_under_folders_and_parents(qtbot):
    rows = [
        task_row(1, None, source=0),
        task_row(2, "t000001", source=0),
        task_row(3, None, source=1),
        task_row(4, "t000003", source=1),
        task_row(5, "missing-parent", source=1),
    ]
    model = LineageModel()
    model.set_rows(rows)
    assert model.index_of_task("t000002").parent() == model.index_of_task("t000001")
    assert model.index_of_task("t000005").parent().data(ROLE_KIND) == "source"
    assert model.index_of_task("t000004").parent().parent().data() == "project-1"


def test_a_parent_cycle_does_not_lose_tasks():
    rows = [task_row(1, "t000002"), task_row(2, "t000001"), task_row(3, None)]
    root, tasks, sources = build_forest(rows)
    found = {n.key for n in root.walk() if n.kind == "task"}
    assert found == {"t000001", "t000002", "t000003"}


def test_new_tasks_are_inserted_where_they_belong(qtbot, model_failures):
    model = LineageModel()
    tester = attach_tester(model)
    model.set_rows([task_row(1, None)])
    model.fetch_all()
    with qtbot.waitSignal(model.rowsInserted):
        model.add_task(task_row(2, "t000001"))
    assert model.index_of_task("t000002").parent() == model.index_of_task("t000001")
    # A new folder is inserted in name order.
    model.add_task(task_row(3, None, source=9, source_path="/repos/aaa"))
    assert model.index(0, 0).data() == "aaa"
    assert model.index(1, 0).data() == "project-0"
    # Adding a known task again only updates it.
    again = task_row(2, "t000001", title="renamed")
    assert not model.add_task(again)
    assert model.index_of_task("t000002").data() == "renamed"
    assert model_failures() == []
    del tester


def test_state_changes_emit_data_changed_for_the_row(qtbot):
    model = LineageModel()
    model.set_rows([task_row(1, None, run_state="running")])
    index = model.index_of_task("t000001")
    with qtbot.waitSignal(model.dataChanged) as blocker:
        model.set_task_fields("t000001", run_state="succeeded")
    first, last = blocker.args[0], blocker.args[1]
    assert first.row() == last.row() == index.row()
    assert index.siblingAtColumn(1).data().startswith("succeeded")
    assert model.task_for_workspace("ws000001") == "t000001"


def test_filter_keeps_ancestors_and_finds_unfetched_matches(qtbot, model_failures):
    model = LineageModel()
    rows = deep_rows(2_000, chain=1_000)
    rows[1_500].title = "Needle in a deep chain"
    model.set_rows(rows)
    proxy = LineageFilter()
    proxy.setSourceModel(model)
    tester = attach_tester(proxy)
    proxy.set_text("needle")
    # Only the folder of the match shows, though nothing below it was fetched yet.
    assert proxy.rowCount() == 1
    assert proxy.index(0, 0).data() == "project-1"
    # Fetching down to it (as expanding does) shows the chain down to the match.
    model.expose(model.task_node("t001500"))
    walker, depth = proxy.index(0, 0), 0
    while proxy.rowCount(walker):
        assert proxy.rowCount(walker) == 1
        walker = proxy.index(0, 0, walker)
        depth += 1
    assert walker.data() == "Needle in a deep chain"
    assert depth == 501
    proxy.set_text("")
    assert proxy.rowCount() == 2
    assert model_failures() == []
    del tester


def test_filter_matches_ids_states_and_new_rows(qtbot):
    model = LineageModel()
    model.set_rows([task_row(1, None, run_state="failed"), task_row(2, None, run_state="running")])
    model.fetch_all()
    proxy = LineageFilter()
    proxy.setSourceModel(model)
    proxy.set_text("t000002")
    folder = proxy.index(0, 0)
    assert proxy.rowCount(folder) == 1
    proxy.set_text("FAILED")
    assert proxy.index(0, 0, proxy.index(0, 0)).data() == "task 1"
    model.add_task(task_row(3, None, run_state="failed", title="another failure"))
    assert proxy.rowCount(proxy.index(0, 0)) == 2
    proxy.set_text("nothing like this")
    assert proxy.rowCount() == 0
