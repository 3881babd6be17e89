"""Runs: one execution of a task's engine, from launch to its end, and its resumes.

The package holds the run states and files (`states`, re-exported here, the layer everything else
reads), checkpoints, liveness, the resume ladder, start-up reconcile and the `Runs` service that
the facade exposes (`core.runs.service`). Only `states` is imported here, so lower layers can read
run states without pulling in the machinery that starts runs.
"""

from core.runs.states import (
    IN_FLIGHT,
    OutputTail,
    RunFiles,
    move,
    output_of,
    run_files,
    sources_of,
)

RECORD_CHILD = "child"  # Runs.follow(record=...): watch the workspace from a child process

__all__ = [
    "IN_FLIGHT",
    "RECORD_CHILD",
    "OutputTail",
    "RunFiles",
    "move",
    "output_of",
    "run_files",
    "sources_of",
]
