"""Which task actions are possible right now, and why not when they are not.

Owns the rules behind the task view's buttons as one pure function (no Qt), so every button and
state is testable without a window. The facade still checks everything again when the action
runs; these rules only keep the buttons honest about what it will accept.
"""

from __future__ import annotations

from core.models import Run, RunState, WorkspaceState
from gui.run_state import IN_FLIGHT, run_state_label

START = "start"
CONTINUE = "continue"
FORK = "fork"
STOP = "stop"
RESUME = "resume"
PROMOTE = "promote"
EXPORT_PATCH = "export_patch"
BUTTONS = (START, CONTINUE, FORK, STOP, RESUME, PROMOTE, EXPORT_PATCH)
# Resume on another sandbox host: in the menus and the palette, not the toolbar (Resume there
# resumes at once on the task's own host).
RESUME_ON_HOST = "resume_on_host"

LABELS = {
    START: "Start",
    CONTINUE: "Continue…",
    FORK: "Fork…",
    STOP: "Stop",
    RESUME: "Resume",
    PROMOTE: "Promote to branch",
    EXPORT_PATCH: "Export patch…",
    RESUME_ON_HOST: "Resume on Host…",
}

NO_TASK = "select a task first"

STOPPING = "stopping the run"  # the task view's busy word while Stop's job runs
STOP_GRACE_S = 10  # how long the core's stop waits after TERM before KILL (runs.stop's grace)

_WORKABLE = frozenset({WorkspaceState.PREPARED.value, WorkspaceState.ACTIVE.value})

State = tuple[bool, str]  # (enabled, why not: empty when enabled)


def _ended(state: str | None) -> str:
    """'the last run failed', 'the last run was cancelled'..."""
    verb = {
        RunState.CANCELLED.value: "was cancelled",
        RunState.INTERRUPTED.value: "was interrupted",
    }.get(state or "", run_state_label(state))
    return f"the last run {verb}"


def pending_state(busy: str | None, *, run_in_flight: bool = True) -> tuple[str, str] | None:
    """What the header says at once while an action that takes a while is under way (the
    state, and what it waits for), or None to show the run's own state. Stop can take seconds:
    the process gets TERM and the core waits for it before KILL, then stops the sandbox."""
    if busy != STOPPING:
        return None
    if not run_in_flight:
        return "stopping…", "waiting for the sandbox to stop"
    return (
        "stopping…",
        f"waiting up to {STOP_GRACE_S} s for the process to end, then for the sandbox to stop",
    )


def run_arguments(engine: str, instructions: str) -> tuple[list[str] | None, str | None]:
    """What `cairn.runs.start` takes to run a task's instructions, as (commands, prompt): the
    shell engine's are its commands, one per non-blank line; an agent's are its first prompt."""
    if engine == "shell":
        return [line for line in instructions.splitlines() if line.strip()], None
    return None, instructions


def button_states(
    details: dict | None,
    run: Run | None = None,
    *,
    lineage_run: Run | None = None,
    busy: str | None = None,
    sandbox_problem: str | None = None,
) -> dict[str, State]:
    """Every button's (enabled, reason) for a task.

    details: the facade's views.task_details() of the selected task (None: nothing selected).
    run: the task's latest run (None before its first). lineage_run: a run in flight in another
    task of the same lineage. busy: an action on this task already in progress ("stopping").
    sandbox_problem: why no sandbox can be made now (Docker down), or None.
    """
    if details is None:
        return {name: (False, NO_TASK) for name in BUTTONS}
    rules = {
        START: _start,
        CONTINUE: _continue,
        FORK: _fork,
        STOP: _stop,
        RESUME: _resume,
        PROMOTE: _promote,
        EXPORT_PATCH: _export_patch,
    }
    facts = _Facts(
        details,
        run.state if run is not None else None,
        run.id if run is not None else None,
        lineage_run,
        sandbox_problem,
    )
    states: dict[str, State] = {}
    for name in BUTTONS:
        if busy:
            states[name] = (False, f"{busy}; wait for it to finish")
        else:
            why = rules[name](facts)
            states[name] = (not why, why or "")
    return states


class _Facts:
    def __init__(
        self,
        details: dict,
        state: str | None,
        run_id: str | None,
        lineage_run: Run | None,
        sandbox_problem: str | None,
    ):
        self.details = details
        self.state = state
        self.run_id = run_id
        self.lineage_run = lineage_run
        self.sandbox_problem = sandbox_problem

    @property
    def in_flight(self) -> bool:
        return self.state in IN_FLIGHT

    def lineage_busy(self) -> str | None:
        other = self.lineage_run
        if other is None:
            return None
        return (
            f"run {other.id} of this lineage is "
            f"{run_state_label(other.state)}; wait for it to end or stop it"
        )

    def workspace_unusable(self) -> str | None:
        d = self.details
        if not d.get("workspace_present", True):
            return "the workspace folder is missing; fork from a revision instead"
        ws_state = d.get("state")
        if ws_state is not None and ws_state not in _WORKABLE:
            return f"the workspace is {ws_state}; fork from a revision instead"
        if d.get("expired"):
            return "the workspace has expired; fork from a revision instead"
        return None

    def no_sandbox(self) -> str | None:
        return (
            f"no sandbox can be started: {self.sandbox_problem}" if self.sandbox_problem else None
        )

    def has_changes(self) -> bool:
        d = self.details
        current = d.get("current_revision")
        return bool(current) and current != d.get("base_revision")


def _start(f: _Facts) -> str | None:
    if f.in_flight:
        return f"the run is already {run_state_label(f.state)}"
    if f.state is not None:
        return "the task has run already; continue or fork it to give it more work"
    if f.details.get("engine") == "shell" and not (f.details.get("instructions") or "").strip():
        return "the shell engine runs the instructions as commands, one per line: there are none"
    return f.lineage_busy() or f.workspace_unusable() or f.no_sandbox()


def _continue(f: _Facts) -> str | None:
    if f.in_flight:
        return f"the task's run is {run_state_label(f.state)}; stop it or wait for it to end"
    if f.state is None:
        return "the task has not run yet; start it first"
    return f.lineage_busy() or f.workspace_unusable() or f.no_sandbox()


def _fork(f: _Facts) -> str | None:
    if not f.details.get("revisions"):
        return "the task has no revisions to fork from yet"
    if f.in_flight:
        return f"the task's run is {run_state_label(f.state)}; stop it or wait for it to end"
    return f.lineage_busy() or f.no_sandbox()


def _stop(f: _Facts) -> str | None:
    if f.in_flight:
        return None
    if f.details.get("state") == WorkspaceState.ACTIVE.value:
        return None  # no run, but its sandbox is (or was last seen) up: Stop lets it go
    if f.state is None:
        return "the task has not run yet"
    return f"no run in flight ({_ended(f.state)}) and no sandbox up"


def _resume(f: _Facts) -> str | None:
    if f.state is None:
        return "the task has not run yet"
    if f.in_flight:
        return f"the run is {run_state_label(f.state)}; there is nothing to resume"
    if f.state != RunState.INTERRUPTED.value:
        return f"{_ended(f.state)}; only an interrupted run can be resumed"
    return f.lineage_busy() or f.no_sandbox()


def resume_on_host_state(
    details: dict | None,
    run: Run | None = None,
    *,
    hosts: tuple[str, ...] = (),
    lineage_run: Run | None = None,
    busy: str | None = None,
) -> State:
    """Resume on Host…'s (enabled, reason): Resume's rules, and another sandbox host to go to.
    `hosts`: the hosts' names as the task view read them (none: they could not be read). The
    default host's problem does not disable it: moving to another host is a way around it."""
    if details is None:
        return False, NO_TASK
    if busy:
        return False, f"{busy}; wait for it to finish"
    if not hosts:
        return False, "the sandbox hosts could not be read; check the hosts in the settings"
    if len(hosts) < 2:
        return False, f"only one sandbox host is configured ({hosts[0]}); there is no other"
    facts = _Facts(details, run.state if run is not None else None, None, lineage_run, None)
    why = _resume(facts)
    return not why, why or ""


def _promote(f: _Facts) -> str | None:
    if not f.has_changes():
        return "no changes since the base revision"
    if f.in_flight:
        return f"the run is {run_state_label(f.state)}; promote once it has ended"
    return None


def _export_patch(f: _Facts) -> str | None:
    if not f.has_changes():
        return "no changes since the base revision"
    return None
