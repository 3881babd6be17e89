"""Tasks: importing a folder as a new task, continuing and forking one, listing and showing them.

Owns these commands' arguments and output; the tasks themselves are the facade's.
"""

from __future__ import annotations

import argparse
from typing import Any

from core.app import Cairn
from core.cli import arguments
from core.cli.command import Command
from core.cli.commands.runs import finish_run_command
from core.cli.commands.usage import usage_lines
from core.cli.output import emit, progress
from core.errors import Conflict, InputError
from core.policy import NETWORK_MODES, Policy


class NewCommand(Command):
    name = "new"
    help = "import a folder and start a task on a new workspace"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("path")
        p.add_argument("--title")
        p.add_argument(
            "--engine", help="the task's engine (default: the setting defaults.engine, else shell)"
        )
        p.add_argument(
            "-m",
            "--message",
            default="",
            help="the task's instructions; given, the first run starts at once",
        )
        p.add_argument(
            "--instructions",
            help="the task's instructions, run when it is started (`cairnctl run`); unlike -m, "
            "no run starts now",
        )
        p.add_argument("--quota", type=arguments.size, help="disk quota of the workspace, e.g. 2G")
        p.add_argument(
            "--expires-in", type=arguments.duration, help="expiry of the workspace, e.g. 30d or 12h"
        )
        p.add_argument("--detach", action="store_true", help="start the first run and return")
        p.add_argument(
            "--network",
            choices=NETWORK_MODES,
            help="the sandbox's network policy from the start (default: the setting "
            "defaults.network, else none)",
        )
        p.add_argument(
            "--allow", action="append", default=[], help="host:port reachable under allowlist"
        )
        p.add_argument(
            "--host",
            help="the sandbox host its sandbox runs on (default: the setting defaults.host, "
            "else local; see `cairnctl host list`)",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        if args.message and not args.message.strip():
            # -m is what the first run runs: a blank one would start a run that does nothing.
            raise InputError(
                "the message is blank; give the task's instructions, or leave -m out to make "
                "a task to run later (`cairnctl run`)"
            )
        if args.instructions is not None and args.message:
            raise InputError(
                "give the instructions with -m (and start) or --instructions, not both"
            )
        # Without --network or --allow the settings' defaults apply (defaults.network, .allow);
        # --allow alone keeps a new policy's own network mode.
        policy = (
            Policy(network=args.network or Policy().network, allow=tuple(args.allow))
            if args.network or args.allow
            else None
        )
        made = app.tasks.new(
            args.path,
            title=args.title,
            engine=args.engine,
            instructions=args.message or args.instructions or "",
            quota_bytes=args.quota,
            expires_in=args.expires_in,
            policy=policy,
            host=args.host,
        )
        obj = {
            "task_id": made.task.id,
            "workspace_id": made.workspace.id,
            "workspace_root": made.workspace.root,
            "base_revision": made.base_revision,
            "note": made.note,
        }
        text = (
            f"task {made.task.id} ({made.task.title})\n"
            f"workspace {made.workspace.id} at {made.workspace.root}\n"
            f"base revision {made.base_revision}"
        ) + (f"\nnote: {made.note}" if made.note else "")
        if not args.message:
            emit(args, obj, text)
            return
        if not args.json:
            progress(text)
        run = app.runs.start(made.task.id, prompt=args.message)
        finish_run_command(app, args, run, obj)


class ContinueCommand(Command):
    name = "continue"
    help = "a child task that keeps working in the parent's workspace and session"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("-m", "--message", required=True)
        p.add_argument("--title")
        p.add_argument("--detach", action="store_true")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        child, run = app.tasks.continue_from(args.task, args.message, title=args.title)
        finish_run_command(
            app,
            args,
            run,
            {
                "task_id": child.id,
                "parent_task_id": child.parent_task_id,
                "workspace_id": child.workspace_id,
            },
        )


class ForkCommand(Command):
    name = "fork"
    help = "a child task with its own workspace from a revision of the parent"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument(
            "--at", dest="at_revision", help="the revision to fork from (default: latest)"
        )
        p.add_argument("-m", "--message", required=True)
        p.add_argument("--title")
        p.add_argument("--detach", action="store_true")
        p.add_argument(
            "--host",
            help="the sandbox host its sandbox runs on (default: the setting defaults.host, "
            "else local; see `cairnctl host list`)",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        child, run = app.tasks.fork(
            args.task, args.message, at_revision=args.at_revision, title=args.title, host=args.host
        )
        assert run is not None  # a fork always starts the child's first run
        ws = app.tasks.workspace_of(child)
        finish_run_command(
            app,
            args,
            run,
            {
                "task_id": child.id,
                "parent_task_id": child.parent_task_id,
                "workspace_id": ws.id,
                "workspace_root": ws.root,
                "from_revision": child.from_revision,
            },
        )


class RenameCommand(Command):
    name = "rename"
    help = "give a task a new title"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("title")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        task = app.tasks.rename(args.task, args.title)
        emit(
            args, {"task_id": task.id, "title": task.title}, f"task {task.id} is now “{task.title}”"
        )


class EditCommand(Command):
    name = "edit"
    help = "replace a task's instructions (only before its first run)"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument(
            "-m",
            "--message",
            required=True,
            help="the new instructions (shell: one command per line)",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        task = app.tasks.edit_instructions(args.task, args.message)
        emit(
            args,
            {"task_id": task.id, "instructions": task.instructions},
            f"task {task.id} has new instructions",
        )


class DeleteCommand(Command):
    name = "delete"
    help = (
        "delete a task with its runs, and its workspace when no other task shares it; "
        "says what goes and asks for --yes"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("--yes", action="store_true", help="delete without asking again")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        plan = app.housekeeping.deletion(args.task)
        if plan.refusal:
            raise Conflict(f"task {plan.task_id} cannot be deleted: {plan.refusal}")
        if not args.yes:
            listed = "\n".join(f"  {line}" for line in plan.what_goes())
            raise Conflict(
                f"deleting task {plan.task_id} removes:\n{listed}\nnothing was deleted",
                hint=f"cairnctl delete {plan.task_id} --yes",
            )
        done = app.housekeeping.delete(args.task)
        lines = [f"deleted: {line}" for line in done.what_goes()]
        lines += [f"note: {n}" for n in done.notes]
        emit(args, {"deleted": done.to_json()}, "\n".join(lines))


class TasksCommand(Command):
    name = "tasks"
    help = "list tasks as lineage trees"

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        rows: list[dict[str, Any]] = []
        states: dict[str, str] = {}
        for t in app.tasks.all():
            ws = app.tasks.workspace_of(t) if t.workspace_id else None
            run = app.runs.latest(t)
            states[t.id] = run.state if run else (ws.state if ws else "-")
            rows.append(
                {
                    "task_id": t.id,
                    "title": t.title,
                    "engine": t.engine,
                    "source": t.source,
                    "parent_task_id": t.parent_task_id,
                    "from_revision": t.from_revision,
                    "workspace_id": t.workspace_id,
                    "state": ws.state if ws else None,
                    "run_state": run.state if run else None,
                    "created_at": t.created_at,
                }
            )
        emit(args, {"tasks": rows}, lambda: lineage_trees(rows, states))


def lineage_trees(rows: list[dict[str, Any]], states: dict[str, str]) -> str:
    """Each root task with its descendants below it, drawn as a tree."""
    children: dict[str | None, list[dict[str, Any]]] = {}
    for r in rows:
        children.setdefault(r["parent_task_id"], []).append(r)
    lines: list[str] = []

    def walk(row: dict[str, Any], prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└─ " if last else "├─ ")
        how = "" if top else f"[{row['source']}] "
        lines.append(
            f"{prefix}{branch}{row['task_id']}  {states[row['task_id']]:16}  "
            f"{how}{row['title']}  ({row['engine']})"
        )
        kids = children.get(row["task_id"], [])
        for i, kid in enumerate(kids):
            walk(
                kid,
                prefix + ("" if top else ("   " if last else "│  ")),
                i == len(kids) - 1,
                False,
            )

    for root in children.get(None, []):
        walk(root, "", True, True)
    return "\n".join(lines) or "no tasks"


class ShowCommand(Command):
    name = "show"
    help = "show a task, its workspace, revisions and snapshots"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        d = {**app.views.task_details(args.task), "usage": app.views.usage(args.task)}

        def text() -> str:
            lines = [
                f"task       {d['task_id']}  {d['title']}",
                f"engine     {d['engine']}",
                f"source     {d['source_path']}",
                f"workspace  {d['workspace_id']}  {d['state']}  {d['workspace_root']}"
                + ("" if d["workspace_present"] else "  (missing on disk)"),
                f"branch     {d['branch']}",
                f"revisions  {len(d['revisions'])}, latest {(d['current_revision'] or '-')[:12]}",
                f"snapshots  {len(d['snapshots'])}",
                "",
                *usage_lines(d["usage"]),
            ]
            return "\n".join(lines)

        emit(args, d, text)


COMMANDS: tuple[Command, ...] = (
    NewCommand(),
    ContinueCommand(),
    ForkCommand(),
    TasksCommand(),
    ShowCommand(),
    RenameCommand(),
    EditCommand(),
    DeleteCommand(),
)
