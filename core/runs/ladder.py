"""Launching runs and resuming them: the resume ladder of docs/architecture.md, step by step.

Owns the order — lease, checkpoint, current policy, workspace revalidation, sandbox, tool
contract, credentials, background processes, engine — and the report of which path a resume
took and why. Each step's mechanics belong to the module named in it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from core import approvals, lineage, preflight, workspaces
from core import events as ev
from core.context import Context, Lazy
from core.credentials import Credentials
from core.engines import Engine, engine_for
from core.engines.base import (
    MODE_CONTINUE,
    MODE_FALLBACK,
    MODE_FORK,
    MODE_START,
    LaunchContext,
    ToolContract,
)
from core.errors import CairnError, Conflict, InputError, NotFound
from core.ids import new_id
from core.models import (
    Checkpoint,
    Revision,
    Run,
    Task,
    TaskSource,
    Workspace,
    WorkspaceState,
)
from core.models import RunState as R
from core.policy import Policy
from core.preflight import Ready
from core.revisions import (
    AT_EMPTY,
    AT_LATEST,
    AT_POSITION,
    POSITIONS,
    Revisions,
    restored_from,
)
from core.runs import conversations
from core.runs import states as runs
from core.runs.checkpoints import Checkpoints, parse_workspace_ref
from core.runs.liveness import Sandboxes
from core.sandbox import egress
from core.sandbox.base import CONTAINER_HOME, LiveSession
from core.sandboxes import TOOLS_DIR_IN_SANDBOX
from core.settings import Settings, policy_with_endpoint
from core.snapshots import Snapshots

log = logging.getLogger(__name__)
PROBE_ATTEMPTS = 3
PROBE_RETRY_S = 0.5

ON_TOP = "on-top"
RESTORE_INTO_NEW = "restore-into-new"


INTERRUPTED_PROMPT = (
    "Your previous turn was interrupted before it finished. Check the state of "
    "the workspace and continue the task."
)


class NeedsChoice(Conflict):
    """The workspace was edited outside Cairn; the user must say how to go on."""

    choices = (ON_TOP, RESTORE_INTO_NEW)


@dataclass
class ResumeReport:
    run_id: str
    path: list[str] = field(
        default_factory=list
    )  # e.g. ["workspace: present", "sandbox: recreated"]
    notes: list[str] = field(default_factory=list)  # why, in words

    def add(self, step: str, outcome: str, why: str | None = None) -> None:
        self.path.append(f"{step}: {outcome}")
        if why:
            self.notes.append(f"{step}: {why}")

    def to_dict(self) -> dict:
        return {"run_id": self.run_id, "path": self.path, "notes": self.notes}

    def summary(self) -> str:
        return "; ".join(self.path)


class Ladder:
    """Launching a run's attempt: a new run's first, or an interrupted run's next (the ladder)."""

    def __init__(
        self,
        ctx: Context,
        *,
        revisions: Revisions,
        snapshots: Snapshots,
        checkpoints: Checkpoints,
        settings: Settings,
        sandboxes: Sandboxes,
        credentials: Lazy[Credentials],
    ):
        self.ctx = ctx
        self.store = ctx.store
        self.revisions = revisions
        self.snapshots = snapshots
        self.checkpoints = checkpoints
        self.settings = settings
        self._sandboxes = sandboxes
        self._credentials = credentials

    # -- helpers -------------------------------------------------------------------------------

    def lineage_runs(self, task: Task) -> list[Run]:
        root = lineage.root_of(self.store, task.id)
        return self.store.runs_of([t.id for t in lineage.members(self.store, root)])

    def refuse_in_flight(self, task: Task, *, except_run: str | None = None) -> None:
        for run in self.lineage_runs(task):
            if run.state in runs.IN_FLIGHT and run.id != except_run:
                raise Conflict(
                    f"run {run.id} of this task's lineage is {run.state}; wait for it "
                    f"to end or stop it before continuing"
                )

    def latest_run(self, task: Task) -> Run | None:
        task_runs = self.store.runs_of([task.id])
        return task_runs[-1] if task_runs else None

    def probe_contract(
        self, live: LiveSession, engine_name: str, image_digest: str | None
    ) -> ToolContract:
        """The versions of the engine's tools in the sandbox. A tool is "missing" only when the
        sandbox says so (exit 126/127); a probe that fails otherwise (a fork refused at the
        process limit, an exec that timed out) is tried again, so a passing fault is never
        recorded as a changed tool."""
        tools = {}
        settings = self.settings.engine(engine_name)
        for name, argv in engine_for(engine_name).tool_probe(settings).items():
            tools[name] = self._probe_tool(live, name, argv)
        return ToolContract(image_digest, tools)

    @staticmethod
    def _probe_tool(live: LiveSession, name: str, argv: list[str]) -> str:
        why = ""
        for attempt in range(PROBE_ATTEMPTS):
            if attempt:
                time.sleep(PROBE_RETRY_S * attempt)
            try:
                result = live.exec(argv, env={}, cwd="/", timeout=20)
            except CairnError as exc:
                why = str(exc)
                continue
            out = (result.stdout or "").strip().splitlines()
            if result.exit_code == 0 and out:
                return out[0]
            if result.exit_code in (126, 127):
                return "missing"
            why = f"exit {result.exit_code}: " + (result.stderr or "").strip()[:200]
        raise CairnError(f"cannot check the sandbox's {name} ({' '.join(argv)}): {why}")

    # -- start ---------------------------------------------------------------------------------

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
        task = self.ctx.task(task_ref)
        ws = self.ctx.workspace_of(task)
        eng = engine_for(task.engine)
        spec = eng.validate(
            {
                k: v
                for k, v in {
                    "commands": commands,
                    "prompt": prompt,
                    "mode": mode,
                    "session_id": session_id,
                }.items()
                if v is not None
            }
        )
        ready = self.preflight(task)  # before anything is made for the run
        with lineage.acquire(self.store, lineage.root_of(self.store, task.id)) as lease:
            self.refuse_in_flight(task)
            run = Run(
                new_id("run"),
                task.id,
                R.QUEUED.value,
                0,
                eng.name,
                spec,
                workspace_id=ws.id,
                attempt=1,
                created_at=time.time(),
            )
            self.store.add_run(run)
            runs.move(self.store, run.id, R.PREPARING)
            report = ResumeReport(run.id)
            try:
                return self._launch(
                    self.store.get_run(run.id),
                    task,
                    ws,
                    lease,
                    0,
                    report,
                    ready,
                    recorded_contract=None,
                    home_seed=home_seed,
                )
            except BaseException as exc:
                self._park(run.id, f"could not start: {_reason(exc)}")
                raise

    def preflight(self, task: Task) -> Ready:
        """The checks a run of the task must pass before anything is made for it (binary,
        network, credential), under the task's current policy; CairnError with the fix."""
        ws = self.ctx.workspace_of(task)
        return preflight.check(
            task.engine, Policy.from_dict(ws.policy), self.settings, self._credentials
        )

    def _park(self, run_id: str, note: str) -> None:
        """An attempt that could not launch stays resumable: nothing about it is lost."""
        try:
            runs.move(self.store, run_id, R.INTERRUPTED, note=note)
        except CairnError:
            log.exception("could not park run %s", run_id)

    def _launch(
        self,
        run: Run,
        task: Task,
        ws: Workspace,
        lease: lineage.Lease,
        start_step: int,
        report: ResumeReport,
        ready: Ready,
        *,
        recorded_contract: ToolContract | None,
        accept_tool_change: bool = False,
        home_seed: Path | None = None,
    ) -> Run:
        eng = engine_for(run.engine)
        settings = ready.settings
        policy = policy_with_endpoint(Policy.from_dict(ws.policy), ready.endpoint)
        endpoints = _model_endpoints(ready)
        if ready.note:
            report.add(
                "engine", "binary " + str(ready.found.path if ready.found else ""), ready.note
            )
        workspaces.require_tree(ws)
        snapshot_id = None
        if self.store.session_for(ws.id) is None:
            latest = self.store.list_snapshots(ws.id)
            # The session carries a snapshot of what is recorded; the checkpoint before the
            # launch captures in full, so a first Start walks the tree once for it, not twice.
            snapshot_id = latest[-1].id if latest else self.snapshots.of_latest_revision(task.id).id
        outcome = self._sandboxes.get().ensure(
            ws,
            policy,
            snapshot_id,
            extra_mounts=eng.mounts(settings),
            home_seed=home_seed,
            endpoints=endpoints,
            host=task.host,
        )
        report.add("sandbox", outcome.path, "; ".join(outcome.reasons))
        if outcome.rebuilt:
            report.add("background", "rebuilt " + ", ".join(outcome.rebuilt))
        if ws.state != WorkspaceState.ACTIVE.value:
            self.ctx.set_workspace_state(ws.id, WorkspaceState.ACTIVE)
        contract = self.probe_contract(outcome.live, run.engine, outcome.record.image_digest)
        problem = eng.check_version(settings, contract.tools)
        if problem:
            raise CairnError(f"the {run.engine} engine cannot start: {problem}")
        if recorded_contract is not None:
            diffs = recorded_contract.differences(contract)
            if diffs and not accept_tool_change:
                raise Conflict(
                    "the sandbox's tools changed since the checkpoint: "
                    + "; ".join(diffs)
                    + " (resume with --accept-tool-change to go on anyway)"
                )
            report.add(
                "tools",
                "changed, accepted" if diffs else "match the checkpoint",
                "; ".join(diffs) or None,
            )
        sandbox_env: dict[str, str] = {}
        if ready.credential is not None and endpoints:
            kind = ready.credential.kind
            # The engine talks to the in-sandbox end of the proxy and holds only a placeholder;
            # the proxy on the host adds the real credential to each request for the model.
            settings = dataclasses.replace(settings, base_url=egress.endpoint_url(0))
            sandbox_env[kind.env] = kind.placeholder
            report.add(
                "credentials",
                f"{kind.label} ({ready.credential.secret}) added by the host's proxy to requests "
                f"for {ready.endpoint}; the sandbox holds a placeholder",
            )
        resolved = self._credentials.get().resolve_env(task.id, require=True)
        secret_of = {g.env_var: g.secret_name for g in self._credentials.get().grants_for(task.id)}
        env = {k: v for k, v in resolved.env.items() if policy.allows_secret(secret_of.get(k, k))}
        withheld = sorted(secret_of.get(k, k) for k in set(resolved.env) - set(env))
        if resolved.revoked or withheld:
            report.add(
                "credentials",
                "without " + ", ".join(resolved.revoked + withheld),
                "revoked grants and secrets the current policy removed are not injected",
            )
        elif resolved.env:
            report.add("credentials", "injected " + ", ".join(sorted(env)))
        # A sandbox that cannot hold its program starts for judgement runs nothing.
        supervise = approvals.supervise_command(self.ctx, ws.id, outcome.live)
        report.add("approvals", "every program start judged", "by the sandbox's supervisor")
        files = runs.run_files(self.ctx.data.runs_root, run)
        ctx = LaunchContext(
            run_id=run.id,
            mode=run.spec.get("mode", MODE_START),
            prompt=run.spec.get("prompt", ""),
            spec=run.spec,
            settings=settings,
            host_run_dir=files.folder,
            sandbox_run_dir=outcome.live.visible_path(
                self._sandboxes.get().run_dir_in_sandbox(run.exec_id)
            ),
            host_home=self.ctx.data.home_path(outcome.record.id),
            sandbox_home=CONTAINER_HOME,
            session_id=run.spec.get("session_id"),
            start_step=start_step,
            # Only tool hooks ask the gate; a shell run's programs are the supervisor's alone.
            gate=approvals.gate_command(self.ctx, ws.id, outcome.live)
            if eng.has_tool_hooks
            else [],
        )
        restored: list[Path] = []
        ctx = self._engine_mode(eng, ctx, run, report, restored)
        eng.prepare(ctx)
        # What this launch wrote into the engine home here reaches a home that is not this
        # folder (a sandbox on another machine) before the engine starts; a conversation put
        # back from a checkpoint only where that home has none (the engine's own is newer).
        outcome.live.send_home_files(eng.home_files(ctx), if_missing=[str(p) for p in restored])
        exec_env = {
            **self._sandboxes.get().exec_environment(policy),
            **eng.environment(ctx),
            **approvals.gate_environment(run, outcome.live),
            **sandbox_env,
            **env,
        }
        approvals.ensure_judge(self.ctx.data)
        # Every program the run starts is judged before it runs (a run that cannot be
        # supervised does not start); the output filter stays outside the supervised tree.
        supervised = [*supervise, "--", *eng.launch_argv(ctx)]
        argv = self._hide_secrets_in_output(supervised, env, exec_env, outcome.live, report)
        # Last before the launch, so an attempt that fails earlier leaves no checkpoint behind.
        self.checkpoints.write(
            run,
            pending_step=str(start_step),
            tool_contract=contract,
            policy_version=policy.version,
        )
        lease.verify()
        try:
            outcome.live.exec_detached(argv, env=exec_env, run_id=run.exec_id)
        except BaseException as exc:
            if files.pid is None:
                raise
            # It started although the launch reported otherwise: this attempt is the one that
            # runs now, and following it (not a second launch) decides how it ends.
            log.warning("run %s started despite a launch error: %s", run.id, _reason(exc))
            report.add("launch", "started", f"the launch reported: {_reason(exc)}")
        # Only now does the run become this attempt: its number, its folder (whose offsets
        # start at 0), its workspace and spec. Until here the stored run is the previous one.
        run = runs.move(
            self.store,
            run.id,
            R.RUNNING,
            started_at=time.time(),
            resume_report=report.to_dict(),
            note=report.summary() if report.path else None,
            attempt=run.attempt,
            output_offset=0,
            stderr_offset=0,
            workspace_id=run.workspace_id,
            exit_code=None,
            spec=self._with_positions(run.id, ctx.spec),
        )
        self.ctx.events.publish(
            ev.RUN_STATE, run.id, state=run.state, task_id=task.id, report=report.to_dict()
        )
        return run

    def _hide_secrets_in_output(
        self,
        argv: list[str],
        secrets: dict[str, str],
        exec_env: dict[str, str],
        live: LiveSession,
        report: ResumeReport,
    ) -> list[str]:
        """With secrets in the environment, the run's output passes through a filter inside the
        sandbox that replaces their values, so they never reach the run's files on the host."""
        if not secrets:
            return argv
        probe = live.exec(["sh", "-c", "command -v python3"], env={}, cwd="/", timeout=20)
        if probe.exit_code != 0:
            report.add(
                "output",
                "not filtered",
                "the sandbox image has no python3 to hide secret values in the run's output",
            )
            return argv
        exec_env["CAIRN_REDACT_VARS"] = ",".join(sorted(secrets))
        return [
            "python3",
            live.visible_path(f"{TOOLS_DIR_IN_SANDBOX}/redact-output.py"),
            "--",
            *argv,
        ]

    def _engine_mode(
        self,
        eng: Engine,
        ctx: LaunchContext,
        run: Run,
        report: ResumeReport,
        restored: list[Path],
    ) -> LaunchContext:
        """Native continue/fork when the engine's contract holds, else a new session on the same
        files — and the run's record says why. The conversation files put back into the engine
        home from a checkpoint are added to `restored` (relative to the home)."""
        if ctx.mode not in (MODE_CONTINUE, MODE_FORK) or not eng.has_sessions:
            return ctx
        if ctx.mode == MODE_CONTINUE:
            ctx = self._continue_point(eng, ctx, run, report)
        if ctx.mode == MODE_FORK:
            ctx = self._fork_point(eng, ctx, run, report)
        if ctx.mode not in (MODE_CONTINUE, MODE_FORK):
            return ctx
        check = eng.native_resume_check(ctx)
        if not check.ok:
            # A home emptied since (by the run, by hand): the conversation comes back from the
            # copy the last checkpoint kept, where there is one.
            back = conversations.restore(self.ctx.data, Path(ctx.host_home), ctx.session_id)
            if back:
                report.add(
                    "conversation",
                    "restored from the last checkpoint",
                    ", ".join(str(p) for p in back),
                )
                restored += back
                check = eng.native_resume_check(ctx)
        if check.ok:
            cut = f" up to {ctx.spec['resume_at']}" if ctx.spec.get("resume_at") else ""
            report.add("engine", f"native {ctx.mode} of session {ctx.session_id}{cut}")
            return ctx
        report.add("engine", "new session on the same files (fallback)", check.reason)
        spec = {**ctx.spec, "mode": MODE_FALLBACK, "fallback_reason": check.reason}
        return replace(ctx, mode=MODE_FALLBACK, spec=spec)  # stored when the attempt launches

    def _fork_point(
        self, eng: Engine, ctx: LaunchContext, run: Run, report: ResumeReport
    ) -> LaunchContext:
        """A fork's conversation is the parent's as it was when the fork's revision was recorded:
        the whole of it for the latest revision, else cut at the position noted then. Where the
        engine cannot cut there, or nothing was noted, a new session starts with a note of what
        the files hold; where no conversation had begun, a new session starts. Decided once per
        run (`fork_point` in its spec)."""
        task = self.store.get_task(run.task_id)
        if (
            task.source != TaskSource.FORK.value
            or not task.from_revision
            or not task.parent_task_id
            or "fork_point" in ctx.spec
        ):
            return ctx
        parent_ws = self.ctx.workspace_of(self.store.get_task(task.parent_task_id))
        try:
            found = self.revisions.conversation_at(parent_ws.id, task.from_revision)
        except NotFound:
            # A revision of another task (`TASK:REV`): no position of the parent's goes with it.
            report.add(
                "conversation",
                "the parent's, as it is now",
                f"revision {task.from_revision[:12]} is not one of the parent's workspace",
            )
            return replace(ctx, spec={**ctx.spec, "fork_point": {"kind": "elsewhere"}})
        short = found.revision_id[:12]
        spec = {**ctx.spec, "fork_point": {"revision": found.revision_id, "kind": found.kind}}
        if found.kind == AT_LATEST:
            report.add("conversation", f"all of the parent's, as revision {short} is its latest")
            position = getattr(eng, "conversation_position", None)
            at = position(ctx.host_home, ctx.host_run_dir, ctx.session_id) if position else None
            return self._fork_base_position(replace(ctx, spec=spec), run, at)
        if found.kind == AT_EMPTY:
            report.add("conversation", "a new session", found.reason)
            spec = {k: v for k, v in spec.items() if k not in ("session_id", "resume_at")}
            return replace(ctx, mode=MODE_START, session_id=None, spec={**spec, "mode": MODE_START})
        spec["files_note"] = self.revisions.files_note(parent_ws, found.revision_id)
        if found.kind == AT_POSITION and getattr(eng, "forks_at_position", False):
            spec.update(session_id=found.session_id, resume_at=found.position)
            report.add(
                "conversation",
                f"as at revision {short}: session {found.session_id} up to {found.position}",
                found.reason,
            )
            at = (found.session_id, found.position) if found.session_id and found.position else None
            return self._fork_base_position(
                replace(ctx, session_id=found.session_id, spec=spec), run, at
            )
        if found.kind == AT_POSITION and found.session_id:
            position = getattr(eng, "conversation_position", None)
            now = position(ctx.host_home, ctx.host_run_dir, found.session_id) if position else None
            if now == (found.session_id, found.position):
                # The conversation has not moved since: the whole of it is the one to fork.
                spec["session_id"] = found.session_id
                report.add(
                    "conversation",
                    f"as at revision {short}: session {found.session_id}, unchanged since",
                    found.reason,
                )
                return replace(ctx, session_id=found.session_id, spec=spec)
        if found.kind == AT_POSITION:
            why = (
                f"the {eng.label} CLI cannot fork a conversation at an earlier point (at revision "
                f"{short} it was at {found.position} of {found.session_id})"
            )
        else:
            why = found.reason
        report.add("engine", "new session on the revision's files (fallback)", why)
        spec.update(mode=MODE_FALLBACK, fallback_reason=why)
        return replace(ctx, mode=MODE_FALLBACK, spec=spec)

    def _continue_point(
        self, eng: Engine, ctx: LaunchContext, run: Run, report: ResumeReport
    ) -> LaunchContext:
        """A Continue right after the whole workspace was restored to an older revision goes on
        from the conversation as it was at that revision: a fork of the session at the position
        noted then (a new session id), or the fallback of a fork there. A restore of some files
        that leaves a mix no revision had keeps the conversation as it is. Decided once per run
        (`continue_point` in its spec)."""
        task = self.store.get_task(run.task_id)
        if task.source != TaskSource.CONTINUE.value or "continue_point" in ctx.spec:
            return ctx
        ws = self.ctx.workspace_of(task)
        latest = self.store.latest_revision(ws.id)
        if latest is None:
            return ctx
        found = self.revisions.conversation_at(ws.id, latest.id)
        if found.kind == AT_LATEST:
            return ctx
        revs = self.store.list_revisions(ws.id)
        restores = [(r, src) for r in revs if (src := restored_from(revs, r)) is not None]
        if restores:
            restore, source = restores[-1]
            before = [r for r in revs if r.seq < restore.seq][-1]
            note = self.revisions.files_note(ws, source.id, before.id)
        else:
            note = self.revisions.files_note(ws, latest.id)
        spec = {**ctx.spec, "continue_point": {"revision": latest.id, "kind": found.kind}}
        if found.kind == AT_POSITION and getattr(eng, "forks_at_position", False):
            spec.update(
                mode=MODE_FORK,
                session_id=found.session_id,
                resume_at=found.position,
                files_note=note,
            )
            report.add(
                "conversation",
                f"as before the workspace was restored: session {found.session_id} up to "
                f"{found.position}, forked",
                found.reason,
            )
            return replace(ctx, mode=MODE_FORK, session_id=found.session_id, spec=spec)
        if found.kind == AT_EMPTY:
            report.add("conversation", "a new session", found.reason)
            spec = {k: v for k, v in spec.items() if k not in ("session_id", "resume_at")}
            return replace(ctx, mode=MODE_START, session_id=None, spec={**spec, "mode": MODE_START})
        why = (
            f"the {eng.label} CLI cannot fork a conversation at an earlier point; "
            if found.kind == AT_POSITION
            else ""
        ) + found.reason
        report.add("engine", "new session on the restored files (fallback)", why)
        spec.update(mode=MODE_FALLBACK, fallback_reason=why, files_note=note)
        return replace(ctx, mode=MODE_FALLBACK, spec=spec)

    def _fork_base_position(
        self, ctx: LaunchContext, run: Run, at: tuple[str, str] | None
    ) -> LaunchContext:
        """The fork's first revision goes with the conversation it starts from, so a fork of the
        fork at that revision starts from it too."""
        if at is None or not run.workspace_id:
            return ctx
        base = self.store.get_workspace(run.workspace_id).base_revision
        entry = {"session_id": at[0], "at": at[1], "recorded_at": time.time()}
        positions = {**(ctx.spec.get(POSITIONS) or {}), base: entry}
        return replace(ctx, spec={**ctx.spec, POSITIONS: positions})

    def _with_positions(self, run_id: str, spec: dict) -> dict:
        """The attempt's spec with the conversation positions noted while it was launching
        (its checkpoint's), which the spec it was launched from does not hold."""
        noted = self.store.get_run(run_id).spec.get(POSITIONS) or {}
        if not noted:
            return spec
        return {**spec, POSITIONS: {**(spec.get(POSITIONS) or {}), **noted}}

    # -- resume --------------------------------------------------------------------------------

    def resume(
        self,
        task_ref: str,
        *,
        choice: str | None = None,
        accept_tool_change: bool = False,
        host: str | None = None,
    ) -> tuple[Run, ResumeReport]:
        """Resume the task's interrupted run; with `host`, on that sandbox host (the task, and
        every task sharing its workspace, moves there)."""
        task = self.ctx.task(task_ref)
        moving_to = self.settings.host(host).name if host is not None else None
        run = self.latest_run(task)
        if run is None:
            raise InputError(f"task {task.id} has no run to resume")
        if run.state in runs.IN_FLIGHT:  # the caller settles it with reality first
            raise Conflict(f"run {run.id} is still {run.state}; there is nothing to resume")
        if run.state != R.INTERRUPTED.value:
            raise Conflict(f"run {run.id} is {run.state}; only an interrupted run can be resumed")
        if choice not in (None, ON_TOP, RESTORE_INTO_NEW):
            raise InputError(f"unknown choice {choice!r}")
        ready = self.preflight(task)  # a resume that cannot launch changes nothing
        # 1. one operation per lineage; no other run in flight.
        with lineage.acquire(self.store, lineage.root_of(self.store, task.id)) as lease:
            run = self.store.get_run(run.id)
            if run.state != R.INTERRUPTED.value:
                raise Conflict(f"run {run.id} is {run.state} now; it was resumed meanwhile")
            self.refuse_in_flight(task, except_run=run.id)
            report = ResumeReport(run.id)
            if moving_to is not None and moving_to != task.host:
                for other in self.store.list_tasks():
                    if other.workspace_id == task.workspace_id:
                        self.store.update_task(other.id, host=moving_to)
            # 2. the checkpoint; policy, grants and approvals come from the current settings.
            ck = self.store.latest_checkpoint([run.id])
            ws = self.ctx.workspace_of(task)
            policy = Policy.from_dict(ws.policy)
            if ck is None:
                report.add(
                    "checkpoint",
                    "none",
                    "the run never reached its first checkpoint; it starts from its first step",
                )
            else:
                report.add(
                    "checkpoint",
                    ck.id,
                    f"policy version now {policy.version}, at the checkpoint {ck.policy_version}",
                )
            # 3. the workspace.
            ws = self._revalidate_workspace(task, ws, run, ck, choice, report)
            # 4–8. sandbox, tools, credentials, background processes, engine.
            start_step = self._start_step(run, ck)
            spec = run.spec
            if engine_for(run.engine).has_sessions and run.engine_session_id:
                spec = {
                    **spec,
                    "mode": MODE_CONTINUE,
                    "session_id": run.engine_session_id,
                    "prompt": INTERRUPTED_PROMPT,
                }
            # Only the state moves now: attempt, offsets, workspace and spec stay the last
            # launched attempt's until the next one has started (`_launch`), so an attempt that
            # fails before that changes nothing and the next resume reads the right folder.
            run = runs.move(self.store, run.id, R.PREPARING)
            attempt = replace(
                run,
                attempt=run.attempt + 1,
                output_offset=0,
                stderr_offset=0,
                workspace_id=ws.id,
                exit_code=None,
                spec=spec,
            )
            if run.engine == "shell":
                report.add("engine", f"shell continues at step {start_step}")
            try:
                run = self._launch(
                    attempt,
                    self.store.get_task(task.id),
                    ws,
                    lease,
                    start_step,
                    report,
                    ready,
                    recorded_contract=ToolContract.from_dict(ck.tool_contract) if ck else None,
                    accept_tool_change=accept_tool_change,
                )
            except BaseException as exc:
                self._park(run.id, f"resume failed: {_reason(exc)}")
                raise
            self.ctx.events.publish(
                ev.RUN_RESUMED, run.id, task_id=task.id, report=report.to_dict()
            )
            return run, report

    def _start_step(self, run: Run, ck: Checkpoint | None) -> int:
        steps = []
        if ck and ck.pending_step and ck.pending_step.isdigit():
            steps.append(int(ck.pending_step))
        reached = runs.run_files(self.ctx.data.runs_root, run).step
        if reached is not None:
            steps.append(reached)
        return max(steps) if steps else 0

    def _revalidate_workspace(
        self,
        task: Task,
        ws: Workspace,
        run: Run,
        ck: Checkpoint | None,
        choice: str | None,
        report: ResumeReport,
    ) -> Workspace:
        root = Path(ws.root)
        if not root.is_dir():
            snap_id = ck.snapshot_id if ck else None
            if snap_id is None:
                snaps = self.store.list_snapshots(ws.id)
                snap_id = snaps[-1].id if snaps else None
            if snap_id is None:
                raise CairnError(
                    f"the workspace folder {root} is gone and no snapshot of it exists"
                )
            tree = self.snapshots.restore_workspace(ws, snap_id)
            report.add(
                "workspace",
                "restored",
                f"the folder was missing; materialized snapshot "
                f"{snap_id} and verified its tree {tree[:12]}",
            )
            return self.store.get_workspace(ws.id)
        # Changes nobody recorded happened while no run was in flight: they are external.
        latest, changed = self.revisions.capture(task.id, trigger="external")
        external = self._external_since(ws, run, ck)
        if not external:
            report.add(
                "workspace",
                "unchanged since the checkpoint"
                if not changed
                else "present, changes are the run's own",
            )
            return ws
        files = sum(r.files_changed for r in external)
        if choice is None:
            raise NeedsChoice(
                f"the workspace of task {task.id} was edited outside Cairn since the last "
                f"checkpoint ({files} file(s), revision {external[-1].id[:12]}); nothing was "
                f"overwritten. Resume with --on-top to keep working on top of those edits, or "
                f"--restore-into-new to restore the checkpoint into a new workspace"
            )
        if choice == ON_TOP:
            report.add(
                "workspace",
                "continuing on top of outside edits",
                f"{files} file(s) edited outside Cairn, recorded as revision "
                f"{external[-1].id[:12]}",
            )
            return ws
        assert ck is not None
        new_ws = self.snapshots.restore_into_new_workspace(task, ws, ck.snapshot_id)
        report.add(
            "workspace",
            f"restored into new workspace {new_ws.id}",
            f"the edited workspace {ws.id} is kept, frozen, at {ws.root}",
        )
        return new_ws

    def _external_since(self, ws: Workspace, run: Run, ck: Checkpoint | None) -> list[Revision]:
        revs = self.store.list_revisions(ws.id)
        if ck is not None:
            _, sha = parse_workspace_ref(ck.workspace_ref)
            seqs = [r.seq for r in revs if r.id == sha]
            start = seqs[0] if seqs else 0
        else:
            start = 0
        return [
            r
            for r in revs
            if r.seq > start
            and r.run_id != run.id
            and r.trigger not in ("base", "checkpoint", "restore")
        ]


def _reason(exc: BaseException) -> str:
    """A failure in one line for the run's note: a CairnError as it reads, anything else as the
    bug it is."""
    if isinstance(exc, CairnError):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by the user"
    text = str(exc).strip().splitlines()
    return f"internal error: {type(exc).__name__}" + (f": {text[0][:200]}" if text else "")


def _model_endpoints(ready: Ready) -> list[egress.Endpoint]:
    """The model endpoint the proxy serves in the sandbox, signed with the engine's credential."""
    if ready.credential is None or ready.base_url is None:
        return []
    kind = ready.credential.kind
    return [
        egress.Endpoint(
            ready.engine,  # its errors name the engine to sign in again
            ready.base_url,
            secret=ready.credential.secret,
            header=kind.header,
            template=kind.template,
        )
    ]
