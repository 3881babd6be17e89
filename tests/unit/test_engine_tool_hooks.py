"""The approval gate is set up for a run only when its engine asks it about tool calls: an engine
declares `has_tool_hooks` exactly when its launch files call the gate it is given. A shell run's
programs are judged by the exec supervisor alone, so it gets no gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.engines import ENGINES
from core.engines.base import MODE_START, EngineSettings, LaunchContext

GATE = ["python3", "/cairn/tools/approval-gate.py"]


def launch_files(engine_name: str, tmp_path: Path, gate: list[str]) -> str:
    """Everything the engine writes and runs for a first attempt, as one text."""
    engine = ENGINES[engine_name]()
    root = tmp_path / ("gated" if gate else "ungated")
    ctx = LaunchContext(
        run_id="run-1",
        mode=MODE_START,
        prompt="make hello.txt",
        spec={"commands": ["echo hi"]} if engine_name == "shell" else {"mode": MODE_START},
        settings=EngineSettings(base_url="http://127.0.0.1:8123"),
        host_run_dir=root / "runs" / "run-1.1",
        sandbox_run_dir="/cairn/runs/run-1.1",
        host_home=root / "home",
        sandbox_home="/home/agent",
        gate=gate,
    )
    ctx.host_run_dir.mkdir(parents=True)
    ctx.host_home.mkdir(parents=True)
    engine.prepare(ctx)
    written = [p.read_text() for p in sorted(root.rglob("*")) if p.is_file()]
    return "\n".join([*written, " ".join(engine.launch_argv(ctx))])


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
def test_an_engine_has_tool_hooks_exactly_when_its_launch_calls_the_gate(engine_name, tmp_path):
    gated = launch_files(engine_name, tmp_path, GATE)
    ungated = launch_files(engine_name, tmp_path, [])
    assert "approval-gate.py" not in ungated
    assert ENGINES[engine_name].has_tool_hooks == ("approval-gate.py" in gated)


def test_the_shell_engine_has_no_tool_hooks():
    assert not ENGINES["shell"].has_tool_hooks
    assert ENGINES["claude-code"].has_tool_hooks and ENGINES["codex"].has_tool_hooks
