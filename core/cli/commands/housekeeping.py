"""Housekeeping: archiving and unarchiving a task's workspace, and the data folder's disk use
and cleanup.

Owns these commands' arguments and output; the plan and the cleanup are the facade's.
"""

from __future__ import annotations

import argparse

from core.app import Cairn
from core.cli.command import Command
from core.cli.output import emit, size
from core.errors import CairnError
from core.housekeeping import KIND_CONTAINER, KIND_REMOTE


class ArchiveCommand(Command):
    name = "archive"
    help = (
        "archive a task's workspace: snapshot it; its files go at the next "
        "housekeeping (history stays); refused while anything of it runs"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument(
            "--yes",
            action="store_true",
            help="archive a workspace other tasks share too (it is archived for all of them)",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        ws = app.housekeeping.archive(args.task, shared_ok=args.yes)
        emit(
            args,
            {"workspace_id": ws.id, "state": ws.state},
            f"workspace {ws.id} archived (its files go at the next `cairnctl housekeeping --yes`)",
        )


class UnarchiveCommand(Command):
    name = "unarchive"
    help = (
        "bring an archived workspace back (its files restored from its newest "
        "snapshot when they were removed)"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        ws = app.housekeeping.unarchive(args.task)
        emit(
            args,
            {"workspace_id": ws.id, "state": ws.state, "root": ws.root},
            f"workspace {ws.id} is {ws.state} again at {ws.root}",
        )


class HousekeepingCommand(Command):
    name = "housekeeping"
    help = (
        "show the data folder's disk use, each task's share and what a cleanup would free "
        "(files of archived workspaces, their stopped sandbox containers, unreachable objects); "
        "--yes cleans"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--dry-run",
            action="store_true",
            help="only show the plan (the default without --yes)",
        )
        p.add_argument("--yes", action="store_true", help="carry out the cleanup")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        if args.yes and args.dry_run:
            raise CairnError("give --dry-run or --yes, not both")
        plan = app.housekeeping.plan()
        result = app.housekeeping.clean(plan) if args.yes else None

        def text() -> str:
            u = plan.usage
            lines = [f"data folder {u.root}: {size(u.total)}"]
            lines += [f"  {name:11} {size(n):>10}" for name, n in u.parts.items()]
            if u.shares:
                lines.append("by task (a workspace's files, run logs and engine home):")
                lines += [
                    f"  {size(s.bytes):>10}  {', '.join(s.titles) or '(no task)'}  "
                    f"[{s.workspace_id}, {s.state}]"
                    for s in u.shares
                ]
            if plan.empty:
                lines.append("nothing to clean up")
            for item in plan.items:
                frees = (
                    "(Docker)"
                    if item.kind == KIND_CONTAINER
                    else f"({item.host})"
                    if item.kind == KIND_REMOTE
                    else size(item.bytes)
                )
                lines.append(f"{frees:>10}  {item.description}")
            lines += [f"note: {n}" for n in plan.notes]
            if result is None:
                if not plan.empty:
                    lines.append(
                        f"will free {size(plan.total)} "
                        "(dry run; `cairnctl housekeeping --yes` cleans)"
                    )
            else:
                lines += [f"skipped: {s.item.description}: {s.reason}" for s in result.skipped]
                lines += [f"note: {n}" for n in result.notes]
                lines.append(f"freed {size(result.freed)}")
            return "\n".join(lines)

        emit(
            args,
            {
                "plan": plan.to_json(),
                "dry_run": result is None,
                "result": result.to_json() if result is not None else None,
            },
            text,
        )


COMMANDS: tuple[Command, ...] = (ArchiveCommand(), UnarchiveCommand(), HousekeepingCommand())
