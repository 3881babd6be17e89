"""The runs of tasks: starting, following, stopping, ending, checkpointing and resuming them.

Owns what happens around a run's process — observing its files until it ends, recording the
files it left, taking in the engine's session id, cancelling it, settling a run with reality —
and hands each step's mechanics to the module that owns it: the ladder (launching and resuming),
checkpoints, liveness, reconcile, the judge (approvals asked while a run is followed).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path

from core import events as ev
from core.approvals import Judge
from core.context import Context, Lazy
from core.credentials import Credentials
from core.engines import engine_for
from core.engines.base import MODE_START
from core.errors import CairnError, Conflict, IllegalTransition
from core.models import Checkpoint, Run, RunState, Task, WorkspaceState
from core.preflight import Ready
from core.revisions import Revisions
from core.runs import RECORD_CHILD
from core.runs.checkpoints import Checkpoints
from core.runs.ladder import Ladder, ResumeReport
from core.runs.liveness import Sandboxes, run_liveness
from core.runs.reconcile import ReconcileReport, reconcile, settle_run
from core.runs.states import IN_FLIGHT, OutputTail, RunFiles, move, output_of, run_files
from core.sandbox.base import Attached
from core.sandboxes import Mirroring

log = logging.getLogger(__name__)

# The note of a run being stopped: its end, however it comes, makes it cancelled.
STOPPING_NOTE = "stopping: asked by the user"


class Runs:
    """A data folder's runs. Thread-safe; long operations block the caller."""

    def __init__(
        self,
        ctx: Context,
        *,
        revisions: Revisions,
        checkpoints: Checkpoints,
        ladder: Ladder,
        approvals: Judge,
        sandboxes: Sandboxes,
        credentials: Lazy[Credentials],
    ):
        self.ctx = ctx
        self.revisions = revisions
        self.checkpoints = checkpoints
        self.ladder = ladder
        self.approvals = approvals
        self._sandboxes = sandboxes
        self._credentials = credentials

    # -- reading -------------------------------------------------------------------------------

    def _task(self, task: Task | str) -> Task:
        return task if isinstance(task, Task) else self.ctx.task(task)

    def latest(self, task: Task | str) -> Run | None:
        """The task's most recent run (any state); None before its first run."""
        return self.ladder.latest_run(self._task(task))

    def in_flight(self, task: Task | str) -> Run | None:
        """The task's run that has not ended yet, if any."""
        run = self.latest(task)
        return run if run and run.state in IN_FLIGHT else None

    def lineage_runs(self, task: Task | str) -> list[Run]:
        """Every run of every task of the task's lineage, oldest first."""
        return self.ladder.lineage_runs(self._task(task))

    def refuse_in_flight(self, task: Task | str) -> None:
        """Conflict when a run of the task's lineage has not ended (one at a time per lineage)."""
        self.ladder.refuse_in_flight(self._task(task))

    def files(self, run: Run) -> RunFiles:
        """Where the run's current attempt keeps its files on the host."""
        return run_files(self.ctx.data.runs_root, run)

    def output(self, run_id: str, stream: str | None = None) -> str:
        """Everything observed of a run so far, in order (`stdout`, `stderr`, or both)."""
        return output_of(self.ctx.store, run_id, stream)

    def preflight(self, task: Task | str) -> Ready:
        """What a run of the task needs before anything is made for it (binary, network,
        credential), checked now; CairnError naming the problem and its fix."""
        return self.ladder.preflight(self._task(task))

    def checkpoint(self, task_ref: str) -> Checkpoint:
        """A checkpoint of the task's latest run now (at the step it is on)."""
        return self.checkpoints.of_task(task_ref)

    # -- starting and resuming -----------------------------------------------------------------

    def start(
        self,
        task_ref: str,
        *,
        commands: list[str] | None = None,
        prompt: str | None = None,
        mode: str = MODE_START,
        session_id: str | None = None,
        home_seed: Path | None = None,
    ) -> Run:
        """A new run of the task's engine: a shell script (`commands`), or an agent turn
        (`prompt`) that starts, continues or forks an engine session."""
        return self.ladder.start(
            task_ref,
            commands=commands,
            prompt=prompt,
            mode=mode,
            session_id=session_id,
            home_seed=home_seed,
        )

    def resume(
        self,
        task_ref: str,
        *,
        choice: str | None = None,
        accept_tool_change: bool = False,
        host: str | None = None,
    ) -> tuple[Run, ResumeReport]:
        """Resume the task's interrupted run along the ladder; a run the store still thinks is in
        flight is first settled with reality (it may have ended or died meanwhile). With `host`
        the sandbox moves to that sandbox host."""
        task = self.ctx.task(task_ref)
        run = self.latest(task)
        if run is not None and run.state in IN_FLIGHT:
            self._wake_sandbox(task)
            self.settle(run)
            run = self.ctx.store.get_run(run.id)
            if run.state in IN_FLIGHT:
                raise Conflict(f"run {run.id} is still {run.state}; there is nothing to resume")
        return self.ladder.resume(
            task.id, choice=choice, accept_tool_change=accept_tool_change, host=host
        )

    def _wake_sandbox(self, task: Task) -> None:
        """A paused sandbox is unpaused (a stopped one started) before its run is settled:
        frozen, its processes can be neither seen alive nor proven gone. Best effort: when it
        cannot be woken, settling says why."""
        ws = self.ctx.workspace_of(task)
        record = self.ctx.store.session_for(ws.id)
        if record is None:
            return
        with contextlib.suppress(CairnError):
            self._sandboxes.get().attach_as_made(record, ws)

    # -- settling with reality -----------------------------------------------------------------

    def settle(self, run: Run) -> str:
        """Bring one in-flight run's state in line with reality; returns what it became."""
        return settle_run(self.ctx, self._sandboxes, self.end, run)

    def reconcile(self, *, catch_up: bool = True) -> ReconcileReport:
        """Start-up reconcile: every in-flight run settled, sessions matched with containers,
        catch-up revisions captured, orphans listed (nothing is deleted)."""
        return reconcile(self.ctx, self._sandboxes, self.revisions, self.end, catch_up=catch_up)

    # -- ending, following, stopping -----------------------------------------------------------

    def end(self, run_id: str, exit_code: int | None, *, note: str | None = None) -> Run:
        """Take in the last output, record the files the run left, and settle its state."""
        run = self.ctx.store.get_run(run_id)
        if run.state not in IN_FLIGHT:
            return run
        OutputTail(self.ctx.store, run.id, self.files(run)).poll(final=True)
        problem = self._record_engine_session(run)
        if problem and exit_code == 0:
            exit_code, note = 1, problem
        if run.workspace_id and Path(self.ctx.store.get_workspace(run.workspace_id).root).is_dir():
            try:
                if exit_code is None:  # lost: what is there is recorded, its resume checkpoints
                    self.revisions.capture(run.task_id, trigger="watch", run_id=run.id)
                else:  # ended: the files it left become durable, so they are what comes back
                    self.checkpoints.of_task(run.task_id)
            except CairnError as exc:
                log.warning("could not record the files of run %s: %s", run.id, exc)
        if run.note == STOPPING_NOTE:
            target = RunState.CANCELLED  # ended because the user stopped it, however it ended
            note = note or "stopped by the user"
        elif exit_code is None:
            target = RunState.INTERRUPTED
        else:
            target = RunState.SUCCEEDED if exit_code == 0 else RunState.FAILED
        try:
            run = move(
                self.ctx.store,
                run_id,
                target,
                exit_code=exit_code,
                note=note or (f"exit code {exit_code}" if exit_code is not None else None),
            )
        except CairnError:
            return self.ctx.store.get_run(run_id)  # someone else settled it first
        self.ctx.events.publish(
            ev.RUN_STATE, run.id, state=run.state, task_id=run.task_id, exit_code=exit_code
        )
        return run

    def _record_engine_session(self, run: Run) -> str | None:
        """Take the engine's session id from what the run printed; a fork that kept its parent's
        id is an error (returned as the reason)."""
        eng = engine_for(run.engine)
        if not eng.has_sessions:
            return None
        session_id = None
        try:
            with open(self.files(run).stdout, encoding="utf-8", errors="replace") as f:
                for line in f:
                    for event in eng.parse_line(line):
                        if event.kind == "session" and event.data.get("session_id"):
                            session_id = event.data["session_id"]
                            break
                    if session_id:
                        break
        except FileNotFoundError:
            return None
        if session_id and session_id != run.engine_session_id:
            self.ctx.store.update_run(run.id, engine_session_id=session_id)
        if (
            session_id
            and run.spec.get("mode") == "fork"
            and session_id == run.spec.get("session_id")
        ):
            return (
                f"the engine returned the parent's session id {session_id} for a fork; "
                "a fork must get a new session"
            )
        return None

    def follow(
        self,
        run_id: str,
        *,
        on_output: Callable[[str, str], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        interval: float = 0.1,
        record: bool | str = False,
    ) -> Run:
        """Observe a run from its saved offsets until it ends (or `should_stop()`).

        With `record`, the run's workspace is also watched meanwhile, so its edits become
        revisions as they happen: in this process (True), or in a child process (RECORD_CHILD,
        for a process that must stay light: a big workspace's index and its captures then
        live elsewhere). Either way the recording stops before the run's final checkpoint, and
        revisions recorded by any process are announced here as they appear. When another
        process records the workspace already, that one goes on."""
        run = self.ctx.store.get_run(run_id)
        workspace_id = run.workspace_id
        stop_recording: Callable[[], None] = _nothing
        if record == RECORD_CHILD and workspace_id:
            stop_recording = self.revisions.record_in_child(run.task_id, workspace_id)
        elif record and workspace_id:
            try:
                self.revisions.watch(run.task_id)
                stop_recording = functools.partial(self.revisions.stop_watching, workspace_id)
            except CairnError:
                pass  # another Cairn process records this workspace, or it is gone
        news = None if record is True else self.revisions.revision_news(run.workspace_id)
        # A sandbox on another machine: its workspace mirrored into the local folder, which is
        # what the recorder watches; the mirror's last pass comes before the recording stops.
        mirroring = Mirroring(self._sandboxes)
        recording = stop_recording

        def stop_mirror_and_recording() -> None:
            mirroring.stop()
            recording()

        try:
            return self._follow(
                run,
                on_output,
                should_stop,
                interval,
                stop_mirror_and_recording,
                news,
                mirroring.ensure,
            )
        finally:
            stop_mirror_and_recording()

    def _follow(
        self,
        run: Run,
        on_output: Callable[[str, str], None] | None,
        should_stop: Callable[[], bool],
        interval: float,
        stop_recording: Callable[[], None],
        news: Callable[[], None] | None,
        mirror: Callable[[Run], None],
    ) -> Run:
        run_id = run.id
        self._know_secrets_of(run.task_id)
        tail = OutputTail(self.ctx.store, run.id, self.files(run), on_output)
        last_check = 0.0
        while not should_stop():
            self.approvals.poll()  # answer the run's approval requests while it is observed
            run = self.ctx.store.get_run(run_id)
            if run.state not in IN_FLIGHT:
                tail.poll(final=True)
                return run
            if run.state in (RunState.QUEUED.value, RunState.PREPARING.value):
                # Being launched: the stored attempt is still the previous one, whose files
                # are not this attempt's.
                time.sleep(interval)
                continue
            self._sandboxes.get().sync_run_files(run)  # from another machine, if it is there
            mirror(run)
            files = self.files(run)
            tail.files = files
            tail.poll()
            code = files.exit_code
            if code is not None:
                # The files as they were when it ended: the look that saw the exit code may
                # have read the output a moment before.
                self._sandboxes.get().sync_run_files(run, force=True)
                tail.poll(final=True)
                stop_recording()  # its last capture lands before the run's checkpoint
                if news is not None:
                    news()
                return self.end(run.id, code)
            if time.monotonic() - last_check > 1.0:
                last_check = time.monotonic()
                # Only evidence ends it: an unknown (a probe that could not start, Docker not
                # answering) is asked again at the next check.
                alive, why = run_liveness(self.ctx, self._sandboxes, run)
                if alive is False:  # it may have ended since the last look at its files
                    self._sandboxes.get().sync_run_files(run, force=True)
                if alive is False and files.exit_code is None:
                    # Its last line, cut short, is shown here too, not only stored by `end`.
                    tail.poll(final=True)
                    stop_recording()
                    return self.end(run.id, None, note=f"interrupted: {why}")
                if news is not None:
                    news()
            time.sleep(interval)
        return self.ctx.store.get_run(run_id)

    def _know_secrets_of(self, task_id: str) -> None:
        """Let this process redact the secrets a run may print, even when another process
        started it. Best effort: without a keyring there is nothing to learn."""
        with contextlib.suppress(CairnError):
            self._credentials.get().resolve_env(task_id, require=False)

    def stop(self, task_ref: str, *, grace: float = 10.0) -> dict:
        """Cancel the task's run in flight (TERM, then KILL) and stop its sandbox."""
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        result: dict = {"task_id": task.id, "run": None, "sandbox": None}
        run = self.in_flight(task)
        record = self.ctx.store.session_for(ws.id)
        live = None
        if record is not None:
            sandboxes = self._sandboxes.get()
            try:  # a stopped sandbox is not started just to be stopped again
                attached = sandboxes.look_as_made(record, ws)
            except CairnError:  # paused: unpaused, so its run can be signalled
                attached = sandboxes.attach_as_made(record, ws)
            live = attached.live if isinstance(attached, Attached) else None
        if run is not None:
            files = self.files(run)
            # Whoever sees the process end first (a follower, reconcile) ends it as cancelled.
            self.ctx.store.update_run(run.id, note=STOPPING_NOTE)
            if live is not None and files.pid:
                live.signal_process(files.pid, "TERM")
                deadline = time.monotonic() + grace
                while files.exit_code is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                    self._sandboxes.get().sync_run_files(run)
                if files.exit_code is None:
                    live.signal_process(files.pid, "KILL")
            self._sandboxes.get().sync_run_files(run, force=True)
            OutputTail(self.ctx.store, run.id, files).poll(final=True)
            self.revisions.capture(task.id, trigger="watch", run_id=run.id)
            try:
                run = move(
                    self.ctx.store,
                    run.id,
                    RunState.CANCELLED,
                    exit_code=files.exit_code,
                    note="stopped by the user",
                )
            except IllegalTransition:
                run = self.ctx.store.get_run(run.id)  # a follower saw it end first: cancelled
            else:
                self.ctx.events.publish(ev.RUN_STATE, run.id, state=run.state, task_id=task.id)
            result["run"] = run.id
        if live is not None and record is not None:
            live.stop()
            self.ctx.store.update_session(record.id, status="stopped")
            result["sandbox"] = record.container_name
        if ws.state == WorkspaceState.ACTIVE.value:
            self.ctx.set_workspace_state(ws.id, WorkspaceState.PREPARED)
        return result


def _nothing() -> None:
    pass
