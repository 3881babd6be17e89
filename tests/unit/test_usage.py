"""What runs used of their model: Claude Code's per-turn cost (never its session total, which a
resumed or forked session carries on), Codex's running thread totals taken as differences, tokens
priced from the table when the engine gives no cost, each ended run recorded once, and a task's
and a lineage's sums equal to the sum of their runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core import events as ev
from core.app import Cairn
from core.errors import InputError
from core.models import Run, Task, TaskSource
from core.settings import DEFAULT_PRICES, parse_price, read_prices, set_setting, unset_setting
from core.usage import Usage, price_for, total, usage_of_output
from tests.support import as_json, cairnctl

SAMPLES = Path(__file__).resolve().parents[1] / "agents" / "samples"


def sample_lines(name: str) -> list[str]:
    return (SAMPLES / name).read_text().splitlines(keepends=True)


CLAUDE = sample_lines("claude-stream.jsonl")
CODEX = sample_lines("codex-exec.jsonl")


def test_claude_code_runs_cost_their_own_turns_not_the_session_total():
    first, _ = usage_of_output("claude-code", ["".join(CLAUDE[0:11])], prices={})
    resumed, _ = usage_of_output("claude-code", ["".join(CLAUDE[11:15])], prices={})
    forked, _ = usage_of_output("claude-code", ["".join(CLAUDE[15:19])], prices={})
    assert (first.input_tokens, first.output_tokens) == (11613, 150)
    assert first.cost_usd == pytest.approx(0.049452)
    assert (resumed.input_tokens, resumed.output_tokens) == (3179, 14)
    assert resumed.cost_usd == pytest.approx(0.012996)  # the session's total is 0.062448
    assert forked.cost_usd == pytest.approx(0.013076)  # the fork's session total is 0.075524
    assert first.to_json()["cost_source"] == "engine" and first.models == {"claude-opus-5-5"}
    both = total([first, resumed, forked])
    assert both.cost_usd == pytest.approx(0.049452 + 0.012996 + 0.013076)
    assert both.input_tokens == 11613 + 3179 + 3214 and both.runs == 3


def test_an_older_claude_code_that_reports_only_its_total_is_taken_at_its_word():
    record = json.loads(CLAUDE[10])
    del record["model_usage_since_last_result"]
    used, _ = usage_of_output("claude-code", [json.dumps(record) + "\n"], prices={})
    assert used.cost_usd == pytest.approx(0.049452) and used.input_tokens == 11613


def test_a_resumed_turn_that_made_no_model_call_costs_nothing():
    record = json.loads(CLAUDE[14])
    record["model_usage_since_last_result"] = {}
    record["usage"] = {"input_tokens": 0, "output_tokens": 0}
    used, _ = usage_of_output("claude-code", [json.dumps(record) + "\n"], prices={})
    assert used.cost_usd == 0 and used.total_tokens == 0  # not the session's 0.062448


def test_codex_running_totals_become_each_runs_own_tokens_priced_from_the_table():
    prices = {"gpt-5.5": parse_price("input=2,output=20,cache_read=0.5")}
    first, threads = usage_of_output(
        "codex", ["".join(CODEX[0:12])], prices=prices, model="gpt-5.5"
    )
    assert (first.input_tokens, first.output_tokens) == (400, 40)
    assert first.cost_usd == pytest.approx((400 * 2 + 40 * 20) / 1e6)
    assert first.to_json()["cost_source"] == "price table"
    resumed, _ = usage_of_output(
        "codex", ["".join(CODEX[12:18])], prices=prices, model="gpt-5.5", threads=threads
    )
    assert (resumed.input_tokens, resumed.output_tokens) == (100, 10)  # 500 - 400, 50 - 40
    # Without a price the tokens are counted and said to be unpriced.
    unpriced, _ = usage_of_output("codex", ["".join(CODEX[0:12])], prices={}, model="gpt-5.5")
    assert unpriced.total_tokens == 440 and unpriced.unpriced_tokens == 440
    assert unpriced.to_json()["cost_usd"] is None and not unpriced.to_json()["cost_complete"]


def test_a_codex_fork_that_carries_its_parents_totals_counts_only_its_own():
    prices = {"gpt-5.5": parse_price("input=1,output=1")}
    _, threads = usage_of_output("codex", ["".join(CODEX[0:12])], prices=prices, model="gpt-5.5")
    forked = "".join(CODEX[12:18]).replace("01a22bbd-4d03-7100-8fee-629c052cbc73", "f" * 8)
    used, _ = usage_of_output(
        "codex",
        [forked],
        prices=prices,
        model="gpt-5.5",
        threads=threads,
        parent_session="01a22bbd-4d03-7100-8fee-629c052cbc73",
    )
    assert (used.input_tokens, used.output_tokens) == (100, 10)


def test_a_dated_release_takes_its_models_price_and_a_longer_entry_wins():
    assert (
        price_for("claude-sonnet-4-5-20250929", DEFAULT_PRICES)
        == DEFAULT_PRICES["claude-sonnet-4-5"]
    )
    assert price_for("gpt-5-mini", DEFAULT_PRICES) == DEFAULT_PRICES["gpt-5-mini"]
    assert price_for("gpt-5.5", DEFAULT_PRICES) is None  # not a release of gpt-5
    assert price_for(None, DEFAULT_PRICES) is None


def test_prices_are_set_checked_and_unset_in_the_settings(tmp_path):
    path = tmp_path / "settings.json"
    stored = set_setting(path, "prices.gpt-5.5", " input=2, output=20 ")
    assert stored == "input=2,output=20,cache_read=2,cache_write=2"
    assert read_prices(path)["gpt-5.5"]["output"] == 20
    assert read_prices(path)["claude-opus-4-5"] == DEFAULT_PRICES["claude-opus-4-5"]
    for bad, match in [
        ("input=2", "needs output"),
        ("input=two,output=1", "not a number"),
        ("input=1,output=1,speed=3", "not a price"),
        ("input=-1,output=1", "out of range"),
    ]:
        with pytest.raises(InputError, match=match):
            set_setting(path, "prices.gpt-5.5", bad)
    with pytest.raises(InputError, match="not a model name"):
        set_setting(path, "prices. bad", "input=1,output=1")
    assert unset_setting(path, "prices.gpt-5.5") and "gpt-5.5" not in read_prices(path)


# -- recorded per run, summed per task and lineage ------------------------------------------------


@pytest.fixture
def cairn(tmp_path: Path):
    app = Cairn(tmp_path / "data")
    yield app
    app.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "main.txt").write_text("hello\n")
    return path


def child_of(cairn: Cairn, parent: Task, n: int) -> Task:
    child = Task(
        f"t_child{n}_{int(time.time() * 1e6)}",
        f"child {n}",
        parent.source_id,
        parent.workspace_id,
        parent.engine,
        "more",
        parent.id,
        TaskSource.CONTINUE.value,
        None,
        time.time(),
    )
    cairn.ctx.store.add_task(child)
    return child


def run_with_output(cairn: Cairn, task: Task, lines: list[str], state: str = "succeeded") -> str:
    run_id = f"r_{task.id}_{len(cairn.ctx.store.runs_of([task.id]))}"
    cairn.ctx.store.add_run(
        Run(run_id, task.id, state, 0, task.engine, workspace_id=task.workspace_id,
            created_at=time.time())
    )  # fmt: skip
    for line in lines:  # one chunk per line, as a follower may store them
        cairn.ctx.store.append_event(
            ev.RUN_OUTPUT, run_id, {"run_id": run_id, "stream": "stdout", "text": line}
        )
    cairn.ctx.store.append_event(
        ev.RUN_OUTPUT, run_id, {"run_id": run_id, "stream": "stderr", "text": CLAUDE[10]}
    )
    return run_id


def test_a_lineages_total_is_the_sum_of_its_runs_and_each_ended_run_is_recorded_once(cairn, folder):
    root = cairn.tasks.new(folder, engine="claude-code").task
    child = child_of(cairn, root, 1)
    grandchild = child_of(cairn, child, 2)
    run_with_output(cairn, root, CLAUDE[0:11])
    run_with_output(cairn, child, CLAUDE[11:15])
    run_with_output(cairn, grandchild, CLAUDE[15:19])
    live = run_with_output(cairn, grandchild, CLAUDE[21:29], state="running")

    shown = cairn.views.usage(grandchild.id)
    runs = shown["runs"]
    assert [r["run_id"] for r in runs][-1] == live and runs[-1]["in_flight"]
    assert shown["task"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in runs))
    every_run = Usage()
    for task in (root, child, grandchild):
        for r in cairn.views.usage(task.id)["runs"]:
            every_run.add(Usage.from_json(r))
    lineage = shown["lineage"]
    assert lineage["runs"] == 4 == every_run.runs
    assert lineage["cost_usd"] == pytest.approx(every_run.cost_usd)
    assert lineage["input_tokens"] == every_run.input_tokens
    assert lineage["output_tokens"] == every_run.output_tokens
    assert lineage == cairn.views.usage(root.id)["lineage"]
    shares = {row["task_id"]: row["cost_usd"] for row in shown["lineage_tasks"]}
    assert sum(shares.values()) == pytest.approx(lineage["cost_usd"])
    assert shares[root.id] == pytest.approx(0.049452)

    recorded = {r["run_id"] for r in cairn.ctx.store.query("SELECT run_id FROM run_usage")}
    assert live not in recorded and len(recorded) == 3
    # A recorded run keeps its figures: its output is read no more.
    cairn.ctx.store.query("DELETE FROM events WHERE kind = ?", (ev.RUN_OUTPUT,))
    again = cairn.views.usage(root.id)
    assert again["task"]["cost_usd"] == pytest.approx(0.049452)
    assert again["lineage"]["runs"] == 4
    everything = cairn.views.usage_all()
    assert everything["total"]["cost_usd"] == pytest.approx(again["lineage"]["cost_usd"])


def test_a_shell_task_used_nothing(cairn, folder):
    task = cairn.tasks.new(folder).task
    run_with_output(cairn, task, ["hello\n"])
    shown = cairn.views.usage(task.id)
    assert shown["task"]["total_tokens"] == 0 and shown["task"]["cost_usd"] is None


def test_cairnctl_cost_and_show_print_the_runs_the_task_and_the_lineage(cairn, folder, tmp_path):
    root = cairn.tasks.new(folder, engine="claude-code").task
    child = child_of(cairn, root, 1)
    run_with_output(cairn, root, CLAUDE[0:11])
    run_with_output(cairn, child, CLAUDE[11:15])
    data = tmp_path / "data"
    text = cairnctl(data, "cost", child.id).stdout
    assert "$0.0130" in text and "3.2k in · 14 out" in text
    assert "lineage    $0.0624" in text and "over 2 tasks, 2 runs" in text
    figures = as_json(cairnctl(data, "cost", child.id, "--json"))
    assert figures["lineage"]["cost_usd"] == pytest.approx(0.049452 + 0.012996)
    shown = as_json(cairnctl(data, "show", root.id, "--json"))
    assert shown["usage"]["task"]["cost_usd"] == pytest.approx(0.049452)
    assert "$0.0495" in cairnctl(data, "show", root.id).stdout
    everything = cairnctl(data, "cost").stdout
    assert everything.splitlines()[-1].split()[:2] == ["total", "$0.0624"]
