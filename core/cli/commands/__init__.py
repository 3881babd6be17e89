"""The registry of cairnctl's commands, in the order `cairnctl --help` lists them: each area's
module declares its commands in COMMANDS (see core.cli.command.Command), and this lists the
areas.

A new command in an area is a class in that area's module and an entry in its COMMANDS; a new
area is a module here and one line below.
"""

from __future__ import annotations

from core.cli.command import Command
from core.cli.commands import (
    approvals,
    artifacts,
    credentials,
    engine,
    hosts,
    housekeeping,
    policy,
    restore,
    revisions,
    runs,
    settings,
    snapshots,
    tasks,
    usage,
)

COMMANDS: tuple[Command, ...] = (
    *tasks.COMMANDS,
    *revisions.COMMANDS,
    *snapshots.COMMANDS,
    *restore.COMMANDS,
    *runs.COMMANDS,
    *usage.COMMANDS,
    *credentials.COMMANDS,
    *engine.COMMANDS,
    *hosts.COMMANDS,
    *policy.COMMANDS,
    *artifacts.COMMANDS,
    *settings.COMMANDS,
    *approvals.COMMANDS,
    *housekeeping.COMMANDS,
)


def by_name() -> dict[str, Command]:
    """Each command under its name."""
    return {command.name: command for command in COMMANDS}
