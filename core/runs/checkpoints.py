"""Checkpoints: the durable point a run can be resumed from.

Owns the write order — capture a verifying revision (noting where the engine's conversation
stands), make its snapshot durable, then write the checkpoint row — so a crash between any two
steps leaves the previous checkpoint usable and no checkpoint ever names a snapshot that is not
there. Deciding when to checkpoint is the caller's.
"""

from __future__ import annotations

import time

from core.context import Context
from core.engines import engine_for
from core.engines.base import ToolContract
from core.errors import CairnError, InputError
from core.failpoints import failpoint
from core.ids import new_id
from core.models import Checkpoint, Run
from core.policy import Policy
from core.revisions import Revisions
from core.runs import conversations
from core.runs.states import run_files
from core.sandbox.base import CONTAINER_WORKSPACE
from core.snapshots import Snapshots
from core.vault import snapshot_ref

STEPS = ("checkpoint.after_capture", "checkpoint.after_snapshot", "checkpoint.after_row")


class Checkpoints:
    def __init__(self, ctx: Context, revisions: Revisions, snapshots: Snapshots):
        self.ctx = ctx
        self.revisions = revisions
        self.snapshots = snapshots

    def write(
        self,
        run: Run,
        *,
        pending_step: str | None,
        tool_contract: ToolContract,
        policy_version: int,
    ) -> Checkpoint:
        store = self.ctx.store
        task = store.get_task(run.task_id)
        rev, changed = self.revisions.capture(task.id, trigger="checkpoint", run_id=run.id)
        if not changed:
            # The files are as that revision left them, and the conversation may have gone on:
            # the revision now goes with where it stands (a new revision noted it already).
            self.revisions.record_position(rev.workspace_id, rev.id)
        failpoint(STEPS[0])
        snap = self.snapshots.make(task.id, rev)
        failpoint(STEPS[1])
        current = store.get_run(run.id)
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
        store.add_checkpoint(ck)
        failpoint(STEPS[2])
        self._keep_conversation(current)
        return ck

    def _keep_conversation(self, run: Run) -> None:
        """The engine's conversation files, copied out of the sandbox-writable home (best
        effort: the checkpoint stands without them)."""
        if not run.engine_session_id or not run.workspace_id:
            return
        try:
            engine = engine_for(run.engine)
        except CairnError:
            return
        if not engine.has_sessions:
            return
        record = self.ctx.store.session_for(run.workspace_id)
        if record is None:
            return
        home = self.ctx.data.home_path(record.id)
        conversations.keep(self.ctx.data, engine, home, run.engine_session_id, CONTAINER_WORKSPACE)

    def of_task(self, task_ref: str) -> Checkpoint:
        """A checkpoint of the task's latest run now (at the step it is on)."""
        store = self.ctx.store
        task = self.ctx.task(task_ref)
        task_runs = store.runs_of([task.id])
        if not task_runs:
            raise InputError(f"task {task.id} has no run to checkpoint")
        run = task_runs[-1]
        last = store.latest_checkpoint([run.id])
        step = run_files(self.ctx.data.runs_root, run).step
        pending = str(step) if step is not None else (last.pending_step if last else None)
        contract = ToolContract.from_dict(last.tool_contract if last else None)
        ws = self.ctx.workspace_of(task)
        return self.write(
            run,
            pending_step=pending,
            tool_contract=contract,
            policy_version=Policy.from_dict(ws.policy).version,
        )


def parse_workspace_ref(ref: str) -> tuple[str, str]:
    """`git:<ref>@<sha>` → (ref, sha)."""
    body = ref.removeprefix("git:")
    name, _, sha = body.rpartition("@")
    return name, sha
