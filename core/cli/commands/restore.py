"""Restore: putting a task's files back, in place, as they were at a revision, or undoing one
revision's change.

Owns the command's arguments and output; restoring is the facade's (`cairn.restores`).
"""

from __future__ import annotations

import argparse
from typing import Any

from core.app import Cairn
from core.cli.command import Command
from core.cli.output import EXIT_FAILED, emit
from core.errors import InputError
from core.restore import RestoreResult
from core.views import revision_json


class RestoreCommand(Command):
    name = "restore"
    help = (
        "put files (or the whole workspace) back as they were at a revision, in place; "
        "--undo takes one revision's change back"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument(
            "revision",
            help="a revision id (or prefix), base, latest, or TASK:REV of the same source folder",
        )
        p.add_argument(
            "paths",
            nargs="*",
            metavar="PATH",
            help="files or folders, relative to the workspace or absolute inside it "
            "(default: all of it)",
        )
        p.add_argument(
            "--undo",
            action="store_true",
            help="undo REVISION's change on top of the current files (three-way per file; a "
            "file edited since where the revision changed it is reported and left as it is)",
        )
        p.add_argument(
            "--conflict-markers",
            action="store_true",
            help="with --undo: write such a text file anyway, with git's conflict markers "
            "around the lines edited since, to resolve by hand",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        if args.conflict_markers and not args.undo:
            raise InputError("--conflict-markers goes with --undo")
        if args.undo:
            result = app.restores.undo(
                args.task,
                args.revision,
                args.paths or None,
                conflict_markers=args.conflict_markers,
            )
        else:
            result = app.restores.restore(args.task, args.revision, args.paths or None)
        emit(args, _json(result), lambda: _text(result))
        if result.conflicts:
            raise SystemExit(EXIT_FAILED)


def _json(result: RestoreResult) -> dict[str, Any]:
    return {
        "task_id": result.task_id,
        "workspace_id": result.workspace_id,
        "kind": result.kind,
        "source": result.source.id,
        "before": revision_json(result.before),
        "captured_before": result.captured_before,
        "revision": revision_json(result.revision) if result.revision else None,
        "paths": [
            {"path": o.path, "action": o.action, "reason": o.reason or None}
            for o in result.outcomes
        ],
        "conflicts": [o.path for o in result.conflicts],
    }


def _text(result: RestoreResult) -> str:
    short = result.source.id[:12]
    lines = []
    if result.captured_before:
        lines.append(f"recorded the current files first as revision {result.before.id[:12]}")
    for o in result.outcomes:
        reason = f": {o.reason}" if o.reason else ""
        note = " (left as it is)" if o.action == "conflict" else ""
        lines.append(f"{o.action:9} {o.path}{reason}{note}")
    if result.revision is None:
        lines.append(
            "nothing written: the files already match"
            if not result.conflicts
            else "nothing written"
        )
    else:
        what = f"undid {short}" if result.kind == "undo" else f"restored to {short}"
        lines.append(
            f"revision {result.revision.id[:12]} ({what}); to take it back: cairnctl restore "
            f"{result.task_id} {result.before.id[:12]}"
            + ("" if result.kind == "workspace" else " " + " ".join(_paths(result)))
        )
    if result.kind == "undo" and any("edited since" in (o.reason or "") for o in result.conflicts):
        lines.append(
            "to write the conflicting text files anyway, with conflict markers to resolve by "
            f"hand: cairnctl restore {result.task_id} {short} --undo --conflict-markers"
        )
    return "\n".join(lines)


def _paths(result: RestoreResult) -> list[str]:
    return [_quoted(o.path) for o in result.changed]


def _quoted(path: str) -> str:
    safe = all(c.isalnum() or c in "._-/+@,:=" for c in path)
    return path if safe and path else "'" + path.replace("'", "'\\''") + "'"


COMMANDS: tuple[Command, ...] = (RestoreCommand(),)
