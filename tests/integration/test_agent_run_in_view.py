"""A real Claude Code run as the window shows it: the installed CLI against the scripted model
server, in a real sandbox, set up through `cairnctl` (a task that runs two Bash tool calls, one
of which fails, and a Continue child that runs once more). The task view over a facade on the
same data folder shows one block per tool call naming its command with its status, and the cost
line and the per-run table show each run's tokens and cost as the core recorded them; the
lineage's total, in the task view and in the tree's Cost column, is the sum of its runs.

Skips, with the reason, without Docker, the sandbox image, the Claude Code CLI or an unlocked
Secret Service.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.app import Cairn
from core.approvals import stop_judge
from core.sandbox import egress
from core.usage import cost_text, summary_text, tokens_text
from gui.context import AppContext
from gui.lineage.model import COST_COLUMN
from gui.lineage.panel import COST_COLUMN_SETTING
from gui.main_window import MainWindow
from gui.qt import QSettings, Qt
from gui.task_view.cost import run_cells
from gui.task_view.output import CALL, DONE, FAILED
from tests.agents.fake_anthropic import Bash, FakeAnthropic, Reply
from tests.agents.locate import claude_binary, missing
from tests.support import as_json, cairnctl

API_KEY = "sk-ant-test-not-a-real-key"
MAKE = "echo made > made.txt"
MISSING = "ls missing-file"

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def binary() -> Path:
    found = claude_binary()
    if found is None:
        pytest.skip(missing())
    return found


@pytest.fixture(autouse=True)
def collect_on_the_gui_thread():
    """As the app does (gui.collector): no automatic collection while the window's jobs run."""
    was_enabled = gc.isenabled()
    gc.disable()
    yield
    gc.collect()
    if was_enabled:
        gc.enable()


@contextmanager
def approving(data: Path) -> Iterator[None]:
    """A person who lets every command the runs ask about go ahead (what is judged is not this
    test's subject)."""
    done = threading.Event()

    def approve() -> None:
        while not done.wait(1.0):
            listed = cairnctl(data, "approvals", "--json", check=False)
            if listed.returncode != 0:
                continue
            for request in json.loads(listed.stdout).get("approvals", []):
                cairnctl(data, "approve", request["id"], check=False)

    thread = threading.Thread(target=approve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=30)


def _settings(data: Path, binary: Path, url: str, secret: str) -> None:
    (data / "settings.json").write_text(
        json.dumps(
            {
                "engines": {
                    "claude-code": {
                        "binary": str(binary),
                        "base_url": url,
                        "api_key_secret": secret,
                    }
                }
            }
        )
    )


def _cleanup(data: Path, secret: str, docker_client) -> None:
    cairnctl(data, "secret", "rm", secret, check=False)
    label = f"cairn.data_dir={data.resolve()}"
    for c in docker_client.containers.list(all=True, filters={"label": label}):
        c.remove(force=True)
    for sock in (data / "egress").glob("*/sandbox/egress.sock"):
        egress.stop(sock)
    stop_judge(data.resolve())


def _run_a_lineage(data: Path, src: Path, binary: Path, secret: str) -> tuple[str, str]:
    """A task whose run makes two Bash tool calls, and a Continue child that runs once more:
    (the task's id, the child's id)."""
    script = [
        Bash(MAKE, text="Making the file."),
        Bash(MISSING, description="Look for a file that is not there"),
        Reply("Made made.txt; missing-file is not there."),
        Reply("Second turn."),
    ]
    with FakeAnthropic(script) as server, approving(data):
        _settings(data, binary, server.url, secret)
        cairnctl(data, "secret", "set", secret, input=API_KEY)
        made = as_json(
            cairnctl(
                data,
                *("new", str(src), "--engine", "claude-code", "--network", "allowlist"),
                *("-m", "make a file", "--detach", "--json"),
            )
        )
        done = as_json(cairnctl(data, "follow", made["task_id"], "--json", timeout=240))
        assert done["state"] == "succeeded", done
        again = as_json(
            cairnctl(data, "continue", made["task_id"], "-m", "and again", "--json",
                     timeout=240)
        )  # fmt: skip
        assert again["state"] == "succeeded", again
    return made["task_id"], again["task_id"]


def test_a_claude_code_run_shows_its_tool_calls_and_its_cost_in_the_task_view(
    binary, sandbox_image, docker_client, secret_service, tmp_path, qtbot, request
):
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("a project\n")
    data = tmp_path / "data"
    data.mkdir()
    secret = f"claude-view-{uuid.uuid4().hex[:12]}"
    try:
        task_id, child_id = _run_a_lineage(data, src, binary, secret)
    finally:
        _cleanup(data, secret, docker_client)
    first = as_json(cairnctl(data, "cost", task_id, "--json"))
    second = as_json(cairnctl(data, "cost", child_id, "--json"))
    (run_one,) = first["runs"]
    (run_two,) = second["runs"]
    for run in (run_one, run_two):
        assert run["input_tokens"] > 0 and run["output_tokens"] > 0, run
        assert run["cost_usd"] > 0 and run["cost_source"] == "engine", run

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue(COST_COLUMN_SETTING, True)  # the tree's optional column, shown
    facade = Cairn(data)
    context = AppContext(facade, settings=settings, data_dir=data)
    win = MainWindow(context)
    qtbot.addWidget(win)
    try:
        win.resize(1366, 768)
        win.show()
        qtbot.waitExposed(win)
        qtbot.waitUntil(lambda: len(win.lineage.model) == 2, timeout=20_000)
        view = win.task_view
        assert win.lineage.select_task(task_id)
        qtbot.waitUntil(
            lambda: view.data is not None and view.data.details["task_id"] == task_id,
            timeout=20_000,
        )

        # One block per tool call: the command it ran and how it ended.
        def calls():
            return [b for b in view.output.transcript.blocks if b.kind == CALL]

        qtbot.waitUntil(lambda: len(calls()) == 2, timeout=20_000)
        make, look = calls()
        assert (make.title, make.status) == (f"$ {MAKE}", DONE), make
        assert (look.title, look.status, look.exit_code) == (f"$ {MISSING}", FAILED, 2), look
        assert any("missing-file" in line.text for line in look.lines), look.lines
        drawn = view.output.toPlainText().split("\n")
        headers = [line for line in drawn if line.startswith(("▾ $ ", "▸ $ "))]
        assert len(headers) == 2, drawn
        assert f"$ {MAKE}" in headers[0] and headers[0].endswith(" · ok"), headers
        assert f"$ {MISSING}" in headers[1] and headers[1].endswith(" · exit 2"), headers

        # The cost line: this run's tokens and cost, and the lineage's over both runs.
        cost = view.cost
        qtbot.waitUntil(
            lambda: cost.figures is not None and cost.figures["task_id"] == task_id,
            timeout=20_000,
        )
        summary = cost.summary.text()
        assert summary.startswith(f"Used: {summary_text(first['task'])}"), summary
        assert cost_text(run_one) in summary and tokens_text(run_one) in summary, summary
        lineage = first["lineage"]
        assert lineage == second["lineage"] and lineage["runs"] == 2
        assert lineage["cost_usd"] == pytest.approx(
            run_one["cost_usd"] + run_two["cost_usd"], abs=1e-6
        )
        for field in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            assert lineage[field] == run_one[field] + run_two[field]
        assert f"lineage {cost_text(lineage)} over 2 tasks, 2 runs" in summary, summary
        cost.toggle.click()
        assert cost.table.isVisible() and cost.table.rowCount() == 1
        shown = [cost.table.item(0, c).text() for c in range(cost.table.columnCount())]
        assert shown == run_cells(cost.figures["runs"][0])
        assert shown[0] == run_one["run_id"] and shown[2] == cost_text(run_one)

        # The tree's Cost column: each task's own cost; the lineage's total at its top.
        tree = win.lineage
        qtbot.waitUntil(
            lambda: all(tree.model.task_row(t).usage is not None for t in (task_id, child_id)),
            timeout=20_000,
        )
        assert not tree.tree.isColumnHidden(COST_COLUMN)

        def cell(task: str, role: int = Qt.ItemDataRole.DisplayRole):
            index = tree.model.index_of_task(task)
            return tree.model.index(index.row(), COST_COLUMN, index.parent()).data(role)

        assert cell(task_id) == cost_text(run_one) and cell(child_id) == cost_text(run_two)
        assert f"Lineage total: {cost_text(lineage)}" in cell(task_id, Qt.ItemDataRole.ToolTipRole)
        summed = tree.model.usage_sum(tree.model.task_node(task_id)).figures()
        assert summed["cost_usd"] == pytest.approx(lineage["cost_usd"], abs=1e-6)
        assert summed["total_tokens"] == lineage["total_tokens"]

        if os.environ.get("CAIRN_TEST_ARTIFACTS"):
            # The task view gets the height it needs to show the blocks with the cost line.
            win.centre_splitter.setSizes([600, 168])
            win.task_scroll.ensureWidgetVisible(view.output)
            qtbot.wait(200)
            folder = request.getfixturevalue("artifacts_dir")
            assert win.grab().save(str(folder / "claude_run_in_the_task_view.png"))

        # The child's view: its own run, and the same lineage total.
        assert win.lineage.select_task(child_id)
        qtbot.waitUntil(
            lambda: cost.figures is not None and cost.figures["task_id"] == child_id,
            timeout=20_000,
        )
        assert cost.figures["lineage"]["cost_usd"] == pytest.approx(lineage["cost_usd"])
        assert [r["run_id"] for r in cost.figures["runs"]] == [run_two["run_id"]]
        assert f"lineage {cost_text(lineage)} over 2 tasks, 2 runs" in cost.summary.text()
    finally:
        win.close()
        context.close(close_facade=False)
        facade.close()
        _cleanup(data, secret, docker_client)
