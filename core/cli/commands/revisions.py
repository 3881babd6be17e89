"""Revisions: listing a task's revisions, capturing and watching its workspace, and diffs.

Owns these commands' arguments and output; recording and diffing are the facade's.
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from core import events
from core.app import Cairn
from core.cli.command import Command
from core.cli.output import emit, progress, when
from core.diffs import diff_to_json, render_unified
from core.events import Event
from core.history import matches
from core.models import RevisionTrigger
from core.views import described_json, marker_json

# What a revision captured by hand may say caused it (the others are Cairn's own).
_CAPTURE_TRIGGERS = tuple(
    t.value
    for t in (
        RevisionTrigger.MANUAL,
        RevisionTrigger.WATCH,
        RevisionTrigger.CHECKPOINT,
        RevisionTrigger.EXTERNAL,
    )
)


class RevisionsCommand(Command):
    name = "revisions"
    help = "list a task's revisions"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument(
            "--search",
            default="",
            metavar="TEXT",
            help="only revisions whose description, paths or run hold every word of TEXT",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        described = [d for d in app.views.history(args.task) if matches(d, args.search)]
        revs = [described_json(d) for d in described]
        markers = [marker_json(m) for m in app.views.markers(args.task)]
        emit(
            args,
            {"revisions": revs, "markers": markers},
            lambda: _history_text(revs, markers),
        )


def _history_text(revs: list[dict[str, Any]], markers: list[dict[str, Any]]) -> str:
    """One line per revision (what produced it and the paths it changed), the markers that
    belong to it under it."""
    by_rev: dict[str, list[dict[str, Any]]] = {}
    for m in markers:
        by_rev.setdefault(m["revision"], []).append(m)
    lines = []
    for r in revs:
        lines.append(
            f"{r['seq']:>4}  {r['id'][:12]}  {when(r['created_at'])}  {r['trigger']:10}  "
            f"{r['files_changed']} file(s)" + (f"  run {r['run_id']}" if r["run_id"] else "")
        )
        lines.append(f"      {r['description']}")
        for m in by_rev.get(r["id"], []):
            lines.append(f"      ◆ {m['label']}")
    return "\n".join(lines)


class CaptureCommand(Command):
    name = "capture"
    help = "record the workspace's files now (a full, verifying capture)"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument(
            "--trigger",
            default=RevisionTrigger.MANUAL.value,
            choices=_CAPTURE_TRIGGERS,
            help="what the revision says caused it (default: manual)",
        )
        p.add_argument("--run", default=None, metavar="RUN", help="the run whose edits these are")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        rev, changed = app.revisions.capture(args.task, trigger=args.trigger, run_id=args.run)
        emit(
            args,
            {
                "revision": rev.id,
                "changed": changed,
                "files_changed": rev.files_changed if changed else 0,
            },
            f"{rev.id}" + ("" if changed else "  (no change since the last revision)"),
        )


class WatchCommand(Command):
    name = "watch"
    help = "record every change of a task's workspace until interrupted"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        recorded: list[dict[str, Any]] = []
        stop = threading.Event()

        def on_event(event: Event) -> None:
            if event.kind != events.REVISION_RECORDED:
                return
            recorded.append(
                {
                    "id": event.payload["revision"],
                    "trigger": event.payload["trigger"],
                    "files_changed": event.payload["files_changed"],
                }
            )
            if not args.json:
                progress(
                    f"{event.payload['revision'][:12]}  {event.payload['trigger']}  "
                    f"{event.payload['files_changed']} file(s)"
                )

        app.events.subscribe(on_event)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        task = app.tasks.get(args.task)
        app.revisions.watch(task.id)
        if not args.json:
            progress(f"watching {app.tasks.workspace_of(task).root} (Ctrl-C to stop)")
        while not stop.wait(0.2):
            pass
        app.revisions.stop_watching(task.workspace_id or "")
        if args.json:
            emit(args, {"task_id": task.id, "revisions": recorded}, "")


class DiffCommand(Command):
    name = "diff"
    help = "diff two revisions (default: base to latest); REV may be TASK:REV"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("rev_a", nargs="?")
        p.add_argument("rev_b", nargs="?")
        p.add_argument("--max-bytes", type=int, default=2_000_000)

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        diff = app.revisions.diff(args.task, args.rev_a, args.rev_b, max_bytes=args.max_bytes)
        emit(args, diff_to_json(diff), lambda: render_unified(diff))


COMMANDS: tuple[Command, ...] = (
    RevisionsCommand(),
    CaptureCommand(),
    WatchCommand(),
    DiffCommand(),
)
