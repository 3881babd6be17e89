"""What the task view reads through the facade, composed into plain values (no Qt).

Owns one task's details with its latest run, a run in flight elsewhere in its lineage (which
holds the lineage's actions back), and a run's recorded output; the functions here run inside
jobs, never on the GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.app import Cairn
from core.models import Run, Task
from gui.dialogs.data import host_choices


@dataclass
class TaskViewData:
    """What the task view shows for one task."""

    details: dict
    run: Run | None
    lineage_run: Run | None  # a run in flight elsewhere in the task's lineage
    output: str | None  # the run's output so far (None when the caller follows it live)
    hosts: tuple[str, ...] = ()  # the sandbox hosts a fork may choose from
    default_host: str | None = None


def lineage_members(tasks: list[Task], task_id: str) -> list[Task]:
    """Every task of the lineage `task_id` belongs to, its root first."""
    by_id = {t.id: t for t in tasks}
    root = by_id[task_id]
    seen = set()
    while root.parent_task_id and root.parent_task_id in by_id and root.id not in seen:
        seen.add(root.id)
        root = by_id[root.parent_task_id]
    children: dict[str | None, list[Task]] = {}
    for t in tasks:
        children.setdefault(t.parent_task_id, []).append(t)
    out, stack = [], [root]
    while stack:
        t = stack.pop()
        out.append(t)
        stack.extend(children.get(t.id, []))
    return out


def task_view(cairn: Cairn, task_id: str, *, with_output: bool = True) -> TaskViewData:
    task = cairn.tasks.get(task_id)
    details = cairn.views.task_details(task.id)
    run = cairn.runs.latest(task.id)
    lineage_run = None
    for member in lineage_members(cairn.tasks.all(), task.id):
        if member.id == task.id:
            continue
        other = cairn.runs.in_flight(member.id)
        if other is not None:
            lineage_run = other
            break
    output = run_output(cairn, run.id) if (with_output and run is not None) else None
    hosts, default_host = host_choices(cairn)
    return TaskViewData(details, run, lineage_run, output, hosts, default_host)


def run_output(cairn: Cairn, run_id: str) -> str:
    """Everything recorded of a run's output so far (stdout and stderr, in order), with marker
    lines for its streams, times and attempts (core.output_blocks; the output view reads them)."""
    return cairn.views.run_output(run_id)
