"""Runs and the sandboxes they run in: starting and following a run, checkpoints, stopping,
resuming, reconciling, and the status of every sandbox session and snapshot.

Owns these commands' arguments and output, and following a run a command started (also for
`new`, `continue` and `fork`); the runs themselves are the facade's.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import threading
from typing import Any

from core.app import Cairn
from core.cli.command import Command
from core.cli.output import EXIT_FAILED, emit, progress, size, stream
from core.errors import CairnError
from core.humanize import duration
from core.models import Run, RunState
from core.runs.ladder import ON_TOP, RESTORE_INTO_NEW
from core.usage import summary_text

log = logging.getLogger(__name__)

# A run a command started that is in one of these states is no failure of the command; any
# other (failed, cancelled, interrupted, and waiting_approval after --detach) exits 1.
_NOT_FAILED = frozenset(
    s.value for s in (RunState.SUCCEEDED, RunState.RUNNING, RunState.PREPARING, RunState.QUEUED)
)
_IN_FLIGHT = frozenset(s.value for s in RunState if s.in_flight)


def run_json(run: Run) -> dict[str, Any]:
    """What the commands that start or follow a run say about it."""
    return {
        "run_id": run.id,
        "task_id": run.task_id,
        "state": run.state,
        "exit_code": run.exit_code,
        "attempt": run.attempt,
        "note": run.note,
        "resume_report": run.resume_report,
    }


def follow(app: Cairn, args: argparse.Namespace, run_id: str) -> dict[str, Any]:
    """Observe until the run ends; Ctrl-C stops observing, never the run."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run = app.runs.follow(
        run_id, on_output=None if args.json else stream, should_stop=stop.is_set, record=True
    )
    return run_json(run)


def finish_run_command(app: Cairn, args: argparse.Namespace, run: Run, obj: dict[str, Any]) -> None:
    """Follow a run a command started (unless --detach) and report it with `obj`."""
    result = run_json(run) if args.detach else follow(app, args, run.id)
    used = None if args.detach else _usage_of(app, run)
    emit(
        args,
        {**obj, **result, **({"usage": used} if used is not None else {})},
        lambda: (
            f"run {result['run_id']} {result['state']}"
            + (f" (exit code {result['exit_code']})" if result["exit_code"] is not None else "")
            + (
                f": {result['note']}"
                if result["note"] and result["state"] != RunState.SUCCEEDED.value
                else ""
            )
            + (f"\nused {summary_text(used)}" if used and used["total_tokens"] else "")
        ),
    )
    if result["state"] not in _NOT_FAILED:
        raise SystemExit(EXIT_FAILED)


def _usage_of(app: Cairn, run: Run) -> dict[str, Any] | None:
    """What the ended run used of its model (recorded now); None when it cannot be read, which
    never fails the command."""
    try:
        figures = app.views.usage(run.task_id)
    except CairnError:
        return None
    return next((r for r in figures["runs"] if r["run_id"] == run.id), None)


class RunCommand(Command):
    name = "run"
    help = "run commands in the task's sandbox (the shell engine): run TASK -- CMD..."

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("--detach", action="store_true", help="start the run and return")
        p.add_argument(
            "--step",
            action="append",
            default=[],
            help="one command of a multi-step run (repeatable) instead of -- CMD",
        )
        # core.cli.main adds everything after `--` to this list.
        p.add_argument("argv", nargs="*", metavar="CMD", help="the command, after --")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        command = list(args.argv)
        steps = list(args.step)
        if command:
            steps.append(
                " ".join(shlex.quote(c) for c in command) if len(command) > 1 else command[0]
            )
        if not steps:
            raise CairnError("give the command after --, e.g. cairnctl run TASK -- make test")
        run = app.runs.start(args.task, commands=steps)
        finish_run_command(app, args, run, {})


class CheckpointCommand(Command):
    name = "checkpoint"
    help = "write a checkpoint of the task's run now"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        ck = app.runs.checkpoint(args.task)
        emit(
            args,
            {
                "checkpoint_id": ck.id,
                "run_id": ck.run_id,
                "snapshot_id": ck.snapshot_id,
                "workspace_ref": ck.workspace_ref,
                "tree": ck.tree,
                "run_state_version": ck.run_state_version,
                "pending_step": ck.pending_step,
            },
            f"checkpoint {ck.id} of run {ck.run_id} (snapshot {ck.snapshot_id})",
        )


class FollowCommand(Command):
    name = "follow"
    help = "observe the task's run in flight until it ends"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        task = app.tasks.get(args.task)
        run = app.runs.latest(task)
        if run is None:
            raise CairnError(f"task {task.id} has no run")
        if run.state in _IN_FLIGHT:
            try:
                app.runs.settle(run)
            except CairnError as exc:
                # Its state cannot be told now (a host that does not answer): following asks
                # again until it can, and only evidence ends the run.
                log.info("following run %s, whose state is unknown for now: %s", run.id, exc)
        result = follow(app, args, run.id)
        emit(args, result, lambda: f"run {result['run_id']} {result['state']}")


class StatusCommand(Command):
    name = "status"
    help = "every sandbox session and snapshot: state, image, age, size"

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        st = app.views.status()

        def text() -> str:
            lines = []
            if st["problem"]:
                lines.append(f"sandboxes: {st['problem']}")
            for s in st["sessions"]:
                unsafe = "  UNSAFE: no isolation" if s.get("unsafe") else ""
                lines.append(
                    f"session {s['session_id']}  {s['state']:8}  {s['container']}  "
                    f"image {(s['image'] or '?')[:19]}  gen {s['generation']}  "
                    f"snapshot {s['snapshot_id']}  {size(s.get('size'))}  "
                    f"{duration(s['age_s'])} old{unsafe}"
                )
            for s in st["snapshots"]:
                lines.append(
                    f"snapshot {s['snapshot_id']}  {s['revision'][:12]}  {size(s['size'])}  "
                    f"{duration(s['age_s'])} old  "
                    + ("restorable" if s["restorable"] else "NOT restorable")
                    + (f"  {s['name']}" if s.get("name") else "")
                )
            return "\n".join(lines) or "no sessions or snapshots"

        emit(args, st, text)


class StopCommand(Command):
    name = "stop"
    help = "cancel the task's run in flight and stop its sandbox"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        result = app.runs.stop(args.task)
        emit(
            args,
            result,
            lambda: (
                (f"run {result['run']} cancelled; " if result["run"] else "")
                + (
                    f"sandbox {result['sandbox']} stopped"
                    if result["sandbox"]
                    else "no sandbox running"
                )
            ),
        )


class ResumeCommand(Command):
    name = "resume"
    help = "resume the task's interrupted run (the resume ladder)"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        g = p.add_mutually_exclusive_group()
        g.add_argument(
            "--on-top",
            action="store_true",
            help="keep edits made outside Cairn and continue on top of them",
        )
        g.add_argument(
            "--restore-into-new",
            action="store_true",
            help="restore the last checkpoint into a new workspace (the edited one is kept)",
        )
        p.add_argument("--accept-tool-change", action="store_true")
        p.add_argument("--detach", action="store_true", help="resume and return")
        p.add_argument(
            "--host",
            help="move the sandbox to this sandbox host (its next generation is made there, "
            "with the same snapshot)",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        choice = ON_TOP if args.on_top else RESTORE_INTO_NEW if args.restore_into_new else None
        run, report = app.runs.resume(
            args.task, choice=choice, accept_tool_change=args.accept_tool_change, host=args.host
        )
        if not args.json:
            progress("resumed: " + report.summary())
            for note in report.notes:
                progress(f"  {note}")
        if args.detach:
            emit(args, {**run_json(run), "report": report.to_dict()}, f"run {run.id} running")
            return
        result = follow(app, args, run.id)
        emit(
            args,
            {**result, "report": report.to_dict()},
            lambda: f"run {result['run_id']} {result['state']}",
        )


class ReconcileCommand(Command):
    name = "reconcile"
    help = "match containers and runs with the store; list orphans (deletes nothing)"

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        report = app.runs.reconcile().to_dict()
        emit(
            args,
            report,
            lambda: "\n".join(f"{k}: {', '.join(v) if v else '-'}" for k, v in report.items()),
        )


COMMANDS: tuple[Command, ...] = (
    RunCommand(),
    CheckpointCommand(),
    FollowCommand(),
    StatusCommand(),
    StopCommand(),
    ResumeCommand(),
    ReconcileCommand(),
)
