"""The lineage tree: loading and first paint of 10,000 tasks, against a flat QStandardItemModel
of the same rows.

    .venv/bin/python tests/perf/bench_lineage.py [--tasks 10000] [--repeat 5]
    pytest tests/perf/bench_lineage.py -s

What is timed, for each shape of lineage (deep: chains of 1,000; wide: one parent with 5,000
children) and for the flat model: from the rows in memory (what the loading job hands over) to
the tree view's first paint — building the model, the filter proxy in front of it (the app's
setup), setting it on a shown QTreeView, and the paint event of the viewport. The ratio is the
lineage time over the flat model's (target at most 1.5x). Expanding the 5,000-children parent
and typing a filter are printed beside it for context. Medians of --repeat runs, offscreen.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median, print_table, verdict  # noqa: E402

from gui.lineage.model import LineageFilter, LineageModel, badge_text  # noqa: E402
from gui.qt import (  # noqa: E402
    QApplication,
    QEvent,
    QObject,
    QStandardItem,
    QStandardItemModel,
    QTreeView,
)
from tests.gui.support import deep_rows, wide_rows  # noqa: E402

TARGET = 1.5
_APP = None  # the QApplication, kept alive for the whole run


class _PaintWatch(QObject):
    def __init__(self):
        super().__init__()
        self.painted = False

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.Paint:
            self.painted = True
        return False


def _first_paint(build_model) -> float:
    """Seconds from nothing to the first paint of a shown tree view over build_model()."""
    app = QApplication.instance()
    view = QTreeView()
    view.resize(900, 700)
    watch = _PaintWatch()
    view.viewport().installEventFilter(watch)
    start = time.perf_counter()
    model = build_model()
    view.setModel(model)
    view.show()
    deadline = start + 60
    while not watch.painted and time.perf_counter() < deadline:
        app.processEvents()
    elapsed = time.perf_counter() - start
    view.hide()
    view.setModel(None)
    view.deleteLater()
    app.processEvents()
    return elapsed


def lineage_model(rows):
    def build():
        model = LineageModel()
        model.set_rows(rows)
        proxy = LineageFilter()
        proxy.setSourceModel(model)
        proxy._source = model  # the view holds the proxy only: keep the model alive with it
        return proxy

    return build


def lineage_model_fetched(rows):
    """The same, with every node handed out up front (what lazy loading saves)."""

    def build():
        proxy = lineage_model(rows)()
        proxy._source.fetch_all()
        return proxy

    return build


def flat_model(rows):
    def build():
        model = QStandardItemModel()
        model.setHorizontalHeaderLabels(["Task", "State"])
        for row in rows:
            title = QStandardItem(row.title)
            title.setEditable(False)
            state = QStandardItem(badge_text(row))
            state.setEditable(False)
            model.appendRow([title, state])
        return model

    return build


def _expand_wide(rows) -> float:
    """Seconds from asking for all 5,000 children of one parent to the next paint."""
    app = QApplication.instance()
    model = LineageModel()
    model.set_rows(rows)
    view = QTreeView()
    view.resize(900, 700)
    view.setModel(model)
    view.show()
    app.processEvents()
    watch = _PaintWatch()
    view.viewport().installEventFilter(watch)
    start = time.perf_counter()
    parent = model.expose(model.task_node("t000000"))
    while model.canFetchMore(parent):
        model.fetchMore(parent)
    view.expand(parent)
    view.scrollTo(model.index(model.rowCount(parent) - 1, 0, parent))  # to the last child
    while not watch.painted and time.perf_counter() < start + 60:
        app.processEvents()
    elapsed = time.perf_counter() - start
    assert model.rowCount(parent) == len([r for r in rows if r.parent_id == "t000000"])
    view.hide()
    view.setModel(None)
    view.deleteLater()
    app.processEvents()
    return elapsed


def _filter(rows) -> float:
    model = LineageModel()
    model.set_rows(rows)
    proxy = LineageFilter()
    proxy.setSourceModel(model)
    start = time.perf_counter()
    proxy.set_text("task 9999")
    proxy.rowCount()
    return time.perf_counter() - start


def run(tasks: int = 10_000, repeat: int = 5) -> dict:
    global _APP
    _APP = QApplication.instance() or QApplication([sys.argv[0]])
    shapes = {
        "deep": deep_rows(tasks, chain=min(1_000, tasks)),
        "wide": wide_rows(tasks, fan=tasks // 2),
    }
    flat_rows = shapes["deep"]
    _first_paint(flat_model(flat_rows))  # warm up fonts, styles and icons once
    _first_paint(lineage_model(flat_rows))
    flat = median([_first_paint(flat_model(flat_rows)) for _ in range(repeat)])
    result = {"tasks": tasks, "flat_ms": flat * 1000}
    rows_out = [
        (
            f"flat QStandardItemModel, {tasks:,} rows: load + first paint",
            f"{flat * 1000:.1f} ms",
            "",
            "",
        )
    ]
    worst = 0.0
    for shape, rows in shapes.items():
        lineage = median([_first_paint(lineage_model(rows)) for _ in range(repeat)])
        ratio = lineage / flat
        worst = max(worst, ratio)
        result[f"{shape}_ms"] = lineage * 1000
        result[f"{shape}_ratio"] = ratio
        rows_out.append(
            (
                f"lineage ({shape}), {tasks:,} tasks: load + first paint",
                f"{lineage * 1000:.1f} ms ({ratio:.2f}x flat)",
                f"<= {TARGET}x flat",
                verdict(ratio <= TARGET),
            )
        )
    fetched = median(
        [_first_paint(lineage_model_fetched(shapes["wide"])) for _ in range(max(1, repeat // 2))]
    )
    rows_out.append(
        (
            "lineage (wide), every node fetched up front + first paint",
            f"{fetched * 1000:.1f} ms ({fetched / flat:.2f}x flat)",
            "",
            "",
        )
    )
    wide = shapes["wide"]
    expand = median([_expand_wide(wide) for _ in range(max(1, repeat // 2))])
    filtering = median([_filter(wide) for _ in range(max(1, repeat // 2))])
    rows_out.append(
        (
            f"expand the parent of {tasks // 2:,} children (fetch all + paint)",
            f"{expand * 1000:.1f} ms",
            "",
            "",
        )
    )
    rows_out.append(
        (f"filter {tasks:,} tasks (one keystroke's work)", f"{filtering * 1000:.1f} ms", "", "")
    )
    result["ratio"] = worst
    print_table(f"Lineage tree: {tasks:,} tasks, median of {repeat}", rows_out)
    return result


def test_lineage_loads_and_paints_within_target_of_a_flat_model():
    result = run(10_000, repeat=5)
    assert result["ratio"] <= TARGET, (
        f"the lineage took {result['ratio']:.2f}x the flat model (target {TARGET}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    run(args.tasks, args.repeat)


if __name__ == "__main__":
    main()
