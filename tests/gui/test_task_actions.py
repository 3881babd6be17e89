"""Which task actions are enabled, and the reason shown when one is not, for every button in
every run state and workspace state."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from core.models import RunState
from gui.task_view.actions import (
    BUTTONS,
    CONTINUE,
    EXPORT_PATCH,
    FORK,
    NO_TASK,
    PROMOTE,
    RESUME,
    START,
    STOP,
    button_states,
)

ALL = frozenset(BUTTONS)


@dataclass
class FakeRun:
    state: str
    id: str = "r_1"


def details(**changes) -> dict:
    base = {
        "task_id": "t_1",
        "title": "Fix login",
        "engine": "shell",
        "instructions": "make test",
        "state": "prepared",
        "workspace_present": True,
        "expired": False,
        "base_revision": "b" * 40,
        "current_revision": "c" * 40,
        "revisions": [{"id": "b" * 40}, {"id": "c" * 40}],
    }
    base.update(changes)
    return base


def enabled(states: dict) -> set[str]:
    return {name for name, (on, _why) in states.items() if on}


def test_nothing_selected_disables_everything_with_a_reason():
    states = button_states(None)
    assert set(states) == set(BUTTONS)
    assert all(state == (False, NO_TASK) for state in states.values())


def test_every_enabled_button_has_an_empty_reason_and_every_disabled_one_a_reason():
    for state in [None, *RunState]:
        run = FakeRun(state.value) if state else None
        for name, (on, why) in button_states(details(), run).items():
            assert bool(why) != on, (state, name, why)


def test_a_task_that_never_ran_can_start_and_fork_only():
    states = button_states(details(), None)
    assert enabled(states) == {START, FORK, PROMOTE, EXPORT_PATCH}
    assert states[CONTINUE][1] == "the task has not run yet; start it first"
    assert states[STOP][1] == "the task has not run yet"
    assert states[RESUME][1] == "the task has not run yet"


@pytest.mark.parametrize("state", [s for s in RunState if s.in_flight])
def test_a_run_in_flight_can_be_stopped_and_nothing_else_that_touches_it(state):
    states = button_states(details(), FakeRun(state.value))
    assert enabled(states) == {STOP, EXPORT_PATCH}
    assert "stop it or wait" in states[FORK][1]
    assert states[START][0] is False and "already" in states[START][1]
    assert "stop it or wait" in states[CONTINUE][1]
    assert "nothing to resume" in states[RESUME][1]
    assert "promote once it has ended" in states[PROMOTE][1]


def test_waiting_for_approval_reads_as_words():
    states = button_states(details(), FakeRun(RunState.WAITING_APPROVAL.value))
    assert states[CONTINUE][1] == (
        "the task's run is waiting for approval; stop it or wait for it to end"
    )


def test_an_interrupted_run_can_be_resumed_or_continued():
    states = button_states(details(), FakeRun(RunState.INTERRUPTED.value))
    assert enabled(states) == {CONTINUE, FORK, RESUME, PROMOTE, EXPORT_PATCH}
    assert states[STOP][1] == "no run in flight (the last run was interrupted) and no sandbox up"


@pytest.mark.parametrize(
    "state,words",
    [
        (RunState.SUCCEEDED, "the last run succeeded"),
        (RunState.FAILED, "the last run failed"),
        (RunState.CANCELLED, "the last run was cancelled"),
    ],
)
def test_a_finished_run_can_be_continued_not_resumed(state, words):
    states = button_states(details(), FakeRun(state.value))
    assert enabled(states) == {CONTINUE, FORK, PROMOTE, EXPORT_PATCH}
    assert states[RESUME][1] == f"{words}; only an interrupted run can be resumed"
    assert states[STOP][1] == f"no run in flight ({words}) and no sandbox up"
    assert states[START][1].startswith("the task has run already")


def test_another_run_of_the_lineage_in_flight_blocks_what_would_start_a_run():
    other = FakeRun(RunState.RUNNING.value, id="r_other")
    words = "run r_other of this lineage is running; wait for it to end or stop it"
    states = button_states(details(), FakeRun(RunState.INTERRUPTED.value), lineage_run=other)
    for name in (CONTINUE, FORK, RESUME):
        assert states[name] == (False, words)
    assert enabled(states) == {PROMOTE, EXPORT_PATCH}
    assert button_states(details(), None, lineage_run=other)[START] == (False, words)
    assert button_states(details(), FakeRun("interrupted"), lineage_run=other)[RESUME][0] is False
    assert button_states(details(), FakeRun("failed"), lineage_run=other)[CONTINUE][0] is False


@pytest.mark.parametrize(
    "changes,words",
    [
        ({"workspace_present": False}, "the workspace folder is missing"),
        ({"state": "archived"}, "the workspace is archived"),
        ({"state": "destroyed"}, "the workspace is destroyed"),
        ({"state": "frozen"}, "the workspace is frozen"),
        ({"expired": True}, "the workspace has expired"),
    ],
)
def test_an_unusable_workspace_points_to_fork(changes, words):
    states = button_states(details(**changes), FakeRun("succeeded"))
    assert states[CONTINUE] == (False, f"{words}; fork from a revision instead")
    assert button_states(details(**changes), None)[START][1].startswith(words)
    assert states[FORK][0] is True  # a fork is made from a recorded revision, not the folder


def test_an_active_workspace_is_usable():
    assert button_states(details(state="active"), FakeRun("failed"))[CONTINUE][0] is True


def test_no_sandbox_blocks_what_needs_one_and_says_why():
    problem = "the Docker daemon is not running (start it: sudo systemctl start docker)"
    states = button_states(details(), FakeRun("interrupted"), sandbox_problem=problem)
    for name in (CONTINUE, RESUME, FORK):
        assert states[name] == (False, f"no sandbox can be started: {problem}")
    assert button_states(details(), None, sandbox_problem=problem)[START][0] is False
    # Stopping, promoting and exporting need no new sandbox.
    assert enabled(states) == {PROMOTE, EXPORT_PATCH}
    assert button_states(details(), FakeRun("running"), sandbox_problem=problem)[STOP][0]


def test_without_revisions_there_is_nothing_to_fork():
    states = button_states(details(revisions=[]), None)
    assert states[FORK] == (False, "the task has no revisions to fork from yet")


def test_promote_and_export_need_changes_since_the_base():
    same = details(current_revision="b" * 40)
    for run in (None, FakeRun("succeeded")):
        states = button_states(same, run)
        assert states[PROMOTE] == (False, "no changes since the base revision")
        assert states[EXPORT_PATCH] == (False, "no changes since the base revision")
    assert button_states(details(current_revision=None), None)[EXPORT_PATCH][0] is False


def test_the_shell_engine_needs_commands_to_start():
    states = button_states(details(instructions="  "), None)
    assert states[START][0] is False and "one per line" in states[START][1]
    assert button_states(details(engine="claude-code", instructions=""), None)[START][0] is True


def test_an_action_in_progress_disables_the_task_s_buttons():
    states = button_states(details(), FakeRun("running"), busy="stopping the run")
    assert all(
        state == (False, "stopping the run; wait for it to finish") for state in states.values()
    )


@pytest.mark.parametrize("run_state", [None, *[s.value for s in RunState]])
@pytest.mark.parametrize("workspace", ["prepared", "active", "frozen", "archived"])
@pytest.mark.parametrize("lineage_busy", [False, True])
@pytest.mark.parametrize("sandbox", [None, "down"])
def test_every_combination_is_consistent(run_state, workspace, lineage_busy, sandbox):
    run = FakeRun(run_state) if run_state else None
    other = FakeRun("running", id="r_2") if lineage_busy else None
    states = button_states(
        details(state=workspace), run, lineage_run=other, sandbox_problem=sandbox
    )
    in_flight = run_state in {s.value for s in RunState if s.in_flight}
    # Stop also lets go of a sandbox that is up with no run in it.
    assert states[STOP][0] == (in_flight or workspace == "active")
    assert states[RESUME][0] == (
        run_state == "interrupted" and not lineage_busy and sandbox is None
    )
    assert states[CONTINUE][0] == (
        run_state is not None
        and not in_flight
        and not lineage_busy
        and workspace in ("prepared", "active")
        and sandbox is None
    )
    assert states[START][0] == (
        run_state is None
        and not lineage_busy
        and workspace in ("prepared", "active")
        and sandbox is None
    )
    assert states[FORK][0] == (not in_flight and not lineage_busy and sandbox is None)
    assert states[EXPORT_PATCH][0] is True
    assert states[PROMOTE][0] == (not in_flight)


def test_stop_lets_go_of_a_sandbox_that_is_up_with_no_run():
    states = button_states(details(state="active"), FakeRun("succeeded"))
    assert states[STOP] == (True, "")
    assert states[RESUME][0] is False
