"""The sandbox policy of a task: showing it, and tightening or loosening it as a new version.

Owns this command's arguments and output; the policy and its versions are the facade's.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from core.app import Cairn
from core.cli import arguments
from core.cli.command import Command
from core.cli.output import emit
from core.policy import NETWORK_MODES


class PolicyCommand(Command):
    name = "policy"
    help = "show or tighten/loosen the task's sandbox policy (a new version)"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("--network", choices=NETWORK_MODES)
        p.add_argument("--allow", action="append", help="host:port reachable under allowlist")
        p.add_argument(
            "--secrets",
            help="comma-separated secret names the sandbox may receive ('*' for every granted one)",
        )
        p.add_argument("--pids", type=int)
        p.add_argument("--memory", type=arguments.size)

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        changes: dict[str, Any] = {}
        if args.network:
            changes["network"] = args.network
        if args.allow is not None:
            changes["allow"] = args.allow
        if args.secrets is not None:
            changes["secrets"] = (
                None
                if args.secrets.strip() == "*"
                else [n for n in args.secrets.split(",") if n.strip()]
            )
        limits = {k: v for k, v in (("pids", args.pids), ("memory_bytes", args.memory)) if v}
        if limits:
            changes["limits"] = limits
        if changes:
            policy = app.tasks.set_policy(args.task, **changes)
        else:
            policy = app.tasks.policy_of(app.tasks.workspace_of(app.tasks.get(args.task)))
        emit(args, policy.to_dict(), lambda: json.dumps(policy.to_dict(), indent=2))


COMMANDS: tuple[Command, ...] = (PolicyCommand(),)
