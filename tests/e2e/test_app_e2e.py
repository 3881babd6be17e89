"""The real app under Xvfb, end to end: a folder dropped from another X client becomes a task, a
shell-engine run edits files in a Docker sandbox and its revisions appear, two revisions are
compared, a fork from the first revision runs, the fork is continued, one risky command is
approved and another denied; then Cairn quits and is started again on the same data and shows
the same state. Screenshots of every step are saved under test-artifacts/ (see
tests/e2e/scenario.py for the steps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gui.task_view.actions import BUTTONS
from tests.conftest import REPO_ROOT

AGENT_BIN = REPO_ROOT / "tests" / "agents" / "node_modules" / ".bin"

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PHASE_TIMEOUT_S = 420


def run_phase(phase: str, env: dict, shots: Path, result: Path, *args: str) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.e2e.scenario",
            phase,
            "--shots",
            str(shots),
            "--result",
            str(result),
            *args,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=PHASE_TIMEOUT_S,
    )
    (shots / f"{phase}.log").write_text(proc.stdout + proc.stderr)
    assert result.is_file(), f"the {phase} phase wrote no result:\n{proc.stderr[-3000:]}"
    outcome = json.loads(result.read_text())
    (shots / f"{phase}.json").write_text(json.dumps(outcome, indent=2))  # what it saw, kept
    assert outcome.get("ok"), (
        f"{phase}: {outcome.get('error')}\n{outcome.get('traceback')}\n{proc.stderr[-2000:]}"
    )
    assert proc.returncode == 0, f"{phase}: the app exited with {proc.returncode}:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return outcome


def test_drop_run_diff_fork_continue_approve_deny_quit_and_relaunch(
    tmp_path, x_display, sandbox_image, repo, e2e_data, artifacts_dir
):
    env = {k: v for k, v in os.environ.items() if not k.startswith("QT_")}
    env.update(
        DISPLAY=x_display,
        QT_QPA_PLATFORM="xcb",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        CAIRN_DATA_DIR=str(e2e_data),
        PYTHONPATH=str(REPO_ROOT),
        # The agent CLIs the way npm puts them on a person's PATH: the first-run check finds them.
        PATH=os.pathsep.join([str(AGENT_BIN), os.environ.get("PATH", os.defpath)]),
    )
    first = run_phase("first", env, artifacts_dir, tmp_path / "first.json", "--repo", str(repo))
    assert first["checks"]["docker"] == "ok", first["checks"]
    if (AGENT_BIN / "claude").exists():  # found: its path and version are shown
        facts = "\n".join(first["check_facts"]["engine-claude-code"])
        assert str(AGENT_BIN / "claude") in facts and "2.1." in facts, facts
    assert first["drag_result"] == "dropped CopyAction"
    assert {"app.py", "greeting.txt", "notes.txt"} <= set(first["diff_files"])
    assert first["task_revisions"] >= 3
    before = first["state"]
    tasks = before["tasks"]
    # The task, its fork, the continuation, the denied continuation, the continuation whose
    # sandbox was removed mid-run (noticed within seconds, without Docker's own words; then
    # resumed and stopped from the keyboard), and the task made from the keyboard with its
    # continuation (its fork was deleted from the keyboard), and the loop's continuation.
    assert len(tasks) == 8
    assert sorted(t["run"] for t in tasks.values()) == [
        "cancelled",
        "failed",
        "succeeded",
        "succeeded",
        "succeeded",
        "succeeded",
        "succeeded",
        "succeeded",
    ]
    # The loop's rewrites of one file are one collapsible group naming its step and file.
    assert "revisions of loop.log" in first["loop_group"], first["loop_group"]
    assert "step 1/1: for i in" in first["loop_group"], first["loop_group"]
    rows = first["loop_rows"]
    assert len(rows) >= 3 and all("step 1/1" in r and "loop.log" in r for r in rows), rows
    assert first["noticed_removal_s"] < 5.0, first["noticed_removal_s"]
    # Every task action was pressed, not clicked; Stop said so before the core was done.
    assert first["task_actions_by_keyboard"] == sorted(BUTTONS)
    assert "stopping…" in first["stop_pending"], first["stop_pending"]
    assert first["stop_states"][-1] == "cancelled", first["stop_states"]
    # The tree said "stopping…" until the run was cancelled, never "interrupted" on the way.
    assert first["stop_badges"][0] == "stopping…", first["stop_badges"]
    assert "interrupted" not in first["stop_badges"], first["stop_badges"]
    assert tasks[first["typed_task"]]["title"] == "typed and renamed"
    # The three sizes the window is laid out for, saved as screenshots.
    assert set(first["sizes"]) == {"1024x700", "1366x768", "1920x1080"}
    for size, shown in first["sizes"].items():
        assert Path(shown["path"]).is_file(), size
        assert shown["tree_state_share"] < 0.36, (size, shown)
        assert shown["diff_height"] > 0 and shown["task_view_height"] > 0, (size, shown)
    assert first["raw_docker_text"] is False
    # Under a dark palette a disabled action's icon is painted dimmer than an enabled one's.
    dark = first["dark_icons"]
    assert Path(dark["screenshot"]).is_file()
    assert dark["enabled"][1] - dark["disabled"][1] > 60, dark
    assert all(t["tree_parent"] == t["parent"] for t in tasks.values())
    assert before["approvals_pending"] == 0

    # Qt's options and a folder on the command line, as a person starts it from a terminal.
    again = run_phase(
        "again",
        env,
        artifacts_dir,
        tmp_path / "again.json",
        "-platform",
        "xcb",
        "-style",
        "Fusion",
        "--folder",
        str(repo),
    )
    assert again["offered_folders"] == [str(repo)], again
    assert again["style"].lower() == "fusion", again["style"]
    after = again["state"]
    assert after["tasks"] == before["tasks"]
    for key in ("selected", "task_view_title", "timeline_rows", "tab", "approvals_pending"):
        assert after[key] == before[key], key
    # The window comes back where it was; without a window manager (Xvfb alone) Qt allows for
    # a frame that is not there, which shifts it by at most a title bar's height.
    (x0, y0, w0, h0), (x1, y1, w1, h1) = before["geometry"], after["geometry"]
    assert abs(x1 - x0) <= 30 and abs(y1 - y0) <= 30 and w1 == w0 and abs(h1 - h0) <= 30
