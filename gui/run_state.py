"""A run's state in the GUI's words and colours, shared by the lineage tree and the task view.

Owns the labels, the badge colours and the two sets of states the widgets decide by (in flight;
launched, so followable); what the states mean is core.models.RunState's. No Qt.
"""

from __future__ import annotations

from core.models import RunState

IN_FLIGHT = frozenset(s.value for s in RunState if s.in_flight)
# Runs whose process has been launched: following one before that (queued, preparing) would
# find no process yet and take the run for lost.
FOLLOWABLE = frozenset({RunState.RUNNING.value, RunState.WAITING_APPROVAL.value})
ENDED = frozenset(s.value for s in RunState if not s.in_flight)

RUN_STATE_LABELS = {
    RunState.QUEUED.value: "queued",
    RunState.PREPARING.value: "preparing",
    RunState.RUNNING.value: "running",
    RunState.WAITING_APPROVAL.value: "waiting for approval",
    RunState.SUCCEEDED.value: "succeeded",
    RunState.FAILED.value: "failed",
    RunState.CANCELLED.value: "cancelled",
    RunState.INTERRUPTED.value: "interrupted",
}

# Semantic badge colours: mid tones that read on light and dark backgrounds alike.
STATE_COLOURS = {
    RunState.QUEUED.value: "#3b82c4",
    RunState.PREPARING.value: "#3b82c4",
    RunState.RUNNING.value: "#2e86de",
    RunState.WAITING_APPROVAL.value: "#d68910",
    RunState.SUCCEEDED.value: "#2e9e5b",
    RunState.FAILED.value: "#d64541",
    RunState.CANCELLED.value: "#8e8e8e",
    RunState.INTERRUPTED.value: "#e67e22",
}


def run_state_label(state: str | None) -> str:
    if state is None:
        return "not started"
    return RUN_STATE_LABELS.get(state, state)
