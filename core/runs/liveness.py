"""Liveness: whether a run's process still runs, asked of the sandbox it runs in.

Owns the answer's three values — alive, gone (with the evidence), or unknown (the sandbox could
not be asked) — so an unknown is never taken for a death. What to do about a dead run is the
caller's (core.runs.service, core.runs.reconcile, the approvals judge).
"""

from __future__ import annotations

from core.context import Context, Lazy
from core.errors import CairnError
from core.models import Run
from core.runs.states import run_files
from core.sandbox.base import Attached, Gone
from core.sandboxes import SandboxManager

Sandboxes = Lazy[SandboxManager]


def run_liveness(ctx: Context, sandboxes: Sandboxes, run: Run) -> tuple[bool | None, str]:
    """Whether the run's process still runs: True, False, or None when it cannot be told now
    (Docker unreachable: an unknown error decides nothing)."""
    files = run_files(ctx.data.runs_root, run)
    ws = ctx.store.get_workspace(run.workspace_id) if run.workspace_id else None
    record = ctx.store.session_for(ws.id) if ws else None
    if ws is None or record is None:
        return False, "the run has no sandbox"
    pid = files.pid
    if pid is None:
        return False, "the run's process never started"
    try:
        result = sandboxes.get().attach_as_made(record, ws)
    except CairnError as exc:
        return None, f"cannot look at the sandbox: {exc}"
    if not isinstance(result, Attached):
        reason = result.reason if isinstance(result, Gone) else "; ".join(result.reasons)
        return False, f"the sandbox is gone ({reason})"
    alive = result.live.process_alive(pid, run_id=run.exec_id)
    return alive, "the process is running" if alive else "the process is gone"
