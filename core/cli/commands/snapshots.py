"""Snapshots: making a durable snapshot of a task's workspace, naming one, and restoring one into a
folder.

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
        p.add_argument("--name", help="a name for the snapshot (see snapshot-name)")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        snap = app.snapshots.take(args.task, name=args.name)
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
            f"snapshot {snap.id}{_named(snap.name)} of revision {snap.revision_id}",
        )


def _named(name: str | None) -> str:
    return f" ({name})" if name else ""


class SnapshotNameCommand(Command):
    name = "snapshot-name"
    help = "name or rename a snapshot (by id, id prefix or its current name); no NAME removes it"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("snapshot")
        p.add_argument("name", nargs="?", default=None)

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        snap = app.snapshots.rename(args.snapshot, args.name)
        emit(
            args,
            snapshot_json(snap),
            f"snapshot {snap.id} is named {snap.name!r}"
            if snap.name
            else f"snapshot {snap.id} has no name",
        )


class MaterializeCommand(Command):
    name = "materialize"
    help = "restore a snapshot's files (by id, id prefix or name) into a new folder"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("snapshot")
        p.add_argument("dir")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        root, tree = app.snapshots.materialize(args.snapshot, args.dir)
        emit(args, {"root": str(root), "tree": tree}, f"restored into {root} (tree {tree})")


COMMANDS: tuple[Command, ...] = (SnapshotCommand(), SnapshotNameCommand(), MaterializeCommand())
