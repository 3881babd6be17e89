"""Usage: `cairnctl cost [TASK]`, what runs used of their model (tokens, cost) per run, per task
and over a lineage, or every task's without a TASK.

Owns this command's arguments and output; the figures are core.views'.
"""

from __future__ import annotations

import argparse
from typing import Any

from core.app import Cairn
from core.cli.command import Command
from core.cli.output import emit, when
from core.usage import summary_text


def usage_lines(figures: dict[str, Any]) -> list[str]:
    """The lines `cost TASK` and `show` print for one task."""
    lines = [f"{'run':<14}{'state':<18}{'started':<21}used"]
    for run in figures["runs"]:
        lines.append(
            f"{run['run_id'][:12]:<14}{run['state']:<18}{when(run['created_at']):<21}"
            f"{summary_text(run)}"
        )
    if not figures["runs"]:
        lines.append("(no runs)")
    lines.append(f"task       {summary_text(figures['task'])}")
    others = [t for t in figures["lineage_tasks"] if t["task_id"] != figures["task_id"]]
    if others:
        lineage = figures["lineage"]
        lines.append(
            f"lineage    {summary_text(lineage)}  over {len(figures['lineage_tasks'])} tasks, "
            f"{lineage['runs']} runs"
        )
    return lines


class CostCommand(Command):
    name = "cost"
    help = (
        "what runs used of their model: tokens and cost per run, for the task and summed over "
        "its lineage; without TASK, every task's"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task", nargs="?")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        if args.task:
            figures = app.views.usage(args.task)
            emit(args, figures, lambda: "\n".join(usage_lines(figures)))
            return
        everything = app.views.usage_all()

        def text() -> str:
            if not everything["total"]["runs"]:
                return "no runs yet"
            lines = [f"{'task':<14}{'title':<32}used"]
            for row in everything["tasks"]:
                if row["runs"]:
                    lines.append(
                        f"{row['task_id'][:12]:<14}{row['title'][:30]:<32}{summary_text(row)}"
                    )
            lines.append(f"{'total':<46}{summary_text(everything['total'])}")
            return "\n".join(lines)

        emit(args, everything, text)


COMMANDS: tuple[Command, ...] = (CostCommand(),)
