"""Checkpoints: the durable point a run can be resumed from.

Owns the write order — capture a verifying revision, make its snapshot durable, then write the
checkpoint row — so a crash between any two steps leaves the previous checkpoint usable and no
checkpoint ever names a snapshot that is not there. Deciding when to checkpoint is the caller's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from core.engines.base import ToolContract
from core.failpoints import failpoint
from core.ids import new_id
from core.models import Checkpoint, Run
from core.vault import snapshot_ref

if TYPE_CHECKING:
    from core.app import Cairn

STEPS = ("checkpoint.after_capture", "checkpoint.after_snapshot", "checkpoint.after_row")


def write_checkpoint(
    app: Cairn,
    run: Run,
    *,
    pending_step: str | None,
    tool_contract: ToolContract,
    policy_version: int,
) -> Checkpoint:
    task = app.store.get_task(run.task_id)
    rev, _ = app.capture(task.id, trigger="checkpoint", run_id=run.id)
    failpoint(STEPS[0])
    snap = app.make_snapshot(task.id, rev)
    failpoint(STEPS[1])
    current = app.store.get_run(run.id)
    ck = Checkpoint(
        new_id("checkpoint"),
        run.id,
        current.state_version,
        f"git:{snapshot_ref(snap.id)}@{rev.id}",
        rev.tree,
        snap.id,
        pending_step,
        current.engine_session_id,
        tool_contract.to_dict(),
        policy_version,
        time.time(),
    )
    app.store.add_checkpoint(ck)
    failpoint(STEPS[2])
    return ck


def parse_workspace_ref(ref: str) -> tuple[str, str]:
    """`git:<ref>@<sha>` → (ref, sha)."""
    body = ref.removeprefix("git:")
    name, _, sha = body.rpartition("@")
    return name, sha
