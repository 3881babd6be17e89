"""Liveness: whether a run's process still runs, asked of the sandbox it runs in.

Owns the answer's three values — alive, gone (with the evidence), or unknown (the sandbox could
not be asked) — so an unknown is never taken for a death. Gone needs evidence: the sandbox
absent or stopped, or the process verifiably not there. A look that cannot start (Docker
unreachable, a paused sandbox, a sandbox at its pids limit where no probe can fork) is unknown,
and is asked again a few times before it is reported. What to do about a dead run is the
caller's (core.runs.service, core.runs.reconcile, the approvals judge).
"""

from __future__ import annotations

import time

from core.context import Context, Lazy
from core.errors import CairnError
from core.models import Run
from core.runs.states import run_files
from core.sandbox.base import Attached, Gone, ProbeFailed, SandboxUnavailable
from core.sandboxes import SandboxManager

Sandboxes = Lazy[SandboxManager]

# A probe that could not start is asked again this many times, this far apart, before the
# answer is "unknown": a sandbox at its pids limit frees a slot within moments as often as not.
PROBE_TRIES = 3
PROBE_PAUSE_S = 0.3


def run_liveness(ctx: Context, sandboxes: Sandboxes, run: Run) -> tuple[bool | None, str]:
    """Whether the run's process still runs: True, False (gone, with the evidence in the
    reason), or None when it cannot be told now."""
    files = run_files(ctx.data.runs_root, run)
    ws = ctx.store.get_workspace(run.workspace_id) if run.workspace_id else None
    record = ctx.store.session_for(ws.id) if ws else None
    if ws is None or record is None:
        return False, "the run has no sandbox"
    pid = files.pid
    if pid is None:
        return False, "the run's process never started"
    why = "the sandbox could not be asked"
    for attempt in range(PROBE_TRIES):
        if attempt:
            time.sleep(PROBE_PAUSE_S)
        try:
            result = sandboxes.get().look_as_made(record, ws)
        except SandboxUnavailable as exc:
            return None, f"cannot look at the sandbox: {exc}"  # asking again now won't help
        except CairnError as exc:
            why = f"cannot look at the sandbox: {exc}"
            continue
        if isinstance(result, Gone):
            return False, f"the sandbox is gone ({result.reason})"
        if not isinstance(result, Attached):
            # Not as it was made, but there: that says nothing about the process in it.
            why = "cannot look at the sandbox: " + "; ".join(result.reasons)
            continue
        try:
            alive = result.live.process_alive(pid, run_id=run.exec_id)
        except ProbeFailed as exc:
            why = f"the process could not be looked at: {exc}"
            continue
        except CairnError as exc:
            why = f"cannot look at the sandbox: {exc}"
            continue
        if alive:
            return True, "the process is running"
        # Callers read the exit code again: a process that has just ended is not a lost one.
        return False, f"the process {pid} is not running in the sandbox"
    return None, why
