"""Snapshots: making a durable snapshot of a task's workspace, and restoring one into a folder.

Owns these commands' arguments and output; snapshots themselves are the facade's.
"""

from __future__ import annotations

import argparse

from core.app import Cairn
from core.cli.command import Command
from core.cli.output import emit
from core.views import snapshot_json


class SnapshotCommand(Command):
    name = "snapshot"
    help = "make a durable snapshot of a task's workspace"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        snap = app.snapshots.take(args.task)
        emit(
            args,
            {
                "snapshot_id": snap.id,
                "revision": snap.revision_id,
                **{
                    k: v
                    for k, v in snapshot_json(snap).items()
                    if k not in ("snapshot_id", "revision")
                },
            },
            f"snapshot {snap.id} of revision {snap.revision_id}",
        )


class MaterializeCommand(Command):
    name = "materialize"
    help = "restore a snapshot's files into a new folder"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("snapshot")
        p.add_argument("dir")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        root, tree = app.snapshots.materialize(args.snapshot, args.dir)
        emit(args, {"root": str(root), "tree": tree}, f"restored into {root} (tree {tree})")


COMMANDS: tuple[Command, ...] = (SnapshotCommand(), MaterializeCommand())
