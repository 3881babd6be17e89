"""Approvals: the commands waiting for a person's decision, approving and denying them.

Owns these commands' arguments and output; the judge and its decisions are the facade's.
"""

from __future__ import annotations

import argparse
import time

from core.app import Cairn
from core.approvals import PENDING, Approval
from core.cli.command import Command
from core.cli.output import emit
from core.humanize import duration

_APPROVAL_ID_HELP = "the approval id (or an unambiguous prefix)"


def approval_text(a: Approval, now: float) -> str:
    """One request in two lines: who waits and why, then the command."""
    head = f"{a.id}  task {a.task_id}  {a.state}"
    if a.state == PENDING:
        head += f"  waiting {duration(a.waiting_s(now))}"
        if a.timeout_at:
            head += f" (denied in {duration(max(0.0, a.timeout_at - now))})"
    elif a.decided_by:
        head += f"  by {a.decided_by}"
        if a.decided_at:
            head += f" {duration(max(0.0, now - a.decided_at))} ago"
    why = f"  [{a.rule}] {a.reason}" if a.rule else ""
    lines = [f"{head}{why}", f"    $ {a.command}"]
    details = a.details
    if details.get("kind") == "exec":
        lines.append(f"    program {details.get('program')}  in {details.get('cwd')}")
        if details.get("same_as"):
            lines.append(f"    a copy of {', '.join(map(str, details['same_as']))}")
        if details.get("stdin_path"):
            lines.append(f"    reads {details['stdin_path']} as its input")
        for word, target in (details.get("links") or {}).items():
            lines.append(f"    {word} leads to {target}")
        parents = details.get("parents") or []
        if parents:
            lines.append(f"    started by {str(parents[0])[:200]}")
        script = details.get("script") or {}
        commands = script.get("commands") or []
        step = script.get("step")
        if isinstance(step, int) and 0 <= step < len(commands):
            lines.append(f"    from step {step + 1}: {str(commands[step])[:200]}")
    if details.get("covered_by"):
        lines.append(f"    approved with the tool call {details['covered_by']}")
    if details.get("note"):
        lines.append(f"    reason: {details['note']}")
    return "\n".join(lines)


class ApprovalsCommand(Command):
    name = "approvals"
    help = (
        "commands waiting for a person's approval: id, task, command, rule, "
        "time waiting (--all: every request and its decision)"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--all", action="store_true", help="decided requests too, newest last")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        pending = app.approvals.pending()
        found = app.approvals.list(pending_only=False) if args.all else pending
        now = time.time()
        emit(
            args,
            {"approvals": [a.to_json(now) for a in found]},
            lambda: (
                "\n".join(approval_text(a, now) for a in found)
                or ("no approvals" if args.all else "nothing waits for approval")
            ),
        )


class ApproveCommand(Command):
    name = "approve"
    help = "let a waiting command run"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("approval", help=_APPROVAL_ID_HELP)
        p.add_argument(
            "--remember",
            action="store_true",
            help="also let this run without asking for the rest of the task: the exact command "
            "(a tool call) or the rule (a program start)",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        a = app.approvals.approve(args.approval, remember=args.remember)
        emit(
            args,
            a.to_json(),
            f"approved {a.id}: {a.command}"
            + (
                f"  (rule {a.rule} remembered for this task)"
                if args.remember and a.details.get("kind") == "exec"
                else "  (remembered for this task)"
                if args.remember
                else ""
            ),
        )


class DenyCommand(Command):
    name = "deny"
    help = "refuse a waiting command (the run is told why)"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("approval", help=_APPROVAL_ID_HELP)
        p.add_argument("--reason", help="said to the run with the refusal")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        a = app.approvals.deny(args.approval, reason=args.reason)
        emit(args, a.to_json(), f"denied {a.id}: {a.command}")


COMMANDS: tuple[Command, ...] = (ApprovalsCommand(), ApproveCommand(), DenyCommand())
